// The `dynrt` subcommands. Each registers its options on the CLI11 app and returns the
// process exit status when run. Exit codes mean one thing across commands: 0 success,
// 1 the command's own failure condition (lint findings, ...), 2 usage errors, 3 internal.
#pragma once

#include <CLI/CLI.hpp>

#include <cstddef>
#include <functional>

namespace dynrt::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFindings = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInternal = 3;

// A --config file is read whole up to this (it may hold keys, as a key file does).
inline constexpr std::size_t kMaxConfigBytes = std::size_t{1} << 20;

// Each adds its subcommands to `app`; `run` is set to the chosen command's body.
void add_lint_commands(CLI::App& app, std::function<int()>& run);      // lint, schema
void add_bench_commands(CLI::App& app, std::function<int()>& run);     // bench
void add_serve_command(CLI::App& app, std::function<int()>& run);      // serve
void add_explain_command(CLI::App& app, std::function<int()>& run);    // explain
void add_template_commands(CLI::App& app, std::function<int()>& run);  // template draft

}  // namespace dynrt::cli

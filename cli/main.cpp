// dynrt: the command-line entry point.
#include "cli/commands.hpp"

#include <exception>
#include <iostream>

int main(int argc, char** argv) {
  CLI::App app{
      "dynrt makes agentic LLM workflows faster without changing their results: it runs "
      "likely downstream stages while a branch resolves and reuses completed stage results.",
      "dynrt"};
  app.set_version_flag("--version", DYNRT_VERSION);
  app.require_subcommand(1);
  std::function<int()> run;
  dynrt::cli::add_lint_commands(app, run);
  dynrt::cli::add_bench_commands(app, run);
  dynrt::cli::add_serve_command(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? dynrt::cli::kExitOk : dynrt::cli::kExitUsage;
  }
  try {
    return run ? run() : dynrt::cli::kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "dynrt: internal error: " << e.what() << "\n";
    return dynrt::cli::kExitInternal;
  }
}

// dynrt: the command-line entry point.
#include "cli/commands.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

namespace {

// `dynrt serve` runs with glibc's per-thread malloc cache (tcache) off. A burst of workflow runs
// frees its memory on the actor threads, and each thread's tcache then keeps up to seven freed
// chunks of every small size, scattered over the pages the runs used: malloc_trim() cannot
// return a page such a chunk sits on, and resident memory stays several MB above where it
// started (bench/soak.sh measures it). The cache can only be switched off from the environment
// before the process starts, so serve starts itself again with the tunable added; it costs a
// few percent of allocation speed. DYNRT_MALLOC=system keeps glibc's defaults; nothing is done
// when GLIBC_TUNABLES already sets the cache, or under a sanitizer (which brings its own
// allocator).
void tune_malloc_for_serve(int argc, char** argv) {
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  constexpr const char* kTunable = "glibc.malloc.tcache_count=0";
  if (argc < 2 || std::strcmp(argv[1], "serve") != 0) return;
  if (const char* m = std::getenv("DYNRT_MALLOC"); m && std::strcmp(m, "system") == 0) return;
  const char* current = std::getenv("GLIBC_TUNABLES");
  if (current && std::strstr(current, "glibc.malloc.tcache_count")) return;  // set, or done
  const std::string tunables =
      current && *current ? std::string(current) + ":" + kTunable : std::string(kTunable);
  if (setenv("GLIBC_TUNABLES", tunables.c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);  // returns only on failure: then serve with the defaults
#else
  (void)argc;
  (void)argv;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  tune_malloc_for_serve(argc, argv);
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
  dynrt::cli::add_explain_command(app, run);
  dynrt::cli::add_template_commands(app, run);
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

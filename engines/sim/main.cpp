// dynrt-sim-engine: the simulated engine as an OpenAI-compatible server, so dynrt (and anything
// else that speaks the API) can be run against something that behaves like vLLM, on any
// machine. See engines/sim/server.hpp for the API and engines/sim/model.hpp for the model.
#include "cli/number_checks.hpp"
#include "engines/sim/engine.hpp"
#include "engines/sim/profiles.hpp"
#include "engines/sim/server.hpp"

#include <CLI/CLI.hpp>

#include <sys/resource.h>

#include <csignal>
#include <cstdio>
#include <iostream>

namespace {
volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) {
  g_stop = 1;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace dynrt::engines::sim;
  CLI::App app{
      "dynrt-sim-engine: the simulated engine served over the OpenAI-compatible API, "
      "with vLLM's /metrics",
      "dynrt-sim-engine"};
  SimServerOptions server;
  SimEngineOptions engine_options;
  std::string script_path;
  std::string profile_name = "default";
  int slots = 0;
  std::int64_t kv_tokens = 0;
  double interference_scale = 1.0;
  std::uint64_t seed = TextParams{}.seed;
  app.add_option("--port", server.port, "Port to listen on; 0 picks a free one and prints it")
      ->capture_default_str();
  app.add_option("--host", server.host, "Address to listen on")->capture_default_str();
  app.add_option("--time-scale", engine_options.time_scale,
                 "Real milliseconds per simulated second (1000: real time; 0: as fast as "
                 "possible)")
      ->check(dynrt::cli_checks::non_negative_finite())
      ->capture_default_str();
  app.add_option("--script", script_path, "Response script (JSON lines) of recorded answers");
  app.add_option("--profile", profile_name,
                 "Engine profile: workers, slots, KV pool and timings (" + sim_profile_names() +
                     "; docs/engine-profiles.md)")
      ->capture_default_str();
  app.add_option("--slots", slots, "Decode slots per worker (default: the profile's)")
      ->check(CLI::Range(1, 65536));
  app.add_option("--kv-tokens", kv_tokens, "KV pool per worker, in tokens (default: the profile's)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  app.add_option("--interference-scale", interference_scale,
                 "True interference as a multiple of the fit dynrt's price curves use (1: exact)")
      ->check(dynrt::cli_checks::finite_range(dynrt::engines::sim::kMinInterferenceScale,
                                              dynrt::engines::sim::kMaxInterferenceScale))
      ->capture_default_str();
  app.add_option("--model", server.model, "Model name /v1/models lists")->capture_default_str();
  app.add_option("--threads", server.threads, "I/O threads")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--seed", seed, "Seed of the pseudo-text of unscripted requests")
      ->check(dynrt::cli_checks::unsigned_integer())
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  auto profile = sim_profile(profile_name);
  if (!profile) {
    std::cerr << "dynrt-sim-engine: " << profile.error().message << "\n";
    return 2;
  }
  SimParams params = profile->params;
  if (slots > 0) params.slots = slots;
  if (kv_tokens > 0) params.kv_tokens = kv_tokens;
  params.interference_scale = interference_scale;
  params.text.seed = seed;
  engine_options.workers = profile->workers;
  Script script;
  if (!script_path.empty()) {
    auto loaded = Script::load(script_path);
    if (!loaded) {
      std::cerr << "dynrt-sim-engine: " << loaded.error().message << "\n";
      return 2;
    }
    script = std::move(*loaded);
  }
  // A socket per stream: lift the soft descriptor limit (often 1,024) to the hard one, so a
  // thousand concurrent streams fit.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  SimEngine engine(params, std::move(script), engine_options);
  auto srv = SimServer::create(engine, server);
  if (!srv) {
    std::cerr << "dynrt-sim-engine: " << srv.error().message << "\n";
    return 1;
  }
  std::printf("dynrt-sim-engine listening on http://%s:%u\n", server.host.c_str(),
              static_cast<unsigned>((*srv)->port()));
  std::fflush(stdout);
  sigset_t none;
  sigemptyset(&none);
  while (!g_stop)
    sigsuspend(&none);  // sleep until a signal
  (*srv)->stop();
  return 0;
}

#include "bench/admission_replay.hpp"
#include "bench/openloop.hpp"
#include "bench/sweep.hpp"
#include "cli/commands.hpp"
#include "cli/number_checks.hpp"
#include "engines/sim/profiles.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace dynrt::cli {

namespace {

struct OpenLoopCli {
  bench::BenchOptions options;
  std::string out_dir = "bench-results";
  bool no_plots = false;
  bool no_sweeps = false;
  bool quiet = false;
  std::string plot_script = DYNRT_PLOT_SCRIPT;
};

std::string quote(const std::string& s) {
  std::string out = "'";
  for (const char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

// " a b c": the arm names, each after a space, for help text and errors.
std::string arm_list(const std::vector<std::string>& arms) {
  std::string out;
  for (const auto& a : arms)
    out += ' ' + a;
  return out;
}

// The first value given twice. Each arm and each rate is a column or a row of every table and a
// series or a point of every plot: a repeat would run twice and be averaged under one name.
template <class T>
std::optional<T> repeated(const std::vector<T>& values) {
  for (auto it = values.begin(); it != values.end(); ++it)
    if (std::find(values.begin(), it, *it) != it) return *it;
  return std::nullopt;
}

// Draws OUT/plots/*.png from OUT/results.json with bench/plot.py, when it can.
void plot(const std::string& script, const std::filesystem::path& dir, const char* who) {
  namespace fs = std::filesystem;
  if (!fs::exists(script)) {
    std::cerr << who << ": no plots: " << script << " not found (--plot-script)\n";
    return;
  }
  const std::string python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  const std::string cmd = python + " " + quote(script) + " " +
                          quote((dir / "results.json").string()) + " " +
                          quote((dir / "plots").string()) + " 1>&2";
  if (std::system(cmd.c_str()) != 0)
    std::cerr << who << ": plotting failed; the tables and JSON are written\n";
}

int run_open_loop(const std::string& which, OpenLoopCli& cli) {
  namespace fs = std::filesystem;
  auto& o = cli.options;
  o.workloads = which == "all" ? bench::bench_workloads() : std::vector<std::string>{which};
  o.sweeps = which == "all" && !cli.no_sweeps;
  o.out_dir = cli.out_dir;
  o.progress = cli.quiet ? nullptr : &std::cerr;
  o.progress_style = isatty(STDERR_FILENO) ? bench::BenchOptions::ProgressStyle::bar
                                           : bench::BenchOptions::ProgressStyle::lines;
  for (const auto& a : o.arms)
    if (std::find(bench::bench_arms().begin(), bench::bench_arms().end(), a) ==
        bench::bench_arms().end()) {
      std::cerr << "dynrt bench: unknown arm \"" << a << "\"; arms are"
                << arm_list(bench::bench_arms()) << "\n";
      return kExitUsage;
    }
  if (const auto twice = repeated(o.arms)) {
    std::cerr << "dynrt bench: arm " << *twice << " is given twice in --arms\n";
    return kExitUsage;
  }
  if (const auto twice = repeated(o.rates)) {
    std::cerr << "dynrt bench: rate " << *twice << " is given twice in --rate\n";
    return kExitUsage;
  }
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) {
    std::cerr << "dynrt bench: cannot create " << o.out_dir << ": " << ec.message() << "\n";
    return kExitUsage;
  }
  const bench::BenchResult result = bench::run_bench(o);
  if (!result.error.empty()) {
    std::cerr << "dynrt bench: " << result.error << "\n";
    return kExitUsage;
  }
  const std::string md = bench::format_bench(o, result);
  std::cout << md;
  const fs::path dir = o.out_dir;
  std::ofstream(dir / "results.md") << md;
  std::ofstream(dir / "results.json") << result.to_json(o).dump(2) << "\n";
  std::cerr << "dynrt bench: wrote " << (dir / "results.md").string() << ", "
            << (dir / "results.json").string() << " and traces/\n";
  if (!cli.no_plots) plot(cli.plot_script, dir, "dynrt bench");
  std::size_t failures = 0;
  for (const auto& c : result.cells)
    failures += c.failures;
  return failures == 0 ? kExitOk : kExitFindings;
}

void add_open_loop(CLI::App& bench, const std::string& which, const std::string& about,
                   std::function<int()>& run) {
  auto cli = std::make_shared<OpenLoopCli>();
  CLI::App* cmd = bench.add_subcommand(which, about);
  cmd->footer(
      "Replays a seeded trace with open-loop Poisson arrivals on the embedded simulated engine,\n"
      "once per arm and rate, and writes OUT/results.md (a table per workload and the target\n"
      "checks), OUT/results.json (one record per workload, rate and arm), OUT/traces/*.jsonl\n"
      "(the generated runs) and OUT/plots/*.png (python3-matplotlib). Latencies are simulated\n"
      "seconds. Arms:" +
      arm_list(bench::bench_arms()) +
      ".\n"
      "Exit status 1 if any request failed. See docs/benchmarks.md.");
  cmd->add_option("--arms", cli->options.arms,
                  "Arms to run (the floor always runs):" + arm_list(bench::bench_arms()))
      ->delimiter(',');
  cmd->add_option("--rate", cli->options.rates,
                  "Arrival rates in requests per simulated second (default 0.12 and 0.8; HCI 0.3 "
                  "and 0.8)")
      ->delimiter(',')
      ->check(cli_checks::positive_finite());
  cmd->add_option("--requests", cli->options.requests, "Requests (workflow runs) per cell")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--seed", cli->options.seed, "Seed of the trace and the controller")
      ->check(cli_checks::unsigned_integer())
      ->capture_default_str();
  cmd->add_option("--profile", cli->options.profile,
                  "Simulated engine profile (" + engines::sim::sim_profile_names() +
                      "; docs/engine-profiles.md)")
      ->capture_default_str();
  cmd->add_option("--interference-scale", cli->options.interference_scale,
                  "The engine's true interference as a multiple of the fit the price curves use")
      ->check(cli_checks::finite_range(engines::sim::kMinInterferenceScale,
                                       engines::sim::kMaxInterferenceScale))
      ->capture_default_str();
  cmd->add_option("--repeat-rate", cli->options.repeat_rate,
                  "Share of requests that exactly repeat a popular one")
      ->check(cli_checks::finite_range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--templates", cli->options.templates, "Template folder")->capture_default_str();
  cmd->add_option("--out", cli->out_dir, "Output folder")->capture_default_str();
  if (which == "all") cmd->add_flag("--no-sweeps", cli->no_sweeps, "Skip the sensitivity sweeps");
  cmd->add_flag("--no-plots", cli->no_plots, "Do not draw the PNG plots");
  cmd->add_option("--plot-script", cli->plot_script, "bench/plot.py to draw with")
      ->capture_default_str();
  cmd->add_flag("--quiet", cli->quiet,
                "No progress on stderr (otherwise a bar on a terminal, and one line per "
                "finished cell when stderr is a file or a pipe)");
  cmd->callback([cli, which, &run] { run = [cli, which] { return run_open_loop(which, *cli); }; });
}

struct SweepCli {
  bench::SweepOptions options;
  std::string kind;  // sweep or bursty
  std::string which;
  std::string out_dir = "bench-results";
  bool no_plots = false;
  bool quiet = false;
  bool unpredictable = false;
  std::string contexts = "paper";  // --contexts: the paper's prompt sizes unless asked
  std::string plot_script = DYNRT_PLOT_SCRIPT;
};

int run_sweep(SweepCli& cli) {
  namespace fs = std::filesystem;
  auto& o = cli.options;
  const auto& names = bench::bench_workloads();
  if (cli.which == "all") {
    o.workloads = names;
  } else if (std::find(names.begin(), names.end(), cli.which) != names.end()) {
    o.workloads = {cli.which};
  } else {
    std::cerr << "dynrt bench " << cli.kind << ": unknown workload \"" << cli.which
              << "\"; workloads are routing react subagent hci, or all\n";
    return kExitUsage;
  }
  o.command = cli.kind;
  if (cli.kind == "ablation" && o.arms.empty()) o.arms = bench::ablation_arms();
  for (const auto& a : o.arms) {
    const auto& known = cli.kind == "ablation" ? bench::ablation_arms() : bench::bench_arms();
    if (std::find(known.begin(), known.end(), a) != known.end()) continue;
    if (cli.kind == "ablation" && a.rfind("p=", 0) == 0) {
      char* end = nullptr;
      const double p = std::strtod(a.c_str() + 2, &end);
      if (end && *end == '\0' && end != a.c_str() + 2 && p > 0 && p <= 1) continue;
    }
    std::cerr << "dynrt bench " << cli.kind << ": unknown arm \"" << a << "\"; arms are"
              << arm_list(known) << (cli.kind == "ablation" ? " (or any p=X with 0 < X <= 1)" : "")
              << "\n";
    return kExitUsage;
  }
  if (const auto twice = repeated(o.arms)) {
    std::cerr << "dynrt bench " << cli.kind << ": arm " << *twice << " is given twice in --arms\n";
    return kExitUsage;
  }
  for (const double u : o.loads) {
    if (!(u > 0 && u <= 2)) {
      std::cerr << "dynrt bench " << cli.kind
                << ": a load is a fraction of the saturation rate, in (0, 2]; got " << u << "\n";
      return kExitUsage;
    }
  }
  if (const auto twice = repeated(o.loads)) {
    std::cerr << "dynrt bench " << cli.kind << ": load " << *twice
              << " is given twice in --loads\n";
    return kExitUsage;
  }
  // A given rate is not measured, so nothing bounds it: a cell spanning more simulated time
  // than this would take minutes of CPU (the runtime's periodic work runs through all of it),
  // and one holding more runs than that would not fit in memory (the warm-up and the drain
  // are timed: at a rate far above any engine's, their seconds hold billions of runs).
  if (o.saturation > 0) {
    constexpr double kMaxSpanS = 1e7;
    constexpr double kMaxCellRuns = 1e6;
    double lowest = 2, highest = 0;
    const auto seen = [&](double u) {
      lowest = std::min(lowest, u);
      highest = std::max(highest, u);
    };
    if (cli.kind == "bursty")
      for (const auto& p : bench::bursty_phases())
        seen(p.load);
    else
      for (const double u : o.loads)
        seen(u);
    const double span_s = o.requests / (lowest * o.saturation);
    if (span_s > kMaxSpanS) {
      std::cerr << "dynrt bench " << cli.kind << ": at " << lowest << " of " << o.saturation
                << " runs/s, " << o.requests << " runs arrive over " << span_s
                << " simulated seconds; a cell may span at most " << kMaxSpanS
                << " (raise --saturation)\n";
      return kExitUsage;
    }
    const double runs = bench::cell_runs_bound(o.requests, highest * o.saturation);
    if (runs > kMaxCellRuns) {
      std::cerr << "dynrt bench " << cli.kind << ": at " << highest << " of " << o.saturation
                << " runs/s, a cell would hold up to " << runs
                << " runs with its timed warm-up and drain; a cell may hold at most "
                << kMaxCellRuns << " (lower --saturation)\n";
      return kExitUsage;
    }
  }
  if (cli.unpredictable) {
    o.predictability = 0;
    o.repeat_rate = 0;
  }
  // CLI11 has checked the name.
  o.contexts = bench::parse_contexts(cli.contexts).value_or(bench::Contexts::paper);
  if (o.http_record && !o.http) {
    std::cerr << "dynrt bench sweep: --record records the traffic of --http cells; add --http\n";
    return kExitUsage;
  }
  if (o.http) {
    o.http_dir = (fs::path(cli.out_dir) / "http").string();
    const bool any = o.arms.empty() || std::any_of(o.arms.begin(), o.arms.end(), [](auto& a) {
                       return a == "c1-only" || a == "c2-only" || a == "full";
                     });
    if (!any)
      std::cerr << "dynrt bench sweep: --http runs floor, c1-only, c2-only and full over HTTP; of "
                   "the arms asked for, only the floor will run there\n";
  }
  o.progress = cli.quiet ? nullptr : &std::cerr;
  std::error_code ec;
  fs::create_directories(cli.out_dir, ec);
  if (ec) {
    std::cerr << "dynrt bench " << cli.kind << ": cannot create " << cli.out_dir << ": "
              << ec.message() << "\n";
    return kExitUsage;
  }
  const std::string who = "dynrt bench " + cli.kind;
  std::string md, error;
  nlohmann::json doc;
  std::size_t failures = 0;
  if (cli.kind == "bursty") {
    const bench::BurstyResult result = bench::run_bursty(o);
    error = result.error;
    md = bench::format_bursty(o, result);
    doc = result.to_json(o);
    for (const auto& p : result.points)
      failures += p.failures;
  } else {
    const bench::SweepResult result = bench::run_sweep(o);
    error = result.error;
    md = bench::format_sweep(o, result);
    doc = result.to_json(o);
    for (const auto& p : result.points)
      failures += p.failures + (p.http ? p.http->failures : 0);
  }
  if (!error.empty()) {
    std::cerr << who << ": " << error << "\n";
    return kExitUsage;
  }
  std::cout << md;
  const fs::path dir = cli.out_dir;
  std::ofstream(dir / "results.md") << md;
  std::ofstream(dir / "results.json") << doc.dump(2) << "\n";
  std::cerr << who << ": wrote " << (dir / "results.md").string() << " and "
            << (dir / "results.json").string() << "\n";
  // The bursty trace has no figure of its own: its table is the result.
  if (!cli.no_plots && cli.kind != "bursty") plot(cli.plot_script, dir, who.c_str());
  return failures == 0 ? kExitOk : kExitFindings;
}

void add_sweep(CLI::App& bench, const std::string& kind, std::function<int()>& run) {
  auto cli = std::make_shared<SweepCli>();
  cli->kind = kind;
  CLI::App* cmd = nullptr;
  if (kind == "sweep") {
    cmd = bench.add_subcommand(
        "sweep", "Latency against load: every arm at fractions of the floor's saturation rate");
    cmd->footer(
        "Finds the rate at which the floor saturates the simulated engine for each workload (a\n"
        "burst of runs arriving at once, drawn from seed 1 whatever --seed is: 90% of them over\n"
        "the time until 90% finished), then runs every arm at each load (a fraction of that rate)\n"
        "for each seed, in simulated time. The first 20% of the runs, or the first 30 simulated\n"
        "seconds if longer, and the last 10%, or the last 30 simulated seconds if longer (runs\n"
        "are added), are left out of the latencies.\n"
        "\n"
        "Writes OUT/results.md (per workload: the saturation rate, mean latency ± 1 s.d. over\n"
        "seeds per load and arm, fills and wasted engine time, and where each arm's answer time\n"
        "went by stage at the highest load up to 0.85), OUT/results.json (one record per cell:\n"
        "workload, profile, load, rate, arm, seed, mean_s, p99_s, accuracy, fills_issued,\n"
        "fills_consumed, wasted_engine_s, fill_p and fill_used_share (the fill gate's mean p and\n"
        "the share of its fills used), ..., stages: per stage and how its calls were served\n"
        "(engine, fill, cache) calls_per_run, mean_s, s_per_run; failures and, where runs failed,\n"
        "first_failure; and the points over seeds) and OUT/plots/*.png.\n"
        "\n"
        "A template folder with an error is refused with its findings (as dynrt lint prints\n"
        "them), and one without a stage its trace calls by name (Routing's router, ReAct's think,\n"
        "HCI's offer).\n"
        "\n"
        "With --http, each cell of floor, c1-only, c2-only and full runs a second time over real\n"
        "HTTP: dynrt serve in front of dynrt-sim-engine (both started from the folder of this\n"
        "dynrt, or PATH, on free loopback ports), in real time at --http-time-scale; the report\n"
        "then compares the two per cell. See docs/benchmarks.md.");
  } else if (kind == "ablation") {
    cmd = bench.add_subcommand(
        "ablation", "The two admission gates priced or open, and fixed thresholds (Figure 13)");
    cmd->footer(
        "The load sweep with the ablation's arms, by default at 0.1 and 0.7 of the floor's\n"
        "saturation rate: full (both gates priced), priced-generation (Action 0 priced, Action 1\n"
        "admits every candidate the budgets allow), priced-fills (Action 0 open, Action 1\n"
        "priced), always (both open), and p=0.3 ... p=0.999 (Action 0 open, Action 1 a fixed\n"
        "threshold on the predictor's confidence). Reports fills issued against latency. The\n"
        "paper's ablation runs ReAct. Writes OUT/results.md and OUT/results.json.");
    cli->options.loads = {0.1, 0.7};
  } else {
    cmd = bench.add_subcommand(
        "bursty", "A trace of quiet, burst, reuse-heavy and recovery phases (paper Figure 15)");
    cmd->footer(
        "Finds the floor's saturation rate for each workload, then replays one trace of four\n"
        "phases with as many runs each (A at 0.15 of saturation, B at 0.9, C at 0.9 with 90%\n"
        "exact repeats, D at 0.15), after 30 simulated seconds of warm-up at A's rate (left\n"
        "out), through every arm, per seed, in simulated time. Writes\n"
        "OUT/results.md (mean latency per arm over the whole trace and per phase) and\n"
        "OUT/results.json. See docs/benchmarks.md.");
  }
  cmd->add_option("workload", cli->which, "routing, react, subagent, hci or all")->required();
  cmd->add_option("--profile", cli->options.profile,
                  "Simulated engine profile (" + engines::sim::sim_profile_names() + ")")
      ->capture_default_str();
  if (kind != "bursty")
    cmd->add_option("--loads", cli->options.loads, "Loads, as fractions of the saturation rate")
        ->delimiter(',')
        ->capture_default_str();
  cmd->add_option("--seeds", cli->options.seeds, "Seeds per cell (1, 2, ... from --seed)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--seed", cli->options.first_seed, "First seed")
      ->check(cli_checks::unsigned_integer())
      ->capture_default_str();
  cmd->add_option("--saturation", cli->options.saturation,
                  "The floor's saturation rate in runs/s to use for every workload, instead of "
                  "measuring it (a quick look; loads are fractions of it)")
      ->check(cli_checks::positive_finite());
  cmd->add_option("--requests", cli->options.requests, "Workflow runs per cell")
      ->check(CLI::Range(20, 100000))
      ->capture_default_str();
  cmd->add_option("--arms", cli->options.arms,
                  "Arms to run (the floor always runs):" +
                      arm_list(kind == "ablation" ? bench::ablation_arms() : bench::bench_arms()) +
                      (kind == "ablation" ? ", or p=X for any 0 < X <= 1" : ""))
      ->delimiter(',');
  cmd->add_option("--interference-scale", cli->options.interference_scale,
                  "The engine's true interference as a multiple of the fit the price curves use")
      ->check(cli_checks::finite_range(engines::sim::kMinInterferenceScale,
                                       engines::sim::kMaxInterferenceScale))
      ->capture_default_str();
  cmd->add_option("--repeat-rate", cli->options.repeat_rate,
                  "Share of runs that exactly repeat a popular one")
      ->check(cli_checks::finite_range(0.0, 1.0))
      ->capture_default_str();
  if (kind == "sweep") {
    cmd->add_flag("--http", cli->options.http,
                  "Also run each cell of floor, c1-only, c2-only and full through dynrt serve and "
                  "dynrt-sim-engine over HTTP, in real time");
    cmd->add_option("--http-time-scale", cli->options.http_time_scale,
                    "--http: real milliseconds per simulated second (1000: real time, the only "
                    "scale at which the templates' waits mean what they do in process)")
        ->check(cli_checks::finite_range(10.0, 100000.0))
        ->capture_default_str();
    cmd->add_flag("--record", cli->options.http_record,
                  "--http: dynrt serve records each cell's tagged traffic (--record) to "
                  "OUT/http/WORKFLOW-ARM/traffic-RATE-SEED.jsonl, for dynrt template draft");
  }
  cmd->add_flag("--unpredictable", cli->unpredictable,
                "The no-harm trace: selections ignore every predictor, no exact repeats");
  cmd->add_flag("--selection-first", cli->options.selection_first,
                "The deciders write their selection before their reasoning (as a tool call's "
                "name comes before its arguments), so it is emitted early in their decode");
  cmd->add_option("--contexts", cli->contexts,
                  "Prompt sizes: compact (a sentence or two per message) or paper (the paper's "
                  "traces: Routing's handler prompt about 263 tokens at p50, ReAct's think "
                  "carrying every earlier hop, passages about 130 tokens)")
      ->check(CLI::IsMember({"compact", "paper"}))
      ->capture_default_str();
  cmd->add_flag("!--no-emission", cli->options.emission,
                "Resolve branches only at the end of the decider's decode, not as soon as its "
                "selection is emitted (to measure what resolving on emission saves)");
  cmd->add_option("--templates", cli->options.templates, "Template folder")->capture_default_str();
  cmd->add_option("--out", cli->out_dir, "Output folder")->capture_default_str();
  cmd->add_flag("--no-plots", cli->no_plots, "Do not draw the PNG plots");
  cmd->add_option("--plot-script", cli->plot_script, "bench/plot.py to draw with")
      ->capture_default_str();
  cmd->add_flag("--quiet", cli->quiet, "No progress on stderr (one line per trace and seed)");
  cmd->callback([cli, &run] { run = [cli] { return run_sweep(*cli); }; });
}

}  // namespace

void add_bench_commands(CLI::App& app, std::function<int()>& run) {
  CLI::App* bench = app.add_subcommand("bench", "Measure what dynrt buys, reproducibly");
  bench->require_subcommand(1);

  add_open_loop(*bench, "all",
                "All four workloads, every arm, both rates, and the sensitivity sweeps", run);
  add_open_loop(*bench, "routing", "The Routing workload (router -> handler -> executor)", run);
  add_open_loop(*bench, "react", "The ReAct workload (think -> retrieve -> read per hop)", run);
  add_open_loop(*bench, "subagent", "The Sub-Agent workload (plan -> research -> summarize)", run);
  add_open_loop(*bench, "hci", "The HCI workload (offer -> user pick -> act)", run);
  add_sweep(*bench, "sweep", run);
  add_sweep(*bench, "bursty", run);
  add_sweep(*bench, "ablation", run);

  auto replay = std::make_shared<bench::AdmissionReplayOptions>();
  CLI::App* admission = bench->add_subcommand(
      "admission", "Replay the fill gate against the exact admission oracle (paper Appendix B)");
  admission->footer(
      "Generates seeded admission snapshots (2-8 candidates, mixed loads and budgets), runs\n"
      "the implemented sequential repricing and the exact ordered-subset oracle on each, and\n"
      "prints the oracle-set match rate and the share of the oracle's sequence-aware utility\n"
      "the rule keeps. Deterministic for a seed.");
  admission->add_option("--snapshots", replay->snapshots, "Snapshots to replay")
      ->check(CLI::Range(1, 10'000'000))
      ->capture_default_str();
  admission->add_option("--seed", replay->seed, "Seed of the snapshot generator")
      ->check(cli_checks::unsigned_integer())
      ->capture_default_str();
  admission
      ->add_option("--min-candidates", replay->min_candidates, "Fewest candidates a snapshot has")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  admission
      ->add_option("--max-candidates", replay->max_candidates, "Most candidates a snapshot has")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  admission->callback([replay, &run] {
    run = [replay] {
      if (replay->min_candidates > replay->max_candidates) {
        std::cerr << "dynrt bench admission: --min-candidates is above --max-candidates\n";
        return kExitUsage;
      }
      const bench::AdmissionReplayResult result = bench::replay_admission(*replay);
      std::cout << bench::format_admission_replay(*replay, result);
      return kExitOk;
    };
  });
}

}  // namespace dynrt::cli

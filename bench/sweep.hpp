// `dynrt bench sweep`: latency against load, the way the paper's Figures 9a and 14 are drawn.
//
// For each workload it first finds the floor's saturation rate on the engine profile: a burst
// of runs all arriving at once keeps the engine as busy as the workload can make it, and the
// rate at which they complete (90% of them, over the time until the 90th percent finished)
// is the most the floor can sustain. Each
// load u then runs the workload's trace with Poisson arrivals at u times that rate, for every
// arm and seed, each cell in simulated time (bench/sim_world.hpp). The first 20% and the last
// 10% of the runs are left out of the latency figures (the engine filling from empty and the
// controller learning, and the load falling away as the trace ends); where 20% of the runs
// would arrive within 30 simulated seconds, the runs of those seconds are added in front and
// left out instead, and likewise behind where the last 10% would arrive within 30 s (a run is
// measured while the load holds through its whole life). Fills and engine time count every
// run.
//
// Per (workload, load, arm) it reports the mean latency over seeds with its standard deviation,
// p50 and p99, the ratio to the floor of the same seed, fills issued and consumed per request,
// and the engine-seconds fills wasted.
#pragma once

#include "bench/openloop.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace dynrt::bench {

struct SweepOptions {
  std::vector<std::string> workloads;  // of bench_workloads()
  std::string profile = "h200x4-32b";
  std::vector<double> loads = {0.05, 0.15, 0.3, 0.5, 0.7, 0.85, 0.95};
  std::size_t seeds = 3;  // seeds first_seed, first_seed + 1, ...
  std::uint64_t first_seed = 1;
  std::size_t requests = 400;     // runs per cell
  std::vector<std::string> arms;  // empty: every arm; the floor always runs
  double interference_scale = 1.0;
  double repeat_rate = 0.5;
  // 1: the workloads as the paper measures them; 0: the no-harm trace, whose selections
  // ignore every predictor (top-1 share about 1/K) and which has no exact repeats.
  double predictability = 1.0;
  bool selection_first = false;           // WorkloadOptions::selection_first
  Contexts contexts = Contexts::compact;  // WorkloadOptions::contexts
  bool emission = true;                   // resolve on emission (RuntimeConfig::emission)
  std::string templates = "templates";
  std::ostream* progress = nullptr;  // one line per finished (workload, load, seed)
  std::string command = "sweep";     // the report's title: sweep or ablation
  double saturation = 0;             // the floor's saturation rate (runs/s) to use; 0: measure it
  // --http: each cell of an arm dynrt serve runs from its flags (floor, c1-only, c2-only, full)
  // is run again over real HTTP, through `dynrt serve` and `dynrt-sim-engine` started as child
  // processes (bench/http_cell.hpp), at http_time_scale real ms per simulated second; their
  // files and logs go under http_dir.
  bool http = false;
  double http_time_scale = 1000;
  std::string http_dir;
  bool http_record = false;  // HttpCellOptions::record
};

// How the floor's saturation rate of one workload was found.
struct Saturation {
  std::string workload;
  double rate = 0;       // runs per simulated second the floor sustains
  std::size_t runs = 0;  // in the burst
  double window_s = 0;   // 90% of the burst's runs had finished this long after it arrived
};

struct SweepRecord {  // one cell
  std::string workload;
  std::string profile;
  double load = 0;
  double rate = 0;
  std::string arm;
  std::uint64_t seed = 0;
  CellResult cell;
  std::optional<CellResult> http;  // the same cell over HTTP (--http)
  nlohmann::json to_json() const;
};

struct SweepPoint {  // one (workload, load, arm) over the seeds
  std::string workload;
  double load = 0;
  double rate = 0;
  std::string arm;
  std::size_t seeds = 0;
  double mean_s = 0;  // mean over seeds of the cells' means
  double sd_s = 0;    // their sample standard deviation
  double p50_s = 0;   // means over seeds
  double p99_s = 0;
  double ratio_to_floor = 0;
  double accuracy = 1;  // the lowest over seeds
  double fills_issued = 0;
  double fills_consumed = 0;
  double wasted_engine_s = 0;
  double gate_open_share = -1;
  double fill_p = -1;  // means over the seeds that admitted fills (CellResult)
  double fill_used_share = -1;
  double interference_fit = 1;  // mean over seeds (CellResult)
  double draft_samples = 0;     // drafter samples per run, and their engine-seconds
  double drafting_engine_s = 0;
  double kv_use = 0;  // means over seeds (CellResult)
  double kv_wait_share = 0;
  std::size_t failures = 0;
  std::string first_failure;      // the first failed run's error, over the seeds in order
  std::vector<StageTime> stages;  // means over seeds (mean_stage_times)
  // The same figures over HTTP (--http); null when the arm was not run there.
  std::shared_ptr<const SweepPoint> http;
  nlohmann::json to_json() const;
};

struct SweepResult {
  std::map<std::string, Saturation> saturation;
  std::vector<SweepRecord> records;
  std::vector<SweepPoint> points;
  double wall_s = 0;
  std::string error;  // set when nothing could run
  nlohmann::json to_json(const SweepOptions& options) const;
};

SweepResult run_sweep(const SweepOptions& options);

// Which runs of a cell's trace its latencies cover: `requests` runs as the options ask, the
// first 20% and the last 10% left out, with runs added in front where that 20% would arrive
// within 30 simulated seconds at `rate` (a deployment that has been running, not the
// controller's cold start) and behind where that 10% would arrive within 30 s (the load held
// through the life of the last measured run). The measured runs are the same whatever the
// rate: `requests` × 0.7 of them, from the same index past the added warm-up.
struct CellTrim {
  std::size_t runs = 0;          // in the trace
  std::size_t measure_from = 0;  // the measured runs are [measure_from, measure_to)
  std::size_t measure_to = 0;
};
CellTrim trim_cell(std::size_t requests, double rate);
// At most how many runs a cell at `rate` holds (the measured ones and every run the timed
// warm-up and drain could add), as a number that cannot overflow however large the rate: the
// check a rate given by hand must pass before trim_cell counts its runs.
double cell_runs_bound(std::size_t requests, double rate);

// The Markdown report: per workload, the saturation rate and a table of load against arm.
std::string format_sweep(const SweepOptions& options, const SweepResult& result);

// `dynrt bench bursty` (the paper's Figure 15): one trace of four phases with as many runs each,
// A quiet (0.15 of the saturation rate), B a burst (0.9), C the burst's rate with most
// runs exact repeats of popular ones (reuse-heavy), D quiet again (recovery). Every arm replays
// the same trace, per seed; the whole trace's mean latency is compared (the loads option is
// unused). The trace starts with 30 simulated seconds of warm-up at A's rate, left out of
// every figure, as a sweep cell's does: it measures a deployment that has been running.
struct BurstyPhase {
  std::string name;  // A B C D
  double load = 0;
  double repeat_share = 0;  // of its runs, exact repeats
};
const std::vector<BurstyPhase>& bursty_phases();

struct BurstyPoint {  // one (workload, arm) over the seeds
  std::string workload;
  std::string arm;
  std::size_t seeds = 0;
  double mean_s = 0;
  double sd_s = 0;
  std::vector<double> phase_mean_s;  // per phase, over seeds
  double fills_issued = 0;
  double wasted_engine_s = 0;
  double accuracy = 1;
  std::size_t failures = 0;
  std::string first_failure;  // as SweepPoint's
  nlohmann::json to_json() const;
};

struct BurstyResult {
  std::map<std::string, Saturation> saturation;
  std::vector<SweepRecord> records;  // load: -1 (the whole trace)
  std::vector<BurstyPoint> points;
  double wall_s = 0;
  std::string error;
  nlohmann::json to_json(const SweepOptions& options) const;
};

BurstyResult run_bursty(const SweepOptions& options);
std::string format_bursty(const SweepOptions& options, const BurstyResult& result);

// The point of `arm` at `load` for `workload`, if it ran.
const SweepPoint* find_point(const SweepResult& result, const std::string& workload, double load,
                             const std::string& arm);

}  // namespace dynrt::bench

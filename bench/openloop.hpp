// `dynrt bench WORKLOAD|all`: the paper's evaluation (section 5) on the embedded simulated
// engine. Each (workload, rate, arm) cell replays the same seeded trace with open-loop Poisson
// arrivals against a fresh engine and a fresh dynrt::Runtime configured as the arm says; only
// the policy differs between arms. A run is one workflow request driven as a harness would
// (bench/driver.hpp); its latency is the wall time from its arrival to its last answer (HCI:
// the user turn after the think gap), converted to simulated seconds.
//
// Arms: floor (no reuse, no fills), c1-only, c2-only, full, and the baselines
//   instcache  an exact whole-request cache at the harness, keyed by the run's request, filled
//              by completed runs and pre-populated before the trace from predicted requests
//              (the more popular half of the workload's popular requests);
//   helium+    exact per-stage result caching at the harness (every stage the template marks
//              safe to run twice, keyed by its exact body) with identical in-flight calls
//              coalesced, and no speculation;
//   spagent    speculation of the next action only (the top candidate), whatever it is, model
//              stages included, down its whole chain; admitted by a fixed confidence threshold
//              (p >= 0.5); its results serve only the run that made them (an in-request
//              buffer), no cross-request reuse;
//   dsp        a speculative plan as deep as the chain goes, for the top candidate, admitted by
//              a latency-cost objective that does not see the load (p G > (1 - p) T, with T
//              the fill's own engine time); in-request only, like spagent;
//   static     full dynrt with fixed-load admission (opens only at low load, fixed threshold);
//   always     full dynrt whose gates always open and admit every candidate the budgets allow.
// Accuracy is the share of runs whose every response is byte-identical to the floor's.
#pragma once

#include "bench/workloads.hpp"
#include "dsl/template_graph.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace dynrt::bench {

const std::vector<std::string>& bench_workloads();  // routing react subagent hci
const std::vector<std::string>& bench_arms();       // floor c1-only ... always
// The two-level ablation's arms (`dynrt bench ablation`, the paper's Figure 13): full (both
// gates priced), priced-generation (Action 1 admits all), priced-fills (Action 0 open), always
// (both open), and p=X (Action 0 open, Action 1 a fixed threshold X on the predictor's
// confidence). Any p=X is accepted as an arm.
const std::vector<std::string>& ablation_arms();
// The default arrival rates (req/s): 0.12 and 0.8, HCI 0.3 and 0.8.
std::vector<double> default_rates(const std::string& workload);

struct BenchOptions {
  std::vector<std::string> workloads;  // of bench_workloads()
  std::vector<std::string> arms;       // of bench_arms(); the floor always runs (the reference)
  std::vector<double> rates;           // empty: default_rates() per workload
  std::size_t requests = 60;           // runs per cell
  std::uint64_t seed = 1;
  double repeat_rate = 0.5;  // share of runs that exactly repeat a popular request
  bool sweeps = false;       // also the fanout, repeat-rate and unpredictable-trace runs
  std::string templates = "templates";
  std::string profile = "default";   // the simulated engine's (engines/sim/profiles.hpp)
  double interference_scale = 1.0;   // its true interference over the price curves' fit
  bool emission = true;              // resolve on emission (RuntimeConfig::emission)
  std::string out_dir;               // empty: write nothing
  std::ostream* progress = nullptr;  // progress goes here when set
  // A bar redrawn in place suits a terminal; a log or a pipe would get the whole bar anew on
  // every update, so there each cell writes one plain line when it finishes.
  enum class ProgressStyle { bar, lines };
  ProgressStyle progress_style = ProgressStyle::bar;
};

// Where a cell's answer time went: the calls of one stage, served one way (engine: executed
// for the call; fill: a speculative result the call promoted; cache: the library or a harness
// cache), over the measured runs. The sum over a run's calls is not its latency when calls run
// side by side or a user thinks between them; it shows which stages an arm made faster or
// slower, and how.
struct StageTime {
  std::string stage;
  std::string served;    // engine, fill or cache
  double calls = 0;      // per measured run
  double mean_s = 0;     // mean answer latency of those calls (simulated seconds)
  double per_run_s = 0;  // calls x mean_s
  // Mean prompt tokens per call as the simulated engine counts them, whoever served the call
  // (0 for tool stages).
  double prompt_tokens = 0;
  nlohmann::json to_json() const;
};

// The mean over cells (seeds) of their stage times: a (stage, served) pair a cell lacks counts
// as no calls there. In the order the pairs first appear.
std::vector<StageTime> mean_stage_times(const std::vector<std::vector<StageTime>>& cells);
nlohmann::json stage_times_json(const std::vector<StageTime>& stages);

struct CellResult {
  std::string workload;
  double rate = 0;
  std::string arm;
  std::size_t requests = 0;
  std::size_t completed = 0;
  std::size_t failures = 0;
  double mean_s = 0;
  double p50_s = 0;
  double p99_s = 0;
  double ratio_to_floor = 0;
  double accuracy = 0;
  double fills_issued = 0;  // per request, as the next four
  double fills_consumed = 0;
  double fills_discarded = 0;       // shadows discarded (losers, expired, refused)
  double speculative_engine_s = 0;  // engine time of fills (simulated seconds)
  double wasted_engine_s = 0;       // ... of fills nobody consumed
  double served_fill = 0;           // demands served by fills, per request
  double served_cache = 0;          // ... from the library or a harness cache
  double waits = 0;                 // demands that waited for their in-flight fill, per request
  double wait_timeouts = 0;         // ... and ran on the engine after the template's wait_ms
  double hedge_fills = 0;           // ... and were answered by their fill all the same
  double requeued = 0;              // fill requests moved up the engine's queue for a waiter
  double fills_outrun = 0;          // fills stopped when their decider emitted another selection
  double draft_samples = 0;         // drafter samples sent, per request
  double drafting_engine_s = 0;     // ... and their engine time (simulated seconds)
  // Over the trace (its first arrival to its last answer): the mean share of the engines' KV
  // pools reserved, and the share of each worker's time its queue waited for KV with a decode
  // slot free.
  double kv_use = 0;
  double kv_wait_share = 0;
  // The share of decisions at which the generation gate (Action 0) opened, and of those the
  // share an audit opened; -1 when the arm made no decision (no fills).
  double gate_open_share = -1;
  double gate_audit_share = -1;
  // The fill gate's calibration: the mean p it weighed its admitted fills by, and the share of
  // them that served their branch's selection; -1 when it admitted none.
  double fill_p = -1;
  // The engine's stretch over the price curves' interference, as the controller read it at the
  // cell's end (1: no fit, or not enough load to read one).
  double interference_fit = 1;
  double fill_used_share = -1;
  // The median over runs of (engine-driven resolution windows) / (the downstream work after
  // them), from the answers' latencies: a model stage that decides, against the stages after
  // it in the same repetition. -1 when the trace has none (HCI: the window is the user's).
  double window_over_downstream = -1;
  double wall_s = 0;  // real seconds the cell took
  std::string first_failure;
  std::vector<StageTime> stages;  // the measured runs' answer time, by stage and how served
  nlohmann::json to_json() const;
};

struct FanoutPoint {
  std::string workload;
  double rate = 0;
  int k = 0;
  CellResult cell;
};

struct RepeatPoint {
  std::string workload;
  double rate = 0;
  double repeat_rate = 0;
  CellResult floor;
  CellResult full;
};

struct BenchResult {
  std::vector<CellResult> cells;
  std::vector<FanoutPoint> fanout;
  std::vector<RepeatPoint> repeat;
  std::vector<CellResult> unpredictable;         // the no-harm trace: floor and full
  std::map<std::string, nlohmann::json> traces;  // per workload: the trace's statistics
  std::string error;                             // set when nothing could run
  nlohmann::json to_json(const BenchOptions& options) const;
};

BenchResult run_bench(const BenchOptions& options);

// The Markdown report: one table per workload, then the sweeps and the target checks.
std::string format_bench(const BenchOptions& options, const BenchResult& result);

}  // namespace dynrt::bench

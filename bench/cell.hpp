// The pieces `dynrt bench` builds its experiments from (bench/openloop.cpp for the per-workload
// tables, bench/sweep.cpp for the load sweeps): a trace, one cell run in simulated time, and
// the statistics over its runs. Internal to bench/.
#pragma once

#include "bench/driver.hpp"
#include "bench/openloop.hpp"
#include "bench/workloads.hpp"
#include "dsl/lint.hpp"
#include "dsl/template_graph.hpp"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace dynrt::bench::detail {

// A workload's runs and when each arrives (simulated seconds from the start).
struct Trace {
  const dsl::TemplateGraph* graph = nullptr;
  const Workload* workload = nullptr;
  std::vector<double> arrival_s;
  double rate = 0;  // the nominal arrival rate (req/s), for the record
};

using Bodies = std::vector<std::vector<std::string>>;  // per run: every step's body

struct CellContext {
  const BenchOptions* options = nullptr;  // profile, interference scale, seed, templates
  const Trace* trace = nullptr;
  std::string arm;
  int fanout = -1;                       // overrides the arm's
  const Bodies* floor_bodies = nullptr;  // accuracy is measured against these
  Bodies* bodies_out = nullptr;
  std::string label;
  // Latency figures cover the runs whose index is in [measure_from, measure_to): a sweep trims
  // the warm-up (an engine filling from empty) and the drain (the load falling away at the
  // end). Fills, accuracy and engine time cover every run.
  std::size_t measure_from = 0;
  std::size_t measure_to = std::numeric_limits<std::size_t>::max();
  // When each run finished (simulated seconds from the start; -1: failed), when set.
  std::vector<double>* finished_at_out = nullptr;
  // Each run's latency (-1: failed), when set.
  std::vector<double>* latency_out = nullptr;
};

// One cell: a fresh simulated engine and Runtime configured as the arm says, the trace driven
// through them open loop, in simulated time on this thread.
CellResult run_cell(const CellContext& cx);

// Poisson arrivals at `rate` per simulated second; the same for every arm of a seed.
std::vector<double> arrivals(std::uint64_t seed, double rate, std::size_t n);

// A workload's trace as the bench generates it: `runs` runs of `seed`, with the predictability
// and exact-repeat rate given (Sub-Agent's entity pool sized so that about 26% of fresh runs'
// sub-tasks recur, as the paper's section 2.2 measures).
// `selection_first`, `contexts`: WorkloadOptions::selection_first and ::contexts.
Workload bench_workload(const dsl::TemplateGraph& graph, std::uint64_t seed, std::size_t runs,
                        double predictability, double repeat_rate, bool selection_first = false,
                        Contexts contexts = Contexts::compact);

// The templates a bench runs, linted from `templates`: the workload's graph by name, or an
// error naming the first of `workloads` (or the profile) that cannot run.
struct Graphs {
  dsl::LintReport report;
  std::map<std::string, const dsl::TemplateGraph*> by_workload;
  std::string error;
};
Graphs load_graphs(const std::string& templates, const std::vector<std::string>& workloads,
                   const std::string& profile);

// The floor first, then the arms asked for (every arm when none is).
std::vector<std::string> arms_with_floor(const std::vector<std::string>& asked);

// Adds up a cell's answer time per (stage, how served), one measured run at a time, in the
// order pairs first appear; stage_times() divides by the runs added.
class StageTally {
 public:
  void add(const RunResult& run);
  std::vector<StageTime> stage_times() const;

 private:
  std::vector<StageTime> sums_;  // calls and per_run_s hold the totals until divided
  std::size_t runs_ = 0;
};

// A cell's figures from its runs (latency -1: failed, with its error): completed, failures and
// the first one, mean/p50/p99 over the measured runs, accuracy against cx.floor_bodies.
void tally_runs(const CellContext& cx, const std::vector<double>& latency,
                const std::vector<std::string>& errors, const Bodies& bodies, CellResult& res);

double mean(const std::vector<double>& v);
double percentile(std::vector<double> v, double p);  // nearest rank
void set_ratio(CellResult& c, const CellResult& floor);

}  // namespace dynrt::bench::detail

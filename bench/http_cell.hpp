// One sweep cell driven over real HTTP (`dynrt bench sweep --http`): the same trace a cell runs
// in simulated time, sent through `dynrt serve` to `dynrt-sim-engine`, both started here as
// child processes on free loopback ports, the way a deployment runs them. The engine serves the
// workload's recorded answers (its script) on the same profile; dynrt reads the engine's load
// from its /metrics, as in production, and knows the engine's decode slots and compute knee
// from its configuration (serve.yaml: `max_num_seqs` and `concurrency`, the profile's totals
// over its workers), as an operator would write them. The harness is one thread on libcurl's multi
// interface (engines/http/curl_loop.hpp): arrivals and think times are timers on it, and each
// answer sends the run's next request from its callback.
//
// Time is real: the engine runs at `time_scale` real milliseconds per simulated second and the
// latencies are converted back to simulated seconds. At 1,000 (real time) the templates'
// wait_ms and ttl_s, which dynrt serve keeps in real time, mean what they mean in simulated
// time; at any other scale they do not, so figures are only comparable with the in-process
// cell at 1,000. Fills and served counts come from dynrt's /metrics. Wasted engine time is not
// compared: behind a URL it is the wall time of each attempt (docs/engines.md), not the
// simulated engine's own time, so the two would measure different things.
#pragma once

#include "bench/cell.hpp"

#include <string>

namespace dynrt::bench::detail {

struct HttpCellOptions {
  double time_scale = 1000;  // real milliseconds per simulated second
  std::string dynrt;         // the dynrt binary (serve)
  std::string sim_engine;    // the dynrt-sim-engine binary
  std::string dir;           // where each cell's script, corpus and child logs go
  int serve_threads = 2;     // dynrt serve --threads and --io-threads
  // dynrt serve --record: each cell's tagged traffic goes to its folder as
  // traffic-<rate>-<seed>.jsonl (what `dynrt template draft` reads).
  bool record = false;
};

// The arms dynrt serve can run from its flags: floor, c1-only, c2-only, full.
bool http_arm(const std::string& arm);

// The binaries next to this program (or on PATH): "" and the error when one is missing.
std::string find_http_binaries(HttpCellOptions& options);

// The cell `cx` describes (its trace, arm, trimming and floor bodies), over HTTP.
CellResult run_http_cell(const CellContext& cx, const HttpCellOptions& options);

}  // namespace dynrt::bench::detail

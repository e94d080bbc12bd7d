// A test rig: the shipped templates, a workload, the simulated engine, the corpus tools and a
// dynrt::Runtime over them, with C1 and C2 switched as a test asks.
#pragma once

#include "actors/runtime.hpp"
#include "bench/driver.hpp"
#include "bench/workloads.hpp"
#include "dsl/lint.hpp"
#include "engines/sim/engine.hpp"
#include "engines/tools/corpus.hpp"
#include "tests/actors/invariants.hpp"
#include "tests/run/graphs.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

namespace dynrt::testing {

struct RigOptions {
  bool reuse = true;
  bool fills = true;
  double time_scale = 0;  // real ms per simulated second; 0 as fast as possible
  std::chrono::milliseconds settle_after{30'000};
  std::chrono::milliseconds workflow_idle{60'000};
  int fanout = -1;
  int fill_depth = 0;
  bool private_fills = false;
  bool emission = true;
  // The runtime's engine, given the simulated one: a test's wrapper around it, or itself.
  std::function<std::shared_ptr<engines::Engine>(std::shared_ptr<engines::Engine>)> wrap_engine =
      nullptr;
  // Last word on the runtime's configuration (admission policy, journals, ...).
  std::function<void(RuntimeConfig&)> configure = nullptr;
};

struct Rig {
  bench::Workload workload;
  std::shared_ptr<engines::sim::SimEngine> engine;
  std::shared_ptr<engines::Corpus> corpus;
  // The graph's clock: it moves only when a test says (advance), so settle deadlines, idle
  // expiry, waits and TTLs happen when the test decides, never because the machine was slow.
  std::shared_ptr<ManualTime> time = std::make_shared<ManualTime>();
  std::unique_ptr<Runtime> runtime;

  Rig(bench::Workload w, const RigOptions& o) : workload(std::move(w)) {
    engines::sim::SimEngineOptions eo;
    eo.time_scale = o.time_scale;
    engine =
        std::make_shared<engines::sim::SimEngine>(engines::sim::SimParams{}, workload.script, eo);
    auto c = engines::Corpus::from_json(workload.corpus);
    EXPECT_TRUE(c.ok());
    corpus = *c;
    for (const auto& [name, key] : workload.tools)
      corpus->add_tool(name, {engines::Corpus::Kind::lookup, key});
    RuntimeConfig cfg;
    cfg.engines.push_back({"sim", o.wrap_engine ? o.wrap_engine(engine) : engine, {}});
    cfg.tools = corpus;
    cfg.template_paths = {"templates"};
    cfg.reuse = o.reuse;
    cfg.fills = o.fills;
    cfg.settle_after = o.settle_after;
    cfg.workflow_idle = o.workflow_idle;
    cfg.fanout = o.fanout;
    cfg.fill_depth = o.fill_depth;
    cfg.private_fills = o.private_fills;
    cfg.emission = o.emission;
    cfg.time = time;
    // The graph's clock stands still unless a test moves it, so every demand comes the instant
    // its branch opened: no fill could have a head start, and Ĝ capped at it would refuse
    // every fill after a class's first judged demand. The cap has tests of its own.
    cfg.admission.head_start_memory = 0;
    if (o.configure) o.configure(cfg);
    auto rt = Runtime::create(cfg);
    EXPECT_TRUE(rt.ok()) << (rt.ok() ? "" : rt.error().message);
    runtime = std::move(*rt);
  }

  // Every scenario ends with the fill budget returned (expect_budget_returned).
  ~Rig();

  bench::RunResult drive(const bench::Run& run, const bench::DriveOptions& o = {}) {
    return bench::drive(*runtime, graph(workload.workflow), run, o);
  }
  // A runtime of the rig's own making (other limits), on the rig's clock.
  void restart(RuntimeConfig cfg) {
    runtime.reset();
    cfg.time = time;
    auto rt = Runtime::create(std::move(cfg));
    EXPECT_TRUE(rt.ok()) << (rt.ok() ? "" : rt.error().message);
    runtime = std::move(*rt);
  }
};

inline Rig::~Rig() {
  if (runtime) expect_budget_returned(*runtime, "at the end of the scenario");
}

}  // namespace dynrt::testing

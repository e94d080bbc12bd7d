// What the actor graph costs and buys, on the embedded simulated engine:
//   passthrough  latency added by dynrt::Runtime to an untagged call (time scale 0: the engine
//                answers at once), against the same engine called directly
//   hits         latency and throughput of demands served from the library (C1 hits), each a
//                new workflow run, with run journals (`dynrt explain`) and without
//   routing      wall time of Routing runs at time scale 10, floor against full dynrt
// Usage: runtime_benchmark [passthrough|hits|routing|all] [N]. Figures: docs/benchmarks.md.
#include "actors/runtime.hpp"
#include "bench/driver.hpp"
#include "bench/workloads.hpp"
#include "dsl/lint.hpp"
#include "engines/sim/engine.hpp"
#include "engines/tools/corpus.hpp"

#include <algorithm>
#include <cstdio>
#include <future>
#include <string>
#include <thread>
#include <vector>

using namespace dynrt;
using nlohmann::json;
using Wall = std::chrono::steady_clock;

namespace {

double us(Wall::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

void print_figures(const char* what, std::vector<double> v, double seconds) {
  std::sort(v.begin(), v.end());
  const auto pct = [&](double p) { return v[static_cast<std::size_t>(p * (v.size() - 1))]; };
  std::printf("%-34s n=%zu p50 %.1f us  p99 %.1f us  %.0f calls/s\n", what, v.size(), pct(0.5),
              pct(0.99), static_cast<double>(v.size()) / seconds);
}

json body(int i) {
  return {{"model", "m"},
          {"max_tokens", 8},
          {"messages", json::array({{{"role", "user"}, {"content", "hi " + std::to_string(i)}}})}};
}

struct DirectSink : engines::ResponseSink {
  std::promise<void> done;
  void on_chunk(std::string_view) override {}
  void on_complete(engines::EngineResult) override { done.set_value(); }
  void on_error(engines::EngineError) override { done.set_value(); }
};

void passthrough(int n) {
  engines::sim::SimEngineOptions eo;
  eo.time_scale = 0;
  auto engine = std::make_shared<engines::sim::SimEngine>(engines::sim::SimParams{},
                                                          engines::sim::Script{}, eo);
  std::vector<double> direct, through;
  auto t0 = Wall::now();
  for (int i = 0; i < n; ++i) {
    auto sink = std::make_shared<DirectSink>();
    auto f = sink->done.get_future();
    engines::EngineRequest r;
    r.body = body(i);
    const auto s = Wall::now();
    engine->submit(std::move(r), sink);
    f.get();
    direct.push_back(us(Wall::now() - s));
  }
  print_figures("engine called directly", direct,
                std::chrono::duration<double>(Wall::now() - t0).count());
  RuntimeConfig cfg;
  cfg.engines.push_back({"sim", engine, {}});
  auto created = Runtime::create(cfg);
  auto rt = std::move(created.value());
  t0 = Wall::now();
  for (int i = 0; i < n; ++i) {
    const auto s = Wall::now();
    rt->complete({"/v1/chat/completions", body(i), {}}).get();
    through.push_back(us(Wall::now() - s));
  }
  print_figures("through dynrt::Runtime (untagged)", through,
                std::chrono::duration<double>(Wall::now() - t0).count());
}

struct Rig {
  std::shared_ptr<engines::sim::SimEngine> engine;
  std::unique_ptr<Runtime> rt;
  bench::Workload w;
  Rig(const dsl::TemplateGraph& g, std::size_t runs, double time_scale, bool on,
      bool journals = true) {
    w = bench::make_workload(g, {1, runs, 1.0});
    engines::sim::SimEngineOptions eo;
    eo.time_scale = time_scale;
    engine = std::make_shared<engines::sim::SimEngine>(engines::sim::SimParams{}, w.script, eo);
    auto corpus = *engines::Corpus::from_json(w.corpus);
    for (const auto& [name, key] : w.tools)
      corpus->add_tool(name, {engines::Corpus::Kind::lookup, key});
    RuntimeConfig cfg;
    cfg.engines.push_back({"sim", engine, {}});
    cfg.tools = corpus;
    cfg.template_paths = {"templates"};
    cfg.reuse = cfg.fills = on;
    if (!journals) cfg.explain_runs = 0;
    auto created = Runtime::create(cfg);
    rt = std::move(created.value());
  }
};

const dsl::TemplateGraph& graph(const dsl::LintReport& report, const std::string& name) {
  for (const auto* g : report.graphs())
    if (g->workflow == name) return *g;
  std::fprintf(stderr, "no template %s (run from the repository root)\n", name.c_str());
  std::exit(2);
}

void hits(const dsl::LintReport& report, int n, bool journals) {
  const auto& g = graph(report, "subagent");
  Rig rig(g, 1, 0, true, journals);
  const auto& run = rig.w.runs[0];
  if (!bench::drive(*rig.rt, g, run).ok()) std::exit(1);  // fills the library
  // The research tool call of that run, demanded again and again by new runs.
  const json args = {{"collection", run.picks[0]}, {"entity", run.entity}};
  for (int threads : {1, 4}) {
    std::vector<std::vector<double>> lat(static_cast<std::size_t>(threads));
    const auto t0 = Wall::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        for (int i = 0; i < n / threads; ++i) {
          const auto s = Wall::now();
          auto r = rig.rt
                       ->tool("kb_search", args,
                              {"subagent", "hit-" + std::to_string(t) + "-" + std::to_string(i),
                               "research"})
                       .get();
          if (r.served != Served::cache) std::exit(3);
          lat[static_cast<std::size_t>(t)].push_back(us(Wall::now() - s));
        }
      });
    for (auto& t : pool)
      t.join();
    std::vector<double> all;
    for (auto& v : lat)
      all.insert(all.end(), v.begin(), v.end());
    const std::string what = "library hits, " + std::to_string(threads) + " caller(s)" +
                             (journals ? "" : ", no journals");
    print_figures(what.c_str(), all, std::chrono::duration<double>(Wall::now() - t0).count());
  }
}

void routing(const dsl::LintReport& report, int n) {
  const auto& g = graph(report, "routing");
  for (bool on : {false, true}) {
    Rig rig(g, static_cast<std::size_t>(n), 10, on);
    std::vector<double> ms;
    for (const auto& run : rig.w.runs) {
      const auto s = Wall::now();
      if (!bench::drive(*rig.rt, g, run).ok()) std::exit(1);
      ms.push_back(std::chrono::duration<double, std::milli>(Wall::now() - s).count());
    }
    double mean = 0;
    for (double m : ms)
      mean += m;
    mean /= static_cast<double>(ms.size());
    const auto st = rig.rt->stats();
    std::printf("routing, %-5s n=%d  mean run %.1f ms (%.2f simulated s)  served by fill %llu\n",
                on ? "full" : "floor", n, mean, mean / 10,
                static_cast<unsigned long long>(st.served_fill));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "all";
  const int n = argc > 2 ? std::max(10, std::atoi(argv[2])) : 0;
  const auto report = dsl::lint_paths({"templates"});
  if (what == "passthrough" || what == "all") passthrough(n ? n : 5000);
  if (what == "hits" || what == "all") {
    hits(report, n ? n : 20000, true);
    hits(report, n ? n : 20000, false);  // what a run's journal costs (RuntimeConfig::explain_runs)
  }
  if (what == "routing" || what == "all") routing(report, n ? n : 20);
  return 0;
}

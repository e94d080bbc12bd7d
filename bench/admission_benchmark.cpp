// Admission decision costs, with Google Benchmark:  ./build/admission_benchmark
// Targets (docs/benchmarks.md): an Action 1 decision with K = 8 candidates <= 10 us; an
// Action 0 decision <= 2 us; an envelope update <= 100 ns.
#include "runtime/admission/controller.hpp"

#include <benchmark/benchmark.h>

#include <vector>

namespace {

using namespace dynrt::admission;
using dynrt::ManualClock;

std::vector<Candidate> eight() {
  std::vector<Candidate> c;
  for (std::size_t r = 0; r < 8; ++r) {
    c.push_back(Candidate{r, 1500.0 + 200.0 * static_cast<double>(r),
                          Footprint{1000.0 + 300.0 * static_cast<double>(r), 0.002 + 0.001 * r}});
  }
  return c;
}

// A class with some history, so posteriors and the ridge model are not at their priors.
void warm(Controller& ctl, const dynrt::Hash128& k) {
  const auto cands = eight();
  for (BranchId b = 1; b <= 50; ++b) {
    if (!ctl.open_branch(b, k).open) continue;
    const FillDecision d = ctl.admit(b, cands, 8);
    ctl.resolve(b, b % 3 == 0 ? std::optional<std::size_t>(0) : std::optional<std::size_t>(1));
    for (const FillChoice& f : d.admitted)
      ctl.release(f.reservation);
    ctl.settle(b);
  }
}

void BM_Action1_K8(benchmark::State& state) {
  ManualClock clock;
  AdmissionConfig config;
  config.cold_trials = 0;
  config.generation_audit = 1.0;  // keep the branch open whatever the model says
  Controller ctl(clock, config);
  const dynrt::Hash128 k = dynrt::xxh3_128("bench/class");
  ctl.observe_load(0.3, 0.05);
  warm(ctl, k);
  const auto cands = eight();
  BranchId b = 1000;
  std::size_t admitted = 0;
  for (auto _ : state) {
    state.PauseTiming();
    ctl.open_branch(++b, k);
    state.ResumeTiming();
    const FillDecision d = ctl.admit(b, cands, 8);  // the decision, with its reservations
    state.PauseTiming();
    admitted += d.admitted.size();
    // Resolving moves every rank's quantile level, so the next decision recomputes all eight
    // selection quantiles: the expensive case.
    ctl.resolve(b, b % 3 == 0 ? std::optional<std::size_t>(0) : std::optional<std::size_t>(1));
    for (const FillChoice& f : d.admitted)
      ctl.release(f.reservation);
    ctl.settle(b);
    state.ResumeTiming();
  }
  state.counters["admitted_per_decision"] =
      static_cast<double>(admitted) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_Action1_K8);

void BM_Action1_K8_Pure(benchmark::State& state) {
  const PriceCurves curves;
  std::vector<PricedCandidate> c;
  for (const Candidate& cand : eight()) {
    c.push_back(PricedCandidate{0.6 / (1.0 + static_cast<double>(cand.rank)), cand.gain_ms,
                                cand.footprint});
  }
  const LoadView v{0.2, 0.2, 0.3};
  for (auto _ : state)
    benchmark::DoNotOptimize(admit_fills(c, v, curves, Budget{8, 0.2}));
}
BENCHMARK(BM_Action1_K8_Pure);

void BM_Action0(benchmark::State& state) {
  ManualClock clock;
  AdmissionConfig config;
  config.cold_trials = 4;
  Controller ctl(clock, config);
  const dynrt::Hash128 k = dynrt::xxh3_128("bench/class");
  ctl.observe_load(0.3, 0.05);
  warm(ctl, k);
  BranchId b = 100000;
  for (auto _ : state) {
    benchmark::DoNotOptimize(ctl.open_branch(++b, k));  // context, U0, the trial record
    state.PauseTiming();
    ctl.settle(b);  // keeps the open-branch table from growing
    state.ResumeTiming();
  }
}
BENCHMARK(BM_Action0);

void BM_Action0_Ucb(benchmark::State& state) {
  ClassModel m;
  for (int i = 0; i < 100; ++i) {
    m.observe(make_context(ContextInputs{0.01 * i, 0.005 * i, 0.5, 0.1, 0.2}), 100.0 - i);
  }
  const Context x = make_context(ContextInputs{0.3, 0.2, 0.6, 0.1, 0.2});
  for (auto _ : state)
    benchmark::DoNotOptimize(m.ucb(x));
}
BENCHMARK(BM_Action0_Ucb);

void BM_EnvelopeUpdate(benchmark::State& state) {
  LoadEnvelope env(std::chrono::seconds(5));
  dynrt::TimePoint t{};
  double rho = 0;
  for (auto _ : state) {
    t += std::chrono::milliseconds(50);  // a 20 Hz probe: about 100 samples in the window
    rho = rho > 0.9 ? 0.1 : rho + 0.01;
    env.observe(t, LoadView{0.1, 0.1, rho});
  }
}
BENCHMARK(BM_EnvelopeUpdate);

void BM_EnvelopeRead(benchmark::State& state) {
  LoadEnvelope env(std::chrono::seconds(5));
  dynrt::TimePoint t{};
  for (int i = 0; i < 1000; ++i) {
    t += std::chrono::milliseconds(50);
    env.observe(t, LoadView{0.1, 0.1, 0.001 * i});
  }
  for (auto _ : state)
    benchmark::DoNotOptimize(env.view(t + std::chrono::milliseconds(20)));
}
BENCHMARK(BM_EnvelopeRead);

}  // namespace

BENCHMARK_MAIN();

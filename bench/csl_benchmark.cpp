// Reuse names and the Completed-Subgraph Library, with Google Benchmark:
//   ./build/csl_benchmark
// Targets (docs/benchmarks.md): a reuse name of a 4 KB chat request <= 2 us; a probe hit or
// miss at 1M entries, median <= 200 ns. Metadata per entry: bench/csl_memory.cpp; cascade
// cost versus its size: bench/csl_cascade.cpp and bench/csl_cascade.sh.
#include "runtime/clock.hpp"
#include "runtime/csl/store.hpp"
#include "runtime/reuse_name.hpp"

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace {

using dynrt::Hash128;
using dynrt::ManualClock;
using dynrt::xxh3_128;
using namespace dynrt::csl;

nlohmann::json chat_request(std::size_t bytes) {
  nlohmann::json body = {{"model", "qwen3-32b"}, {"temperature", 0}, {"max_tokens", 512},
                         {"top_p", 1.0},         {"seed", 7},        {"stream", true}};
  const std::size_t turns = 6;
  for (std::size_t i = 0; i < turns; ++i) {
    body["messages"].push_back(
        {{"role", i % 2 ? "assistant" : "user"},
         {"content", std::string(bytes / turns, 'a' + static_cast<char>(i))}});
  }
  return body;
}

void BM_ReuseName4KB(benchmark::State& state) {
  const nlohmann::json body = chat_request(4096);
  const Hash128 stage = xxh3_128("stage");
  for (auto _ : state)
    benchmark::DoNotOptimize(dynrt::reuse_name(stage, "/v1/chat/completions", body));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 4096);
}
BENCHMARK(BM_ReuseName4KB);

void BM_ReuseEncoding4KB(benchmark::State& state) {
  const nlohmann::json body = chat_request(4096);
  const Hash128 stage = xxh3_128("stage");
  for (auto _ : state) {
    benchmark::DoNotOptimize(dynrt::reuse_encoding(stage, "/v1/chat/completions", body));
  }
}
BENCHMARK(BM_ReuseEncoding4KB);

Hash128 name_of(std::uint64_t i) {
  return Hash128{i * 0x9E3779B97F4A7C15ULL, ~i};
}

// One store of `n` confirmed entries (one read each, 1,000 records), shared by the probes.
struct Filled {
  ManualClock clock;
  std::unique_ptr<Store> store;
  explicit Filled(std::size_t n) {
    Limits limits;
    limits.max_entries = n + 1;
    store = std::make_unique<Store>(clock, limits);
    std::vector<std::string> key(1);
    for (std::size_t i = 0; i < n; ++i) {
      Insert in;
      in.name = name_of(i);
      in.bytes = "r";
      key[0] = "doc:" + std::to_string(i % 1000);
      in.reads = store->snapshot(key);
      store->put_confirmed(std::move(in));
    }
  }
};

Filled& million() {
  static Filled f(1'000'000);
  return f;
}

void BM_ProbeHit1M(benchmark::State& state) {
  Store& store = *million().store;
  std::uint64_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(store.probe(name_of(i)));
    i = (i + 7919) % 1'000'000;  // stride through the table: no cache-friendly order
  }
}
BENCHMARK(BM_ProbeHit1M)->Repetitions(5)->ReportAggregatesOnly(true);

void BM_ProbeMiss1M(benchmark::State& state) {
  Store& store = *million().store;
  std::uint64_t i = 2'000'000;
  for (auto _ : state) {
    benchmark::DoNotOptimize(store.probe(name_of(i)));
    i += 7919;
  }
}
BENCHMARK(BM_ProbeMiss1M)->Repetitions(5)->ReportAggregatesOnly(true);

}  // namespace

BENCHMARK_MAIN();

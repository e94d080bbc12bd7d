// How long `dynrt lint` takes on the shipped templates and on hostile input.
//   ./build/lint_benchmark            (from the repository root)
// Peak memory of the same hostile inputs through the real binary: bench/lint_hostile.sh.
#include "dsl/lint.hpp"

#include <benchmark/benchmark.h>

#include <fstream>
#include <sstream>
#include <string>

namespace {

using dynrt::dsl::lint_text;

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string alias_bomb() {
  std::string s = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (char c = 'b'; c <= 'i'; ++c) {
    const char p = static_cast<char>(c - 1);
    s += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 10; ++i)
      s += std::string(i ? ", *" : "*") + p;
    s += "]\n";
  }
  return s;
}

void lint_input(benchmark::State& state, const std::string& text) {
  for (auto _ : state) {
    auto report = lint_text("bench.yaml", text);
    benchmark::DoNotOptimize(report);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(text.size()));
}

void BM_Template(benchmark::State& state, const char* path) {
  lint_input(state, read(path));
}
BENCHMARK_CAPTURE(BM_Template, routing, "templates/routing.yaml")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Template, react, "templates/react.yaml")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Template, subagent, "templates/subagent.yaml")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Template, hci, "templates/hci.yaml")->Unit(benchmark::kMicrosecond);

void BM_AliasBomb(benchmark::State& state) {
  lint_input(state, alias_bomb());
}
BENCHMARK(BM_AliasBomb)->Unit(benchmark::kMillisecond);

void BM_Nesting10k(benchmark::State& state) {
  lint_input(state, "a: " + std::string(10000, '[') + std::string(10000, ']') + "\n");
}
BENCHMARK(BM_Nesting10k)->Unit(benchmark::kMillisecond);

void BM_Scalar10MB(benchmark::State& state) {
  lint_input(state, "a: " + std::string(10u << 20, 'x') + "\n");
}
BENCHMARK(BM_Scalar10MB)->Unit(benchmark::kMillisecond);

// The largest file the limits let through: one scalar just under the file limit is refused
// by the scalar limit only after yaml-cpp has read it.
void BM_Scalar4MB(benchmark::State& state) {
  lint_input(state, "a: " + std::string((4u << 20) - 8, 'x') + "\n");
}
BENCHMARK(BM_Scalar4MB)->Unit(benchmark::kMillisecond);

void BM_FlatMapping(benchmark::State& state) {
  std::string text = "bulk:\n";
  for (int i = 0; i < 200000; ++i)
    text += "  k" + std::to_string(i) + ": v\n";
  lint_input(state, text);
}
BENCHMARK(BM_FlatMapping)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();

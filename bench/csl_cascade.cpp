// One invalidation cascade of N entries (target: cascade time linear in |A|).
//   ./build/csl_cascade N        prints N, the entries removed, and the write's wall time
// bench/csl_cascade.sh runs it under callgrind for N = 1 .. 100,000 and prints instructions
// per removed entry: instruction counts are exact and repeatable where wall time at large N
// also measures the memory hierarchy.
//
// Shape: one root reads the written record; half of the other entries are its consumers (a
// fan), the other half each consume the entry before them (chains of two). One write removes
// all N: the root is invalidated, the rest lose their last producer.
#include "runtime/clock.hpp"
#include "runtime/csl/store.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  using namespace dynrt::csl;
  const std::size_t n = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1000;
  if (n == 0) return 2;
  dynrt::ManualClock clock;
  Limits limits;
  limits.max_entries = n + 1;
  Store store(clock, limits);
  auto name_of = [](std::uint64_t i) { return dynrt::Hash128{i * 0x9E3779B97F4A7C15ULL, ~i}; };
  const std::vector<std::string> key{"doc:root"};
  Insert root;
  root.name = name_of(0);
  root.reads = store.snapshot(key);
  const EntryRef root_ref = store.put_confirmed(std::move(root)).ref;
  EntryRef previous = root_ref;
  for (std::size_t i = 1; i < n; ++i) {
    Insert in;
    in.name = name_of(i);
    in.producers = {i % 2 ? root_ref : previous};
    previous = store.put_confirmed(std::move(in)).ref;
  }
  const auto start = std::chrono::steady_clock::now();
  const std::size_t removed = store.write(key);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("%zu entries, %zu removed, write %.3f ms (%.1f ns per entry)\n", n, removed, ms,
              ms * 1e6 / static_cast<double>(removed));
  return removed == n ? 0 : 1;
}

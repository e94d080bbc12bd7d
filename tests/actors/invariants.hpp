// Invariants every actor-level scenario checks when it ends (the test rigs' destructors).
#pragma once

#include "actors/runtime.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace dynrt::testing {

// Waits (bounded, for an event) until `done(stats)` holds; returns the last statistics read.
// A branch actor counts what a demand told it after that demand was answered, so counters a
// caller reads right after its last answer may not include it yet.
template <class Done>
RuntimeStats await_stats(const Runtime& rt, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  RuntimeStats s = rt.stats();
  while (!done(s) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
    s = rt.stats();
  }
  return s;
}

// The fill budget's invariant: the fill slots and the KV share the pricing actor holds are
// exactly what running fills hold, so once no fill runs, none is held. Every path that
// reserves (a fill's end, a cancel, an abandoned or expired branch, a dropped run, a refused
// or late admission) must release exactly once. Waits, bounded, for the fills to end and
// their releases to arrive: it waits for an event, not for time to pass.
inline void expect_budget_returned(const Runtime& rt, const char* where = "") {
  const auto s = await_stats(rt, [](const RuntimeStats& x) {
    return x.fills_running == 0 && x.fills_in_flight == 0 && x.kv_reserved <= 1e-9;
  });
  EXPECT_EQ(s.fills_running, 0u) << where << ": fills still running";
  EXPECT_EQ(s.fills_in_flight, 0) << where << ": fill slots held with no fill running";
  EXPECT_NEAR(s.kv_reserved, 0.0, 1e-9) << where << ": KV held with no fill running";
}

}  // namespace dynrt::testing

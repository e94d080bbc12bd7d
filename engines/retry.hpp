// Retries of canonical engine requests: which faults are retried, how long to back off, and a
// budget that keeps a failing engine from being hammered (Envoy's retry budget).
//
// A request is retried only when it is canonical (a fill's failure is a miss, never retried),
// nothing of its response has reached its sink, fewer than `max_attempts` attempts were made,
// and the fault says the engine did not run it: refused, connect_timeout, or HTTP 429, 502,
// 503. A 500 is not retried (the engine ran the request and failed; a second run most likely
// fails the same way, at full cost), nor are timeouts after the request was sent (first byte,
// idle, total: the engine may still be running it) or malformed/truncated answers. A 429 or 503
// carrying a Retry-After longer than `retry_after_cap` is not retried: the caller gets the
// engine's answer at once rather than a silent wait. Requests that are retrying at one time are
// at most max(budget_min, budget_ratio x canonical requests in flight).
//
// The backoff is full jitter: uniform in [0, min(backoff_max, backoff_base x 2^(attempt-1))],
// drawn from a seeded generator, and never shorter than the engine's Retry-After.
//
// RetryPolicy is a plain, single-threaded state class; its owner serializes calls.
#pragma once

#include "engines/engine.hpp"
#include "runtime/clock.hpp"

#include <cstdint>
#include <optional>
#include <random>

namespace dynrt::engines {

struct RetryOptions {
  int max_attempts = 3;       // attempts in all, the first included; 1 turns retries off
  double budget_ratio = 0.2;  // retrying requests <= this share of canonical requests in flight
  int budget_min = 3;         // ... but this many may always retry
  Duration backoff_base = std::chrono::milliseconds(25);
  Duration backoff_max = std::chrono::milliseconds(250);
  Duration retry_after_cap = std::chrono::seconds(1);  // a longer Retry-After is not waited for
  std::uint64_t seed = 0x5eed;                         // of the backoff jitter
};

// Whether a fault says the engine did not run the request, so that a retry is safe.
bool retryable(const EngineError& error);

struct RetryStats {
  std::uint64_t retries = 0;         // retries scheduled
  std::uint64_t budget_refused = 0;  // retryable faults not retried: the budget was spent
  int in_flight = 0;                 // canonical requests in flight
  int retrying = 0;                  // ... of them retrying now
};

class RetryPolicy {
 public:
  explicit RetryPolicy(RetryOptions options = {});

  // A canonical request started; it ends with finished(), once.
  void started();
  void finished(bool retried);
  // After attempt `attempt` (1-based) of a request failed with `error`: the delay before the
  // next attempt, or nothing when the error is final. `delivered` says a chunk of the response
  // already reached the sink; `retry_after` is the engine's Retry-After, when it sent one.
  std::optional<Duration> next(RequestKind kind, const EngineError& error, int attempt,
                               bool delivered, std::optional<Duration> retry_after = {});

  const RetryOptions& options() const { return options_; }
  const RetryStats& stats() const { return stats_; }

 private:
  RetryOptions options_;
  RetryStats stats_;
  std::mt19937_64 rng_;
};

}  // namespace dynrt::engines

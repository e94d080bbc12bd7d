// The retry policy and the circuit breaker as plain state classes: an injected ManualClock, a
// seeded jitter, no network and no sleeps.
#include "engines/breaker.hpp"
#include "engines/retry.hpp"

#include <gtest/gtest.h>

namespace dynrt::engines {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

EngineError status(int s) {
  return EngineError{ErrorKind::http_status, s, "{}", "HTTP"};
}
EngineError kind(ErrorKind k) {
  return EngineError{k, 0, {}, "fault"};
}

TEST(Retry, OnlyFaultsWhereTheEngineDidNotRunTheRequestAreRetryable) {
  EXPECT_TRUE(retryable(kind(ErrorKind::refused)));
  EXPECT_TRUE(retryable(kind(ErrorKind::connect_timeout)));
  EXPECT_TRUE(retryable(status(429)));
  EXPECT_TRUE(retryable(status(502)));
  EXPECT_TRUE(retryable(status(503)));
  EXPECT_FALSE(retryable(status(500)));
  EXPECT_FALSE(retryable(status(504)));
  EXPECT_FALSE(retryable(status(400)));
  for (const ErrorKind k : {ErrorKind::first_byte_timeout, ErrorKind::idle_timeout,
                            ErrorKind::total_timeout, ErrorKind::malformed, ErrorKind::truncated,
                            ErrorKind::cancelled, ErrorKind::rejected, ErrorKind::internal}) {
    EXPECT_FALSE(retryable(kind(k))) << to_string(k);
  }
}

TEST(Retry, CanonicalRequestsRetryUpToMaxAttemptsFillsNever) {
  RetryPolicy p;  // max_attempts 3
  p.started();
  EXPECT_TRUE(p.next(RequestKind::canonical, status(503), 1, false));
  EXPECT_TRUE(p.next(RequestKind::canonical, status(503), 2, false));
  EXPECT_FALSE(p.next(RequestKind::canonical, status(503), 3, false));
  p.finished(true);
  EXPECT_EQ(p.stats().retries, 2u);
  EXPECT_EQ(p.stats().retrying, 0);
  EXPECT_FALSE(p.next(RequestKind::fill, kind(ErrorKind::refused), 1, false));
  EXPECT_FALSE(p.next(RequestKind::canonical, status(500), 1, false));
}

TEST(Retry, NeverAfterAChunkReachedTheSink) {
  RetryPolicy p;
  p.started();
  EXPECT_FALSE(p.next(RequestKind::canonical, kind(ErrorKind::refused), 1, /*delivered=*/true));
  EXPECT_EQ(p.stats().retries, 0u);
}

TEST(Retry, BackoffIsJitteredWithinItsCeilingAndReproducibleFromTheSeed) {
  RetryOptions o;
  o.max_attempts = 10;
  o.budget_min = 100;
  RetryPolicy a(o), b(o);
  a.started();
  b.started();
  for (int attempt = 1; attempt < 10; ++attempt) {
    const auto da = a.next(RequestKind::canonical, kind(ErrorKind::refused), attempt, false);
    const auto db = b.next(RequestKind::canonical, kind(ErrorKind::refused), attempt, false);
    ASSERT_TRUE(da && db);
    EXPECT_EQ(*da, *db) << "same seed, same delays";
    const Duration ceiling = std::min(o.backoff_max, o.backoff_base * (1 << (attempt - 1)));
    EXPECT_GE(*da, Duration::zero());
    EXPECT_LE(*da, ceiling) << "attempt " << attempt;
  }
  o.seed = 7;
  RetryPolicy c(o);
  c.started();
  bool differs = false;
  RetryPolicy d(RetryOptions{.max_attempts = 10, .budget_min = 100});
  d.started();
  for (int attempt = 1; attempt < 10; ++attempt) {
    differs =
        differs || *c.next(RequestKind::canonical, kind(ErrorKind::refused), attempt, false) !=
                       *d.next(RequestKind::canonical, kind(ErrorKind::refused), attempt, false);
  }
  EXPECT_TRUE(differs) << "another seed, other delays";
}

TEST(Retry, RetryAfterIsHonouredUpToTheCap) {
  RetryPolicy p;  // cap 1 s
  p.started();
  const auto wait = p.next(RequestKind::canonical, status(429), 1, false, seconds(1));
  ASSERT_TRUE(wait);
  EXPECT_EQ(*wait, seconds(1)) << "never sooner than the engine asked";
  EXPECT_FALSE(p.next(RequestKind::canonical, status(503), 2, false, seconds(2)))
      << "longer than the cap: the caller gets the engine's answer now";
  RetryPolicy q;
  q.started();
  EXPECT_FALSE(q.next(RequestKind::canonical, status(429), 1, false, seconds(30)));
  EXPECT_TRUE(q.next(RequestKind::canonical, status(429), 1, false, std::nullopt));
}

TEST(Retry, TheBudgetBoundsRequestsRetryingAtOnce) {
  RetryOptions o;
  o.budget_min = 2;
  o.budget_ratio = 0.2;
  RetryPolicy p(o);
  for (int i = 0; i < 20; ++i)
    p.started();
  // 20 in flight: max(2, 0.2 x 20) = 4 may retry at once.
  int granted = 0;
  for (int i = 0; i < 10; ++i)
    granted += p.next(RequestKind::canonical, status(502), 1, false) ? 1 : 0;
  EXPECT_EQ(granted, 4);
  EXPECT_EQ(p.stats().budget_refused, 6u);
  // A retrying request's later attempts need no new place.
  EXPECT_TRUE(p.next(RequestKind::canonical, status(502), 2, false));
  EXPECT_FALSE(p.next(RequestKind::canonical, status(502), 1, false));
  p.finished(true);  // one retrying request ends, another starts: the place frees
  p.started();
  EXPECT_TRUE(p.next(RequestKind::canonical, status(502), 1, false));
  // With few requests in flight the minimum still allows retries.
  RetryPolicy lone(o);
  lone.started();
  EXPECT_TRUE(lone.next(RequestKind::canonical, status(502), 1, false));
  EXPECT_TRUE(lone.next(RequestKind::canonical, status(502), 1, false));
  EXPECT_FALSE(lone.next(RequestKind::canonical, status(502), 1, false));
}

// -- the circuit breaker -----------------------------------------------------------------------

struct BreakerRig {
  ManualClock clock;
  CircuitBreaker breaker;
  explicit BreakerRig(BreakerOptions o = {}) : breaker(o, clock) {}
  // A request of `k` that is admitted and ends with `o`; false if it was refused.
  bool run(RequestKind k, Outcome o) {
    const Admission a = breaker.admit(k);
    if (a.allowed) breaker.record(k, a.probe, o);
    return a.allowed;
  }
};

TEST(Breaker, ConsecutiveFailuresStopFillsButNotCanonicalRequests) {
  BreakerRig r;  // fills stop after 3; canonical requests never by default
  EXPECT_TRUE(r.run(RequestKind::fill, Outcome::failure));
  EXPECT_TRUE(r.run(RequestKind::canonical, Outcome::failure));
  EXPECT_EQ(r.breaker.state(RequestKind::fill), CircuitState::closed);
  EXPECT_TRUE(r.run(RequestKind::canonical, Outcome::failure));
  EXPECT_EQ(r.breaker.state(RequestKind::fill), CircuitState::open);
  EXPECT_TRUE(r.breaker.fills_blocked());
  EXPECT_FALSE(r.run(RequestKind::fill, Outcome::success)) << "refused without running";
  EXPECT_EQ(r.breaker.stats().fills_refused, 1u);
  for (int i = 0; i < 50; ++i)
    EXPECT_TRUE(r.run(RequestKind::canonical, Outcome::failure));
  EXPECT_EQ(r.breaker.state(RequestKind::canonical), CircuitState::closed);
  EXPECT_EQ(r.breaker.stats().fill_trips, 1u);
}

TEST(Breaker, ASuccessBreaksTheRun) {
  BreakerRig r;
  r.run(RequestKind::fill, Outcome::failure);
  r.run(RequestKind::fill, Outcome::failure);
  r.run(RequestKind::canonical, Outcome::success);
  r.run(RequestKind::fill, Outcome::failure);
  r.run(RequestKind::fill, Outcome::failure);
  EXPECT_EQ(r.breaker.state(RequestKind::fill), CircuitState::closed);
  r.run(RequestKind::fill, Outcome::neutral);  // a cancellation says nothing
  r.run(RequestKind::fill, Outcome::failure);
  EXPECT_EQ(r.breaker.state(RequestKind::fill), CircuitState::open);
}

TEST(Breaker, AFailureRatioOverTheWindowStopsFills) {
  BreakerOptions o;
  o.fill_failures = 100;  // only the ratio
  o.min_requests = 10;
  o.fill_ratio = 0.5;
  o.window = seconds(10);
  BreakerRig r(o);
  for (int i = 0; i < 9; ++i) {  // alternate: no run of failures, half of them failed
    r.run(RequestKind::canonical, i % 2 ? Outcome::failure : Outcome::success);
    r.clock.advance(milliseconds(100));
  }
  EXPECT_EQ(r.breaker.state(RequestKind::fill), CircuitState::closed) << "9 < min_requests";
  r.run(RequestKind::canonical, Outcome::failure);  // 5 of 10
  EXPECT_EQ(r.breaker.state(RequestKind::fill), CircuitState::open);
  // Old outcomes leave the window: the same pattern spread over time does not trip it.
  BreakerRig slow(o);
  for (int i = 0; i < 30; ++i) {
    slow.run(RequestKind::canonical, i % 3 ? Outcome::success : Outcome::failure);
    slow.clock.advance(seconds(1));
  }
  EXPECT_EQ(slow.breaker.state(RequestKind::fill), CircuitState::closed);
}

TEST(Breaker, AfterTheCooldownOneProbeDecides) {
  BreakerRig r;  // cooldown 5 s
  for (int i = 0; i < 3; ++i)
    r.run(RequestKind::fill, Outcome::failure);
  ASSERT_EQ(r.breaker.state(RequestKind::fill), CircuitState::open);
  r.clock.advance(milliseconds(4999));
  EXPECT_FALSE(r.breaker.admit(RequestKind::fill).allowed);
  r.clock.advance(milliseconds(1));
  EXPECT_EQ(r.breaker.state(RequestKind::fill), CircuitState::half_open);
  EXPECT_FALSE(r.breaker.fills_blocked());
  const Admission probe = r.breaker.admit(RequestKind::fill);
  EXPECT_TRUE(probe.allowed && probe.probe);
  EXPECT_TRUE(r.breaker.fills_blocked()) << "one probe at a time";
  EXPECT_FALSE(r.breaker.admit(RequestKind::fill).allowed);
  r.breaker.record(RequestKind::fill, true, Outcome::failure);  // the probe failed: reopen
  EXPECT_EQ(r.breaker.state(RequestKind::fill), CircuitState::open);
  r.clock.advance(seconds(5));
  const Admission again = r.breaker.admit(RequestKind::fill);
  ASSERT_TRUE(again.probe);
  r.breaker.record(RequestKind::fill, true, Outcome::neutral);  // cancelled: another may probe
  const Admission third = r.breaker.admit(RequestKind::fill);
  ASSERT_TRUE(third.probe);
  r.breaker.record(RequestKind::fill, true, Outcome::success);
  EXPECT_EQ(r.breaker.state(RequestKind::fill), CircuitState::closed);
  EXPECT_EQ(r.breaker.stats().consecutive_failures, 0);
  EXPECT_TRUE(r.run(RequestKind::fill, Outcome::failure)) << "closed: a fresh run starts";
  EXPECT_EQ(r.breaker.state(RequestKind::fill), CircuitState::closed);
  EXPECT_EQ(r.breaker.stats().fill_trips, 1u) << "a probe's failure reopens, it is no new trip";
}

TEST(Breaker, CanonicalRequestsStopAtTheHigherThresholdWhenEnabled) {
  BreakerOptions o;
  o.fill_failures = 2;
  o.canonical_failures = 5;
  BreakerRig r(o);
  for (int i = 0; i < 4; ++i)
    EXPECT_TRUE(r.run(RequestKind::canonical, Outcome::failure));
  EXPECT_EQ(r.breaker.state(RequestKind::fill), CircuitState::open) << "fills stop first";
  EXPECT_EQ(r.breaker.state(RequestKind::canonical), CircuitState::closed);
  EXPECT_TRUE(r.run(RequestKind::canonical, Outcome::failure));
  EXPECT_EQ(r.breaker.state(RequestKind::canonical), CircuitState::open);
  EXPECT_FALSE(r.run(RequestKind::canonical, Outcome::success));
  EXPECT_EQ(r.breaker.stats().canonical_refused, 1u);
  // Both cool down; while the canonical circuit is not closed fills stay refused.
  r.clock.advance(o.cooldown);
  EXPECT_FALSE(r.breaker.admit(RequestKind::fill).allowed);
  const Admission probe = r.breaker.admit(RequestKind::canonical);
  ASSERT_TRUE(probe.probe);
  r.breaker.record(RequestKind::canonical, true, Outcome::success);
  EXPECT_EQ(r.breaker.state(RequestKind::canonical), CircuitState::closed);
  const Admission fill_probe = r.breaker.admit(RequestKind::fill);
  EXPECT_TRUE(fill_probe.allowed && fill_probe.probe) << "then the fills' own probe";
}

TEST(Breaker, HowErrorsCount) {
  EXPECT_EQ(outcome_of(status(500)), Outcome::failure);
  EXPECT_EQ(outcome_of(status(503)), Outcome::failure);
  EXPECT_EQ(outcome_of(status(429)), Outcome::failure);
  EXPECT_EQ(outcome_of(status(400)), Outcome::success) << "the engine is alive";
  EXPECT_EQ(outcome_of(kind(ErrorKind::refused)), Outcome::failure);
  EXPECT_EQ(outcome_of(kind(ErrorKind::first_byte_timeout)), Outcome::failure);
  EXPECT_EQ(outcome_of(kind(ErrorKind::truncated)), Outcome::failure);
  EXPECT_EQ(outcome_of(kind(ErrorKind::cancelled)), Outcome::neutral);
  EXPECT_EQ(outcome_of(kind(ErrorKind::rejected)), Outcome::neutral);
}

}  // namespace
}  // namespace dynrt::engines

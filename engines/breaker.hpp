// A per-engine circuit breaker that stops sending fills to a failing engine first.
//
// Every finished request (fill or canonical) is one outcome: a success (the engine answered,
// including a 4xx other than 429: it is alive), a failure (no connection, a deadline, a 429 or
// 5xx, an error in a 200 response with such a code or none, a malformed or truncated answer) or
// neutral (cancelled; a request the breaker refused itself). Two circuits trip on them: the
// fills' circuit at a low threshold, the canonical circuit at a higher one. A circuit trips
// when the run of consecutive failures reaches its count, or when the outcomes of the last
// `window` are at least `min_requests` and the failed share reaches its ratio. While a circuit
// is open its requests are refused at once (no network I/O); fills are refused too while the
// canonical circuit is not closed. After `cooldown` the circuit is half-open: one request of
// its kind goes through as a probe; the probe's success closes the circuit (and forgets the
// outcomes so far), its failure opens it for another cooldown, a neutral end lets the next
// request probe.
//
// Canonical requests are never refused by default (`canonical_failures` = 0): dynrt should not
// be the reason a demand fails, and the engine's own error says more than a refusal would.
//
// CircuitBreaker is a plain, single-threaded state class over an injected clock; its owner
// serializes calls.
#pragma once

#include "engines/engine.hpp"
#include "runtime/clock.hpp"

#include <cstdint>
#include <deque>
#include <string_view>

namespace dynrt::engines {

struct BreakerOptions {
  Duration window = std::chrono::seconds(10);  // the failure ratio is over outcomes this recent
  int min_requests = 10;                       // ... once the window holds this many
  int fill_failures = 3;                       // consecutive failures that stop fills; 0: never
  double fill_ratio = 0.5;                     // failed share of the window that stops fills
  int canonical_failures = 0;    // consecutive failures that stop canonical requests; 0: never
  double canonical_ratio = 0.9;  // ... and the failed share that does, when enabled
  Duration cooldown = std::chrono::seconds(5);  // open this long, then one probe
};

enum class CircuitState {
  closed,     ///< requests go through
  open,       ///< requests are refused until the cooldown ends
  half_open,  ///< one probe goes through; its outcome closes or reopens the circuit
};
std::string_view to_string(CircuitState s);

enum class Outcome {
  success,  ///< the engine answered
  failure,  ///< the engine failed (see the header comment)
  neutral,  ///< says nothing about the engine's health
};

// How a finished request counts for the breaker.
Outcome outcome_of(const EngineError& error);

struct Admission {
  bool allowed = true;
  bool probe = false;  // the request probes a half-open circuit: report its outcome as such
};

struct BreakerStats {
  std::uint64_t fills_refused = 0;
  std::uint64_t canonical_refused = 0;
  std::uint64_t fill_trips = 0;  // closed -> open transitions of the fills' circuit
  std::uint64_t canonical_trips = 0;
  int consecutive_failures = 0;
};

class CircuitBreaker {
 public:
  CircuitBreaker(BreakerOptions options, const Clock& clock);

  // Whether a request of `kind` may go to the engine now.
  Admission admit(RequestKind kind);
  // A request admitted by admit() ended.
  void record(RequestKind kind, bool probe, Outcome outcome);

  // The circuit that governs `kind`, as admit() would find it now (an open circuit whose
  // cooldown is over reads half_open).
  CircuitState state(RequestKind kind) const;
  // Whether fills are refused now (either circuit open, or a fill probe out).
  bool fills_blocked() const;
  // How long until the circuit that refuses `kind` lets a probe through (zero: it does now, or
  // a probe is out): what a refusal's Retry-After says.
  Duration cooldown_left(RequestKind kind) const;
  BreakerStats stats() const;
  const BreakerOptions& options() const { return options_; }

 private:
  struct Circuit {
    CircuitState state = CircuitState::closed;
    TimePoint opened_at{};
    bool probe_out = false;
    int failures = 0;  // its consecutive-failure threshold; 0: never trips
    double ratio = 1;
  };
  Admission admit(Circuit& c, std::uint64_t& refused);
  CircuitState effective(const Circuit& c) const;
  bool tripped(const Circuit& c) const;
  void trip(Circuit& c, std::uint64_t& trips);
  void close(Circuit& c);
  void prune();

  BreakerOptions options_;
  const Clock& clock_;
  Circuit fills_;
  Circuit canonical_;
  std::deque<std::pair<TimePoint, bool>> window_;  // (when, failed)
  int window_failures_ = 0;
  BreakerStats stats_;
};

}  // namespace dynrt::engines

#include "engines/breaker.hpp"

#include <algorithm>

namespace dynrt::engines {

std::string_view to_string(CircuitState s) {
  switch (s) {
    case CircuitState::closed:
      return "closed";
    case CircuitState::open:
      return "open";
    case CircuitState::half_open:
      return "half_open";
  }
  return "closed";
}

Outcome outcome_of(const EngineError& error) {
  switch (error.kind) {
    case ErrorKind::http_status:
    case ErrorKind::engine_error:  // as its status says: a 4xx is the request's fault
      return error.status == 429 || error.status >= 500 ? Outcome::failure : Outcome::success;
    case ErrorKind::cancelled:
    case ErrorKind::rejected:
    case ErrorKind::internal:
      return Outcome::neutral;
    default:
      return Outcome::failure;
  }
}

CircuitBreaker::CircuitBreaker(BreakerOptions options, const Clock& clock)
    : options_(options), clock_(clock) {
  fills_.failures = options_.fill_failures;
  fills_.ratio = options_.fill_ratio;
  canonical_.failures = options_.canonical_failures;
  canonical_.ratio = options_.canonical_ratio;
}

CircuitState CircuitBreaker::effective(const Circuit& c) const {
  if (c.state == CircuitState::open && clock_.now() >= c.opened_at + options_.cooldown)
    return CircuitState::half_open;
  return c.state;
}

Admission CircuitBreaker::admit(Circuit& c, std::uint64_t& refused) {
  const CircuitState s = effective(c);
  if (s == CircuitState::closed) return {};
  if (s == CircuitState::half_open && !(c.state == CircuitState::half_open && c.probe_out)) {
    c.state = CircuitState::half_open;
    c.probe_out = true;
    return {true, true};
  }
  ++refused;
  return {false, false};
}

Admission CircuitBreaker::admit(RequestKind kind) {
  if (kind == RequestKind::canonical) return admit(canonical_, stats_.canonical_refused);
  if (effective(canonical_) != CircuitState::closed) {  // fills stop first, and stay stopped
    ++stats_.fills_refused;
    return {false, false};
  }
  return admit(fills_, stats_.fills_refused);
}

void CircuitBreaker::prune() {
  const TimePoint horizon = clock_.now() - options_.window;
  while (!window_.empty() && window_.front().first < horizon) {
    if (window_.front().second) --window_failures_;
    window_.pop_front();
  }
}

bool CircuitBreaker::tripped(const Circuit& c) const {
  if (c.failures <= 0) return false;
  if (stats_.consecutive_failures >= c.failures) return true;
  const auto n = static_cast<int>(window_.size());
  return n >= options_.min_requests && n > 0 &&
         static_cast<double>(window_failures_) / n >= c.ratio;
}

void CircuitBreaker::trip(Circuit& c, std::uint64_t& trips) {
  c.state = CircuitState::open;
  c.opened_at = clock_.now();
  c.probe_out = false;
  ++trips;
}

void CircuitBreaker::close(Circuit& c) {
  c.state = CircuitState::closed;
  c.probe_out = false;
  stats_.consecutive_failures = 0;  // a fresh start: old outcomes must not trip it again
  window_.clear();
  window_failures_ = 0;
}

void CircuitBreaker::record(RequestKind kind, bool probe, Outcome outcome) {
  Circuit& c = kind == RequestKind::fill ? fills_ : canonical_;
  if (outcome != Outcome::neutral) {
    prune();
    const bool failed = outcome == Outcome::failure;
    window_.emplace_back(clock_.now(), failed);
    if (failed) ++window_failures_;
    stats_.consecutive_failures = failed ? stats_.consecutive_failures + 1 : 0;
  }
  if (probe && c.state == CircuitState::half_open) {
    c.probe_out = false;
    if (outcome == Outcome::success) close(c);
    if (outcome == Outcome::failure) {
      c.state = CircuitState::open;
      c.opened_at = clock_.now();
    }
  }
  if (outcome != Outcome::failure) return;
  if (canonical_.state == CircuitState::closed && tripped(canonical_)) {
    trip(canonical_, stats_.canonical_trips);
    if (fills_.state == CircuitState::closed) trip(fills_, stats_.fill_trips);
  }
  if (fills_.state == CircuitState::closed && tripped(fills_)) trip(fills_, stats_.fill_trips);
}

CircuitState CircuitBreaker::state(RequestKind kind) const {
  return effective(kind == RequestKind::fill ? fills_ : canonical_);
}

bool CircuitBreaker::fills_blocked() const {
  if (effective(canonical_) != CircuitState::closed) return true;
  const CircuitState s = effective(fills_);
  return s == CircuitState::open || (s == CircuitState::half_open && fills_.probe_out);
}

Duration CircuitBreaker::cooldown_left(RequestKind kind) const {
  const auto left = [&](const Circuit& c) {
    if (c.state != CircuitState::open) return Duration::zero();
    return std::max(Duration::zero(), c.opened_at + options_.cooldown - clock_.now());
  };
  if (kind == RequestKind::canonical) return left(canonical_);
  return std::max(left(canonical_), left(fills_));
}

BreakerStats CircuitBreaker::stats() const {
  return stats_;
}

}  // namespace dynrt::engines

// Time as the outside world decides it, injected so that every model in runtime/ can be
// driven by a test (LevelDB's Env, Envoy's TimeSource).
//
// The pure layers read time only through a Clock. SteadyClock is the real monotonic clock;
// ManualClock moves only when a test or a simulation tells it to. A Clock is read by the
// single thread that owns the model it is injected into; ManualClock is not thread-safe.
#pragma once

#include <chrono>

namespace dynrt {

using Duration = std::chrono::nanoseconds;
using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Duration>;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint now() const = 0;
};

// The process's monotonic clock.
class SteadyClock final : public Clock {
 public:
  TimePoint now() const override;
};

// A clock that starts at the epoch (or `start`) and moves only on set() and advance().
class ManualClock final : public Clock {
 public:
  explicit ManualClock(TimePoint start = TimePoint{}) : now_(start) {}
  TimePoint now() const override { return now_; }
  // Time never runs backwards: a set() to an earlier point is ignored.
  void set(TimePoint t) {
    if (t > now_) now_ = t;
  }
  void advance(Duration d) {
    if (d > Duration::zero()) now_ += d;
  }

 private:
  TimePoint now_;
};

}  // namespace dynrt

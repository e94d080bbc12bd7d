// The clock and timer service of the actor graph. Every deadline, TTL, wait and measured
// duration in dynrt::Runtime reads this one clock and is armed here: a branch's settle deadline
// and a drafter's time box, a demand's bounded wait for a fill, the library's TTLs and the load
// envelope's window, the idle expiry of workflow runs. RuntimeConfig::time injects it; by
// default each Runtime runs a SystemTime of its own.
//
// ManualTime moves only when told, and fires what came due on the thread that moved it, so a
// test (or a simulation) drives every time rule of the graph without waiting for real time.
#pragma once

#include "run/deadlines.hpp"
#include "runtime/clock.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

namespace dynrt {

class TimeService : public Clock {
 public:
  using Token = std::uint64_t;  // 0 is never a token
  // Calls `fire` once at `at` (at once if that has passed), on the service's own thread or the
  // one that advances it. `fire` must not block. Thread-safe.
  virtual Token arm(TimePoint at, std::function<void()> fire) = 0;
  // Forgets a deadline not yet fired; unknown and fired tokens are ignored. Thread-safe.
  virtual void disarm(Token token) = 0;
};

// Real time: the steady clock, and one thread that fires deadlines as they come.
class SystemTime final : public TimeService {
 public:
  SystemTime();
  ~SystemTime() override;
  SystemTime(const SystemTime&) = delete;
  SystemTime& operator=(const SystemTime&) = delete;

  TimePoint now() const override { return clock_.now(); }
  Token arm(TimePoint at, std::function<void()> fire) override;
  void disarm(Token token) override;
  // Fires nothing more and joins the thread. Idempotent; the destructor calls it.
  void stop();

 private:
  void run();

  SteadyClock clock_;
  std::mutex mutex_;
  std::condition_variable wake_;
  run::Deadlines<std::function<void()>> deadlines_;
  Token next_ = 1;
  bool stopping_ = false;
  std::thread thread_;
};

// Simulated time: starts at `start` and moves only on advance() and set(), which fire every
// deadline that came due, in order of due time, on the calling thread (a deadline armed by a
// firing one fires in the same call if it is due). Thread-safe: actors read and arm from their
// threads while a test advances it.
class ManualTime final : public TimeService {
 public:
  explicit ManualTime(TimePoint start = TimePoint{}) : now_(start.time_since_epoch().count()) {}

  TimePoint now() const override { return TimePoint(Duration(now_.load())); }
  Token arm(TimePoint at, std::function<void()> fire) override;
  void disarm(Token token) override;
  void advance(Duration d);
  void set(TimePoint t);  // never backwards
  std::size_t pending() const;
  // When the earliest armed deadline is due (a discrete-event loop sets the time to it).
  std::optional<TimePoint> next_due() const;

 private:
  void fire_due();

  std::atomic<Duration::rep> now_;
  mutable std::mutex mutex_;
  std::mutex firing_;  // one advance fires at a time
  run::Deadlines<std::function<void()>> deadlines_;
  Token next_ = 1;
};

}  // namespace dynrt

#include "actors/time.hpp"

#include <algorithm>

namespace dynrt {

SystemTime::SystemTime() : thread_([this] { run(); }) {}

SystemTime::~SystemTime() {
  stop();
}

TimeService::Token SystemTime::arm(TimePoint at, std::function<void()> fire) {
  Token token;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return 0;
    token = next_++;
    const auto earliest = deadlines_.next();
    deadlines_.add(token, at, std::move(fire));
    if (earliest && *earliest <= at) return token;  // the thread already wakes in time
  }
  wake_.notify_one();
  return token;
}

void SystemTime::disarm(Token token) {
  std::lock_guard lock(mutex_);
  deadlines_.cancel(token);
}

void SystemTime::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SystemTime::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    const auto next = deadlines_.next();
    if (!next) {
      wake_.wait(lock);
      continue;
    }
    const auto now = clock_.now();
    if (*next > now) {
      wake_.wait_for(lock, *next - now);
      continue;
    }
    auto due = deadlines_.pop_due(now);
    // Fired without the lock: a callback may arm again.
    lock.unlock();
    for (auto& f : due)
      f();
    lock.lock();
  }
}

TimeService::Token ManualTime::arm(TimePoint at, std::function<void()> fire) {
  std::lock_guard lock(mutex_);
  const Token token = next_++;
  deadlines_.add(token, at, std::move(fire));
  return token;
}

void ManualTime::disarm(Token token) {
  std::lock_guard lock(mutex_);
  deadlines_.cancel(token);
}

std::size_t ManualTime::pending() const {
  std::lock_guard lock(mutex_);
  return deadlines_.size();
}

std::optional<TimePoint> ManualTime::next_due() const {
  std::lock_guard lock(mutex_);
  return deadlines_.next();
}

void ManualTime::advance(Duration d) {
  if (d > Duration::zero()) set(now() + d);
}

void ManualTime::set(TimePoint t) {
  std::lock_guard firing(firing_);
  Duration::rep cur = now_.load();
  while (t.time_since_epoch().count() > cur &&
         !now_.compare_exchange_weak(cur, t.time_since_epoch().count())) {
  }
  fire_due();
}

void ManualTime::fire_due() {
  for (;;) {
    std::vector<std::function<void()>> due;
    {
      std::lock_guard lock(mutex_);
      due = deadlines_.pop_due(now());
    }
    if (due.empty()) return;
    for (auto& f : due)
      f();
  }
}

}  // namespace dynrt

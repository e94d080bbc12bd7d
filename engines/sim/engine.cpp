#include "engines/sim/engine.hpp"

#include <utility>

namespace dynrt::engines::sim {

SimEngine::SimEngine(SimParams params, Script script, SimEngineOptions options)
    : options_(std::move(options)),
      model_(std::move(params), std::move(script)),
      real_start_(std::chrono::steady_clock::now()) {
  thread_ = std::thread([this] { run(); });
}

SimEngine::~SimEngine() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  for (auto& [handle, sink] : sinks_) {
    sink->on_error(EngineError{ErrorKind::internal, 0, {}, "engine stopped"});
  }
}

// Simulated time now: the real time elapsed, scaled; or, at time scale 0, wherever the last
// jump left it.
SimTime SimEngine::sim_now_locked() const {
  if (options_.time_scale <= 0) return std::max(jump_, model_.now());
  const auto real = std::chrono::steady_clock::now() - real_start_;
  const double sim_ns = static_cast<double>(std::chrono::duration_cast<Duration>(real).count()) *
                        1000.0 / options_.time_scale;
  return std::max(Duration(static_cast<Duration::rep>(sim_ns)), model_.now());
}

RequestHandle SimEngine::submit(EngineRequest request, std::shared_ptr<ResponseSink> sink) {
  RequestHandle h;
  {
    std::lock_guard lock(mutex_);
    h = next_handle_++;
    sinks_.emplace(h, std::move(sink));
    model_.submit(h, std::move(request), sim_now_locked());
  }
  wake_.notify_one();
  return h;
}

void SimEngine::cancel(RequestHandle handle) {
  {
    std::lock_guard lock(mutex_);
    if (!sinks_.count(handle)) return;
    model_.cancel(handle, sim_now_locked());
  }
  wake_.notify_one();
}

LoadSnapshot SimEngine::load() const {
  std::lock_guard lock(mutex_);
  LoadSnapshot s = model_.load();
  s.at = TimePoint{} + sim_now_locked();
  return s;
}

SimCounters SimEngine::counters() const {
  std::lock_guard lock(mutex_);
  return model_.counters();
}

SimTime SimEngine::simulated_now() const {
  std::lock_guard lock(mutex_);
  return sim_now_locked();
}

void SimEngine::drain() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return (sinks_.empty() && !delivering_) || stop_; });
}

void SimEngine::run() {
  std::vector<SimEvent> events;
  std::vector<std::pair<std::shared_ptr<ResponseSink>, SimEvent>> ready;
  std::unique_lock lock(mutex_);
  while (!stop_) {
    const std::optional<SimTime> next = model_.next_event();
    if (!next) {
      idle_.notify_all();
      wake_.wait(lock);
      continue;
    }
    SimTime now = sim_now_locked();
    if (*next > now) {
      if (options_.time_scale <= 0) {
        jump_ = *next;  // nothing else can happen before it: jump
        now = *next;
      } else {
        const auto wait = std::chrono::duration<double, std::nano>(
            static_cast<double>((*next - now).count()) * options_.time_scale / 1000.0);
        wake_.wait_for(lock, wait);
        continue;  // woken early by a command, or on time: re-read the clock
      }
    }
    model_.advance(now, events);
    for (SimEvent& e : events) {
      const auto it = sinks_.find(e.handle);
      if (it == sinks_.end()) continue;
      if (e.type == SimEvent::Type::chunk) {
        ready.emplace_back(it->second, std::move(e));
      } else {
        ready.emplace_back(std::move(it->second), std::move(e));
        sinks_.erase(it);
      }
    }
    events.clear();
    // Callbacks run without the lock, so a sink may submit or cancel from inside them; drain()
    // waits for them too, so a drained engine makes no further calls into its sinks.
    delivering_ = !ready.empty();
    lock.unlock();
    for (auto& [sink, e] : ready) {
      switch (e.type) {
        case SimEvent::Type::chunk:
          sink->on_chunk(e.data);
          break;
        case SimEvent::Type::complete:
          sink->on_complete(std::move(e.result));
          break;
        case SimEvent::Type::error:
          sink->on_error(std::move(e.error));
          break;
      }
    }
    ready.clear();
    lock.lock();
    if (std::exchange(delivering_, false)) idle_.notify_all();
  }
  idle_.notify_all();
}

}  // namespace dynrt::engines::sim

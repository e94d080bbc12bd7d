#include "engines/sim/engine.hpp"

#include "engines/prefill.hpp"

#include <algorithm>
#include <tuple>
#include <utility>

namespace dynrt::engines::sim {

SimEngine::SimEngine(SimParams params, Script script, SimEngineOptions options)
    : options_(std::move(options)), real_start_(std::chrono::steady_clock::now()) {
  const int workers = std::max(1, options_.workers);
  models_.reserve(static_cast<std::size_t>(workers));
  for (int i = 0; i < workers; ++i)
    models_.emplace_back(params, script);
  if (!options_.stepped) thread_ = std::thread([this] { run(); });
}

SimEngine::~SimEngine() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& [handle, sink] : sinks_) {
    sink->on_error(EngineError{ErrorKind::internal, 0, {}, "engine stopped"});
  }
}

// Simulated time now: the real time elapsed, scaled; or, at time scale 0, wherever the last
// jump left it.
SimTime SimEngine::sim_now_locked() const {
  SimTime model_now{0};
  for (const SimModel& m : models_)
    model_now = std::max(model_now, m.now());
  if (options_.stepped || options_.time_scale <= 0) return std::max(jump_, model_now);
  const auto real = std::chrono::steady_clock::now() - real_start_;
  const double sim_ns = static_cast<double>(std::chrono::duration_cast<Duration>(real).count()) *
                        1000.0 / options_.time_scale;
  return std::max(Duration(static_cast<Duration::rep>(sim_ns)), model_now);
}

std::optional<SimTime> SimEngine::next_event_locked() const {
  std::optional<SimTime> next;
  for (const SimModel& m : models_)
    if (const auto t = m.next_event()) next = next ? std::min(*next, *t) : *t;
  return next;
}

// The least-loaded worker (slots busy and queued over slots, then KV in use, then the lowest
// index); a fill breaks a tie of load by the fewest canonical requests.
std::size_t SimEngine::pick_worker(const EngineRequest& request) const {
  if (models_.size() == 1) return 0;
  const bool fill = request.priority > 0;
  const SimTime now = sim_now_locked();
  auto key = [&](std::size_t i) {
    const LoadSnapshot l = worker_load_locked(i, now);
    const double busy = static_cast<double>(l.slots_busy + l.queued) /
                        static_cast<double>(std::max(1, l.slots_total));
    const double kv = l.kv_total > 0 ? l.kv_used / l.kv_total : 0;
    return std::make_tuple(busy, fill ? models_[i].canonical_in_flight() : 0, kv, i);
  };
  std::size_t best = 0;
  auto best_key = key(0);
  for (std::size_t i = 1; i < models_.size(); ++i)
    if (const auto k = key(i); k < best_key) {
      best = i;
      best_key = k;
    }
  return best;
}

RequestHandle SimEngine::submit(EngineRequest request, std::shared_ptr<ResponseSink> sink) {
  RequestHandle h;
  {
    std::lock_guard lock(mutex_);
    h = next_handle_++;
    sinks_.emplace(h, std::move(sink));
    const std::size_t w = pick_worker(request);
    owner_.emplace(h, w);
    models_[w].submit(h, std::move(request), sim_now_locked());
  }
  wake_.notify_one();
  return h;
}

void SimEngine::cancel(RequestHandle handle) {
  {
    std::lock_guard lock(mutex_);
    const auto owner = owner_.find(handle);
    if (owner == owner_.end() || !sinks_.count(handle)) return;
    models_[owner->second].cancel(handle, sim_now_locked());
  }
  wake_.notify_one();
}

bool SimEngine::promote(RequestHandle handle, int priority) {
  {
    std::lock_guard lock(mutex_);
    const auto owner = owner_.find(handle);
    if (owner == owner_.end() || !sinks_.count(handle)) return false;
    if (!models_[owner->second].promote(handle, priority)) return false;
  }
  wake_.notify_one();  // the new head of the queue may fit now
  return true;
}

// A request submitted on the real clock, between two collections of the workers' events, waits
// to arrive at its worker's lagging clock; to everyone asking it is queued.
LoadSnapshot SimEngine::worker_load_locked(std::size_t i, SimTime now) const {
  const SimModel& m = models_.at(i);
  LoadSnapshot s = m.load();
  s.queued += static_cast<int>(m.arrived_by(now));
  return s;
}

LoadSnapshot SimEngine::load() const {
  std::lock_guard lock(mutex_);
  LoadSnapshot s;
  PrefillStall prefill;
  TokenPace pace;
  const SimTime now = sim_now_locked();
  for (std::size_t i = 0; i < models_.size(); ++i) {
    const LoadSnapshot w = worker_load_locked(i, now);
    prefill.add(w);
    pace.add(w);
    s.slots_busy += w.slots_busy;
    s.slots_total += w.slots_total;
    s.concurrency += w.concurrency;
    s.kv_used += w.kv_used;
    s.kv_total += w.kv_total;
    s.queued += w.queued;
  }
  s.batches = prefill.batches;  // each worker is one
  s.prefill_ms_per_token = prefill.ms_per_token();
  pace.into(s);
  s.valid = true;
  s.at = TimePoint{} + now;
  return s;
}

LoadSnapshot SimEngine::worker_load(int worker) const {
  std::lock_guard lock(mutex_);
  const SimTime now = sim_now_locked();
  const auto i = static_cast<std::size_t>(worker);
  LoadSnapshot s = worker_load_locked(i, now);
  s.at = TimePoint{} + now;
  return s;
}

SimCounters SimEngine::counters() const {
  std::lock_guard lock(mutex_);
  SimCounters sum;
  for (const SimModel& m : models_) {
    const SimCounters& c = m.counters();
    sum.submitted += c.submitted;
    sum.completed += c.completed;
    sum.cancelled += c.cancelled;
    sum.rejected += c.rejected;
    sum.prompt_tokens += c.prompt_tokens;
    sum.generated_tokens += c.generated_tokens;
    sum.steps += c.steps;
    sum.decode_steps += c.decode_steps;
    sum.token_gaps += c.token_gaps;
    sum.token_gap_s += c.token_gap_s;
    sum.stalling_prompt_tokens += c.stalling_prompt_tokens;
    sum.busy += c.busy;
    sum.background_busy += c.background_busy;
    sum.wasted += c.wasted;
    sum.kv_token_s += c.kv_token_s;
    sum.kv_wait += c.kv_wait;
  }
  return sum;
}

SimTime SimEngine::simulated_now() const {
  std::lock_guard lock(mutex_);
  return sim_now_locked();
}

void SimEngine::drain() {
  if (options_.stepped) {
    for (;;) {
      const auto next = next_event();
      if (!next) return;
      advance_to(*next);
    }
  }
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return (sinks_.empty() && !delivering_) || stop_; });
}

std::optional<SimTime> SimEngine::next_event() const {
  std::lock_guard lock(mutex_);
  return next_event_locked();
}

void SimEngine::advance_to(SimTime t) {
  std::vector<SimEvent> events;
  Ready ready;
  {
    std::lock_guard lock(mutex_);
    jump_ = std::max(jump_, t);
    collect_locked(jump_, events, ready);
  }
  deliver(ready);
}

void SimEngine::collect_locked(SimTime now, std::vector<SimEvent>& events, Ready& ready) {
  for (SimModel& m : models_)
    m.advance(now, events);
  // In time order across the workers (each worker's own are in order already).
  std::stable_sort(events.begin(), events.end(),
                   [](const SimEvent& a, const SimEvent& b) { return a.at < b.at; });
  for (SimEvent& e : events) {
    const auto it = sinks_.find(e.handle);
    if (it == sinks_.end()) continue;
    if (e.type == SimEvent::Type::chunk || e.type == SimEvent::Type::progress) {
      ready.emplace_back(it->second, std::move(e));
    } else {
      owner_.erase(e.handle);
      ready.emplace_back(std::move(it->second), std::move(e));
      sinks_.erase(it);
    }
  }
  events.clear();
}

void SimEngine::deliver(Ready& ready) {
  for (auto& [sink, e] : ready) {
    switch (e.type) {
      case SimEvent::Type::chunk:
        sink->on_chunk(e.data);
        break;
      case SimEvent::Type::progress:
        sink->on_progress(e.data);
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
}

void SimEngine::run() {
  std::vector<SimEvent> events;
  Ready ready;
  std::unique_lock lock(mutex_);
  while (!stop_) {
    const std::optional<SimTime> next = next_event_locked();
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
    collect_locked(now, events, ready);
    // Callbacks run without the lock, so a sink may submit or cancel from inside them; drain()
    // waits for them too, so a drained engine makes no further calls into its sinks.
    delivering_ = !ready.empty();
    lock.unlock();
    deliver(ready);
    lock.lock();
    if (std::exchange(delivering_, false)) idle_.notify_all();
  }
  idle_.notify_all();
}

}  // namespace dynrt::engines::sim

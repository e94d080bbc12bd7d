#include "engines/pool.hpp"

#include "engines/prefill.hpp"

#include <algorithm>
#include <tuple>

namespace dynrt::engines {

namespace {

// A replica's capacity in requests: where it becomes compute-bound when it says, else its slots.
double capacity_of(const LoadSnapshot& load) {
  int cap = load.slots_total;
  if (load.concurrency > 0) cap = cap > 0 ? std::min(cap, load.concurrency) : load.concurrency;
  return std::max(cap, 1);
}

double busy_of(const LoadSnapshot& load, int in_flight) {
  const int reported = load.valid ? load.slots_busy + load.queued : 0;
  return std::max(reported, in_flight);
}

// Where an attempt is in its request's life; every Sink checks it is still the current one.
using Attempt = std::uint64_t;

}  // namespace

double busy_share(const LoadSnapshot& load, int in_flight) {
  const double share = busy_of(load, in_flight) / capacity_of(load);
  return std::max(share, load.valid ? load.kv_occupancy() : 0.0);
}

struct EnginePool::Request {
  EngineRequest request;  // kept whole for a canonical request's next attempt
  std::shared_ptr<ResponseSink> sink;
  RequestHandle handle = 0;
  RequestKind kind = RequestKind::canonical;
  // Set on the attempt's engine thread before the chunk is passed on; read when it fails.
  std::atomic<bool> delivered{false};
  // Guarded by the pool's mutex_.
  int replica = -1;
  RequestHandle inner = 0;
  bool probe = false;
  Attempt attempt = 0;
  int attempts = 0;
  std::vector<bool> tried;
  bool cancelled = false;
};

// One attempt's sink on its replica: passes the response on, or moves the request on a fault.
class EnginePool::Sink final : public ResponseSink {
 public:
  Sink(EnginePool* pool, std::shared_ptr<Request> r) : pool_(pool), r_(std::move(r)) {}
  void on_chunk(std::string_view data) override {
    r_->delivered = true;
    r_->sink->on_chunk(data);
  }
  void on_progress(std::string_view data) override {
    // The runtime may read a decision from it: an attempt whose text was read cannot be
    // replaced by another's.
    r_->delivered = true;
    r_->sink->on_progress(data);
  }
  void on_complete(EngineResult result) override {
    pool_->finished(r_, Outcome::success);
    r_->sink->on_complete(std::move(result));
  }
  void on_error(EngineError error) override {
    if (pool_->failed_over(r_, error, r_->delivered)) return;
    r_->sink->on_error(std::move(error));
  }

 private:
  EnginePool* pool_;
  std::shared_ptr<Request> r_;
};

EnginePool::EnginePool(std::vector<std::shared_ptr<Engine>> replicas, PoolOptions options)
    : replicas_(std::move(replicas)),
      options_(std::move(options)),
      clock_(options_.clock ? options_.clock : std::make_shared<SteadyClock>()) {
  state_.reserve(replicas_.size());
  for (const auto& r : replicas_) {
    names_.push_back(r->name());
    state_.push_back(Replica{CircuitBreaker(options_.breaker, *clock_)});
  }
}

EnginePool::~EnginePool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  // The replicas go first, while the pool their sinks call is whole: an engine that answers
  // its requests in flight as it stops calls back into it.
  for (auto& r : replicas_)
    r.reset();
}

std::vector<LoadSnapshot> EnginePool::loads() const {
  std::vector<LoadSnapshot> out;
  out.reserve(replicas_.size());
  for (const auto& r : replicas_)
    out.push_back(r ? r->load() : LoadSnapshot{});  // null: gone in the destructor
  return out;
}

void EnginePool::judge_locked(std::vector<LoadSnapshot>& loads) {
  const TimePoint now = clock_->now();
  for (std::size_t i = 0; i < loads.size(); ++i) {
    auto& s = state_[i];
    if (!s.seen || loads[i].at != s.seen_at) {
      s.seen = true;
      s.seen_at = loads[i].at;
      s.seen_change = now;
    }
    if (loads[i].at == s.seen_at && now - s.seen_change > options_.stale_after)
      loads[i].valid = false;
  }
}

int EnginePool::choose_locked(RequestKind kind, const std::vector<bool>& tried,
                              const std::vector<LoadSnapshot>& loads, bool& probe) {
  const std::size_t n = replicas_.size();
  std::vector<LoadSnapshot> judged = loads;
  judge_locked(judged);
  // (fills refused by the replica itself, score, turn, index): the smallest wins.
  std::vector<std::tuple<bool, double, std::size_t, std::size_t>> order;
  for (std::size_t i = 0; i < n; ++i) {
    if (tried[i]) continue;
    const LoadSnapshot& load = judged[i];
    const int in_flight = state_[i].in_flight;
    const bool fill = kind == RequestKind::fill;
    // Canonical: the smallest busy share; fill: the most free capacity, in requests.
    const double score =
        fill ? -capacity_of(load) * (1.0 - std::min(1.0, busy_share(load, in_flight)))
             : busy_share(load, in_flight);
    order.emplace_back(fill && load.fills_blocked, score, (i + n - turn_ % n) % n, i);
  }
  if (order.empty()) return -1;
  ++turn_;
  std::sort(order.begin(), order.end());
  for (const auto& o : order) {
    const std::size_t i = std::get<3>(o);
    const Admission a = state_[i].breaker.admit(kind);
    if (a.allowed) {
      probe = a.probe;
      return static_cast<int>(i);
    }
  }
  // Every replica's circuit refuses: still the best one, whose own answer says more.
  probe = false;
  return static_cast<int>(std::get<3>(order.front()));
}

RequestHandle EnginePool::submit(EngineRequest request, std::shared_ptr<ResponseSink> sink) {
  auto r = std::make_shared<Request>();
  r->handle = next_handle_++;
  r->kind = request.kind;
  r->sink = std::move(sink);
  r->tried.assign(replicas_.size(), false);
  const auto now = loads();
  {
    std::lock_guard lock(mutex_);
    r->replica = choose_locked(r->kind, r->tried, now, r->probe);
    live_.emplace(r->handle, r);
  }
  r->request = std::move(request);
  launch(r);
  return r->handle;
}

void EnginePool::launch(const std::shared_ptr<Request>& r) {
  int replica = 0;
  Attempt attempt = 0;
  {
    std::lock_guard lock(mutex_);
    replica = r->replica;
    attempt = ++r->attempt;
    ++r->attempts;
    r->tried[replica] = true;
    auto& s = state_[replica];
    ++s.in_flight;
    ++(r->kind == RequestKind::fill ? s.fills : s.canonical);
  }
  // A canonical request keeps its body for another attempt; a fill never makes one.
  EngineRequest copy = r->kind == RequestKind::canonical ? r->request : std::move(r->request);
  const RequestHandle inner =
      replicas_[replica]->submit(std::move(copy), std::make_shared<Sink>(this, r));
  bool cancel_now = false;
  {
    std::lock_guard lock(mutex_);
    if (r->attempt == attempt) {
      r->inner = inner;
      cancel_now = r->cancelled;
    }
  }
  if (cancel_now) replicas_[replica]->cancel(inner);
}

void EnginePool::finished(const std::shared_ptr<Request>& r, Outcome outcome) {
  std::lock_guard lock(mutex_);
  auto& s = state_[r->replica];
  --s.in_flight;
  s.breaker.record(r->kind, r->probe, outcome);
  if (outcome == Outcome::failure) ++s.failures;
  live_.erase(r->handle);
}

bool EnginePool::failed_over(const std::shared_ptr<Request>& r, const EngineError& error,
                             bool delivered) {
  const Outcome outcome = outcome_of(error);
  const auto now = loads();
  {
    std::lock_guard lock(mutex_);
    auto& s = state_[r->replica];
    --s.in_flight;
    s.breaker.record(r->kind, r->probe, outcome);
    if (outcome == Outcome::failure) ++s.failures;
    const int max_attempts =
        options_.max_attempts > 0 ? options_.max_attempts : static_cast<int>(replicas_.size());
    int next = -1;
    if (!stopping_ && !r->cancelled && !delivered && r->kind == RequestKind::canonical &&
        outcome == Outcome::failure && r->attempts < max_attempts)
      next = choose_locked(r->kind, r->tried, now, r->probe);
    if (next < 0) {
      live_.erase(r->handle);
      return false;
    }
    r->replica = next;
    r->inner = 0;
    ++failovers_;
  }
  launch(r);
  return true;
}

void EnginePool::cancel(RequestHandle handle) {
  std::shared_ptr<Engine> engine;
  RequestHandle inner = 0;
  {
    std::lock_guard lock(mutex_);
    const auto it = live_.find(handle);
    if (it == live_.end()) return;
    auto& r = *it->second;
    r.cancelled = true;
    if (r.inner == 0) return;  // launch() cancels it once its replica has answered the submit
    engine = replicas_[r.replica];
    inner = r.inner;
  }
  engine->cancel(inner);
}

bool EnginePool::promote(RequestHandle handle, int priority) {
  std::shared_ptr<Engine> engine;
  RequestHandle inner = 0;
  {
    std::lock_guard lock(mutex_);
    const auto it = live_.find(handle);
    if (it == live_.end() || it->second->cancelled || it->second->inner == 0) return false;
    engine = replicas_[it->second->replica];
    inner = it->second->inner;
  }
  return engine->promote(inner, priority);
}

LoadSnapshot EnginePool::load() const {
  LoadSnapshot out;
  int concurrency = 0;
  bool any_concurrency = false, all_tokens = true, all_blocked = true;
  double kv_used = 0, kv_total = 0, kv_share = 0;
  int kv_reporting = 0;
  PrefillStall prefill;
  TokenPace pace;
  std::vector<bool> fills_open(replicas_.size(), true);
  {
    std::lock_guard lock(mutex_);
    for (std::size_t i = 0; i < state_.size(); ++i)
      fills_open[i] = state_[i].breaker.state(RequestKind::fill) != CircuitState::open;
  }
  for (std::size_t i = 0; i < replicas_.size(); ++i) {
    const LoadSnapshot s = replicas_[i]->load();
    all_blocked = all_blocked && (s.fills_blocked || !fills_open[i]);
    if (!s.valid) continue;
    out.valid = true;
    out.slots_busy += s.slots_busy;
    out.slots_total += s.slots_total;
    out.queued += s.queued;
    out.at = std::max(out.at, s.at);
    any_concurrency = any_concurrency || s.concurrency > 0;
    concurrency += static_cast<int>(capacity_of(s));
    prefill.add(s);
    pace.add(s);
    if (s.kv_total > 0) {
      ++kv_reporting;
      kv_share += s.kv_occupancy();
      kv_used += s.kv_used;
      kv_total += s.kv_total;
      // vLLM and SGLang report a used share against a total of 1; the simulated engine tokens.
      all_tokens = all_tokens && s.kv_total > 1;
    }
  }
  if (any_concurrency) out.concurrency = concurrency;
  if (prefill.batches > 0) out.batches = prefill.batches;
  out.prefill_ms_per_token = prefill.ms_per_token();
  pace.into(out);
  if (kv_reporting > 0) {
    out.kv_used = all_tokens ? kv_used : kv_share / kv_reporting;
    out.kv_total = all_tokens ? kv_total : 1;
  }
  out.fills_blocked = !replicas_.empty() && all_blocked;
  return out;
}

namespace {

void list_from(std::vector<std::weak_ptr<Engine>> engines, std::size_t i,
               std::function<void(std::optional<nlohmann::json>)> done) {
  if (i >= engines.size()) return done(std::nullopt);
  const auto engine = engines[i].lock();
  if (!engine) return done(std::nullopt);
  engine->list_models([engines, i, done](std::optional<nlohmann::json> models) mutable {
    if (models) return done(std::move(models));
    list_from(std::move(engines), i + 1, std::move(done));
  });
}

}  // namespace

void EnginePool::list_models(std::function<void(std::optional<nlohmann::json>)> done) {
  // Replicas of one model list the same; the first that answers says it.
  list_from({replicas_.begin(), replicas_.end()}, 0, std::move(done));
}

PoolStats EnginePool::stats() {
  PoolStats out;
  auto now = loads();
  std::lock_guard lock(mutex_);
  judge_locked(now);
  out.failovers = failovers_;
  for (std::size_t i = 0; i < state_.size(); ++i) {
    const auto& s = state_[i];
    out.replicas.push_back(ReplicaStats{
        names_[i], s.canonical, s.fills, s.failures, s.in_flight, busy_share(now[i], s.in_flight),
        s.breaker.state(RequestKind::canonical), s.breaker.state(RequestKind::fill)});
  }
  return out;
}

}  // namespace dynrt::engines

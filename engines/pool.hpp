// A pool of replicas of one model: several engines that serve the same weights, behind one
// Engine.
//
// Where a request goes. A canonical request goes to the least-loaded replica: the one whose
// busy share of its capacity is smallest, busy being what its latest load snapshot reports
// (running + queued) or what the pool itself has in flight there, whichever is more (a snapshot
// lags by a scrape interval; the pool's own count does not; a snapshot that has not changed
// for `stale_after` says nothing, as a dead replica's last scrape would), capacity its
// compute-bound concurrency when known, else its decode slots; KV occupancy counts when it is
// higher. A fill goes to the replica with the most headroom in requests (capacity - busy), never to
// one whose own breaker refuses fills. Ties go round-robin.
//
// Failing replicas. Every replica also has a breaker in the pool (engines/breaker.hpp, with
// `breaker`), fed by the outcomes of the requests the pool sent there: while its circuit is
// open the replica gets no requests of that kind as long as another replica's circuit admits
// them; when every replica refuses, a request still goes to the best one, whose own breaker
// then answers for it (a canonical demand is not failed by the pool). A canonical
// request whose attempt failed before any of its response reached the sink, with a fault that
// says the replica failed (breaker.hpp's outcome_of: refused, timeouts, 429/5xx, malformed or
// truncated answers), fails over to the next replica it has not tried, up to `max_attempts`
// attempts; a stream already delivering cannot be moved and ends with its error. Fills never
// fail over: a failed fill is a miss.
//
// Load. load() is the pool's sum: slots, concurrency and queues add up; KV adds up in tokens
// when every replica reports tokens, otherwise it is the mean occupied share. Admission thus
// prices fills against the pool's whole capacity, and the pool places each admitted fill where
// it interferes least.
//
// Threading: as every Engine. The pool's own state is under one mutex, never held while
// calling into a replica or a sink.
#pragma once

#include "engines/breaker.hpp"
#include "engines/engine.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace dynrt::engines {

struct PoolOptions {
  std::string name = "pool";
  // Attempts a canonical request makes across replicas, the first included; 0: one per replica.
  int max_attempts = 0;
  // The pool's breaker of each replica: quicker than an engine's own, since another replica
  // can take the work.
  BreakerOptions breaker = {.window = std::chrono::seconds(10),
                            .min_requests = 10,
                            .fill_failures = 2,
                            .fill_ratio = 0.5,
                            .canonical_failures = 2,
                            .canonical_ratio = 0.5,
                            .cooldown = std::chrono::seconds(2)};
  // A replica's load snapshot unchanged this long is not read (its engine stopped answering
  // scrapes): its requests in flight from here are all the pool knows of it.
  Duration stale_after = std::chrono::seconds(3);
  std::shared_ptr<const Clock> clock;  // of the breakers and staleness; null: the steady clock
};

struct ReplicaStats {
  std::string name;
  std::uint64_t canonical = 0;  // attempts sent to it (failovers included)
  std::uint64_t fills = 0;
  std::uint64_t failures = 0;  // attempts that failed with a fault of the replica
  int in_flight = 0;
  double load = 0;  // its busy share now, as the pool reads it (busy_share)
  CircuitState canonical_circuit = CircuitState::closed;
  CircuitState fills_circuit = CircuitState::closed;
};

struct PoolStats {
  std::vector<ReplicaStats> replicas;
  std::uint64_t failovers = 0;  // canonical attempts moved to another replica
};

class EnginePool final : public Engine {
 public:
  // At least one replica.
  EnginePool(std::vector<std::shared_ptr<Engine>> replicas, PoolOptions options = {});
  ~EnginePool() override;

  RequestHandle submit(EngineRequest request, std::shared_ptr<ResponseSink> sink) override;
  void cancel(RequestHandle handle) override;
  bool promote(RequestHandle handle, int priority) override;
  LoadSnapshot load() const override;
  std::string name() const override { return options_.name; }
  // The first replica's list that answers: replicas of one model list the same.
  void list_models(std::function<void(std::optional<nlohmann::json>)> done) override;

  const std::vector<std::shared_ptr<Engine>>& replicas() const { return replicas_; }
  PoolStats stats();

 private:
  class Sink;
  struct Request;
  friend class Sink;
  // Every replica's load snapshot, taken outside mutex_.
  std::vector<LoadSnapshot> loads() const;
  // Notes when each replica's snapshot changed, and marks one that stopped changing not valid.
  // Under mutex_.
  void judge_locked(std::vector<LoadSnapshot>& loads);
  // The replica the next attempt of `kind` goes to, -1 when every one is in `tried`.
  int choose_locked(RequestKind kind, const std::vector<bool>& tried,
                    const std::vector<LoadSnapshot>& loads, bool& probe);
  void launch(const std::shared_ptr<Request>& r);
  // An attempt ended with `error`; true when it was moved to another replica.
  bool failed_over(const std::shared_ptr<Request>& r, const EngineError& error, bool delivered);
  void finished(const std::shared_ptr<Request>& r, Outcome outcome);

  struct Replica {
    CircuitBreaker breaker;
    bool seen = false;
    TimePoint seen_at{};      // the snapshot time it last reported
    TimePoint seen_change{};  // ... and when that changed, by the pool's clock
    int in_flight = 0;
    std::uint64_t canonical = 0, fills = 0, failures = 0;
  };

  // Reset only by the destructor (first, while the rest is whole).
  std::vector<std::shared_ptr<Engine>> replicas_;
  std::vector<std::string> names_;
  const PoolOptions options_;
  std::shared_ptr<const Clock> clock_;
  mutable std::mutex mutex_;
  std::vector<Replica> state_;  // guarded by mutex_, one per replica
  std::unordered_map<RequestHandle, std::shared_ptr<Request>> live_;  // guarded by mutex_
  std::uint64_t failovers_ = 0, turn_ = 0;                            // guarded by mutex_
  bool stopping_ = false;                                             // guarded by mutex_
  std::atomic<RequestHandle> next_handle_{1};
};

// How busy a replica is, in [0, 1+]: the share of its capacity in use (see the header comment).
double busy_share(const LoadSnapshot& load, int in_flight);

}  // namespace dynrt::engines

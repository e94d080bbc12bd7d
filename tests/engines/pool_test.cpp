// The replica pool over scripted engines: each fake reports the load a test sets and holds its
// requests until the test answers them, so every dispatch and failover is decided by the
// test's own steps (no threads, no network, an injected clock for the breakers).
#include "engines/pool.hpp"
#include "engines/sim/engine.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <thread>

namespace dynrt::engines {
namespace {

class FakeEngine final : public Engine {
 public:
  // With a clock, every load() is a fresh reading (stamped now) unless the test stamps it.
  explicit FakeEngine(std::string name, const ManualClock* clock = nullptr)
      : name_(std::move(name)), clock_(clock) {}
  RequestHandle submit(EngineRequest request, std::shared_ptr<ResponseSink> sink) override {
    const RequestHandle h = next_++;
    held[h] = {std::move(request), std::move(sink)};
    return h;
  }
  bool promote(RequestHandle h, int priority) override {
    promoted.emplace_back(h, priority);
    return held.count(h) > 0;
  }
  void cancel(RequestHandle h) override {
    cancelled.push_back(h);
    if (const auto it = held.find(h); it != held.end()) {
      auto sink = it->second.second;
      held.erase(it);
      sink->on_error(EngineError{ErrorKind::cancelled, 0, {}, "cancelled"});
    }
  }
  LoadSnapshot load() const override {
    LoadSnapshot s = snapshot;
    if (clock_ && s.at == TimePoint{}) s.at = clock_->now();
    return s;
  }
  std::string name() const override { return name_; }

  // Answers the oldest request it holds.
  void complete(const std::string& text = "ok") {
    auto [req, sink] = take();
    EngineResult r;
    r.body = text;
    sink->on_complete(r);
  }
  void fail(ErrorKind kind, int status = 0) {
    auto [req, sink] = take();
    sink->on_error(EngineError{kind, status, {}, "fault"});
  }
  void chunk_then_fail() {
    auto& [req, sink] = held.begin()->second;
    sink->on_chunk(R"({"choices":[]})");
    fail(ErrorKind::truncated);
  }
  std::size_t holding() const { return held.size(); }
  std::pair<EngineRequest, std::shared_ptr<ResponseSink>> take() {
    auto it = held.begin();
    auto out = std::move(it->second);
    held.erase(it);
    return out;
  }

  LoadSnapshot snapshot;
  std::map<RequestHandle, std::pair<EngineRequest, std::shared_ptr<ResponseSink>>> held;
  std::vector<RequestHandle> cancelled;
  std::vector<std::pair<RequestHandle, int>> promoted;

 private:
  std::string name_;
  const ManualClock* clock_;
  RequestHandle next_ = 1;
};

struct Recorder final : ResponseSink {
  void on_chunk(std::string_view d) override { chunks.emplace_back(d); }
  void on_complete(EngineResult r) override { completed.push_back(r.body); }
  void on_error(EngineError e) override { errors.push_back(e); }
  std::vector<std::string> chunks, completed;
  std::vector<EngineError> errors;
};

LoadSnapshot busy(int slots_busy, int slots_total = 10, int queued = 0) {
  LoadSnapshot s;
  s.valid = true;
  s.slots_busy = slots_busy;
  s.slots_total = slots_total;
  s.queued = queued;
  return s;
}

EngineRequest request(RequestKind kind = RequestKind::canonical) {
  EngineRequest r;
  r.kind = kind;
  r.body = {{"model", "m"}, {"messages", nlohmann::json::array()}};
  return r;
}

struct PoolTest : ::testing::Test {
  PoolTest() {
    clock->set(TimePoint{} + std::chrono::hours(1));
    auto fa = std::make_shared<FakeEngine>("a", clock.get());
    auto fb = std::make_shared<FakeEngine>("b", clock.get());
    a = fa.get();
    b = fb.get();
    PoolOptions o;
    o.clock = clock;
    pool = std::make_unique<EnginePool>(std::vector<std::shared_ptr<Engine>>{fa, fb}, o);
  }
  std::shared_ptr<Recorder> send(RequestKind kind = RequestKind::canonical) {
    auto sink = std::make_shared<Recorder>();
    handles.push_back(pool->submit(request(kind), sink));
    return sink;
  }
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();
  FakeEngine* a = nullptr;
  FakeEngine* b = nullptr;
  std::unique_ptr<EnginePool> pool;
  std::vector<RequestHandle> handles;
};

TEST_F(PoolTest, CanonicalRequestsGoToTheReplicaThatReportsLessLoad) {
  a->snapshot = busy(8);
  b->snapshot = busy(2);
  for (int i = 0; i < 3; ++i)
    send();
  EXPECT_EQ(a->holding(), 0u);
  EXPECT_EQ(b->holding(), 3u);
  // Now b reports more than a: the next ones go to a.
  b->snapshot = busy(9);
  a->snapshot = busy(1);
  send();
  send();
  EXPECT_EQ(a->holding(), 2u);
}

TEST_F(PoolTest, ItsOwnRequestsInFlightCountBeforeTheNextScrapeReportsThem) {
  // Both report idle (a stale scrape); the pool's own count spreads a burst evenly.
  a->snapshot = busy(0);
  b->snapshot = busy(0);
  for (int i = 0; i < 10; ++i)
    send();
  EXPECT_EQ(a->holding(), 5u);
  EXPECT_EQ(b->holding(), 5u);
}

TEST_F(PoolTest, ALoadSnapshotThatStopsChangingIsNotBelieved) {
  // B's last scrape said it was full, and then its scrapes stopped (it died): once that reading
  // is older than stale_after, only the pool's own count speaks for B, and B gets requests
  // again (whose failures then take it out).
  a->snapshot = busy(3);
  b->snapshot = busy(10);
  b->snapshot.at = clock->now();
  send();
  EXPECT_EQ(a->holding(), 1u);
  clock->advance(std::chrono::seconds(4));
  send();
  EXPECT_EQ(b->holding(), 1u);
  EXPECT_DOUBLE_EQ(pool->stats().replicas[1].load, 0.1);  // its one request of 10 slots
  b->snapshot.at = clock->now();                          // a new scrape: believed again
  send();
  EXPECT_EQ(a->holding(), 2u);
}

TEST_F(PoolTest, CapacityIsTheConcurrencyAndKvCounts) {
  a->snapshot = busy(4, 100);  // 4 of a compute-bound batch of 8: half busy
  a->snapshot.concurrency = 8;
  b->snapshot = busy(30, 100);  // 30% of its slots
  send();
  EXPECT_EQ(b->holding(), 1u);
  b->snapshot.kv_used = 0.9;  // but its KV cache is nearly full
  b->snapshot.kv_total = 1;
  send();
  EXPECT_EQ(a->holding(), 1u);
}

TEST_F(PoolTest, FillsGoWhereTheMostCapacityIsFreeAndNeverToAReplicaThatRefusesThem) {
  a->snapshot = busy(10, 100);  // 90 free
  b->snapshot = busy(2, 10);    // 8 free, though a smaller share of it is busy
  send(RequestKind::fill);
  EXPECT_EQ(a->holding(), 1u);
  a->snapshot.fills_blocked = true;
  send(RequestKind::fill);
  EXPECT_EQ(b->holding(), 1u);
}

TEST_F(PoolTest, ACanonicalRequestFailsOverWhenTheReplicaDidNotAnswer) {
  a->snapshot = busy(0);
  b->snapshot = busy(5);
  auto sink = send();
  ASSERT_EQ(a->holding(), 1u);
  a->fail(ErrorKind::refused);
  EXPECT_TRUE(sink->errors.empty());
  ASSERT_EQ(b->holding(), 1u);
  b->complete("from b");
  ASSERT_EQ(sink->completed.size(), 1u);
  EXPECT_EQ(sink->completed[0], "from b");
  EXPECT_EQ(pool->stats().failovers, 1u);
  EXPECT_EQ(pool->stats().replicas[0].failures, 1u);
}

TEST_F(PoolTest, TheSameBodyIsSentToTheNextReplica) {
  auto sink = send();
  auto first = a->holding() ? a : b;
  auto other = first == a ? b : a;
  const auto body = first->held.begin()->second.first.body;
  first->fail(ErrorKind::http_status, 503);
  ASSERT_EQ(other->holding(), 1u);
  EXPECT_EQ(other->held.begin()->second.first.body, body);
}

TEST_F(PoolTest, NoFailoverForTheCallersOwnErrorsAStreamAlreadyDeliveringOrAFill) {
  a->snapshot = busy(0);
  b->snapshot = busy(9);
  auto bad = send();
  a->fail(ErrorKind::http_status, 400);  // the request's fault: every replica would say so
  ASSERT_EQ(bad->errors.size(), 1u);
  EXPECT_EQ(b->holding(), 0u);

  auto stream = send();
  a->chunk_then_fail();  // the caller has part of a response: it cannot move
  EXPECT_EQ(stream->chunks.size(), 1u);
  ASSERT_EQ(stream->errors.size(), 1u);
  EXPECT_EQ(stream->errors[0].kind, ErrorKind::truncated);
  EXPECT_EQ(b->holding(), 0u);

  auto fill = send(RequestKind::fill);
  ASSERT_EQ(a->holding(), 1u);
  a->fail(ErrorKind::refused);  // a failed fill is a miss
  ASSERT_EQ(fill->errors.size(), 1u);
  EXPECT_EQ(b->holding(), 0u);
  EXPECT_EQ(pool->stats().failovers, 0u);
}

TEST_F(PoolTest, WhenEveryReplicaFailsTheCallerGetsTheLastError) {
  auto sink = send();
  (a->holding() ? a : b)->fail(ErrorKind::refused);
  (a->holding() ? a : b)->fail(ErrorKind::http_status, 502);
  ASSERT_EQ(sink->errors.size(), 1u);
  EXPECT_EQ(sink->errors[0].status, 502);
}

TEST_F(PoolTest, AFailingReplicaIsTakenOutUntilItsCooldownThenProbed) {
  a->snapshot = busy(0);
  b->snapshot = busy(5);  // a would be chosen on load alone
  for (int i = 0; i < 2; ++i) {
    send();
    a->fail(ErrorKind::refused);  // fails over to b
    b->complete();
  }
  EXPECT_EQ(pool->stats().replicas[0].canonical_circuit, CircuitState::open);
  for (int i = 0; i < 5; ++i)
    send();
  EXPECT_EQ(a->holding(), 0u);  // a's circuit is open: b takes them all
  EXPECT_EQ(b->holding(), 5u);
  clock->advance(std::chrono::seconds(3));  // past the cooldown: one probe goes to a
  send();
  send();
  EXPECT_EQ(a->holding(), 1u);
  a->complete();  // the probe succeeded: a is back
  EXPECT_EQ(pool->stats().replicas[0].canonical_circuit, CircuitState::closed);
}

TEST_F(PoolTest, CancelReachesTheReplicaThatHoldsTheRequestAfterAFailover) {
  a->snapshot = busy(0);
  b->snapshot = busy(5);
  auto sink = send();
  a->fail(ErrorKind::refused);
  ASSERT_EQ(b->holding(), 1u);
  pool->cancel(handles.back());
  EXPECT_EQ(b->cancelled.size(), 1u);
  ASSERT_EQ(sink->errors.size(), 1u);
  EXPECT_EQ(sink->errors[0].kind, ErrorKind::cancelled);
  pool->cancel(handles.back());  // finished: ignored
  EXPECT_EQ(b->cancelled.size(), 1u);
}

TEST_F(PoolTest, PromoteReachesTheReplicaThatHoldsTheRequest) {
  a->snapshot = busy(5);
  b->snapshot = busy(0);
  send(RequestKind::fill);
  ASSERT_EQ(b->holding(), 1u);
  EXPECT_TRUE(pool->promote(handles.back(), 0));
  ASSERT_EQ(b->promoted.size(), 1u);
  EXPECT_EQ(b->promoted[0].second, 0);
  EXPECT_TRUE(a->promoted.empty());
  b->complete();
  EXPECT_FALSE(pool->promote(handles.back(), 0));  // finished: nothing to move
  EXPECT_EQ(b->promoted.size(), 1u);
}

TEST_F(PoolTest, LoadIsTheSumOfTheReplicas) {
  a->snapshot = busy(3, 10, 1);
  b->snapshot = busy(5, 20, 2);
  a->snapshot.kv_used = 1000;
  a->snapshot.kv_total = 4000;
  b->snapshot.kv_used = 3000;
  b->snapshot.kv_total = 4000;
  const auto l = pool->load();
  EXPECT_TRUE(l.valid);
  EXPECT_EQ(l.slots_busy, 8);
  EXPECT_EQ(l.slots_total, 30);
  EXPECT_EQ(l.queued, 3);
  EXPECT_DOUBLE_EQ(l.kv_occupancy(), 0.5);
  EXPECT_FALSE(l.fills_blocked);
  a->snapshot.fills_blocked = true;
  EXPECT_FALSE(pool->load().fills_blocked);  // b still takes fills
  b->snapshot.fills_blocked = true;
  EXPECT_TRUE(pool->load().fills_blocked);
}

// Each replica batches on its own: the pool's batches add up, and a prompt token's stall is the
// mean over the batches that report one (a fill lands on any of them).
TEST_F(PoolTest, BatchesAddUpAndThePrefillStallIsTheirMean) {
  a->snapshot = busy(0, 10);
  b->snapshot = busy(0, 10);
  EXPECT_EQ(pool->load().batches, 2);
  EXPECT_EQ(pool->load().prefill_ms_per_token, 0);  // neither says
  a->snapshot.batches = 3;
  a->snapshot.prefill_ms_per_token = 0.2;
  EXPECT_EQ(pool->load().batches, 4);
  EXPECT_DOUBLE_EQ(pool->load().prefill_ms_per_token, 0.2);
  b->snapshot.prefill_ms_per_token = 0.6;
  EXPECT_DOUBLE_EQ(pool->load().prefill_ms_per_token, (3 * 0.2 + 0.6) / 4);
}

TEST(PoolLoad, SharesOfEnginesThatReportAFractionAreAveraged) {
  auto fa = std::make_shared<FakeEngine>("a");
  auto fb = std::make_shared<FakeEngine>("b");
  fa->snapshot = busy(1);
  fa->snapshot.kv_used = 0.2;
  fa->snapshot.kv_total = 1;
  fb->snapshot = busy(1);
  fb->snapshot.kv_used = 0.6;
  fb->snapshot.kv_total = 1;
  EnginePool pool({fa, fb});
  EXPECT_DOUBLE_EQ(pool.load().kv_occupancy(), 0.4);
}

// Real engines on their own threads, callers on four more: every request ends exactly once,
// whatever the interleaving of submits, answers and cancels (TSan runs this in CI).
struct Counting final : ResponseSink {
  explicit Counting(std::atomic<int>& ended) : ended_(ended) {}
  void on_chunk(std::string_view) override {}
  void on_complete(EngineResult) override { end(); }
  void on_error(EngineError) override { end(); }
  void end() {
    ++calls;
    ++ended_;
  }
  std::atomic<int> calls{0};
  std::atomic<int>& ended_;
};

TEST(PoolOverSimEngines, ConcurrentSubmitsAndCancelsEndEveryRequestOnce) {
  sim::SimEngineOptions eo;
  eo.time_scale = 0.05;  // a request lasts a few real milliseconds: cancels meet live ones
  auto a = std::make_shared<sim::SimEngine>(sim::SimParams{}, sim::Script{}, eo);
  auto b = std::make_shared<sim::SimEngine>(sim::SimParams{}, sim::Script{}, eo);
  EnginePool pool({a, b});
  std::atomic<int> ended{0};
  std::vector<std::shared_ptr<Counting>> sinks;
  std::mutex sinks_mutex;
  constexpr int kThreads = 4, kEach = 100;
  std::vector<std::thread> callers;
  for (int t = 0; t < kThreads; ++t)
    callers.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        auto sink = std::make_shared<Counting>(ended);
        {
          std::lock_guard lock(sinks_mutex);
          sinks.push_back(sink);
        }
        EngineRequest r = request(i % 4 == 0 ? RequestKind::fill : RequestKind::canonical);
        r.body["messages"] = {{{"role", "user"}, {"content", std::to_string(t * kEach + i)}}};
        const auto h = pool.submit(std::move(r), sink);
        if (i % 3 == 0) pool.cancel(h);
      }
    });
  for (auto& c : callers)
    c.join();
  a->drain();
  b->drain();
  EXPECT_EQ(ended.load(), kThreads * kEach);
  for (const auto& s : sinks)
    EXPECT_EQ(s->calls.load(), 1);
  const auto st = pool.stats();
  EXPECT_EQ(st.replicas[0].in_flight + st.replicas[1].in_flight, 0);
  EXPECT_GT(st.replicas[0].canonical, 0u);
  EXPECT_GT(st.replicas[1].canonical, 0u);
}

}  // namespace
}  // namespace dynrt::engines

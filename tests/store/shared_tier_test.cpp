// The shared library tier against a real redis-server that each test starts on a free
// loopback port (no persistence, its own directory). Skipped where redis-server is not on
// PATH. Nothing here waits for time to pass: every wait is for an answer or a state, bounded
// by kWait, and a wait that runs out fails the test.
#include "store/shared_tier.hpp"
#include "tests/support/redis_server.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace dynrt::store {
namespace {

using testing::free_port;
using testing::on_path;
using testing::redis_exchange;
using testing::RedisServer;

using namespace std::chrono_literals;

constexpr auto kWait = 10s;  // generous: only a hung tier or server runs into it

// Answers that arrived more than once (every callback must run exactly once).
std::atomic<int> g_extra_answers{0};

// A callback that fulfils a promise; a second call is counted, not thrown.
template <class T>
struct Answer {
  std::shared_ptr<std::promise<T>> promise = std::make_shared<std::promise<T>>();
  std::future<T> future = promise->get_future();
  std::shared_ptr<std::atomic<int>> calls = std::make_shared<std::atomic<int>>(0);

  std::function<void(T)> callback() {
    return [promise = promise, calls = calls](T value) {
      if (calls->fetch_add(1) > 0) {
        ++g_extra_answers;
        return;
      }
      promise->set_value(std::move(value));
    };
  }
  // The answer, or a failure and `fallback` when none came within kWait.
  T wait(T fallback, const char* what) {
    if (future.wait_for(kWait) != std::future_status::ready) {
      ADD_FAILURE() << what << " did not answer within 10 s";
      return fallback;
    }
    return future.get();
  }
};

std::optional<SharedEntry> get_sync(SharedTier& tier, const Hash128& name) {
  Answer<std::optional<SharedEntry>> a;
  tier.get(name, a.callback());
  return a.wait(std::nullopt, "get()");
}

bool validate_sync(SharedTier& tier, std::vector<std::string> keys, Fence fence) {
  Answer<bool> a;
  tier.validate(std::move(keys), std::move(fence), a.callback());
  return a.wait(false, "validate()");
}

bool write_sync(SharedTier& tier, std::vector<std::string> keys) {
  Answer<bool> a;
  tier.write(std::move(keys), a.callback());
  return a.wait(false, "write()");
}

// Polls `done` (a state, not time) until it holds; false if it did not within kWait.
template <class F>
bool eventually(F done) {
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

bool wait_connected(SharedTier& tier) {
  return eventually([&] { return tier.stats().connected && !tier.fence().epoch.empty(); });
}

SharedEntry make_entry(const Fence& fence, std::vector<std::string> keys) {
  SharedEntry e;
  e.bytes = std::string("result\0with\r\nbinary\xff bytes", 26);
  e.usage.prompt_tokens = 120;
  e.usage.completion_tokens = 34;
  e.cost = std::chrono::milliseconds(850);
  e.keys = std::move(keys);
  e.fence = fence;
  e.ttl = std::chrono::minutes(5);
  return e;
}

class SharedTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_extra_answers = 0;
    if (!on_path("redis-server")) GTEST_SKIP() << "redis-server is not on PATH";
    const int port = free_port();
    ASSERT_GT(port, 0);
    std::string error;
    ASSERT_TRUE(server_.start(port, &error)) << error;
  }
  void TearDown() override { EXPECT_EQ(g_extra_answers.load(), 0) << "a callback ran twice"; }

  TierConfig config(std::string replica) const {
    TierConfig c;
    c.address.port = server_.port();
    c.timeout = 200ms;
    c.backoff_min = 10ms;
    c.backoff_max = 200ms;
    c.replica = std::move(replica);
    return c;
  }

  // Both tiers' subscriptions are in place (PUBSUB NUMSUB of the channel reaches `n`).
  bool subscribed(int n) const {
    const std::string want = ":" + std::to_string(n) + "\r\n";
    return eventually([&] {
      const auto reply = redis_exchange(server_.port(), "PUBSUB NUMSUB dynrt:inv", 4);
      return reply && reply->ends_with(want);
    });
  }

  RedisServer server_;
};

const Hash128 kName{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
const Hash128 kOtherName{1, 2};

// ----- RedisAddress -------------------------------------------------------------------------

TEST(RedisAddressTest, AcceptsHostPortAndDatabase) {
  std::string error;
  auto a = RedisAddress::parse("redis://cache.internal", &error);
  ASSERT_TRUE(a) << error;
  EXPECT_EQ(a->host, "cache.internal");
  EXPECT_EQ(a->port, 6379);
  EXPECT_EQ(a->db, 0);

  a = RedisAddress::parse("redis://127.0.0.1:6380/15", &error);
  ASSERT_TRUE(a) << error;
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 6380);
  EXPECT_EQ(a->db, 15);
  EXPECT_EQ(a->url(), "redis://127.0.0.1:6380/15");

  a = RedisAddress::parse("redis://h:1/", &error);
  ASSERT_TRUE(a) << error;
  EXPECT_EQ(a->db, 0);

  a = RedisAddress::parse("redis://[::1]:7000/2", &error);
  ASSERT_TRUE(a) << error;
  EXPECT_EQ(a->host, "::1");
  EXPECT_EQ(a->port, 7000);
  EXPECT_EQ(a->url(), "redis://[::1]:7000/2");
}

TEST(RedisAddressTest, RejectsWhatItCannotServeWithAReason) {
  const struct {
    const char* url;
    const char* says;
  } cases[] = {
      {"redis://user:secret@h:6379", "password"},
      {"redis://:secret@h", "password"},
      {"rediss://h:6380", "TLS"},
      {"redis://h:6379?timeout=1", "query"},
      {"redis://h:6379#x", "query"},
      {"http://h:6379", "expected redis://"},
      {"h:6379", "expected redis://"},
      {"", "expected redis://"},
      {"redis://", "no host"},
      {"redis://:6379", "no host"},
      {"redis://h:0", "port"},
      {"redis://h:65536", "port"},
      {"redis://h:abc", "port"},
      {"redis://h:", "port"},
      {"redis://h:1/16", "database"},
      {"redis://h:1/x", "database"},
      {"redis://h:1/1/2", "database"},
      {"redis://::1:6379", "brackets"},
      {"redis://h st:1", "spaces"},
  };
  for (const auto& c : cases) {
    std::string error;
    EXPECT_FALSE(RedisAddress::parse(c.url, &error)) << c.url;
    EXPECT_NE(error.find(c.says), std::string::npos) << c.url << " -> " << error;
  }
  EXPECT_FALSE(RedisAddress::parse("rediss://h", nullptr));  // no place for the reason: fine
}

// ----- against redis-server -----------------------------------------------------------------

TEST_F(SharedTierTest, GetOnAnEmptyRedisMisses) {
  SharedTier tier(config("a"));
  EXPECT_FALSE(get_sync(tier, kName));
  const auto s = tier.stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.errors, 0u);
  EXPECT_TRUE(s.connected);
  EXPECT_EQ(s.reconnects, 1u);
}

TEST_F(SharedTierTest, AnEntryPutByOneReplicaIsServedByAnother) {
  SharedTier a(config("a"));
  SharedTier b(config("b"));
  ASSERT_TRUE(wait_connected(a));
  ASSERT_TRUE(wait_connected(b));
  EXPECT_EQ(a.fence(), b.fence()) << "one Redis, one epoch";

  const SharedEntry stored = make_entry(a.fence(), {"doc:1", "user:7"});
  a.put(kName, stored);
  ASSERT_TRUE(get_sync(a, kName)) << "a's own queue runs the put before the get";
  const auto entry = get_sync(b, kName);
  ASSERT_TRUE(entry);
  EXPECT_EQ(entry->bytes, stored.bytes);
  EXPECT_EQ(entry->usage, stored.usage);
  EXPECT_EQ(entry->cost, stored.cost);
  EXPECT_EQ(entry->keys, stored.keys);
  EXPECT_EQ(entry->fence, stored.fence);
  EXPECT_GT(entry->ttl, Duration::zero());
  EXPECT_LE(entry->ttl, stored.ttl);
  EXPECT_EQ(a.stats().puts, 1u);
  EXPECT_GE(b.stats().hits, 1u);
  EXPECT_FALSE(get_sync(b, kOtherName));
}

TEST_F(SharedTierTest, AWriteThroughAnotherReplicaMakesAnEntryStale) {
  SharedTier a(config("a"));
  SharedTier b(config("b"));
  ASSERT_TRUE(wait_connected(a));
  ASSERT_TRUE(wait_connected(b));
  const Fence before = a.fence();
  a.put(kName, make_entry(before, {"doc:1"}));
  ASSERT_TRUE(get_sync(a, kName)) << "a's own queue runs the put before the get";

  ASSERT_TRUE(write_sync(b, {"doc:1"}));
  EXPECT_FALSE(get_sync(a, kName)) << "doc:1 was written after the entry's fence";
  auto s = a.stats();
  EXPECT_EQ(s.stale, 1u);
  EXPECT_EQ(s.misses, 1u);
  // The stale entry was deleted: the next get is a plain miss.
  EXPECT_FALSE(get_sync(b, kName));
  EXPECT_EQ(b.stats().stale, 0u);
}

TEST_F(SharedTierTest, APutIsRefusedWhenAKeyItReadWasWrittenAfterItsFence) {
  SharedTier a(config("a"));
  SharedTier b(config("b"));
  ASSERT_TRUE(wait_connected(a));
  ASSERT_TRUE(wait_connected(b));
  const Fence started = a.fence();
  ASSERT_TRUE(write_sync(b, {"doc:2"}));
  a.put(kName, make_entry(started, {"doc:1", "doc:2"}));
  EXPECT_FALSE(get_sync(a, kName));
  auto s = a.stats();
  EXPECT_EQ(s.puts_refused, 1u);
  EXPECT_EQ(s.puts, 0u);

  // With a fence that has seen the write the same entry is shared.
  Fence after = b.fence();
  a.put(kName, make_entry(after, {"doc:1", "doc:2"}));
  EXPECT_TRUE(get_sync(a, kName));
  EXPECT_EQ(a.stats().puts, 1u);

  // A fence before the tier reached Redis shares nothing.
  a.put(kOtherName, make_entry(Fence{}, {}));
  EXPECT_FALSE(get_sync(a, kOtherName));
  EXPECT_EQ(a.stats().puts_refused, 2u);
}

TEST_F(SharedTierTest, ValidatePassesUntilAKeyIsWrittenOrTheEpochDiffers) {
  SharedTier a(config("a"));
  SharedTier b(config("b"));
  ASSERT_TRUE(wait_connected(a));
  ASSERT_TRUE(wait_connected(b));
  const Fence f = a.fence();
  EXPECT_TRUE(validate_sync(a, {"doc:1", "doc:2"}, f));
  EXPECT_TRUE(validate_sync(a, {}, f));
  ASSERT_TRUE(write_sync(b, {"doc:2"}));
  EXPECT_TRUE(validate_sync(a, {"doc:1"}, f)) << "doc:1 was not written";
  EXPECT_FALSE(validate_sync(a, {"doc:1", "doc:2"}, f));
  EXPECT_TRUE(validate_sync(a, {"doc:1", "doc:2"}, b.fence())) << "b's fence saw the write";
  EXPECT_FALSE(validate_sync(a, {"doc:1"}, Fence{"another-epoch", f.seq + 100}));
  EXPECT_FALSE(validate_sync(a, {"doc:1"}, Fence{}));
  const auto s = a.stats();
  EXPECT_EQ(s.validated, 4u);
  EXPECT_EQ(s.stale, 1u);
  EXPECT_EQ(s.errors, 0u);
}

TEST_F(SharedTierTest, InvalidationsReachOtherReplicasButAreNotEchoed) {
  SharedTier a(config("a"));
  SharedTier b(config("b"));
  std::mutex mu;
  std::vector<std::vector<std::string>> seen;
  Answer<std::vector<std::string>> first;
  auto first_callback = first.callback();
  a.on_invalidation([&](std::vector<std::string> keys) {
    std::lock_guard lock(mu);
    seen.push_back(keys);
    if (seen.size() == 1) first_callback(std::move(keys));
  });
  ASSERT_TRUE(wait_connected(a));
  ASSERT_TRUE(wait_connected(b));
  ASSERT_TRUE(subscribed(2)) << "both subscriptions in place";

  ASSERT_TRUE(write_sync(a, {"own:1"}));  // published first, ignored by a
  ASSERT_TRUE(write_sync(b, {"doc:1", "doc:2"}));
  const Fence b_fence = b.fence();
  const auto keys = first.wait({}, "on_invalidation");
  EXPECT_EQ(keys, (std::vector<std::string>{"doc:1", "doc:2"}));
  EXPECT_GE(a.fence().seq, b_fence.seq) << "the message moved a's fence";
  EXPECT_EQ(a.stats().invalidations, 1u);
  std::lock_guard lock(mu);
  EXPECT_EQ(seen.size(), 1u);
}

TEST_F(SharedTierTest, TheFenceMovesForwardWithEveryWrite) {
  SharedTier a(config("a"));
  ASSERT_TRUE(wait_connected(a));
  const Fence f0 = a.fence();
  ASSERT_TRUE(write_sync(a, {"doc:1"}));
  const Fence f1 = a.fence();
  EXPECT_EQ(f1.epoch, f0.epoch);
  EXPECT_GT(f1.seq, f0.seq);
  ASSERT_TRUE(write_sync(a, {"doc:1", "doc:3"}));
  EXPECT_GT(a.fence().seq, f1.seq);
  EXPECT_EQ(a.stats().writes, 2u);
  // A fence taken before the write no longer validates what it wrote.
  EXPECT_FALSE(validate_sync(a, {"doc:3"}, f1));
  EXPECT_TRUE(validate_sync(a, {"doc:3"}, a.fence()));
}

TEST_F(SharedTierTest, RedisKilledThenRestartedOnTheSamePort) {
  SharedTier a(config("a"));
  ASSERT_TRUE(wait_connected(a));
  const Fence old_fence = a.fence();
  a.put(kName, make_entry(old_fence, {"doc:1"}));
  ASSERT_TRUE(get_sync(a, kName));
  const int port = server_.port();

  // Down: every call answers (a miss, false, not shared) instead of hanging.
  server_.stop(SIGKILL);
  EXPECT_FALSE(get_sync(a, kName));
  EXPECT_FALSE(validate_sync(a, {"doc:1"}, old_fence));
  EXPECT_FALSE(write_sync(a, {"doc:9"}));
  auto s = a.stats();
  EXPECT_FALSE(s.connected);
  EXPECT_GE(s.errors, 3u);
  EXPECT_EQ(s.writes_deferred, 1u);
  EXPECT_EQ(s.pending_writes, 1u);

  // Back, empty (no persistence): a new epoch; the deferred write goes first.
  std::string error;
  ASSERT_TRUE(server_.start(port, &error)) << error;
  ASSERT_TRUE(eventually([&] {
    const auto st = a.stats();
    return st.connected && st.pending_writes == 0;
  })) << "the tier did not reconnect";
  s = a.stats();
  EXPECT_GE(s.epoch_changes, 1u);
  EXPECT_GE(s.reconnects, 2u);
  const Fence new_fence = a.fence();
  EXPECT_NE(new_fence.epoch, old_fence.epoch);
  EXPECT_GE(new_fence.seq, 1u) << "the deferred write reached the new Redis";
  EXPECT_FALSE(get_sync(a, kName)) << "entries of the old epoch are gone";
  EXPECT_FALSE(validate_sync(a, {"doc:1"}, old_fence)) << "an old-epoch fence never validates";
  EXPECT_TRUE(validate_sync(a, {"doc:1"}, new_fence));
  EXPECT_FALSE(validate_sync(a, {"doc:9"}, Fence{new_fence.epoch, 0}))
      << "doc:9 was written in the new epoch";
}

TEST_F(SharedTierTest, MissingMoreWritesThanTheBoundRenewsTheEpoch) {
  TierConfig c = config("a");
  c.max_pending_writes = 2;
  SharedTier a(c);
  SharedTier b(config("b"));
  ASSERT_TRUE(wait_connected(a));
  ASSERT_TRUE(wait_connected(b));
  const Fence shared = b.fence();
  b.put(kName, make_entry(shared, {}));
  ASSERT_TRUE(get_sync(b, kName));

  // Scripts wait while Redis pauses writes: a's write times out, and its three keys overflow
  // the bound of two.
  ASSERT_TRUE(redis_exchange(server_.port(), "CLIENT PAUSE 600000 WRITE", 1));
  EXPECT_FALSE(write_sync(a, {"k:1", "k:2", "k:3"}));
  auto s = a.stats();
  EXPECT_EQ(s.writes_deferred, 1u);
  EXPECT_EQ(s.pending_writes, 0u) << "the keys are dropped: the epoch will be renewed instead";
  ASSERT_TRUE(redis_exchange(server_.port(), "CLIENT UNPAUSE", 1));

  ASSERT_TRUE(eventually([&] { return a.fence().epoch != shared.epoch && a.stats().connected; }))
      << "a did not renew the epoch";
  EXPECT_EQ(a.stats().epoch_changes, 1u);
  EXPECT_FALSE(validate_sync(b, {}, shared)) << "every fence of the old epoch is void";
  EXPECT_FALSE(get_sync(b, kName)) << "every entry of the old epoch is void";
}

TEST_F(SharedTierTest, EveryCallbackRunsOnceAlsoWhenTheTierIsDestroyed) {
  constexpr int kJobs = 300;
  auto answered = std::make_shared<std::atomic<int>>(0);
  {
    SharedTier a(config("a"));
    for (int i = 0; i < kJobs; ++i) {
      a.get(Hash128{0, static_cast<std::uint64_t>(i)},
            [answered](std::optional<SharedEntry>) { ++*answered; });
      a.validate({"doc:1"}, a.fence(), [answered](bool) { ++*answered; });
      a.write({"doc:" + std::to_string(i)}, [answered](bool) { ++*answered; });
    }
  }  // some ran, the rest were failed by the destructor
  EXPECT_EQ(answered->load(), 3 * kJobs);
}

TEST(SharedTierUnreachableTest, FailsAtOnceAndKeepsWritesForLater) {
  TierConfig c;
  c.address.port = free_port();  // nothing listens there
  c.timeout = 200ms;
  c.backoff_min = 10ms;
  c.backoff_max = 200ms;
  c.max_pending_writes = 3;
  SharedTier tier(c);
  EXPECT_TRUE(tier.fence().epoch.empty() || !tier.stats().connected);
  EXPECT_FALSE(get_sync(tier, kName));
  EXPECT_FALSE(validate_sync(tier, {"doc:1"}, Fence{"e", 1}));
  EXPECT_FALSE(write_sync(tier, {"doc:1", "doc:2"}));
  EXPECT_FALSE(write_sync(tier, {"doc:2", "doc:3"}));
  auto s = tier.stats();
  EXPECT_FALSE(s.connected);
  EXPECT_EQ(s.writes_deferred, 2u);
  EXPECT_EQ(s.pending_writes, 3u) << "doc:1..3, each once";
  EXPECT_EQ(s.hits + s.misses + s.validated + s.writes, 0u);
  EXPECT_EQ(s.errors, 4u);
  EXPECT_FALSE(write_sync(tier, {"doc:4"}));
  EXPECT_EQ(tier.stats().pending_writes, 0u) << "over the bound: the epoch is to be renewed";
  EXPECT_TRUE(tier.fence().epoch.empty());
  EXPECT_FALSE(tier.config().replica.empty()) << "a random replica id";
}

}  // namespace
}  // namespace dynrt::store

#include "runtime/csl/store.hpp"

#include <gtest/gtest.h>

#include <set>

namespace dynrt::csl {
namespace {

using std::chrono::seconds;

Hash128 N(std::string_view s) {
  return xxh3_128(s);
}

class StoreTest : public ::testing::Test {
 protected:
  Insert make(std::string_view name, std::vector<std::string> reads = {},
              std::vector<EntryRef> producers = {}) {
    Insert in;
    in.name = N(name);
    in.bytes = "result of " + std::string(name);
    in.usage = Usage{10, 20};
    in.cost = std::chrono::milliseconds(250);
    in.reads = store_.snapshot(reads);
    in.producers = std::move(producers);
    return in;
  }
  Insert shadow(std::string_view name, std::uint64_t branch, std::vector<std::string> reads = {},
                std::vector<EntryRef> producers = {}) {
    Insert in = make(name, std::move(reads), std::move(producers));
    in.provenance = Provenance{Origin::fill, 100 + branch, branch};
    return in;
  }
  EntryRef put(std::string_view name, std::vector<std::string> reads = {},
               std::vector<EntryRef> producers = {}) {
    const InsertResult r = store_.put_confirmed(make(name, std::move(reads), std::move(producers)));
    EXPECT_EQ(r.status, InsertStatus::stored) << name;
    return r.ref;
  }
  bool present(std::string_view name) const { return store_.find(N(name)).has_value(); }

  ManualClock clock_;
  Store store_{clock_};
};

TEST_F(StoreTest, AConfirmedEntryIsServed) {
  put("a", {"doc:1"});
  const auto hit = store_.probe(N("a"));
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->bytes, "result of a");
  EXPECT_EQ(hit->usage, (Usage{10, 20}));
  EXPECT_EQ(hit->cost, std::chrono::milliseconds(250));
  EXPECT_EQ(hit->provenance.origin, Origin::canonical);
  EXPECT_FALSE(store_.probe(N("b")));
  EXPECT_EQ(store_.stats().hits, 1u);
  EXPECT_EQ(store_.stats().misses, 1u);
  EXPECT_EQ(store_.size(), 1u);
  EXPECT_EQ(store_.bytes(), std::string("result of a").size());
}

TEST_F(StoreTest, AShadowIsInvisibleUntilAnExactDemandPromotesIt) {
  const InsertResult r = store_.put_shadow(shadow("h1", 7, {"api:weather"}));
  ASSERT_EQ(r.status, InsertStatus::stored);
  EXPECT_FALSE(store_.probe(N("h1")));  // not authorized yet
  EXPECT_EQ(store_.state(r.ref), State::shadow);
  const auto promoted = store_.promote(N("h1"));
  ASSERT_TRUE(promoted);
  EXPECT_EQ(promoted->bytes, "result of h1");
  EXPECT_EQ(promoted->provenance, (Provenance{Origin::fill, 107, 7}));  // credit names the fill
  EXPECT_EQ(store_.state(r.ref), State::confirmed);
  EXPECT_TRUE(store_.probe(N("h1")));
  EXPECT_FALSE(store_.promote(N("h1")));  // already confirmed: probe serves it
  EXPECT_EQ(store_.shadow_count(), 0u);
  EXPECT_TRUE(store_.shadows_of(7).empty());
}

TEST_F(StoreTest, PromotionOfAStaleShadowIsAMissAndDropsIt) {
  store_.put_shadow(shadow("h1", 1, {"api:weather"}));
  store_.write(std::vector<std::string>{"api:weather"});
  EXPECT_FALSE(store_.promote(N("h1")));
  EXPECT_FALSE(present("h1"));
}

TEST_F(StoreTest, PromotionOfAnExpiredShadowIsAMissAndDropsIt) {
  Insert in = shadow("h1", 1);
  in.ttl = seconds(10);
  store_.put_shadow(std::move(in));
  clock_.advance(seconds(10));
  EXPECT_FALSE(store_.promote(N("h1")));
  EXPECT_FALSE(present("h1"));
  EXPECT_EQ(store_.stats().expired, 1u);
}

TEST_F(StoreTest, AWriteInvalidatesEveryReader) {
  put("a", {"doc:1"});
  put("b", {"doc:1", "doc:2"});
  put("c", {"doc:2"});
  put("d", {"doc:3"});
  EXPECT_EQ(store_.write(std::vector<std::string>{"doc:1"}), 2u);
  EXPECT_FALSE(store_.probe(N("a")));
  EXPECT_FALSE(store_.probe(N("b")));
  EXPECT_TRUE(store_.probe(N("c")));
  EXPECT_TRUE(store_.probe(N("d")));
  EXPECT_EQ(store_.version("doc:1"), 1u);
  EXPECT_EQ(store_.version("never-written"), 0u);
}

// "A late result never resurrects a stale entry": the execution snapshots its read versions
// at start; a write lands while it runs; the insert is refused.
TEST_F(StoreTest, ALateResultAfterAWriteIsNotStored) {
  Insert in = make("late", {"doc:1"});
  store_.write(std::vector<std::string>{"doc:1"});
  EXPECT_EQ(store_.put_confirmed(std::move(in)).status, InsertStatus::stale);
  EXPECT_FALSE(present("late"));
  Insert fill = shadow("late-fill", 3, {"doc:1"});
  store_.write(std::vector<std::string>{"doc:1"});
  EXPECT_EQ(store_.put_shadow(std::move(fill)).status, InsertStatus::stale);
  EXPECT_EQ(store_.stats().stale_inserts, 2u);
  // A write to an unrelated record does not matter.
  Insert ok = make("ok", {"doc:2"});
  store_.write(std::vector<std::string>{"doc:3"});
  EXPECT_EQ(store_.put_confirmed(std::move(ok)).status, InsertStatus::stored);
}

TEST_F(StoreTest, AResultWhoseProducerLeftIsNotStored) {
  const EntryRef p = put("p", {"doc:1"});
  Insert in = make("c", {}, {p});
  store_.write(std::vector<std::string>{"doc:1"});
  EXPECT_EQ(store_.put_confirmed(std::move(in)).status, InsertStatus::stale);
}

// -- the cascade (Proposition A.5) --------------------------------------------------------------

TEST_F(StoreTest, CascadeFollowsAChain) {
  const EntryRef a = put("a", {"doc:1"});
  const EntryRef b = put("b", {}, {a});
  const EntryRef c = put("c", {}, {b});
  put("unrelated", {"doc:2"});
  EXPECT_EQ(store_.write(std::vector<std::string>{"doc:1"}), 3u);
  EXPECT_FALSE(store_.state(a));
  EXPECT_FALSE(store_.state(b));
  EXPECT_FALSE(store_.state(c));
  EXPECT_TRUE(present("unrelated"));
  EXPECT_EQ(store_.stats().invalidated, 1u);
  EXPECT_EQ(store_.stats().orphaned, 2u);
}

TEST_F(StoreTest, CascadeCoversADiamondOnce) {
  const EntryRef a = put("a", {"doc:1"});
  const EntryRef b = put("b", {}, {a});
  const EntryRef c = put("c", {}, {a});
  put("d", {}, {b, c});
  EXPECT_EQ(store_.write(std::vector<std::string>{"doc:1"}), 4u);
  EXPECT_EQ(store_.size(), 0u);
}

TEST_F(StoreTest, AnEntryWithAnotherValidProducerSurvives) {
  const EntryRef p1 = put("p1", {"doc:1"});
  const EntryRef p2 = put("p2", {"doc:2"});
  put("c", {}, {p1, p2});
  EXPECT_EQ(store_.write(std::vector<std::string>{"doc:1"}), 1u);  // p1 only
  EXPECT_TRUE(store_.probe(N("c")));
  EXPECT_EQ(store_.write(std::vector<std::string>{"doc:2"}), 2u);  // p2, and c with its last one
  EXPECT_FALSE(present("c"));
}

TEST_F(StoreTest, AnEntryDiesWithItsOwnReadsWhateverItsProducers) {
  const EntryRef p = put("p", {"doc:1"});
  put("c", {"doc:2"}, {p});
  EXPECT_EQ(store_.write(std::vector<std::string>{"doc:2"}), 1u);
  EXPECT_TRUE(present("p"));
  EXPECT_FALSE(present("c"));
}

TEST_F(StoreTest, RootsWithoutProducersOnlyDieFromTheirOwnReads) {
  const EntryRef a = put("a", {"doc:1"});
  put("root");  // read nothing, built from nothing
  put("child", {}, {a});
  store_.write(std::vector<std::string>{"doc:1"});
  EXPECT_TRUE(present("root"));
  EXPECT_FALSE(present("child"));
}

TEST_F(StoreTest, RemovalForAnyReasonCascades) {
  // A discarded loser takes the rest of its fill chain with it.
  const InsertResult retrieve = store_.put_shadow(shadow("retrieve(Oslo)", 4, {"corpus:Oslo"}));
  store_.put_shadow(shadow("read(Oslo)", 4, {}, {retrieve.ref}));
  EXPECT_EQ(store_.discard(retrieve.ref), 2u);
  EXPECT_EQ(store_.shadow_count(), 0u);
}

// Reuse off: a promoted result serves its demand and goes, but the chain built on it stays
// promotable; it now stands on its own reads (a write to them still removes it).
TEST_F(StoreTest, RetiringAPromotedEntryKeepsItsChain) {
  const InsertResult handle = store_.put_shadow(shadow("handle(weather)", 4, {}));
  store_.put_shadow(shadow("execute(weather)", 4, {"api:weather"}, {handle.ref}));
  ASSERT_TRUE(store_.promote(N("handle(weather)")));
  EXPECT_EQ(store_.retire(handle.ref), 1u);
  EXPECT_EQ(store_.retire(handle.ref), 0u);  // twice is harmless
  EXPECT_FALSE(store_.probe(N("handle(weather)")));
  EXPECT_EQ(store_.stats().retired, 1u);
  EXPECT_EQ(store_.stats().discarded, 0u);
  const auto execute = store_.promote(N("execute(weather)"));
  ASSERT_TRUE(execute);
  // The executor goes with the write, and the retired handler node (kept only for it) too.
  EXPECT_EQ(store_.write(std::vector<std::string>{"api:weather"}), 2u);
  EXPECT_FALSE(store_.probe(N("execute(weather)")));
  EXPECT_EQ(store_.size(), 0u);
}

// The chain's next stage is still running when its producer is served and retired: it can
// still be stored on the retired node, and a write to what the retired node read reaches it.
TEST_F(StoreTest, ARetiredProducerStillCarriesFreshness) {
  const InsertResult research = store_.put_shadow(shadow("research(Ada)", 5, {"kb:Ada"}));
  ASSERT_TRUE(store_.promote(N("research(Ada)")));
  EXPECT_EQ(store_.retire(research.ref), 1u);
  EXPECT_EQ(store_.state(research.ref), State::retired);
  EXPECT_EQ(store_.bytes(), 0u);
  // A new result under the same name is not blocked by the retired node.
  EXPECT_EQ(store_.put_shadow(shadow("research(Ada)", 6, {"kb:Ada"})).status, InsertStatus::stored);
  const InsertResult summary = store_.put_shadow(shadow("summarize(Ada)", 5, {}, {research.ref}));
  ASSERT_EQ(summary.status, InsertStatus::stored);
  store_.write(std::vector<std::string>{"kb:Ada"});
  EXPECT_FALSE(store_.promote(N("summarize(Ada)"))) << "built on a record that was written";
  EXPECT_FALSE(store_.state(research.ref));
}

TEST_F(StoreTest, TheObserverSeesEveryRemovalAndWhy) {
  std::vector<std::pair<Hash128, RemovalReason>> seen;
  store_.set_observer(
      [&](EntryRef, const Hash128& n, RemovalReason r) { seen.emplace_back(n, r); });
  const EntryRef a = put("a", {"doc:1"});
  put("b", {}, {a});
  store_.write(std::vector<std::string>{"doc:1"});
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], std::make_pair(N("a"), RemovalReason::invalidated));
  EXPECT_EQ(seen[1], std::make_pair(N("b"), RemovalReason::orphaned));
}

// -- branches -----------------------------------------------------------------------------------

TEST_F(StoreTest, ShadowsAreListedPerBranchWithTheirReads) {
  const auto h1 = store_.put_shadow(shadow("h1", 1, {"api:weather"}));
  const auto h2 = store_.put_shadow(shadow("h2", 1, {"api:email", "acct:9"}));
  store_.put_shadow(shadow("x", 2));
  put("confirmed");
  const auto views = store_.shadows_of(1);
  ASSERT_EQ(views.size(), 2u);
  std::set<Hash128> names;
  for (const auto& v : views)
    names.insert(v.name);
  EXPECT_EQ(names, (std::set<Hash128>{N("h1"), N("h2")}));
  for (const auto& v : views) {
    if (v.ref == h2.ref) {
      EXPECT_EQ(v.reads, (std::vector<ReadRef>{{"acct:9", 0}, {"api:email", 0}}));
    } else {
      EXPECT_EQ(v.ref, h1.ref);
    }
  }
  EXPECT_EQ(store_.shadows_of(2).size(), 1u);
  EXPECT_TRUE(store_.shadows_of(3).empty());
}

TEST_F(StoreTest, AnExclusiveBranchDiscardsItsLosersAndKeepsTheWinner) {
  const auto win = store_.put_shadow(shadow("h1", 5));
  store_.put_shadow(shadow("h2", 5));
  store_.put_shadow(shadow("h3", 5));
  store_.put_shadow(shadow("other-branch", 6));
  EXPECT_EQ(store_.discard_branch(5, std::vector<EntryRef>{win.ref}), 2u);
  EXPECT_TRUE(present("h1"));
  EXPECT_FALSE(present("h2"));
  EXPECT_FALSE(present("h3"));
  EXPECT_TRUE(present("other-branch"));
  EXPECT_EQ(store_.stats().discarded, 2u);
  EXPECT_TRUE(store_.promote(N("h1")));
}

TEST_F(StoreTest, DiscardNeverTouchesConfirmedEntries) {
  const EntryRef a = put("a");
  EXPECT_EQ(store_.discard(a), 0u);
  EXPECT_TRUE(present("a"));
}

// -- names, duplicates, handles ---------------------------------------------------------------

TEST_F(StoreTest, ACanonicalResultReplacesAShadowOfTheSameName) {
  store_.put_shadow(shadow("h", 1));
  Insert canonical = make("h");
  canonical.bytes = "canonical";
  EXPECT_EQ(store_.put_confirmed(std::move(canonical)).status, InsertStatus::stored);
  EXPECT_EQ(store_.probe(N("h"))->bytes, "canonical");
  EXPECT_EQ(store_.shadow_count(), 0u);
  EXPECT_TRUE(store_.shadows_of(1).empty());
}

TEST_F(StoreTest, DuplicatesKeepTheEntryAlreadyPresent) {
  const EntryRef a = put("a");
  Insert again = make("a");
  again.bytes = "other";
  const InsertResult r = store_.put_confirmed(std::move(again));
  EXPECT_EQ(r.status, InsertStatus::duplicate);
  EXPECT_EQ(r.ref, a);
  EXPECT_EQ(store_.put_shadow(shadow("a", 1)).status, InsertStatus::duplicate);
  EXPECT_EQ(store_.probe(N("a"))->bytes, "result of a");
}

TEST_F(StoreTest, AStaleHandleNeverMatchesANewEntryInItsSlot) {
  const EntryRef a = put("a", {"doc:1"});
  store_.write(std::vector<std::string>{"doc:1"});
  const EntryRef b = put("b");
  EXPECT_EQ(a.index, b.index);  // the slot is reused
  EXPECT_FALSE(store_.state(a));
  Insert child = make("child", {}, {a});
  EXPECT_EQ(store_.put_confirmed(std::move(child)).status, InsertStatus::stale);
}

TEST_F(StoreTest, ReadsListedTwiceCountOnce) {
  Insert in = make("a", {"doc:1", "doc:1"});
  EXPECT_EQ(store_.put_confirmed(std::move(in)).status, InsertStatus::stored);
  EXPECT_EQ(store_.write(std::vector<std::string>{"doc:1"}), 1u);
  EXPECT_EQ(store_.record_count(), 1u);
}

TEST_F(StoreTest, ManyInsertsAndRemovalsKeepEveryNameFindable) {
  std::vector<EntryRef> refs;
  for (int i = 0; i < 20000; ++i) {
    refs.push_back(put("n" + std::to_string(i), {"doc:" + std::to_string(i % 97)}));
  }
  for (int k = 0; k < 97; k += 2)
    store_.write(std::vector<std::string>{"doc:" + std::to_string(k)});
  for (int i = 0; i < 20000; ++i) {
    const bool gone = (i % 97) % 2 == 0;
    EXPECT_EQ(store_.find(N("n" + std::to_string(i))).has_value(), !gone) << i;
  }
}

// -- budgets and time ---------------------------------------------------------------------------

TEST(StoreBudget, TheEntryBudgetEvictsAndEvictionIsAMiss) {
  ManualClock clock;
  Limits limits;
  limits.max_entries = 4;
  Store store(clock, limits);
  for (int i = 0; i < 10; ++i) {
    Insert in;
    in.name = N("e" + std::to_string(i));
    in.bytes = "x";
    ASSERT_EQ(store.put_confirmed(std::move(in)).status, InsertStatus::stored);
    EXPECT_LE(store.size(), 4u);
  }
  EXPECT_EQ(store.size(), 4u);
  EXPECT_EQ(store.stats().evicted, 6u);
  int hits = 0;
  for (int i = 0; i < 10; ++i) {
    if (auto h = store.probe(N("e" + std::to_string(i)))) {
      EXPECT_EQ(h->bytes, "x");  // never an empty result
      ++hits;
    }
  }
  EXPECT_EQ(hits, 4);
}

TEST(StoreBudget, TheByteBudgetEvictsAndOversizedResultsAreRefused) {
  ManualClock clock;
  Limits limits;
  limits.max_bytes = 100;
  Store store(clock, limits);
  for (int i = 0; i < 5; ++i) {
    Insert in;
    in.name = N("e" + std::to_string(i));
    in.bytes = std::string(40, 'x');
    ASSERT_EQ(store.put_confirmed(std::move(in)).status, InsertStatus::stored);
    EXPECT_LE(store.bytes(), 100u);
  }
  Insert big;
  big.name = N("big");
  big.bytes = std::string(101, 'x');
  EXPECT_EQ(store.put_confirmed(std::move(big)).status, InsertStatus::too_large);
}

TEST(StoreBudget, EvictionPrefersLowValueEntries) {
  ManualClock clock;
  Limits limits;
  limits.max_entries = 64;
  limits.eviction_sample = 64;  // sample everything: the choice is then exact
  Store store(clock, limits);
  for (int i = 0; i < 64; ++i) {
    Insert in;
    in.name = N("e" + std::to_string(i));
    in.bytes = "x";
    in.cost = std::chrono::milliseconds(i == 7 ? 1 : 1000);
    store.put_confirmed(std::move(in));
  }
  Insert extra;
  extra.name = N("extra");
  extra.bytes = "x";
  extra.cost = std::chrono::milliseconds(1000);
  store.put_confirmed(std::move(extra));
  EXPECT_FALSE(store.find(N("e7")));
}

// A store of two entries, both full.
struct TwoEntryStore {
  ManualClock clock;
  Store store{clock, [] {
                Limits l;
                l.max_entries = 2;
                return l;
              }()};
  EntryRef r1 = put("p1");
  EntryRef r2 = put("p2");
  InsertResult insert(std::vector<EntryRef> producers) {
    Insert c;
    c.name = N("c");
    c.producers = std::move(producers);
    return store.put_confirmed(std::move(c));
  }
  EntryRef put(const char* name) {
    Insert in;
    in.name = N(name);
    return store.put_confirmed(std::move(in)).ref;
  }
};

TEST(StoreBudget, AnInsertsOwnProducersAreNotEvictedToMakeRoom) {
  TwoEntryStore s;
  ASSERT_EQ(s.insert({s.r1}).status, InsertStatus::stored);
  EXPECT_TRUE(s.store.state(s.r1));
  EXPECT_FALSE(s.store.state(s.r2));
}

TEST(StoreBudget, NoRoomWhenEveryEntryIsAProducerOfTheNewOne) {
  TwoEntryStore s;
  EXPECT_EQ(s.insert({s.r1, s.r2}).status, InsertStatus::no_room);
  EXPECT_EQ(s.store.size(), 2u);
}

TEST(StoreTime, EveryEntryHasAMaximumTtl) {
  ManualClock clock;
  Limits limits;
  limits.max_ttl = seconds(60);
  Store store(clock, limits);
  Insert forever;
  forever.name = N("a");
  forever.ttl = std::chrono::hours(1000);
  store.put_confirmed(std::move(forever));
  Insert unset;
  unset.name = N("b");
  store.put_confirmed(std::move(unset));
  clock.advance(seconds(59));
  EXPECT_TRUE(store.probe(N("a")));
  clock.advance(seconds(1));
  EXPECT_FALSE(store.probe(N("a")));
  EXPECT_EQ(store.expire(), 1u);  // b
  EXPECT_EQ(store.size(), 0u);
}

TEST(StoreTime, ExpireSweepsIncrementally) {
  ManualClock clock;
  Store store(clock);
  for (int i = 0; i < 10; ++i) {
    Insert in;
    in.name = N("e" + std::to_string(i));
    in.ttl = seconds(i < 5 ? 1 : 100);
    store.put_confirmed(std::move(in));
  }
  clock.advance(seconds(2));
  std::size_t removed = 0;
  for (int step = 0; step < 5; ++step)
    removed += store.expire(2);
  EXPECT_EQ(removed, 5u);
  EXPECT_EQ(store.size(), 5u);
}

TEST(StoreRecords, ForgettingRecordVersionsIsConservative) {
  ManualClock clock;
  Limits limits;
  limits.max_records = 8;
  Store store(clock, limits);
  Insert in;
  in.name = N("late");
  in.reads = store.snapshot(std::vector<std::string>{"quiet"});
  for (int i = 0; i < 20; ++i)
    store.write(std::vector<std::string>{"k" + std::to_string(i)});
  EXPECT_LE(store.record_count(), 8u);
  // "quiet" was never written, but after forgetting, it can no longer prove that: refused.
  EXPECT_EQ(store.put_confirmed(std::move(in)).status, InsertStatus::stale);
  Insert fresh;
  fresh.name = N("fresh");
  fresh.reads = store.snapshot(std::vector<std::string>{"quiet"});
  EXPECT_EQ(store.put_confirmed(std::move(fresh)).status, InsertStatus::stored);
  EXPECT_EQ(store.write(std::vector<std::string>{"quiet"}), 1u);
}

// A caller names record keys (a write, a tool's arguments): neither their length nor their
// total size may make the version table grow without bound.
TEST(StoreRecords, LongKeysAreNotRememberedAndKeyBytesAreBounded) {
  ManualClock clock;
  Limits limits;
  limits.max_record_bytes = 10 * kMaxStoredKeyBytes;
  Store store(clock, limits);
  const std::string long_key(kMaxStoredKeyBytes + 1, 'x');
  Insert in;
  in.name = N("long");
  in.reads = store.snapshot(std::vector<std::string>{"short", long_key});
  EXPECT_EQ(store.put_confirmed(std::move(in)).status, InsertStatus::long_key);
  EXPECT_EQ(store.size(), 0u);
  EXPECT_EQ(store.write(std::vector<std::string>{long_key}), 0u);
  EXPECT_EQ(store.record_count(), 0u) << "a key too long to have been read is not remembered";

  Insert kept;
  kept.name = N("kept");
  kept.reads = store.snapshot(std::vector<std::string>{std::string(kMaxStoredKeyBytes, 'k')});
  ASSERT_EQ(store.put_confirmed(std::move(kept)).status, InsertStatus::stored);
  for (int i = 0; i < 100; ++i)
    store.write(std::vector<std::string>{std::to_string(i) + std::string(1000, 'w')});
  EXPECT_LE(store.record_bytes(), limits.max_record_bytes);
  // The key a stored result reads is kept (it is never forgotten), and its write still lands.
  EXPECT_EQ(store.write(std::vector<std::string>{std::string(kMaxStoredKeyBytes, 'k')}), 1u);
}

}  // namespace
}  // namespace dynrt::csl

// The CSL against a brute-force model (RapidCheck). Random sequences of puts, shadows,
// promotions, probes, writes, discards, expiry, time and budget evictions run on both; after
// every step the two must hold exactly the same entries in the same states, and every probe
// and promotion must agree: the real store never serves what the model calls stale,
// unauthorized, expired or evicted, and never misses what the model calls a fresh confirmed
// hit. The model recomputes validity from scratch (a fixpoint over all entries) rather than
// following the store's incremental cascade, so the two are independent.
#include "runtime/csl/store.hpp"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <map>
#include <set>

namespace dynrt::csl {
namespace {

constexpr int kNames = 10;
constexpr int kKeys = 5;

std::string name_text(int n) {
  return "name" + std::to_string(n);
}
std::string key_text(int k) {
  return "record" + std::to_string(k);
}
Hash128 name_hash(int n) {
  return xxh3_128(name_text(n));
}

struct ModelEntry {
  std::uint64_t uid;
  std::string bytes;
  std::map<std::string, Version> reads;
  std::set<std::uint64_t> producers;  // uids, live ones only
  bool had_producers;
  bool shadow;
  std::uint64_t branch;
  std::int64_t expires;
};

class Model {
 public:
  std::map<int, ModelEntry> entries;  // by name index
  std::map<std::string, Version> versions;
  Version sequence = 0;

  Version version(const std::string& k) const {
    const auto it = versions.find(k);
    return it == versions.end() ? 0 : it->second;
  }
  bool fresh(const ModelEntry& e) const {
    for (const auto& [k, v] : e.reads) {
      if (version(k) != v) return false;
    }
    return true;
  }
  std::optional<int> by_uid(std::uint64_t uid) const {
    for (const auto& [n, e] : entries) {
      if (e.uid == uid) return n;
    }
    return std::nullopt;
  }
  // Removes `n`, then every entry left without a live producer that had one, to a fixpoint.
  void remove_with_cascade(int n) {
    entries.erase(n);
    bool changed = true;
    while (changed) {
      changed = false;
      std::set<std::uint64_t> live;
      for (const auto& [m, e] : entries)
        live.insert(e.uid);
      for (auto it = entries.begin(); it != entries.end();) {
        auto& e = it->second;
        for (auto p = e.producers.begin(); p != e.producers.end();) {
          p = live.count(*p) ? std::next(p) : e.producers.erase(p);
        }
        if (e.had_producers && e.producers.empty()) {
          it = entries.erase(it);
          changed = true;
        } else {
          ++it;
        }
      }
    }
  }
  void write(const std::vector<std::string>& keys) {
    for (const auto& k : keys)
      versions[k] = ++sequence;
    std::vector<int> readers;
    for (const auto& [n, e] : entries) {
      for (const auto& k : keys) {
        if (e.reads.count(k)) readers.push_back(n);
      }
    }
    for (const int n : readers) {
      if (entries.count(n)) remove_with_cascade(n);
    }
  }
};

RC_GTEST_PROP(CslModel, RealStoreAgreesWithTheBruteForceModel, ()) {
  ManualClock clock;
  Limits limits;
  limits.max_entries = *rc::gen::inRange<std::size_t>(3, 9);
  // Room can always be made: at most two producers (under 60 bytes each) are pinned at once.
  limits.max_bytes = *rc::gen::inRange<std::size_t>(200, 400);
  limits.max_ttl = std::chrono::seconds(60);
  limits.seed = *rc::gen::inRange<std::uint64_t>(1, 1000);
  Store store(clock, limits);
  Model model;
  std::vector<int> evicted;
  store.set_observer([&](EntryRef, const Hash128& name, RemovalReason why) {
    if (why != RemovalReason::evicted) return;
    for (int n = 0; n < kNames; ++n) {
      if (name_hash(n) == name) evicted.push_back(n);
    }
  });
  std::map<std::uint64_t, EntryRef> refs;  // model uid -> store handle
  std::uint64_t next_uid = 1;
  const auto now_ns = [&] { return clock.now().time_since_epoch().count(); };

  const int steps = *rc::gen::inRange(1, 120);
  for (int step = 0; step < steps; ++step) {
    const int op = *rc::gen::inRange(0, 100);
    if (op < 35) {  // put_confirmed or put_shadow, maybe late, maybe with producers
      const bool is_shadow = *rc::gen::arbitrary<bool>();
      const int n = *rc::gen::inRange(0, kNames);
      std::vector<std::string> keys;
      for (int k = 0; k < kKeys; ++k) {
        if (*rc::gen::inRange(0, 4) == 0) keys.push_back(key_text(k));
      }
      Insert in;
      in.name = name_hash(n);
      in.bytes =
          std::string(*rc::gen::inRange<std::size_t>(0, 60), 'a' + static_cast<char>(step % 26));
      in.reads = store.snapshot(keys);
      in.ttl = std::chrono::seconds(*rc::gen::inRange(1, 90));
      const std::uint64_t branch = *rc::gen::inRange<std::uint64_t>(1, 4);
      if (is_shadow) in.provenance = Provenance{Origin::fill, 1, branch};
      std::set<std::uint64_t> producer_uids;
      for (const auto& [m, e] : model.entries) {
        if (m != n && producer_uids.empty() && *rc::gen::inRange(0, 4) == 0) {
          producer_uids.insert(e.uid);
        }
      }
      if (!refs.empty() && *rc::gen::inRange(0, 10) == 0) {  // a handle that may have died
        producer_uids.insert(*rc::gen::inRange<std::uint64_t>(1, next_uid));
      }
      for (const auto uid : producer_uids)
        in.producers.push_back(refs.at(uid));
      if (*rc::gen::inRange(0, 6) == 0 && !keys.empty()) {  // a write lands while it runs
        const std::vector<std::string> w{keys.front()};
        store.write(w);
        model.write(w);
      }
      const std::map<std::string, Version> reads = [&] {
        std::map<std::string, Version> m;
        for (const auto& r : in.reads)
          m[r.key] = r.version;
        return m;
      }();
      const std::string bytes = in.bytes;
      const std::int64_t expires =
          now_ns() + std::chrono::nanoseconds(std::min<Duration>(in.ttl, limits.max_ttl)).count();
      const InsertResult r =
          is_shadow ? store.put_shadow(std::move(in)) : store.put_confirmed(std::move(in));

      // The model's verdict, in the store's order: size, an expired namesake, duplicate,
      // stale reads and producers, replacement of a shadow, room, producers again.
      InsertStatus expected = InsertStatus::stored;
      if (bytes.size() > limits.max_bytes) expected = InsertStatus::too_large;
      bool replace = false;
      if (expected == InsertStatus::stored) {
        auto existing = model.entries.find(n);
        if (existing != model.entries.end() && now_ns() >= existing->second.expires) {
          model.remove_with_cascade(n);
          existing = model.entries.end();
        }
        if (existing != model.entries.end()) {
          if (!is_shadow && existing->second.shadow) {
            replace = true;
          } else {
            expected = InsertStatus::duplicate;
          }
        }
      }
      if (expected == InsertStatus::stored) {
        for (const auto& [k, v] : reads) {
          if (model.version(k) != v) expected = InsertStatus::stale;
        }
        for (const auto uid : producer_uids) {
          if (!model.by_uid(uid)) expected = InsertStatus::stale;
        }
      }
      if (expected == InsertStatus::stored && replace) model.remove_with_cascade(n);
      for (const int e : evicted) {
        if (model.entries.count(e)) model.remove_with_cascade(e);
      }
      evicted.clear();
      if (expected == InsertStatus::stored) {
        for (const auto uid : producer_uids) {
          if (!model.by_uid(uid)) expected = InsertStatus::stale;  // evicted with an ancestor
        }
      }
      RC_ASSERT(static_cast<int>(r.status) == static_cast<int>(expected));
      if (r.status == InsertStatus::stored) {
        const std::uint64_t uid = next_uid++;
        refs[uid] = r.ref;
        model.entries[n] = ModelEntry{
            uid, bytes, reads, producer_uids, !producer_uids.empty(), is_shadow, branch, expires};
      }
    } else if (op < 55) {  // probe
      const int n = *rc::gen::inRange(0, kNames);
      const auto hit = store.probe(name_hash(n));
      const auto it = model.entries.find(n);
      const bool model_hit = it != model.entries.end() && !it->second.shadow &&
                             now_ns() < it->second.expires && model.fresh(it->second);
      RC_ASSERT(hit.has_value() == model_hit);
      if (hit) RC_ASSERT(std::string(hit->bytes) == it->second.bytes);
      if (it != model.entries.end() && !it->second.shadow && !model_hit) {
        model.remove_with_cascade(n);  // an expired entry is dropped on the way
      }
    } else if (op < 70) {  // promote
      const int n = *rc::gen::inRange(0, kNames);
      const auto hit = store.promote(name_hash(n));
      const auto it = model.entries.find(n);
      const bool shadow = it != model.entries.end() && it->second.shadow;
      const bool ok = shadow && now_ns() < it->second.expires && model.fresh(it->second);
      RC_ASSERT(hit.has_value() == ok);
      if (ok) {
        RC_ASSERT(std::string(hit->bytes) == it->second.bytes);
        it->second.shadow = false;
      } else if (shadow) {
        model.remove_with_cascade(n);
      }
    } else if (op < 82) {  // write
      std::vector<std::string> keys;
      for (int k = 0; k < kKeys; ++k) {
        if (*rc::gen::inRange(0, 3) == 0) keys.push_back(key_text(k));
      }
      const std::size_t before = model.entries.size();
      model.write(keys);
      RC_ASSERT(store.write(keys) == before - model.entries.size());
    } else if (op < 88) {  // a branch discards its shadows
      const std::uint64_t branch = *rc::gen::inRange<std::uint64_t>(1, 4);
      store.discard_branch(branch);
      std::vector<int> gone;
      for (const auto& [n, e] : model.entries) {
        if (e.shadow && e.branch == branch) gone.push_back(n);
      }
      for (const int n : gone) {
        if (model.entries.count(n)) model.remove_with_cascade(n);
      }
    } else if (op < 95) {  // time passes
      clock.advance(std::chrono::seconds(*rc::gen::inRange(1, 40)));
    } else {  // sweep expired entries
      store.expire();
      std::vector<int> gone;
      for (const auto& [n, e] : model.entries) {
        if (now_ns() >= e.expires) gone.push_back(n);
      }
      for (const int n : gone) {
        if (model.entries.count(n)) model.remove_with_cascade(n);
      }
    }
    // Same entries, same states, budgets held.
    for (int n = 0; n < kNames; ++n) {
      const auto ref = store.find(name_hash(n));
      const auto it = model.entries.find(n);
      RC_ASSERT(ref.has_value() == (it != model.entries.end()));
      if (ref) {
        RC_ASSERT(*store.state(*ref) == (it->second.shadow ? State::shadow : State::confirmed));
        RC_ASSERT(*ref == refs.at(it->second.uid));
      }
    }
    RC_ASSERT(store.size() == model.entries.size());
    RC_ASSERT(store.size() <= limits.max_entries);
    RC_ASSERT(store.bytes() <= limits.max_bytes);
    std::size_t shadows = 0;
    for (const auto& [n, e] : model.entries)
      shadows += e.shadow ? 1 : 0;
    RC_ASSERT(store.shadow_count() == shadows);
    for (std::uint64_t b = 1; b < 4; ++b) {
      std::size_t expected = 0;
      for (const auto& [n, e] : model.entries)
        expected += e.shadow && e.branch == b ? 1 : 0;
      RC_ASSERT(store.shadows_of(b).size() == expected);
    }
  }
}

}  // namespace
}  // namespace dynrt::csl

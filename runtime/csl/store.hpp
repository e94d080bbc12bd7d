// The Completed-Subgraph Library (C1): completed stage results reusable across requests,
// never stale and never unauthorized (paper section 3.2, Lemma A.1, Proposition A.5).
//
// An entry is a stage result under its reuse name (runtime/reuse_name.hpp) with its
// read-set (external records and the versions it saw), its producer edges (the entries whose
// outputs rendered its input), its provenance and its state:
//   - a shadow is a fill's result: invisible to probe(); only promote() by an exact demand
//     with the same name, while its read-set is fresh, makes it a confirmed entry;
//   - a confirmed entry is served by probe() while every recorded read version is current.
// write() bumps record versions and removes exactly the minimal cascade of Proposition A.5:
// the direct readers (found through a reverse index) and every descendant that loses its
// last producer; an entry that keeps another producer stays. Removal for any other reason
// (eviction, expiry, a discarded shadow) cascades the same way, so no entry outlives all of
// the entries it was built from. A result whose execution started before a write to a
// record it read, or whose producer has gone since, is refused at insert: a late result
// never resurrects a stale entry. The store is bounded by an entry and a byte budget and a
// maximum TTL; eviction makes an entry a miss, never an empty result.
//
// Plain single-threaded code with an injected clock; the csl actor owns one and serializes
// every call. Views and hits hold pointers into the store, valid until the next mutation.
#pragma once

#include "runtime/clock.hpp"
#include "runtime/csl/compact_vec.hpp"
#include "runtime/hash.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <memory_resource>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dynrt::csl {

using Version = std::uint64_t;

// An external record and the version an execution observed.
struct ReadRef {
  std::string key;
  Version version = 0;
  friend bool operator==(const ReadRef&, const ReadRef&) = default;
};

// A handle to one entry. A handle to an entry that has since left the store never matches a
// later entry in the same slot: the generation differs.
struct EntryRef {
  std::uint32_t index = UINT32_MAX;
  std::uint32_t generation = 0;
  bool valid() const { return index != UINT32_MAX; }
  friend bool operator==(const EntryRef&, const EntryRef&) = default;
};

struct Usage {
  std::uint32_t prompt_tokens = 0;
  std::uint32_t completion_tokens = 0;
  friend bool operator==(const Usage&, const Usage&) = default;
};

enum class Origin : std::uint8_t {
  canonical,  ///< a canonical (non-speculative) execution's result
  fill,       ///< a speculative fill's result
};

struct Provenance {
  Origin origin = Origin::canonical;
  std::uint64_t fill = 0;    // the fill that produced it (origin == fill)
  std::uint64_t branch = 0;  // the branch that admitted that fill
  friend bool operator==(const Provenance&, const Provenance&) = default;
};

enum class State : std::uint8_t {
  shadow,     ///< a fill's result, invisible to probe() until promoted
  confirmed,  ///< served by probe() while fresh
  retired,    ///< served once and not kept (retire()): never served again, and holds no bytes,
              ///< but stays in the dependency graph while later stages built on it live
};

// The shared tier's fence when an execution started (store/shared_tier.hpp): the epoch of the
// tier's data and the highest write sequence of it seen by then. The Store keeps nothing of it;
// it travels with the result to the tier, which checks no record the result read was written
// after it. Empty without a tier (or before the tier first reached its server).
struct TierFence {
  std::string epoch;
  std::uint64_t seq = 0;
  friend bool operator==(const TierFence&, const TierFence&) = default;
};

// What put_confirmed() and put_shadow() store.
struct Insert {
  Hash128 name;
  std::string bytes;  // the result
  Usage usage;
  Duration cost{0};                 // engine time a hit saves
  std::vector<ReadRef> reads;       // versions from snapshot() when the execution started
  std::vector<EntryRef> producers;  // entries whose outputs rendered this input
  Provenance provenance;
  Duration ttl{0};  // 0 or above the store's maximum: the maximum
  TierFence fence;  // the shared tier's, when the execution started
};

enum class InsertStatus {
  stored,     ///< the entry is in the store
  stale,      ///< a read record was written, or a producer left, since the execution began
  duplicate,  ///< an entry with this name is already present (it is kept)
  too_large,  ///< the result alone exceeds the byte budget
  long_key,   ///< a record key it read is longer than kMaxStoredKeyBytes
  no_room,    ///< the budgets are full of entries this one is built from (its producers)
};

struct InsertResult {
  InsertStatus status = InsertStatus::stale;
  EntryRef ref;  // the stored entry (stored) or the one already present (duplicate)
};

// A served result. `bytes` points into the store: valid until the next mutating call.
struct Hit {
  EntryRef ref;
  std::string_view bytes;
  Usage usage;
  Duration cost{0};
  Provenance provenance;
  Duration ttl_left{0};  // until it expires
};

enum class RemovalReason {
  invalidated,  ///< it read a record that was written
  orphaned,     ///< it lost its last producer
  evicted,      ///< the budget needed room
  expired,      ///< its TTL passed
  discarded,    ///< its branch discarded it (an exclusive loser), or it was refused on promote
  replaced,     ///< a canonical result with the same name superseded this shadow
  retired,      ///< served once and not kept (reuse off); what it produced stays valid
};

// The longest record key a caller may name (the gateway refuses a longer write), and the longest
// the store remembers: that, with its scope's prefix (runtime/tenancy.hpp: at most 68 bytes). A
// result that read a longer one is not stored, and a write of one changes nothing (no stored
// result can have read it): a caller cannot make the version table hold megabytes per key.
inline constexpr std::size_t kMaxRecordKeyBytes = 1024;
inline constexpr std::size_t kMaxStoredKeyBytes = kMaxRecordKeyBytes + 128;

struct Limits {
  std::size_t max_entries = 1'000'000;
  std::size_t max_bytes = std::size_t{1} << 30;  // result bytes
  Duration max_ttl = std::chrono::hours(24);
  std::size_t max_records = 4'000'000;  // record versions remembered (see prune_records)
  std::size_t max_record_bytes = std::size_t{256} << 20;  // their keys' bytes, as well
  std::size_t eviction_sample = 16;                       // entries sampled per eviction
  std::uint64_t seed = 0x5eed;                            // eviction sampling
};

struct Stats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t promotions = 0;
  std::uint64_t inserts = 0;
  std::uint64_t stale_inserts = 0;
  std::uint64_t writes = 0;  // records written
  std::uint64_t invalidated = 0;
  std::uint64_t orphaned = 0;
  std::uint64_t evicted = 0;
  std::uint64_t expired = 0;
  std::uint64_t discarded = 0;
  std::uint64_t retired = 0;  // served once and removed without the cascade (reuse off)
};

// A shadow of one branch, as shadows_of() lists it.
struct ShadowView {
  EntryRef ref;
  Hash128 name;
  std::vector<ReadRef> reads;
};

class Store {
 public:
  explicit Store(const Clock& clock, Limits limits = {});
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // -- reads and writes of external records -----------------------------------------------

  // The current versions of `keys`; an execution records them when it starts and passes them
  // as Insert::reads when it finishes.
  std::vector<ReadRef> snapshot(std::span<const std::string> keys) const;
  Version version(std::string_view key) const;

  // Bumps the version of each record and removes every entry that read one of them, with the
  // cascade. Returns the number of entries removed. In force when it returns.
  std::size_t write(std::span<const std::string> keys);

  // -- serving ------------------------------------------------------------------------------

  // A confirmed, unexpired entry whose every read is current; shadows are never returned.
  std::optional<Hit> probe(const Hash128& name);
  // An exact demand authorizes the shadow with its name: if its reads are fresh and it has not
  // expired it becomes confirmed and is returned; otherwise it is dropped and this is a miss.
  // All or nothing. A confirmed entry is not promoted (probe() serves it).
  std::optional<Hit> promote(const Hash128& name);

  // -- storing ------------------------------------------------------------------------------

  InsertResult put_confirmed(Insert entry);  // a canonical execution's result
  InsertResult put_shadow(Insert entry);     // a fill's result; invisible until promoted

  // Removes one shadow (an exclusive branch's loser) and whatever only it produced.
  std::size_t discard(EntryRef ref);
  // Removes one entry in any state, with the cascade (a result that must not be served again:
  // a promoted shadow when cross-request reuse is off). Reported as discarded.
  std::size_t drop(EntryRef ref);
  // An entry that was served and must not serve again (a promoted shadow when cross-request
  // reuse is off). Its value was authorized by an exact demand, so a fill chain built on it
  // stays valid: it remains as a retired node without bytes and without a name, keeping its
  // reads and edges so that a write to what it read still reaches what was built on it; it
  // goes with its last consumer, its TTL, a write, or eviction. Returns 1 if it was live and
  // not yet retired.
  std::size_t retire(EntryRef ref);
  // Removes every shadow of `branch` except those in `keep`.
  std::size_t discard_branch(std::uint64_t branch, std::span<const EntryRef> keep = {});
  // Removes entries whose TTL has passed, examining at most `max_examined` slots per call
  // (resuming where the last call stopped). probe() and promote() never serve an expired
  // entry whether or not this has run.
  std::size_t expire(std::size_t max_examined = SIZE_MAX);

  // -- inspection ---------------------------------------------------------------------------

  // The shadows `branch` owns with their read-sets, in O(K_b + R_b).
  std::vector<ShadowView> shadows_of(std::uint64_t branch) const;
  // The entry's state if the handle is live.
  std::optional<State> state(EntryRef ref) const;
  std::optional<EntryRef> find(const Hash128& name) const;

  std::size_t size() const { return live_; }
  std::size_t shadow_count() const { return shadows_; }
  std::size_t bytes() const { return bytes_; }
  std::size_t record_count() const;                           // record versions remembered
  std::size_t record_bytes() const { return record_bytes_; }  // the bytes of their keys
  const Stats& stats() const { return stats_; }
  const Limits& limits() const { return limits_; }

  // Called for every entry that leaves the store, with its handle (no longer live), its name and
  // why.
  using Observer = std::function<void(EntryRef, const Hash128&, RemovalReason)>;
  void set_observer(Observer observer) { observer_ = std::move(observer); }

 private:
  struct Read {
    std::uint32_t record;
    std::uint32_t position;  // index of this entry in the record's reader list
    Version version;
  };
  struct Entry;
  struct Record;
  class NameIndex;

  InsertResult insert(Insert in, State state);
  bool fresh(const Entry& e) const;
  bool expired(const Entry& e, TimePoint now) const;
  EntryRef ref_of(std::uint32_t index) const;
  const Entry* live(EntryRef ref) const;
  Hit hit_of(std::uint32_t index);
  bool make_room(std::size_t bytes, std::span<const EntryRef> pinned);
  double retention_score(const Entry& e, TimePoint now) const;
  std::size_t remove(std::uint32_t index, RemovalReason reason);
  std::uint32_t intern_record(const std::string& key);
  void prune_records();
  void unlink_branch(std::uint32_t index);
  void release_bytes(Entry& e);

  const Clock& clock_;
  Limits limits_;
  // The result bytes have a pool of their own: entries live much longer than the requests
  // around which they are stored, and held in the general heap each one would pin a page of
  // that short-lived memory, so that resident memory could not fall back after a burst. The
  // pool keeps what it was given for later entries (bounded by max_bytes); results over 64 KiB
  // go to the heap directly.
  std::pmr::unsynchronized_pool_resource result_pool_{
      std::pmr::pool_options{0, std::size_t{64} << 10}};
  std::vector<Entry> entries_;
  std::vector<std::uint32_t> free_entries_;
  std::unique_ptr<NameIndex> index_;
  std::vector<Record> records_;
  std::vector<std::uint32_t> free_records_;
  std::unordered_map<std::string, std::uint32_t> record_ids_;
  std::size_t record_bytes_ = 0;  // the keys' bytes in record_ids_
  Version sequence_ = 0;          // the last version handed out by write()
  Version pruned_floor_ = 0;      // the version a forgotten record reads as
  std::pmr::unordered_map<std::uint64_t, std::pmr::vector<std::uint32_t>> branch_shadows_{
      &result_pool_};  // as long-lived as the entries: from their pool
  std::size_t live_ = 0;
  std::size_t shadows_ = 0;
  std::size_t bytes_ = 0;
  std::size_t expire_cursor_ = 0;
  std::uint64_t rng_;
  Stats stats_;
  Observer observer_;
};

}  // namespace dynrt::csl

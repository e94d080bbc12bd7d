#include "runtime/csl/store.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <tuple>

namespace dynrt::csl {

namespace {

constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

std::int64_t ns(TimePoint t) {
  return t.time_since_epoch().count();
}

}  // namespace

// -- storage ------------------------------------------------------------------------------------

// One slot of the entry slab. Laid out for the metadata budget (see docs/benchmarks.md):
// results live in their own allocation, edge lists in 16-byte CompactVecs.
struct Store::Entry {
  Hash128 name;
  char* data = nullptr;  // the result bytes, from result_pool_ (size of them)
  std::uint32_t size = 0;
  std::uint32_t generation = 0;
  CompactVec<Read> reads;
  CompactVec<EntryRef> producers;  // live producers only
  CompactVec<EntryRef> consumers;
  std::int64_t cost_ns = 0;
  std::int64_t expires_ns = 0;
  std::int64_t last_use_ns = 0;
  std::uint64_t fill = 0;
  std::uint64_t branch = 0;
  Usage usage;
  std::uint32_t uses = 0;
  State state = State::confirmed;
  Origin origin = Origin::canonical;
  bool live = false;
  bool had_producers = false;  // it was built from other entries: it dies with the last of them
};

struct Store::Record {
  const std::string* key = nullptr;  // the key in record_ids_ (node-based: stable); null: free
  Version version = 0;
  CompactVec<std::uint32_t> readers;  // entry indices; Read::position points back here
};

// Open addressing with linear probing from reuse name to entry index; 4 bytes a slot, load at
// most one half. Deletion shifts later members of the cluster back, so there are no
// tombstones and lookups stay short however many entries come and go.
class Store::NameIndex {
 public:
  explicit NameIndex(std::size_t capacity) : slots_(capacity, 0), mask_(capacity - 1) {}

  std::uint32_t find(const Hash128& name, const std::vector<Entry>& entries) const {
    for (std::size_t i = home(name);; i = (i + 1) & mask_) {
      const std::uint32_t s = slots_[i];
      if (s == 0) return kNone;
      if (entries[s - 1].name == name) return s - 1;
    }
  }

  void insert(const Hash128& name, std::uint32_t index, const std::vector<Entry>& entries) {
    if ((size_ + 1) * 2 > slots_.size()) grow(entries);
    std::size_t i = home(name);
    while (slots_[i] != 0)
      i = (i + 1) & mask_;
    slots_[i] = index + 1;
    ++size_;
  }

  void erase(const Hash128& name, const std::vector<Entry>& entries) {
    std::size_t i = home(name);
    while (slots_[i] != 0 && !(entries[slots_[i] - 1].name == name))
      i = (i + 1) & mask_;
    if (slots_[i] == 0) return;
    slots_[i] = 0;
    --size_;
    // Move back any later member of the cluster whose home is at or before the hole.
    for (std::size_t j = (i + 1) & mask_; slots_[j] != 0; j = (j + 1) & mask_) {
      const std::size_t h = home(entries[slots_[j] - 1].name);
      const bool movable = i <= j ? (h <= i || h > j) : (h <= i && h > j);
      if (movable) {
        slots_[i] = slots_[j];
        slots_[j] = 0;
        i = j;
      }
    }
  }

 private:
  std::size_t home(const Hash128& name) const {
    return static_cast<std::size_t>(name.low ^ (name.high >> 17)) & mask_;
  }
  void grow(const std::vector<Entry>& entries) {
    std::vector<std::uint32_t> old = std::move(slots_);
    slots_.assign(old.size() * 2, 0);
    mask_ = slots_.size() - 1;
    for (const std::uint32_t s : old) {
      if (s == 0) continue;
      std::size_t i = home(entries[s - 1].name);
      while (slots_[i] != 0)
        i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<std::uint32_t> slots_;
  std::size_t mask_;
  std::size_t size_ = 0;
};

Store::Store(const Clock& clock, Limits limits)
    : clock_(clock),
      limits_(limits),
      index_(std::make_unique<NameIndex>(16)),
      rng_(limits.seed | 1) {}

Store::~Store() = default;

void Store::release_bytes(Entry& e) {
  if (e.data) result_pool_.deallocate(e.data, e.size, 1);
  e.data = nullptr;
  e.size = 0;
}

EntryRef Store::ref_of(std::uint32_t index) const {
  return EntryRef{index, entries_[index].generation};
}

const Store::Entry* Store::live(EntryRef ref) const {
  if (ref.index >= entries_.size()) return nullptr;
  const Entry& e = entries_[ref.index];
  return e.live && e.generation == ref.generation ? &e : nullptr;
}

// -- records ------------------------------------------------------------------------------------

Version Store::version(std::string_view key) const {
  const auto it = record_ids_.find(std::string(key));
  return it == record_ids_.end() ? pruned_floor_ : records_[it->second].version;
}

std::vector<ReadRef> Store::snapshot(std::span<const std::string> keys) const {
  std::vector<ReadRef> out;
  out.reserve(keys.size());
  for (const std::string& k : keys)
    out.push_back(ReadRef{k, version(k)});
  return out;
}

std::uint32_t Store::intern_record(const std::string& key) {
  const auto it = record_ids_.find(key);
  if (it != record_ids_.end()) return it->second;
  std::uint32_t id;
  if (!free_records_.empty()) {
    id = free_records_.back();
    free_records_.pop_back();
  } else {
    id = static_cast<std::uint32_t>(records_.size());
    records_.emplace_back();
  }
  Record& r = records_[id];
  r.key = &record_ids_.emplace(key, id).first->first;
  record_bytes_ += key.size();
  r.version = pruned_floor_;
  return id;
}

// Versions of records nobody reads are forgotten when there are too many. A forgotten record
// reads as the highest version ever forgotten, at least its own last one, so an execution
// that snapshotted an older version is refused at insert: forgetting is conservative.
void Store::prune_records() {
  if (record_count() <= limits_.max_records && record_bytes_ <= limits_.max_record_bytes) return;
  const std::size_t target = limits_.max_records - limits_.max_records / 4;
  const std::size_t target_bytes = limits_.max_record_bytes - limits_.max_record_bytes / 4;
  for (std::uint32_t id = 0;
       id < records_.size() && (record_count() > target || record_bytes_ > target_bytes); ++id) {
    Record& r = records_[id];
    if (!r.key || !r.readers.empty()) continue;
    pruned_floor_ = std::max(pruned_floor_, r.version);
    record_bytes_ -= r.key->size();
    record_ids_.erase(*r.key);
    r = Record{};
    free_records_.push_back(id);
  }
}

std::size_t Store::write(std::span<const std::string> keys) {
  std::size_t removed = 0;
  std::vector<std::uint32_t> readers;
  for (const std::string& key : keys) {
    if (key.size() > kMaxStoredKeyBytes) continue;  // no stored result read it (see insert)
    const std::uint32_t id = intern_record(key);
    records_[id].version = ++sequence_;
    ++stats_.writes;
    readers.assign(records_[id].readers.begin(), records_[id].readers.end());  // remove() edits it
    for (const std::uint32_t i : readers) {
      if (entries_[i].live) removed += remove(i, RemovalReason::invalidated);
    }
  }
  prune_records();
  return removed;
}

// -- serving ------------------------------------------------------------------------------------

bool Store::fresh(const Entry& e) const {
  for (const Read& r : e.reads) {
    if (records_[r.record].version != r.version) return false;
  }
  return true;
}

bool Store::expired(const Entry& e, TimePoint now) const {
  return ns(now) >= e.expires_ns;
}

Hit Store::hit_of(std::uint32_t index) {
  const Entry& e = entries_[index];
  Hit h;
  h.ref = ref_of(index);
  h.bytes = std::string_view(e.data, e.size);
  h.usage = e.usage;
  h.cost = Duration(e.cost_ns);
  h.provenance = Provenance{e.origin, e.fill, e.branch};
  h.ttl_left = std::max(Duration(0), Duration(e.expires_ns - ns(clock_.now())));
  return h;
}

std::optional<Hit> Store::probe(const Hash128& name) {
  const std::uint32_t i = index_->find(name, entries_);
  if (i == kNone || entries_[i].state != State::confirmed) {
    ++stats_.misses;
    return std::nullopt;
  }
  const TimePoint now = clock_.now();
  if (expired(entries_[i], now)) {
    remove(i, RemovalReason::expired);
    ++stats_.misses;
    return std::nullopt;
  }
  if (!fresh(entries_[i])) {  // write() removes readers eagerly; this guard is the contract
    remove(i, RemovalReason::invalidated);
    ++stats_.misses;
    return std::nullopt;
  }
  Entry& e = entries_[i];
  ++e.uses;
  e.last_use_ns = ns(now);
  ++stats_.hits;
  return hit_of(i);
}

std::optional<Hit> Store::promote(const Hash128& name) {
  const std::uint32_t i = index_->find(name, entries_);
  if (i == kNone || entries_[i].state != State::shadow) return std::nullopt;
  const TimePoint now = clock_.now();
  if (expired(entries_[i], now)) {
    remove(i, RemovalReason::expired);
    return std::nullopt;
  }
  if (!fresh(entries_[i])) {
    remove(i, RemovalReason::invalidated);
    return std::nullopt;
  }
  unlink_branch(i);
  Entry& e = entries_[i];
  e.state = State::confirmed;
  --shadows_;
  ++e.uses;
  e.last_use_ns = ns(now);
  ++stats_.promotions;
  return hit_of(i);
}

// -- storing ------------------------------------------------------------------------------------

InsertResult Store::put_confirmed(Insert entry) {
  return insert(std::move(entry), State::confirmed);
}

InsertResult Store::put_shadow(Insert entry) {
  return insert(std::move(entry), State::shadow);
}

InsertResult Store::insert(Insert in, State state) {
  if (in.bytes.size() > limits_.max_bytes ||
      in.bytes.size() > std::numeric_limits<std::uint32_t>::max()) {
    return {InsertStatus::too_large, {}};
  }
  std::uint32_t existing = index_->find(in.name, entries_);
  if (existing != kNone && expired(entries_[existing], clock_.now())) {
    remove(existing, RemovalReason::expired);  // an expired entry never blocks its successor
    existing = kNone;
  }
  const bool replace =
      existing != kNone && state == State::confirmed && entries_[existing].state == State::shadow;
  if (existing != kNone && !replace) return {InsertStatus::duplicate, ref_of(existing)};
  // A read-set snapshotted before a write, or a producer that has left, means the result may
  // be built on stale data: refuse it rather than resurrect what a write invalidated.
  std::sort(in.reads.begin(), in.reads.end(), [](const ReadRef& a, const ReadRef& b) {
    return std::tie(a.key, a.version) < std::tie(b.key, b.version);
  });
  in.reads.erase(std::unique(in.reads.begin(), in.reads.end()), in.reads.end());
  if (std::any_of(in.reads.begin(), in.reads.end(),
                  [](const ReadRef& r) { return r.key.size() > kMaxStoredKeyBytes; }))
    return {InsertStatus::long_key, {}};
  for (const ReadRef& r : in.reads) {
    // (A key listed with two versions fails here for at least one of them.)
    if (version(r.key) != r.version) {
      ++stats_.stale_inserts;
      return {InsertStatus::stale, {}};
    }
  }
  auto producers_live = [&] {
    return std::all_of(in.producers.begin(), in.producers.end(),
                       [&](EntryRef p) { return live(p) != nullptr; });
  };
  if (!producers_live()) {
    ++stats_.stale_inserts;
    return {InsertStatus::stale, {}};
  }
  if (replace) remove(existing, RemovalReason::replaced);  // the canonical result is authoritative
  if (!make_room(in.bytes.size(), in.producers)) return {InsertStatus::no_room, {}};
  if (!producers_live()) {  // eviction (or the replacement) took a producer with it
    ++stats_.stale_inserts;
    return {InsertStatus::stale, {}};
  }

  std::uint32_t i;
  if (!free_entries_.empty()) {
    i = free_entries_.back();
    free_entries_.pop_back();
  } else {
    i = static_cast<std::uint32_t>(entries_.size());
    entries_.emplace_back();
  }
  const TimePoint now = clock_.now();
  Entry& e = entries_[i];
  e.name = in.name;
  e.size = static_cast<std::uint32_t>(in.bytes.size());
  if (e.size > 0) {
    e.data = static_cast<char*>(result_pool_.allocate(e.size, 1));
    std::memcpy(e.data, in.bytes.data(), e.size);
  }
  e.cost_ns = in.cost.count();
  const Duration ttl =
      in.ttl <= Duration::zero() || in.ttl > limits_.max_ttl ? limits_.max_ttl : in.ttl;
  e.expires_ns = ns(now + ttl);
  e.last_use_ns = ns(now);
  e.fill = in.provenance.fill;
  e.branch = in.provenance.branch;
  e.origin = in.provenance.origin;
  e.usage = in.usage;
  e.uses = 0;
  e.state = state;
  e.live = true;
  e.had_producers = !in.producers.empty();
  const EntryRef self = ref_of(i);
  for (const ReadRef& r : in.reads) {
    const std::uint32_t id = intern_record(r.key);
    Record& rec = records_[id];
    entries_[i].reads.push_back(Read{id, rec.readers.size(), rec.version});
    rec.readers.push_back(i);
  }
  for (const EntryRef p : in.producers) {
    if (std::find(entries_[i].producers.begin(), entries_[i].producers.end(), p) !=
        entries_[i].producers.end()) {
      continue;
    }
    entries_[i].producers.push_back(p);
    entries_[p.index].consumers.push_back(self);
  }
  index_->insert(in.name, i, entries_);
  if (state == State::shadow) {
    ++shadows_;
    branch_shadows_[in.provenance.branch].push_back(i);
  }
  ++live_;
  bytes_ += e.size;
  ++stats_.inserts;
  prune_records();
  return {InsertStatus::stored, self};
}

// -- removal ------------------------------------------------------------------------------------

void Store::unlink_branch(std::uint32_t index) {
  const auto it = branch_shadows_.find(entries_[index].branch);
  if (it == branch_shadows_.end()) return;
  auto& list = it->second;
  const auto pos = std::find(list.begin(), list.end(), index);
  if (pos != list.end()) {
    *pos = list.back();
    list.pop_back();
  }
  if (list.empty()) branch_shadows_.erase(it);
}

// Removes an entry and, transitively, every entry that thereby loses its last producer
// (Proposition A.5). Each removed entry's edges and reads are visited once.
std::size_t Store::remove(std::uint32_t index, RemovalReason reason) {
  std::vector<std::pair<std::uint32_t, RemovalReason>> work{{index, reason}};
  std::size_t removed = 0;
  while (!work.empty()) {
    const auto [i, why] = work.back();
    work.pop_back();
    Entry& e = entries_[i];
    if (!e.live) continue;
    const EntryRef self = ref_of(i);
    for (const EntryRef c : e.consumers) {
      Entry& ce = entries_[c.index];
      if (!ce.live || ce.generation != c.generation) continue;
      for (std::uint32_t k = 0; k < ce.producers.size(); ++k) {
        if (ce.producers[k] == self) {
          ce.producers.erase_unordered(k);
          break;
        }
      }
      if (ce.producers.empty() && ce.had_producers) {
        // A retired producer was valid when it went: its consumers stand on their own.
        if (why == RemovalReason::retired)
          ce.had_producers = false;
        else
          work.emplace_back(c.index, RemovalReason::orphaned);
      }
    }
    for (const EntryRef p : e.producers) {
      Entry& pe = entries_[p.index];
      if (!pe.live || pe.generation != p.generation) continue;
      for (std::uint32_t k = 0; k < pe.consumers.size(); ++k) {
        if (pe.consumers[k] == self) {
          pe.consumers.erase_unordered(k);
          break;
        }
      }
      // A retired producer is only kept for what was built on it.
      if (pe.state == State::retired && pe.consumers.empty())
        work.emplace_back(p.index, RemovalReason::retired);
    }
    for (const Read& r : e.reads) {
      Record& rec = records_[r.record];
      const std::uint32_t last = rec.readers.size() - 1;
      if (r.position != last) {
        const std::uint32_t moved = rec.readers[last];
        for (Read& mr : entries_[moved].reads) {
          if (mr.record == r.record && mr.position == last) {
            mr.position = r.position;
            break;
          }
        }
      }
      rec.readers.erase_unordered(r.position);
    }
    if (e.state != State::retired) index_->erase(e.name, entries_);  // a retired one left it
    if (e.state == State::shadow) {
      unlink_branch(i);
      --shadows_;
    }
    --live_;
    bytes_ -= e.size;
    switch (why) {
      case RemovalReason::invalidated:
        ++stats_.invalidated;
        break;
      case RemovalReason::orphaned:
        ++stats_.orphaned;
        break;
      case RemovalReason::evicted:
        ++stats_.evicted;
        break;
      case RemovalReason::expired:
        ++stats_.expired;
        break;
      case RemovalReason::discarded:
      case RemovalReason::replaced:
        ++stats_.discarded;
        break;
      case RemovalReason::retired:  // counted by retire()
        break;
    }
    const Hash128 name = e.name;
    const EntryRef gone = ref_of(i);
    release_bytes(e);
    e.reads.clear();
    e.producers.clear();
    e.consumers.clear();
    e.live = false;
    ++e.generation;
    free_entries_.push_back(i);
    ++removed;
    if (observer_) observer_(gone, name, why);
  }
  return removed;
}

std::size_t Store::discard(EntryRef ref) {
  const Entry* e = live(ref);
  if (!e || e->state != State::shadow) return 0;
  return remove(ref.index, RemovalReason::discarded);
}

std::size_t Store::drop(EntryRef ref) {
  if (!live(ref)) return 0;
  return remove(ref.index, RemovalReason::discarded);
}

std::size_t Store::retire(EntryRef ref) {
  Entry* e = const_cast<Entry*>(live(ref));
  if (!e || e->state == State::retired) return 0;
  ++stats_.retired;
  // A fill chain may still be running on this entry and store its next stage here, which the
  // store cannot know: keep it as a node of the graph either way. It goes with its last
  // consumer (remove()), its TTL, a write to its reads, or eviction (first in line when it has
  // no consumers).
  index_->erase(e->name, entries_);
  if (e->state == State::shadow) {
    unlink_branch(ref.index);
    --shadows_;
  }
  bytes_ -= e->size;
  release_bytes(*e);
  e->state = State::retired;
  return 1;
}

std::size_t Store::discard_branch(std::uint64_t branch, std::span<const EntryRef> keep) {
  const auto it = branch_shadows_.find(branch);
  if (it == branch_shadows_.end()) return 0;
  const std::vector<std::uint32_t> list(it->second.begin(), it->second.end());  // remove() edits it
  std::size_t removed = 0;
  for (const std::uint32_t i : list) {
    const EntryRef ref = ref_of(i);
    if (std::find(keep.begin(), keep.end(), ref) != keep.end()) continue;
    removed += discard(ref);
  }
  return removed;
}

std::size_t Store::expire(std::size_t max_examined) {
  const std::int64_t now = ns(clock_.now());
  std::size_t removed = 0;
  const std::size_t n = entries_.size();
  for (std::size_t examined = 0; examined < std::min(max_examined, n); ++examined) {
    if (expire_cursor_ >= n) expire_cursor_ = 0;
    const auto i = static_cast<std::uint32_t>(expire_cursor_++);
    if (entries_[i].live && now >= entries_[i].expires_ns) {
      removed += remove(i, RemovalReason::expired);
    }
  }
  return removed;
}

// -- eviction -----------------------------------------------------------------------------------

// Keep what saves the most engine time per byte held: value is the engine time one hit saves
// times how often the entry was used (plus one, so a fresh entry is not worthless), per byte
// including a fixed metadata charge (so tiny entries do not look infinitely dense), decayed
// by idle time with a one-minute scale (old popularity fades, as in GreedyDual-Size-Frequency).
// The lowest score among a random sample is evicted: an approximation that needs no ordered
// structure per entry, as in Redis's sampled LRU.
double Store::retention_score(const Entry& e, TimePoint now) const {
  // A retired node holds no bytes: without consumers it is worth nothing; with them, evicting
  // it would only cascade into them, so it is kept (they are evicted on their own merit).
  if (e.state == State::retired) return e.consumers.empty() ? 0.0 : 1e300;
  constexpr double kMetadataBytes = 160.0;
  constexpr double kIdleScaleNs = 60e9;
  const double value = static_cast<double>(std::max<std::int64_t>(e.cost_ns, 1)) *
                       (1.0 + static_cast<double>(e.uses));
  const double idle = static_cast<double>(std::max<std::int64_t>(ns(now) - e.last_use_ns, 0));
  return value / (static_cast<double>(e.size) + kMetadataBytes) / (1.0 + idle / kIdleScaleNs);
}

bool Store::make_room(std::size_t bytes, std::span<const EntryRef> pinned) {
  const TimePoint now = clock_.now();
  auto over = [&] { return live_ + 1 > limits_.max_entries || bytes_ + bytes > limits_.max_bytes; };
  auto is_pinned = [&](std::uint32_t i) {
    return std::any_of(pinned.begin(), pinned.end(), [&](EntryRef p) { return p.index == i; });
  };
  while (over()) {
    if (live_ == 0) return false;
    std::uint32_t victim = kNone;
    double victim_score = 0;
    std::size_t sampled = 0;
    for (std::size_t tries = 0;
         tries < limits_.eviction_sample * 8 && sampled < limits_.eviction_sample; ++tries) {
      rng_ ^= rng_ << 13;  // xorshift64: deterministic for a given seed
      rng_ ^= rng_ >> 7;
      rng_ ^= rng_ << 17;
      const auto i = static_cast<std::uint32_t>(rng_ % entries_.size());
      if (!entries_[i].live || is_pinned(i)) continue;
      ++sampled;
      const double s = retention_score(entries_[i], now);
      if (victim == kNone || s < victim_score) {
        victim = i;
        victim_score = s;
      }
    }
    if (victim == kNone) {  // a sparse slab: fall back to the first evictable entry
      for (std::uint32_t i = 0; i < entries_.size(); ++i) {
        if (entries_[i].live && !is_pinned(i)) {
          victim = i;
          break;
        }
      }
    }
    if (victim == kNone) return false;
    remove(victim, RemovalReason::evicted);
  }
  return true;
}

// -- inspection ---------------------------------------------------------------------------------

std::vector<ShadowView> Store::shadows_of(std::uint64_t branch) const {
  std::vector<ShadowView> out;
  const auto it = branch_shadows_.find(branch);
  if (it == branch_shadows_.end()) return out;
  out.reserve(it->second.size());
  for (const std::uint32_t i : it->second) {
    const Entry& e = entries_[i];
    ShadowView v;
    v.ref = ref_of(i);
    v.name = e.name;
    v.reads.reserve(e.reads.size());
    for (const Read& r : e.reads)
      v.reads.push_back(ReadRef{*records_[r.record].key, r.version});
    out.push_back(std::move(v));
  }
  return out;
}

std::size_t Store::record_count() const {
  return records_.size() - free_records_.size();
}

std::optional<State> Store::state(EntryRef ref) const {
  const Entry* e = live(ref);
  if (!e) return std::nullopt;
  return e->state;
}

std::optional<EntryRef> Store::find(const Hash128& name) const {
  const std::uint32_t i = index_->find(name, entries_);
  if (i == kNone) return std::nullopt;
  return ref_of(i);
}

}  // namespace dynrt::csl

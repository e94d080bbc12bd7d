// The shared library tier: confirmed library entries written through to Redis, so that every
// `dynrt serve` replica pointed at the same Redis serves what any of them computed, and writes
// reported to any replica reach the results of all of them.
//
// What is in Redis (every key starts with the configured prefix, "dynrt:" by default):
//   <p>epoch     a random id, set once per Redis dataset (a restart without persistence
//                makes a new one: every entry and version of the old one is then void);
//   <p>seq       the write sequence, INCR'd by every write;
//   <p>v:<rec>   the sequence number of the last write to record key <rec> (with a TTL no
//                shorter than any entry's, so it outlives every entry it could invalidate);
//   <p>e:<name>  an entry: hash of epoch, fence, read keys (JSON array), metadata and bytes,
//                with the entry's TTL;
//   channel <p>inv: one message per write {seq, origin, keys}.
//
// Freshness (docs/scaling.md has the argument). A replica's fence is the highest write sequence
// of the current epoch it has seen in any answer from Redis (its own writes, the invalidation
// channel, every reply of a script). Every write with a sequence at or below the fence was
// reported to some replica, and so in force in the outside world, before the fence was read.
// An execution records the fence when it starts; its result is stored in Redis only if no
// record it read (its own reads and its producers', transitively) has since been written
// with a higher sequence, and every later use of it (a hit from Redis, or a local copy that
// read records) checks the same in one round trip. A lost invalidation message therefore
// costs only a local copy kept too long, never a stale answer; the channel exists to drop
// local copies early and to move fences forward.
//
// Failure is a miss. Every call is asynchronous: it queues a job and returns at once; its
// callback runs later on the tier's own thread (never the caller's), exactly once, with a miss
// (get), false (validate) or not shared (write) when Redis is down, slow past the timeout, or
// answers unexpectedly. While Redis is unreachable the tier reconnects with exponential
// backoff and fails jobs at once instead of waiting. A write that did not reach Redis is kept
// (bounded) and sent before anything else once Redis is back; if that bound overflows, the
// epoch is renewed instead, which voids every shared entry.
//
// Thread-safe: any thread may call any member. Two threads of its own: commands (pipelined on
// one connection) and the invalidation subscription (a second connection).
#pragma once

#include "runtime/clock.hpp"
#include "runtime/csl/store.hpp"
#include "runtime/hash.hpp"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dynrt::store {

// Where the tier lives: redis://HOST:PORT[/DB]. parse() returns nullopt with `error` set on
// anything else (a password or TLS are not supported: say so in `error`).
struct RedisAddress {
  std::string host = "127.0.0.1";
  int port = 6379;
  int db = 0;
  static std::optional<RedisAddress> parse(std::string_view url, std::string* error);
  std::string url() const;  // redis://host:port/db
};

struct TierConfig {
  RedisAddress address;
  std::string prefix = "dynrt:";
  Duration timeout = std::chrono::milliseconds(100);  // connect and each round trip
  Duration backoff_min = std::chrono::milliseconds(100);
  Duration backoff_max = std::chrono::seconds(5);
  Duration max_ttl = std::chrono::hours(24);  // entries' ceiling; version keys live this long
  std::size_t max_pending_writes = 10'000;    // record keys kept while Redis is unreachable
  std::size_t max_batch = 256;                // jobs per pipelined round trip
  std::string replica;  // this replica's id in invalidation messages (random when empty)
};

// The fence an execution records when it starts: the epoch and the highest write sequence of
// it seen so far. An empty epoch means the tier has not reached Redis yet: nothing stored with
// it is shared, and nothing validated against it passes.
struct Fence {
  std::string epoch;
  std::uint64_t seq = 0;
  friend bool operator==(const Fence&, const Fence&) = default;
};

// An entry as Redis holds it.
struct SharedEntry {
  std::string bytes;
  csl::Usage usage;
  Duration cost{0};
  std::vector<std::string> keys;  // every record key it read, its producers' included
  Fence fence;
  Duration ttl{0};  // put: the entry's TTL (0: max_ttl); get: what is left of it
};

struct TierStats {
  std::uint64_t hits = 0;             // get() found a current entry
  std::uint64_t misses = 0;           // get() found none (or a stale one, which it deletes)
  std::uint64_t stale = 0;            // get() or validate() found a record written after the fence
  std::uint64_t validated = 0;        // validate() passed
  std::uint64_t puts = 0;             // entries stored
  std::uint64_t puts_refused = 0;     // put() refused: a read record was written after the fence
                                      // (or the fence's epoch is empty or no longer current)
  std::uint64_t writes = 0;           // writes that reached Redis (answered shared)
  std::uint64_t writes_deferred = 0;  // writes answered not shared, kept to send later
  std::uint64_t invalidations = 0;    // messages received from other replicas
  std::uint64_t errors = 0;           // jobs failed: unreachable, timeout, bad reply (a failed get
                                      // counts here, not in misses)
  std::uint64_t reconnects = 0;       // connections (re)established
  std::uint64_t epoch_changes = 0;    // the epoch changed under us (Redis lost its data)
  bool connected = false;
  std::size_t pending_writes = 0;  // record keys waiting for Redis
};

class SharedTier {
 public:
  // Starts the threads; connecting happens on them (the constructor never blocks on Redis).
  explicit SharedTier(TierConfig config);
  ~SharedTier();  // stops both threads; jobs still queued are answered as failures
  SharedTier(const SharedTier&) = delete;
  SharedTier& operator=(const SharedTier&) = delete;

  Fence fence() const;

  // The entry stored under `name`, if its epoch is current and none of its keys was written
  // after its fence (checked inside Redis, one round trip).
  void get(const Hash128& name, std::function<void(std::optional<SharedEntry>)> done);
  // Whether `keys` are all unwritten since `fence` (and the epoch is still current): the check
  // a local copy of a shared entry, or any result that read records, passes before serving.
  void validate(std::vector<std::string> keys, Fence fence, std::function<void(bool)> done);
  // Stores `entry` under `name` unless a key was written after its fence; fire and forget.
  void put(const Hash128& name, SharedEntry entry);
  // Records `keys` written: bumps their versions (one new sequence number for all) and
  // publishes the invalidation. `done(true)` once Redis has it; `done(false)` when Redis is
  // unreachable (the keys are kept and sent before anything else once it is back).
  void write(std::vector<std::string> keys, std::function<void(bool shared)> done);
  // Called on the subscription's thread with the keys of every write another replica made.
  // Set it before anything is written; it is called until the tier is destroyed.
  void on_invalidation(std::function<void(std::vector<std::string>)> callback);

  TierStats stats() const;
  const TierConfig& config() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dynrt::store

// Coalescing of identical concurrent misses: the canonical executions in flight, by
// reuse name, and the demands waiting for each. Like nginx's proxy_cache_lock or Varnish's
// waiting list, the first miss for a name leads (it executes); an identical miss that arrives
// while the leader runs joins it and is answered with the leader's result.
//
// Freshness: a joiner may only join an execution that started from the record versions the
// store has now, for the same record keys, and whose producers are all still in the store. A
// write to a record the execution read (or the loss of a producer) therefore closes the
// execution to new joiners: a demand that arrives after the write's acknowledgment leads a
// fresh execution, which takes the name over; the old one still answers those that joined it
// before the write (their demands were concurrent with the write), and its late result is
// refused by the store at insert (Store::put_confirmed sees the older versions).
//
// Plain single-threaded code; the csl actor owns one next to its Store and serializes every
// call with the store's probes and writes.
#pragma once

#include "runtime/csl/store.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace dynrt::csl {

using Ticket = std::uint64_t;  // a waiter, as its owner numbers it

enum class ClaimKind {
  lead,   ///< no joinable execution: this demand executes, and others may join it
  join,   ///< an identical execution is in flight: wait for its result
  alone,  ///< executes without taking the name (it may not join, and one is already in flight)
};

struct Claim {
  ClaimKind kind = ClaimKind::lead;
  std::uint64_t execution = 0;  // lead, join: the execution (0 for alone)
  std::vector<ReadRef> reads;   // lead, alone: the versions it starts from (Insert::reads)
};

class Coalescer {
 public:
  // A canonical miss for `name` whose execution reads `keys` and is built from `producers`.
  // With `may_join` false it never joins (its waiting bound is zero, or it already gave up
  // waiting once): it leads if nothing is in flight under `name`, else executes alone.
  Claim claim(const Store& store, const Hash128& name, std::span<const std::string> keys,
              std::span<const EntryRef> producers, Ticket ticket, bool may_join);
  // The execution ended (a result, an error or a cancellation): it leaves the table and its
  // waiters are returned in join order. Unknown executions return nothing.
  std::vector<Ticket> finish(std::uint64_t execution);
  // A waiter stopped waiting (its bound passed). Returns whether it was waiting.
  bool leave(std::uint64_t execution, Ticket ticket);

  std::size_t in_flight() const { return executions_.size(); }
  std::size_t waiting() const;

 private:
  struct Execution {
    Hash128 name;
    std::vector<std::string> keys;  // sorted
    std::vector<ReadRef> reads;     // the versions of `keys` when it started
    std::vector<EntryRef> producers;
    std::vector<Ticket> waiters;
  };
  bool joinable(const Store& store, const Execution& e, std::span<const std::string> keys) const;

  std::unordered_map<std::uint64_t, Execution> executions_;
  std::unordered_map<Hash128, std::uint64_t> by_name_;  // the execution new demands may join
  std::uint64_t next_ = 1;
};

}  // namespace dynrt::csl

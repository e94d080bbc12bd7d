// The live workflow runs of a Runtime, bounded in number and in time: what the root actor
// keeps to route each demand to its run.
//
// A run is known by its key (workflow name and workflow id) and holds a handle (the actor that
// serves it). Runs are kept in order of their last demand. Two limits bound them:
//   - at most `max_live` runs: adding one more evicts the least recently demanded runs;
//   - a run with no demand for `idle` is due for expiry: due() hands it out for an idle check
//     and moves it to the recent end, so a run still busy (a long call in flight) is asked
//     again only after another idle period, and a sweep never sees the same run twice.
// Every operation costs O(1) per run it touches, so dropping n runs costs O(n) however many
// there are. A run that leaves the table loses only its speculation; the caller decides what
// its handle does next.
//
// `sent` counts the demands routed to a run, so an idle check answered with the count the run
// had received can tell whether a demand raced it (erase_if_quiet()).
//
// Pure and single-threaded (the root actor owns one); time is passed in.
#pragma once

#include "runtime/clock.hpp"

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dynrt::run {

template <class Handle>
class RunTable {
 public:
  struct Run {
    std::string key;
    Handle handle;
    TimePoint last{};        // the last demand (or the last idle check)
    std::uint64_t sent = 0;  // demands routed to it
  };

  explicit RunTable(std::size_t max_live) : max_live_(max_live < 1 ? 1 : max_live) {}
  RunTable(const RunTable&) = delete;
  RunTable& operator=(const RunTable&) = delete;

  std::size_t size() const { return index_.size(); }
  std::size_t max_live() const { return max_live_; }

  Run* find(std::string_view key) {
    const auto it = index_.find(key);
    return it == index_.end() ? nullptr : &*it->second;
  }

  // A demand for the run `key` at `now`: it becomes the most recent and counts the demand.
  // Null when there is no such run (add() it).
  Run* touch(std::string_view key, TimePoint now) {
    const auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    runs_.splice(runs_.end(), runs_, it->second);
    it->second->last = now;
    ++it->second->sent;
    return &*it->second;
  }

  // Adds the run `key` (absent) with one demand counted. Returns the runs evicted to stay
  // within max_live, least recently demanded first; they are no longer in the table.
  std::vector<Run> add(std::string key, Handle handle, TimePoint now) {
    std::vector<Run> evicted;
    while (index_.size() >= max_live_)
      evicted.push_back(pop_front());
    runs_.push_back(Run{std::move(key), std::move(handle), now, 1});
    auto last = std::prev(runs_.end());
    index_.emplace(std::string_view(last->key), last);
    return evicted;
  }

  // Up to `max` runs whose last demand is at least `idle` before `now`, oldest first. Each is
  // moved to the recent end with `last = now` (its demand count unchanged): it stays in the
  // table until its idle check is answered (erase_if_quiet()).
  std::vector<Run> due(TimePoint now, Duration idle, std::size_t max) {
    std::vector<Run> out;
    const TimePoint cutoff = now - idle;
    while (out.size() < max && !runs_.empty() && runs_.front().last <= cutoff &&
           runs_.front().last != now) {
      auto it = runs_.begin();
      it->last = now;
      out.push_back(*it);
      runs_.splice(runs_.end(), runs_, it);
    }
    return out;
  }

  // Whether some run is due at `now` (what due() would return first).
  bool any_due(TimePoint now, Duration idle) const {
    return !runs_.empty() && runs_.front().last <= now - idle && runs_.front().last != now;
  }

  // The run answered an idle check having received `received` demands: it leaves the table
  // if no demand was routed to it since (returned), else it stays (nullopt).
  std::optional<Run> erase_if_quiet(std::string_view key, std::uint64_t received) {
    const auto it = index_.find(key);
    if (it == index_.end() || it->second->sent != received) return std::nullopt;
    return take(it);
  }

  // Removes the run `key` if `match(handle)` says it is the one meant (a run that ended on its
  // own, when a newer run may already hold the key). Returns whether it removed one.
  template <class Match>
  bool erase_if(std::string_view key, Match&& match) {
    const auto it = index_.find(key);
    if (it == index_.end() || !match(it->second->handle)) return false;
    take(it);
    return true;
  }

  // Every run, for a shutdown that must reach them all.
  template <class F>
  void for_each(F&& f) const {
    for (const auto& r : runs_)
      f(r);
  }

 private:
  using List = std::list<Run>;
  using Index = std::unordered_map<std::string_view, typename List::iterator>;

  Run pop_front() { return take(index_.find(std::string_view(runs_.front().key))); }

  Run take(typename Index::iterator it) {
    auto node = it->second;
    index_.erase(it);  // before the key it views moves out
    Run r = std::move(*node);
    runs_.erase(node);
    return r;
  }

  std::size_t max_live_;
  List runs_;    // least recently demanded first
  Index index_;  // keys view into runs_' nodes, which never move
};

}  // namespace dynrt::run

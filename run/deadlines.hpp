// Deadlines that can be cancelled: what the graph's timer service (actors/time.hpp) keeps for
// whoever asked to be told when a time has come (a branch's settle deadline, a drafter's time
// box, a demand's bounded wait, the idle check).
//
// A deadline is a token chosen by the caller (unique among those pending), a due time and a
// payload. pop_due() hands out, in order of due time, every deadline that has come; cancel()
// forgets one at once, so an actor that ends need not keep anything of itself alive until its
// deadlines would have come. O(log n) per operation.
//
// Pure and single-threaded (the timer service guards its own); time is passed in.
#pragma once

#include "runtime/clock.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dynrt::run {

template <class Payload>
class Deadlines {
 public:
  using Token = std::uint64_t;

  std::size_t size() const { return due_of_.size(); }

  // Adds the deadline `token` (replacing a pending one with the same token).
  void add(Token token, TimePoint due, Payload payload) {
    cancel(token);
    by_due_.emplace(std::make_pair(due, token), std::move(payload));
    due_of_.emplace(token, due);
  }

  // Forgets the deadline `token`; false if none is pending.
  bool cancel(Token token) {
    const auto it = due_of_.find(token);
    if (it == due_of_.end()) return false;
    by_due_.erase(std::make_pair(it->second, token));
    due_of_.erase(it);
    return true;
  }

  // The deadlines due at `now` (due <= now), earliest first; they are no longer pending.
  std::vector<Payload> pop_due(TimePoint now) {
    std::vector<Payload> out;
    while (!by_due_.empty() && by_due_.begin()->first.first <= now) {
      auto node = by_due_.extract(by_due_.begin());
      due_of_.erase(node.key().second);
      out.push_back(std::move(node.mapped()));
    }
    return out;
  }

  // When the earliest pending deadline is due.
  std::optional<TimePoint> next() const {
    if (by_due_.empty()) return std::nullopt;
    return by_due_.begin()->first.first;
  }

 private:
  std::map<std::pair<TimePoint, Token>, Payload> by_due_;
  std::unordered_map<Token, TimePoint> due_of_;
};

}  // namespace dynrt::run

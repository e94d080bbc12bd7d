#include "runtime/csl/coalescer.hpp"

#include <algorithm>

namespace dynrt::csl {

namespace {

std::vector<std::string> sorted(std::span<const std::string> keys) {
  std::vector<std::string> out(keys.begin(), keys.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

bool Coalescer::joinable(const Store& store, const Execution& e,
                         std::span<const std::string> keys) const {
  if (keys.size() != e.keys.size() || !std::equal(keys.begin(), keys.end(), e.keys.begin()))
    return false;
  if (store.snapshot(e.keys) != e.reads) return false;  // a write since it started
  return std::all_of(e.producers.begin(), e.producers.end(),
                     [&](const EntryRef& p) { return store.state(p).has_value(); });
}

Claim Coalescer::claim(const Store& store, const Hash128& name, std::span<const std::string> keys,
                       std::span<const EntryRef> producers, Ticket ticket, bool may_join) {
  const auto key_set = sorted(keys);
  Claim c;
  const auto it = by_name_.find(name);
  if (it != by_name_.end()) {
    auto& e = executions_.at(it->second);
    if (joinable(store, e, key_set)) {
      if (may_join) {
        e.waiters.push_back(ticket);
        c.kind = ClaimKind::join;
        c.execution = it->second;
        return c;
      }
      c.kind = ClaimKind::alone;
      c.reads = store.snapshot(key_set);
      return c;
    }
  }
  // Nothing joinable under the name: this one leads, and takes the name over.
  c.kind = ClaimKind::lead;
  c.execution = next_++;
  c.reads = store.snapshot(key_set);
  Execution e;
  e.name = name;
  e.keys = key_set;
  e.reads = c.reads;
  e.producers.assign(producers.begin(), producers.end());
  executions_.emplace(c.execution, std::move(e));
  by_name_[name] = c.execution;
  return c;
}

std::vector<Ticket> Coalescer::finish(std::uint64_t execution) {
  const auto it = executions_.find(execution);
  if (it == executions_.end()) return {};
  auto waiters = std::move(it->second.waiters);
  if (const auto n = by_name_.find(it->second.name); n != by_name_.end() && n->second == execution)
    by_name_.erase(n);
  executions_.erase(it);
  return waiters;
}

bool Coalescer::leave(std::uint64_t execution, Ticket ticket) {
  const auto it = executions_.find(execution);
  if (it == executions_.end()) return false;
  auto& w = it->second.waiters;
  const auto pos = std::find(w.begin(), w.end(), ticket);
  if (pos == w.end()) return false;
  w.erase(pos);
  return true;
}

std::size_t Coalescer::waiting() const {
  std::size_t n = 0;
  for (const auto& [id, e] : executions_)
    n += e.waiters.size();
  return n;
}

}  // namespace dynrt::csl

#include "actors/messages.hpp"

namespace dynrt::actors {

void RunRecords::keep(const std::string& key, Run run, TimePoint now) {
  if (max_ == 0) return;
  std::lock_guard lock(mutex_);
  if (const auto it = index_.find(key); it != index_.end()) {
    runs_.erase(it->second);
    index_.erase(it);
  }
  // Expired ones first, then the oldest beyond the count.
  while (!runs_.empty() && (runs_.front().until <= now || runs_.size() >= max_)) {
    index_.erase(runs_.front().key);
    runs_.pop_front();
  }
  runs_.push_back(Kept{key, std::move(run), now + keep_});
  index_[key] = std::prev(runs_.end());
}

std::optional<nlohmann::json> RunRecords::find(const std::string& key, TimePoint now) const {
  Run run;
  {
    std::lock_guard lock(mutex_);
    const auto it = index_.find(key);
    if (it == index_.end() || it->second->until <= now) return std::nullopt;
    run = it->second->run;
  }
  auto out = run.journal->to_json();  // outside the lock: the journal no longer changes
  out["workflow"] = run.workflow;
  out["id"] = run.id;
  out["live"] = false;
  return out;
}

}  // namespace dynrt::actors

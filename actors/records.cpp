#include "actors/messages.hpp"

namespace dynrt::actors {

void RunRecords::keep(const std::string& key, nlohmann::json record, TimePoint now) {
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
  runs_.push_back(Kept{key, std::move(record), now + keep_});
  index_[key] = std::prev(runs_.end());
}

std::optional<nlohmann::json> RunRecords::find(const std::string& key, TimePoint now) const {
  std::lock_guard lock(mutex_);
  const auto it = index_.find(key);
  if (it == index_.end() || it->second->until <= now) return std::nullopt;
  return it->second->record;
}

}  // namespace dynrt::actors

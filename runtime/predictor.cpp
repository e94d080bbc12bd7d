#include "runtime/predictor.hpp"

#include <algorithm>

namespace dynrt {
namespace {

// Appends `v` unless it is empty, already present, or the list is full.
void push_distinct(std::vector<std::string>& out, const std::string& v, std::size_t max) {
  if (out.size() >= max || v.empty()) return;
  if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
}

}  // namespace

void Predictor::observe(const Hash128&, std::string_view) {}

std::vector<std::string> StaticPredictor::rank(const Hash128&, const PredictorContext& ctx) const {
  std::vector<std::string> out;
  for (const auto& v : ctx.vocabulary)
    push_distinct(out, v, ctx.max);
  return out;
}

std::vector<std::string> FrequencyPredictor::rank(const Hash128& coordinate,
                                                  const PredictorContext& ctx) const {
  // Candidates in tie-break order: the template's seed values, then learned ones.
  std::vector<std::pair<std::string, std::uint64_t>> all;
  const auto it = tables_.find(coordinate);
  auto count_of = [&](const std::string& v) -> std::uint64_t {
    if (it == tables_.end()) return 0;
    for (const auto& [value, n] : it->second.counts)
      if (value == v) return n;
    return 0;
  };
  for (const auto& v : ctx.vocabulary) {
    if (v.empty() || std::any_of(all.begin(), all.end(), [&](auto& p) { return p.first == v; }))
      continue;
    all.emplace_back(v, count_of(v));
  }
  if (it != tables_.end())
    for (const auto& entry : it->second.counts)  // (a lambda may not capture a binding)
      if (std::none_of(all.begin(), all.end(), [&](auto& p) { return p.first == entry.first; }))
        all.push_back(entry);
  std::stable_sort(all.begin(), all.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::string> out;
  for (const auto& [v, n] : all)
    push_distinct(out, v, ctx.max);
  return out;
}

void FrequencyPredictor::observe(const Hash128& coordinate, std::string_view selected) {
  if (selected.empty() || max_values_ == 0) return;  // a zero bound remembers nothing
  auto& counts = tables_[coordinate].counts;
  for (auto& [value, n] : counts)
    if (value == selected) {
      ++n;
      return;
    }
  if (counts.size() >= max_values_) {
    // Forget the least picked value (the oldest among equals) to stay bounded.
    auto victim = std::min_element(counts.begin(), counts.end(), [](const auto& a, const auto& b) {
      return a.second < b.second;
    });
    counts.erase(victim);
  }
  counts.emplace_back(std::string(selected), 1);
}

std::uint64_t FrequencyPredictor::count(const Hash128& coordinate, std::string_view value) const {
  const auto it = tables_.find(coordinate);
  if (it == tables_.end()) return 0;
  for (const auto& [v, n] : it->second.counts)
    if (v == value) return n;
  return 0;
}

std::vector<std::string> FromOutputPredictor::rank(const Hash128&,
                                                   const PredictorContext& ctx) const {
  std::vector<std::string> out;
  for (const auto& v : ctx.observed)
    push_distinct(out, v, ctx.max);
  return out;
}

std::vector<std::string> DrafterPredictor::rank(const Hash128&, const PredictorContext& ctx) const {
  std::vector<std::pair<std::string, std::size_t>> votes;  // first appearance order
  for (const auto& v : ctx.observed) {
    if (v.empty()) continue;
    auto it = std::find_if(votes.begin(), votes.end(), [&](auto& p) { return p.first == v; });
    if (it == votes.end())
      votes.emplace_back(v, 1);
    else
      ++it->second;
  }
  std::stable_sort(votes.begin(), votes.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::string> out;
  for (const auto& [v, n] : votes)
    push_distinct(out, v, ctx.max);
  return out;
}

}  // namespace dynrt

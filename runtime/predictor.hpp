// Predictors: a coordinate and its context in, ranked candidates out (paper section 3.3).
//
// Only the ranking is used: the fill gate learns per rank how often a candidate at that rank
// is selected, so a predictor need not be calibrated. Four kinds, one per template candidate
// source:
//   static       the template's list, in its order;
//   frequency    learned online per coordinate from resolved selections (most picked first;
//                ties keep the template's order, then first appearance);
//   from-output  candidates extracted from an earlier stage's output, in order of appearance
//                (the caller extracts them with dsl::extract_candidates);
//   drafter      a small model asked N times; ranked by how many samples name each candidate.
// The asynchronous part of a predictor (sampling the drafter) is the branch actor's; it fills
// PredictorContext::observed before calling rank(), within the source's time box.
//
// Pure; single-threaded (the pricing actor owns the frequency tables).
#pragma once

#include "runtime/hash.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dynrt {

struct PredictorContext {
  std::vector<std::string> vocabulary;  // the template's values (static list, learned seed)
  std::vector<std::string> observed;    // extracted from an output, or the drafter's samples
  std::size_t max = 3;                  // most candidates to return
};

class Predictor {
 public:
  virtual ~Predictor() = default;
  virtual std::string_view name() const = 0;
  // Ranked, distinct, non-empty candidates, at most ctx.max.
  virtual std::vector<std::string> rank(const Hash128& coordinate,
                                        const PredictorContext& ctx) const = 0;
  // A branch of `coordinate` resolved to `selected` (learning predictors update).
  virtual void observe(const Hash128& coordinate, std::string_view selected);
};

class StaticPredictor final : public Predictor {
 public:
  std::string_view name() const override { return "static"; }
  std::vector<std::string> rank(const Hash128&, const PredictorContext& ctx) const override;
};

class FrequencyPredictor final : public Predictor {
 public:
  // At most `max_values` distinct selections remembered per coordinate (open vocabularies).
  explicit FrequencyPredictor(std::size_t max_values = 256) : max_values_(max_values) {}
  std::string_view name() const override { return "frequency"; }
  std::vector<std::string> rank(const Hash128& coordinate,
                                const PredictorContext& ctx) const override;
  void observe(const Hash128& coordinate, std::string_view selected) override;
  std::uint64_t count(const Hash128& coordinate, std::string_view value) const;

 private:
  struct Table {
    std::vector<std::pair<std::string, std::uint64_t>> counts;  // first appearance order
  };
  std::size_t max_values_;
  std::unordered_map<Hash128, Table> tables_;
};

class FromOutputPredictor final : public Predictor {
 public:
  std::string_view name() const override { return "from-output"; }
  std::vector<std::string> rank(const Hash128&, const PredictorContext& ctx) const override;
};

class DrafterPredictor final : public Predictor {
 public:
  std::string_view name() const override { return "drafter"; }
  // ctx.observed holds one entry per sample that named a candidate (unreadable samples are
  // left out); most named first, ties by first appearance.
  std::vector<std::string> rank(const Hash128&, const PredictorContext& ctx) const override;
};

}  // namespace dynrt

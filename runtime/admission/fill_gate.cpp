#include "runtime/admission/fill_gate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace dynrt::admission {

double utility(const PricedCandidate& c, const LoadView& v, const PriceCurves& curves) {
  const double cost = curves.cost(v, c.footprint);
  return c.p * c.gain_ms - (1.0 - c.p) * cost;  // Eq. 6
}

std::optional<double> threshold(double gain_ms, double cost_ms) {
  if (gain_ms + cost_ms <= 0) return std::nullopt;  // Eq. 7 is 0/0: rejected
  return cost_ms / (gain_ms + cost_ms);
}

bool feasible(const Budget& b, const Footprint& f) {
  return b.fills >= 1 && f.kv_share <= b.kv_share + kKvSlack;
}

std::vector<Step> sequential_repricing(std::span<const PricedCandidate> candidates, LoadView v,
                                       const PriceCurves& curves, Budget budget,
                                       const Hooks& hooks) {
  std::vector<Step> admitted;
  std::vector<bool> remaining(candidates.size(), true);
  std::size_t left = candidates.size();
  while (left > 0) {
    // s = argmax U_a(V') over the remaining candidates (ties: the earlier rank).
    std::size_t best = candidates.size();
    double best_u = 0;
    double best_cost = 0;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      if (!remaining[i]) continue;
      const double cost = curves.cost(v, candidates[i].footprint);
      const double u = candidates[i].p * candidates[i].gain_ms - (1.0 - candidates[i].p) * cost;
      if (best == candidates.size() || u > best_u) {
        best = i;
        best_u = u;
        best_cost = cost;
      }
    }
    remaining[best] = false;
    --left;
    bool probe = false;
    if (best_u <= 0) {
      if (!hooks.audit || !hooks.audit(best)) break;
      probe = true;
    }
    const Footprint& f = candidates[best].footprint;
    if (feasible(budget, f) && (!hooks.reserve || hooks.reserve(best))) {
      admitted.push_back(Step{best, best_u, best_cost, probe});
      budget.fills -= 1;
      budget.kv_share -= f.kv_share;
      v = curves.project(v, f);
    }
    if (probe) break;
  }
  return admitted;
}

namespace {

// Re-prices an ordered admission: each step's utility and cost at its position.
std::vector<Step> priced_steps(std::span<const PricedCandidate> candidates,
                               const std::vector<Step>& steps, LoadView v,
                               const PriceCurves& curves) {
  std::vector<Step> out = steps;
  for (Step& s : out) {
    s.cost_ms = curves.cost(v, candidates[s.index].footprint);
    s.utility = candidates[s.index].p * candidates[s.index].gain_ms -
                (1.0 - candidates[s.index].p) * s.cost_ms;
    v = curves.project(v, candidates[s.index].footprint);
  }
  return out;
}

double total(const std::vector<Step>& steps) {
  double j = 0;
  for (const Step& s : steps)
    j += s.utility;
  return j;
}

}  // namespace

std::vector<Step> admit_fills(std::span<const PricedCandidate> candidates, LoadView v,
                              const PriceCurves& curves, Budget budget, const Hooks& hooks) {
  std::vector<Step> steps = sequential_repricing(candidates, v, curves, budget, hooks);
  if (candidates.size() > 64) return steps;
  std::uint64_t taken = 0;  // admitted, or refused by its reservation: not tried again
  for (const Step& s : steps) {
    taken |= std::uint64_t{1} << s.index;
    budget.fills -= 1;
    budget.kv_share -= candidates[s.index].footprint.kv_share;
  }
  double current = total(steps);
  // 1. Front insertion, best gain first, until no candidate raises J_seq.
  while (true) {
    std::size_t best = candidates.size();
    double best_j = current;
    std::vector<Step> best_steps;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      if ((taken >> i) & 1 || !feasible(budget, candidates[i].footprint)) continue;
      std::vector<Step> trial;
      trial.reserve(steps.size() + 1);
      trial.push_back(Step{i, 0, 0, false});
      trial.insert(trial.end(), steps.begin(), steps.end());
      trial = priced_steps(candidates, trial, v, curves);
      const double j = total(trial);
      if (j > best_j + 1e-9 * std::max(1.0, std::abs(best_j))) {
        best = i;
        best_j = j;
        best_steps = std::move(trial);
      }
    }
    if (best == candidates.size()) break;
    taken |= std::uint64_t{1} << best;
    if (hooks.reserve && !hooks.reserve(best)) continue;  // its reservation failed
    steps = std::move(best_steps);
    current = best_j;
    budget.fills -= 1;
    budget.kv_share -= candidates[best].footprint.kv_share;
  }
  // 2. Lowest p first, if that scores higher.
  std::vector<Step> sorted = steps;
  std::stable_sort(sorted.begin(), sorted.end(), [&](const Step& a, const Step& b) {
    return candidates[a.index].p < candidates[b.index].p;
  });
  sorted = priced_steps(candidates, sorted, v, curves);
  if (total(sorted) > current) steps = std::move(sorted);
  return steps;
}

double sequence_utility(std::span<const PricedCandidate> candidates,
                        std::span<const std::size_t> order, LoadView v, const PriceCurves& curves) {
  double total = 0;
  for (const std::size_t i : order) {
    total += utility(candidates[i], v, curves);
    v = curves.project(v, candidates[i].footprint);
  }
  return total;
}

}  // namespace dynrt::admission

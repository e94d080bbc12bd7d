// The fill gate (Action 1): which candidates of an open branch to fill, at the current
// projected load (paper section 3.4, Eq. 6 and 7, Algorithm 1 lines 7-19, Proposition A.8).
//
// Each candidate has an optimistic probability of useful service p (selection upper quantile
// times usability), the execution its consumption saves G (ms, after C1 lookup) and its
// footprint. Its utility at load V is
//     U_s(V) = p G - (1 - p) C_s(V)                                       (Eq. 6)
// and, when G + C > 0, U_s > 0 exactly when p > C / (G + C)               (Eq. 7)
// (both zero: U = 0, rejected; the break-even ratio 0/0 is undefined).
// sequential_repricing() admits the highest-utility candidate that passes hard feasibility
// (fills left, KV left) and an atomic reservation, projects the load, reprices the rest, and
// stops at the first non-positive maximum. Because projection only raises occupancy and the
// price curves are monotone, no remaining utility can rise after an admission, so stopping
// there loses nothing the rule could still admit (Proposition A.8). An optional audit lets
// one refused candidate through so that closed gates keep learning.
//
// Pure; the reservation and audit hooks are how the caller's state takes part.
#pragma once

#include "runtime/admission/price.hpp"

#include <functional>
#include <optional>
#include <span>
#include <vector>

namespace dynrt::admission {

struct PricedCandidate {
  double p = 0;        // optimistic probability of useful service, in [0, 1]
  double gain_ms = 0;  // G: execution its consumption saves
  Footprint footprint;
};

// Eq. 6.
double utility(const PricedCandidate& c, const LoadView& v, const PriceCurves& curves);
// Eq. 7: the probability above which a candidate with this gain and cost is worth filling;
// nullopt when gain + cost == 0 (the 0/0 case, rejected).
std::optional<double> threshold(double gain_ms, double cost_ms);

// Hard feasibility: what the budgets still allow.
struct Budget {
  int fills = 0;        // fills that may still be admitted
  double kv_share = 0;  // KV share of the pool that may still be reserved
};

// KV shares are sums and differences of doubles: a footprint that fills the budget left
// exactly must not be refused for the rounding of the subtractions before it (0.3 - 0.1 - 0.1
// is just under 0.1). Every KV comparison of admission allows this much.
inline constexpr double kKvSlack = 1e-12;

bool feasible(const Budget& b, const Footprint& f);

struct Step {
  std::size_t index = 0;  // into the candidates
  double utility = 0;     // U_s at the load before it was admitted
  double cost_ms = 0;     // C_s at that load
  bool audit = false;     // admitted by an audit despite non-positive utility
};

struct Hooks {
  // Atomic reservation of a candidate's resources; false refuses it (and the rule goes on).
  std::function<bool(std::size_t index)> reserve;
  // Asked when the best remaining utility is non-positive, with that candidate's index: true
  // admits it anyway (a seeded audit), after which the rule stops.
  std::function<bool(std::size_t index)> audit;
};

// Algorithm 1, lines 7-19. Returns the admitted candidates in admission order.
std::vector<Step> sequential_repricing(std::span<const PricedCandidate> candidates, LoadView v,
                                       const PriceCurves& curves, Budget budget,
                                       const Hooks& hooks = {});

// What the fill gate runs: sequential_repricing(), then two refinements that only ever raise
// the admission's J_seq (docs/admission.md, "Beyond Algorithm 1"):
//   1. front insertion: a refused candidate that would be positive if it bore the lowest
//      price, ahead of those already admitted, is admitted there when the whole sequence's
//      J_seq rises and the budgets and a reservation allow it. Algorithm 1 can only append,
//      so it stops early when a cheap, uncertain candidate loses its margin to the price the
//      first admissions raised; most of its set mismatches against the exact oracle are these.
//   2. ordering: the admitted fills are sequenced by ascending p, so the prices that rise with
//      each admission fall on the candidates most likely to be used (their cost is weighted by
//      1 - p), whenever that order scores higher.
// The returned steps carry each fill's utility and cost at its final position.
std::vector<Step> admit_fills(std::span<const PricedCandidate> candidates, LoadView v,
                              const PriceCurves& curves, Budget budget, const Hooks& hooks = {});

// J_seq = sum of U_{s_i}(V_{i-1}) over an ordered admission, projecting after each.
double sequence_utility(std::span<const PricedCandidate> candidates,
                        std::span<const std::size_t> order, LoadView v, const PriceCurves& curves);

}  // namespace dynrt::admission

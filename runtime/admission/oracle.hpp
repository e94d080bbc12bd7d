// The exact admission oracle (paper Appendix B): the ordered subset of candidates that
// maximizes the sequence-aware utility J_seq = sum of U_{s_i}(V_{i-1}), under the same load
// projection and hard budgets as sequential_repricing().
//
// The projected load after admitting a set depends only on the set (its size and total
// footprint), not on the order, so one best ordering per subset suffices: dynamic
// programming over subsets, best[S] = max over s in S of best[S - s] + U_s(V(S - s)), in
// O(K 2^K) time and O(2^K) space. Reservations never fail and audits are off, as in the
// paper's replay. Meant for K up to about 20. Pure.
#pragma once

#include "runtime/admission/fill_gate.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace dynrt::admission {

struct OracleResult {
  double best = 0;                 // J*_seq (0: admit nothing)
  std::vector<std::size_t> order;  // an optimal ordered subset
  std::uint32_t set = 0;           // its members as a bit set
  // The best J_seq of every subset (in any feasible order); -infinity where infeasible.
  std::vector<double> by_set;
};

OracleResult exact_oracle(std::span<const PricedCandidate> candidates, LoadView v,
                          const PriceCurves& curves, Budget budget);

}  // namespace dynrt::admission

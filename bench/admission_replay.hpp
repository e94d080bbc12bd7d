// The sequential-admission replay of the paper's Appendix B, on generated snapshots: how close
// the implemented fill gate (sequential repricing) comes to the exact ordered-subset oracle.
//
// The paper replays 756 archived Routing snapshots of two or three candidates; those archives
// are not available here, so snapshots are generated from a seed with wider ranges: 2 to 8
// candidates ranked by decreasing probability, loads from idle to near capacity, and budgets
// that are sometimes binding (fills left below the candidate count, KV headroom below their
// total footprint), the knapsack case the archive never reached. Audits are off and
// reservations never fail, as in the paper. Both the fill gate as implemented (sequential
// repricing with its two refinements) and Algorithm 1 alone are scored. Deterministic for a
// seed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dynrt::bench {

struct AdmissionReplayOptions {
  std::size_t snapshots = 1000;
  std::uint64_t seed = 1;
  int min_candidates = 2;
  int max_candidates = 8;
};

// How one admission rule fared over the snapshots with a positive optimum.
struct RuleScore {
  std::size_t set_matches = 0;  // admitted an oracle-optimal set
  std::size_t exact_order = 0;  // ... in an order that attains the optimum
  double sum_j = 0;             // sum of its J_seq
  double median_ratio = 0;      // of J_seq / J*_seq
  double p5_ratio = 0;
  double min_ratio = 0;
};

struct AdmissionReplayResult {
  std::size_t snapshots = 0;
  std::size_t positive = 0;  // snapshots whose oracle optimum is positive
  std::size_t binding = 0;   // ... where a budget binds the oracle
  double sum_j_star = 0;     // sum of the oracle's J*_seq over them
  RuleScore gate;            // the fill gate as implemented: admit_fills()
  RuleScore algorithm1;      // Algorithm 1 alone: sequential_repricing()

  double set_match_rate(const RuleScore& r) const {
    return positive ? double(r.set_matches) / double(positive) : 1;
  }
  double utility_ratio(const RuleScore& r) const {
    return sum_j_star > 0 ? r.sum_j / sum_j_star : 1;
  }
};

AdmissionReplayResult replay_admission(const AdmissionReplayOptions& options);

// The report `dynrt bench admission` prints; the figures are on lines that name them.
std::string format_admission_replay(const AdmissionReplayOptions& options,
                                    const AdmissionReplayResult& result);

}  // namespace dynrt::bench

// Beta posteriors for the fill gate's probability of useful service (paper section 3.4):
// p = (upper quantile of the rank-conditioned selection posterior) x (posterior mean of
// timely usability given selection).
//
// The selection rate of a predictor's rank-r candidate is Beta(1 + selected, 1 + not); the
// gate uses its Bayes-UCB upper quantile (Kaufmann et al., 2012) at level 1 - 1/(t + 1),
// capped at 0.99, where t counts the branches the class has resolved: optimistic while
// little is known, shrinking toward the mean as evidence accumulates. Only the predictor's
// ordering is used, never its raw scores, so the rank is the key. The quantile is cached and
// recomputed only when the posterior or t changes (an inverse incomplete beta costs about a
// microsecond at six digits; a decision reads one per candidate); the controller refreshes the
// ranks a branch predicted when that branch resolves. Pure.
#pragma once

#include <cstddef>
#include <vector>

namespace dynrt::admission {

struct BetaPosterior {
  double alpha = 1;
  double beta = 1;
  double mean() const { return alpha / (alpha + beta); }
  // The q-quantile, q in (0, 1).
  double quantile(double q) const;
};

class RankSelection {
 public:
  static constexpr std::size_t kRanks = 16;  // ranks beyond share the last posterior

  // The optimistic selection probability of the candidate at `rank`.
  double upper(std::size_t rank) const;
  // One resolved branch's outcome for its rank-`rank` candidate.
  void observe(std::size_t rank, bool selected);
  // A resolved branch: the quantile level moves on.
  void next_branch() { ++branches_; }
  // Computes the rank's upper quantile now (on the feedback path), so that the next decision
  // reads it from the cache instead of inverting an incomplete beta function.
  void refresh(std::size_t rank) const { (void)upper(rank); }
  const BetaPosterior& posterior(std::size_t rank) const { return ranks_[bucket(rank)].post; }
  std::size_t branches() const { return branches_; }
  double level() const;

 private:
  struct Rank {
    BetaPosterior post;
    mutable double cached = -1;
    mutable std::size_t cached_at = 0;  // branches_ when it was computed
  };
  static std::size_t bucket(std::size_t rank) { return rank < kRanks ? rank : kRanks - 1; }
  std::vector<Rank> ranks_ = std::vector<Rank>(kRanks);
  std::size_t branches_ = 0;
};

}  // namespace dynrt::admission

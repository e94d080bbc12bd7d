#include "runtime/admission/beta.hpp"

#include <boost/math/distributions/beta.hpp>
#include <boost/math/policies/policy.hpp>

#include <algorithm>

namespace dynrt::admission {

namespace {
// Report nothing by exception (parameters are always valid here, and the request path does
// not throw), and stop at six significant digits: plenty for a probability, and about a third
// faster than full double precision.
using Policy = boost::math::policies::policy<
    boost::math::policies::domain_error<boost::math::policies::ignore_error>,
    boost::math::policies::overflow_error<boost::math::policies::ignore_error>,
    boost::math::policies::evaluation_error<boost::math::policies::ignore_error>,
    boost::math::policies::digits10<6>>;
}  // namespace

double BetaPosterior::quantile(double q) const {
  const boost::math::beta_distribution<double, Policy> dist(alpha, beta);
  const double x = boost::math::quantile(dist, std::clamp(q, 1e-9, 1 - 1e-9));
  return std::clamp(x, 0.0, 1.0);
}

double RankSelection::level() const {
  return std::min(1.0 - 1.0 / static_cast<double>(branches_ + 1), 0.99);
}

double RankSelection::upper(std::size_t rank) const {
  const Rank& r = ranks_[bucket(rank)];
  if (r.cached < 0 || r.cached_at != branches_) {
    // At level 0 (no branch resolved yet) the quantile is the posterior's minimum: use the
    // mean instead, which for the uniform prior is 1/2.
    r.cached = branches_ == 0 ? r.post.mean() : r.post.quantile(level());
    r.cached_at = branches_;
  }
  return r.cached;
}

void RankSelection::observe(std::size_t rank, bool selected) {
  Rank& r = ranks_[bucket(rank)];
  (selected ? r.post.alpha : r.post.beta) += 1;
  r.cached = -1;
}

}  // namespace dynrt::admission

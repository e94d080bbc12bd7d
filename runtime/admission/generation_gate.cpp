#include "runtime/admission/generation_gate.hpp"

#include <algorithm>
#include <cmath>

namespace dynrt::admission {

Context make_context(const ContextInputs& in) {
  Context x;
  x << 1.0, std::clamp(in.envelope, 0.0, 1.0), std::clamp(in.envelope - in.rho_now, 0.0, 1.0),
      std::clamp(in.consumption, 0.0, 1.0), std::clamp(in.backlog, 0.0, 1.0),
      std::clamp(in.kv, 0.0, 1.0);
  return x;
}

ClassModel::ClassModel(const Context& prior)
    : a_inv_(Eigen::Matrix<double, kContextDim, kContextDim>::Identity()), q_(prior) {}

double ClassModel::mean(const Context& x) const {
  return x.dot(a_inv_ * q_);
}

double ClassModel::radius(const Context& x) const {
  return sigma() * std::sqrt(std::max(x.dot(a_inv_ * x), 0.0));
}

double ClassModel::sigma() const {
  return samples_ > 0 ? std::sqrt(sum_y2_ / samples_) : 0.0;
}

void ClassModel::observe(const Context& x, double y) {
  // Sherman-Morrison: (A + x x^T)^-1 = A^-1 - (A^-1 x)(x^T A^-1) / (1 + x^T A^-1 x).
  const Context ax = a_inv_ * x;
  a_inv_ -= (ax * ax.transpose()) / (1.0 + x.dot(ax));
  q_ += x * y;
  ++samples_;
  sum_y2_ += y * y;
}

void ClassModel::revise(const Context& x, double old_y, double new_y) {
  q_ += x * (new_y - old_y);
  sum_y2_ += new_y * new_y - old_y * old_y;
}

}  // namespace dynrt::admission

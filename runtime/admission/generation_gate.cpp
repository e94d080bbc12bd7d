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

ClassModel::ClassModel(const Context& prior, double memory)
    : memory_(std::clamp(memory, 1e-3, 1.0)), prior_(prior) {}

double ClassModel::mean(const Context& x) const {
  return x.dot(a_inv_ * q());
}

double ClassModel::radius(const Context& x) const {
  return sigma() * std::sqrt(std::max(x.dot(a_inv_ * x), 0.0));
}

double ClassModel::sigma() const {
  return weight_ > 0 ? std::sqrt(std::max(sum_y2_, 0.0) / weight_) : 0.0;
}

double ClassModel::weight_of(std::uint64_t index) const {
  if (index >= observations_) return 0;
  return std::pow(memory_, static_cast<double>(observations_ - 1 - index));
}

std::uint64_t ClassModel::observe(const Context& x, double y) {
  if (memory_ < 1.0) {
    evidence_ = memory_ * evidence_ + x * x.transpose();
    q_evidence_ = memory_ * q_evidence_ + x * y;
    sum_y2_ = memory_ * sum_y2_ + y * y;
    weight_ = memory_ * weight_ + 1;
    // A = I + evidence is symmetric positive definite: a Cholesky solve, not Sherman-Morrison
    // (the discount is not a rank-one update).
    a_inv_ = (Matrix::Identity() + evidence_).llt().solve(Matrix::Identity());
  } else {
    // Sherman-Morrison: (A + x x^T)^-1 = A^-1 - (A^-1 x)(x^T A^-1) / (1 + x^T A^-1 x).
    const Context ax = a_inv_ * x;
    a_inv_ -= (ax * ax.transpose()) / (1.0 + x.dot(ax));
    q_evidence_ += x * y;
    sum_y2_ += y * y;
    weight_ += 1;
  }
  ++samples_;
  return observations_++;
}

void ClassModel::revise(std::uint64_t index, const Context& x, double old_y, double new_y) {
  const double w = weight_of(index);
  q_evidence_ += w * x * (new_y - old_y);
  sum_y2_ += w * (new_y * new_y - old_y * old_y);
}

}  // namespace dynrt::admission

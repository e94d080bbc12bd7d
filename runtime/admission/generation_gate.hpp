// The generation gate (Action 0): whether predicting candidates for a branch is worth its
// fixed cost, learned per branch class (paper section 3.4, Eq. 4 and 5, Proposition A.7).
//
// A branch class is a coordinate (workflow, decision point). Each class keeps a contextual
// ridge model A_c = I + sum x x^T, q_c = w0 + sum x y over its settled branches, where y is a
// branch's full-path return (Eq. 4: savings of the fills it consumed, minus its setup time,
// the cost of the fills it enabled and its expired or uncovered waits). The gate opens when
//     U0(c, x) = x^T A^-1 q + sigma * sqrt(x^T A^-1 x) > 0                      (Eq. 5)
// with sigma the observed RMS of y (linear UCB; the radius scales with the target's size,
// it is not a calibrated confidence bound). One aggregate return per branch, never one bonus
// per candidate: exclusive candidates would otherwise be overvalued.
//
// Evidence is discounted (discounted LinUCB, Russac et al., 2019): each new observation
// multiplies the weight of the earlier ones by `memory` (gamma), so A_c = I + sum gamma^age
// x x^T and q_c = w0 + sum gamma^age x y, and sigma is the discounted RMS. The ridge prior I is
// not discounted. A class's returns move with the load and with its predictor, and a class
// whose first trials failed must not need as many good branches as it once had bad ones to
// open again: with gamma 0.9 a branch ten observations old weighs a third of a new one. With
// gamma 1 nothing is forgotten and A^-1 is Sherman-Morrison's exact inverse. A^-1 is kept
// up to date after each observation (a 6 x 6 solve), so scoring a context is O(d^2).
//
// Context x (d = 6):
//   0 bias                 1
//   1 horizon pressure     the causal envelope rho_H
//   2 transient low        rho_H - rho_t: how far the current reading sits below the
//                          envelope (a dip that will not last)
//   3 fill consumption     the class's recent share of admitted fills that were consumed
//   4 queue backlog        queued requests over decode slots, capped at 1
//   5 KV occupancy         o_KV, the fill KV budget in use. Figure 5b shows KV residency, not
//                          slot count, dominates interference (3% -> 24% of the pool raises
//                          canonical latency 11% -> 145%), and rho alone cannot tell a
//                          KV-saturated engine from an idle one.
// Pure.
#pragma once

#include <Eigen/Dense>

#include <cstdint>

namespace dynrt::admission {

inline constexpr int kContextDim = 6;
using Context = Eigen::Matrix<double, kContextDim, 1>;

struct ContextInputs {
  double envelope = 0;     // rho_H
  double rho_now = 0;      // rho_t
  double consumption = 0;  // recent consumed / admitted fills of the class
  double backlog = 0;      // queued requests / decode slots
  double kv = 0;           // o_KV
};

Context make_context(const ContextInputs& in);

class ClassModel {
 public:
  // `prior` is w0 (the class prior on the weights); zero unless told otherwise. `memory` is
  // gamma, in (0, 1].
  explicit ClassModel(const Context& prior = Context::Zero(), double memory = 1.0);

  // Eq. 5: the mean and the exploration radius at x.
  double mean(const Context& x) const;
  double radius(const Context& x) const;
  double ucb(const Context& x) const { return mean(x) + radius(x); }

  // A settled branch: one observation (x, y). Returns its index, for revise().
  std::uint64_t observe(const Context& x, double y);
  // Delayed feedback on observation `index`: its target moves from old_y to new_y; q_c and
  // sigma follow at that observation's present weight, A_c and the sample count do not (no
  // second observation).
  void revise(std::uint64_t index, const Context& x, double old_y, double new_y);

  int samples() const { return samples_; }  // observations, undiscounted (the cold trials)
  double sigma() const;                     // discounted RMS of the targets
  double memory() const { return memory_; }
  const Eigen::Matrix<double, kContextDim, kContextDim>& a_inverse() const { return a_inv_; }
  Context q() const { return prior_ + q_evidence_; }

 private:
  double weight_of(std::uint64_t index) const;

  using Matrix = Eigen::Matrix<double, kContextDim, kContextDim>;
  double memory_;
  Context prior_;
  Matrix evidence_ = Matrix::Zero();  // sum gamma^age x x^T (kept only when gamma < 1)
  Matrix a_inv_ = Matrix::Identity();
  Context q_evidence_ = Context::Zero();  // sum gamma^age x y
  int samples_ = 0;
  std::uint64_t observations_ = 0;  // the next observation's index
  double sum_y2_ = 0;               // sum gamma^age y^2
  double weight_ = 0;               // sum gamma^age
};

}  // namespace dynrt::admission

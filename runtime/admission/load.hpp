// The load view and its causal envelope (paper section 3.4, Eq. 3).
//
// A LoadView is what admission prices against: fill occupancy (fills in flight over the fill
// budget), KV-reservation occupancy (reserved KV over the fill KV budget) and canonical
// pressure rho (canonical requests in flight over the engine's decode slots), all in [0, 1].
// LoadEnvelope keeps the history of rho and gives the causal envelope
//     rho_H(t) = max(rho_t, (1/H) * integral of rho over [t - H, t])
// so rising load counts at once and falling load relaxes over one window H: a fill admitted
// now holds its slot for seconds, and an instantaneous idle reading would underprice it. H
// should match how long a fill stays co-resident (default 5 s; AdmissionConfig::horizon).
// The pricing actor feeds observe() from engine load snapshots and its own accounting, and a
// periodic probe keeps the history current while the gates are closed.
//
// Pure; single-threaded; time is passed in (the owner reads its injected Clock).
#pragma once

#include "runtime/clock.hpp"

#include <deque>

namespace dynrt::admission {

struct LoadView {
  double fill = 0;  // o_fill: fills in flight / fill budget
  double kv = 0;    // o_KV: reserved KV / fill KV budget
  double rho = 0;   // canonical pressure: canonical requests in flight / decode slots
  // The engines' KV pool in use, canonical and fills together, as they report it (0: not
  // reported). The KV price is the interference's slope at this occupancy.
  double engine_kv = 0;
  // The fills in flight weighted by each one's chance of being consumed (its p at admission):
  // work a caller will wait for, as canonical requests are.
  double demanded = 0;
  friend bool operator==(const LoadView&, const LoadView&) = default;
};

class LoadEnvelope {
 public:
  explicit LoadEnvelope(Duration horizon);

  // Records the load at time t (non-decreasing t; an earlier t is treated as t = last).
  // Amortized O(1).
  void observe(TimePoint t, const LoadView& view);

  // V_H: the latest view with rho replaced by the envelope at time t (Eq. 3).
  LoadView view(TimePoint t) const;
  // rho_H(t).
  double envelope(TimePoint t) const;
  // The time-weighted mean of rho over [t - H, t] (over the history so far when it is
  // shorter than H).
  double mean(TimePoint t) const;

  const LoadView& latest() const { return latest_; }
  Duration horizon() const { return horizon_; }

 private:
  struct Sample {
    TimePoint at;
    double rho;
  };
  void trim(TimePoint t);

  Duration horizon_;
  std::deque<Sample> samples_;  // rho is piecewise constant from each sample to the next
  double area_ = 0;             // integral of rho between the first and the last sample (ns)
  LoadView latest_;
  bool empty_ = true;
};

}  // namespace dynrt::admission

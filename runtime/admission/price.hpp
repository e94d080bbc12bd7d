// Price curves: what a fill costs canonical requests at a given load (paper section 3.4).
//
// A candidate's footprint R_s = (slot time, KV residency): the milliseconds it would hold a
// decode slot, and its share of the engine's KV pool times those milliseconds. The price
// curves beta(V) = (beta_slot, beta_KV) convert it into milliseconds of canonical delay,
// C_s(V_H) = beta(V_H)^T R_s, summed over the canonical requests it slows.
//
// Both curves come from the interference model fitted to the paper's Figure 5b
// (runtime/interference.hpp), the same model the simulated engine runs:
//   - slots: each co-resident request stretches every co-running canonical request by
//     a = 0.025%, plus a one-off 4.5% once anything shares its batch; a per-fill price must be
//     monotone, so that one-off overhead is spread over the fill budget (4.5% / 16 per fill);
//   - KV: the stretch grows as 12.3 k^1.52 with the share k of the KV pool in use; its
//     derivative, at the engines' reported occupancy (or, unreported, at the fills' own share;
//     at least 3%, the smallest measured), is the price of a unit of KV share. On a tight KV
//     pool that canonical requests fill, a fill's KV costs several times what it would on an
//     empty one.
//   - prefill: under chunked prefill (vLLM's and SGLang's default) a prompt is processed inside
//     the decode steps, and every request decoding in its batch waits prefill_ms_per_token per
//     prompt token. A fill's prompts therefore delay each canonical request of the batch they
//     join (rho * decode slots / batches) by their whole prefill time: the direct stall, with
//     no congestion factor. Unlike the stretch this does not shrink with the batch: at load, a
//     fill's prompt can cost canonical requests more than its decode. Zero where the engines do
//     not say what a prompt token costs.
// The slot and KV prices are multiplied by the number of canonical requests in flight
// (rho * decode slots) and by a congestion factor 1 / (1 - u) that steepens the price near capacity
// (u: the larger of decode-slot utilization and fill-budget occupancy for the slot price, so that a
// nearly spent fill budget is kept for likely candidates; fill KV-budget occupancy for the KV
// price; capped at 0.95). Every factor is non-decreasing in every component of V, so both curves
// are monotone componentwise, which Proposition A.8 needs.
//
// Pure.
#pragma once

#include "runtime/admission/load.hpp"
#include "runtime/interference.hpp"

#include <algorithm>
#include <cmath>

namespace dynrt::admission {

struct Footprint {
  double slot_ms = 0;        // decode time the fill would hold a slot for
  double kv_share = 0;       // its share of the engine's KV pool, in [0, 1]
  double prompt_tokens = 0;  // the prompt tokens its requests have the engine prefill
};

struct PriceParams {
  double decode_slots = 64;         // concurrent decode slots of the engine
  double fill_slots = 16;           // the fill budget: fills in flight at o_fill = 1 ...
  double fill_slot_share = 0.25;    // ... or this share of the decode slots, if more
  double kv_budget = 0.25;          // the fill KV budget, as a share of the pool, at o_KV = 1
  InterferenceModel interference;   // Fig. 5b
  double kv_floor = 0.03;           // smallest KV share Fig. 5b measured
  double max_utilization = 0.95;    // caps the congestion factor at 20
  double prefill_ms_per_token = 0;  // a decode step's added time per prompt token (0: unknown)
  double batches = 1;               // independent decode batches the slots are spread over
};

struct Prices {
  double slot = 0;     // ms of canonical delay per ms of slot time
  double kv = 0;       // ms of canonical delay per (KV share x ms)
  double prefill = 0;  // ms of canonical delay per prompt token
};

class PriceCurves {
 public:
  explicit PriceCurves(PriceParams params = {}) : p_(params), fill_slots_(params.fill_slots) {}

  Prices at(const LoadView& v) const;
  // C_s(V) = beta(V)^T R_s, in ms.
  double cost(const LoadView& v, const Footprint& f) const;
  // ProjectLoad: the view after admitting a fill with footprint f.
  LoadView project(const LoadView& v, const Footprint& f) const;

  const PriceParams& params() const { return p_; }
  // The engines' decode slots, as their load reports them (at least 1). The fill budget grows
  // with them, as a share (fill_slot_share) of the slots, never below the configured fill_slots:
  // sixteen fills are a quarter of a 64-slot engine but nothing on four 1,024-slot workers.
  void set_decode_slots(double slots) {
    p_.decode_slots = slots >= 1 ? slots : 1;
    fill_slots_ = std::max(p_.fill_slots, std::floor(p_.fill_slot_share * p_.decode_slots));
  }
  // What the engines say a prompt token stalls a decode step by (ms; 0: unknown, prompts are
  // not priced) and over how many independent batches their slots are spread.
  void set_prefill(double ms_per_token, int batches) {
    p_.prefill_ms_per_token = ms_per_token > 0 ? ms_per_token : 0;
    p_.batches = batches >= 1 ? batches : 1;
  }
  // The fill budget in effect: fills in flight at o_fill = 1.
  double fill_slots() const { return fill_slots_; }

 private:
  PriceParams p_;
  double fill_slots_;
};

}  // namespace dynrt::admission

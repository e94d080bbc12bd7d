// Price curves: what a fill costs canonical requests at a given load (paper section 3.4).
//
// A candidate's footprint R_s = (slot time, KV residency): the milliseconds it would hold a
// decode slot, and its share of the engine's KV pool times those milliseconds. The price
// curves beta(V) = (beta_slot, beta_KV) convert it into milliseconds of canonical delay,
// C_s(V_H) = beta(V_H)^T R_s, summed over the canonical requests it slows.
//
// Both curves come from the interference model fitted to the paper's Figure 5b
// (runtime/interference.hpp), the same model the simulated engine runs. A fill joins one decode
// batch (one worker's), and the stretch it causes falls on the requests of that batch alone.
// The requests that count are those a caller waits for: the canonical ones (rho * decode
// slots), and the fills in flight weighted by their chance of being consumed
// (LoadView::demanded), since a consumed fill is a caller's request started early. Below,
// "canonical request" means either. The slot and KV prices are the curve's stretch times the
// scale InterferenceFit reads from the engines' inter-token latency (1 until it has read
// enough): the curve is one model on one GPU, and an engine may stretch more or less.
//   - slots: each co-resident request stretches every co-running canonical request of its batch
//     by a = 0.025%. The one-off 4.5% that any sharing costs falls only on a canonical request
//     that had its batch to itself: at most one per batch, so at most `batches` of them in all,
//     spread over the fill budget (a per-fill price must be monotone, so it cannot charge the
//     first fill alone).
//   - KV: the stretch grows as 12.3 k^1.52 with the share k of a worker's KV pool in use; its
//     derivative, at the KV in use (the engines' reported occupancy or, where that is lower or
//     unreported, the fills' own share; at least 3%, the smallest measured), is the price of a
//     unit of KV share. A fill's share of the whole pool is its worker's share over the
//     batches, so this price multiplies by all the canonical requests in flight. It is charged
//     on the fill's mean residency over its decode, not its peak. On a tight pool that canonical
//     requests fill, a fill's KV costs several times what it would on an empty one.
//   - prefill: under chunked prefill (vLLM's and SGLang's default) a prompt is processed inside
//     the decode steps, and every request decoding in its batch waits prefill_ms_per_token per
//     prompt token. A fill's prompts therefore delay each canonical request of the batch they
//     join by their whole prefill time. Unlike the stretch this does not shrink with the batch:
//     at load, a fill's prompt can cost canonical requests more than its decode. Zero where the
//     engines do not say what a prompt token costs.
// All three prices carry a congestion factor that steepens them near capacity: a request's
// time in the system over its service time at utilization u (capped at 0.95). A worker's
// compute is one server its batch shares, so the slot and prefill prices take the single
// server's 1 / (1 - u) (u: decode-slot utilization, canonical requests and fills). For the
// prefill price it stands for the compute a prompt takes: past the batch where a worker is
// compute-bound, its forward passes lengthen every step after it, not only the one it joins.
// A KV pool is not one server but as many places as requests of the fill's size it holds
// (c = 1 / (worker share)): a request waits only when every place is taken, and the factor
// is M/M/c's 1 + ErlangC(c, u) / (c (1 - u)) (u: the KV in use), which is 1 / (1 - u) for a
// pool that holds one such request and stays near 1 for one that holds hundreds until it is
// nearly full. (With the single server's factor a pool half full doubled the KV price where no
// request ever waited for KV, and at twice the curve's interference full dynrt refused the
// fills `static` showed pay: docs/benchmarks.md, "KV congestion as a pool of places".)
// How full the fill budget is does not enter them: that is a shortage of fill slots, not a
// delay to canonical work, and the controller's reserve price rations it (controller.hpp).
// Every factor is non-decreasing in every component of V, so the curves are monotone
// componentwise, which Proposition A.8 needs.
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
  double kv_share = 0;       // its share of the engine's KV pool at its peak, in [0, 1]
  double prompt_tokens = 0;  // the prompt tokens its requests have the engine prefill
  // Its mean share of the KV pool over slot_ms (a request's KV grows from its prompt to its
  // prompt and completion as it decodes); negative: unknown, the peak is used.
  double kv_mean_share = -1;
  // The share of slot_ms it holds its slot and KV for when it is not consumed, in [0, 1]: an
  // exclusive branch cancels its losers when it resolves (Controller::admit). Its prompts are
  // charged whole: the first is prefilled at the start.
  double unused_share = 1;
};

struct PriceParams {
  double decode_slots = 64;        // concurrent decode slots of the engine
  double fill_slots = 16;          // the fill budget: fills in flight at o_fill = 1 ...
  double fill_slot_share = 0.25;   // ... or this share of the decode slots, if more
  double kv_budget = 0.25;         // the fill KV budget, as a share of the pool, at o_KV = 1
  InterferenceModel interference;  // Fig. 5b
  double kv_floor = 0.03;          // smallest KV share Fig. 5b measured
  // Largest stretch Fig. 5b measured: where the engines' load alone stretches a batch that far,
  // the KV price is 0 (set_engine_load; the fit is not extrapolated. 0: it is).
  double max_stretch = kFigure5bMaxStretch;
  double max_utilization = 0.95;    // caps the congestion factor at 20
  double prefill_ms_per_token = 0;  // a decode step's added time per prompt token (0: unknown)
  double batches = 1;               // independent decode batches the slots are spread over
  // The engines' stretch as a multiple of `interference` (InterferenceFit): scales the slot and
  // KV prices, which are the curve's; a prompt's stall is the engines' own figure.
  double interference_scale = 1;
};

struct Prices {
  double slot = 0;     // ms of canonical delay per ms of slot time
  double kv = 0;       // ms of canonical delay per (KV share x ms)
  double prefill = 0;  // ms of canonical delay per prompt token
};

// A request's mean time in an M/M/c system over its service time, at per-place utilization
// u in [0, 1): 1 + ErlangC(c, u) / (c (1 - u)). Non-decreasing in u; 1 / (1 - u) at c = 1.
// Places are rounded down, at least 1 and at most 4,096 (beyond that it is 1 below u = 0.95).
double congestion(double u, double places);

class PriceCurves {
 public:
  explicit PriceCurves(PriceParams params = {}) : p_(params), fill_slots_(params.fill_slots) {}

  // kv_places: how many requests like the priced one a worker's KV pool holds (the KV
  // congestion factor's c; 1: the single server's 1 / (1 - u)).
  Prices at(const LoadView& v, double kv_places = 1) const;
  // C_s(V) = beta(V)^T R_s, in ms: the delay a fill with footprint f imposes if it is not
  // consumed (slot and KV over f.unused_share of its slot time).
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
  // What the engines' inter-token latency says their stretch is, over the curve's
  // (InterferenceFit::scale).
  void set_interference_scale(double scale) {
    p_.interference_scale = scale > 0 && std::isfinite(scale) ? scale : 1;
  }
  // The engines' latest reading: canonical pressure and the share of their KV pools in use.
  // Where that load alone stretches a batch past the largest stretch Figure 5b measured
  // (PriceParams::max_stretch), the curve has no data and the engines' truth is taken to stay
  // there (the simulated engine caps it): one more token of KV adds no stretch, and the KV
  // price is 0. Extrapolated, its slope kept growing with the pool in use (13.0 per share at
  // half a pool, where the measured range ends at 8.9), and on the tight profile at 0.85-0.95
  // of saturation full dynrt refused likely fills that paid. Only readings move this, never a
  // projected admission, so within one decision the prices stay monotone (Proposition A.8).
  void set_engine_load(double rho, double engine_kv) {
    engine_rho_ = std::clamp(rho, 0.0, 1.0);
    engine_kv_ = std::clamp(engine_kv, 0.0, 1.0);
  }
  bool past_measured_stretch() const;
  // The fill budget in effect: fills in flight at o_fill = 1.
  double fill_slots() const { return fill_slots_; }

 private:
  PriceParams p_;
  double fill_slots_;
  double engine_rho_ = 0;  // the latest reading (set_engine_load)
  double engine_kv_ = 0;
};

}  // namespace dynrt::admission

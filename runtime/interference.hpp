// How much co-resident work slows a canonical request: one model, fitted to the paper's
// Figure 5b, shared by the simulated engine (as its ground truth) and the admission price
// curves (as their belief), so the controller prices what the engine does.
//
// A request sharing a decode batch with `others` other requests that together hold a share
// `kv` of the KV pool runs its decode steps slower by the stretch
//     s(others, kv) = o * [others > 0] + a * others + c * kv^g
// Figure 5b measured a fixed-shape 32B request on H200s in two sweeps:
//   - count, at a fixed per-fill context: 1-3 fills +4-6%, 48 fills +53%;
//   - context, at 24 fills: each fill's context from none to 4,500 words, its KV share from
//     3% to 24%, the stretch from 11% to 145%.
// A least-squares fit of both sweeps at once gives o = 0.045 (any batch sharing), a = 0.00025
// per co-resident request, c = 12.3, g = 1.52, with the count sweep's fills holding 0.244%
// of the pool each. It reproduces the figure within a point: 1 fill +4.7%, 3 fills +5.3%,
// 48 fills +52.9%; KV share 3% +11.1%, 24% +145.6%. KV residency, not the number of fills,
// carries the interference, which is why admission treats KV as the measure of speculation in
// flight. Pure.
#pragma once

#include <algorithm>
#include <cmath>

namespace dynrt {

// Figure 5b's largest measured slowdown (+145.6%: 24 fills holding 24% of the KV pool). The fit
// is not extrapolated beyond its data: the simulated engine caps its truth there, and the
// price curves charge no KV slope past it.
constexpr double kFigure5bMaxStretch = 1.456;

struct InterferenceModel {
  double sharing_overhead = 0.045;  // o: once any other request shares the batch
  double per_request = 0.00025;     // a: per other co-resident request
  double kv_scale = 12.3;           // c
  double kv_exponent = 1.52;        // g

  // The stretch of one request's decode steps; `kv` is the others' share of the KV pool.
  double stretch(double others, double kv) const {
    others = std::max(others, 0.0);
    kv = std::clamp(kv, 0.0, 1.0);
    return (others > 0 ? sharing_overhead : 0.0) + per_request * others +
           kv_scale * std::pow(kv, kv_exponent);
  }
  // d s / d kv at share kv.
  double kv_marginal(double kv) const {
    return kv_scale * kv_exponent * std::pow(std::clamp(kv, 0.0, 1.0), kv_exponent - 1.0);
  }
};

}  // namespace dynrt

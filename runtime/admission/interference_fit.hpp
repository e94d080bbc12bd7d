// How much the engines really stretch a decode step, as a multiple of the interference curve
// the prices assume (runtime/interference.hpp): delayed feedback for the price curves.
//
// The curve is the paper's Figure 5b fit, measured on one model and one GPU. Another engine,
// model or GPU stretches its steps less or more at the same batch and KV, and a price that
// believes half the stretch admits fills that slow canonical requests twice what they were
// charged. What the engines do report is how far apart a request's output tokens come (vLLM's
// inter-token latency histogram, llama.cpp's predicted-token seconds): between two load
// readings, the mean gap. Under chunked prefill a step also carries prompt tokens, each adding
// prefill_ms_per_token to it; the prompt tokens processed between the readings, over the steps
// taken, say how much of the gap that was. What remains, over the gap of a lone request, is
// 1 + scale * s(batch - 1, KV), with s the curve at the reading's batch and KV in use; the
// scale is the discounted ratio of the observed excess to the curve's,
//     scale = sum_i m^(n-i) (gap_i - stall_i - lone) / lone  /  sum_i m^(n-i) s_i,
// which weighs each interval by how much stretch it could show. An interval is left out when
// it says nothing of the curve: fewer than `min_gaps` gaps, a curve below `min_stretch` (a
// nearly idle engine, where noise would dominate), a batch past the engine's compute-bound
// batch (its steps are then as long as their compute, whatever the interference), or counters
// that went back (an engine restarted, a replica left the pool). Until the curve's weight
// reaches `min_weight` the scale is 1: the prices keep their prior. It stays within
// [min_scale, max_scale]. Each engine is read against its own previous reading and its own lone
// gap (a 0.6B model's tokens come faster than a 32B one's), and every engine's intervals add to
// the one scale the prices take.
//
// Pure and deterministic.
#pragma once

#include "runtime/interference.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace dynrt::admission {

// One load reading of one engine (run::decode_reading).
struct DecodeReading {
  double token_gaps = 0;            // gaps between two output tokens of a request, since start
  double token_gap_s = 0;           // ... their seconds
  double prompt_tokens = 0;         // prompt tokens processed, since start
  double decode_steps = 0;          // decode steps taken, since start (0: not known)
  double lone_token_ms = 0;         // the gap of a request decoding alone (0: unknown, no fit)
  double prefill_ms_per_token = 0;  // a step's added time per prompt token it carries
  // Requests per batch at the reading: the interval's mean batch where the steps are not known.
  double batch = 0;
  double compute_batch = 0;  // the batch past which steps are compute-bound (0: unknown)
  double kv = 0;             // the share of a batch's KV pool in use at the reading
};

struct InterferenceFitParams {
  double memory = 0.98;  // m: the weight an interval loses with each newer one
  double min_gaps = 16;  // gaps an interval needs to count
  // Below the one-off cost of sharing a batch (the curve's 0.045), so that a lightly loaded
  // engine, whose only stretch is that cost, is read: that is where fills are admitted most
  // freely, and an engine stretching twice the curve there slows the requests beside them
  // twice what the prior charges. A lone request in a nearly empty pool stays below it.
  double min_stretch = 0.03;
  double min_weight = 1.0;  // sum of discounted s before the scale departs from 1
  double min_scale = 0.25;
  double max_scale = 4.0;
};

class InterferenceFit {
 public:
  explicit InterferenceFit(InterferenceModel curve = {}, InterferenceFitParams params = {})
      : curve_(curve), p_(params) {}

  // A reading of engine number `engine`: its interval is measured against its own previous
  // reading and lone gap, and adds to the one scale all engines share.
  void observe(std::size_t engine, const DecodeReading& r);
  // The engines' stretch over the curve's; 1 until the evidence is enough.
  double scale() const { return scale_; }
  // Intervals that counted.
  std::uint64_t intervals() const { return intervals_; }

 private:
  InterferenceModel curve_;
  InterferenceFitParams p_;
  std::vector<std::optional<DecodeReading>> last_;  // by engine
  double excess_ = 0;                               // discounted sum of (gap - stall - lone) / lone
  double weight_ = 0;                               // discounted sum of s
  double scale_ = 1;
  std::uint64_t intervals_ = 0;
};

}  // namespace dynrt::admission

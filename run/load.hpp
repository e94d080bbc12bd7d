// The canonical load the pricing actor gives the admission controller, from the engines' load
// snapshots and dynrt's own count of the canonical requests it runs. Pure.
#pragma once

#include "engines/engine.hpp"
#include "runtime/admission/interference_fit.hpp"

#include <optional>
#include <vector>

namespace dynrt::run {

// Decode slots assumed when neither the configuration nor any engine says how many there are
// (vLLM's default max_num_seqs is 256, llama.cpp's parallel slots a handful; 64 keeps one
// canonical request from reading as a large share of an unknown engine).
inline constexpr int kDefaultDecodeSlots = 64;
// A KV pool reported larger than this is a pool in tokens (the simulated engine); vLLM and
// SGLang report only a used fraction, against a total of 1.
inline constexpr double kKvTokensAtLeast = 1000;

struct Pressure {
  int slots = kDefaultDecodeSlots;  // the decode slots the shares below are of
  double canonical = 0;             // the share of decode slots canonical requests hold, in [0, 1]
  double queued = 0;                // the requests queued, as a share of the slots, in [0, 1]
  double kv = 0;  // the engines' KV pool in use, in [0, 1] (0 when none reports one)
  // The engines' KV pool in tokens, when they report one (else the configured size stands).
  std::optional<double> kv_tokens;
  // A decode step's added time per prompt token it carries, the mean over the batches that
  // report one (0: none does), and the independent decode batches the slots are spread over.
  double prefill_ms_per_token = 0;
  int batches = 1;
};

// `configured_slots` (0: from the snapshots), `canonical` (dynrt's own canonical requests in
// flight) and `fills` (its fills in flight). Canonical load is dynrt's own count or what the
// engines report busy beyond dynrt's fills (pass-through traffic, other clients), whichever is
// more.
Pressure pressure_of(const std::vector<engines::LoadSnapshot>& loads, int configured_slots,
                     int canonical, int fills);

// What the price curves' interference fit reads from one engine's snapshot
// (admission::InterferenceFit): its token counters, with its batch and compute-bound batch per
// decode batch and its KV in use. Per engine, since engines of different models have different
// lone-request gaps and stretch differently.
admission::DecodeReading decode_reading(const engines::LoadSnapshot& s);

}  // namespace dynrt::run

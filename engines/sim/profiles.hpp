// Engine profiles: named deployments for the simulated engine (`--profile NAME` on
// dynrt-sim-engine, dynrt serve and dynrt bench), each a number of workers and the SimParams of
// one worker, every number derived from the hardware and the model (docs/engine-profiles.md
// gives each derivation; the comments here give the arithmetic).
//
//   default       one worker with SimParams' generic defaults (64 slots, 600,000 KV tokens,
//                 25 ms per decode step, prefill beside decode): what tests and the bench ran
//                 before profiles existed.
//   h200x4-32b    the paper's main testbed: four H200 NVL (141 GiB) workers, each serving
//                 Qwen3-32B in bf16 on one GPU.
//   rtx4090x4-8b  the paper's commodity testbed: four RTX 4090 (24 GiB) workers, each serving
//                 Qwen3-8B in bf16: a tight KV pool.
//
// SimParams::interference_scale, set on top of any profile (`--interference-scale`), makes the
// engine's true interference differ from the fit the price curves believe. Pure.
#pragma once

#include "engines/sim/model.hpp"
#include "runtime/expected.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace dynrt::engines::sim {

struct SimProfile {
  std::string name;
  std::string summary;  // one line, for --help and listings
  int workers = 1;
  SimParams params;  // of one worker
};

const std::vector<SimProfile>& sim_profiles();
// The profile called `name`; the error names the profiles there are.
Expected<SimProfile> sim_profile(std::string_view name);
// "default, h200x4-32b, rtx4090x4-8b": for help texts.
std::string sim_profile_names();

}  // namespace dynrt::engines::sim

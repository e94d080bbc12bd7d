#include "engines/sim/profiles.hpp"

namespace dynrt::engines::sim {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Gpu {
  double memory_bytes;
  double bandwidth;            // bytes per second
  double dense_bf16_flops;     // per second
  double reserve_bytes;        // activations and CUDA graphs
  int max_num_seqs;            // vLLM's for its API server on this class of GPU
  int max_num_batched_tokens;  // ... and its chunked-prefill budget per step
};

struct Model {
  double parameters;
  int layers;
  int kv_heads;
  int head_dim;
};

// One worker: the model in bf16 on one GPU, served by vLLM with its defaults.
SimParams worker(const Gpu& gpu, const Model& model) {
  SimParams s;
  const double weights = model.parameters * 2.0;
  // KV per token: 2 (K and V) x layers x KV heads x head dim x 2 bytes.
  const double kv_per_token = 2.0 * model.layers * model.kv_heads * model.head_dim * 2.0;
  // The pool: 90% of device memory (vLLM's gpu_memory_utilization) less the weights and the
  // reserve.
  s.kv_tokens = static_cast<std::int64_t>((0.9 * gpu.memory_bytes - weights - gpu.reserve_bytes) /
                                          kv_per_token);
  s.slots = gpu.max_num_seqs;
  // Decode is memory-bound: a step reads every weight, at 90% of the bandwidth.
  s.decode_step_ms = weights / (0.9 * gpu.bandwidth) * 1000.0;
  // Prefill is compute-bound: 2 FLOPs per parameter per token, at half the dense peak (a typical
  // model FLOPs utilization). A pass costs at least a weight read.
  s.prefill_ms_per_token = 2.0 * model.parameters / (0.5 * gpu.dense_bf16_flops) * 1000.0;
  s.prefill_base_ms = s.decode_step_ms;
  // A decoded token costs the same forward pass as a prompt token: a step of n requests lasts
  // at least n times that, so past about decode_step_ms / prefill_ms_per_token requests (97 on
  // an H200 with Qwen3-32B, 91 on an RTX 4090 with Qwen3-8B) a worker is compute-bound, at
  // 1 / prefill_ms_per_token tokens per second (6,360 and 5,030).
  s.decode_compute_ms_per_token = s.prefill_ms_per_token;
  s.chunked_prefill_tokens = gpu.max_num_batched_tokens;
  s.max_stretch = kFigure5bMaxStretch;
  return s;
}

}  // namespace

const std::vector<SimProfile>& sim_profiles() {
  static const std::vector<SimProfile> all = {
      SimProfile{"default",
                 "1 worker: 64 slots, 600,000 KV tokens, 25 ms decode steps, prefill beside decode",
                 1, SimParams{}},
      // H200 NVL: 141 GiB of HBM3e at 4.8 TB/s, 835 dense bf16 TFLOPS; vLLM's API-server
      // defaults for GPUs of 70 GiB or more. Qwen3-32B: 32.8 B parameters, 64 layers, 8 KV heads
      // of 128. Pool: (0.9 x 151.4 GB - 65.6 GB - 3 GB) / 256 KiB = 258,094 tokens; step
      // 15.2 ms; prefill 0.157 ms per token.
      SimProfile{
          "h200x4-32b",
          "4 workers of Qwen3-32B, one H200 NVL (141 GiB) each (the paper's main testbed)", 4,
          worker(Gpu{141 * kGiB, 4.8e12, 835e12, 3e9, 1024, 8192}, Model{32.8e9, 64, 8, 128})},
      // RTX 4090: 24 GiB of GDDR6X at 1.008 TB/s, 165 dense bf16 TFLOPS (fp32 accumulation);
      // vLLM's API-server defaults for smaller GPUs. Qwen3-8B: 8.2 B parameters, 36 layers, 8 KV
      // heads of 128. Pool: (0.9 x 25.8 GB - 16.4 GB - 1.5 GB) / 144 KiB = 35,894 tokens, about
      // twenty 1,800-token requests; step 18.1 ms; prefill 0.199 ms per token.
      SimProfile{
          "rtx4090x4-8b",
          "4 workers of Qwen3-8B, one RTX 4090 (24 GiB) each (the paper's commodity "
          "testbed)",
          4, worker(Gpu{24 * kGiB, 1.008e12, 165e12, 1.5e9, 256, 2048}, Model{8.2e9, 36, 8, 128})},
  };
  return all;
}

std::string sim_profile_names() {
  std::string out;
  for (const auto& p : sim_profiles())
    out += (out.empty() ? "" : ", ") + p.name;
  return out;
}

Expected<SimProfile> sim_profile(std::string_view name) {
  for (const auto& p : sim_profiles())
    if (p.name == name) return p;
  return make_error("unknown engine profile \"" + std::string(name) +
                    "\" (profiles: " + sim_profile_names() + ")");
}

}  // namespace dynrt::engines::sim

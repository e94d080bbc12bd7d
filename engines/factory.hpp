// Engines from a description: what `dynrt serve` reads from its flags and configuration file
// (or any embedder from its own) becomes a running Engine here, so that the choice of adapter
// and the translation of its settings live with the engines, not with their callers. The
// callers bind the result into their runtime. Errors name the engine and what is wrong with
// it; nothing is started on an error. Call from any thread.
#pragma once

#include "engines/engine.hpp"
#include "runtime/expected.hpp"

#include <memory>
#include <string>
#include <vector>

namespace dynrt::engines {

// One engine: the embedded simulated engine or an OpenAI-compatible server.
struct EngineSpec {
  // "sim" or http(s)://host:port (a trailing / or /v1 is dropped); several, separated by
  // commas, are replicas of the same model behind one pool (engines/pool.hpp).
  std::string url = "sim";
  std::vector<std::string> models;
  std::string flavor = "automatic";  // vllm, sglang, llamacpp, generic or automatic
  int max_num_seqs = 256;
  int concurrency = 0;  // requests it decodes at once before it is compute-bound; 0: unknown
  double prefill_ms_per_token = 0;  // a step's added time per prompt token; 0: unknown
  double lone_token_ms = 0;         // the gap between tokens of a lone request; 0: unknown
  int batches = 1;                  // decode batches the capacities are totals of
  std::string api_key;              // sent to the engine as a bearer token
};

// How every `sim` engine runs.
struct SimSpec {
  int slots = 0;             // decode slots per worker; 0: the profile's
  double time_scale = 1000;  // real milliseconds per simulated second; 0: as fast as possible
  std::string script;        // response script (JSON lines); empty: none
  std::string profile = "default";  // engines/sim/profiles.hpp
  double interference_scale = 1.0;  // the engine's true interference over the price curves'
};

// The replicas a spec's url lists: one URL, or several separated by commas.
std::vector<std::string> replica_urls(const std::string& url);

// A new engine as `spec` says (a pool when its url lists several); `sim` applies to each "sim".
Expected<std::shared_ptr<Engine>> make_engine(const EngineSpec& spec, const SimSpec& sim);

}  // namespace dynrt::engines

#include "engines/factory.hpp"

#include "engines/openai/engine.hpp"
#include "engines/pool.hpp"
#include "engines/sim/engine.hpp"
#include "engines/sim/profiles.hpp"

#include <algorithm>

namespace dynrt::engines {

namespace {

Expected<std::shared_ptr<Engine>> make_sim_engine(const SimSpec& sim) {
  auto profile = sim::sim_profile(sim.profile);
  if (!profile) return profile.error();
  sim::SimParams params = profile->params;
  if (sim.slots > 0) params.slots = sim.slots;
  params.interference_scale = sim.interference_scale;
  sim::Script script;
  if (!sim.script.empty()) {
    auto loaded = sim::Script::load(sim.script);
    if (!loaded) return loaded.error();
    script = std::move(*loaded);
  }
  sim::SimEngineOptions so;
  so.time_scale = sim.time_scale;
  so.name = "sim";
  so.workers = profile->workers;
  return std::shared_ptr<Engine>(std::make_shared<sim::SimEngine>(params, std::move(script), so));
}

Expected<std::shared_ptr<Engine>> make_openai_engine(const EngineSpec& e, bool pooled) {
  OpenAiOptions oo;
  // In a pool, a request the replica did not run moves to another replica at once rather than
  // retrying this one after a backoff (engines/pool.hpp).
  if (pooled) oo.retry.max_attempts = 1;
  oo.base_url = e.url;
  while (!oo.base_url.empty() && oo.base_url.back() == '/')
    oo.base_url.pop_back();
  if (oo.base_url.size() >= 3 && oo.base_url.compare(oo.base_url.size() - 3, 3, "/v1") == 0)
    oo.base_url.resize(oo.base_url.size() - 3);
  oo.max_num_seqs = e.max_num_seqs;
  oo.concurrency = e.concurrency;
  oo.prefill_ms_per_token = e.prefill_ms_per_token;
  oo.lone_token_ms = e.lone_token_ms;
  oo.batches = e.batches;
  oo.api_key = e.api_key;
  oo.name = e.url;
  const std::string& f = e.flavor;
  if (f == "vllm")
    oo.flavor = EngineFlavor::vllm;
  else if (f == "sglang")
    oo.flavor = EngineFlavor::sglang;
  else if (f == "llamacpp")
    oo.flavor = EngineFlavor::llamacpp;
  else if (f == "generic")
    oo.flavor = EngineFlavor::generic;
  else if (f != "automatic")
    return make_error("engine " + e.url + ": unknown flavor \"" + f +
                      "\" (vllm, sglang, llamacpp, generic or automatic)");
  return std::shared_ptr<Engine>(std::make_shared<OpenAiEngine>(oo));
}

Expected<std::shared_ptr<Engine>> make_one(const EngineSpec& spec, const SimSpec& sim,
                                           bool pooled) {
  if (spec.url == "sim") return make_sim_engine(sim);
  if (spec.url.rfind("http://", 0) == 0 || spec.url.rfind("https://", 0) == 0)
    return make_openai_engine(spec, pooled);
  return make_error("engine \"" + spec.url + "\" is neither sim nor an http:// or https:// URL");
}

}  // namespace

std::vector<std::string> replica_urls(const std::string& url) {
  std::vector<std::string> out;
  std::size_t from = 0;
  while (true) {
    const auto comma = url.find(',', from);
    out.push_back(url.substr(from, comma == std::string::npos ? comma : comma - from));
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  return out;
}

Expected<std::shared_ptr<Engine>> make_engine(const EngineSpec& spec, const SimSpec& sim) {
  const auto urls = replica_urls(spec.url);
  if (urls.size() == 1) return make_one(spec, sim, false);
  std::vector<std::shared_ptr<Engine>> replicas;
  for (const auto& url : urls) {
    if (url.empty())
      return make_error("engine \"" + spec.url + "\": an empty URL in the pool's list");
    if (std::count(urls.begin(), urls.end(), url) > 1 && url != "sim")
      return make_error("engine \"" + spec.url + "\": " + url + " is listed twice");
    EngineSpec one = spec;
    one.url = url;
    auto engine = make_one(one, sim, true);
    if (!engine) return engine.error();
    replicas.push_back(std::move(*engine));
  }
  PoolOptions po;
  po.name = spec.url;
  return std::shared_ptr<Engine>(std::make_shared<EnginePool>(std::move(replicas), po));
}

}  // namespace dynrt::engines

#include "engines/factory.hpp"

#include "engines/openai/engine.hpp"
#include "engines/pool.hpp"
#include "engines/sim/engine.hpp"
#include "engines/sim/profiles.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <memory>
#include <string>

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

// `url` with any user:password@ before a host cut to "...@", for messages (each replica's, in
// a list).
std::string without_credentials(const std::string& url) {
  std::string out;
  for (const auto& one : replica_urls(url)) {
    if (!out.empty()) out += ',';
    const auto scheme = one.find("://");
    const auto host = scheme == std::string::npos ? 0 : scheme + 3;
    const auto at = one.rfind('@', one.find_first_of("/?#", host));
    out += scheme == std::string::npos || at == std::string::npos || at < host
               ? one
               : one.substr(0, host) + "...@" + one.substr(at + 1);
  }
  return out;
}

// An engine's URL is its server's base: a scheme, a host and a port that can be connected
// to, and a path at most. Refused up front (libcurl's own URL parser, the one that will
// connect), so that a typo is an error at start, not a 502 on every call. Credentials in it
// would be printed wherever the engine is named (the start line, the metrics' labels), so
// they are refused too, and no message here repeats them.
Expected<bool> check_engine_url(const std::string& url) {
  const std::string shown = "engine \"" + without_credentials(url) + "\"";
  std::unique_ptr<CURLU, void (*)(CURLU*)> u(curl_url(), curl_url_cleanup);
  if (!u) return make_error(shown + ": out of memory");
  if (const auto rc = curl_url_set(u.get(), CURLUPART_URL, url.c_str(), 0); rc != CURLUE_OK)
    return make_error(shown + " is not a URL: " + curl_url_strerror(rc));
  const auto part = [&](CURLUPart p) {
    char* v = nullptr;
    std::string out;
    if (curl_url_get(u.get(), p, &v, 0) == CURLUE_OK && v) out = v;
    curl_free(v);
    return out;
  };
  if (part(CURLUPART_HOST).empty()) return make_error(shown + " has no host");
  if (part(CURLUPART_PORT) == "0") return make_error(shown + ": port 0 cannot be connected to");
  if (!part(CURLUPART_USER).empty() || !part(CURLUPART_PASSWORD).empty())
    return make_error(shown +
                      ": credentials in the URL would be printed wherever the engine is named; "
                      "give the key as the engine's api_key (--config engines[].api_key)");
  if (!part(CURLUPART_QUERY).empty() || !part(CURLUPART_FRAGMENT).empty())
    return make_error(shown +
                      ": give the server's base URL, without a query or fragment (e.g. "
                      "http://vllm:8000 or http://vllm:8000/v1)");
  return true;
}

Expected<std::shared_ptr<Engine>> make_openai_engine(const EngineSpec& e, bool pooled) {
  if (auto ok = check_engine_url(e.url); !ok) return ok.error();
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
    return make_error("engine " + without_credentials(e.url) + ": unknown flavor \"" + f +
                      "\" (vllm, sglang, llamacpp, generic or automatic)");
  return std::shared_ptr<Engine>(std::make_shared<OpenAiEngine>(oo));
}

Expected<std::shared_ptr<Engine>> make_one(const EngineSpec& spec, const SimSpec& sim,
                                           bool pooled) {
  if (spec.url == "sim") return make_sim_engine(sim);
  if (spec.url.rfind("http://", 0) == 0 || spec.url.rfind("https://", 0) == 0)
    return make_openai_engine(spec, pooled);
  return make_error("engine \"" + without_credentials(spec.url) +
                    "\" is neither sim nor an http:// or https:// URL");
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
      return make_error("engine \"" + without_credentials(spec.url) +
                        "\": an empty URL in the pool's list");
    if (std::count(urls.begin(), urls.end(), url) > 1 && url != "sim")
      return make_error("engine \"" + without_credentials(spec.url) +
                        "\": " + without_credentials(url) + " is listed twice");
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

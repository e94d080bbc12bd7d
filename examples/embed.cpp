// Embedding dynrt::Runtime in a C++ service: one Routing workflow run through the runtime, on
// the embedded simulated engine, with the answers and how each was served.
//
//   ./build/embed_example [templates-dir]
//
// A service would keep one Runtime for its lifetime, point it at its real engines
// (engines::openai::OpenAiEngine) and tools, and tag each call with the workflow, the run's id
// and the stage, exactly as below.
#include "actors/runtime.hpp"
#include "dsl/render.hpp"
#include "engines/sim/engine.hpp"
#include "engines/tools/corpus.hpp"

#include <cstdio>
#include <iostream>

int main(int argc, char** argv) {
  using nlohmann::json;
  const std::string templates = argc > 1 ? argv[1] : "templates";

  // The engine: the simulated one, 10 real milliseconds per simulated second. Its script makes
  // the router answer like a real router would: reasoning, then the handler it picked.
  dynrt::engines::sim::Script script;
  std::string reasoning = "Thinking:";
  for (int i = 0; i < 200; ++i)
    reasoning += " step";
  script.add_contains("[demo]", reasoning + "\nHANDLER: weather");
  dynrt::engines::sim::SimEngineOptions sim;
  sim.time_scale = 10;
  auto engine = std::make_shared<dynrt::engines::sim::SimEngine>(dynrt::engines::sim::SimParams{},
                                                                 script, sim);

  // The tool the executor stage calls: a lookup in the built-in corpus.
  auto corpus = *dynrt::engines::Corpus::from_json(
      json::array({{{"key", "api:weather"}, {"text", "Sunny, 21 C."}}}));
  corpus->add_tool("call_api", {dynrt::engines::Corpus::Kind::lookup, "api:{{api}}"});

  dynrt::RuntimeConfig config;
  config.engines.push_back({"sim", engine, {}});
  config.tools = corpus;
  config.template_paths = {templates};
  auto created = dynrt::Runtime::create(config);
  if (!created) {
    std::cerr << created.error().message << "\n";
    return 1;
  }
  dynrt::Runtime& rt = **created;

  // One run: the harness sends the router's request, reads the handler from its answer, then
  // sends the handler's and the executor's requests. Every call carries the three tags.
  const std::string run = "demo-run-1";
  const std::string query = "What's the weather in Lisbon tomorrow? [demo]";
  const json router = {
      {"model", "qwen3-32b"},
      {"temperature", 0},
      {"max_tokens", 512},
      {"messages",
       json::array({{{"role", "system"},
                     {"content",
                      "You route requests to handlers. Think step by step, then end with one "
                      "line `HANDLER: <name>`, where <name> is weather, calendar or email."}},
                    {{"role", "user"}, {"content", query}}})}};
  auto show = [](const char* stage, const dynrt::Reply& r) {
    std::printf("%-8s served=%-6s status=%d %.60s...\n", stage,
                std::string(dynrt::to_string(r.served)).c_str(), r.status, r.body.c_str());
  };
  const dynrt::Reply routed =
      rt.complete({"/v1/chat/completions", router, {"routing", run, "router"}}).get();
  show("router", routed);

  const json handle = {
      {"model", "qwen3-32b"},
      {"temperature", 0},
      {"max_tokens", 256},
      {"messages",
       json::array({{{"role", "system"},
                     {"content",
                      "You are the weather handler. Reply with exactly one JSON object "
                      "{\"function\": ..., \"arguments\": {...}} that calls the weather API."}},
                    {{"role", "user"}, {"content", query}}})}};
  const dynrt::Reply handled =
      rt.complete({"/v1/chat/completions", handle, {"routing", run, "handle"}}).get();
  show("handle", handled);

  const std::string api_call =
      json::parse(handled.body)["choices"][0]["message"]["content"].get<std::string>();
  const dynrt::Reply executed =
      rt.tool("call_api", {{"api", "weather"}, {"call", api_call}}, {"routing", run, "execute"})
          .get();
  show("execute", executed);

  const auto s = rt.stats();
  std::printf("fills issued %llu, consumed %llu; served by fill %llu; engine time saved %.0f ms\n",
              static_cast<unsigned long long>(s.fills_issued),
              static_cast<unsigned long long>(s.fills_consumed),
              static_cast<unsigned long long>(s.served_fill), s.engine_ms_saved);
  rt.shutdown();
  return handled.served == dynrt::Served::fill ? 0 : 2;
}

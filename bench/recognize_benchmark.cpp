// What recognizing an untagged call costs (dsl/recognize.hpp): every call without X-DynRT-*
// headers pays it on the caller's thread, before routing.
//   ./build/recognize_benchmark            (from the repository root)
// The templates are every shipped one (only coding-agent.yaml has rules); the calls are a
// coding agent's Messages turns of growing length, with a system prompt and tool set of the
// size Claude Code and Codex send (about 12 KB and 16 tools).
#include "dsl/lint.hpp"
#include "dsl/recognize.hpp"

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace {

using nlohmann::json;
using namespace dynrt::dsl;

const char* kShipped[] = {"templates/routing.yaml", "templates/react.yaml",
                          "templates/subagent.yaml", "templates/hci.yaml",
                          "templates/coding-agent.yaml"};

Recognizer shipped() {
  std::vector<std::string> paths(std::begin(kShipped), std::end(kShipped));
  LintReport r = lint_paths(paths);
  std::vector<std::shared_ptr<const TemplateGraph>> graphs;
  for (auto& f : r.files) {
    if (!f.graph) {
      std::cerr << "recognize_benchmark: " << f.path << " did not compile (run it from the "
                << "repository root)\n";
      std::exit(2);
    }
    graphs.push_back(std::make_shared<const TemplateGraph>(*f.graph));
  }
  return Recognizer(graphs);
}

// A session after `turns` tool round trips, the latest one answering ask_user when `picked`.
json session(std::size_t turns, bool picked, const std::string& system) {
  json tools = json::array();
  for (int i = 0; i < 16; ++i)
    tools.push_back({{"name", "tool_" + std::to_string(i)},
                     {"description", std::string(400, 'd')},
                     {"input_schema", {{"type", "object"}, {"properties", json::object()}}}});
  json messages = json::array(
      {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "fix the failing test"}}}}}});
  for (std::size_t t = 0; t < turns; ++t) {
    const bool ask = picked && t + 1 == turns;
    const std::string id = "toolu_" + std::to_string(t);
    messages.push_back({{"role", "assistant"},
                        {"content",
                         {{{"type", "text"}, {"text", "Looking at the next file."}},
                          {{"type", "tool_use"},
                           {"id", id},
                           {"name", ask ? "ask_user" : "Read"},
                           {"input", {{"path", "src/file_" + std::to_string(t) + ".cpp"}}}}}}});
    messages.push_back({{"role", "user"},
                        {"content",
                         {{{"type", "tool_result"},
                           {"tool_use_id", id},
                           {"content", ask ? "A" : std::string(2000, 'x')}}}}});
  }
  return {{"model", "qwen3-32b"}, {"max_tokens", 1024}, {"temperature", 0},
          {"system", system},     {"tools", tools},     {"messages", messages}};
}

std::string agent_system() {
  return "You are a coding agent. " + std::string(12000, 's');
}

// The chat completion the runtime reads a conversation's run from (the translation itself is
// measured apart, in bench/protocols_latency.py).
json chat_of(const json& body) {
  json chat{{"model", body["model"]}, {"messages", json::array()}};
  chat["messages"].push_back({{"role", "system"}, {"content", body["system"]}});
  for (const auto& m : body["messages"])
    chat["messages"].push_back({{"role", m["role"]}, {"content", m["content"].dump()}});
  return chat;
}

const HeaderLookup kNoHeaders = [](std::string_view) { return std::nullopt; };

void recognize(benchmark::State& state, const std::string& system, bool picked,
               Recognized::Outcome expected) {
  static const Recognizer r = shipped();
  const json body = session(static_cast<std::size_t>(state.range(0)), picked, system);
  const json chat = chat_of(body);
  if (r.recognize("/v1/messages", body, chat, kNoHeaders).outcome != expected) {
    state.SkipWithError("unexpected outcome");
    return;
  }
  for (auto _ : state) {
    auto got = r.recognize("/v1/messages", body, chat, kNoHeaders);
    benchmark::DoNotOptimize(got);
  }
  state.SetLabel(std::to_string(body.dump().size() / 1024) + " KB body");
}

// A turn of the coding agent: `turn` is recognized and its run hashed.
void BM_Turn(benchmark::State& state) {
  recognize(state, agent_system(), false, Recognized::Outcome::recognized);
}
BENCHMARK(BM_Turn)->Arg(1)->Arg(10)->Arg(50)->Unit(benchmark::kMicrosecond);

// The turn after an ask_user pick: two stages' rules hold, the more specific wins.
void BM_Answer(benchmark::State& state) {
  recognize(state, agent_system(), true, Recognized::Outcome::recognized);
}
BENCHMARK(BM_Answer)->Arg(1)->Arg(10)->Arg(50)->Unit(benchmark::kMicrosecond);

// Another client's call: no rule holds, nothing is hashed, the call passes through.
void BM_NoMatch(benchmark::State& state) {
  recognize(state, "You are a helpful assistant. " + std::string(12000, 's'), false,
            Recognized::Outcome::no_match);
}
BENCHMARK(BM_NoMatch)->Arg(1)->Arg(50)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();

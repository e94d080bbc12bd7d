#include "bench/workloads.hpp"

#include "dsl/render.hpp"

#include <random>

namespace dynrt::bench {

using nlohmann::json;

namespace {

// Words for the deciding stages' reasoning: the resolution decode is long (paper F2: about
// 270 tokens at p50), so fills have time to finish before the selection is known.
std::string reasoning(std::mt19937_64& rng, int words) {
  static const char* kWords[] = {"the",  "request", "asks",      "about",  "which",
                                 "tool", "fits",    "best",      "given",  "context",
                                 "and",  "history", "so",        "we",     "consider",
                                 "each", "option",  "carefully", "before", "deciding"};
  std::string out = "Thinking:";
  for (int i = 0; i < words; ++i)
    out += std::string(" ") + kWords[rng() % 20];
  return out;
}

json chat(std::string_view system, std::string_view user, int max_tokens) {
  return {{"model", "qwen3-32b"},
          {"temperature", 0},
          {"max_tokens", max_tokens},
          {"messages", json::array({{{"role", "system"}, {"content", system}},
                                    {{"role", "user"}, {"content", user}}})}};
}

// A skewed pick among `values`: the first with probability p0, else uniformly among the rest.
std::string skewed(std::mt19937_64& rng, const std::vector<std::string>& values, double p0) {
  std::uniform_real_distribution<double> u(0, 1);
  if (values.size() == 1 || u(rng) < p0) return values[0];
  return values[1 + rng() % (values.size() - 1)];
}

Workload routing(const dsl::TemplateGraph& g, const WorkloadOptions& o) {
  Workload w;
  w.workflow = "routing";
  std::mt19937_64 rng(o.seed);
  const std::vector<std::string> handlers = {"weather", "calendar", "email"};
  for (const auto& h : handlers)
    w.corpus.push_back({{"key", "api:" + h}, {"text", "The " + h + " API answered: ok."}});
  w.tools = {{"call_api", "api:{{api}}"}};
  for (std::size_t i = 0; i < o.runs; ++i) {
    Run r;
    r.workflow_id = "routing-" + std::to_string(o.seed) + "-" + std::to_string(i);
    r.input =
        "Please help with my day [req " + std::to_string(o.seed) + "." + std::to_string(i) + "]";
    for (int turn = 0; turn < 2; ++turn) {
      const std::string pick = skewed(rng, handlers, 0.4 + 0.5 * o.predictability);
      r.picks.push_back(pick);
      // The router's exact request, rendered as the template does, answers with the pick.
      const auto body = dsl::render_stage(
          *g.stage("router"), {{"query", routing_query(r, static_cast<std::size_t>(turn))}});
      if (body) w.script.add_exact(body->body, reasoning(rng, 260) + "\nHANDLER: " + pick);
    }
    w.runs.push_back(std::move(r));
  }
  return w;
}

std::string entity_name(std::size_t i) {
  return "Entity" + std::to_string(i);
}

Workload react(const WorkloadOptions& o) {
  Workload w;
  w.workflow = "react";
  std::mt19937_64 rng(o.seed);
  const std::size_t kEntities = 40;
  // Each passage names three other entities, the likeliest next hop first.
  std::vector<std::vector<std::size_t>> links(kEntities);
  for (std::size_t e = 0; e < kEntities; ++e) {
    std::string text = entity_name(e) + " is linked to";
    for (int k = 0; k < 3; ++k) {
      const std::size_t n = (e + 1 + rng() % (kEntities - 1)) % kEntities;
      links[e].push_back(n);
      text += " [[" + entity_name(n) + "]]";
    }
    w.corpus.push_back({{"key", "corpus:" + entity_name(e)}, {"text", text + "."}});
  }
  w.tools = {{"retrieve", "corpus:{{entity}}"}};
  std::uniform_real_distribution<double> u(0, 1);
  for (std::size_t i = 0; i < o.runs; ++i) {
    Run r;
    r.workflow_id = "react-" + std::to_string(o.seed) + "-" + std::to_string(i);
    r.input =
        "How are things connected? [q " + std::to_string(o.seed) + "." + std::to_string(i) + "]";
    const std::size_t hops = 3 + rng() % 3;
    std::size_t current = rng() % kEntities;
    for (std::size_t h = 0; h < hops; ++h) {
      if (h > 0) {
        // 61% among the previous passage's first three entities (paper section 2.2).
        if (u(rng) < 0.61 * o.predictability)
          current = links[current][rng() % 3];
        else
          current = rng() % kEntities;
      }
      r.picks.push_back(entity_name(current));
      w.script.add_exact(react_think_request(r, h),
                         reasoning(rng, 200) + "\nSearch[" + entity_name(current) + "]");
    }
    w.runs.push_back(std::move(r));
  }
  return w;
}

Workload subagent(const WorkloadOptions& o) {
  Workload w;
  w.workflow = "subagent";
  std::mt19937_64 rng(o.seed);
  const std::vector<std::string> agents = {"history", "geography", "biography", "science"};
  const std::size_t kEntities = 12;
  for (const auto& a : agents)
    for (std::size_t e = 0; e < kEntities; ++e)
      w.corpus.push_back({{"key", "kb:" + a + ":" + entity_name(e)},
                          {"text", "What the " + a + " base knows of " + entity_name(e) + "."}});
  w.tools = {{"kb_search", "kb:{{collection}}:{{entity}}"}};
  for (std::size_t i = 0; i < o.runs; ++i) {
    Run r;
    r.workflow_id = "subagent-" + std::to_string(o.seed) + "-" + std::to_string(i);
    // A small entity pool: sub-tasks recur across runs.
    r.entity = entity_name(rng() % kEntities);
    r.input = "Research [[" + r.entity + "]] for me [q " + std::to_string(o.seed) + "." +
              std::to_string(i) + "]";
    const std::string pick = skewed(rng, agents, 0.4 + 0.5 * o.predictability);
    r.picks.push_back(pick);
    w.script.add_exact(subagent_plan_request(r), json{{"subagent", pick}}.dump());
    w.runs.push_back(std::move(r));
  }
  return w;
}

Workload hci(const dsl::TemplateGraph& g, const WorkloadOptions& o) {
  Workload w;
  w.workflow = "hci";
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> u(0, 1);
  for (std::size_t i = 0; i < o.runs; ++i) {
    Run r;
    r.workflow_id = "hci-" + std::to_string(o.seed) + "-" + std::to_string(i);
    r.input = "I need to plan a trip [d " + std::to_string(o.seed) + "." + std::to_string(i) + "]";
    const std::vector<std::string> actions = {"book a flight " + std::to_string(i),
                                              "find a hotel " + std::to_string(i),
                                              "rent a car " + std::to_string(i)};
    if (const auto offer = dsl::render_stage(*g.stage("offer"), {{"dialog", r.input}}))
      w.script.add_exact(offer->body, json{{"actions", actions}}.dump());
    // The top offer in about 29 of 30 turns (paper section 2.2).
    r.picks.push_back(u(rng) < (1.0 - 1.0 / 30) * o.predictability + (1 - o.predictability) / 3
                          ? actions[0]
                          : actions[1 + rng() % 2]);
    w.runs.push_back(std::move(r));
  }
  return w;
}

}  // namespace

json react_think_request(const Run& run, std::size_t hop) {
  json body = chat("Think about the question and name the next entity to search as Search[entity].",
                   "Question: " + run.input, 384);
  body["messages"].push_back({{"role", "user"}, {"content", "Hop " + std::to_string(hop) + "."}});
  return body;
}

json subagent_plan_request(const Run& run) {
  return chat(R"(Pick the sub-agent that researches the question; answer {"subagent": "..."}.)",
              run.input, 256);
}

std::string routing_query(const Run& run, std::size_t turn) {
  return run.input + " (turn " + std::to_string(turn) + ")";
}

Workload make_workload(const dsl::TemplateGraph& g, const WorkloadOptions& options) {
  const std::string& w = g.workflow;
  if (w == "routing" && g.stage("router")) return routing(g, options);
  if (w == "react") return react(options);
  if (w == "subagent") return subagent(options);
  if (w == "hci" && g.stage("offer")) return hci(g, options);
  return {};
}

}  // namespace dynrt::bench

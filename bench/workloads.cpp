#include "bench/workloads.hpp"

#include "dsl/render.hpp"
#include "engines/sim/text.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>

namespace dynrt::bench {

using nlohmann::json;

namespace {

// Words of each deciding stage's reasoning before it names its selection: the resolution window
// is a real decode. Each is set so that the window, measured on the floor (`dynrt bench`
// reports it per trace as window_over_downstream), falls inside the range the paper's F3
// measured, 0.36-0.77x the downstream execution it holds up: Routing 0.58, ReAct 0.52,
// Sub-Agent 0.50 (seed 7, 30 requests at 0.12/s, the default profile). Longer windows would
// overstate what a fill can hide.
constexpr int kRouterReasoningWords = 80;
constexpr int kReactThinkReasoningWords = 80;
constexpr int kPlannerReasoningWords = 190;

std::string reasoning(std::mt19937_64& rng, int words, const char* lead = "Thinking:") {
  static const char* kWords[] = {"the",  "request", "asks",      "about",  "which",
                                 "tool", "fits",    "best",      "given",  "context",
                                 "and",  "history", "so",        "we",     "consider",
                                 "each", "option",  "carefully", "before", "deciding"};
  std::string out = lead;
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

// Paper-sized contexts (Contexts::paper). Each size is drawn per request (or per record) from a
// lognormal around its median, sigma 0.3, from a generator of its own (so the selections and
// the compact trace's draws are the same either way).
constexpr double kContextSigma = 0.3;
// Routing: the handler's whole prompt at p50 (section 2.2, F2: "263 at p50"); the user's
// request carries what the handler prompt lacks of it (the details a BFCL request gives).
constexpr double kHandlerPromptTokens = 263;
// ReAct and Sub-Agent: a retrieved passage or knowledge-base record, about a HotpotQA or
// MuSiQue paragraph (four to five sentences).
constexpr double kPassageTokens = 130;
// HCI: the conversation before the latest message (about ten turns of a Schema-Guided
// Dialogue conversation).
constexpr double kDialogTokens = 150;

// Plain prose of about `tokens` prompt tokens as the simulated engine counts them (a token per
// four characters): words with no markup, so no extraction rule can read a value from it.
std::string prose(std::mt19937_64& rng, double tokens) {
  static const char* kWords[] = {
      "the",     "meeting", "next",    "week",     "was",    "moved",   "because", "of",
      "travel",  "and",     "several", "people",   "asked",  "whether", "a",       "later",
      "time",    "would",   "suit",    "everyone", "report", "notes",   "from",    "earlier",
      "mention", "budget",  "review",  "with",     "team",   "members", "in",      "two",
      "offices", "while",   "others",  "remain",   "open",   "for",     "now",     "today"};
  const auto chars = static_cast<std::size_t>(std::max(0.0, tokens) * 4);
  std::string out;
  while (out.size() < chars) {
    if (!out.empty()) out += out.size() % 11 == 0 ? ". " : " ";
    out += kWords[rng() % (sizeof kWords / sizeof *kWords)];
  }
  if (!out.empty()) out += ".";
  return out;
}

double draw_tokens(std::mt19937_64& rng, double median) {
  return std::lognormal_distribution<double>(std::log(median), kContextSigma)(rng);
}

// A skewed pick among `values`: the first with probability p0, else uniformly among the rest.
std::string skewed(std::mt19937_64& rng, const std::vector<std::string>& values, double p0) {
  std::uniform_real_distribution<double> u(0, 1);
  if (values.size() == 1 || u(rng) < p0) return values[0];
  return values[1 + rng() % (values.size() - 1)];
}

// A fresh run's content (its input carries `marker`, which makes it unique); the workload's
// script gets the deciding stages' answers for it.
using FreshRun = std::function<Run(std::mt19937_64&, const std::string& marker)>;

// Draws index k of a pool of n with Zipf weights 1/(k+1).
std::size_t zipf(std::mt19937_64& rng, std::size_t n) {
  double total = 0;
  for (std::size_t k = 0; k < n; ++k)
    total += 1.0 / static_cast<double>(k + 1);
  double x = std::uniform_real_distribution<double>(0, total)(rng);
  for (std::size_t k = 0; k < n; ++k) {
    x -= 1.0 / static_cast<double>(k + 1);
    if (x <= 0) return k;
  }
  return n - 1;
}

// The runs: fresh ones, and with probability repeat_rate an exact repeat of a popular request
// (its content under the run's own workflow id). The popular pool and the repeat draws use
// a generator of their own, so they do not disturb the fresh runs' draws.
void fill_runs(Workload& w, const WorkloadOptions& o, std::mt19937_64& rng, const FreshRun& fresh) {
  const std::string seed = std::to_string(o.seed);
  std::mt19937_64 repeats(o.seed ^ 0x5DEECE66DULL);
  std::uniform_real_distribution<double> u(0, 1);
  if (o.repeat_rate > 0) {
    const std::size_t pool = std::max<std::size_t>(2, o.runs / 8);
    for (std::size_t k = 0; k < pool; ++k)
      w.popular.push_back(fresh(repeats, "pop " + seed + "." + std::to_string(k)));
  }
  for (std::size_t i = 0; i < o.runs; ++i) {
    Run r;
    if (o.repeat_rate > 0 && u(repeats) < o.repeat_rate) {
      const std::size_t k = zipf(repeats, w.popular.size());
      r = w.popular[k];
      r.popular = static_cast<int>(k);
    } else {
      r = fresh(rng, seed + "." + std::to_string(i));
    }
    r.workflow_id = w.workflow + "-" + seed + "-" + std::to_string(i);
    w.runs.push_back(std::move(r));
  }
}

Workload routing(const dsl::TemplateGraph& g, const WorkloadOptions& o) {
  Workload w;
  w.workflow = "routing";
  std::mt19937_64 rng(o.seed);
  const std::vector<std::string> handlers = {"weather", "calendar", "email"};
  for (const auto& h : handlers)
    w.corpus.push_back({{"key", "api:" + h}, {"text", "The " + h + " API answered: ok."}});
  w.tools = {{"call_api", "api:{{api}}"}};
  std::mt19937_64 sizes(o.seed ^ 0xC0A7'E475'12E5'0001ULL);
  fill_runs(w, o, rng, [&](std::mt19937_64& gen, const std::string& marker) {
    Run r;
    r.input = "Please help with my day [req " + marker + "]";
    if (o.contexts == Contexts::paper) {
      // Pad the request so that the first turn's handler prompt comes to the drawn size.
      const double target = draw_tokens(sizes, kHandlerPromptTokens);
      double base = 0;
      if (const dsl::Stage* handle = g.stage("handle"))
        if (const auto body = dsl::render_stage(
                *handle, {{"handler", handlers[0]}, {"query", routing_query(r, 0)}}))
          base =
              static_cast<double>(engines::sim::estimate_prompt_tokens(body->endpoint, body->body));
      r.input += "\n" + prose(sizes, target - base - 1);
    }
    for (int turn = 0; turn < 2; ++turn) {
      // Top-1 coverage 0.9 at full predictability (section 2.2: 59-94%).
      const std::string pick = skewed(gen, handlers, 0.4 + 0.5 * o.predictability);
      r.picks.push_back(pick);
      // The router's exact request, rendered as the template does, answers with the pick.
      const auto body = dsl::render_stage(
          *g.stage("router"), {{"query", routing_query(r, static_cast<std::size_t>(turn))}});
      if (body)
        w.script.add_exact(body->body,
                           o.selection_first
                               ? "HANDLER: " + pick + "\n" + reasoning(gen, kRouterReasoningWords)
                               : reasoning(gen, kRouterReasoningWords) + "\nHANDLER: " + pick);
    }
    return r;
  });
  return w;
}

std::string entity_name(std::size_t i) {
  return "Entity" + std::to_string(i);
}

// Each sample of a ReAct drafter names the true next entity with this probability (times the
// trace's predictability); otherwise one of the last passage's links (70%) or any entity.
constexpr double kDrafterAccuracy = 0.4;

Workload react(const dsl::TemplateGraph& g, const WorkloadOptions& o) {
  Workload w;
  w.workflow = "react";
  std::mt19937_64 rng(o.seed);
  // A template whose entity decision drafts its candidates: the draft model's answers are
  // scripted too, from a stream of their own so that the trace is the same either way.
  const dsl::Decision* drafted = nullptr;
  for (const auto& d : g.decisions)
    if (d.candidates.kind == dsl::CandidateSourceKind::drafter) drafted = &d;
  std::mt19937_64 draws(o.seed ^ 0x5eed'd4af'7e25'0001ULL);
  const std::size_t kEntities = 40;
  const bool paper = o.contexts == Contexts::paper;
  std::mt19937_64 sizes(o.seed ^ 0xC0A7'E475'12E5'0002ULL);
  // Each passage names three other entities, the likeliest next hop first.
  std::vector<std::vector<std::size_t>> links(kEntities);
  for (std::size_t e = 0; e < kEntities; ++e) {
    std::string text = entity_name(e) + " is linked to";
    for (int k = 0; k < 3; ++k) {
      const std::size_t n = (e + 1 + rng() % (kEntities - 1)) % kEntities;
      links[e].push_back(n);
      text += " [[" + entity_name(n) + "]]";
    }
    text += ".";
    if (paper) text += " " + prose(sizes, draw_tokens(sizes, kPassageTokens) - 20);
    w.corpus.push_back({{"key", "corpus:" + entity_name(e)}, {"text", text}});
  }
  w.tools = {{"retrieve", "corpus:{{entity}}"}};
  std::uniform_real_distribution<double> u(0, 1);
  fill_runs(w, o, rng, [&](std::mt19937_64& gen, const std::string& marker) {
    Run r;
    r.input = "How are things connected? [q " + marker + "]";
    const std::size_t hops = 3 + gen() % 3;
    std::size_t current = gen() % kEntities;
    std::vector<std::size_t> visited;
    for (std::size_t h = 0; h < hops; ++h) {
      if (h > 0) {
        // Paper section 2.2: the next entity is among the previous passage's first three 61%
        // of the time, and about 12% of retrievals recur within a run (a hop goes back to an
        // entity already read; 0.16 per hop gives about 12% of all retrievals). Otherwise it
        // is one the passage does not name.
        const double x = u(gen);
        const auto& named = links[current];
        if (x < 0.61 * o.predictability) {
          current = named[gen() % 3];
        } else if (x < 0.77 * o.predictability) {
          current = visited[gen() % visited.size()];
        } else {
          do
            current = gen() % kEntities;
          while (std::find(named.begin(), named.end(), current) != named.end());
        }
      }
      if (drafted && h > 0) {
        // The samples at this hop, which the branch renders from the question and the last
        // passage (the first hop has none, so it drafts nothing).
        const std::size_t last = visited.back();
        const dsl::Bindings vars = {{"question", r.input}, {"passage", w.corpus[last]["text"]}};
        const auto first = dsl::render_draft(drafted->candidates, vars, 0);
        for (int i = 0; first && i < std::max(1, drafted->candidates.samples); ++i) {
          const double x = u(draws);
          std::size_t named = current;
          if (x >= kDrafterAccuracy * o.predictability)
            named = u(draws) < 0.7 ? links[last][draws() % 3] : draws() % kEntities;
          w.script.add_exact(dsl::draft_sample(*first, i).body,
                             "Search[" + entity_name(named) + "]");
        }
      }
      visited.push_back(current);
      r.picks.push_back(entity_name(current));
      const std::string action = "Search[" + entity_name(current) + "]";
      const std::string thought = o.selection_first
                                      ? action + "\n" + reasoning(gen, kReactThinkReasoningWords)
                                      : reasoning(gen, kReactThinkReasoningWords) + "\n" + action;
      w.script.add_exact(react_think_request(r, h), thought);
      if (paper) {
        r.thoughts.push_back(thought);
        r.observations.push_back(w.corpus[current]["text"].get<std::string>());
      }
    }
    return r;
  });
  return w;
}

Workload subagent(const dsl::TemplateGraph& g, const WorkloadOptions& o) {
  Workload w;
  w.workflow = "subagent";
  std::mt19937_64 rng(o.seed);
  const std::vector<std::string> agents = {"history", "geography", "biography", "science"};
  const std::size_t kEntities = o.subagent_entities > 0 ? o.subagent_entities : std::size_t{12};
  std::mt19937_64 sizes(o.seed ^ 0xC0A7'E475'12E5'0003ULL);
  for (const auto& a : agents)
    for (std::size_t e = 0; e < kEntities; ++e) {
      std::string text = "What the " + a + " base knows of " + entity_name(e) + ".";
      if (o.contexts == Contexts::paper)
        text += " " + prose(sizes, draw_tokens(sizes, kPassageTokens) - 12);
      w.corpus.push_back({{"key", "kb:" + a + ":" + entity_name(e)}, {"text", text}});
    }
  w.tools = {{"kb_search", "kb:{{collection}}:{{entity}}"}};
  // Each sub-agent's summary of an entity is a long decode (about 200 words): the sub-task the
  // planner's window can hide is most of the request (paper Figure 4: overlap share 0.43 on
  // Sub-Agent, the window 0.36-0.77x the downstream execution).
  if (const dsl::Stage* summarize = g.stage("summarize"))
    for (const auto& rec : w.corpus) {
      const std::string key = rec["key"];  // kb:<agent>:<entity>
      const auto colon = key.find(':', 3);
      const dsl::Bindings vars = {{"subagent", key.substr(3, colon - 3)},
                                  {"entity", key.substr(colon + 1)},
                                  {"findings", rec["text"]}};
      if (const auto body = dsl::render_stage(*summarize, vars))
        w.script.add_exact(body->body, reasoning(rng, 200, "Summary:"));
    }
  fill_runs(w, o, rng, [&](std::mt19937_64& gen, const std::string& marker) {
    Run r;
    // A bounded entity pool: sub-tasks recur across runs.
    r.entity = entity_name(gen() % kEntities);
    r.input = "Research [[" + r.entity + "]] for me [q " + marker + "]";
    const std::string pick = skewed(gen, agents, 0.4 + 0.5 * o.predictability);
    r.picks.push_back(pick);
    // nlohmann::json orders keys by name ("reasoning" first); ordered_json keeps them as given.
    const std::string why = reasoning(gen, kPlannerReasoningWords);
    w.script.add_exact(subagent_plan_request(r),
                       o.selection_first
                           ? nlohmann::ordered_json{{"subagent", pick}, {"reasoning", why}}.dump()
                           : json{{"reasoning", why}, {"subagent", pick}}.dump());
    return r;
  });
  return w;
}

Workload hci(const dsl::TemplateGraph& g, const WorkloadOptions& o) {
  Workload w;
  w.workflow = "hci";
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> u(0, 1);
  // Think times: lognormal around the median (paper Figure 4, HCI: about 2.7 s).
  std::lognormal_distribution<double> think(std::log(o.think_median_s), 0.5);
  std::mt19937_64 sizes(o.seed ^ 0xC0A7'E475'12E5'0004ULL);
  fill_runs(w, o, rng, [&](std::mt19937_64& gen, const std::string& marker) {
    Run r;
    r.input = "I need to plan a trip [d " + marker + "]";
    if (o.contexts == Contexts::paper)
      r.input = "Earlier: " + prose(sizes, draw_tokens(sizes, kDialogTokens)) + "\nNow: " + r.input;
    const std::vector<std::string> actions = {"book a flight " + marker, "find a hotel " + marker,
                                              "rent a car " + marker};
    if (const auto offer = dsl::render_stage(*g.stage("offer"), {{"dialog", r.input}}))
      w.script.add_exact(offer->body, json{{"actions", actions}}.dump());
    // The top offer in about 29 of 30 turns (paper section 2.2).
    r.picks.push_back(u(gen) < (1.0 - 1.0 / 30) * o.predictability + (1 - o.predictability) / 3
                          ? actions[0]
                          : actions[1 + gen() % 2]);
    r.think_s = think(gen);
    return r;
  });
  return w;
}

}  // namespace

json react_think_request(const Run& run, std::size_t hop) {
  json body = chat("Think about the question and name the next entity to search as Search[entity].",
                   "Question: " + run.input, 384);
  // With paper-sized contexts the harness sends the hops so far, as a chat ReAct agent keeps
  // its scratchpad: each earlier thought, then the passage its search returned.
  auto& messages = body["messages"];
  for (std::size_t k = 0; k < hop && k < run.thoughts.size() && k < run.observations.size(); ++k) {
    messages.push_back({{"role", "assistant"}, {"content", run.thoughts[k]}});
    messages.push_back({{"role", "user"}, {"content", "Observation: " + run.observations[k]}});
  }
  messages.push_back({{"role", "user"}, {"content", "Hop " + std::to_string(hop) + "."}});
  return body;
}

const char* to_string(Contexts c) {
  return c == Contexts::paper ? "paper" : "compact";
}

std::optional<Contexts> parse_contexts(std::string_view name) {
  if (name == "compact") return Contexts::compact;
  if (name == "paper") return Contexts::paper;
  return std::nullopt;
}

json subagent_plan_request(const Run& run) {
  return chat(R"(Pick the sub-agent that researches the question; answer {"subagent": "..."}.)",
              run.input, 256);
}

std::string routing_query(const Run& run, std::size_t turn) {
  return run.input + " (turn " + std::to_string(turn) + ")";
}

std::optional<std::string> trace_cannot_drive(const dsl::TemplateGraph& g) {
  // The stage each trace scripts or builds its request for, and what the stage must do.
  static const std::map<std::string, std::pair<std::string, bool>> kNeeds = {
      {"routing", {"router", true}},  // its scripted answers are keyed on the router's request
      {"react", {"think", true}},     // the harness builds think's request, hop by hop
      {"hci", {"offer", false}}};     // its scripted offers are keyed on the offer's request
  const auto it = kNeeds.find(g.workflow);
  if (it == kNeeds.end()) return std::nullopt;
  const auto& [stage, decides] = it->second;
  const dsl::Stage* s = g.stage(stage);
  if (s && (!decides || s->decides != dsl::kNoId)) return std::nullopt;
  return "the " + g.workflow + " template has no stage '" + stage + "'" +
         (s ? " that decides" : "") + ", which the bench's " + g.workflow +
         " trace calls by name (the traces follow the shipped templates' stages)";
}

Workload make_workload(const dsl::TemplateGraph& g, const WorkloadOptions& options) {
  const std::string& w = g.workflow;
  if (w == "routing" && g.stage("router")) return routing(g, options);
  if (w == "react") return react(g, options);
  if (w == "subagent") return subagent(g, options);
  if (w == "hci" && g.stage("offer")) return hci(g, options);
  return {};
}

}  // namespace dynrt::bench

// Seeded synthetic workloads for the four shipped templates (Routing, ReAct, Sub-Agent, HCI):
// the runs a harness would make, the simulated engine's response script that makes each
// deciding stage answer with the run's recorded selection, and the retrieval corpus the tool
// stages read. The same seed always yields the same workload.
//
// A Run lists, per repetition of the workflow's loop, the selection its decision resolves to;
// the driver (bench/driver.hpp) turns it into requests exactly as a harness would: stages with
// a request template are rendered from it with the variables gathered from earlier responses,
// and the deciding stages the templates leave to the harness (think, plan) are built here.
// The statistics follow the paper where it states them (section 2.2): a skewed handler choice,
// the next ReAct entity among the previous passage's first three 61% of the time, sub-tasks
// recurring across runs, the top HCI offer picked in about 29 of 30 turns.
#pragma once

#include "dsl/template_graph.hpp"
#include "engines/sim/text.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dynrt::bench {

struct Run {
  std::string workflow_id;
  std::string input;               // the query, question or dialog (with a unique marker)
  std::string entity;              // Sub-Agent: the entity the question is about
  std::vector<std::string> picks;  // per repetition: the selection of its decision
  double think_s = 0;              // HCI: the user's think time before the pick (simulated s)
  int popular = -1;                // an exact repeat of Workload::popular[popular], or -1
  // ReAct with paper-sized contexts: per hop, the think stage's answer and the passage its
  // search read, which every later hop's think request carries as its history.
  std::vector<std::string> thoughts;
  std::vector<std::string> observations;
};

struct Workload {
  std::string workflow;  // the template's workflow name
  std::vector<Run> runs;
  engines::sim::Script script;
  nlohmann::json corpus = nlohmann::json::array();  // [{"key", "text"}]
  // tool name -> record key template (all tools are corpus lookups)
  std::vector<std::pair<std::string, std::string>> tools;
  // Popular requests that recur exactly (WorkloadOptions::repeat_rate), most popular first:
  // a repeating run copies one's content under its own workflow id.
  std::vector<Run> popular;
};

// How long the prompts are. compact: a sentence or two per message (the traces' original
// form). paper: the sizes the paper's traces have: Routing's handler prompt about 263 tokens at
// p50 (section 2.2, F2), ReAct's think carrying every earlier hop's thought and passage (its
// prompt grows per hop), passages and knowledge-base records about 130 tokens, HCI's dialog
// about 150 tokens of conversation before the latest message.
enum class Contexts { compact, paper };
const char* to_string(Contexts c);
// "compact" or "paper"; nullopt for anything else.
std::optional<Contexts> parse_contexts(std::string_view name);

struct WorkloadOptions {
  std::uint64_t seed = 1;
  std::size_t runs = 8;
  double predictability = 1.0;  // 1: the paper's rates; 0: selections ignore the predictors
  // The share of runs that exactly repeat a popular request (Figure 10a's "exact replay"),
  // drawn with Zipf weights over a pool of max(2, runs / 8) popular requests.
  double repeat_rate = 0;
  // Sub-Agent: the entity pool. 0 keeps the small fixed pool (12) the tests use; `dynrt bench`
  // sizes it so that about 26% of fresh runs' sub-tasks recur across runs (paper section 2.2).
  std::size_t subagent_entities = 0;
  double think_median_s = 2.7;  // HCI: median of the lognormal think time (paper Figure 4)
  // The deciders write their selection first and their reasoning after it (as a tool call's
  // name comes before its arguments), instead of reasoning first: the trace on which resolving
  // on emission can stop the losers' fills early. HCI's decision is the user's either way.
  bool selection_first = false;
  Contexts contexts = Contexts::compact;
};

// For the template `graph` of "routing", "react", "subagent" or "hci" (the deciders' scripted
// requests are rendered from it, so they are exactly what the driver sends). Any other
// workflow gives an empty workload.
Workload make_workload(const dsl::TemplateGraph& graph, const WorkloadOptions& options);

// What a template lacks that the bench's trace for its workflow calls by name (the shipped
// templates' stages: Routing's router, ReAct's think, HCI's offer), in a sentence; nullopt
// when the trace can drive it. A renamed stage would otherwise give an empty trace, or runs
// that all fail.
std::optional<std::string> trace_cannot_drive(const dsl::TemplateGraph& graph);

// The harness-built request of a deciding stage that has no request template.
nlohmann::json react_think_request(const Run& run, std::size_t hop);
nlohmann::json subagent_plan_request(const Run& run);
// Routing: the query of one turn (each turn routes a follow-up of the run's request).
std::string routing_query(const Run& run, std::size_t turn);

}  // namespace dynrt::bench

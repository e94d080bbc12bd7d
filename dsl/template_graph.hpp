// A compiled workflow template: what the runtime needs to recognize a workflow's demands,
// open branches at its decision points and render the exact requests of candidate fills.
//
// TemplateGraph is built by compile_template() (dsl/compile.hpp) from a template that lints
// clean, and is immutable afterwards; it may be shared across threads. Stage ids are indices
// into `stages` in declaration order, so they are stable under reformatting and under edits
// elsewhere in the file that do not add or remove stages.
#pragma once

#include "runtime/hash.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace re2 {
class RE2;
}

namespace dynrt::dsl {

using StageId = std::uint32_t;
using DecisionId = std::uint32_t;
using LoopId = std::uint32_t;
inline constexpr std::uint32_t kNoId = std::numeric_limits<std::uint32_t>::max();

enum class StageKind { model, tool, user };
// The protocol a model stage's requests speak. Messages (Anthropic) and responses (OpenAI)
// run as the chat completion they translate to (protocols/protocols.hpp).
enum class ModelApi { chat, completions, messages, responses };
// A stage in a protocol dynrt translates to chat completions (messages, responses).
inline bool translated(ModelApi a) {
  return a == ModelApi::messages || a == ModelApi::responses;
}
enum class Window { decode, user };
enum class Promotion { exclusive, independent };
// Whose results a stage's library entries and fills may serve: only the tenant whose call
// caused them (the default), or every tenant (`share: global`, for tenant-independent data).
enum class Share { tenant, global };
enum class CandidateSourceKind { static_list, learned, extract, drafter };

std::string_view to_string(StageKind k);
std::string_view to_string(ModelApi a);
std::string_view to_string(Window w);
std::string_view to_string(Promotion p);
std::string_view to_string(Share s);
std::string_view to_string(CandidateSourceKind k);

// Where a value sits in a JSON document: a JSON pointer, then (optionally) the string there
// parsed as JSON and a second pointer, then (optionally) the first capture group of an RE2
// regular expression. See dsl/render.hpp for applying it.
struct Extractor {
  std::string pointer;
  std::optional<std::string> json_pointer;
  std::optional<std::string> regex_source;
  std::shared_ptr<const re2::RE2> regex;  // compiled regex_source
};

// One condition of a stage's recognition rule (`match:`): the value at `pointer` in the
// request as its caller sent it (in the stage's protocol) equals `literal`, or holds a match of
// `regex`. A value that is not a string is matched as its compact JSON text. A pointer token
// "-N" counts from the end of a list ("-1" is the latest message, say).
struct MatchRule {
  std::string pointer;
  std::optional<std::string> literal;
  std::string regex_source;               // when not a literal
  std::shared_ptr<const re2::RE2> regex;  // compiled regex_source
};

// How a workflow's calls that carry no dynrt headers are told apart by run (`recognize:`).
struct Recognize {
  enum class Run {
    none,          // no recognition: the workflow's calls must be tagged
    header,        // the value of a header the client already sends (a session id)
    conversation,  // a hash of the conversation up to its first assistant turn
  };
  Run run = Run::none;
  std::string header;  // Run::header: its name, lower-case
};

struct SpeculationLimits {
  int max_fills = 3;   // most fills admitted per branch; 0 disables filling
  int wait_ms = 2000;  // bounded wait of a demand for its in-flight fill
  double ttl_s = 600;  // life of shadows and reusable results
  int max_chain = 4;   // most speculable stages one fill runs down a chain
};

struct Stage {
  StageId id = kNoId;
  std::string name;
  std::string description;
  StageKind kind = StageKind::model;
  // model stages
  ModelApi api = ModelApi::chat;
  std::string model;
  nlohmann::json params = nlohmann::json::object();   // merged into the rendered body
  nlohmann::json request = nlohmann::json::object();  // body template; strings are mustache
  // tool stages
  std::string tool;
  nlohmann::json arguments = nlohmann::json::object();
  // all stages
  bool speculable = false;
  Share share = Share::tenant;
  std::vector<std::string> reads;       // record-key templates
  std::vector<std::string> writes;      // record-key templates
  std::vector<StageId> after;           // predecessors in the same repetition
  std::vector<StageId> after_previous;  // predecessors in the previous repetition of its loop
  LoopId loop = kNoId;
  std::vector<std::pair<std::string, Extractor>> bind;     // from its incoming request
  std::vector<std::pair<std::string, Extractor>> outputs;  // from its response
  DecisionId decides = kNoId;
  // Recognition without tags: every rule holds on a call of this stage's route (an untagged
  // call is this stage when they all do, and no other stage's all do). Empty: only tagged
  // calls are this stage. Not part of the fingerprint: recognizing a call changes no result.
  std::vector<MatchRule> match;
  std::optional<double> ttl_s;
  std::vector<std::string> uses;  // variables its request, arguments and record keys render
  Hash128 fingerprint;            // XXH3-128 of the stage's canonical definition

  // "/v1/chat/completions", "/v1/completions" or "/v1/dynrt/tools/<tool>"; empty for user.
  // Where dynrt runs it: a messages or responses stage runs as a chat completion.
  std::string endpoint() const;
  // The path the harness sends the stage's calls to: endpoint(), except /v1/messages and
  // /v1/responses for stages in those protocols. Recognition looks at calls on this route.
  std::string route() const;
};

struct CandidateSource {
  CandidateSourceKind kind = CandidateSourceKind::static_list;
  int max = 3;
  std::vector<std::string> values;  // static list, or learned seed vocabulary
  StageId stage = kNoId;            // extract: the stage whose latest output is read
  Extractor extract;                // extract: where in that output
  std::string model;                // drafter
  nlohmann::json request = nlohmann::json::object();  // drafter
  nlohmann::json params = nlohmann::json::object();   // drafter
  int samples = 8;                                    // drafter
  int timeout_ms = 1000;                              // drafter
};

struct Selection {
  Extractor extract;
  ModelApi api = ModelApi::chat;  // the protocol of the deciding stage's answer, read in it
  std::map<std::string, std::string> map;  // text found -> candidate; empty: the text itself
};

struct Decision {
  DecisionId id = kNoId;
  std::string name;  // also the variable that holds the selection
  std::string description;
  StageId decided_by = kNoId;
  Window window = Window::decode;
  Promotion promotion = Promotion::exclusive;
  CandidateSource candidates;
  Selection selection;
  SpeculationLimits limits;
  // Stages whose rendered input depends on the selection, in topological order: the branch's
  // subgraph. A fill runs its speculable prefix.
  std::vector<StageId> downstream;
  Hash128 coordinate;  // XXH3-128 of (workflow, decision): the branch class
};

struct Loop {
  LoopId id = kNoId;
  std::string name;  // also the variable holding the repetition index (from 0)
  std::vector<StageId> stages;
  int max = 1;
};

struct Edge {
  StageId from = kNoId;
  StageId to = kNoId;
  bool loop_carried = false;  // `to` runs after the previous repetition of `from`
};

struct Input {
  std::string name;
  std::string description;
};

class TemplateGraph {
 public:
  std::string workflow;
  std::string description;
  std::string source_path;
  int version = 1;
  Hash128 fingerprint;  // XXH3-128 of the whole template's canonical form
  std::vector<Stage> stages;
  std::vector<StageId> topological_order;  // same-repetition edges; ties in declaration order
  std::vector<Edge> edges;                 // sorted by the topological position of `from`
  std::vector<StageId> entry;
  std::vector<Decision> decisions;
  std::vector<Loop> loops;
  std::vector<Input> inputs;
  SpeculationLimits limits;
  Recognize recognize;

  const Stage* stage(std::string_view name) const;
  const Decision* decision(std::string_view name) const;
  const Loop* loop(std::string_view name) const;
};

}  // namespace dynrt::dsl

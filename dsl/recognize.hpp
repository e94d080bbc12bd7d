// Recognition without tags: which workflow, stage and run an untagged call is, from the
// templates' `match:` rules and `recognize:` run identities (docs/templates.md, "Recognizing
// calls without tags").
//
// A call that carries any X-DynRT-* header is never recognized: tags win. An untagged call is
// a stage's when every rule of that stage holds on the call as its caller sent it (the route
// and the body in its own protocol). When several stages' rules hold, the most specific wins:
// the stage whose rules include every other's (a later turn's rules add a condition to a first
// turn's). Otherwise the call is ambiguous and passes through as any untagged call would
// (`dynrt lint` warns of pairs it cannot prove apart). Pure; a Recognizer is immutable and may
// be shared across threads.
#pragma once

#include "dsl/template_graph.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dynrt::dsl {

// A request header by lower-case name; nullopt when the call has none.
using HeaderLookup = std::function<std::optional<std::string>(std::string_view)>;

struct Recognized {
  enum class Outcome {
    recognized,  // workflow, stage and run are set
    no_match,    // no stage's rules hold
    ambiguous,   // more than one stage's rules hold (detail names them)
    no_run,      // one stage's rules hold, but the call does not say its run
  };
  Outcome outcome = Outcome::no_match;
  std::string workflow;
  std::string stage;
  std::string run;     // the workflow id it is given
  std::string detail;  // why not, for logs
};
std::string_view to_string(Recognized::Outcome o);

class Recognizer {
 public:
  explicit Recognizer(const std::vector<std::shared_ptr<const TemplateGraph>>& graphs);

  // No loaded template recognizes anything: every untagged call passes through.
  bool empty() const { return rules_.empty(); }
  // (workflow, stage) of every stage it may recognize, in its order.
  std::vector<std::pair<std::string, std::string>> stages() const;

  // `route`: the path the call arrived on. `wire`: its body as the caller sent it. `chat`: the
  // chat completion it runs as (the same body for a chat call), which a conversation's run id
  // is read from so that it is the same in every protocol.
  Recognized recognize(std::string_view route, const nlohmann::json& wire,
                       const nlohmann::json& chat, const HeaderLookup& header) const;

 private:
  struct Entry {
    std::shared_ptr<const TemplateGraph> graph;
    const Stage* stage = nullptr;
    std::string route;
  };
  std::vector<Entry> rules_;  // stages with rules, in load order then declaration order
};

// Whether every rule holds on `body`.
bool rules_hold(const std::vector<MatchRule>& rules, const nlohmann::json& body);

// The run a chat completion's conversation belongs to: a hash of its model and of its messages
// up to the first assistant turn (every later call of the conversation repeats them); nullopt
// when it has no user turn before one.
std::optional<std::string> conversation_run(const nlohmann::json& chat);

// True when every call `narrower`'s rules accept, `wider`'s accept too — provably: each of
// `wider`'s rules is one of `narrower`'s. When both hold on a call, the narrower (more specific)
// stage is the one recognized.
bool rules_cover(const std::vector<MatchRule>& wider, const std::vector<MatchRule>& narrower);

// True when no call can satisfy both rule sets — provably: on one pointer, two different
// literals, or a literal the other's pattern does not match.
bool rules_exclude(const std::vector<MatchRule>& a, const std::vector<MatchRule>& b);

}  // namespace dynrt::dsl

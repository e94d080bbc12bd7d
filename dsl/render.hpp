// Turning a compiled stage and a set of variable values into the exact request the harness
// would send, and reading variables back out of requests and responses.
//
// These are the template language's run-time semantics; the runtime calls them on the request
// path, so nothing here throws: failures are Expected errors, and the caller treats them as a
// miss. Rendering fails (rather than rendering an empty string) when a variable it needs is
// not bound, because a request rendered from a guess must never be mistaken for the real one.
// Pure; thread-compatible (a TemplateGraph may be shared, calls do not mutate it).
#pragma once

#include "dsl/template_graph.hpp"
#include "runtime/expected.hpp"

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dynrt::dsl {

// Variable name -> value. Values are JSON: strings mostly, but a variable bound from a
// request may hold any JSON (a list of messages, say).
using Bindings = std::map<std::string, nlohmann::json, std::less<>>;

struct RenderedRequest {
  std::string endpoint;  // see Stage::endpoint()
  nlohmann::json body;   // the exact request body (model and params merged in)
  // A messages or responses stage: the body in its own protocol, which `body` (the chat
  // completion dynrt runs) translates; null otherwise.
  nlohmann::json wire;
  std::vector<std::string> reads;   // rendered record keys
  std::vector<std::string> writes;  // rendered record keys
};

// Renders `stage`'s request (model stages) or arguments (tool stages) with `vars`. String
// leaves are mustache templates rendered with HTML escaping off; a leaf that is exactly one
// tag ("{{messages}}") is replaced by the variable's JSON value itself; a list item that is
// exactly {"$splice": <template>} is replaced by the elements of the list it renders to. Other
// values render as their compact JSON text. Errors: a user stage, an unbound variable, a malformed
// template.
Expected<RenderedRequest> render_stage(const Stage& stage, const Bindings& vars);

// Renders one mustache string (the same rules as a string leaf).
Expected<nlohmann::json> render_text(std::string_view text, const Bindings& vars);

// RFC 6901 lookup without exceptions; nullptr when the pointer does not resolve. One
// extension: in a list, a token "-N" counts from the end ("-1" is the last element, the latest
// message say; "-2" the one before), which RFC 6901 has no index for.
const nlohmann::json* resolve_pointer(const nlohmann::json& doc, std::string_view pointer);
// True if `pointer` is a syntactically valid JSON pointer ("" or "/a/b~1c/0").
bool valid_pointer(std::string_view pointer);

// Applies an Extractor to a document. Errors name what did not resolve.
Expected<nlohmann::json> extract(const Extractor& extractor, const nlohmann::json& doc);

// The variables a stage's incoming request binds (`bind`): `request_body` as its caller sent it,
// in the stage's protocol (for a messages or responses stage, not its chat translation).
Expected<Bindings> bind_request(const Stage& stage, const nlohmann::json& request_body);
// The variables a stage's response defines (`outputs`). `response` is the answer as dynrt keeps
// it (a chat completion for a messages or responses stage): the pointers read it in the
// stage's own protocol, translated first.
Expected<Bindings> read_outputs(const Stage& stage, const nlohmann::json& response);

// The answer as dynrt keeps it, in the protocol `api`'s form (itself for chat and
// completions); nullopt when it is not an answer the translation reads.
std::optional<nlohmann::json> answer_in(ModelApi api, const nlohmann::json& response);

struct SelectionResult {
  enum class Status { selected, unreadable, ambiguous };
  Status status = Status::unreadable;
  std::string value;   // the selected candidate when status == selected
  std::string reason;  // why not, otherwise
};

// Reads the resolved selection from the deciding stage's output. Ambiguous when the regex
// matches more than once with different captures; unreadable when nothing matches, the text
// is not in `map`, or the pointer does not resolve. Either way nothing may be promoted.
SelectionResult read_selection(const Decision& decision, const nlohmann::json& decider_output);

// The selection a deciding stage has already emitted, read from its output so far: the
// response assembled from the chunks decoded until now, in the shape of the whole response.
// Only what further decoding cannot change counts:
//   - a regex over text: the matches on the complete lines (up to the last line break), when
//     they all capture the same value;
//   - JSON in a string (`json:`): a string value at the inner pointer whose closing quote has
//     been decoded (then the regex, if any, over it);
//   - a pointer to a tool call's name (`.../function/name`): the name, which engines send whole
//     in the call's first delta;
// then `map` as read_selection applies it; nullopt otherwise (a selection that is the whole
// text is complete only at the end of the decode). The whole output still resolves the branch
// (read_selection): an emitted selection only stops the other candidates' fills sooner, so
// one that the rest of the output contradicts costs speculation, never a result.
std::optional<std::string> emitted_selection(const Decision& decision,
                                             const nlohmann::json& partial_output);

// Candidates an `extract` source reads from a stage's latest output: every regex match's
// first capture group (or each element of a list found at the pointer), in order of first
// appearance, duplicates removed, at most `source.max`.
std::vector<std::string> extract_candidates(const CandidateSource& source,
                                            const nlohmann::json& output);

// The request of a `drafter` source's sample `index` (0-based): rendered like a model stage of
// the drafter's model, params and request, with its own seed (the params' integer `seed`,
// default 0, plus `index`). The samples are distinct draws, and a branch drafted again from
// the same input draws the same ones.
Expected<RenderedRequest> render_draft(const CandidateSource& source, const Bindings& vars,
                                       int index);
// Sample `index` of the draft whose sample 0 is `first` (render_draft's, at index 0): the same
// request, its seed moved on by `index`. Renders nothing, so a branch renders its draft once.
RenderedRequest draft_sample(RenderedRequest first, int index);

}  // namespace dynrt::dsl

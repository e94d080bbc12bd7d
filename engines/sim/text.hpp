// What the simulated engine says: deterministic outputs, token counts and response bodies.
//
// The same request always yields the same text and token counts. A response script (a
// workload's recorded answers) maps a request's reuse-relevant content to its output, so a
// replayed trace makes the router name the recorded handler; any other request gets
// pseudo-text seeded by its content, with a length drawn from a lognormal distribution, cut at
// max_tokens (finish_reason "length"). Tokens are words (each with its leading space); prompt
// tokens are estimated as one per four characters of message text plus four per message.
// Response bodies follow vLLM's shapes for chat and completions, streamed or not, with ids
// derived from the content and a fixed `created`, so the bytes are reproducible. Pure.
#pragma once

#include "engines/engine.hpp"
#include "runtime/expected.hpp"
#include "runtime/hash.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dynrt::engines::sim {

// What a script answers: the text, and the tool calls that follow it (chat only), each
// {"name": "...", "arguments": {...}}.
struct Scripted {
  std::string text;
  nlohmann::json tool_calls = nlohmann::json::array();
};

// A response script: exact requests (by reuse-relevant content) and, failing those, the first
// rule whose needle the request's last message contains.
inline constexpr std::size_t kMaxScriptBytes = std::size_t{256} << 20;
class Script {
 public:
  // JSON lines, one entry each: {"request": {...body...}, "response": "text"} or
  // {"contains": "needle", "response": "text"}, either with an optional "tool_calls" array of
  // {"name", "arguments"}; blank lines and lines starting with # skipped.
  static Expected<Script> parse(std::string_view text);
  // A file of at most kMaxScriptBytes (a pipe works; a device that never ends is refused).
  static Expected<Script> load(const std::string& path);

  void add_exact(const nlohmann::json& body, std::string response,
                 nlohmann::json tool_calls = nlohmann::json::array());
  void add_contains(std::string needle, std::string response,
                    nlohmann::json tool_calls = nlohmann::json::array());
  const Scripted* find(const nlohmann::json& body) const;
  std::size_t size() const { return exact_.size() + contains_.size(); }
  // The script as parse() reads it, one entry per line in the order they were added (a later
  // exact entry for the same content wins, there as here).
  void write_jsonl(std::ostream& out) const;

 private:
  std::unordered_map<Hash128, Scripted> exact_;
  std::vector<std::pair<nlohmann::json, Scripted>> exact_added_;  // for write_jsonl
  std::vector<std::pair<std::string, Scripted>> contains_;
};

// The identity of a request's content: its reuse name under a zero stage fingerprint (the
// same fields count and the same are left out).
Hash128 content_key(const nlohmann::json& body);

struct TextParams {
  std::uint64_t seed = 1;
  double median_tokens = 120;     // pseudo-text length: lognormal with this median ...
  double sigma = 0.6;             // ... and this log-space spread
  int max_default_tokens = 2048;  // when the request sets no max_tokens
};

struct GeneratedCall {
  std::string id;  // "call_<content key>_<index>"
  std::string name;
  std::string arguments;  // JSON text
};

struct Generation {
  std::vector<std::string> tokens;  // each a word with its leading space (the first has none)
  // Scripted tool calls after the text (chat only; not when the text was cut by max_tokens).
  // They are sent with the last chunk and cost no decode steps of their own.
  std::vector<GeneratedCall> tool_calls;
  std::string finish_reason;  // "stop", "length" or "tool_calls"
  std::int64_t prompt_tokens = 0;
};

// A field this engine reads given as the wrong type, or a negative token count, checked as
// vLLM checks them before it schedules anything: max_tokens, max_completion_tokens, n, stream,
// stream_options (and its include_usage), stop. Null counts as absent. `param` names the field.
struct BadField {
  std::string message;  // "`max_tokens` must be an integer of at least 0"
  std::string param;
};
std::optional<BadField> check_fields(const nlohmann::json& body);

// Errors: the body is not an object, has neither messages (chat) nor prompt (completions), asks
// for more than one choice, or fails check_fields().
Expected<Generation> generate(std::string_view endpoint, const nlohmann::json& body,
                              const Script& script, const TextParams& params);

std::int64_t estimate_prompt_tokens(std::string_view endpoint, const nlohmann::json& body);

// Response bodies. `index` of the chunk is only used for ids; text pieces are joined tokens.
struct ResponseMeta {
  std::string id;     // "chatcmpl-..." or "cmpl-..."
  std::string model;  // echoed from the request
  bool chat = true;
  bool include_usage = false;  // stream_options.include_usage
};

ResponseMeta response_meta(std::string_view endpoint, const nlohmann::json& body);
std::string full_response(const ResponseMeta& meta, const Generation& g);
std::string role_chunk(const ResponseMeta& meta);  // chat only: the assistant's role
std::string text_chunk(const ResponseMeta& meta, std::string_view text);
std::string final_chunk(const ResponseMeta& meta, std::string_view finish_reason);
std::string tool_call_chunk(const ResponseMeta& meta, std::size_t index, const GeneratedCall& call);
std::string usage_chunk(const ResponseMeta& meta, const Usage& usage);

}  // namespace dynrt::engines::sim

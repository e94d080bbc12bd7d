// Assembling a streamed chat or text completion into the response the engine would have sent
// whole, or saying that it cannot be done faithfully.
//
// Chunks are the JSON payloads of the stream's `data:` events (errors and [DONE] are the
// caller's business). Per choice `index`, as the OpenAI SDKs accumulate them: the role; content
// (text for /v1/completions), `reasoning_content`, `reasoning` and `refusal` concatenated;
// `tool_calls` merged by their own `index` (id, type and function name set, function arguments
// concatenated); the legacy `function_call` likewise; the finish reason; vLLM's `stop_reason`
// and SGLang's `matched_stop`. At the top level: id, created, model, `system_fingerprint`,
// `service_tier`, and the usage chunk's usage as sent (zero counts when there was none);
// llama.cpp's `timings` (differs on every run) and OpenAI's `obfuscation` padding are left out.
//
// Anything else that carries a value (non-null logprobs, a delta, choice, tool-call or top-level
// field this does not know) makes the result incomplete: the caller still gets every chunk as
// the engine sent it, but the assembled body is never stored, rather than stored without it. A
// choice that ends without a finish reason, or a stream without any choice, is incomplete too.
//
// The assembled body has the non-streamed shape: "chat.completion" choices with a `message`
// (content null when no content came, or only "" alongside tool calls, as the SDKs and vLLM's
// non-streamed answers have it) or "text_completion" choices with `text`, each with `logprobs`
// null and its `finish_reason`, ordered by index. A plain class; one stream, one thread.
#pragma once

#include "engines/engine.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace dynrt::engines {

class StreamAssembler {
 public:
  explicit StreamAssembler(bool chat) : chat_(chat) {}

  // One chunk, a JSON object.
  void add(const nlohmann::json& chunk);

  // The response assembled from the chunks so far.
  std::string body() const;
  // ... as a document (the text decoded so far, for a stream still running).
  nlohmann::json document() const;
  // Every choice finished and everything the stream carried went into body().
  bool complete() const { return why_incomplete().empty(); }
  // Why the result is incomplete ("" when it is complete).
  std::string why_incomplete() const;
  Usage usage() const { return usage_; }
  std::string finish_reason() const;  // of the choice with the lowest index

 private:
  struct ToolCall {
    std::optional<std::string> id, type, name;
    std::string arguments;
  };
  struct Choice {
    std::optional<std::string> role;
    std::optional<std::string> content;  // text, for /v1/completions
    std::optional<std::string> reasoning_content, reasoning, refusal;
    std::optional<ToolCall> function_call;
    std::map<std::int64_t, ToolCall> tool_calls;
    std::string finish_reason;
    std::optional<nlohmann::json> stop_reason, matched_stop;  // present once a chunk has them
  };

  nlohmann::ordered_json assembled() const;
  void add_choice(const nlohmann::json& c);
  void add_delta(Choice& choice, const nlohmann::json& delta);
  void add_tool_call(Choice& choice, const nlohmann::json& call);
  void unfaithful(std::string why);

  bool chat_;
  std::string id_, model_;
  std::int64_t created_ = 0;
  nlohmann::json system_fingerprint_, service_tier_;  // null until a chunk has them
  nlohmann::json usage_json_;
  Usage usage_;
  std::map<std::int64_t, Choice> choices_;
  std::string unfaithful_;  // the first thing the body could not hold
};

}  // namespace dynrt::engines

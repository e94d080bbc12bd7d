// The Anthropic Messages API (POST /v1/messages) and the OpenAI Responses API (POST
// /v1/responses) over an engine that speaks chat completions: a request in either wire form is
// translated to one chat completion request, and the chat answer, whole or streamed chunk by
// chunk, back into the caller's form. The mapping, and what cannot be mapped (refused with a
// Refusal naming the field), is in docs/protocols.md.
//
// dynrt keeps one form inside: reuse names, fills, the library and stream replay all see the
// chat request and the chat answer, so a call is served alike whichever of the three protocols
// asked it, and a result is translated only on its way out. The translation is a pure function
// of the request (and of the chat answer): the same wire request always becomes the same chat
// request, byte for byte, which is what lets a fill computed for one match the call of another.
// The simulated engine serves both protocols through the same functions, so a call made to it
// directly answers what the same call answers through dynrt.
//
// Pure; any thread.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace dynrt::protocols {

enum class Api {
  chat,         ///< POST /v1/chat/completions
  completions,  ///< POST /v1/completions
  messages,     ///< POST /v1/messages (Anthropic)
  responses,    ///< POST /v1/responses (OpenAI)
};

std::string_view to_string(Api api);  // "chat", "completions", "messages", "responses"
std::string_view path_of(Api api);    // "/v1/chat/completions", ...
std::optional<Api> api_of_path(std::string_view path);
std::optional<Api> api_of_name(std::string_view name);  // as to_string() writes it
// The two protocols dynrt translates to chat completions.
inline bool translated(Api api) {
  return api == Api::messages || api == Api::responses;
}

// Why a request cannot be translated; answered 400 in the protocol's own error shape.
struct Refusal {
  std::string message;
  std::string param;  // the field at fault (`messages[2].content[0].type`), empty when none is
};

struct ToChat {
  nlohmann::json chat;  // the chat completion request
  Refusal refused;
  bool ok() const { return refused.message.empty(); }
};

// A Messages or Responses request body (an object) as the chat completion request it stands
// for. A streamed request streams in chat too, with its usage in the last chunk.
ToChat to_chat(Api api, const nlohmann::json& body);

// A whole chat completion (its body as the engine sent it) as the protocol's whole answer to
// `request` (the wire request, which the answer echoes fields of). nullopt when `chat` is not a
// chat completion.
std::optional<std::string> from_chat(Api api, const nlohmann::json& request, std::string_view chat);

// The same, parsed: the answer as a document (for reading a stage's outputs from it).
std::optional<nlohmann::json> answer_of(Api api, const nlohmann::json& request,
                                        const nlohmann::json& chat);

// An error body in the protocol's shape: Anthropic's {"type": "error", "error": {"type",
// "message"}} for messages, OpenAI's {"error": {...}} otherwise. The type follows the status.
std::string error_body(Api api, std::string_view message, int status, std::string_view param = {});

// The message of an error body in OpenAI's shape (or the body itself when it is not one).
std::string error_message(std::string_view openai_body);

// An error body some engine or dynrt wrote in OpenAI's shape (or any text), in the protocol's
// shape, keeping its message.
std::string translate_error(Api api, std::string_view openai_body, int status);

// A streamed chat answer, chunk by chunk, as the protocol's server-sent events. Each call
// returns whole SSE frames (`event: NAME\ndata: JSON\n\n`, possibly several, possibly none).
class StreamTranslator {
 public:
  StreamTranslator(Api api, const nlohmann::json& request);
  ~StreamTranslator();
  StreamTranslator(StreamTranslator&&) noexcept;
  StreamTranslator& operator=(StreamTranslator&&) noexcept;

  // One chat.completion.chunk (the JSON of one `data:` line). Chunks that are not JSON objects
  // are skipped.
  std::string chunk(std::string_view data);
  // The stream ended normally: the closing events.
  std::string finish();
  // The stream failed after it began: the protocol's error event (`message` says why).
  std::string fail(std::string_view message, int status);

  struct State;

 private:
  std::unique_ptr<State> s_;
};

}  // namespace dynrt::protocols

// What a normal completion is: the one rule for every place that decides whether a response may
// be stored.
//
// Only a response that completed normally may become a library entry or a promotable shadow
// (DESIGN.md section 2, "Failure is a miss"). For /v1/chat/completions and /v1/completions that
// is a JSON object with no error in it (no "error", no "object": "error") whose "choices"
// is a non-empty array of objects, each with its message (chat) or text (completions) and a
// finish_reason that is a non-empty string. Anything else an engine answers with 200 (a
// truncated body, an error object, a choice cut off without a finish reason) is still passed to
// the caller that asked for it, as the engine sent it, and never stored. A body for any other
// endpoint is not a completion this knows, so it is never normal.
//
// The openai adapter checks non-streamed bodies with it; the actors check every result again
// right before storing it, whatever engine produced it. Pure functions, any thread.
#pragma once

#include "engines/engine.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace dynrt::engines {

// Whether `j` is an error an engine sent in place of a response or a chunk: an object with a
// non-null "error" (OpenAI, vLLM's stream errors, llama.cpp), or with "object": "error" (vLLM's
// older error shape).
bool is_error_object(const nlohmann::json& j);

// What an error object says: the HTTP status it stands for (its code when that is an error
// status, 400-599, else 502: the engine failed) and its message ("" when it has none).
struct ReportedError {
  int status = 502;
  std::string message;
};
ReportedError reported_error(const nlohmann::json& j);

// Why `body`, a whole response to `endpoint`, is not a normal completion; nothing when it is
// one (a body that is not JSON is not normal). The second form takes the body parsed.
std::optional<std::string> abnormal_completion(std::string_view endpoint, std::string_view body);
std::optional<std::string> abnormal_parsed_completion(std::string_view endpoint,
                                                      const nlohmann::json& response);

// The token usage in a usage object (missing or malformed counts are 0).
Usage usage_of(const nlohmann::json& usage);
// The finish reason of a response's first choice ("" when it has none).
std::string first_finish_reason(const nlohmann::json& response);

}  // namespace dynrt::engines

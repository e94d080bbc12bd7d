// The OpenAI error body, {"error": {"message", "type", "param", "code"}}: the one builder that
// the gateway, the simulated engine's server and the runtime's replies answer errors with, so
// that a client sees one shape whoever refused it. Pure; any thread.
#pragma once

#include <string>
#include <string_view>

namespace dynrt::engines {

// The body, keys in the order OpenAI sends them; `param` (the field at fault) is null when
// empty. A message may quote what a client sent (a path, a header): bytes that are not UTF-8
// are replaced, so that building the body never fails.
std::string openai_error_body(std::string_view message, std::string_view type, int code,
                              std::string_view param = {});

// The error type an HTTP status is answered with when nothing more specific is known:
// not_found_error (404), timeout_error (408), server_error (5xx), else invalid_request_error.
std::string_view openai_error_type(int status);

}  // namespace dynrt::engines

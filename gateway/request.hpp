// The gateway's request path without sockets: a body and the tag headers in, a validated
// dynrt::Request (or the write's record keys) out, or the reason it was refused. Pure and
// thread-safe; the fuzz target http_request_fuzz drives it directly.
//
// Bodies are parsed strictly, so that every byte sequence means one thing: valid UTF-8 (no
// lone surrogates in escapes), nesting at most kMaxJsonDepth deep (checked while parsing, so a
// body of 100,000 `[` costs nothing), and no key twice in one object (ambiguous: parsers
// disagree on which one wins). The fields of a model call whose type dynrt or an engine relies
// on are checked (see check_fields in request.cpp and docs/operations.md); a field given as
// null counts as absent; every other field is passed through untouched. There is no limit on
// the number of messages other than the body limit.
#pragma once

#include "actors/runtime.hpp"
#include "runtime/json_text.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace dynrt::gateway {

using dynrt::kMaxJsonDepth;  // arrays and objects nested in a body (runtime/json_text.hpp)
inline constexpr std::size_t kMaxTagBytes = 256;  // one X-DynRT-* header value
inline constexpr std::string_view kToolsPrefix = "/v1/dynrt/tools/";
inline constexpr std::string_view kRunsPrefix = "/v1/dynrt/runs/";

// Why a request was refused; always answered 400.
struct Invalid {
  std::string message;
  std::string param;  // the field at fault (`messages[2].role`), empty when none is
};

struct ParsedJson {
  nlohmann::json value;
  Invalid invalid;
  bool ok() const { return invalid.message.empty(); }
};

// A strictly parsed JSON document (any type at the top level).
ParsedJson parse_strict_json(std::string_view text, std::size_t max_depth = kMaxJsonDepth);

struct ParsedCall {
  Request request;
  bool stream = false;  // answer as server-sent events
  Invalid invalid;
  bool ok() const { return invalid.message.empty(); }
};

// A model call (`path` /v1/chat/completions or /v1/completions) or a tool call
// (/v1/dynrt/tools/<name>, any JSON object as its arguments), with the tags from its headers.
ParsedCall parse_call(std::string_view path, std::string_view body, Tags tags);

struct ParsedWrites {
  std::vector<std::string> keys;
  Invalid invalid;
  bool ok() const { return invalid.message.empty(); }
};

// POST /v1/dynrt/writes: {"keys": ["record key", ...]}.
ParsedWrites parse_writes(std::string_view body);

// GET /v1/dynrt/runs/{workflow_id}[?workflow=NAME][&tenant=NAME] (`dynrt explain`).
struct ParsedRunQuery {
  std::string id;
  std::string workflow;  // empty: every workflow
  std::string tenant;    // as asked; only an admin key may ask for another tenant's runs
  bool tenant_given = false;
  Invalid invalid;
  bool ok() const { return invalid.message.empty(); }
};
// `target` is the whole request target (path and query), percent-encoded.
ParsedRunQuery parse_run_query(std::string_view target);

// True when `text` is well-formed UTF-8 (no overlong forms, surrogates or code points over
// U+10FFFF).
bool valid_utf8(std::string_view text);

}  // namespace dynrt::gateway

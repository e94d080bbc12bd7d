// Tool engines: run a tool call and return its output and read-set.
//
// A tool call is a tool name and JSON arguments (what a template's tool stage renders). The
// result is the tool's JSON output plus the external records it read, each with the version it
// saw, so a speculative result can be checked for freshness and invalidated by writes. Calls
// complete through a callback, from the tool engine's own thread or inline; nothing blocks the
// caller. Two kinds ship: HttpTool (a tool behind a URL) and Corpus (a built-in versioned
// retrieval corpus, so the ReAct and Sub-Agent workloads need no external service).
#pragma once

#include "engines/engine.hpp"
#include "runtime/endpoints.hpp"
#include "runtime/expected.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace dynrt::engines {

using dynrt::is_tool_endpoint;
using dynrt::kToolPrefix;
using dynrt::tool_name;

struct ToolCall {
  std::string tool;
  nlohmann::json arguments = nlohmann::json::object();
  std::string tenant = {};  // whose call it is (as EngineRequest::tenant); never sent on
};

struct ToolRead {
  std::string key;
  std::uint64_t version = 0;
  friend bool operator==(const ToolRead&, const ToolRead&) = default;
};

struct ToolResult {
  nlohmann::json output;
  std::vector<ToolRead> reads;
  std::vector<std::string> writes;  // records the call wrote (a write tool)
};

// A failed tool call, in the engines' vocabulary, so that the caller gets what the tool said:
// `rejected` (400) for a call the tool refuses (an unknown tool, bad arguments); a tool
// server's error status with its body and Retry-After as sent (`http_status`); a clean kind for
// a transport failure, a deadline or an answer that is not a tool response.
using ToolError = EngineError;
using ToolOutcome = Expected<ToolResult, ToolError>;
using ToolCallback = std::function<void(ToolOutcome)>;

class ToolEngine {
 public:
  virtual ~ToolEngine() = default;
  virtual bool has(std::string_view tool) const = 0;
  // The callback runs exactly once, with the result or a ToolError.
  virtual void call(ToolCall call, ToolCallback done) = 0;
};

// A tool's output as an engine result: its JSON as the body, finished with "stop".
EngineResult tool_result(const ToolResult& r, Duration took);

}  // namespace dynrt::engines

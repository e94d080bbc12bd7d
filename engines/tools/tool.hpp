// Tool engines: run a tool call and return its output and read-set.
//
// A tool call is a tool name and JSON arguments (what a template's tool stage renders). The
// result is the tool's JSON output plus the external records it read, each with the version it
// saw, so a speculative result can be checked for freshness and invalidated by writes. Calls
// complete through a callback, from the tool engine's own thread or inline; nothing blocks the
// caller. Two kinds ship: HttpTool (a tool behind a URL) and Corpus (a built-in versioned
// retrieval corpus, so the ReAct and Sub-Agent workloads need no external service).
#pragma once

#include "runtime/expected.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace dynrt::engines {

struct ToolCall {
  std::string tool;
  nlohmann::json arguments = nlohmann::json::object();
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

using ToolCallback = std::function<void(Expected<ToolResult>)>;

class ToolEngine {
 public:
  virtual ~ToolEngine() = default;
  virtual bool has(std::string_view tool) const = 0;
  // Errors: an unknown tool, bad arguments, a failed call. The callback runs exactly once.
  virtual void call(ToolCall call, ToolCallback done) = 0;
};

}  // namespace dynrt::engines

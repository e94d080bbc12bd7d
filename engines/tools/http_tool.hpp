// A tool behind a URL: POST {"tool": name, "arguments": {...}} as JSON, and read back
// {"output": ..., "reads": [{"key": "...", "version": N}, ...], "writes": ["..."]} ("reads" and
// "writes" optional). Runs on its own CurlLoop thread with connect and total deadlines. A failed
// call is a ToolError: an HTTP error status keeps the server's status, body and Retry-After (so
// a tool's 503 reaches its caller as a 503); a body that is not that shape is `malformed`;
// transport failures and deadlines keep their own kinds.
#pragma once

#include "engines/http/curl_loop.hpp"
#include "engines/tools/tool.hpp"

#include <memory>
#include <set>
#include <string>

namespace dynrt::engines {

struct HttpToolOptions {
  std::string url;
  std::set<std::string, std::less<>> tools;  // the tool names this URL serves
  Duration connect_timeout = std::chrono::seconds(5);
  Duration total_timeout = std::chrono::seconds(60);
};

class HttpTool final : public ToolEngine {
 public:
  explicit HttpTool(HttpToolOptions options);
  ~HttpTool() override;
  bool has(std::string_view tool) const override;
  void call(ToolCall call, ToolCallback done) override;

 private:
  HttpToolOptions options_;
  std::unique_ptr<CurlLoop> loop_;
};

// Parses a tool response body (exposed for tests).
Expected<ToolResult> parse_tool_response(std::string_view body);

}  // namespace dynrt::engines

// A tool behind a URL: POST {"tool": name, "arguments": {...}} as JSON, and read back
// {"output": ..., "reads": [{"key": "...", "version": N}, ...], "writes": ["..."]} ("reads" and
// "writes" optional). Runs on its own CurlLoop thread with connect and total deadlines; HTTP
// errors, bodies that are not that shape, and transport failures come back as errors.
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

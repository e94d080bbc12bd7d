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
#include <string_view>
#include <vector>

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

// A tool declared in dynrt's configuration, for any HTTP API: the call's arguments are the JSON
// body of a request to `url` (a GET sends them as the query string instead: strings as they
// are, other values as JSON), and its output is the response body (JSON, or the text as a
// string when it is not JSON). A status other than 2xx is a ToolError with the server's status,
// body and Retry-After; redirects are not followed (a 3xx is an error naming its Location), so
// no redirect can take a call to another host. Responses over `max_response_bytes` and calls
// over `timeout` are errors too. An error is never stored.
struct HttpToolSpec {
  std::string name;
  std::string url;
  std::string method = "POST";       // POST, PUT, PATCH or GET
  std::vector<std::string> headers;  // "Name: value", sent with every call
  Duration timeout = std::chrono::seconds(10);
  Duration connect_timeout = std::chrono::seconds(5);
  std::size_t max_response_bytes = std::size_t{1} << 20;
  // The URL's host is on the allowlist as a loopback or link-local host: it may be reached.
  // Otherwise a connection that lands on such an address (a name resolving there) is refused.
  bool allow_internal = false;
};

// Checks a tool's URL against the allowlist of hosts ("host" or "host:port"; a bare host allows
// every port): http or https, a host that is listed, and a loopback, link-local or unspecified
// host (127.0.0.0/8, localhost, ::1, 169.254.0.0/16, 0.0.0.0) only when listed explicitly. On
// success, whether the host is such an internal one (HttpToolSpec::allow_internal).
Expected<bool> check_tool_url(std::string_view url, const std::vector<std::string>& allow_hosts);

class HttpToolSet final : public ToolEngine {
 public:
  explicit HttpToolSet(std::vector<HttpToolSpec> tools);
  ~HttpToolSet() override;
  bool has(std::string_view tool) const override;
  void call(ToolCall call, ToolCallback done) override;

 private:
  std::vector<HttpToolSpec> tools_;
  std::unique_ptr<CurlLoop> loop_;
};

// Several tool engines as one: a call goes to the first that has the tool.
class ToolEngines final : public ToolEngine {
 public:
  explicit ToolEngines(std::vector<std::shared_ptr<ToolEngine>> engines)
      : engines_(std::move(engines)) {}
  bool has(std::string_view tool) const override;
  void call(ToolCall call, ToolCallback done) override;

 private:
  std::vector<std::shared_ptr<ToolEngine>> engines_;
};

// Parses a tool response body (exposed for tests).
Expected<ToolResult> parse_tool_response(std::string_view body);

}  // namespace dynrt::engines

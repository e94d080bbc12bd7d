#include "engines/tools/http_tool.hpp"

namespace dynrt::engines {

using nlohmann::json;

Expected<ToolResult> parse_tool_response(std::string_view body) {
  const json j = json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("output")) {
    return make_error("the tool's response is not a JSON object with \"output\"");
  }
  ToolResult r;
  r.output = j["output"];
  if (j.contains("reads")) {
    if (!j["reads"].is_array()) return make_error("the tool's \"reads\" is not a list");
    for (const json& read : j["reads"]) {
      if (!read.is_object() || !read.contains("key") || !read["key"].is_string() ||
          !read.contains("version") || !read["version"].is_number_unsigned()) {
        return make_error("each of the tool's reads needs a string \"key\" and a version >= 0");
      }
      r.reads.push_back(ToolRead{read["key"], read["version"].get<std::uint64_t>()});
    }
  }
  if (j.contains("writes")) {
    if (!j["writes"].is_array()) return make_error("the tool's \"writes\" is not a list");
    for (const json& w : j["writes"]) {
      if (!w.is_string()) return make_error("each of the tool's writes must be a string key");
      r.writes.push_back(w.get<std::string>());
    }
  }
  return r;
}

namespace {

constexpr std::size_t kErrorBodyLimit = 64 << 10;  // keep this much of a tool's error body

class ToolTransfer final : public HttpHandler {
 public:
  explicit ToolTransfer(ToolCallback done) : done_(std::move(done)) {}
  void on_status(int status) override { status_ = status; }
  void on_header(std::string_view name, std::string_view value) override {
    if (header_is(name, "retry-after")) retry_after_ = std::string(value);
  }
  bool on_data(std::string_view bytes) override {
    body_.append(bytes);
    return true;
  }
  void on_done(const HttpOutcome& o) override {
    if (o.kind != HttpOutcome::Kind::ok)
      return done_(ToolError{error_kind(o.kind), o.status, {}, "tool call failed: " + o.message});
    if (status_ != 200) {
      // The tool server's own answer, for the caller: its status, body and Retry-After.
      return done_(ToolError{
          ErrorKind::http_status, status_, body_.substr(0, kErrorBodyLimit),
          "the tool answered HTTP " + std::to_string(status_) + ": " + body_.substr(0, 500),
          retry_after_});
    }
    auto r = parse_tool_response(body_);
    if (!r) return done_(ToolError{ErrorKind::malformed, status_, {}, r.error().message});
    done_(std::move(*r));
  }

 private:
  ToolCallback done_;
  int status_ = 0;
  std::string body_;
  std::string retry_after_;
};

}  // namespace

HttpTool::HttpTool(HttpToolOptions options)
    : options_(std::move(options)), loop_(std::make_unique<CurlLoop>(64)) {}

HttpTool::~HttpTool() {
  loop_->stop();
}

bool HttpTool::has(std::string_view tool) const {
  return options_.tools.find(tool) != options_.tools.end();
}

void HttpTool::call(ToolCall call, ToolCallback done) {
  HttpCall http;
  http.url = options_.url;
  http.body = json{{"tool", call.tool}, {"arguments", call.arguments}}.dump();
  http.headers = {"Content-Type: application/json", "Accept: application/json"};
  http.connect_timeout = options_.connect_timeout;
  http.total_timeout = options_.total_timeout;
  http.max_response_bytes = 16 << 20;
  loop_->start(std::move(http), std::make_shared<ToolTransfer>(std::move(done)));
}

}  // namespace dynrt::engines

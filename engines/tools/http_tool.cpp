#include "engines/tools/http_tool.hpp"

#include "runtime/json_text.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <optional>

namespace dynrt::engines {

using nlohmann::json;

Expected<ToolResult> parse_tool_response(std::string_view body) {
  const json j = parse_json(body);
  if (j.is_discarded() && json_nests_deeper(body))
    return make_error(json_too_deep("the tool's response"));
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

// A tool server's answer, read whole: its status, body, Retry-After and Location. Subclasses
// turn it into the tool's outcome.
class ToolAnswer : public HttpHandler {
 public:
  explicit ToolAnswer(ToolCallback done) : done_(std::move(done)) {}
  void on_status(int status) override { status_ = status; }
  void on_header(std::string_view name, std::string_view value) override {
    if (header_is(name, "retry-after")) retry_after_ = std::string(value);
    if (header_is(name, "location")) location_ = std::string(value.substr(0, 300));
  }
  bool on_data(std::string_view bytes) override {
    body_.append(bytes);
    return true;
  }

 protected:
  // The transfer's failure, or the server's error status (with its body and Retry-After), as
  // the caller gets it; nullopt when the answer is a success (`ok_status`).
  std::optional<ToolError> failure(const HttpOutcome& o, bool ok_status) const {
    if (o.kind != HttpOutcome::Kind::ok)
      return ToolError{error_kind(o.kind), o.status, {}, "tool call failed: " + o.message};
    if (ok_status) return std::nullopt;
    return ToolError{
        ErrorKind::http_status, status_, body_.substr(0, kErrorBodyLimit),
        "the tool answered HTTP " + std::to_string(status_) + ": " + body_.substr(0, 500),
        retry_after_};
  }

  ToolCallback done_;
  int status_ = 0;
  std::string body_;
  std::string retry_after_;
  std::string location_;
};

// The tool protocol's answer: {"output", "reads", "writes"}.
class ToolTransfer final : public ToolAnswer {
 public:
  using ToolAnswer::ToolAnswer;
  void on_done(const HttpOutcome& o) override {
    if (auto e = failure(o, status_ == 200)) return done_(std::move(*e));
    auto r = parse_tool_response(body_);
    if (!r) return done_(ToolError{ErrorKind::malformed, status_, {}, r.error().message});
    done_(std::move(*r));
  }
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

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool internal_host(const std::string& host) {
  const auto h = lower(host);
  if (h == "localhost" || h.ends_with(".localhost")) return true;
  const bool ip =
      h.find_first_not_of("0123456789.") == std::string::npos || h.find(':') != std::string::npos;
  return ip && internal_address(h);
}

// A plain HTTP tool's answer: the body as JSON output (or as a string), or the server's error.
class PlainTransfer final : public ToolAnswer {
 public:
  using ToolAnswer::ToolAnswer;
  void on_done(const HttpOutcome& o) override {
    if (o.kind == HttpOutcome::Kind::ok && status_ >= 300 && status_ < 400)
      return done_(ToolError{ErrorKind::http_status,
                             502,
                             {},
                             "the tool answered HTTP " + std::to_string(status_) +
                                 " (a redirect to " + location_ +
                                 "); dynrt does not follow a tool's redirects"});
    if (auto e = failure(o, status_ >= 200 && status_ < 300)) return done_(std::move(*e));
    ToolResult r;
    r.output = parse_json(body_);
    // A body that is not JSON is the tool's text; one nested too deep to handle is refused.
    if (r.output.is_discarded() && json_nests_deeper(body_))
      return done_(
          ToolError{ErrorKind::malformed, status_, {}, json_too_deep("the tool's answer")});
    if (r.output.is_discarded()) r.output = body_;
    done_(std::move(r));
  }
};

}  // namespace

Expected<bool> check_tool_url(std::string_view url, const std::vector<std::string>& allow_hosts) {
  std::unique_ptr<CURLU, void (*)(CURLU*)> u(curl_url(), curl_url_cleanup);
  const std::string text(url);
  if (!u || curl_url_set(u.get(), CURLUPART_URL, text.c_str(), 0) != CURLUE_OK)
    return make_error("'" + text + "' is not a URL");
  const auto part = [&](CURLUPart p) {
    char* v = nullptr;
    std::string out;
    if (curl_url_get(u.get(), p, &v, CURLU_DEFAULT_PORT) == CURLUE_OK && v) out = v;
    curl_free(v);
    return out;
  };
  const auto scheme = lower(part(CURLUPART_SCHEME));
  if (scheme != "http" && scheme != "https")
    return make_error("'" + text + "': a tool's URL must be http or https");
  auto host = lower(part(CURLUPART_HOST));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  const auto port = part(CURLUPART_PORT);
  for (const auto& allowed : allow_hosts) {
    auto a = lower(allowed);
    std::string a_port;
    if (const auto colon = a.rfind(':');
        colon != std::string::npos && a.find(']') == std::string::npos &&
        a.find(':') == colon) {  // host:port (an IPv6 address without brackets has several)
      a_port = a.substr(colon + 1);
      a = a.substr(0, colon);
    } else if (a.size() > 2 && a.front() == '[') {
      const auto close = a.find(']');
      if (close != std::string::npos && close + 1 < a.size() && a[close + 1] == ':')
        a_port = a.substr(close + 2);
      a = a.substr(1, close == std::string::npos ? a.size() - 1 : close - 1);
    }
    if (a == host && (a_port.empty() || a_port == port)) return internal_host(host);
  }
  return make_error("tool host '" + host + (port.empty() ? "" : ":" + port) +
                    "' is not on tools.allow_hosts" +
                    (internal_host(host) ? " (a loopback or link-local host must be listed "
                                           "explicitly)"
                                         : ""));
}

HttpToolSet::HttpToolSet(std::vector<HttpToolSpec> tools)
    : tools_(std::move(tools)), loop_(std::make_unique<CurlLoop>(64)) {}

HttpToolSet::~HttpToolSet() {
  loop_->stop();
}

bool HttpToolSet::has(std::string_view tool) const {
  return std::any_of(tools_.begin(), tools_.end(), [&](const auto& t) { return t.name == tool; });
}

void HttpToolSet::call(ToolCall call, ToolCallback done) {
  const auto it = std::find_if(tools_.begin(), tools_.end(),
                               [&](const auto& t) { return t.name == call.tool; });
  if (it == tools_.end())
    return done(ToolError{ErrorKind::rejected, 400, {}, "no tool named \"" + call.tool + "\""});
  const HttpToolSpec& t = *it;
  HttpCall http;
  http.method = t.method;
  http.url = t.url;
  if (t.method == "GET") {
    std::string query;
    if (call.arguments.is_object())
      for (const auto& [k, v] : call.arguments.items()) {
        const std::string value = v.is_string() ? v.get<std::string>() : v.dump();
        char* ek = curl_easy_escape(nullptr, k.data(), static_cast<int>(k.size()));
        char* ev = curl_easy_escape(nullptr, value.data(), static_cast<int>(value.size()));
        query += (query.empty() ? "" : "&") + std::string(ek ? ek : "") + "=" + (ev ? ev : "");
        curl_free(ek);
        curl_free(ev);
      }
    if (!query.empty()) http.url += (http.url.find('?') == std::string::npos ? "?" : "&") + query;
  } else {
    http.body = call.arguments.dump();
    http.headers.push_back("Content-Type: application/json");
  }
  http.headers.push_back("Accept: application/json");
  http.headers.insert(http.headers.end(), t.headers.begin(), t.headers.end());
  http.connect_timeout = t.connect_timeout;
  http.total_timeout = t.timeout;
  http.max_response_bytes = t.max_response_bytes;
  http.allow_internal = t.allow_internal;
  loop_->start(std::move(http), std::make_shared<PlainTransfer>(std::move(done)));
}

bool ToolEngines::has(std::string_view tool) const {
  return std::any_of(engines_.begin(), engines_.end(), [&](const auto& e) { return e->has(tool); });
}

void ToolEngines::call(ToolCall call, ToolCallback done) {
  for (const auto& e : engines_)
    if (e->has(call.tool)) return e->call(std::move(call), std::move(done));
  done(ToolError{ErrorKind::rejected, 400, {}, "no tool named \"" + call.tool + "\""});
}

}  // namespace dynrt::engines

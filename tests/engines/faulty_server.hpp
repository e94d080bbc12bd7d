// A scripted HTTP server on 127.0.0.1:0 that misbehaves on purpose: error statuses, invalid
// JSON, streams that end without [DONE], reset or stall mid-way, no response at all. Each
// connection is served on a thread of its own; the destructor unblocks and joins them all.
// Every request is recorded; POST /abort_request (SGLang's) is always answered 200.
//
// A script can vary the fault per request: script(needle, modes) makes the next requests whose
// body contains `needle` ("" matches all) take `modes` in order; once they are used up, the
// server's own mode applies (fails the first N attempts, then succeeds). The faults no server
// can script (a refused connection, a connect timeout) come from refused_url() and
// FullListener.
//
// These are mocks because a real engine cannot be made to produce these faults on demand: an
// error event inside a 200 stream (vLLM sends one when generation fails mid-way), a 200 body
// that is an error object, a choice cut off without a finish reason. The shapes copy vLLM's.
#pragma once

#include <utility>  // before Boost.Asio, whose awaitable.hpp uses std::exchange

#include <boost/asio.hpp>

#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace dynrt::testing {

// The answer of Mode::ok to a request that does not stream.
inline constexpr const char* kCompletion =
    R"({"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,)"
    R"("message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],)"
    R"("usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}})";

// The error the stream_error_* modes send as an SSE event (and error_object_200 as its body),
// as vLLM reports a request that failed while it generated.
inline constexpr const char* kErrorEvent =
    R"({"error":{"message":"the engine failed mid-way","type":"InternalServerError",)"
    R"("param":null,"code":500}})";

// The answer of Mode::stream_no_finish to a request that does not stream: no finish reason.
inline constexpr const char* kUnfinishedCompletion =
    R"({"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,)"
    R"("message":{"role":"assistant","content":"hi"},"finish_reason":null}],)"
    R"("usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}})";

// The answer of Mode::stream_tool_calls to a request that does not stream: two tool calls, as
// vLLM answers with a tool parser.
inline constexpr const char* kToolCallCompletion =
    R"({"id":"chatcmpl-t","object":"chat.completion","created":5,"model":"m","choices":[)"
    R"({"index":0,"message":{"role":"assistant","content":null,"tool_calls":[)"
    R"({"id":"call-1","type":"function","function":{"name":"get_weather",)"
    R"("arguments":"{\"city\": \"Oslo\"}"}},)"
    R"({"id":"call-2","type":"function","function":{"name":"get_time",)"
    R"("arguments":"{\"tz\": \"CET\"}"}}]},)"
    R"("logprobs":null,"finish_reason":"tool_calls","stop_reason":null}],)"
    R"("usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}})";

class FaultyServer {
 public:
  enum class Mode {
    status_500,      // 500 with an OpenAI error body
    status_429,      // 429 with Retry-After
    invalid_json,    // 200, a body that is not JSON
    stream_no_done,  // 200, two SSE chunks, then a clean end without [DONE]
    stream_reset,    // 200, one SSE chunk, then a TCP reset
    stream_stall,    // 200, one SSE chunk, then silence
    bad_chunk,       // 200, an SSE data line that is not JSON
    no_response,     // reads the request, never answers
    respond,         // 200 with `body` (as JSON; to a stream, as one SSE event and [DONE])
    status_502,      // 502 with an OpenAI error body
    status_503,      // 503 with Retry-After and an OpenAI error body
    body_truncated,  // 200, a Content-Length longer than the body, then a clean close
    ok,              // a valid answer: a chat.completion, or an SSE stream ending in [DONE]
    // The stream_* modes answer a request that does not stream with the same fault in a body:
    // an error object (error_object_200), kUnfinishedCompletion, kToolCallCompletion.
    stream_error_midway,  // 200, two content chunks, the kErrorEvent event, then [DONE]
    stream_error_only,    // 200, the kErrorEvent event, then [DONE]
    error_object_200,     // 200, a body that is kErrorEvent (a stream: stream_error_only)
    stream_no_finish,     // 200, two content chunks and [DONE]; no chunk has a finish_reason
    stream_tool_calls,    // 200, a vLLM-like streamed tool call: role, tool_calls deltas (id,
                          // type, name, then argument fragments) for two calls, finish
                          // "tool_calls", the usage chunk when asked for, [DONE]
  };

  explicit FaultyServer(Mode mode, std::string body = {}) : mode_(mode), body_(std::move(body)) {
    namespace net = boost::asio;
    acceptor_.open(net::ip::tcp::v4());
    acceptor_.set_option(net::socket_base::reuse_address(true));
    acceptor_.bind({net::ip::make_address("127.0.0.1"), 0});
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    accept_thread_ = std::thread([this] { accept_loop(); });
  }

  ~FaultyServer() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    boost::system::error_code ec;
    {
      // A blocked accept() does not return when another thread closes its socket: connect once
      // to wake it; it then sees stop_.
      tcp::socket wake(io_);
      wake.connect({boost::asio::ip::make_address("127.0.0.1"), port_}, ec);
    }
    accept_thread_.join();
    acceptor_.close(ec);
    {
      std::lock_guard lock(mutex_);
      // shutdown() unblocks handlers waiting on the network without closing a socket they
      // may be using; the sockets close once their handlers are joined.
      for (auto& s : sockets_) {
        if (s->is_open()) ::shutdown(s->native_handle(), SHUT_RDWR);
      }
    }
    for (auto& t : handlers_)
      t.join();
  }

  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // The value of Retry-After in 429 and 503 answers (seconds); "" leaves the header out.
  void set_retry_after(std::string seconds) {
    std::lock_guard lock(mutex_);
    retry_after_ = std::move(seconds);
  }
  void script(std::string needle, std::vector<Mode> modes) {
    std::lock_guard lock(mutex_);
    rules_.push_back({std::move(needle), {modes.begin(), modes.end()}});
  }
  int requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }

  struct Recorded {
    std::string head;  // request line and headers
    std::string body;
  };
  std::vector<Recorded> recorded() const {
    std::lock_guard lock(mutex_);
    return recorded_;
  }
  // Waits (bounded) until `count` requests have been read.
  bool await_requests(int count, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return requests_ >= count; });
  }

 private:
  using tcp = boost::asio::ip::tcp;

  void accept_loop() {
    while (true) {
      auto socket = std::make_unique<tcp::socket>(io_);
      boost::system::error_code ec;
      acceptor_.accept(*socket, ec);
      if (ec) return;
      std::lock_guard lock(mutex_);
      if (stop_) return;  // the destructor's wake-up call
      tcp::socket* raw = socket.get();
      sockets_.push_back(std::move(socket));  // owned here: alive until the server goes
      handlers_.emplace_back([this, raw] { serve(*raw); });
    }
  }

  std::optional<Recorded> read_request(tcp::socket& s) {
    std::string data;
    char buf[4096];
    boost::system::error_code ec;
    std::size_t header_end = std::string::npos;
    while ((header_end = data.find("\r\n\r\n")) == std::string::npos) {
      const std::size_t n = s.read_some(boost::asio::buffer(buf), ec);
      if (ec) return std::nullopt;
      data.append(buf, n);
    }
    std::size_t length = 0;
    const auto cl = data.find("Content-Length: ");
    if (cl != std::string::npos && cl < header_end) length = std::stoul(data.substr(cl + 16));
    while (data.size() < header_end + 4 + length) {
      const std::size_t n = s.read_some(boost::asio::buffer(buf), ec);
      if (ec) return std::nullopt;
      data.append(buf, n);
    }
    Recorded r{data.substr(0, header_end), data.substr(header_end + 4, length)};
    {
      std::lock_guard lock(mutex_);
      recorded_.push_back(r);
      ++requests_;
    }
    cv_.notify_all();
    return r;
  }

  static std::string chunk(const std::string& payload) {
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", payload.size());
    return size + payload + "\r\n";
  }

  void write(tcp::socket& s, const std::string& text) {
    boost::system::error_code ec;
    boost::asio::write(s, boost::asio::buffer(text), ec);
  }

  void hold() {  // until the server stops
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return stop_; });
  }

  Mode mode_for(const Recorded& r) {
    std::lock_guard lock(mutex_);
    for (auto& rule : rules_) {
      if (!rule.modes.empty() && r.body.find(rule.needle) != std::string::npos) {
        const Mode m = rule.modes.front();
        rule.modes.pop_front();
        return m;
      }
    }
    return mode_;
  }

  std::string retry_after_header() {
    std::lock_guard lock(mutex_);
    return retry_after_.empty() ? std::string() : "Retry-After: " + retry_after_ + "\r\n";
  }

  void serve(tcp::socket& s) {
    const auto request = read_request(s);
    if (!request) return;
    const std::string sse_head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
        "Connection: close\r\n\r\n";
    const std::string event =
        "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"model\":\"m\","
        "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n";
    auto plain = [&](const std::string& status, const std::string& extra, const std::string& body) {
      // One request per connection: a client must not reuse it for the next.
      write(s, "HTTP/1.1 " + status +
                   "\r\nContent-Type: application/json\r\nConnection: close\r\n" + extra +
                   "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
    };
    if (request->head.rfind("POST /abort_request ", 0) == 0) return plain("200 OK", "", "{}");
    const bool stream = request->body.find("\"stream\":true") != std::string::npos;
    switch (mode_for(*request)) {
      case Mode::status_500:
        plain("500 Internal Server Error", "",
              R"({"error":{"message":"engine exploded","type":"server_error","code":500}})");
        break;
      case Mode::status_429:
        plain("429 Too Many Requests", retry_after_header(),
              R"({"error":{"message":"slow down","type":"rate_limit","code":429}})");
        break;
      case Mode::status_502:
        plain("502 Bad Gateway", "",
              R"({"error":{"message":"upstream unreachable","type":"server_error","code":502}})");
        break;
      case Mode::status_503:
        plain("503 Service Unavailable", retry_after_header(),
              R"({"error":{"message":"overloaded","type":"server_error","code":503}})");
        break;
      case Mode::body_truncated: {
        const std::string body = R"({"id":"x","object":"chat.completion","choices":[)";
        write(s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                     std::to_string(body.size() * 2) + "\r\n\r\n" + body);
        boost::system::error_code ec;
        std::lock_guard lock(mutex_);  // the destructor closes sockets under it too
        s.shutdown(tcp::socket::shutdown_both, ec);
        s.close(ec);
        break;
      }
      case Mode::ok:
        if (stream) {
          const std::string last =
              "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"model\":\"m\","
              "\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";
          write(s, sse_head + chunk(event) + chunk(last) + chunk("data: [DONE]\n\n") + "0\r\n\r\n");
        } else {
          plain("200 OK", "", kCompletion);
        }
        break;
      case Mode::invalid_json:
        plain("200 OK", "", "this is not json");
        break;
      case Mode::respond:
        if (stream)
          write(s, sse_head + chunk("data: " + body_ + "\n\n") + chunk("data: [DONE]\n\n") +
                       "0\r\n\r\n");
        else
          plain("200 OK", "", body_);
        break;
      case Mode::stream_no_done:
        write(s, sse_head + chunk(event) + chunk(event) + "0\r\n\r\n");
        break;
      case Mode::stream_reset: {
        write(s, sse_head + chunk(event));
        boost::system::error_code ec;
        std::lock_guard lock(mutex_);  // the destructor closes sockets under it too
        s.set_option(boost::asio::socket_base::linger(true, 0), ec);  // close with RST
        s.close(ec);
        break;
      }
      case Mode::stream_stall:
        write(s, sse_head + chunk(event));
        hold();
        break;
      case Mode::bad_chunk:
        write(s, sse_head + chunk("data: {not json\n\n"));
        hold();
        break;
      case Mode::no_response:
        hold();
        break;
      case Mode::stream_error_midway:
        if (!stream) return plain("200 OK", "", kErrorEvent);
        write(s, sse_head + chunk(event) + chunk(event) + chunk(sse(kErrorEvent)) +
                     chunk("data: [DONE]\n\n") + "0\r\n\r\n");
        break;
      case Mode::stream_error_only:
      case Mode::error_object_200:
        if (!stream) return plain("200 OK", "", kErrorEvent);
        write(s, sse_head + chunk(sse(kErrorEvent)) + chunk("data: [DONE]\n\n") + "0\r\n\r\n");
        break;
      case Mode::stream_no_finish:
        if (!stream) return plain("200 OK", "", kUnfinishedCompletion);
        write(s, sse_head + chunk(event) + chunk(event) + chunk("data: [DONE]\n\n") + "0\r\n\r\n");
        break;
      case Mode::stream_tool_calls: {
        if (!stream) return plain("200 OK", "", kToolCallCompletion);
        const bool usage = request->body.find("\"include_usage\":true") != std::string::npos;
        std::string out = sse_head;
        for (const auto& c : tool_call_chunks(usage))
          out += chunk(sse(c));
        write(s, out + chunk("data: [DONE]\n\n") + "0\r\n\r\n");
        break;
      }
    }
  }

  static std::string sse(const std::string& payload) { return "data: " + payload + "\n\n"; }

  // vLLM's shape: the role chunk, each call's id, type and name, its arguments in fragments,
  // the finish chunk with stop_reason, then (when asked) the usage chunk with no choices.
  static std::vector<std::string> tool_call_chunks(bool usage) {
    const std::string head =
        R"({"id":"chatcmpl-t","object":"chat.completion.chunk","created":5,"model":"m",)";
    auto delta = [&](const std::string& d, const std::string& finish = "null",
                     const std::string& extra = "") {
      return head + R"("choices":[{"index":0,"delta":)" + d +
             R"(,"logprobs":null,"finish_reason":)" + finish + extra + "}]" +
             (usage ? R"(,"usage":null)" : "") + "}";
    };
    auto call = [](int index, const std::string& fields) {
      return R"({"tool_calls":[{"index":)" + std::to_string(index) + "," + fields + "}]}";
    };
    std::vector<std::string> out = {
        delta(R"({"role":"assistant","content":""})"),
        delta(call(0, R"("id":"call-1","type":"function","function":{"name":"get_weather"})")),
        delta(call(0, R"("function":{"arguments":"{\"city\": "})")),
        delta(call(0, R"("function":{"arguments":"\"Oslo\"}"})")),
        delta(call(1, R"("id":"call-2","type":"function","function":{"name":"get_time",)"
                      R"("arguments":""})")),
        delta(call(1, R"("function":{"arguments":"{\"tz\": \"CET\"}"})")),
        delta(R"({"content":""})", R"("tool_calls")", R"(,"stop_reason":null)"),
    };
    if (usage)
      out.push_back(head + R"("choices":[],"usage":{"prompt_tokens":9,"completion_tokens":12,)"
                           R"("total_tokens":21}})");
    return out;
  }

  struct Rule {
    std::string needle;
    std::deque<Mode> modes;
  };

  Mode mode_;
  std::string body_;
  std::string retry_after_ = "2";  // guarded by mutex_
  std::vector<Rule> rules_;        // guarded by mutex_
  boost::asio::io_context io_;
  tcp::acceptor acceptor_{io_};
  std::uint16_t port_ = 0;
  std::thread accept_thread_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<std::unique_ptr<tcp::socket>> sockets_;
  std::vector<std::thread> handlers_;
  int requests_ = 0;  // guarded by mutex_
  std::vector<Recorded> recorded_;
};

// A loopback URL where nothing listens: connecting is refused.
inline std::string refused_url() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor a(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  const auto port = a.local_endpoint().port();
  a.close();  // nobody listens there now
  return "http://127.0.0.1:" + std::to_string(port);
}

// A listener with a backlog of zero that never accepts, its queue filled by one connection:
// Linux drops further SYNs, so a connect() there hangs until the client's connect timeout.
class FullListener {
 public:
  FullListener() {
    namespace net = boost::asio;
    acceptor_.open(net::ip::tcp::v4());
    acceptor_.bind({net::ip::make_address("127.0.0.1"), 0});
    acceptor_.listen(0);
    filler_.connect(acceptor_.local_endpoint());  // completes: the queue is now full
  }
  std::string base_url() const {
    return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }

 private:
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_{io_};
  boost::asio::ip::tcp::socket filler_{io_};
};

}  // namespace dynrt::testing

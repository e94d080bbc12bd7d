// A scripted HTTP server on 127.0.0.1:0 that misbehaves on purpose: error statuses, invalid
// JSON, streams that end without [DONE], reset or stall mid-way, no response at all. Each
// connection is served on a thread of its own; the destructor unblocks and joins them all.
// Every request is recorded; POST /abort_request (SGLang's) is always answered 200.
#pragma once

#include <boost/asio.hpp>

#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace dynrt::testing {

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
    respond,         // 200 with `body` (as JSON), for tool tests
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

  void serve(tcp::socket& s) {
    const auto request = read_request(s);
    if (!request) return;
    const std::string sse_head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    const std::string event =
        "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"model\":\"m\","
        "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n";
    auto plain = [&](const std::string& status, const std::string& extra, const std::string& body) {
      write(s, "HTTP/1.1 " + status + "\r\nContent-Type: application/json\r\n" + extra +
                   "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
    };
    if (request->head.rfind("POST /abort_request ", 0) == 0) return plain("200 OK", "", "{}");
    switch (mode_) {
      case Mode::status_500:
        plain("500 Internal Server Error", "",
              R"({"error":{"message":"engine exploded","type":"server_error","code":500}})");
        break;
      case Mode::status_429:
        plain("429 Too Many Requests", "Retry-After: 2\r\n",
              R"({"error":{"message":"slow down","type":"rate_limit","code":429}})");
        break;
      case Mode::invalid_json:
        plain("200 OK", "", "this is not json");
        break;
      case Mode::respond:
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
    }
  }

  Mode mode_;
  std::string body_;
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

}  // namespace dynrt::testing

// The HTTP/1.1 server core under both of dynrt's servers: the gateway (gateway/server.hpp) and
// the simulated engine's server (engines/sim/server.hpp). It owns what a server is made of below
// its routes: the listening socket and its I/O threads, keep-alive connections with their
// deadlines and limits, server-sent event streams, cancelling a call whose client went away,
// the connection cap, and an orderly end of a connection (over TLS, a close_notify).
//
//   HttpListener    binds at once (an error names the address and the OS's reason), accepts on
//                   a fixed pool of I/O threads, pauses after a failed accept (out of
//                   descriptors), answers a connection over max_connections 503 and closes it.
//   HttpConnection  one client connection; a server derives from it and answers on_request()
//                   with respond(), or begins a call that ends later with end_call().
//   HttpTransport   the bytes of a connection: plain TCP here; a server may layer another
//                   stream over it (the gateway's TLS, gateway/server.cpp) without this core
//                   knowing of it.
//   ActiveCalls     the calls in flight, so that stopping can wait for them and cancel the rest.
//
// What a connection does, whatever server it serves: a request must arrive whole within
// header_timeout of its first byte (else 408, or a quiet close when nothing came), and a
// kept-alive connection waits idle_timeout for the next one; a body over max_body_bytes is
// refused 413 before it is buffered, headers over max_header_bytes 431; conflicting
// Content-Length and Transfer-Encoding, or a transfer coding other than chunked, 400 and the
// connection closed. Errors come in the OpenAI shape (engines/openai/error_body.hpp).
//
// Threads: every HttpConnection member runs on the connection's strand; results from other
// threads come through post(). HttpListener's members and ActiveCalls may be called from any
// thread. Nothing here knows of CAF.
#pragma once

#include "runtime/expected.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace dynrt::engines {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: any free port (HttpListener::port() tells which)
  int threads = 2;
  std::size_t max_body_bytes = std::size_t{8} << 20;
  std::size_t max_header_bytes = std::size_t{16} << 10;
  std::chrono::milliseconds header_timeout{10'000};  // to receive a whole request
  std::chrono::milliseconds idle_timeout{60'000};    // a kept-alive connection waiting for more
  // Over it: 503 with Retry-After, closed.
  std::size_t max_connections = std::numeric_limits<std::size_t>::max();
};

// A connection's byte stream. Each operation completes on the connection's strand (the
// executor of tcp()); at most one read and one write are outstanding at a time.
class HttpTransport {
 public:
  using Tcp = boost::beast::tcp_stream;
  using Parser = boost::beast::http::request_parser<boost::beast::http::string_body>;
  using Response = boost::beast::http::response<boost::beast::http::string_body>;
  using HeaderWriter = boost::beast::http::response_serializer<boost::beast::http::empty_body>;
  using Done = std::function<void(boost::beast::error_code)>;
  using Moved = std::function<void(boost::beast::error_code, std::size_t)>;

  virtual ~HttpTransport() = default;

  virtual Tcp& tcp() = 0;  // the lowest layer: its socket, and its expiry
  // A secure transport shakes hands before the first request and ends in order with a
  // shutdown (TLS close_notify); a plain one does neither.
  virtual bool secure() const { return false; }
  virtual void handshake(Done done) { done({}); }
  virtual void shutdown(Done done) { done({}); }
  // Does `ec` say that the client ended the connection (and so nobody is left to answer)?
  // Over TLS, a close without a close_notify reads as a truncated stream too.
  virtual bool client_closed(const boost::beast::error_code& ec) const {
    return ec == boost::beast::http::error::end_of_stream || ec == boost::asio::error::eof ||
           ec == boost::asio::error::connection_reset;
  }

  virtual void read_some(boost::asio::mutable_buffer into, Moved done) = 0;
  virtual void read(boost::beast::flat_buffer& buffer, Parser& parser, Moved done) = 0;
  virtual void write(boost::asio::const_buffer bytes, Moved done) = 0;
  virtual void write(Response& response, Moved done) = 0;
  virtual void write_header(HeaderWriter& header, Moved done) = 0;
};

// HttpTransport over any Beast stream; a secure one overrides secure(), handshake() and
// shutdown().
template <class Stream>
class BeastTransport : public HttpTransport {
 public:
  explicit BeastTransport(Stream stream) : stream_(std::move(stream)) {}

  Tcp& tcp() override { return boost::beast::get_lowest_layer(stream_); }
  void read_some(boost::asio::mutable_buffer into, Moved done) override {
    stream_.async_read_some(into, std::move(done));
  }
  void read(boost::beast::flat_buffer& buffer, Parser& parser, Moved done) override {
    boost::beast::http::async_read(stream_, buffer, parser, std::move(done));
  }
  void write(boost::asio::const_buffer bytes, Moved done) override {
    boost::asio::async_write(stream_, bytes, std::move(done));
  }
  void write(Response& response, Moved done) override {
    boost::beast::http::async_write(stream_, response, std::move(done));
  }
  void write_header(HeaderWriter& header, Moved done) override {
    boost::beast::http::async_write_header(stream_, header, std::move(done));
  }

 protected:
  Stream stream_;
};

using PlainTransport = BeastTransport<boost::beast::tcp_stream>;
extern template class BeastTransport<boost::beast::tcp_stream>;

class HttpListener;

// One client connection. A server derives from it: on_request() answers request() through
// respond(), or begins a call (begin_call) whose result, posted back to the strand, streams
// with open_stream() and stream_event() and ends with end_call(). While a call is in flight a
// client that goes away (or a write to it that fails) gets on_abandoned(), then the connection
// is closed.
class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  using Request = boost::beast::http::request<boost::beast::http::string_body>;
  using Response = HttpTransport::Response;
  using Status = boost::beast::http::status;
  using Header = std::pair<std::string_view, std::string_view>;

  virtual ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Posted to the strand: the handshake (if any), then the first request.
  void start();

 protected:
  HttpConnection(std::unique_ptr<HttpTransport> transport, HttpListener& listener);

  // request() holds a whole request: answer it, now or later.
  virtual void on_request() = 0;
  // The call in flight lost its client: cancel it. Its end_call() may still come.
  virtual void on_abandoned() = 0;

  const Request& request() const { return request_; }
  bool closed() const { return closed_; }
  // Runs `f` on this connection's strand.
  // The I/O context the connection runs on. Whoever keeps the connection alive from outside the
  // listener's threads (a call's callbacks) keeps this too, and lets go of the connection
  // first: a connection must not outlive its context.
  std::shared_ptr<boost::asio::io_context> context() const { return ioc_.lock(); }

  template <class F>
  void post(F&& f) {
    boost::asio::post(transport_->tcp().get_executor(), std::forward<F>(f));
  }

  // A whole response to request(): its version, keep-alive and length are set here; then the
  // next request is read, or the connection ends.
  Response response(Status status, std::string body, std::string_view content_type) const;
  void respond(Response response);
  void respond(Status status, std::string body, std::string_view content_type);
  // An OpenAI error body, its type from the status (openai_error_type).
  void respond_error(Status status, std::string_view message);

  // A call begins: it answers through end_call(), and until then the connection watches for
  // its client going away. `streaming`: it may be answered as server-sent events.
  void begin_call(bool streaming);
  // The event-stream header (a streaming call's, once): 200, text/event-stream, chunked.
  void open_stream(std::initializer_list<Header> extra = {});
  // One event, `data: <data>`, sent with whatever else is queued by the next write.
  void stream_event(std::string data);
  // Whole SSE frames as they are (`event: NAME\ndata: ...\n\n`), for protocols whose events are
  // named; nothing when empty.
  void stream_frames(std::string frames);
  // The call ended. A stream that has begun gets `whole`'s body as a last event when `failed`,
  // then `data: [DONE]`; otherwise `whole` is the answer.
  void end_call(Response whole, bool failed);
  // The call ended, its stream closed by `tail` (whole frames) rather than `data: [DONE]`,
  // when the stream has begun; otherwise `whole` is the answer.
  void end_call_with(Response whole, std::string tail);
  // The call ended unanswered: cancelled because its client left or the server is stopping.
  void forget_call();

 private:
  void handshake();
  void read();
  void read_request();
  void on_read(boost::beast::error_code ec);
  void watch_disconnect();
  void watch_peer(std::uint64_t generation);
  void abandon();
  void pump();
  void finish();
  void close();

  std::unique_ptr<HttpTransport> transport_;
  boost::asio::steady_timer deadline_;
  HttpListener& listener_;
  std::weak_ptr<boost::asio::io_context> ioc_;      // for context(); a connection does not keep it
  std::shared_ptr<std::atomic<std::size_t>> open_;  // the listener's count of open connections
  boost::beast::flat_buffer buffer_;
  std::optional<HttpTransport::Parser> parser_;
  Request request_;
  std::deque<std::string> out_;   // SSE events not yet written
  std::uint64_t generation_ = 0;  // of calls, so that a stale watch knows it is one
  bool keep_alive_ = true;
  bool streaming_ = false;
  bool headers_sent_ = false;
  bool writing_ = false;
  bool finished_ = false;
  bool closed_ = false;
  bool finishing_ = false;
  bool in_flight_ = false;
  bool reading_ = false;
  bool idling_ = false;
  bool timed_out_ = false;
};

// The listening socket and the I/O threads of one server.
class HttpListener {
 public:
  using MakeTransport = std::function<std::unique_ptr<HttpTransport>(boost::asio::ip::tcp::socket)>;
  using MakeConnection =
      std::function<std::shared_ptr<HttpConnection>(std::unique_ptr<HttpTransport>)>;

  // Binds and listens at once. The error names the address and why: "cannot listen on
  // HOST:PORT: not an IP address", or the OS's reason ("Address already in use").
  static Expected<std::unique_ptr<HttpListener>> open(HttpServerOptions options);
  ~HttpListener();  // stop()
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  std::uint16_t port() const { return port_; }
  const HttpServerOptions& options() const { return options_; }
  bool running() const { return !threads_.empty(); }

  // Accepts on options().threads I/O threads: each connection's socket (without Nagle) becomes
  // a transport (plain TCP unless `transport` says otherwise), then a connection.
  void start(MakeConnection connection, MakeTransport transport = {});
  // Accepts nothing more; connections already open go on.
  void stop_accepting();
  // Ends the I/O threads and joins them; what was still queued on them is dropped with the
  // io_context. Idempotent.
  void stop();

 private:
  friend class HttpConnection;
  explicit HttpListener(HttpServerOptions options);
  void accept();
  void admit(std::unique_ptr<HttpTransport> transport);

  HttpServerOptions options_;
  // Open connections. Shared with each connection: one that a caller's callbacks keep alive
  // past the listener (an engine still holding a call's sink) must not count into freed memory.
  std::shared_ptr<std::atomic<std::size_t>> open_ = std::make_shared<std::atomic<std::size_t>>(0);
  // Shared: a caller still holding a connection past the listener (its callbacks in an engine)
  // holds the context too (HttpConnection::context), so the connection's sockets and timers are
  // destroyed while the services they belong to still exist.
  std::shared_ptr<boost::asio::io_context> ioc_ = std::make_shared<boost::asio::io_context>();
  boost::asio::strand<boost::asio::io_context::executor_type> strand_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer accept_pause_;  // after a failed accept (out of descriptors)
  MakeConnection make_connection_;
  MakeTransport make_transport_;
  std::vector<std::thread> threads_;
  std::uint16_t port_ = 0;
};

// The calls a server has in flight (engine request handles, runtime call ids). Any thread.
class ActiveCalls {
 public:
  void add(std::uint64_t call);
  void remove(std::uint64_t call);
  // Waits up to `grace` for none to be left; true if none is.
  bool wait_empty(std::chrono::milliseconds grace);
  std::vector<std::uint64_t> snapshot() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable empty_;
  std::set<std::uint64_t> calls_;
};

}  // namespace dynrt::engines

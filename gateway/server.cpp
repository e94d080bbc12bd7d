#include "gateway/server.hpp"

#include "gateway/auth.hpp"
#include "gateway/metrics.hpp"
#include "gateway/request.hpp"
#include "gateway/tls.hpp"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <nlohmann/json.hpp>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <utility>

namespace dynrt::gateway {

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using nlohmann::json;

// A connection is one of two streams, and Session and Refusal are written once for both.
using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;
template <class Stream>
constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

template <class Stream>
tcp::socket& socket_of(Stream& stream) {
  return beast::get_lowest_layer(stream).socket();
}

// How long a connection being closed in order waits for the client's part (its TLS
// close_notify, or reading a refusal), and how long one over the connection cap is held.
constexpr std::chrono::seconds kLinger{1};
// How often a call's connection with unread bytes is checked for a client that went away.
constexpr std::chrono::milliseconds kPeerPoll{100};
// Asked of the stream when a kept-alive connection waits for its next request.
constexpr std::size_t kIdleReadBytes = 4096;

// Has the client ended its side of the TCP connection (FIN or reset), whatever bytes of it are
// still unread? Linux's TCP state tells even when readiness cannot (there are bytes to read).
bool peer_gone(tcp::socket& socket) {
  tcp_info info{};
  socklen_t size = sizeof info;
  if (::getsockopt(socket.native_handle(), IPPROTO_TCP, TCP_INFO, &info, &size) != 0) return false;
  return info.tcpi_state == TCP_CLOSE_WAIT || info.tcpi_state == TCP_CLOSE ||
         info.tcpi_state == TCP_LAST_ACK;
}

// Messages may quote what a client sent (a path, a header): bytes that are not UTF-8 are
// replaced, so that writing the error can never fail.
std::string openai_error(std::string_view message, std::string_view type, int code,
                         std::string_view param = {}) {
  const json p = param.empty() ? json(nullptr) : json(param);
  return json{{"error", {{"message", message}, {"type", type}, {"param", p}, {"code", code}}}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

// A header value passed on from an engine is written only if it is one line of visible ASCII:
// nothing an engine sends can add a header or split the response.
bool header_value_ok(std::string_view v) {
  return !v.empty() && v.size() <= 256 &&
         std::all_of(v.begin(), v.end(), [](char c) { return c == ' ' || (c > 0x20 && c < 0x7f); });
}

}  // namespace

struct Gateway::Impl {
  Runtime& runtime;
  GatewayOptions options;
  std::atomic<std::size_t> sessions{0};  // open connections; before ioc, whose end ends them
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  net::steady_timer accept_pause{ioc};  // after a failed accept (out of descriptors)
  std::vector<std::thread> threads;
  std::uint16_t bound_port = 0;

  std::mutex tls_mutex;
  std::shared_ptr<net::ssl::context> tls;  // null: plain HTTP; replaced whole by a reload

  // Requests refused by the keys: unauthenticated (401), forbidden (403), rate-limited (429).
  std::atomic<std::uint64_t> refused_401{0}, refused_403{0}, refused_429{0};

  std::mutex active_mutex;
  std::condition_variable idle;  // active became empty
  std::set<CallId> active;       // calls in flight, cancelled when the gateway stops

  Impl(Runtime& r, GatewayOptions o) : runtime(r), options(std::move(o)) {}
  void accept();
  std::string refusal() const;
  std::shared_ptr<net::ssl::context> tls_context() {
    std::lock_guard lock(tls_mutex);
    return tls;
  }
  void track(CallId id, bool on) {
    std::lock_guard lock(active_mutex);
    if (on)
      active.insert(id);
    else
      active.erase(id);
    if (active.empty()) idle.notify_all();
  }
};

namespace {

// One client connection, plain or TLS (Stream); `tls` keeps the context it was accepted with
// alive across a reload.
template <class Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
 public:
  Session(Stream stream, Gateway::Impl& gw, std::shared_ptr<net::ssl::context> tls)
      : stream_(std::move(stream)),
        deadline_(stream_.get_executor()),
        gw_(gw),
        tls_(std::move(tls)) {
    ++gw_.sessions;
  }
  ~Session() { --gw_.sessions; }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void start() {
    net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] {
      if constexpr (kTls<Stream>)
        self->handshake();
      else
        self->read_request();
    });
  }

 private:
  // -- reading and routing -------------------------------------------------------------------

  // The request deadline bounds the handshake too, so a client that connects and never
  // completes one cannot hold a connection. The stream's own expiry closes the socket: there is
  // nobody to answer yet.
  void handshake() {
    beast::get_lowest_layer(stream_).expires_after(gw_.options.header_timeout);
    stream_.async_handshake(net::ssl::stream_base::server,
                            [self = this->shared_from_this()](beast::error_code ec) {
                              beast::get_lowest_layer(self->stream_).expires_never();
                              if (ec) return self->close();  // not TLS, or too slow
                              self->read_request();
                            });
  }

  // Between requests on a kept-alive connection: wait up to idle_timeout for the next one to
  // begin, then give it the request deadline from its first byte. The wait is a read, not a
  // wait for the socket to become readable: over TLS the next request may already be decrypted
  // and held by the stream, with nothing left on the socket.
  void read() {
    if (buffer_.size() > 0) return read_request();  // pipelined: already here
    idling_ = true;
    deadline_.expires_after(gw_.options.idle_timeout);
    deadline_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (ec || !self->idling_) return;
      self->idling_ = false;
      beast::error_code ignored;
      socket_of(self->stream_).cancel(ignored);  // the read ends, and ends the connection
    });
    stream_.async_read_some(buffer_.prepare(kIdleReadBytes),
                            [self = this->shared_from_this()](beast::error_code, std::size_t n) {
                              self->buffer_.commit(n);
                              const bool expired = !self->idling_;
                              self->idling_ = false;
                              self->deadline_.cancel();
                              if (n > 0) return self->read_request();
                              if (expired) return self->finish();
                              self->close();
                            });
  }

  void read_request() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(gw_.options.max_header_bytes));
    parser_->body_limit(gw_.options.max_body_bytes);
    // One deadline for the whole request, so a client sending a byte a second does not hold a
    // connection for ever. A timer of our own rather than the stream's expiry, which closes
    // the socket: a client that sent part of a request is told 408 first.
    reading_ = true;
    timed_out_ = false;
    deadline_.expires_after(gw_.options.header_timeout);
    deadline_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (ec || !self->reading_) return;
      self->timed_out_ = true;
      beast::error_code ignored;
      socket_of(self->stream_).cancel(ignored);
    });
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                       self->on_read(ec);
                     });
  }

  void on_read(beast::error_code ec) {
    reading_ = false;
    deadline_.cancel();
    keep_alive_ = false;  // after an error, the connection's framing cannot be trusted
    if (timed_out_) {
      // Nothing at all arrived: a new connection that never sent a request, closed quietly.
      if (!parser_->got_some()) return finish();
      return error(http::status::request_timeout, "the request did not arrive within the deadline");
    }
    if (ec == http::error::body_limit)
      return error(http::status::payload_too_large, "the request body is over the limit of " +
                                                        std::to_string(gw_.options.max_body_bytes) +
                                                        " bytes");
    if (ec == http::error::header_limit)
      return error(http::status::request_header_fields_too_large,
                   "the request headers are over the limit of " +
                       std::to_string(gw_.options.max_header_bytes) + " bytes");
    if (ec == http::error::bad_transfer_encoding || ec == http::error::bad_content_length)
      return error(http::status::bad_request,
                   "conflicting or malformed Content-Length and Transfer-Encoding headers "
                   "(the connection is closed)");
    // Over TLS, a client that closes the connection without a close_notify reads as a
    // truncated stream.
    if (ec == http::error::end_of_stream || ec == net::error::eof ||
        ec == net::error::connection_reset || ec == net::error::operation_aborted ||
        ec == net::ssl::error::stream_truncated)
      return close();
    if (ec) return error(http::status::bad_request, "malformed HTTP request: " + ec.message());
    // Beast reads a body only when it is chunked or has a Content-Length; any other transfer
    // coding leaves its length unknown (RFC 9112 section 6.3).
    if (parser_->get().find(http::field::transfer_encoding) != parser_->get().end() &&
        !parser_->get().chunked())
      return error(http::status::bad_request,
                   "only the chunked Transfer-Encoding is supported (the connection is closed)");
    request_ = parser_->release();
    keep_alive_ = request_.keep_alive();
    handle();
  }

  void handle() {
    const std::string target(request_.target());
    const std::string path = target.substr(0, target.find('?'));
    const bool get = request_.method() == http::verb::get;
    const bool post = request_.method() == http::verb::post;
    if (path == "/healthz")
      return get ? respond(http::status::ok, "ok\n", "text/plain") : not_allowed();
    // Every other route needs a key once keys are configured: the key first (401), then its
    // scope for the route (403), then its rate (429), before anything else is looked at.
    if (!authorize(path == "/metrics"           ? kScopeMetrics
                   : path == "/v1/dynrt/writes" ? kScopeWrite
                                                : kScopeInfer))
      return;
    if (path == "/metrics") return get ? metrics() : not_allowed();
    if (path == "/v1/models") return get ? models() : not_allowed();
    if (path == "/v1/chat/completions" || path == "/v1/completions")
      return post ? completion(path) : not_allowed();
    if (path.rfind(kToolsPrefix, 0) == 0 && path.size() > kToolsPrefix.size())
      return post ? completion(path) : not_allowed();
    if (path == "/v1/dynrt/writes") return post ? writes() : not_allowed();
    error(http::status::not_found, "no route for " + path);
  }

  Tags tags() const {
    Tags t;
    auto header = [&](const char* name) {
      const auto it = request_.find(name);
      return it == request_.end() ? std::string() : std::string(it->value());
    };
    t.workflow = header("X-DynRT-Workflow");
    t.workflow_id = header("X-DynRT-Workflow-Id");
    t.stage = header("X-DynRT-Stage");
    return t;
  }

  void metrics() {
    const AuthRefusals refused{gw_.refused_401, gw_.refused_403, gw_.refused_429};
    respond(http::status::ok, prometheus_text(gw_.runtime.stats()) + prometheus_text(refused),
            "text/plain; version=0.0.4");
  }

  // Who sends this request, and may they (gateway/auth.hpp)? Answers the refusal itself.
  bool authorize(Scope needed) {
    caller_ = Caller{};
    admin_ = true;
    if (!gw_.options.auth) return true;
    const auto it = request_.find(http::field::authorization);
    const std::string_view header = it == request_.end()
                                        ? std::string_view()
                                        : std::string_view(it->value().data(), it->value().size());
    AuthResult who = gw_.options.auth->check(header, needed);
    switch (who.outcome) {
      case AuthResult::Outcome::ok:
        break;
      case AuthResult::Outcome::unauthenticated:
        ++gw_.refused_401;
        respond(http::status::unauthorized, openai_error(who.message, "authentication_error", 401),
                "application/json", false, {}, true);
        return false;
      case AuthResult::Outcome::forbidden:
        ++gw_.refused_403;
        respond(http::status::forbidden, openai_error(who.message, "permission_error", 403),
                "application/json");
        return false;
      case AuthResult::Outcome::rate_limited:
        ++gw_.refused_429;
        respond(http::status::too_many_requests,
                openai_error(who.message, "rate_limit_exceeded", 429), "application/json", false,
                std::move(who.retry_after));
        return false;
    }
    caller_.tenant = std::move(who.tenant);
    caller_.key = std::move(who.key_name);
    caller_.max_live_runs = who.limits.max_live_runs;
    caller_.fill_share = who.limits.fill_share;
    admin_ = who.admin;
    return true;
  }

  // A model call or a tool call (its body the arguments).
  void completion(const std::string& path) {
    ParsedCall parsed = parse_call(path, request_.body(), tags());
    if (!parsed.ok()) return invalid(parsed.invalid);
    streaming_ = parsed.stream;
    parsed.request.caller = caller_;
    call(std::move(parsed.request));
  }

  // An admin's write (or any write with no keys configured) reaches every tenant; any other
  // key's reaches its own tenant's results and the shared ones.
  void writes() {
    ParsedWrites parsed = parse_writes(request_.body());
    if (!parsed.ok()) return invalid(parsed.invalid);
    const auto n = parsed.keys.size();
    auto scope = admin_ ? tenancy::WriteScope::all() : tenancy::WriteScope::of(caller_.tenant);
    gw_.runtime.write(
        std::move(parsed.keys),
        [self = this->shared_from_this(), n](std::size_t removed) {
          net::post(self->stream_.get_executor(), [self, n, removed] {
            self->respond(http::status::ok, json{{"written", n}, {"invalidated", removed}}.dump(),
                          "application/json");
          });
        },
        std::move(scope));
  }

  void models() {
    json data = json::array();
    for (const auto& m : gw_.options.models)
      data.push_back({{"id", m}, {"object", "model"}, {"created", 0}, {"owned_by", "dynrt"}});
    respond(http::status::ok, json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  }

  // -- one call through the runtime -----------------------------------------------------------

  void call(Request request) {
    headers_sent_ = finished_ = false;
    served_ = Served::engine;
    ++generation_;
    auto self = this->shared_from_this();
    ReplyCallbacks cb;
    cb.on_start = [self](Served how) {
      net::post(self->stream_.get_executor(), [self, how] { self->started(how); });
    };
    cb.on_chunk = [self](std::string_view data) {
      net::post(self->stream_.get_executor(),
                [self, d = std::string(data)]() mutable { self->chunk(std::move(d)); });
    };
    cb.on_done = [self](Reply reply) {
      net::post(self->stream_.get_executor(),
                [self, r = std::move(reply)]() mutable { self->done(std::move(r)); });
    };
    in_flight_ = true;
    call_ = gw_.runtime.complete(std::move(request), std::move(cb));
    gw_.track(call_, true);
    watch_disconnect();
  }

  void started(Served how) {
    served_ = how;
    if (streaming_ && !closed_) send_stream_header();
  }

  void chunk(std::string data) {
    if (!streaming_ || closed_) return;
    out_.push_back("data: " + data + "\n\n");
    pump();
  }

  void done(Reply reply) {
    in_flight_ = false;
    gw_.track(call_, false);
    if (closed_) return;
    if (streaming_ && (headers_sent_ || writing_)) {  // the stream has begun: end it
      if (!reply.ok()) out_.push_back("data: " + reply.body + "\n\n");
      out_.push_back("data: [DONE]\n\n");
      finished_ = true;
      return pump();
    }
    streaming_ = false;
    const bool ok = reply.ok();
    respond(static_cast<http::status>(reply.status), std::move(reply.body), "application/json", ok,
            ok ? std::string() : std::move(reply.retry_after));
  }

  // A client that closes its connection while its call runs has the call cancelled. The
  // socket becoming readable is only a hint; a non-blocking MSG_PEEK of the raw socket tells a
  // close (0 bytes, or an error) from a spurious wake-up (EAGAIN) or bytes to read. Bytes are a
  // pipelined request, or over TLS perhaps the client's close_notify alert before its FIN (a
  // TLS 1.3 alert cannot be told from data without decrypting it, and the stream must not be
  // read while a response may be written). Either way readiness says no more from then on, and
  // the TCP state is polled instead until the call ends: a FIN behind the bytes still counts.
  void watch_disconnect() {
    socket_of(stream_).async_wait(
        tcp::socket::wait_read,
        [self = this->shared_from_this(), gen = generation_](beast::error_code ec) {
          if (ec || gen != self->generation_ || !self->in_flight_) return;
          char byte = 0;
          const auto n =
              ::recv(socket_of(self->stream_).native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
          if (n > 0) return self->watch_peer(gen);
          if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return self->watch_disconnect();
          self->disconnected();
        });
  }

  // The deadline timer is free while a call is in flight (no request is being read).
  void watch_peer(std::uint64_t gen) {
    deadline_.expires_after(kPeerPoll);
    deadline_.async_wait([self = this->shared_from_this(), gen](beast::error_code ec) {
      if (ec || gen != self->generation_ || !self->in_flight_ || self->closed_) return;
      if (!peer_gone(socket_of(self->stream_))) return self->watch_peer(gen);
      self->disconnected();
    });
  }

  void disconnected() {
    gw_.runtime.cancel(call_);
    close();
  }

  // -- writing ---------------------------------------------------------------------------------

  void send_stream_header() {
    if (headers_sent_ || writing_) return;
    auto res =
        std::make_shared<http::response<http::empty_body>>(http::status::ok, request_.version());
    res->set(http::field::content_type, "text/event-stream");
    res->set(http::field::cache_control, "no-cache");
    res->set("X-DynRT-Served", std::string(to_string(served_)));
    res->keep_alive(keep_alive_);
    res->chunked(true);
    auto sr = std::make_shared<http::response_serializer<http::empty_body>>(*res);
    writing_ = true;
    http::async_write_header(
        stream_, *sr,
        [self = this->shared_from_this(), res, sr](beast::error_code ec, std::size_t) {
          self->writing_ = false;
          if (ec) return self->fail();
          self->headers_sent_ = true;
          self->pump();
        });
  }

  // Every queued SSE event goes out as one HTTP chunk per wake-up; the last chunk with them.
  void pump() {
    if (writing_ || !headers_sent_ || closed_) return;
    if (out_.empty() && !finished_) return;
    auto data = std::make_shared<std::string>();
    if (!out_.empty()) {
      std::size_t size = 0;
      for (const auto& e : out_)
        size += e.size();
      char head[24];
      const int n = std::snprintf(head, sizeof head, "%zx\r\n", size);
      data->append(head, static_cast<std::size_t>(n));
      for (const auto& e : out_)
        data->append(e);
      data->append("\r\n");
      out_.clear();
    }
    const bool last = std::exchange(finished_, false);
    if (last) data->append("0\r\n\r\n");
    writing_ = true;
    net::async_write(
        stream_, net::buffer(*data),
        [self = this->shared_from_this(), data, last](beast::error_code ec, std::size_t) {
          self->writing_ = false;
          if (ec) return self->fail();
          if (!last) return self->pump();
          self->streaming_ = false;
          if (!self->keep_alive_) return self->finish();
          self->read();
        });
  }

  void fail() {
    if (in_flight_) gw_.runtime.cancel(call_);
    close();
  }

  void invalid(const Invalid& why) {
    respond(http::status::bad_request,
            openai_error(why.message, "invalid_request_error", 400, why.param), "application/json");
  }

  void error(http::status status, std::string_view message) {
    const int code = static_cast<int>(status);
    const char* type = code == 404   ? "not_found_error"
                       : code == 405 ? "invalid_request_error"
                       : code == 408 ? "timeout_error"
                       : code >= 500 ? "server_error"
                                     : "invalid_request_error";
    respond(status, openai_error(message, type, code), "application/json");
  }

  void not_allowed() {
    error(http::status::method_not_allowed, "method not allowed on this route");
  }

  // `retry_after`: an error answer's Retry-After (the engine's, or dynrt's own on its 503s).
  void respond(http::status status, std::string body, std::string_view type,
               bool with_served = false, std::string retry_after = {}, bool challenge = false) {
    auto res = std::make_shared<http::response<http::string_body>>(status, request_.version());
    res->set(http::field::content_type, std::string(type));
    if (challenge) res->set(http::field::www_authenticate, "Bearer");
    if (with_served) res->set("X-DynRT-Served", std::string(to_string(served_)));
    if (header_value_ok(retry_after)) res->set(http::field::retry_after, retry_after);
    res->keep_alive(keep_alive_);
    res->body() = std::move(body);
    res->prepare_payload();
    http::async_write(stream_, *res,
                      [self = this->shared_from_this(), res](beast::error_code ec, std::size_t) {
                        if (ec) return self->close();
                        if (!self->keep_alive_) return self->finish();
                        self->read();
                      });
  }

  // The end of a connection that is in order (its last answer written, or it sat idle), where
  // nothing is being read or written: over TLS, a close_notify first, so that the client can
  // tell the end from a truncation. A client that does not answer it is closed after kLinger.
  void finish() {
    if constexpr (kTls<Stream>) {
      if (closed_ || finishing_) return;
      finishing_ = true;
      deadline_.cancel();
      beast::get_lowest_layer(stream_).expires_after(kLinger);
      stream_.async_shutdown(
          [self = this->shared_from_this()](beast::error_code) { self->close(); });
    } else {
      close();
    }
  }

  // Any other end (an error, a client gone, stop): the socket is closed at once.
  void close() {
    if (closed_) return;
    closed_ = true;
    deadline_.cancel();
    beast::error_code ec;
    socket_of(stream_).shutdown(tcp::socket::shutdown_both, ec);
    socket_of(stream_).close(ec);
  }

  Stream stream_;
  net::steady_timer deadline_;
  Gateway::Impl& gw_;
  std::shared_ptr<net::ssl::context> tls_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
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
  Served served_ = Served::engine;
  Caller caller_;      // the current request's, from its key
  bool admin_ = true;  // its key has the admin scope (or no keys are configured)
  CallId call_ = 0;
  std::uint64_t generation_ = 0;
  std::deque<std::string> out_;
};

// A connection over the cap: told 503 at once, then closed. It is not a Session; it only
// drains what the client sent (so the close does not reset the connection before the client
// has read the answer), for at most kLinger in all. Over TLS the answer comes after the
// handshake, within the same kLinger, rather than the connection being closed unanswered: the
// handshake costs the server a signature, but a client that reads 503 with Retry-After backs
// off as told, where one whose handshake fails knows only that something failed and retries
// on its own schedule. There the client's close_notify (or its close) ends the drain.
template <class Stream>
struct Refusal : std::enable_shared_from_this<Refusal<Stream>> {
  Stream stream;
  net::steady_timer timer;
  std::string response;
  std::shared_ptr<net::ssl::context> tls;
  std::array<char, 1024> sink{};

  Refusal(Stream s, std::string r, std::shared_ptr<net::ssl::context> t)
      : stream(std::move(s)),
        timer(stream.get_executor()),
        response(std::move(r)),
        tls(std::move(t)) {}

  void start() {
    timer.expires_after(kLinger);
    timer.async_wait([self = this->shared_from_this()](beast::error_code) {
      beast::error_code ignored;
      socket_of(self->stream).close(ignored);
    });
    if constexpr (kTls<Stream>)
      stream.async_handshake(net::ssl::stream_base::server,
                             [self = this->shared_from_this()](beast::error_code ec) {
                               if (ec) return self->end();
                               self->answer();
                             });
    else
      answer();
  }
  void answer() {
    net::async_write(stream, net::buffer(response),
                     [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                       if (ec) return self->end();
                       if constexpr (kTls<Stream>) {
                         self->stream.async_shutdown([self](beast::error_code) { self->end(); });
                       } else {
                         beast::error_code ignored;
                         socket_of(self->stream).shutdown(tcp::socket::shutdown_send, ignored);
                         self->drain();
                       }
                     });
  }
  void drain() {
    stream.async_read_some(net::buffer(sink),
                           [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                             if (ec) return self->end();  // the client closed, or time is up
                             self->drain();
                           });
  }
  void end() { timer.cancel(); }  // its handler closes the socket
};

template <class Stream>
void admit(Gateway::Impl& gw, Stream stream, std::shared_ptr<net::ssl::context> tls) {
  if (gw.sessions.load() >= gw.options.max_connections)
    std::make_shared<Refusal<Stream>>(std::move(stream), gw.refusal(), std::move(tls))->start();
  else
    std::make_shared<Session<Stream>>(std::move(stream), gw, std::move(tls))->start();
}

}  // namespace

void Gateway::Impl::accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted) return;
    if (ec) {  // EMFILE and the like: retrying at once would spin on the same pending connection
      accept_pause.expires_after(std::chrono::milliseconds(100));
      accept_pause.async_wait([this](beast::error_code e) {
        if (!e) accept();
      });
      return;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);  // streamed events are small: no Nagle
    if (auto context = tls_context()) {
      TlsStream stream(std::move(socket), *context);
      admit(*this, std::move(stream), std::move(context));
    } else {
      admit(*this, PlainStream(std::move(socket)), nullptr);
    }
    accept();
  });
}

std::string Gateway::Impl::refusal() const {
  const std::string body =
      openai_error("the server is at its limit of " + std::to_string(options.max_connections) +
                       " connections; retry shortly",
                   "server_error", 503);
  http::response<http::string_body> res(http::status::service_unavailable, 11);
  res.set(http::field::content_type, "application/json");
  res.set(http::field::retry_after, "1");
  res.keep_alive(false);
  res.body() = body;
  res.prepare_payload();
  std::ostringstream out;
  out << res;
  return out.str();
}

Gateway::Gateway(Runtime& runtime, GatewayOptions options)
    : impl_(std::make_unique<Impl>(runtime, std::move(options))) {
  const GatewayOptions& o = impl_->options;
  if (o.tls_cert.empty() != o.tls_key.empty())
    throw std::runtime_error("TLS needs both a certificate and its private key");
  if (!o.tls_cert.empty()) {
    auto loaded = load_tls_context(o.tls_cert, o.tls_key);
    if (!loaded) throw std::runtime_error(loaded.error().message);
    impl_->tls = std::move(loaded->context);
  }
  const std::string where = impl_->options.host + ":" + std::to_string(impl_->options.port);
  beast::error_code ec;
  const auto address = net::ip::make_address(impl_->options.host, ec);
  if (ec) throw std::runtime_error("cannot listen on " + where + ": not an IP address");
  const tcp::endpoint ep(address, impl_->options.port);
  impl_->acceptor.open(ep.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(ep, ec);
  if (!ec) impl_->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) throw std::runtime_error("cannot listen on " + where + ": " + ec.message());
  impl_->bound_port = impl_->acceptor.local_endpoint().port();
  impl_->accept();
  for (int i = 0; i < std::max(1, impl_->options.threads); ++i)
    impl_->threads.emplace_back([this] { impl_->ioc.run(); });
}

Gateway::~Gateway() {
  stop();
}

std::uint16_t Gateway::port() const {
  return impl_->bound_port;
}

bool Gateway::tls() const {
  return impl_->tls_context() != nullptr;
}

Expected<std::string> Gateway::reload_tls() {
  if (!tls()) return make_error("the gateway does not serve TLS");
  auto loaded = load_tls_context(impl_->options.tls_cert, impl_->options.tls_key);
  if (!loaded) return loaded.error();
  std::lock_guard lock(impl_->tls_mutex);
  impl_->tls = std::move(loaded->context);
  return std::move(loaded->certificate);
}

void Gateway::stop(std::chrono::milliseconds grace) {
  if (impl_->threads.empty()) return;
  net::post(impl_->ioc, [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
    impl_->accept_pause.cancel();
  });
  {
    std::unique_lock lock(impl_->active_mutex);
    impl_->idle.wait_for(lock, grace, [this] { return impl_->active.empty(); });
  }
  std::set<CallId> active;
  {
    std::lock_guard lock(impl_->active_mutex);
    active = impl_->active;
  }
  for (const CallId c : active)
    impl_->runtime.cancel(c);
  impl_->ioc.stop();
  for (auto& t : impl_->threads)
    t.join();
  impl_->threads.clear();
}

}  // namespace dynrt::gateway

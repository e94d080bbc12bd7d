#include "engines/http/server_core.hpp"

#include "engines/openai/error_body.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <sstream>

namespace dynrt::engines {

template class BeastTransport<boost::beast::tcp_stream>;

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

// How long a connection being closed in order waits for the client's part (its TLS
// close_notify, or reading a refusal), and how long one over the connection cap is held.
constexpr std::chrono::seconds kLinger{1};
// How often a call's connection with unread bytes is checked for a client that went away.
constexpr std::chrono::milliseconds kPeerPoll{100};
// Asked of the stream when a kept-alive connection waits for its next request.
constexpr std::size_t kIdleReadBytes = 4096;
// After a failed accept: the pending connection stays queued, so accepting again at once
// would spin on it.
constexpr std::chrono::milliseconds kAcceptPause{100};

// Has the client ended its side of the TCP connection (FIN or reset), whatever bytes of it are
// still unread? Linux's TCP state tells even when readiness cannot (there are bytes to read).
bool peer_gone(tcp::socket& socket) {
  tcp_info info{};
  socklen_t size = sizeof info;
  if (::getsockopt(socket.native_handle(), IPPROTO_TCP, TCP_INFO, &info, &size) != 0) return false;
  return info.tcpi_state == TCP_CLOSE_WAIT || info.tcpi_state == TCP_CLOSE ||
         info.tcpi_state == TCP_LAST_ACK;
}

// A connection over the cap: told 503 at once, then closed. It is not a connection; it only
// drains what the client sent (so the close does not reset the connection before the client
// has read the answer), for at most kLinger in all. Over TLS the answer comes after the
// handshake, within the same kLinger, rather than the connection being closed unanswered: the
// handshake costs the server a signature, but a client that reads 503 with Retry-After backs
// off as told, where one whose handshake fails knows only that something failed and retries
// on its own schedule. There the client's close_notify (or its close) ends the drain.
class Refusal : public std::enable_shared_from_this<Refusal> {
 public:
  Refusal(std::unique_ptr<HttpTransport> transport, std::string response)
      : transport_(std::move(transport)),
        timer_(transport_->tcp().get_executor()),
        response_(std::move(response)) {}

  void start() {
    timer_.expires_after(kLinger);
    timer_.async_wait([self = shared_from_this()](beast::error_code) {
      beast::error_code ignored;
      self->transport_->tcp().socket().close(ignored);
    });
    transport_->handshake([self = shared_from_this()](beast::error_code ec) {
      if (ec) return self->end();
      self->answer();
    });
  }

 private:
  void answer() {
    transport_->write(
        net::buffer(response_), [self = shared_from_this()](beast::error_code ec, std::size_t) {
          if (ec) return self->end();
          if (self->transport_->secure())
            return self->transport_->shutdown([self](beast::error_code) { self->end(); });
          beast::error_code ignored;
          self->transport_->tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
          self->drain();
        });
  }
  void drain() {
    transport_->read_some(net::buffer(sink_),
                          [self = shared_from_this()](beast::error_code ec, std::size_t) {
                            if (ec) return self->end();  // the client closed, or time is up
                            self->drain();
                          });
  }
  void end() { timer_.cancel(); }  // its handler closes the socket

  std::unique_ptr<HttpTransport> transport_;
  net::steady_timer timer_;
  std::string response_;
  std::array<char, 1024> sink_{};
};

std::string refusal(std::size_t max_connections) {
  http::response<http::string_body> res(http::status::service_unavailable, 11);
  res.set(http::field::content_type, "application/json");
  res.set(http::field::retry_after, "1");
  res.keep_alive(false);
  res.body() =
      openai_error_body("the server is at its limit of " + std::to_string(max_connections) +
                            " connections; retry shortly",
                        "server_error", 503);
  res.prepare_payload();
  std::ostringstream out;
  out << res;
  return out.str();
}

}  // namespace

// -- HttpConnection ---------------------------------------------------------------------------

HttpConnection::HttpConnection(std::unique_ptr<HttpTransport> transport, HttpListener& listener)
    : transport_(std::move(transport)),
      deadline_(transport_->tcp().get_executor()),
      listener_(listener),
      ioc_(listener.ioc_),
      open_(listener.open_) {
  ++*open_;
}

HttpConnection::~HttpConnection() {
  --*open_;
}

void HttpConnection::start() {
  post([self = shared_from_this()] {
    if (self->transport_->secure())
      self->handshake();
    else
      self->read_request();
  });
}

// The request deadline bounds the handshake too, so a client that connects and never completes
// one cannot hold a connection. The stream's own expiry closes the socket: there is nobody to
// answer yet.
void HttpConnection::handshake() {
  transport_->tcp().expires_after(listener_.options_.header_timeout);
  transport_->handshake([self = shared_from_this()](beast::error_code ec) {
    self->transport_->tcp().expires_never();
    if (ec) return self->close();  // not TLS, or too slow
    self->read_request();
  });
}

// Between requests on a kept-alive connection: wait up to idle_timeout for the next one to
// begin, then give it the request deadline from its first byte. The wait is a read, not a wait
// for the socket to become readable: over TLS the next request may already be decrypted and
// held by the stream, with nothing left on the socket.
void HttpConnection::read() {
  if (buffer_.size() > 0) return read_request();  // pipelined: already here
  idling_ = true;
  deadline_.expires_after(listener_.options_.idle_timeout);
  deadline_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec || !self->idling_) return;
    self->idling_ = false;
    beast::error_code ignored;
    self->transport_->tcp().socket().cancel(ignored);  // the read ends, and ends the connection
  });
  transport_->read_some(buffer_.prepare(kIdleReadBytes),
                        [self = shared_from_this()](beast::error_code, std::size_t n) {
                          self->buffer_.commit(n);
                          const bool expired = !self->idling_;
                          self->idling_ = false;
                          self->deadline_.cancel();
                          if (n > 0) return self->read_request();
                          if (expired) return self->finish();
                          self->close();
                        });
}

void HttpConnection::read_request() {
  const HttpServerOptions& o = listener_.options_;
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(o.max_header_bytes));
  parser_->body_limit(o.max_body_bytes);
  // One deadline for the whole request, so a client sending a byte a second does not hold a
  // connection for ever. A timer of our own rather than the stream's expiry, which closes the
  // socket: a client that sent part of a request is told 408 first.
  reading_ = true;
  timed_out_ = false;
  deadline_.expires_after(o.header_timeout);
  deadline_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec || !self->reading_) return;
    self->timed_out_ = true;
    beast::error_code ignored;
    self->transport_->tcp().socket().cancel(ignored);
  });
  transport_->read(
      buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
}

void HttpConnection::on_read(beast::error_code ec) {
  const HttpServerOptions& o = listener_.options_;
  reading_ = false;
  deadline_.cancel();
  keep_alive_ = false;  // after an error, the connection's framing cannot be trusted
  if (timed_out_) {
    // Nothing at all arrived: a new connection that never sent a request, closed quietly.
    if (!parser_->got_some()) return finish();
    return respond_error(http::status::request_timeout,
                         "the request did not arrive within the deadline");
  }
  if (ec == http::error::body_limit)
    return respond_error(
        http::status::payload_too_large,
        "the request body is over the limit of " + std::to_string(o.max_body_bytes) + " bytes");
  if (ec == http::error::header_limit)
    return respond_error(http::status::request_header_fields_too_large,
                         "the request headers are over the limit of " +
                             std::to_string(o.max_header_bytes) + " bytes");
  if (ec == http::error::bad_transfer_encoding || ec == http::error::bad_content_length)
    return respond_error(http::status::bad_request,
                         "conflicting or malformed Content-Length and Transfer-Encoding headers "
                         "(the connection is closed)");
  if (ec == net::error::operation_aborted || transport_->client_closed(ec)) return close();
  if (ec)
    return respond_error(http::status::bad_request, "malformed HTTP request: " + ec.message());
  // Beast reads a body only when it is chunked or has a Content-Length; any other transfer
  // coding leaves its length unknown (RFC 9112 section 6.3).
  if (parser_->get().find(http::field::transfer_encoding) != parser_->get().end() &&
      !parser_->get().chunked())
    return respond_error(http::status::bad_request,
                         "only the chunked Transfer-Encoding is supported (the connection is "
                         "closed)");
  request_ = parser_->release();
  keep_alive_ = request_.keep_alive();
  // A compressed body (Content-Encoding: gzip) would otherwise read as JSON that is not JSON.
  // RFC 9110 section 8.4.1: a content coding the server does not accept is a 415. Its framing
  // was sound, so the connection stays open.
  if (const auto coding = request_.find(http::field::content_encoding);
      coding != request_.end() && !beast::iequals(coding->value(), "identity"))
    return respond_error(http::status::unsupported_media_type,
                         "the request body's Content-Encoding '" + std::string(coding->value()) +
                             "' is not supported; send the body uncompressed");
  on_request();
}

// -- calls ------------------------------------------------------------------------------------

void HttpConnection::begin_call(bool streaming) {
  streaming_ = streaming;
  headers_sent_ = finished_ = false;
  ++generation_;
  in_flight_ = true;
  watch_disconnect();
}

void HttpConnection::open_stream(std::initializer_list<Header> extra) {
  if (!streaming_ || closed_ || headers_sent_ || writing_) return;
  auto res =
      std::make_shared<http::response<http::empty_body>>(http::status::ok, request_.version());
  res->set(http::field::content_type, "text/event-stream");
  res->set(http::field::cache_control, "no-cache");
  for (const auto& [name, value] : extra)
    res->set(beast::string_view(name.data(), name.size()),
             beast::string_view(value.data(), value.size()));
  res->keep_alive(keep_alive_);
  res->chunked(true);
  auto writer = std::make_shared<HttpTransport::HeaderWriter>(*res);
  writing_ = true;
  transport_->write_header(
      *writer, [self = shared_from_this(), res, writer](beast::error_code ec, std::size_t) {
        self->writing_ = false;
        if (ec) return self->abandon();
        self->headers_sent_ = true;
        self->pump();
      });
}

void HttpConnection::stream_event(std::string data) {
  if (!streaming_ || closed_) return;
  out_.push_back("data: " + data + "\n\n");
  pump();
}

void HttpConnection::stream_frames(std::string frames) {
  if (!streaming_ || closed_ || frames.empty()) return;
  out_.push_back(std::move(frames));
  pump();
}

void HttpConnection::end_call_with(Response whole, std::string tail) {
  in_flight_ = false;
  if (closed_) return;
  if (streaming_ && (headers_sent_ || writing_)) {
    if (!tail.empty()) out_.push_back(std::move(tail));
    finished_ = true;
    return pump();
  }
  streaming_ = false;
  respond(std::move(whole));
}

void HttpConnection::end_call(Response whole, bool failed) {
  in_flight_ = false;
  if (closed_) return;
  if (streaming_ && (headers_sent_ || writing_)) {  // the stream has begun: end it
    if (failed) out_.push_back("data: " + whole.body() + "\n\n");
    out_.push_back("data: [DONE]\n\n");
    finished_ = true;
    return pump();
  }
  streaming_ = false;
  respond(std::move(whole));
}

void HttpConnection::forget_call() {
  in_flight_ = false;
}

// A client that closes its connection while its call runs has the call cancelled. The socket
// becoming readable is only a hint; a non-blocking MSG_PEEK of the raw socket tells a close (0
// bytes, or an error) from a spurious wake-up (EAGAIN) or bytes to read. Bytes are a pipelined
// request, or over TLS perhaps the client's close_notify alert before its FIN (a TLS 1.3 alert
// cannot be told from data without decrypting it, and the stream must not be read while a
// response may be written). Either way readiness says no more from then on, and the TCP state
// is polled instead until the call ends: a FIN behind the bytes still counts.
void HttpConnection::watch_disconnect() {
  transport_->tcp().socket().async_wait(
      tcp::socket::wait_read, [self = shared_from_this(), gen = generation_](beast::error_code ec) {
        if (ec || gen != self->generation_ || !self->in_flight_) return;
        char byte = 0;
        const auto n = ::recv(self->transport_->tcp().socket().native_handle(), &byte, 1,
                              MSG_PEEK | MSG_DONTWAIT);
        if (n > 0) return self->watch_peer(gen);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
          return self->watch_disconnect();
        self->abandon();
      });
}

// The deadline timer is free while a call is in flight (no request is being read).
void HttpConnection::watch_peer(std::uint64_t gen) {
  deadline_.expires_after(kPeerPoll);
  deadline_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
    if (ec || gen != self->generation_ || !self->in_flight_ || self->closed_) return;
    if (!peer_gone(self->transport_->tcp().socket())) return self->watch_peer(gen);
    self->abandon();
  });
}

// The client went away, or a write to it failed: the call in flight (if any) is cancelled.
void HttpConnection::abandon() {
  if (in_flight_) on_abandoned();
  close();
}

// -- writing ----------------------------------------------------------------------------------

// Every queued SSE event goes out as one HTTP chunk per wake-up (chunk boundaries mean nothing
// to SSE), the last chunk with them: small events do not wait on each other.
void HttpConnection::pump() {
  if (writing_ || !headers_sent_ || closed_) return;
  if (out_.empty() && !finished_) return;
  auto data = std::make_shared<std::string>();
  if (!out_.empty()) {
    std::size_t size = 0;
    for (const auto& e : out_)
      size += e.size();
    char head[24];
    const int n = std::snprintf(head, sizeof head, "%zx\r\n", size);
    data->reserve(static_cast<std::size_t>(n) + size + 7);
    data->append(head, static_cast<std::size_t>(n));
    for (const auto& e : out_)
      data->append(e);
    data->append("\r\n");
    out_.clear();
  }
  const bool last = std::exchange(finished_, false);
  if (last) data->append("0\r\n\r\n");
  writing_ = true;
  transport_->write(net::buffer(*data),
                    [self = shared_from_this(), data, last](beast::error_code ec, std::size_t) {
                      self->writing_ = false;
                      if (ec) return self->abandon();
                      if (!last) return self->pump();
                      self->streaming_ = false;
                      if (!self->keep_alive_) return self->finish();
                      self->read();
                    });
}

HttpConnection::Response HttpConnection::response(Status status, std::string body,
                                                  std::string_view content_type) const {
  Response res(status, request_.version());
  res.set(http::field::content_type, beast::string_view(content_type.data(), content_type.size()));
  res.body() = std::move(body);
  return res;
}

void HttpConnection::respond(Response response) {
  auto res = std::make_shared<Response>(std::move(response));
  res->version(request_.version());
  res->keep_alive(keep_alive_);
  res->prepare_payload();
  transport_->write(*res, [self = shared_from_this(), res](beast::error_code ec, std::size_t) {
    if (ec) return self->close();
    if (!self->keep_alive_) return self->finish();
    self->read();
  });
}

void HttpConnection::respond(Status status, std::string body, std::string_view content_type) {
  respond(response(status, std::move(body), content_type));
}

void HttpConnection::respond_error(Status status, std::string_view message) {
  const int code = static_cast<int>(status);
  respond(status, openai_error_body(message, openai_error_type(code), code), "application/json");
}

// The end of a connection that is in order (its last answer written, or it sat idle), where
// nothing is being read or written: over TLS, a close_notify first, so that the client can tell
// the end from a truncation. A client that does not answer it is closed after kLinger.
void HttpConnection::finish() {
  if (!transport_->secure()) return close();
  if (closed_ || finishing_) return;
  finishing_ = true;
  deadline_.cancel();
  transport_->tcp().expires_after(kLinger);
  transport_->shutdown([self = shared_from_this()](beast::error_code) { self->close(); });
}

// Any other end (an error, a client gone, stop): the socket is closed at once.
void HttpConnection::close() {
  if (closed_) return;
  closed_ = true;
  deadline_.cancel();
  beast::error_code ec;
  transport_->tcp().socket().shutdown(tcp::socket::shutdown_both, ec);
  transport_->tcp().socket().close(ec);
}

// -- HttpListener -----------------------------------------------------------------------------

HttpListener::HttpListener(HttpServerOptions options)
    : options_(std::move(options)),
      strand_(net::make_strand(*ioc_)),
      acceptor_(strand_),
      accept_pause_(strand_) {}

Expected<std::unique_ptr<HttpListener>> HttpListener::open(HttpServerOptions options) {
  std::unique_ptr<HttpListener> l(new HttpListener(std::move(options)));
  const std::string where = l->options_.host + ":" + std::to_string(l->options_.port);
  beast::error_code ec;
  const auto address = net::ip::make_address(l->options_.host, ec);
  if (ec) return make_error("cannot listen on " + where + ": not an IP address");
  const tcp::endpoint ep(address, l->options_.port);
  l->acceptor_.open(ep.protocol(), ec);
  if (!ec) l->acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) l->acceptor_.bind(ep, ec);
  if (!ec) l->acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return make_error("cannot listen on " + where + ": " + ec.message());
  l->port_ = l->acceptor_.local_endpoint().port();
  return l;
}

HttpListener::~HttpListener() {
  stop();
}

void HttpListener::start(MakeConnection connection, MakeTransport transport) {
  make_connection_ = std::move(connection);
  make_transport_ = std::move(transport);
  if (!make_transport_)
    make_transport_ = [](tcp::socket s) {
      return std::make_unique<PlainTransport>(beast::tcp_stream(std::move(s)));
    };
  accept();
  for (int i = 0; i < std::max(1, options_.threads); ++i)
    threads_.emplace_back([this] { ioc_->run(); });
}

void HttpListener::accept() {
  acceptor_.async_accept(net::make_strand(*ioc_), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted) return;
    if (ec) {  // EMFILE and the like: retry shortly, when a connection may have closed
      accept_pause_.expires_after(kAcceptPause);
      accept_pause_.async_wait([this](beast::error_code e) {
        if (!e && acceptor_.is_open()) accept();
      });
      return;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);  // streamed events are small: no Nagle
    admit(make_transport_(std::move(socket)));
    accept();
  });
}

void HttpListener::admit(std::unique_ptr<HttpTransport> transport) {
  if (open_->load() >= options_.max_connections)
    std::make_shared<Refusal>(std::move(transport), refusal(options_.max_connections))->start();
  else
    make_connection_(std::move(transport))->start();
}

void HttpListener::stop_accepting() {
  net::post(strand_, [this] {
    beast::error_code ec;
    acceptor_.close(ec);
    accept_pause_.cancel();
  });
}

void HttpListener::stop() {
  if (threads_.empty()) return;
  stop_accepting();
  ioc_->stop();
  for (auto& t : threads_)
    t.join();
  threads_.clear();
}

// -- ActiveCalls ------------------------------------------------------------------------------

void ActiveCalls::add(std::uint64_t call) {
  std::lock_guard lock(mutex_);
  calls_.insert(call);
}

void ActiveCalls::remove(std::uint64_t call) {
  std::lock_guard lock(mutex_);
  calls_.erase(call);
  if (calls_.empty()) empty_.notify_all();
}

bool ActiveCalls::wait_empty(std::chrono::milliseconds grace) {
  std::unique_lock lock(mutex_);
  return empty_.wait_for(lock, grace, [this] { return calls_.empty(); });
}

std::vector<std::uint64_t> ActiveCalls::snapshot() const {
  std::lock_guard lock(mutex_);
  return {calls_.begin(), calls_.end()};
}

}  // namespace dynrt::engines

#include "engines/sim/server.hpp"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

namespace dynrt::engines::sim {

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using nlohmann::json;

constexpr auto kHeaderDeadline = std::chrono::seconds(60);

std::string openai_error(std::string message, std::string_view type, int code) {
  return json{
      {"error",
       {{"message", std::move(message)}, {"type", type}, {"param", nullptr}, {"code", code}}}}
      .dump();
}

}  // namespace

struct SimServer::Impl {
  SimEngine& engine;
  SimServerOptions options;
  net::io_context ioc;
  net::strand<net::io_context::executor_type> accept_strand{net::make_strand(ioc)};
  tcp::acceptor acceptor{accept_strand};
  net::steady_timer accept_pause{accept_strand};  // after a failed accept (out of descriptors)
  std::vector<std::thread> threads;
  std::uint16_t bound_port = 0;

  std::mutex active_mutex;
  std::set<RequestHandle> active;  // requests in flight, cancelled when the server stops

  Impl(SimEngine& e, SimServerOptions o) : engine(e), options(std::move(o)) {}
  void accept();
  std::string metrics() const;
  void track(RequestHandle h, bool on) {
    std::lock_guard lock(active_mutex);
    if (on) {
      active.insert(h);
    } else {
      active.erase(h);
    }
  }
};

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, SimServer::Impl& server)
      : stream_(std::move(socket)), server_(server) {}

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read(); });
  }

  // -- engine callbacks, posted onto this connection's strand -----------------------------
  void engine_chunk(std::string data) {
    if (!streaming_ || closed_) return;
    out_.push_back("data: " + data + "\n\n");
    pump();
  }
  void engine_complete(EngineResult result) {
    server_.track(active_, false);
    active_ = 0;
    if (closed_) return;
    if (streaming_) {
      out_.push_back("data: [DONE]\n\n");
      finished_ = true;
      pump();
    } else {
      respond(http::status::ok, std::move(result.body), "application/json");
    }
  }
  void engine_error(EngineError error) {
    server_.track(active_, false);
    active_ = 0;
    if (closed_ || error.kind == ErrorKind::cancelled) return;
    const bool client_fault = error.kind == ErrorKind::rejected;
    if (streaming_ && headers_sent_) {  // mid-stream: an error event, then the end
      out_.push_back("data: " + openai_error(error.message, "server_error", 500) + "\n\n");
      finished_ = true;
      pump();
      return;
    }
    streaming_ = false;
    respond(client_fault ? http::status::bad_request : http::status::internal_server_error,
            openai_error(error.message, client_fault ? "invalid_request_error" : "server_error",
                         client_fault ? 400 : 500),
            "application/json");
  }

 private:
  class Sink final : public ResponseSink {
   public:
    explicit Sink(std::shared_ptr<Session> s) : s_(std::move(s)) {}
    void on_chunk(std::string_view data) override {
      net::post(s_->stream_.get_executor(),
                [s = s_, d = std::string(data)]() mutable { s->engine_chunk(std::move(d)); });
    }
    void on_complete(EngineResult r) override {
      net::post(s_->stream_.get_executor(),
                [s = s_, r = std::move(r)]() mutable { s->engine_complete(std::move(r)); });
    }
    void on_error(EngineError e) override {
      net::post(s_->stream_.get_executor(),
                [s = s_, e = std::move(e)]() mutable { s->engine_error(std::move(e)); });
    }

   private:
    std::shared_ptr<Session> s_;
  };

  void read() {
    parser_.emplace();
    parser_->header_limit(16 << 10);
    parser_->body_limit(server_.options.max_body_bytes);
    stream_.expires_after(kHeaderDeadline);
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      return respond(
          http::status::payload_too_large,
          openai_error("the request body is over the limit", "invalid_request_error", 413),
          "application/json");
    }
    if (ec) return close();
    stream_.expires_never();
    request_ = parser_->release();
    keep_alive_ = request_.keep_alive();
    handle();
  }

  void handle() {
    const std::string target(request_.target());
    const std::string path = target.substr(0, target.find('?'));
    const bool get = request_.method() == http::verb::get;
    const bool post = request_.method() == http::verb::post;
    if (path == "/health") {
      if (!get) return not_allowed();
      return respond(http::status::ok, "", "text/plain");
    }
    if (path == "/v1/models") {
      if (!get) return not_allowed();
      const json models = {{"object", "list"},
                           {"data", json::array({{{"id", server_.options.model},
                                                  {"object", "model"},
                                                  {"created", 0},
                                                  {"owned_by", "dynrt-sim-engine"}}})}};
      return respond(http::status::ok, models.dump(), "application/json");
    }
    if (path == "/metrics") {
      if (!get) return not_allowed();
      return respond(http::status::ok, server_.metrics(), "text/plain; version=0.0.4");
    }
    if (path == "/v1/chat/completions" || path == "/v1/completions") {
      if (!post) return not_allowed();
      return complete(path);
    }
    respond(http::status::not_found,
            openai_error("no route for " + path, "invalid_request_error", 404), "application/json");
  }

  void not_allowed() {
    respond(http::status::method_not_allowed,
            openai_error("method not allowed", "invalid_request_error", 405), "application/json");
  }

  void complete(const std::string& path) {
    json body = json::parse(request_.body(), nullptr, false);
    if (!body.is_object()) {
      return respond(
          http::status::bad_request,
          openai_error("the request body is not a JSON object", "invalid_request_error", 400),
          "application/json");
    }
    EngineRequest req;
    req.endpoint = path;
    req.body = std::move(body);
    if (req.body.contains("priority") && req.body["priority"].is_number_integer()) {
      req.priority = req.body["priority"].get<int>();
    }
    streaming_ = wants_stream(req.body);
    finished_ = false;
    headers_sent_ = false;
    ++generation_;
    active_ = server_.engine.submit(std::move(req), std::make_shared<Sink>(shared_from_this()));
    server_.track(active_, true);
    watch_disconnect();
    if (streaming_) send_stream_header();
  }

  // A client that closes its connection while its request runs has the request cancelled.
  // Readiness alone is not proof of a close: epoll can report a socket readable with
  // nothing to read, so a non-blocking MSG_PEEK decides. Zero bytes is an orderly close,
  // EAGAIN a spurious wake (wait again), data a pipelined request (stop watching).
  void watch_disconnect() {
    stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this(),
                                                         gen = generation_](beast::error_code ec) {
      if (ec || gen != self->generation_ || self->active_ == 0) return;
      char byte = 0;
      const auto n =
          ::recv(self->stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0) return;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        self->watch_disconnect();
        return;
      }
      self->server_.engine.cancel(self->active_);
      self->close();
    });
  }

  void send_stream_header() {
    auto res =
        std::make_shared<http::response<http::empty_body>>(http::status::ok, request_.version());
    res->set(http::field::content_type, "text/event-stream");
    res->set(http::field::cache_control, "no-cache");
    res->keep_alive(keep_alive_);
    res->chunked(true);
    auto sr = std::make_shared<http::response_serializer<http::empty_body>>(*res);
    writing_ = true;
    http::async_write_header(
        stream_, *sr, [self = shared_from_this(), res, sr](beast::error_code ec, std::size_t) {
          self->writing_ = false;
          if (ec) return self->fail_stream();
          self->headers_sent_ = true;
          self->pump();
        });
  }

  // Writes every queued SSE event as one HTTP chunk (chunk boundaries mean nothing to SSE),
  // and the last chunk with them once the engine is done: one write per wake-up, not one per
  // event, so small events do not wait on each other.
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
    net::async_write(stream_, net::buffer(*data),
                     [self = shared_from_this(), data, last](beast::error_code ec, std::size_t) {
                       self->writing_ = false;
                       if (ec) return self->fail_stream();
                       if (!last) return self->pump();
                       self->streaming_ = false;
                       if (!self->keep_alive_) return self->close();
                       self->read();
                     });
  }

  void fail_stream() {
    if (active_ != 0) server_.engine.cancel(active_);
    close();
  }

  void respond(http::status status, std::string body, std::string_view type) {
    auto res = std::make_shared<http::response<http::string_body>>(status, request_.version());
    res->set(http::field::content_type, std::string(type));
    res->keep_alive(keep_alive_);
    res->body() = std::move(body);
    res->prepare_payload();
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res](beast::error_code ec, std::size_t) {
                        if (ec || !self->keep_alive_) return self->close();
                        self->read();
                      });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  beast::tcp_stream stream_;
  SimServer::Impl& server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
  bool keep_alive_ = true;
  bool streaming_ = false;
  bool headers_sent_ = false;
  bool writing_ = false;
  bool finished_ = false;
  bool closed_ = false;
  RequestHandle active_ = 0;
  std::uint64_t generation_ = 0;
  std::deque<std::string> out_;
};

}  // namespace

void SimServer::Impl::accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted) return;
    if (ec) {
      // Out of file descriptors (EMFILE) or the like: the pending connection stays queued, so
      // accepting again at once would spin; retry shortly, when a connection may have closed.
      accept_pause.expires_after(std::chrono::milliseconds(50));
      accept_pause.async_wait([this](beast::error_code wait_ec) {
        if (!wait_ec && acceptor.is_open()) accept();
      });
      return;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);  // streamed events are small: no Nagle
    std::make_shared<Session>(std::move(socket), *this)->start();
    accept();
  });
}

std::string SimServer::Impl::metrics() const {
  const LoadSnapshot l = engine.load();
  const SimCounters c = engine.counters();
  const std::string labels = "{engine=\"0\",model_name=\"" + options.model + "\"}";
  std::ostringstream out;
  auto metric = [&](const char* name, const char* type, const char* help, double value) {
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n'
        << name << labels << ' ' << value << '\n';
  };
  metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
         l.slots_busy);
  metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
         l.queued);
  metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
         l.kv_occupancy());
  metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
         static_cast<double>(c.prompt_tokens));
  metric("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
         static_cast<double>(c.generated_tokens));
  metric("dynrt_sim:busy_seconds_total", "counter", "Simulated slot time of admitted requests.",
         std::chrono::duration<double>(c.busy).count());
  metric("dynrt_sim:wasted_seconds_total", "counter",
         "Simulated slot time of requests cancelled after admission.",
         std::chrono::duration<double>(c.wasted).count());
  metric("dynrt_sim:max_num_seqs", "gauge", "Decode slots.", l.slots_total);
  return out.str();
}

SimServer::SimServer(SimEngine& engine, SimServerOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(options))) {
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
  for (int i = 0; i < std::max(1, impl_->options.threads); ++i) {
    impl_->threads.emplace_back([this] { impl_->ioc.run(); });
  }
}

SimServer::~SimServer() {
  stop();
}

std::uint16_t SimServer::port() const {
  return impl_->bound_port;
}

void SimServer::stop() {
  if (impl_->threads.empty()) return;
  net::post(impl_->accept_strand, [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
    impl_->accept_pause.cancel();
  });
  // Requests still running are cancelled, and their callbacks delivered while the I/O threads
  // still run, so no engine callback is left pointing into a stopped io_context.
  std::set<RequestHandle> active;
  {
    std::lock_guard lock(impl_->active_mutex);
    active = impl_->active;
  }
  for (const RequestHandle h : active)
    impl_->engine.cancel(h);
  impl_->engine.drain();
  impl_->ioc.stop();
  for (auto& t : impl_->threads)
    t.join();
  impl_->threads.clear();
}

}  // namespace dynrt::engines::sim

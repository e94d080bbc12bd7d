#include "engines/sim/server.hpp"

#include "engines/http/server_core.hpp"
#include "engines/openai/error_body.hpp"
#include "engines/sim/text.hpp"
#include "protocols/protocols.hpp"
#include "runtime/json_text.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <optional>
#include <sstream>
#include <utility>

namespace dynrt::engines::sim {

namespace {

using nlohmann::json;
using Status = HttpConnection::Status;

// A minute for a request to arrive whole, and a minute for a kept-alive connection's next one.
constexpr std::chrono::seconds kRequestTimeout{60};

}  // namespace

struct SimServer::Impl {
  SimEngine& engine;
  SimServerOptions options;
  ActiveCalls active;                      // requests in flight, cancelled when the server stops
  std::unique_ptr<HttpListener> listener;  // last: its connections refer to the rest

  Impl(SimEngine& e, SimServerOptions o) : engine(e), options(std::move(o)) {}
};

namespace {

// GET /metrics: the engine's load and counters as vLLM names them.
std::string vllm_metrics(const SimEngine& engine, const std::string& model) {
  const LoadSnapshot l = engine.load();
  const SimCounters c = engine.counters();
  const std::string labels = "{engine=\"0\",model_name=\"" + model + "\"}";
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
  // vLLM's info gauge of its cache configuration: the pool's size is in its labels.
  const auto pool = static_cast<std::int64_t>(l.kv_total);
  out << "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
      << "# TYPE vllm:cache_config_info gauge\n"
      << "vllm:cache_config_info{engine=\"0\",block_size=\"16\",num_gpu_blocks=\"" << pool / 16
      << "\",kv_cache_size_tokens=\"" << pool << "\"} 1\n";
  metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
         static_cast<double>(c.prompt_tokens));
  metric("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
         static_cast<double>(c.generated_tokens));
  // Histograms as vLLM writes them, with the +Inf bucket alone: the gaps between two tokens of
  // a request and their seconds, and the engine steps (vLLM counts tokens per step).
  auto histogram = [&](const char* name, const char* help, double count, double sum) {
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " histogram\n"
        << name << "_bucket{engine=\"0\",le=\"+Inf\",model_name=\"" << model << "\"} " << count
        << '\n'
        << name << "_count" << labels << ' ' << count << '\n'
        << name << "_sum" << labels << ' ' << sum << '\n';
  };
  histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            static_cast<double>(c.token_gaps), c.token_gap_s);
  histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
            static_cast<double>(c.decode_steps), static_cast<double>(c.generated_tokens));
  metric("dynrt_sim:busy_seconds_total", "counter", "Simulated slot time of admitted requests.",
         std::chrono::duration<double>(c.busy).count());
  metric("dynrt_sim:wasted_seconds_total", "counter",
         "Simulated slot time of requests cancelled after admission.",
         std::chrono::duration<double>(c.wasted).count());
  metric("dynrt_sim:max_num_seqs", "gauge", "Decode slots.", l.slots_total);
  return out.str();
}

// One client connection: the routes of a vLLM server over the simulated engine.
class Session final : public HttpConnection {
 public:
  Session(std::unique_ptr<HttpTransport> transport, SimServer::Impl& server)
      : HttpConnection(std::move(transport), *server.listener), server_(server) {}

 private:
  // The engine's callbacks, posted onto the connection's strand.
  class Sink final : public ResponseSink {
   public:
    explicit Sink(std::shared_ptr<Session> s) : s_(std::move(s)) {}
    void on_chunk(std::string_view data) override {
      s_->post([s = s_, d = std::string(data)]() mutable { s->chunk(std::move(d)); });
    }
    void on_complete(EngineResult r) override {
      s_->post([s = s_, r = std::move(r)]() mutable { s->completed(std::move(r)); });
    }
    void on_error(EngineError e) override {
      s_->post([s = s_, e = std::move(e)]() mutable { s->failed(std::move(e)); });
    }

   private:
    std::shared_ptr<Session> s_;
  };

  void on_request() override {
    const std::string target(request().target());
    const std::string path = target.substr(0, target.find('?'));
    const bool get = request().method() == boost::beast::http::verb::get;
    const bool post = request().method() == boost::beast::http::verb::post;
    if (path == "/health") return get ? respond(Status::ok, "", "text/plain") : not_allowed();
    if (path == "/v1/models") {
      if (!get) return not_allowed();
      const json models = {{"object", "list"},
                           {"data", json::array({{{"id", server_.options.model},
                                                  {"object", "model"},
                                                  {"created", 0},
                                                  {"owned_by", "dynrt-sim-engine"}}})}};
      return respond(Status::ok, models.dump(), "application/json");
    }
    if (path == "/metrics")
      return get ? respond(Status::ok, vllm_metrics(server_.engine, server_.options.model),
                           "text/plain; version=0.0.4")
                 : not_allowed();
    api_ = protocols::api_of_path(path).value_or(protocols::Api::chat);
    translator_.reset();
    if (protocols::api_of_path(path)) return post ? complete(path) : not_allowed();
    respond_error(Status::not_found, "no route for " + path);
  }

  void not_allowed() { respond_error(Status::method_not_allowed, "method not allowed"); }

  // Chat and completions as vLLM serves them; Anthropic Messages and OpenAI Responses through
  // the chat completion each translates to, as dynrt translates them (so a call made here
  // directly answers what it answers through dynrt).
  void complete(const std::string& path) {
    json body = parse_json(request().body());
    if (!body.is_object())
      return refuse(json_nests_deeper(request().body()) ? json_too_deep("the request body")
                                                        : "the request body is not a JSON object",
                    "");
    EngineRequest req;
    req.endpoint = path;
    if (protocols::translated(api_)) {
      protocols::ToChat chat = protocols::to_chat(api_, body);
      if (!chat.ok()) return refuse(chat.refused.message, chat.refused.param);
      wire_ = std::move(body);
      body = std::move(chat.chat);
      req.endpoint = protocols::path_of(protocols::Api::chat);
    }
    // Refused before the stream opens, as vLLM does: a streamed call's bad field is a 400, not
    // an error event after a 200.
    if (auto bad = check_fields(body)) return refuse(bad->message, bad->param);
    req.body = std::move(body);
    if (req.body.contains("priority") && req.body["priority"].is_number_integer())
      req.priority = req.body["priority"].get<int>();
    const bool streaming = wants_stream(req.body);
    if (streaming && protocols::translated(api_)) translator_.emplace(api_, wire_);
    begin_call(streaming);
    auto self = std::static_pointer_cast<Session>(shared_from_this());
    active_ = server_.engine.submit(std::move(req), std::make_shared<Sink>(self));
    server_.active.add(active_);
    if (streaming) open_stream();
  }

  void refuse(const std::string& message, const std::string& param) {
    respond(Status::bad_request, protocols::error_body(api_, message, 400, param),
            "application/json");
  }

  void chunk(std::string data) {
    if (translator_) return stream_frames(translator_->chunk(data));
    stream_event(std::move(data));
  }

  void completed(EngineResult result) {
    untrack();
    if (protocols::translated(api_)) {
      auto body = protocols::from_chat(api_, wire_, result.body).value_or(result.body);
      return end_call_with(response(Status::ok, std::move(body), "application/json"),
                           translator_ ? translator_->finish() : std::string());
    }
    end_call(response(Status::ok, std::move(result.body), "application/json"), false);
  }

  void failed(EngineError error) {
    untrack();
    if (error.kind == ErrorKind::cancelled) return forget_call();
    const Status status =
        error.kind == ErrorKind::rejected ? Status::bad_request : Status::internal_server_error;
    const int code = static_cast<int>(status);
    if (protocols::translated(api_))
      return end_call_with(
          response(status, protocols::error_body(api_, error.message, code), "application/json"),
          translator_ ? translator_->fail(error.message, code) : std::string());
    end_call(response(status, openai_error_body(error.message, openai_error_type(code), code),
                      "application/json"),
             true);
  }

  void untrack() {
    server_.active.remove(active_);
    active_ = 0;
  }

  void on_abandoned() override { server_.engine.cancel(active_); }

  SimServer::Impl& server_;
  RequestHandle active_ = 0;
  protocols::Api api_ = protocols::Api::chat;  // the protocol of the request in flight
  json wire_;                                  // its body as sent, when translated
  std::optional<protocols::StreamTranslator> translator_;
};

}  // namespace

SimServer::SimServer(SimEngine& engine, SimServerOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(options))) {}

Expected<std::unique_ptr<SimServer>> SimServer::create(SimEngine& engine,
                                                       SimServerOptions options) {
  std::unique_ptr<SimServer> server(new SimServer(engine, std::move(options)));
  Impl& impl = *server->impl_;
  HttpServerOptions http;
  http.host = impl.options.host;
  http.port = impl.options.port;
  http.threads = impl.options.threads;
  http.max_body_bytes = impl.options.max_body_bytes;
  http.header_timeout = kRequestTimeout;
  http.idle_timeout = kRequestTimeout;
  auto listener = HttpListener::open(std::move(http));
  if (!listener) return listener.error();
  impl.listener = std::move(*listener);
  impl.listener->start([&impl](std::unique_ptr<HttpTransport> transport) {
    return std::make_shared<Session>(std::move(transport), impl);
  });
  return server;
}

SimServer::~SimServer() {
  stop();
}

std::uint16_t SimServer::port() const {
  return impl_->listener->port();
}

void SimServer::stop() {
  if (!impl_->listener || !impl_->listener->running()) return;
  impl_->listener->stop_accepting();
  // Requests still running are cancelled, and their callbacks delivered while the I/O threads
  // still run, so no engine callback is left pointing into a stopped io_context.
  for (const RequestHandle h : impl_->active.snapshot())
    impl_->engine.cancel(h);
  impl_->engine.drain();
  impl_->listener->stop();
}

}  // namespace dynrt::engines::sim

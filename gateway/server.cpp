#include "gateway/server.hpp"

#include "engines/http/server_core.hpp"
#include "engines/openai/error_body.hpp"
#include "gateway/auth.hpp"
#include "gateway/metrics.hpp"
#include "gateway/request.hpp"
#include "gateway/tls.hpp"
#include "protocols/protocols.hpp"
#include "runtime/json_text.hpp"

#include <boost/asio/ssl/context.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

namespace dynrt::gateway {

namespace {

namespace http = boost::beast::http;
using engines::HttpConnection;
using engines::HttpListener;
using engines::HttpTransport;
using nlohmann::json;
using Status = HttpConnection::Status;
using protocols::Api;

// A header value passed on from an engine is written only if it is one line of visible ASCII:
// nothing an engine sends can add a header or split the response.
bool header_value_ok(std::string_view v) {
  return !v.empty() && v.size() <= 256 &&
         std::all_of(v.begin(), v.end(), [](char c) { return c == ' ' || (c > 0x20 && c < 0x7f); });
}

// GET /v1/models: the engines' own lists merged with the names the configuration maps to them,
// fetched at most once per kModelsFresh and shared by every caller meanwhile.
constexpr auto kModelsFresh = std::chrono::seconds(5);

struct ModelCache {
  std::mutex mutex;
  std::optional<json> data;
  std::chrono::steady_clock::time_point at{};
};

json model_entry(const std::string& id) {
  return {{"id", id}, {"object", "model"}, {"created", 0}, {"owned_by", "dynrt"}};
}

// Each engine's list in configuration order, then the names mapped to it, then `extra`; each id
// once (the first entry for it wins: an engine's own says more than a configured name).
json merge_models(const std::vector<EngineBinding>& engines,
                  const std::vector<std::optional<json>>& fetched,
                  const std::vector<std::string>& extra) {
  json out = json::array();
  std::set<std::string> seen;
  const auto add = [&](json m) {
    if (!seen.insert(m["id"].get<std::string>()).second) return;
    if (!m.contains("object")) m["object"] = "model";
    out.push_back(std::move(m));
  };
  for (std::size_t i = 0; i < engines.size(); ++i) {
    if (i < fetched.size() && fetched[i])
      for (const auto& m : *fetched[i])
        add(m);
    for (const auto& name : engines[i].models)
      add(model_entry(name));
  }
  for (const auto& name : extra)
    add(model_entry(name));
  return out;
}

}  // namespace

struct Gateway::Impl {
  Runtime& runtime;
  GatewayOptions options;

  std::mutex tls_mutex;
  std::shared_ptr<boost::asio::ssl::context> tls;  // null: plain HTTP; replaced whole by a reload

  // Requests refused by the keys: unauthenticated (401), forbidden (403), rate-limited (429).
  struct {
    std::atomic<std::uint64_t> unauthenticated{0}, forbidden{0}, rate_limited{0};
  } refused;

  std::shared_ptr<ModelCache> models = std::make_shared<ModelCache>();
  engines::ActiveCalls active;             // calls in flight, cancelled when the gateway stops
  std::unique_ptr<HttpListener> listener;  // last: its connections refer to the rest

  Impl(Runtime& r, GatewayOptions o) : runtime(r), options(std::move(o)) {}
  std::shared_ptr<boost::asio::ssl::context> tls_context() {
    std::lock_guard lock(tls_mutex);
    return tls;
  }
};

namespace {

// One client connection, plain or TLS alike (the transport tells them apart): the routes, the
// keys, and calls through the Runtime.
class Session;

// A running call's hold on its connection: the connection, and the I/O context it lives on,
// which must outlive it. The connection goes first.
struct Hold {
  Hold(std::shared_ptr<boost::asio::io_context> c, std::shared_ptr<Session> s)
      : context(std::move(c)), self(std::move(s)) {}
  ~Hold() { self.reset(); }
  Hold(const Hold&) = delete;
  Hold& operator=(const Hold&) = delete;
  std::shared_ptr<boost::asio::io_context> context;
  std::shared_ptr<Session> self;
};

class Session final : public HttpConnection {
 public:
  Session(std::unique_ptr<HttpTransport> transport, HttpListener& listener, Gateway::Impl& gw)
      : HttpConnection(std::move(transport), listener), gw_(gw) {}

 private:
  std::shared_ptr<Session> shared() {
    return std::static_pointer_cast<Session>(shared_from_this());
  }

  // -- routing ---------------------------------------------------------------------------------

  void on_request() override {
    const std::string target(request().target());
    const std::string path = target.substr(0, target.find('?'));
    const bool get = request().method() == http::verb::get;
    const bool post = request().method() == http::verb::post;
    // The protocol this request speaks: its errors, from here on, are in that protocol's shape.
    api_ = protocols::api_of_path(path).value_or(Api::chat);
    translator_.reset();
    if (path == "/healthz") return get ? respond(Status::ok, "ok\n", "text/plain") : not_allowed();
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
    if (protocols::translated(api_)) return post ? translated_call() : not_allowed();
    if (path.rfind(kToolsPrefix, 0) == 0 && path.size() > kToolsPrefix.size())
      return post ? completion(path) : not_allowed();
    if (path == "/v1/dynrt/writes") return post ? writes() : not_allowed();
    if (path.rfind(kRunsPrefix, 0) == 0 && path.size() > kRunsPrefix.size())
      return get ? runs(target) : not_allowed();
    respond_error(Status::not_found, "no route for " + path);
  }

  Tags tags() const {
    Tags t;
    auto header = [&](const char* name) {
      const auto it = request().find(name);
      return it == request().end() ? std::string() : std::string(it->value());
    };
    t.workflow = header("X-DynRT-Workflow");
    t.workflow_id = header("X-DynRT-Workflow-Id");
    t.stage = header("X-DynRT-Stage");
    return t;
  }

  // An untagged call's headers, names lower-case, for a template that recognizes its runs by
  // one (dsl/recognize.hpp); none for a tagged call, which is never recognized.
  std::vector<std::pair<std::string, std::string>> recognition_headers(const Tags& tags) const {
    std::vector<std::pair<std::string, std::string>> out;
    if (!tags.empty()) return out;
    for (const auto& f : request()) {
      std::string name(f.name_string());
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      out.emplace_back(std::move(name), std::string(f.value()));
    }
    return out;
  }

  void metrics() {
    const AuthRefusals refused{gw_.refused.unauthenticated, gw_.refused.forbidden,
                               gw_.refused.rate_limited};
    respond(Status::ok, prometheus_text(gw_.runtime.stats()) + prometheus_text(refused),
            "text/plain; version=0.0.4");
  }

  // Who sends this request, and may they (gateway/auth.hpp)? Answers the refusal itself.
  bool authorize(Scope needed) {
    caller_ = Caller{};
    admin_ = true;
    if (!gw_.options.auth) return true;
    const auto it = request().find(http::field::authorization);
    std::string header = it == request().end() ? std::string() : std::string(it->value());
    // Anthropic's clients send their key as `x-api-key`: it counts as a bearer key when no
    // Authorization header is sent.
    if (const auto key = request().find("x-api-key"); header.empty() && key != request().end())
      header = "Bearer " + std::string(key->value());
    AuthResult who = gw_.options.auth->check(header, needed);
    switch (who.outcome) {
      case AuthResult::Outcome::ok:
        break;
      case AuthResult::Outcome::unauthenticated:
        ++gw_.refused.unauthenticated;
        respond(answer(Status::unauthorized, error_json(who.message, "authentication_error", 401),
                       "application/json", false, {}, true));
        return false;
      case AuthResult::Outcome::forbidden:
        ++gw_.refused.forbidden;
        respond(Status::forbidden, error_json(who.message, "permission_error", 403),
                "application/json");
        return false;
      case AuthResult::Outcome::rate_limited:
        ++gw_.refused.rate_limited;
        respond(answer(Status::too_many_requests,
                       error_json(who.message, "rate_limit_exceeded", 429), "application/json",
                       false, std::move(who.retry_after)));
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
    ParsedCall parsed = parse_call(path, request().body(), tags());
    if (!parsed.ok()) return invalid(parsed.invalid);
    parsed.request.caller = caller_;
    parsed.request.headers = recognition_headers(parsed.request.tags);
    call(std::move(parsed.request), parsed.stream);
  }

  // A call in the Anthropic Messages or OpenAI Responses protocol, run as the chat completion it
  // translates to (protocols/protocols.hpp) and answered back in its own protocol.
  void translated_call() {
    ParsedJson parsed = parse_strict_json(request().body());
    if (!parsed.ok()) return invalid(parsed.invalid);
    protocols::ToChat chat = protocols::to_chat(api_, parsed.value);
    if (!chat.ok()) return invalid({chat.refused.message, chat.refused.param});
    // The chat request is checked as one sent to /v1/chat/completions would be.
    ParsedCall call = parse_call("/v1/chat/completions", chat.chat.dump(), tags());
    if (!call.ok()) return invalid(call.invalid);
    call.request.caller = caller_;
    call.request.route = std::string(protocols::path_of(api_));
    call.request.headers = recognition_headers(call.request.tags);
    wire_ = std::move(parsed.value);
    call.request.wire = wire_;
    if (call.stream) translator_.emplace(api_, wire_);
    this->call(std::move(call.request), call.stream);
  }

  // An admin's write (or any write with no keys configured) reaches every tenant; any other
  // key's reaches its own tenant's results and the shared ones.
  void writes() {
    ParsedWrites parsed = parse_writes(request().body());
    if (!parsed.ok()) return invalid(parsed.invalid);
    const auto n = parsed.keys.size();
    auto scope = admin_ ? tenancy::WriteScope::all() : tenancy::WriteScope::of(caller_.tenant);
    gw_.runtime.write(
        std::move(parsed.keys),
        [self = shared(), n, tiered = gw_.runtime.shares_library()](WriteResult r) {
          self->post([self, n, r, tiered] {
            json body{{"written", n}, {"invalidated", r.removed}};
            // With a shared library: whether every replica sees it (docs/scaling.md).
            if (tiered) body["shared"] = r.shared;
            self->respond(Status::ok, body.dump(), "application/json");
          });
        },
        std::move(scope));
  }

  // `dynrt explain`: a run's journal. A key reads its own tenant's runs; an admin key (or any
  // caller when no keys are configured) may name another tenant with ?tenant=.
  void runs(const std::string& target) {
    ParsedRunQuery q = parse_run_query(target);
    if (!q.ok()) return invalid(q.invalid);
    if (q.tenant_given && !admin_ && q.tenant != caller_.tenant)
      return respond(Status::forbidden,
                     engines::openai_error_body("only an admin key may read another tenant's runs",
                                                "permission_error", 403),
                     "application/json");
    const std::string tenant = q.tenant_given ? q.tenant : caller_.tenant;
    std::string loaded;
    for (const auto& w : gw_.runtime.workflows())
      loaded += (loaded.empty() ? "" : ", ") + w;
    gw_.runtime.explain(
        q.id,
        [self = shared(), id = q.id, loaded](std::vector<json> found) {
          self->post([self, id, loaded, found = std::move(found)]() mutable {
            if (found.empty())
              return self->respond(
                  Status::not_found,
                  engines::openai_error_body(
                      "no workflow run with id '" + id +
                          "' is known: it never ran, ran under another tenant or workflow, or "
                          "ended longer ago than runs are kept. Only calls tagged with a loaded "
                          "workflow (" +
                          loaded + ") are journaled; others pass through",
                      "not_found_error", 404),
                  "application/json");
            self->respond(Status::ok,
                          json{{"object", "list"}, {"data", std::move(found)}}.dump(
                              -1, ' ', false, json::error_handler_t::replace),
                          "application/json");
          });
        },
        q.workflow, tenant);
  }

  void models() {
    const auto cache = gw_.models;
    {
      std::lock_guard lock(cache->mutex);
      if (cache->data && std::chrono::steady_clock::now() - cache->at < kModelsFresh)
        return respond(Status::ok, json{{"object", "list"}, {"data", *cache->data}}.dump(),
                       "application/json");
    }
    // Ask every engine; the last answer (each comes once, on an engine's thread, within its
    // timeout) merges them and answers on this connection's own thread.
    const auto& engines = gw_.runtime.config().engines;
    struct Gathering {
      std::mutex mutex;
      std::vector<std::optional<json>> fetched;
      std::size_t remaining = 0;
    };
    auto g = std::make_shared<Gathering>();
    g->fetched.resize(engines.size());
    g->remaining = engines.size();
    const auto hold = std::make_shared<Hold>(context(), shared());
    auto finish = [hold, g, cache, engines, extra = gw_.options.models] {
      auto data = merge_models(engines, g->fetched, extra);
      {
        std::lock_guard lock(cache->mutex);
        cache->data = data;
        cache->at = std::chrono::steady_clock::now();
      }
      hold->self->post([self = hold->self, data = std::move(data)] {
        self->respond(Status::ok, json{{"object", "list"}, {"data", data}}.dump(),
                      "application/json");
      });
    };
    if (engines.empty()) return finish();
    for (std::size_t i = 0; i < engines.size(); ++i)
      engines[i].engine->list_models([g, i, finish](std::optional<json> listed) {
        bool last = false;
        {
          std::lock_guard lock(g->mutex);
          g->fetched[i] = std::move(listed);
          last = --g->remaining == 0;
        }
        if (last) finish();
      });
  }

  // -- one call through the runtime -----------------------------------------------------------

  void call(dynrt::Request request, bool streaming) {
    served_ = Served::engine;
    begin_call(streaming);
    if (gw_.options.record && !request.tags.workflow.empty() && !request.tags.workflow_id.empty() &&
        !request.tags.stage.empty()) {
      // As the caller sent it: a translated call's own path and body, not the chat
      // completion dynrt runs for it (a template in that protocol binds from those).
      const bool wire = !request.route.empty() && !request.wire.is_null();
      recording_ = json{{"workflow", request.tags.workflow},
                        {"id", request.tags.workflow_id},
                        {"stage", request.tags.stage},
                        {"endpoint", wire ? request.route : request.endpoint},
                        {"tenant", request.caller.tenant},
                        {"request", wire ? request.wire : request.body},
                        {"stream", streaming}};
      // When the call started, to the microsecond: a recording's calls are put back in order
      // by it (`dynrt template draft`), and a cached answer takes well under a millisecond.
      (*recording_)["start_ms"] = std::chrono::duration<double, std::milli>(
                                      std::chrono::system_clock::now().time_since_epoch())
                                      .count();
      recording_since_ = std::chrono::steady_clock::now();
    }
    auto self = shared();
    ReplyCallbacks cb;
    // The callbacks may outlive the gateway (an engine holds them until it lets go of the
    // call): they hold the connection through a Hold that also keeps its I/O context, and
    // releases the connection first (see HttpConnection::context).
    const auto hold = std::make_shared<Hold>(context(), self);
    cb.on_start = [hold](Served how) {
      hold->self->post([self = hold->self, how] { self->started(how); });
    };
    cb.on_chunk = [hold](std::string_view data) {
      hold->self->post(
          [self = hold->self, d = std::string(data)]() mutable { self->chunk(std::move(d)); });
    };
    cb.on_done = [hold](Reply reply) {
      hold->self->post(
          [self = hold->self, r = std::move(reply)]() mutable { self->done(std::move(r)); });
    };
    call_ = gw_.runtime.complete(std::move(request), std::move(cb));
    gw_.active.add(call_);
  }

  void started(Served how) {
    served_ = how;
    open_stream({{"X-DynRT-Served", to_string(served_)}});
  }

  void chunk(std::string data) {
    if (translator_) return stream_frames(translator_->chunk(data));
    stream_event(std::move(data));
  }

  void done(Reply reply) {
    gw_.active.remove(call_);
    if (protocols::translated(api_)) return done_translated(std::move(reply));
    record(reply.status, reply.served, reply.body);
    const bool ok = reply.ok();
    end_call(answer(static_cast<Status>(reply.status), std::move(reply.body), "application/json",
                    ok, ok ? std::string() : std::move(reply.retry_after)),
             !ok);
  }

  // With --record: the call's line, now that it is answered.
  void record(int status, Served served, const std::string& answer) {
    if (!recording_) return;
    auto& r = *recording_;
    r["ts_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
    r["latency_ms"] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                                recording_since_)
                          .count();
    r["status"] = status;
    r["served"] = std::string(to_string(served));
    auto body = parse_json(answer);
    r["response"] = body.is_discarded() ? json(answer) : std::move(body);
    gw_.options.record(r);
    recording_.reset();
  }

  // The chat answer in the caller's protocol: whole, or the events that close its stream.
  void done_translated(Reply reply) {
    const bool ok = reply.ok();
    int status = reply.status;
    std::string body;
    if (ok) {
      if (auto out = protocols::from_chat(api_, wire_, reply.body)) {
        body = std::move(*out);
      } else {
        status = 502;
        body = protocols::error_body(api_, "the engine's answer is not a chat completion", 502);
      }
    } else {
      body = protocols::translate_error(api_, reply.body, reply.status);
    }
    record(status, reply.served, body);  // the answer the caller gets, in its protocol
    std::string tail;
    if (translator_)
      tail = ok ? translator_->finish()
                : translator_->fail(protocols::error_message(reply.body), reply.status);
    end_call_with(answer(static_cast<Status>(status), std::move(body), "application/json", ok,
                         ok ? std::string() : std::move(reply.retry_after)),
                  std::move(tail));
  }

  void on_abandoned() override { gw_.runtime.cancel(call_); }

  // -- answers ---------------------------------------------------------------------------------

  void invalid(const Invalid& why) {
    respond(Status::bad_request,
            api_ == Api::messages
                ? protocols::error_body(api_, why.message, 400, why.param)
                : engines::openai_error_body(why.message, "invalid_request_error", 400, why.param),
            "application/json");
  }

  // An error body of dynrt's own in the shape of the protocol the request speaks.
  std::string error_json(std::string_view message, std::string_view type, int status) const {
    return api_ == Api::messages ? protocols::error_body(api_, message, status)
                                 : engines::openai_error_body(message, type, status);
  }

  void not_allowed() {
    respond_error(Status::method_not_allowed, "method not allowed on this route");
  }

  // `retry_after`: an error answer's Retry-After (the engine's, or dynrt's own on its 503s).
  Response answer(Status status, std::string body, std::string_view type, bool with_served,
                  std::string retry_after = {}, bool challenge = false) const {
    Response res = response(status, std::move(body), type);
    if (challenge) res.set(http::field::www_authenticate, "Bearer");
    if (with_served) res.set("X-DynRT-Served", std::string(to_string(served_)));
    if (header_value_ok(retry_after)) res.set(http::field::retry_after, retry_after);
    return res;
  }

  Gateway::Impl& gw_;
  Served served_ = Served::engine;
  Caller caller_;      // the current request's, from its key
  bool admin_ = true;  // its key has the admin scope (or no keys are configured)
  CallId call_ = 0;
  std::optional<json> recording_;  // the call in flight, for --record
  Api api_ = Api::chat;            // the protocol the current request speaks
  json wire_;                      // a translated call's request as its caller sent it
  std::optional<protocols::StreamTranslator> translator_;  // a translated call's stream
  std::chrono::steady_clock::time_point recording_since_{};
};

}  // namespace

Gateway::Gateway(Runtime& runtime, GatewayOptions options)
    : impl_(std::make_unique<Impl>(runtime, std::move(options))) {}

Expected<std::unique_ptr<Gateway>> Gateway::create(Runtime& runtime, GatewayOptions options) {
  std::unique_ptr<Gateway> gateway(new Gateway(runtime, std::move(options)));
  Impl& impl = *gateway->impl_;
  const GatewayOptions& o = impl.options;
  if (o.tls_cert.empty() != o.tls_key.empty())
    return make_error("TLS needs both a certificate and its private key");
  if (!o.tls_cert.empty()) {
    auto loaded = load_tls_context(o.tls_cert, o.tls_key);
    if (!loaded) return loaded.error();
    impl.tls = std::move(loaded->context);
  }
  engines::HttpServerOptions http;
  http.host = o.host;
  http.port = o.port;
  http.threads = o.threads;
  http.max_body_bytes = o.max_body_bytes;
  http.max_header_bytes = o.max_header_bytes;
  http.header_timeout = o.header_timeout;
  http.idle_timeout = o.idle_timeout;
  http.max_connections = o.max_connections;
  auto listener = HttpListener::open(std::move(http));
  if (!listener) return listener.error();
  impl.listener = std::move(*listener);
  impl.listener->start(
      [&impl](std::unique_ptr<HttpTransport> transport) {
        return std::make_shared<Session>(std::move(transport), *impl.listener, impl);
      },
      [&impl](boost::asio::ip::tcp::socket socket) -> std::unique_ptr<HttpTransport> {
        if (auto context = impl.tls_context())
          return tls_transport(std::move(socket), std::move(context));
        return std::make_unique<engines::PlainTransport>(
            boost::beast::tcp_stream(std::move(socket)));
      });
  return gateway;
}

Gateway::~Gateway() {
  stop();
}

std::uint16_t Gateway::port() const {
  return impl_->listener->port();
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
  if (!impl_->listener || !impl_->listener->running()) return;
  impl_->listener->stop_accepting();
  impl_->active.wait_empty(grace);
  for (const CallId c : impl_->active.snapshot())
    impl_->runtime.cancel(c);
  impl_->listener->stop();
}

}  // namespace dynrt::gateway

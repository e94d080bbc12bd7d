#include "engines/openai/engine.hpp"

#include "engines/completion.hpp"
#include "engines/openai/assembly.hpp"
#include "engines/openai/sse.hpp"
#include "runtime/json_text.hpp"

#include <algorithm>

namespace dynrt::engines {

namespace {

using nlohmann::json;

constexpr std::size_t kErrorBodyLimit = 64 << 10;  // keep this much of an engine's error body

class Ignore final : public HttpHandler {
 public:
  bool on_data(std::string_view) override { return true; }
  void on_done(const HttpOutcome&) override {}
};

// Retry-After as delta-seconds; an HTTP-date is not read (treated as absent).
std::optional<Duration> parse_retry_after(std::string_view v) {
  if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  return std::chrono::seconds(std::stol(std::string(v)));
}

// `cooldown_left`: until the circuit lets a probe through; a canonical caller is told to retry
// then (in whole seconds, at least one).
EngineError circuit_open(RequestKind kind, const std::string& engine, Duration cooldown_left) {
  const std::string message = "circuit open: engine " + engine + " is failing; " +
                              (kind == RequestKind::fill ? "fills" : "requests") +
                              " are refused until a probe succeeds";
  if (kind == RequestKind::fill) return EngineError{ErrorKind::rejected, 0, {}, message};
  // A canonical caller gets a 503 in the OpenAI error shape, as an overloaded engine answers.
  const json body = {
      {"error",
       {{"message", message}, {"type", "service_unavailable"}, {"param", nullptr}, {"code", 503}}}};
  const auto seconds = std::chrono::ceil<std::chrono::seconds>(cooldown_left).count();
  return EngineError{ErrorKind::http_status, 503, body.dump(), message,
                     std::to_string(std::max<std::int64_t>(1, seconds))};
}

}  // namespace

// One request, across its attempts. Once submitted, `attempt`, `probe` and the fields from
// `call_id` on change only under the engine's mutex; `delivered` belongs to the loop thread;
// the rest is fixed.
struct OpenAiEngine::Pending {
  RequestHandle handle = 0;
  RequestKind kind = RequestKind::canonical;
  std::string id;        // the request id (SGLang's rid)
  std::string endpoint;  // what the response must be a completion of
  HttpCall call;
  std::shared_ptr<ResponseSink> sink;
  bool stream = false;
  bool chat = true;
  int attempt = 0;
  bool probe = false;            // this attempt probes a half-open circuit
  bool delivered = false;        // a chunk reached the sink: never retried after that
  CurlLoop::CallId call_id = 0;  // the attempt in flight; 0 while none is
  TimePoint attempt_started{};   // when the attempt in flight was sent
  bool cancelled = false;
  bool ended = false;
};

// One request's transfer: parses what arrives and reports to the sink. A streamed response is
// assembled as it arrives (engines/openai/assembly.hpp); an error event in it is held back from
// the sink, ends what is read of the stream, and settles the request as the engine's error.
class OpenAiEngine::Transfer final : public HttpHandler {
 public:
  Transfer(OpenAiEngine* engine, std::shared_ptr<Pending> pending)
      : engine_(engine),
        pending_(std::move(pending)),
        sink_(pending_->sink),
        stream_(pending_->stream),
        assembler_(pending_->chat) {}

  void on_status(int status) override { status_ = status; }
  void on_header(std::string_view name, std::string_view value) override {
    if (header_is(name, "retry-after")) {
      retry_after_raw_ = std::string(value);
      retry_after_ = parse_retry_after(value);
    }
  }

  bool on_data(std::string_view bytes) override {
    if (status_ != 200) {  // an error body: keep the start of it for the caller
      const std::size_t room = kErrorBodyLimit - std::min(kErrorBodyLimit, body_.size());
      body_.append(bytes.substr(0, room));
      return true;
    }
    if (!stream_) {
      body_.append(bytes);
      return true;
    }
    events_.clear();
    sse_.feed(bytes, events_);
    for (std::string& data : events_) {
      // Nothing counts after [DONE], nor after the engine said the request failed.
      if (done_ || error_event_) continue;
      if (data == "[DONE]") {
        done_ = true;
        continue;
      }
      const json chunk = parse_json(data);
      if (!chunk.is_object()) {
        problem_ = json_nests_deeper(data)
                       ? json_too_deep("a streamed chunk")
                       : "a streamed chunk is not a JSON object: " + data.substr(0, 200);
        return false;
      }
      if (is_error_object(chunk)) {
        // Kept exactly as sent: the caller gets it as the engine's error (a gateway writes it as
        // the stream's last event), never as a chunk of a result.
        error_event_ = engine_error(chunk, std::move(data), "inside its stream");
        continue;
      }
      assembler_.add(chunk);
      pending_->delivered = true;
      sink_->on_chunk(data);
    }
    return true;
  }

  void on_done(const HttpOutcome& outcome) override {
    // The engine's own word on why its stream failed says more than what came after it.
    if (error_event_ && outcome.kind != HttpOutcome::Kind::cancelled)
      return engine_->settle(pending_, std::move(*error_event_), std::nullopt);
    if (outcome.kind != HttpOutcome::Kind::ok) {
      EngineError e;
      e.kind = error_kind(outcome.kind);
      e.status = outcome.status;
      e.message = problem_.empty() ? outcome.message : problem_;
      if (outcome.kind == HttpOutcome::Kind::transport && stream_) {
        e.message = "the stream broke before [DONE]: " + outcome.message;
      }
      return engine_->settle(pending_, std::move(e), std::nullopt);
    }
    if (status_ != 200) {
      return engine_->settle(
          pending_,
          EngineError{ErrorKind::http_status, status_, std::move(body_),
                      "the engine answered HTTP " + std::to_string(status_), retry_after_raw_},
          retry_after_);
    }
    EngineResult r;
    r.status = 200;
    if (stream_) {
      if (!done_) {
        return engine_->settle(
            pending_,
            EngineError{ErrorKind::truncated, status_, {}, "the stream ended without [DONE]"},
            std::nullopt);
      }
      r.body = assembler_.body();
      r.usage = assembler_.usage();
      r.finish_reason = assembler_.finish_reason();
      r.complete = assembler_.complete();
    } else {
      const json j = parse_json(body_);
      if (is_error_object(j)) {
        return engine_->settle(pending_, engine_error(j, std::move(body_), "in its body"),
                               std::nullopt);
      }
      if (!j.is_object() || !j.contains("choices")) {
        return engine_->settle(
            pending_,
            EngineError{ErrorKind::malformed, status_, body_.substr(0, kErrorBodyLimit),
                        json_nests_deeper(body_) ? json_too_deep("the response")
                                                 : "the response is not a completion JSON object"},
            std::nullopt);
      }
      // A 200 completion that did not finish normally is still the engine's answer for this
      // caller; `complete` keeps it from being stored.
      r.complete = !abnormal_parsed_completion(pending_->endpoint, j);
      r.usage = usage_of(j.value("usage", json()));
      r.finish_reason = first_finish_reason(j);
      r.body = std::move(body_);
    }
    engine_->settle(pending_, std::move(r));
  }

 private:
  // An error the engine reported in a 200 response, with its payload exactly as sent.
  static EngineError engine_error(const json& error, std::string payload, std::string_view where) {
    const ReportedError reported = reported_error(error);
    return EngineError{
        ErrorKind::engine_error, reported.status, std::move(payload),
        "the engine reported an error " + std::string(where) + ": " + reported.message};
  }

  OpenAiEngine* engine_;
  std::shared_ptr<Pending> pending_;
  std::shared_ptr<ResponseSink> sink_;
  bool stream_;
  int status_ = 0;
  std::optional<Duration> retry_after_;
  std::string retry_after_raw_;
  std::string body_;
  SseParser sse_;
  std::vector<std::string> events_;
  bool done_ = false;
  std::optional<EngineError> error_event_;
  std::string problem_;
  StreamAssembler assembler_;
};

// One scrape of /metrics.
class OpenAiEngine::Scrape final : public HttpHandler {
 public:
  explicit Scrape(OpenAiEngine* engine) : engine_(engine) {}
  void on_status(int status) override { status_ = status; }
  bool on_data(std::string_view bytes) override {
    body_.append(bytes);
    return true;
  }
  void on_done(const HttpOutcome& outcome) override {
    if (outcome.kind == HttpOutcome::Kind::ok && status_ == 200) engine_->update_load(body_);
    engine_->scraping_ = false;
  }

 private:
  OpenAiEngine* engine_;
  int status_ = 0;
  std::string body_;
};

namespace {

// One GET /v1/models: the `data` array of an OpenAI-style list, its entries with a string id.
class ModelList final : public HttpHandler {
 public:
  explicit ModelList(std::function<void(std::optional<nlohmann::json>)> done)
      : done_(std::move(done)) {}
  void on_status(int status) override { status_ = status; }
  bool on_data(std::string_view bytes) override {
    body_.append(bytes);
    return true;
  }
  void on_done(const HttpOutcome& outcome) override {
    if (outcome.kind != HttpOutcome::Kind::ok || status_ != 200) return done_(std::nullopt);
    const auto doc = parse_json(body_);
    if (doc.is_discarded() || !doc.is_object() || !doc.contains("data") || !doc["data"].is_array())
      return done_(std::nullopt);
    auto models = nlohmann::json::array();
    for (const auto& m : doc["data"])
      if (m.is_object() && m.contains("id") && m["id"].is_string()) models.push_back(m);
    done_(std::move(models));
  }

 private:
  std::function<void(std::optional<nlohmann::json>)> done_;
  int status_ = 0;
  std::string body_;
};

}  // namespace

void OpenAiEngine::list_models(std::function<void(std::optional<nlohmann::json>)> done) {
  HttpCall call;
  call.method = "GET";
  call.url = options_.base_url + "/v1/models";
  if (!options_.api_key.empty())
    call.headers.push_back("Authorization: Bearer " + options_.api_key);
  call.connect_timeout = options_.connect_timeout;
  call.total_timeout = std::chrono::seconds(10);
  call.max_response_bytes = 4 << 20;
  loop_->start(std::move(call), std::make_shared<ModelList>(std::move(done)));
}

OpenAiEngine::OpenAiEngine(OpenAiOptions options)
    : options_(std::move(options)),
      clock_(options_.clock ? options_.clock : std::make_shared<SteadyClock>()),
      breaker_(options_.breaker, *clock_),
      retry_(options_.retry),
      loop_(std::make_unique<CurlLoop>(options_.max_connections)) {
  load_.slots_total = options_.max_num_seqs;
  load_.concurrency = options_.concurrency;
  load_.prefill_ms_per_token = options_.prefill_ms_per_token;
  load_.lone_token_ms = options_.lone_token_ms;
  load_.batches = options_.batches;
  if (options_.scrape_interval > Duration::zero()) {
    loop_->every(options_.scrape_interval, [this] { scrape(); });
  }
}

// The loop's thread runs scrape(), which uses loop_: stop the thread before loop_ goes. The
// loop ends its transfers with on_done(cancelled); requests waiting for a retry or for their
// refusal to be delivered are settled here, the loop thread being gone.
OpenAiEngine::~OpenAiEngine() {
  loop_->stop();
  std::vector<std::shared_ptr<Pending>> left;
  {
    std::lock_guard lock(mutex_);
    for (auto& [handle, p] : in_flight_)
      left.push_back(p);
  }
  for (auto& p : left)
    if (take(p)) p->sink->on_error(EngineError{ErrorKind::cancelled, 0, {}, "engine stopped"});
}

RequestHandle OpenAiEngine::submit(EngineRequest request, std::shared_ptr<ResponseSink> sink) {
  const RequestHandle handle = next_handle_++;
  auto p = std::make_shared<Pending>();
  p->handle = handle;
  p->kind = request.kind;
  p->sink = std::move(sink);
  p->stream = wants_stream(request.body);
  p->chat = request.endpoint != "/v1/completions";
  p->endpoint = request.endpoint;
  if (request.id.empty()) request.id = "dynrt-" + std::to_string(handle);
  if (flavor() == EngineFlavor::sglang && request.body.is_object()) {
    // SGLang aborts by rid: add ours, or abort by the caller's own when it set one.
    const auto rid = request.body.find("rid");
    if (rid == request.body.end()) {
      request.body["rid"] = request.id;
    } else if (rid->is_string()) {
      request.id = rid->get<std::string>();
    }
  }
  p->id = request.id;
  HttpCall& call = p->call;
  call.url = options_.base_url + request.endpoint;
  call.body = request.body.dump(-1, ' ', false, json::error_handler_t::replace);
  call.headers = {"Content-Type: application/json",
                  p->stream ? "Accept: text/event-stream" : "Accept: application/json"};
  if (!options_.api_key.empty())
    call.headers.push_back("Authorization: Bearer " + options_.api_key);
  call.connect_timeout = options_.connect_timeout;
  call.first_byte_timeout = options_.first_byte_timeout;
  call.idle_timeout = options_.idle_timeout;
  call.total_timeout = options_.total_timeout;
  call.max_response_bytes = options_.max_response_bytes;
  Admission admission;
  Duration cooldown_left{0};
  {
    std::lock_guard lock(mutex_);
    admission = breaker_.admit(p->kind);
    p->probe = admission.probe;
    if (!admission.allowed) cooldown_left = breaker_.cooldown_left(p->kind);
    in_flight_.emplace(handle, p);
    if (p->kind == RequestKind::canonical) retry_.started();
  }
  if (!admission.allowed) {
    // Refused without any network I/O; answered on the loop thread, as every answer is.
    loop_->after(Duration::zero(), [this, p, cooldown_left] {
      if (take(p)) p->sink->on_error(circuit_open(p->kind, options_.name, cooldown_left));
    });
    return handle;
  }
  launch(p);
  return handle;
}

void OpenAiEngine::launch(const std::shared_ptr<Pending>& p) {
  {
    std::lock_guard lock(mutex_);  // held across start() so that cancel() sees the call
    if (!p->ended && !p->cancelled) {
      ++p->attempt;
      ++attempts_;
      p->attempt_started = clock_->now();
      p->call_id = loop_->start(p->call, std::make_shared<Transfer>(this, p));
      return;
    }
  }
  if (take(p)) p->sink->on_error(EngineError{ErrorKind::cancelled, 0, {}, "cancelled"});
}

bool OpenAiEngine::take(const std::shared_ptr<Pending>& p) {
  std::lock_guard lock(mutex_);
  if (p->ended) return false;
  p->ended = true;
  p->call_id = 0;
  in_flight_.erase(p->handle);
  if (p->kind == RequestKind::canonical) retry_.finished(p->attempt > 1);
  return true;
}

void OpenAiEngine::settle(const std::shared_ptr<Pending>& p, EngineResult result) {
  {
    std::lock_guard lock(mutex_);
    breaker_.record(p->kind, std::exchange(p->probe, false), Outcome::success);
    // No engine says how long it worked on a request: its engine time is the wall time of the
    // attempt that answered, from sending it to the last byte (queueing in the engine included,
    // as a fill's price counts it). The cost model prices fills with it.
    result.engine_time = clock_->now() - p->attempt_started;
  }
  if (take(p)) p->sink->on_complete(std::move(result));
}

void OpenAiEngine::settle(const std::shared_ptr<Pending>& p, EngineError error,
                          std::optional<Duration> retry_after) {
  {
    std::lock_guard lock(mutex_);
    p->call_id = 0;
    breaker_.record(p->kind, std::exchange(p->probe, false), outcome_of(error));
    if (!p->cancelled && !p->ended) {
      const auto delay = retry_.next(p->kind, error, p->attempt, p->delivered, retry_after);
      if (delay) {
        const Admission admission = breaker_.admit(p->kind);
        if (admission.allowed) {
          p->probe = admission.probe;
          loop_->after(*delay, [this, p] { launch(p); });
          return;
        }
      }
    }
  }
  if (take(p)) p->sink->on_error(std::move(error));
}

void OpenAiEngine::cancel(RequestHandle handle) {
  std::shared_ptr<Pending> p;
  CurlLoop::CallId call = 0;
  {
    std::lock_guard lock(mutex_);
    const auto it = in_flight_.find(handle);
    if (it == in_flight_.end()) return;
    p = it->second;
    if (p->ended || p->cancelled) return;
    p->cancelled = true;
    call = p->call_id;
  }
  if (call == 0) {  // between attempts, or not yet started: answer on the loop thread
    loop_->after(Duration::zero(), [this, p] {
      if (take(p)) p->sink->on_error(EngineError{ErrorKind::cancelled, 0, {}, "cancelled"});
    });
    return;
  }
  loop_->cancel(call);
  if (flavor() == EngineFlavor::sglang) {
    HttpCall abort;
    abort.url = options_.base_url + "/abort_request";
    abort.body = json{{"rid", p->id}}.dump();
    abort.headers = {"Content-Type: application/json"};
    abort.connect_timeout = options_.connect_timeout;
    abort.total_timeout = std::chrono::seconds(10);
    loop_->start(std::move(abort), std::make_shared<Ignore>());
  }
}

LoadSnapshot OpenAiEngine::load() const {
  std::lock_guard lock(mutex_);
  LoadSnapshot s = load_;
  s.fills_blocked = breaker_.fills_blocked();
  return s;
}

ResilienceSnapshot OpenAiEngine::resilience() const {
  std::lock_guard lock(mutex_);
  ResilienceSnapshot r;
  r.fills = breaker_.state(RequestKind::fill);
  r.canonical = breaker_.state(RequestKind::canonical);
  r.breaker = breaker_.stats();
  r.retry = retry_.stats();
  r.attempts = attempts_;
  return r;
}

EngineFlavor OpenAiEngine::flavor() const {
  if (options_.flavor != EngineFlavor::automatic) return options_.flavor;
  std::lock_guard lock(mutex_);
  return detected_;
}

void OpenAiEngine::scrape() {
  if (scraping_.exchange(true)) return;  // the last scrape is still out
  HttpCall call;
  call.method = "GET";
  call.url = options_.base_url + "/metrics";
  call.connect_timeout = options_.connect_timeout;
  call.total_timeout = std::max(options_.scrape_interval * 4, Duration(std::chrono::seconds(2)));
  call.max_response_bytes = 16 << 20;
  loop_->start(std::move(call), std::make_shared<Scrape>(this));
}

void OpenAiEngine::update_load(const std::string& metrics_text) {
  const auto samples = parse_prometheus(metrics_text);
  const EngineFlavor flavor =
      options_.flavor != EngineFlavor::automatic ? options_.flavor : detect_flavor(samples);
  LoadSnapshot s = load_from_metrics(samples, flavor, options_.max_num_seqs);
  s.concurrency = options_.concurrency;
  s.prefill_ms_per_token = options_.prefill_ms_per_token;
  s.lone_token_ms = options_.lone_token_ms;
  s.batches = options_.batches;
  s.at = std::chrono::time_point_cast<Duration>(std::chrono::steady_clock::now());
  {
    std::lock_guard lock(mutex_);
    if (flavor != EngineFlavor::generic) detected_ = flavor;
    if (s.valid) load_ = s;
    ++scrapes_;
  }
  scraped_.notify_all();
}

std::uint64_t OpenAiEngine::scrapes() const {
  std::lock_guard lock(mutex_);
  return scrapes_;
}

bool OpenAiEngine::await_scrapes(std::uint64_t count, Duration timeout) const {
  std::unique_lock lock(mutex_);
  return scraped_.wait_for(lock, timeout, [&] { return scrapes_ >= count; });
}

}  // namespace dynrt::engines

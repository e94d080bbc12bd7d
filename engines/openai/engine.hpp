// `openai`: any OpenAI-compatible server (vLLM, SGLang, llama.cpp server, ...).
//
// Requests go to {base_url}{endpoint} over libcurl's multi interface on one dedicated thread
// (engines/http/curl_loop.hpp), with connection reuse. A streamed request (`"stream": true`)
// is parsed incrementally as server-sent events: every `data:` payload reaches the sink as a
// chunk as soon as it arrives, `[DONE]` ends it, and the usage chunk of
// `stream_options.include_usage` is read when present; on_complete() then carries a response
// assembled from the chunks, every choice with its tool calls (engines/openai/assembly.hpp). A
// non-streamed response is validated as JSON and passed on whole. A result that did not finish
// normally (a choice without a finish reason) or that could not be assembled faithfully is
// still the caller's answer, with `complete` false so that it is never stored.
//
// Errors are specific: refused connections, each deadline (connect, first byte, idle between
// chunks, total), HTTP error statuses with the engine's status, body and Retry-After kept,
// bodies that are not JSON, streams that end without [DONE] or break mid-way, and errors the
// engine reports inside a 200 response (engine_error): an error event in the stream (a payload
// with an `error` object, or `"object": "error"`) is not passed on as a chunk, nothing after it
// counts, and the request ends with that payload exactly as sent; a 200 body that is an error
// object ends the same way. cancel() aborts the transfer:
// vLLM and SGLang abort a request whose client disconnects, and for SGLang the adapter also
// posts /abort_request with the request's rid (which it adds to the body as `rid`).
//
// Resilience (engines/retry.hpp, engines/breaker.hpp): a canonical request whose attempt failed
// before any of its response reached the sink is retried when the fault says the engine did not
// run it (refused, connect timeout, 429, 502, 503), up to `retry.max_attempts` attempts and
// within a retry budget, after a jittered backoff that honours Retry-After; fills are never
// retried. A circuit breaker refuses fills at once (ErrorKind::rejected, "circuit open", no
// network I/O) while the engine keeps failing, and canonical requests too (HTTP 503) when
// `breaker.canonical_failures` enables it; after a cooldown one probe decides.
//
// Load comes from the engine's Prometheus /metrics, scraped every `scrape_interval` on the
// same thread (engines/openai/prometheus.hpp); decode-slot capacity, which no engine exports,
// comes from `max_num_seqs`.
#pragma once

#include "engines/breaker.hpp"
#include "engines/engine.hpp"
#include "engines/http/curl_loop.hpp"
#include "engines/openai/prometheus.hpp"
#include "engines/retry.hpp"

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace dynrt::engines {

struct OpenAiOptions {
  std::string base_url = "http://127.0.0.1:8000";  // without /v1
  EngineFlavor flavor = EngineFlavor::automatic;   // from the metrics, when automatic
  std::string api_key;                             // sent as a bearer token when set
  int max_num_seqs = 256;                          // decode slots (vLLM's --max-num-seqs)
  // The requests it decodes at once before its steps become compute-bound and each further one
  // slows all the others (LoadSnapshot::concurrency); no engine exports it, so it comes from
  // configuration; 0: unknown, max_num_seqs stands.
  int concurrency = 0;
  // How much longer a decode step lasts per prompt token it carries, in ms
  // (LoadSnapshot::prefill_ms_per_token); no engine exports it; 0: unknown, prompts unpriced.
  double prefill_ms_per_token = 0;
  // The gap between two output tokens of a request decoding alone, in ms
  // (LoadSnapshot::lone_token_ms): its inter-token latency with no other request beside it, as
  // a single-request benchmark measures it; no engine exports it; 0: unknown, and admission
  // does not correct its interference curve from this engine's inter-token latency.
  double lone_token_ms = 0;
  // The decode batches behind the URL that the capacities above are totals of (data-parallel
  // ranks, or a simulated engine's workers).
  int batches = 1;
  Duration connect_timeout = std::chrono::seconds(5);
  Duration first_byte_timeout = std::chrono::seconds(120);
  Duration idle_timeout = std::chrono::seconds(60);
  Duration total_timeout = std::chrono::minutes(30);
  Duration scrape_interval = std::chrono::milliseconds(500);  // 0: no scraping
  std::size_t max_response_bytes = std::size_t{64} << 20;
  // Idle connections kept for reuse (libcurl's CURLMOPT_MAXCONNECTS), not a concurrency limit:
  // every request in flight holds a connection of its own. Sized like the gateway's connection
  // cap: with a smaller pool, a burst of streams closes a connection per finished request and
  // opens a new one for the next (256 left 12,578 sockets in TIME_WAIT over 60 s of 1,000
  // streams). libcurl closes a connection idle for 118 s.
  long max_connections = 4096;
  std::string name = "openai";
  RetryOptions retry;
  BreakerOptions breaker;
  // The breaker's clock; null: the steady clock. A test's ManualClock must be moved only
  // while no request is in flight.
  std::shared_ptr<const Clock> clock;
};

// The retry and breaker state of an engine, for stats and tests.
struct ResilienceSnapshot {
  CircuitState fills = CircuitState::closed;  // the fills' circuit
  CircuitState canonical = CircuitState::closed;
  BreakerStats breaker;
  RetryStats retry;
  std::uint64_t attempts = 0;  // HTTP attempts made for requests (retries included)
};

class OpenAiEngine final : public Engine {
 public:
  explicit OpenAiEngine(OpenAiOptions options);
  ~OpenAiEngine() override;

  RequestHandle submit(EngineRequest request, std::shared_ptr<ResponseSink> sink) override;
  void cancel(RequestHandle handle) override;
  LoadSnapshot load() const override;
  std::string name() const override { return options_.name; }
  // GET /v1/models on the engine (with its API key), within the connect timeout and 10 s.
  void list_models(std::function<void(std::optional<nlohmann::json>)> done) override;

  EngineFlavor flavor() const;  // as configured, or as detected from the metrics
  // Completed scrapes of /metrics so far, and a wait for more (for tests and for callers that
  // need a reading taken after some event).
  std::uint64_t scrapes() const;
  bool await_scrapes(std::uint64_t count, Duration timeout) const;
  // Connections opened so far (requests and scrapes): connection reuse keeps it low.
  std::uint64_t connections_opened() const { return loop_->connections_opened(); }
  ResilienceSnapshot resilience() const;

 private:
  class Transfer;
  class Scrape;
  struct Pending;
  friend class Transfer;
  friend class Scrape;
  void launch(const std::shared_ptr<Pending>& p);
  void settle(const std::shared_ptr<Pending>& p, EngineResult result);
  void settle(const std::shared_ptr<Pending>& p, EngineError error,
              std::optional<Duration> retry_after);
  bool take(const std::shared_ptr<Pending>& p);  // ends p's bookkeeping; false if it had ended
  void scrape();
  void update_load(const std::string& metrics_text);

  const OpenAiOptions options_;
  std::shared_ptr<const Clock> clock_;
  mutable std::mutex mutex_;
  std::unordered_map<RequestHandle, std::shared_ptr<Pending>> in_flight_;
  CircuitBreaker breaker_;      // guarded by mutex_
  RetryPolicy retry_;           // guarded by mutex_
  std::uint64_t attempts_ = 0;  // guarded by mutex_
  LoadSnapshot load_;
  std::uint64_t scrapes_ = 0;
  mutable std::condition_variable scraped_;
  EngineFlavor detected_ = EngineFlavor::automatic;
  std::atomic<RequestHandle> next_handle_{1};
  std::atomic<bool> scraping_{false};
  std::unique_ptr<CurlLoop> loop_;  // last: stopped first, before the state above goes
};

}  // namespace dynrt::engines

// The Engine interface: where dynrt sends canonical requests and speculative fills.
//
// An engine accepts a request (the exact JSON body for an OpenAI-compatible endpoint, a
// priority and whether it is canonical or a fill) and answers through a ResponseSink: for a
// streamed request (`"stream": true` in the body) zero or more chunks, each the JSON payload of
// one SSE `data:` line; then exactly one terminal call, either on_complete() with the whole
// response (for a streamed request, assembled from its chunks) and its token usage and finish
// reason, or on_error(). An error the engine reports inside a 200 response (an error event in
// its stream, an error object in its body) ends in on_error(engine_error), never in a
// completion; a completion says with `complete` whether it may be stored (DESIGN.md section 2,
// "Failure is a miss"). cancel() aborts an in-flight request: the engine releases its slot and
// KV and the sink receives on_error(cancelled), unless the request had already finished.
// load() returns the latest load snapshot without blocking.
//
// Threading: submit(), cancel() and load() may be called from any thread and never block on
// the engine's work. Sink callbacks run on the engine's own thread, one request's callbacks
// in order; a sink must not block, and must not call back into the engine synchronously from
// on_chunk (posting to an actor's mailbox is the intended use). Engines know nothing of CAF.
#pragma once

#include "runtime/clock.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace dynrt::engines {

enum class RequestKind {
  canonical,  ///< a demand from a harness: someone is waiting for it
  fill,       ///< speculative work: run at fill priority, may be cancelled
};

struct EngineRequest {
  std::string endpoint = "/v1/chat/completions";  // or "/v1/completions"
  nlohmann::json body;                            // the exact body sent to the engine
  RequestKind kind = RequestKind::canonical;
  int priority = 0;  // lower is served first (vLLM's convention); fills use a higher value
  std::string id;    // the caller's request id: logs, and SGLang's abort by rid
  // The tenant whose call (or whose run's speculation) this is: for accounting and checks on
  // the caller's side; adapters never send it to the engine.
  std::string tenant;
  // The caller wants the text as it is decoded, although the request does not stream (the
  // runtime reads a decision from it as soon as it is emitted). An engine that can observe its
  // own decode (the simulated one) calls on_progress with each chunk it would have streamed; an
  // engine behind HTTP cannot without changing the request, and ignores it. Never sent.
  bool progress = false;
};

struct Usage {
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  friend bool operator==(const Usage&, const Usage&) = default;
};

struct EngineResult {
  int status = 200;
  std::string body;  // the complete JSON response
  Usage usage;
  std::string finish_reason;  // "stop", "length", ... (of the first choice)
  Duration engine_time{0};    // time the engine spent on it (simulated time for sim)
  // The response completed normally (every choice has a finish reason) and, for a stream, was
  // assembled faithfully from its chunks. Only a complete result may be stored or shared; an
  // incomplete one is still the engine's answer for the caller that asked.
  bool complete = true;
};

enum class ErrorKind {
  refused,             ///< the connection was refused or could not be established
  connect_timeout,     ///< connecting took longer than the connect timeout
  first_byte_timeout,  ///< no response byte within the first-byte timeout
  idle_timeout,        ///< the response stalled between chunks longer than the idle timeout
  total_timeout,       ///< the whole exchange took longer than the total timeout
  http_status,         ///< the engine answered with an error status (status and body kept)
  malformed,           ///< the response is not valid JSON, or not a completion
  truncated,           ///< the stream or the body ended early (no [DONE], reset mid-stream)
  cancelled,           ///< cancel() was called
  rejected,            ///< the engine refused the request itself (bad request, over limits)
  internal,            ///< a bug or an unexpected condition inside the adapter
  engine_error,        ///< the engine reported an error inside a 200 response: an error event in
                       ///< its stream or an error object in its body (status: the error's code
                       ///< when it is 400-599, else 502; body: the error payload as sent)
};

std::string_view to_string(ErrorKind kind);

struct EngineError {
  ErrorKind kind = ErrorKind::internal;
  int status = 0;    // the engine's HTTP status, when it sent one
  std::string body;  // the engine's error body, when it sent one
  std::string message;
  std::string retry_after = {};  // the engine's Retry-After header as sent; empty when none
};

class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  // One SSE data payload (a chat.completion.chunk or text_completion JSON text).
  virtual void on_chunk(std::string_view data) = 0;
  // For a request that does not stream and asked for `progress`: what on_chunk would have
  // received. Nothing of it goes to a caller.
  virtual void on_progress(std::string_view /*data*/) {}
  virtual void on_complete(EngineResult result) = 0;
  virtual void on_error(EngineError error) = 0;
};

// A snapshot of the engine's load. Capacities the engine does not export come from
// configuration; `valid` is false until the first successful reading.
struct LoadSnapshot {
  int slots_busy = 0;
  int slots_total = 0;
  // The requests the engine decodes at once before its steps become compute-bound and every
  // further request slows all the others (0: not known; slots_total stands). Admission prices
  // fills against this, not slots_total: a 1,024-slot worker may saturate at 100.
  int concurrency = 0;
  // How much longer a decode step lasts per prompt token it carries, in ms: under chunked
  // prefill (vLLM's and SGLang's default) a prompt is processed inside the decode steps, so
  // every request decoding beside it waits this long per token (0: not known, or prefill does
  // not stall decode). Admission prices a fill's prompt with it.
  double prefill_ms_per_token = 0;
  // The independent decode batches the capacities here are totals of (an engine's workers or
  // data-parallel ranks): a prompt stalls only the batch it joins.
  int batches = 1;
  // How far apart a request's output tokens come, as counters since the engine started: the
  // gaps between two tokens of one request and their total seconds (vLLM's inter-token latency
  // histogram; llama.cpp's predicted tokens and their seconds), and the prompt tokens it has
  // processed. Two readings' difference is the mean inter-token latency over the time between
  // them, and the prompt work that stalled it. 0: not exported.
  double token_gaps = 0;
  double token_gap_s = 0;
  double prompt_tokens = 0;
  // The decode steps taken, since start (vLLM's engine-step histogram
  // vllm:iteration_tokens_total); with the gaps, the mean batch between two readings. 0: not
  // exported (the batch at the reading stands for it).
  double decode_steps = 0;
  // The gap between two tokens of a request decoding alone, in ms (0: not known): what the
  // inter-token latency is stretched from.
  double lone_token_ms = 0;
  double kv_used = 0;  // tokens (sim) or a fraction of kv_total (engines that export one)
  double kv_total = 0;
  int queued = 0;
  TimePoint at{};
  bool valid = false;
  bool fills_blocked = false;  // a circuit breaker refuses fills to this engine now

  double slot_occupancy() const {
    return slots_total > 0 ? static_cast<double>(slots_busy) / slots_total : 0;
  }
  double kv_occupancy() const { return kv_total > 0 ? kv_used / kv_total : 0; }
};

using RequestHandle = std::uint64_t;  // 0 is never a valid handle

class Engine {
 public:
  virtual ~Engine() = default;
  virtual RequestHandle submit(EngineRequest request, std::shared_ptr<ResponseSink> sink) = 0;
  // Idempotent; unknown and finished handles are ignored.
  virtual void cancel(RequestHandle handle) = 0;
  // Moves a request still waiting in the engine's queue up to `priority` (lower is served
  // first); among requests of that priority it keeps its place by arrival. True when it did.
  // False for a request already running, finished or unknown, and from an engine that cannot
  // re-queue: vLLM, SGLang and llama.cpp let no client change a queued request's priority, so
  // an engine behind HTTP always answers false. Never blocks.
  virtual bool promote(RequestHandle /*handle*/, int /*priority*/) { return false; }
  virtual LoadSnapshot load() const = 0;
  virtual std::string name() const = 0;
  // The models it serves as its GET /v1/models lists them (a JSON array of objects, each with a
  // string "id"), given to `done` once, from any thread; nullopt when it cannot say (no such
  // endpoint, an error, a timeout). Never blocks. An engine that knows no names: nullopt.
  virtual void list_models(std::function<void(std::optional<nlohmann::json>)> done) {
    done(std::nullopt);
  }
};

// Reads "stream": true from a request body.
bool wants_stream(const nlohmann::json& body);

}  // namespace dynrt::engines

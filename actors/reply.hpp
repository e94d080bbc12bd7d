// Answering a call: the sink that delivers a Reply exactly once, replaying a stored result as
// a stream, and the OpenAI error shape.
//
// ReplySink is shared by whoever may answer (an actor, an engine's thread forwarding chunks);
// the first done() wins and later ones are ignored. A sink destroyed unanswered (its actor
// died, the runtime shut down) answers 503, so no caller waits forever. The answer is counted
// there, once per call whichever path gave it: an error answer bumps the runtime's error
// counter. Thread-safe.
#pragma once

#include "actors/runtime.hpp"
#include "engines/engine.hpp"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dynrt::actors {

class ReplySink {
 public:
  // `endpoint` and `body` are the call's: whether it streams, and in which shape. `errors`
  // (when given) counts the call if it is answered with an error.
  ReplySink(ReplyCallbacks callbacks, std::string endpoint, const nlohmann::json& body,
            std::shared_ptr<std::atomic<std::uint64_t>> errors = nullptr);
  ~ReplySink();
  ReplySink(const ReplySink&) = delete;
  ReplySink& operator=(const ReplySink&) = delete;

  bool stream() const { return stream_; }
  void chunk(std::string_view data);
  // True if this call delivered the answer (false: it was already answered). A result served
  // from a fill or the library is replayed as chunks first when the call streams.
  bool done(Reply reply);
  bool answered() const;
  // Chunks were already sent (a retry or a replay must not start over).
  bool streamed() const;

  // How to abort the engine request running for this call (set by the engine actor once it
  // has a handle); cancel() runs it, at once or as soon as it is set.
  void set_canceller(std::function<void()> canceller);
  void cancel();

 private:
  mutable std::mutex mutex_;
  ReplyCallbacks callbacks_;
  std::string endpoint_;
  bool stream_ = false;
  bool include_usage_ = false;
  bool answered_ = false;
  bool chunks_sent_ = false;
  bool started_ = false;
  bool cancelled_ = false;
  std::function<void()> canceller_;
  std::shared_ptr<std::atomic<std::uint64_t>> errors_;

  void start(Served how);  // under the lock
};

// How to abort the engine requests a speculative execution (a fill, a drafter sample) started,
// which may not have been submitted yet when it ends: the engine actor adds a canceller once it
// has a request's handle; cancel() runs every canceller added, and any added later at once.
// The owner cancels it when it ends however it ends, so no engine request outlives it.
// Thread-safe.
class Cancellation {
 public:
  void add(std::function<void()> canceller);
  void cancel();

 private:
  std::mutex mutex_;
  bool cancelled_ = false;
  std::vector<std::function<void()>> cancellers_;
};

// How to raise a fill's engine requests to canonical priority once a canonical call waits for
// its result: a demand must not queue behind every canonical arrival for work it now needs.
// The engine actor adds a promoter per request it submits (true when the engine re-queued it,
// Engine::promote); promote() runs those added and any added later at once, and counts the
// requests re-queued in `requeued`. Thread-safe.
class Promotion {
 public:
  explicit Promotion(std::shared_ptr<std::atomic<std::uint64_t>> requeued = nullptr)
      : requeued_(std::move(requeued)) {}
  void add(std::function<bool()> promoter);
  void promote();  // idempotent
  bool promoted() const;

 private:
  void run(const std::function<bool()>& promoter);

  std::shared_ptr<std::atomic<std::uint64_t>> requeued_;
  mutable std::mutex mutex_;
  bool promoted_ = false;
  std::vector<std::function<bool()>> promoters_;
};

// The SSE data payloads a live engine would have streamed for `body` (a complete chat or
// completions response), so that accumulating them (as the OpenAI SDKs and the adapter's
// assembler do) gives back the body's choices. Per choice, in order: the role chunk (with any
// message field it does not stream piece by piece), the reasoning and the text in pieces of a
// few words (the text in one piece, with the choice's logprobs, when it has them), the refusal,
// the function call, a chunk per tool call (id, type, name and the whole arguments, as vLLM
// sends them), and the finish chunk with the finish reason and the choice's other fields
// (vLLM's stop_reason). Then the usage chunk when `include_usage`.
std::vector<std::string> replay_chunks(std::string_view endpoint, std::string_view body,
                                       bool include_usage);

bool include_usage(const nlohmann::json& body);

}  // namespace dynrt::actors

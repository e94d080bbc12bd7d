// The simulated engine's timing model: a continuous-batching server in simulated time.
//
// The model is deterministic and has no threads or clock of its own: the caller submits and
// cancels at simulated times and advances time, and the model returns the events that happened
// (chunks, completions, errors) in order. SimEngine (engines/sim/engine.hpp) drives it on a
// thread against the real clock scaled.
//
// The model, and its constants (SimParams):
//   - Capacity: `slots` decode slots and a KV pool of `kv_tokens`. A request is admitted when a
//     slot is free and the pool can hold its prompt and its whole output (the simulator knows
//     the output length, so it reserves it up front and never preempts); otherwise it waits,
//     queued by priority (lower first), then arrival.
//   - Prefill: `prefill_base_ms + prefill_ms_per_token * prompt tokens` after admission.
//   - Decode: every request past its prefill advances one token per decode step. A step lasts
//     decode_step_ms * (1 + s(n - 1, k)), where n is the batch, k the share of the KV pool its
//     requests hold, and s the stretch fitted to the paper's Figure 5b
//     (runtime/interference.hpp): co-resident requests and, above all, their KV slow every
//     step; and a step lasts at least `decode_compute_ms_per_token` per request in it (the
//     compute floor: past some batch, an engine is compute-bound and its throughput stops
//     growing). Defaults: 64 slots, 600,000 KV tokens, 25 ms per step (40 tokens/s for a lone
//     request), no compute floor, prefill 10 ms + 0.05 ms per prompt token.
//   - Chunked prefill (`chunked_prefill_tokens` N > 0, as vLLM and SGLang schedule by default):
//     prompts are processed inside the decode steps, at most N tokens per step counting one
//     per decoding request, in admission order; a step lasts its decode time plus
//     prefill_ms_per_token per prompt token it carries (a step with no decode, prefill_base_ms
//     plus that). A long prompt therefore stalls every request decoding beside it. With N = 0
//     (the default) each prefill runs on its own timer beside the decode steps.
//   - Interference as the engine's truth: the stretch is capped at `max_stretch` (the largest
//     Figure 5b measured, when set: the fit is not extrapolated past its data) and then
//     multiplied by `interference_scale`, so a test can make the truth differ from the model
//     the admission price curves believe.
//   - Streaming: a chunk every `chunk_tokens` tokens (and the role chunk at the first token).
//   - Cancellation frees the slot and the KV at once. A queued request may be promoted to a
//     lower priority (a fill a canonical call now waits for); an admitted one keeps its slot.
// Counters: busy time (slot time of every admitted request) and wasted time (the slot time of
// requests cancelled after admission). Single-threaded.
#pragma once

#include "engines/engine.hpp"
#include "engines/sim/text.hpp"
#include "runtime/interference.hpp"

#include <deque>
#include <map>
#include <optional>
#include <set>
#include <vector>

namespace dynrt::engines::sim {

using SimTime = Duration;  // since the simulation started

struct SimParams {
  int slots = 64;
  std::int64_t kv_tokens = 600'000;
  double prefill_base_ms = 10;
  double prefill_ms_per_token = 0.05;
  double decode_step_ms = 25;
  // The compute a decode step cannot go below: each request decoding in it costs this much (a
  // forward pass of one token), so a large batch is compute-bound, as a real engine's is.
  // 0: none (steps stay memory-bound at any batch).
  double decode_compute_ms_per_token = 0;
  int chunk_tokens = 4;
  int chunked_prefill_tokens = 0;  // 0: prefill beside decode; N: N tokens per step, inside it
  InterferenceModel interference;
  double max_stretch = 0;           // cap of the fitted stretch; 0: none
  double interference_scale = 1.0;  // the truth: the (capped) fit times this
  TextParams text;
};

// The interference scales the simulated engine accepts (--interference-scale): two orders of
// magnitude either way of the fit. At 100 a step beside a full batch of a hardware profile
// (the stretch capped at Figure 5b's 1.456) lasts about 150 times a lone one; far beyond it a
// cell's simulated time runs to years, and past about 1e15 a step is no longer a duration the
// clock can hold.
inline constexpr double kMinInterferenceScale = 0.01;
inline constexpr double kMaxInterferenceScale = 100;

struct SimEvent {
  enum class Type { chunk, progress, complete, error };
  Type type = Type::chunk;
  RequestHandle handle = 0;
  std::string data;     // chunk, progress
  EngineResult result;  // complete
  EngineError error;    // error
  SimTime at{0};
};

struct SimCounters {
  std::uint64_t submitted = 0;
  std::uint64_t completed = 0;
  std::uint64_t cancelled = 0;
  std::uint64_t rejected = 0;
  std::uint64_t prompt_tokens = 0;
  std::uint64_t generated_tokens = 0;
  std::uint64_t steps = 0;
  // The gaps between two output tokens of a request (one per request per decode step) and their
  // seconds: a step's duration counts once for every request it advances.
  std::uint64_t decode_steps = 0;  // steps that advanced at least one request
  std::uint64_t token_gaps = 0;
  double token_gap_s = 0;
  // Prompt tokens processed inside decode steps that advanced a request (they lengthened a gap)
  std::uint64_t stalling_prompt_tokens = 0;
  Duration busy{0};             // slot time of admitted requests
  Duration background_busy{0};  // ... of dynrt's fills (a priority above 0, or kind fill)
  Duration wasted{0};           // slot time of requests cancelled after admission
  // The KV tokens reserved by admitted requests, integrated over simulated time (token-seconds):
  // divided by the pool and a span, the share of the pool in use over it.
  double kv_token_s = 0;
  // Time the head of the queue waited for KV room while a decode slot was free: the KV pool,
  // not the slots, was what bound.
  Duration kv_wait{0};
};

class SimModel {
 public:
  explicit SimModel(SimParams params = {}, Script script = {});

  // Queues a request arriving at simulated time `now`: at once when `now` is not after the
  // model's time, otherwise when advance() reaches it (so a caller whose clock runs ahead of
  // the model's last event does not back-date its request). A request the model cannot serve
  // (bad body, larger than the KV pool) produces an error event at `now`.
  void submit(RequestHandle handle, EngineRequest request, SimTime now);
  // Frees the request's slot and KV at once, at the model's time (the last event processed;
  // a caller whose clock runs ahead advances first); an error event (cancelled) follows.
  void cancel(RequestHandle handle, SimTime now);
  // Re-queues a request not yet admitted at `priority`, when that is lower than its own (it
  // keeps its arrival order); true when it did (Engine::promote).
  bool promote(RequestHandle handle, int priority);

  // The time of the next event, if any work is pending.
  std::optional<SimTime> next_event() const;
  // Processes everything up to and including `until`, appending events in time order.
  void advance(SimTime until, std::vector<SimEvent>& events);

  LoadSnapshot load() const;
  // Requests submitted ahead of this worker's clock that arrive by `t`. The engine counts them
  // as queued at its own time, which the worker's clock lags until its events are collected.
  std::size_t arrived_by(SimTime t) const;
  const SimCounters& counters() const { return counters_; }
  const SimParams& params() const { return params_; }
  SimTime now() const { return now_; }
  std::size_t in_flight() const { return requests_.size(); }
  bool holds(RequestHandle handle) const { return requests_.count(handle) > 0; }
  // Requests of priority 0 (canonical ones, not fills) queued or running.
  int canonical_in_flight() const { return canonical_; }

 private:
  enum class Phase { arriving, queued, prefill, decode };
  struct Req {
    RequestHandle handle = 0;
    EngineRequest request;
    Generation gen;
    ResponseMeta meta;
    bool stream = false;
    bool progress = false;  // not streamed, but its chunks go to on_progress
    Phase phase = Phase::queued;
    std::int64_t kv_need = 0;
    std::uint64_t seq = 0;  // arrival order
    SimTime arrival{0};
    SimTime admitted{0};
    SimTime prefill_done{0};
    std::size_t generated = 0;
    std::size_t streamed = 0;       // tokens already sent in chunks
    std::int64_t prefill_left = 0;  // chunked prefill: prompt tokens not yet processed
  };
  struct QueueKey {
    int priority;
    std::uint64_t seq;
    auto operator<=>(const QueueKey&) const = default;
  };

  void enqueue(Req& r);
  SimTime arrival_of(RequestHandle h) const { return requests_.at(h).arrival; }
  void admit(SimTime now, std::vector<SimEvent>& events);
  void finish(Req& r, SimTime now, std::vector<SimEvent>& events);
  void emit_chunks(Req& r, SimTime now, bool final, std::vector<SimEvent>& events);
  void release(Req& r, SimTime now);
  void forget(Req& r);
  void start_step();
  Duration step_duration() const;
  bool chunked() const { return params_.chunked_prefill_tokens > 0; }

  SimParams params_;
  Script script_;
  SimTime now_{0};
  // Adds the KV occupancy of [now_, to) to the counters; state changes only at now_, so it is
  // called before now_ moves.
  void account(SimTime to);
  // What admitting a queued request takes: a free decode slot and room for its KV.
  bool slot_free() const { return slots_busy_ < params_.slots; }
  bool kv_room(const Req& r) const { return kv_reserved_ + r.kv_need <= params_.kv_tokens; }
  std::map<RequestHandle, Req> requests_;
  std::map<QueueKey, RequestHandle> queue_;
  std::multimap<SimTime, RequestHandle> arrivals_;  // submitted for a time not yet reached
  std::set<RequestHandle> decoding_;                // in the current decode step
  std::vector<RequestHandle> joining_;  // prefilled during a step: they join the next one
  std::multimap<SimTime, RequestHandle> prefills_;  // by the time their prefill ends
  std::deque<RequestHandle> prefilling_;  // chunked: admitted, prompt not yet all processed
  std::vector<std::pair<RequestHandle, std::int64_t>> step_chunks_;  // ... in the current step
  std::vector<SimEvent> pending_errors_;  // rejections and cancellations, reported on advance
  int slots_busy_ = 0;
  std::int64_t kv_reserved_ = 0;
  std::int64_t kv_in_use_ = 0;       // prompts and tokens generated so far, of admitted requests
  std::optional<SimTime> step_end_;  // the current decode step
  SimTime step_start_{0};            // ... and when it began
  std::uint64_t next_seq_ = 0;
  int canonical_ = 0;
  SimCounters counters_;
};

}  // namespace dynrt::engines::sim

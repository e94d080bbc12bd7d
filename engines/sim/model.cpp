#include "engines/sim/model.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>

namespace dynrt::engines::sim {

namespace {

Duration ms(double v) {
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double, std::milli>(v));
}

}  // namespace

SimModel::SimModel(SimParams params, Script script)
    : params_(std::move(params)), script_(std::move(script)) {}

void SimModel::submit(RequestHandle handle, EngineRequest request, SimTime now) {
  now = std::max(now, now_);
  ++counters_.submitted;
  auto fail = [&](ErrorKind kind, std::string message) {
    ++counters_.rejected;
    SimEvent e;
    e.type = SimEvent::Type::error;
    e.handle = handle;
    e.error = EngineError{kind, 400, {}, std::move(message)};
    e.at = now;
    pending_errors_.push_back(std::move(e));
  };
  if (request.endpoint != "/v1/chat/completions" && request.endpoint != "/v1/completions") {
    return fail(ErrorKind::rejected,
                "the simulated engine serves /v1/chat/completions and "
                "/v1/completions, not " +
                    request.endpoint);
  }
  auto gen = generate(request.endpoint, request.body, script_, params_.text);
  if (!gen) return fail(ErrorKind::rejected, gen.error().message);
  Req r;
  r.handle = handle;
  r.gen = std::move(*gen);
  r.meta = response_meta(request.endpoint, request.body);
  r.stream = wants_stream(request.body);
  r.progress = !r.stream && request.progress;
  r.kv_need = r.gen.prompt_tokens + static_cast<std::int64_t>(r.gen.tokens.size());
  r.arrival = now;
  if (r.kv_need > params_.kv_tokens) {
    return fail(ErrorKind::rejected, "the request needs " + std::to_string(r.kv_need) +
                                         " KV tokens, more than the engine's " +
                                         std::to_string(params_.kv_tokens));
  }
  r.request = std::move(request);
  if (r.request.priority <= 0) ++canonical_;
  if (now > now_) {  // arrives later: queued once time reaches it
    r.phase = Phase::arriving;
    arrivals_.emplace(now, handle);
  } else {
    enqueue(r);
  }
  requests_.emplace(handle, std::move(r));
}

void SimModel::enqueue(Req& r) {
  r.phase = Phase::queued;
  r.seq = next_seq_++;
  queue_.emplace(QueueKey{r.request.priority, r.seq}, r.handle);
}

// Before a request leaves requests_.
void SimModel::forget(Req& r) {
  if (r.request.priority <= 0) --canonical_;
}

void SimModel::release(Req& r, SimTime now) {
  if (r.phase == Phase::queued || r.phase == Phase::arriving) return;
  --slots_busy_;
  kv_reserved_ -= r.kv_need;
  kv_in_use_ -= r.gen.prompt_tokens + static_cast<std::int64_t>(r.generated);
  counters_.busy += now - r.admitted;
  // A fill promoted to canonical priority is still speculative work; over HTTP the priority is
  // all the engine learns of a request's kind.
  if (r.request.priority > 0 || r.request.kind == RequestKind::fill)
    counters_.background_busy += now - r.admitted;
  decoding_.erase(r.handle);
  std::erase(joining_, r.handle);
  std::erase(prefilling_, r.handle);
  std::erase_if(step_chunks_, [&](const auto& c) { return c.first == r.handle; });
  if (r.phase == Phase::prefill) {
    for (auto [it, end] = prefills_.equal_range(r.prefill_done); it != end; ++it) {
      if (it->second == r.handle) {
        prefills_.erase(it);
        break;
      }
    }
  }
}

bool SimModel::promote(RequestHandle handle, int priority) {
  const auto it = requests_.find(handle);
  if (it == requests_.end()) return false;
  Req& r = it->second;
  if ((r.phase != Phase::queued && r.phase != Phase::arriving) || priority >= r.request.priority)
    return false;
  forget(r);  // it may become canonical (priority 0): counted again below
  if (r.phase == Phase::queued) {
    queue_.erase(QueueKey{r.request.priority, r.seq});
    queue_.emplace(QueueKey{priority, r.seq}, handle);
  }
  r.request.priority = priority;
  if (r.request.priority <= 0) ++canonical_;
  return true;
}

void SimModel::cancel(RequestHandle handle, SimTime now) {
  now = std::max(now, now_);
  const auto it = requests_.find(handle);
  if (it == requests_.end()) return;
  Req& r = it->second;
  if (r.phase == Phase::arriving) {
    for (auto [a, end] = arrivals_.equal_range(arrival_of(handle)); a != end; ++a) {
      if (a->second == handle) {
        arrivals_.erase(a);
        break;
      }
    }
  } else if (r.phase == Phase::queued) {
    queue_.erase(QueueKey{r.request.priority, r.seq});
  } else {
    release(r, now);
    counters_.wasted += now - r.admitted;
  }
  ++counters_.cancelled;
  SimEvent e;
  e.type = SimEvent::Type::error;
  e.handle = handle;
  e.error = EngineError{ErrorKind::cancelled, 0, {}, "cancelled"};
  e.at = now;
  pending_errors_.push_back(std::move(e));
  forget(r);
  requests_.erase(it);
  if (decoding_.empty() && step_chunks_.empty() && step_end_) {
    // the step lost its last request: the next starts now
    step_end_.reset();
    decoding_.insert(joining_.begin(), joining_.end());
    joining_.clear();
  }
}

Duration SimModel::step_duration() const {
  double step_ms = 0;
  if (!decoding_.empty()) {
    const double n = static_cast<double>(decoding_.size());
    const double kv = static_cast<double>(kv_in_use_) / static_cast<double>(params_.kv_tokens);
    double stretch = params_.interference.stretch(n - 1.0, kv);
    if (params_.max_stretch > 0) stretch = std::min(stretch, params_.max_stretch);
    step_ms = std::max(params_.decode_step_ms * (1.0 + params_.interference_scale * stretch),
                       params_.decode_compute_ms_per_token * n);
  }
  if (!step_chunks_.empty()) {
    std::int64_t tokens = 0;
    for (const auto& c : step_chunks_)
      tokens += c.second;
    if (decoding_.empty()) step_ms += params_.prefill_base_ms;
    step_ms += params_.prefill_ms_per_token * static_cast<double>(tokens);
  }
  return ms(step_ms);
}

// The next step, if there is work for one: the requests decoding, and under chunked prefill
// the prompt chunks that fit the step's token budget beside them.
void SimModel::start_step() {
  if (step_end_) return;
  if (chunked()) {
    std::int64_t budget =
        params_.chunked_prefill_tokens - static_cast<std::int64_t>(decoding_.size());
    for (const RequestHandle h : prefilling_) {
      if (budget <= 0) break;
      const std::int64_t take = std::min(requests_.at(h).prefill_left, budget);
      step_chunks_.emplace_back(h, take);
      budget -= std::max<std::int64_t>(take, 1);  // an empty prompt still takes a step
    }
  }
  if (decoding_.empty() && step_chunks_.empty()) return;
  step_start_ = now_;
  step_end_ = now_ + step_duration();
}

std::optional<SimTime> SimModel::next_event() const {
  std::optional<SimTime> t;
  auto earliest = [&](SimTime c) { t = t ? std::min(*t, c) : c; };
  for (const SimEvent& e : pending_errors_)
    earliest(std::max(e.at, now_));
  if (!arrivals_.empty()) earliest(arrivals_.begin()->first);
  if (!queue_.empty()) {
    const Req& head = requests_.at(queue_.begin()->second);
    if (slot_free() && kv_room(head)) {
      earliest(now_);
    }
  }
  if (!prefills_.empty()) earliest(prefills_.begin()->first);
  if (step_end_) earliest(*step_end_);
  return t;
}

void SimModel::emit_chunks(Req& r, SimTime now, bool final, std::vector<SimEvent>& events) {
  if (!r.stream && !r.progress) return;
  auto push = [&](std::string data) {
    SimEvent e;
    e.type = r.stream ? SimEvent::Type::chunk : SimEvent::Type::progress;
    e.handle = r.handle;
    e.data = std::move(data);
    e.at = now;
    events.push_back(std::move(e));
  };
  const std::size_t ready = r.generated - r.streamed;
  if (ready > 0 &&
      (final || ready >= static_cast<std::size_t>(params_.chunk_tokens) || r.streamed == 0)) {
    if (r.streamed == 0 && r.meta.chat) push(role_chunk(r.meta));
    std::string text;
    for (std::size_t i = r.streamed; i < r.generated; ++i)
      text += r.gen.tokens[i];
    push(text_chunk(r.meta, text));
    r.streamed = r.generated;
  }
  if (final) {
    if (r.streamed == 0 && r.meta.chat) push(role_chunk(r.meta));
    for (std::size_t i = 0; i < r.gen.tool_calls.size(); ++i)
      push(tool_call_chunk(r.meta, i, r.gen.tool_calls[i]));
    push(final_chunk(r.meta, r.gen.finish_reason));
    if (r.meta.include_usage) {
      push(usage_chunk(r.meta,
                       Usage{r.gen.prompt_tokens, static_cast<std::int64_t>(r.gen.tokens.size())}));
    }
  }
}

void SimModel::finish(Req& r, SimTime now, std::vector<SimEvent>& events) {
  emit_chunks(r, now, /*final=*/true, events);
  SimEvent e;
  e.type = SimEvent::Type::complete;
  e.handle = r.handle;
  e.result.status = 200;
  e.result.body = full_response(r.meta, r.gen);
  e.result.usage = Usage{r.gen.prompt_tokens, static_cast<std::int64_t>(r.gen.tokens.size())};
  e.result.finish_reason = r.gen.finish_reason;
  e.result.engine_time = now - r.admitted;
  e.at = now;
  events.push_back(std::move(e));
  ++counters_.completed;
  counters_.prompt_tokens += static_cast<std::uint64_t>(r.gen.prompt_tokens);
  release(r, now);
}

// Admits from the head of the queue while the head fits: priority, then arrival, with no
// overtaking (a large head request waits for room rather than starving).
void SimModel::admit(SimTime now, std::vector<SimEvent>& events) {
  while (!queue_.empty()) {
    const RequestHandle h = queue_.begin()->second;
    Req& r = requests_.at(h);
    if (!slot_free() || !kv_room(r)) break;
    queue_.erase(queue_.begin());
    ++slots_busy_;
    kv_reserved_ += r.kv_need;
    kv_in_use_ += r.gen.prompt_tokens;
    r.phase = Phase::prefill;
    r.admitted = now;
    if (chunked()) {
      r.prefill_left = r.gen.prompt_tokens;
      prefilling_.push_back(h);
      continue;
    }
    r.prefill_done =
        now + ms(params_.prefill_base_ms +
                 params_.prefill_ms_per_token * static_cast<double>(r.gen.prompt_tokens));
    prefills_.emplace(r.prefill_done, h);
  }
  (void)events;
}

void SimModel::advance(SimTime until, std::vector<SimEvent>& events) {
  while (true) {
    const std::optional<SimTime> t = next_event();
    if (!t || *t > until) break;
    account(*t);
    now_ = std::max(now_, *t);
    // 1. errors reported at submission or cancellation, once their time comes
    std::erase_if(pending_errors_, [&](SimEvent& e) {
      if (e.at > now_) return false;
      events.push_back(std::move(e));
      return true;
    });
    // 2. requests submitted ahead of time that arrive now
    while (!arrivals_.empty() && arrivals_.begin()->first <= now_) {
      enqueue(requests_.at(arrivals_.begin()->second));
      arrivals_.erase(arrivals_.begin());
    }
    // 3. the decode step that ends now: one token for every request in it
    if (step_end_ && *step_end_ <= now_) {
      step_end_.reset();
      ++counters_.steps;
      const bool advanced = !decoding_.empty();  // its prompt chunks stalled someone's token
      if (advanced) ++counters_.decode_steps;
      counters_.token_gaps += decoding_.size();
      counters_.token_gap_s += std::chrono::duration<double>(now_ - step_start_).count() *
                               static_cast<double>(decoding_.size());
      std::vector<RequestHandle> done;
      for (const RequestHandle h : decoding_) {
        Req& r = requests_.at(h);
        ++r.generated;
        ++kv_in_use_;
        ++counters_.generated_tokens;
        if (r.generated >= r.gen.tokens.size()) {
          done.push_back(h);
        } else {
          emit_chunks(r, now_, false, events);
        }
      }
      for (const RequestHandle h : done) {
        finish(requests_.at(h), now_, events);
        forget(requests_.at(h));
        requests_.erase(h);
      }
      decoding_.insert(joining_.begin(), joining_.end());
      joining_.clear();
      // Chunked prefill: the prompt chunks the step carried; a finished prompt decodes next step.
      for (const auto& [h, tokens] : std::exchange(step_chunks_, {})) {
        Req& r = requests_.at(h);
        r.prefill_left -= tokens;
        if (advanced) counters_.stalling_prompt_tokens += static_cast<std::uint64_t>(tokens);
        if (r.prefill_left > 0) continue;
        std::erase(prefilling_, h);
        r.phase = Phase::decode;
        if (r.gen.tokens.empty()) {
          finish(r, now_, events);
          forget(r);
          requests_.erase(h);
        } else {
          decoding_.insert(h);
        }
      }
    }
    // 4. prefills that end now: they join the running step's successor
    while (!prefills_.empty() && prefills_.begin()->first <= now_) {
      const RequestHandle h = prefills_.begin()->second;
      prefills_.erase(prefills_.begin());
      Req& r = requests_.at(h);
      r.phase = Phase::decode;
      if (r.gen.tokens.empty()) {  // max_tokens 0: done once the prompt is in
        finish(r, now_, events);
        forget(r);
        requests_.erase(h);
      } else if (step_end_) {
        joining_.push_back(h);
      } else {
        decoding_.insert(h);
      }
    }
    // 5. admissions, now that slots and KV may have been freed
    admit(now_, events);
    // 6. the next step
    start_step();
  }
  account(until);
  now_ = std::max(now_, until);
}

void SimModel::account(SimTime to) {
  if (to <= now_) return;
  const Duration span = to - now_;
  counters_.kv_token_s +=
      static_cast<double>(kv_reserved_) * std::chrono::duration<double>(span).count();
  if (!queue_.empty() && slot_free() && !kv_room(requests_.at(queue_.begin()->second)))
    counters_.kv_wait += span;
}

std::size_t SimModel::arrived_by(SimTime t) const {
  return static_cast<std::size_t>(std::distance(arrivals_.begin(), arrivals_.upper_bound(t)));
}

LoadSnapshot SimModel::load() const {
  LoadSnapshot s;
  s.slots_busy = slots_busy_;
  s.slots_total = params_.slots;
  if (params_.decode_compute_ms_per_token > 0)
    s.concurrency =
        std::clamp(static_cast<int>(params_.decode_step_ms / params_.decode_compute_ms_per_token),
                   1, params_.slots);
  // Without chunking a prompt is processed on its own timer and stalls no decode step.
  if (chunked()) s.prefill_ms_per_token = params_.prefill_ms_per_token;
  s.kv_used = static_cast<double>(kv_in_use_);
  s.kv_total = static_cast<double>(params_.kv_tokens);
  s.queued = static_cast<int>(queue_.size());
  s.token_gaps = static_cast<double>(counters_.token_gaps);
  s.decode_steps = static_cast<double>(counters_.decode_steps);
  s.token_gap_s = counters_.token_gap_s;
  s.prompt_tokens = static_cast<double>(counters_.stalling_prompt_tokens);
  s.lone_token_ms = params_.decode_step_ms;
  s.valid = true;
  return s;
}

}  // namespace dynrt::engines::sim

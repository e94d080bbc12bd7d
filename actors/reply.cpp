#include "actors/reply.hpp"

#include "runtime/json_text.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace dynrt::actors {

using nlohmann::json;
using nlohmann::ordered_json;

bool include_usage(const json& body) {
  if (!body.is_object()) return false;
  const auto it = body.find("stream_options");
  if (it == body.end() || !it->is_object()) return false;
  const auto u = it->find("include_usage");
  return u != it->end() && u->is_boolean() && u->get<bool>();
}

ReplySink::ReplySink(ReplyCallbacks callbacks, std::string endpoint, const json& body,
                     std::shared_ptr<std::atomic<std::uint64_t>> errors)
    : callbacks_(std::move(callbacks)),
      endpoint_(std::move(endpoint)),
      stream_(engines::wants_stream(body)),
      include_usage_(include_usage(body)),
      errors_(std::move(errors)) {}

ReplySink::~ReplySink() {
  if (answered_) return;
  if (errors_) ++*errors_;
  if (callbacks_.on_done)
    callbacks_.on_done(
        error_reply(503, "service_unavailable", "dynrt stopped before this call was answered"));
}

void ReplySink::start(Served how) {
  if (started_) return;
  started_ = true;
  if (callbacks_.on_start) callbacks_.on_start(how);
}

void ReplySink::chunk(std::string_view data) {
  std::lock_guard lock(mutex_);
  if (answered_ || !stream_) return;
  start(Served::engine);  // live chunks come only from an execution for this call
  chunks_sent_ = true;
  if (callbacks_.on_chunk) callbacks_.on_chunk(data);
}

bool ReplySink::done(Reply reply) {
  std::function<void(Reply)> f;
  // The call's other callbacks go with the answer: whatever they hold (a gateway's connection)
  // must not live on for as long as an engine keeps this sink. Destroyed outside the lock.
  std::function<void(std::string_view)> chunk;
  std::function<void(Served)> started;
  {
    std::lock_guard lock(mutex_);
    if (answered_) return false;
    if (reply.ok()) start(reply.served);  // an error is no start: a gateway answers it whole
    // A stored result for a streaming caller is replayed before the answer, under the lock,
    // so nothing else for this call can interleave.
    if (stream_ && !chunks_sent_ && reply.ok() && reply.served != Served::engine &&
        callbacks_.on_chunk && !is_tool_endpoint(endpoint_)) {
      for (const auto& c : replay_chunks(endpoint_, reply.body, include_usage_))
        callbacks_.on_chunk(c);
      chunks_sent_ = true;
    }
    answered_ = true;
    f = std::move(callbacks_.on_done);
    chunk = std::move(callbacks_.on_chunk);
    started = std::move(callbacks_.on_start);
    canceller_ = nullptr;
  }
  if (!reply.ok() && errors_) ++*errors_;
  if (f) f(std::move(reply));
  return true;
}

void ReplySink::set_canceller(std::function<void()> canceller) {
  std::function<void()> now;
  {
    std::lock_guard lock(mutex_);
    if (answered_) return;
    canceller_ = std::move(canceller);
    if (cancelled_) now = canceller_;
  }
  if (now) now();  // cancelled before the engine had the request: abort it now
}

void ReplySink::cancel() {
  std::function<void()> f;
  {
    std::lock_guard lock(mutex_);
    if (answered_ || cancelled_) return;
    cancelled_ = true;
    f = canceller_;
  }
  if (f) f();
}

void Cancellation::add(std::function<void()> canceller) {
  {
    std::lock_guard lock(mutex_);
    if (!cancelled_) {
      cancellers_.push_back(std::move(canceller));
      return;
    }
  }
  canceller();  // ended before the engine had the request: abort it now
}

void Cancellation::cancel() {
  std::vector<std::function<void()>> now;
  {
    std::lock_guard lock(mutex_);
    if (cancelled_) return;
    cancelled_ = true;
    now.swap(cancellers_);
  }
  for (auto& f : now)
    f();
}

void Promotion::add(std::function<bool()> promoter) {
  {
    std::lock_guard lock(mutex_);
    if (!promoted_) {
      promoters_.push_back(std::move(promoter));
      return;
    }
  }
  run(promoter);  // promoted before the engine had the request
}

void Promotion::promote() {
  std::vector<std::function<bool()>> now;
  {
    std::lock_guard lock(mutex_);
    if (promoted_) return;
    promoted_ = true;
    now.swap(promoters_);
  }
  for (const auto& f : now)
    run(f);
}

bool Promotion::promoted() const {
  std::lock_guard lock(mutex_);
  return promoted_;
}

void Promotion::run(const std::function<bool()>& promoter) {
  if (promoter() && requeued_) ++*requeued_;
}

bool ReplySink::answered() const {
  std::lock_guard lock(mutex_);
  return answered_;
}

bool ReplySink::streamed() const {
  std::lock_guard lock(mutex_);
  return chunks_sent_;
}

namespace {

// Pieces of four words (each with its leading space), like a live engine's chunks.
std::vector<std::string> pieces(const std::string& text) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = pos, words = 0;
    while (end < text.size() && words < 4) {
      ++end;  // the leading space or first character
      while (end < text.size() && text[end] != ' ')
        ++end;
      ++words;
    }
    out.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

bool has_value(const ordered_json& j) {
  return !j.is_null() && !(j.is_array() && j.empty());
}

// A member as the engine gave it, or the fallback where `o` is no object or lacks it (value()
// with a typed fallback would throw on an engine's answer with, say, a numeric id).
ordered_json member_or(const ordered_json& o, const char* key, ordered_json fallback) {
  if (!o.is_object()) return fallback;
  const auto it = o.find(key);
  return it != o.end() ? *it : fallback;
}

}  // namespace

std::vector<std::string> replay_chunks(std::string_view endpoint, std::string_view body,
                                       bool with_usage) {
  std::vector<std::string> out;
  const ordered_json full = parse_json<ordered_json>(body);
  if (full.is_discarded() || !full.is_object()) return out;
  const bool chat = endpoint.find("chat") != std::string_view::npos;
  ordered_json head;
  head["id"] = member_or(full, "id", "");
  head["object"] = chat ? "chat.completion.chunk" : "text_completion";
  head["created"] = full.contains("created") ? full["created"] : ordered_json(0);
  head["model"] = member_or(full, "model", "");
  for (const char* key : {"system_fingerprint", "service_tier"})
    if (full.contains(key) && !full[key].is_null()) head[key] = full[key];
  auto emit = [&](ordered_json choice) {
    ordered_json j = head;
    j["choices"] = ordered_json::array({std::move(choice)});
    if (with_usage) j["usage"] = nullptr;
    out.push_back(j.dump());
  };
  const ordered_json none;
  const ordered_json& choices = full.contains("choices") ? full["choices"] : none;
  for (std::size_t i = 0; choices.is_array() && i < choices.size(); ++i) {
    const ordered_json& c = choices[i];
    if (!c.is_object()) continue;
    const ordered_json index = c.contains("index") ? c["index"] : ordered_json(i);
    const ordered_json logprobs = c.value("logprobs", ordered_json());
    // One delta (chat) or one piece of text (completions) of this choice.
    auto emit_delta = [&](ordered_json delta, ordered_json lp = nullptr) {
      ordered_json choice;
      choice["index"] = index;
      if (chat) {
        choice["delta"] = std::move(delta);
      } else {
        choice["text"] = std::move(delta);
      }
      choice["logprobs"] = std::move(lp);
      choice["finish_reason"] = nullptr;
      emit(std::move(choice));
    };
    // The text: in pieces, or whole with the logprobs that go with it.
    auto emit_text = [&](const char* field, const std::string& text, bool with_logprobs) {
      if (with_logprobs) {
        emit_delta(chat ? ordered_json{{field, text}} : ordered_json(text), logprobs);
        return;
      }
      for (auto& piece : pieces(text))
        emit_delta(chat ? ordered_json{{field, piece}} : ordered_json(piece));
    };
    const bool text_logprobs = has_value(logprobs);
    if (chat) {
      ordered_json m = c.value("message", ordered_json::object());
      if (!m.is_object()) m = ordered_json::object();  // a message of another shape says nothing
      ordered_json role = {{"role", member_or(m, "role", "assistant")}};
      if (m.contains("content") && m["content"].is_string()) role["content"] = "";
      // Fields streamed below have their own chunks; any other goes with the role.
      for (const auto& [key, v] : m.items())
        if (key != "role" && key != "content" && key != "reasoning_content" && key != "reasoning" &&
            key != "refusal" && key != "tool_calls" && key != "function_call" && has_value(v))
          role[key] = v;
      emit_delta(std::move(role));
      for (const char* key : {"reasoning_content", "reasoning"})
        if (m.contains(key) && m[key].is_string()) emit_text(key, m[key].get<std::string>(), false);
      const std::string content =
          m.contains("content") && m["content"].is_string() ? m["content"].get<std::string>() : "";
      if (text_logprobs || !content.empty()) emit_text("content", content, text_logprobs);
      if (m.contains("refusal") && m["refusal"].is_string() &&
          !m["refusal"].get<std::string>().empty())
        emit_delta({{"refusal", m["refusal"]}});
      if (m.contains("function_call") && m["function_call"].is_object())
        emit_delta({{"function_call", m["function_call"]}});
      if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
        const auto& calls = m["tool_calls"];
        for (std::size_t k = 0; k < calls.size(); ++k) {
          ordered_json call = {{"index", k}};
          if (calls[k].is_object())
            for (const auto& [key, v] : calls[k].items())
              call[key] = v;
          emit_delta({{"tool_calls", ordered_json::array({std::move(call)})}});
        }
      }
    } else {
      const std::string text =
          c.contains("text") && c["text"].is_string() ? c["text"].get<std::string>() : "";
      if (text_logprobs || !text.empty()) emit_text("text", text, text_logprobs);
    }
    // The finish chunk: the finish reason as stored (never one made up) and the choice's other
    // fields (vLLM's stop_reason, SGLang's matched_stop).
    ordered_json finish;
    finish["index"] = index;
    if (chat) {
      finish["delta"] = ordered_json::object();
    } else {
      finish["text"] = "";
    }
    finish["logprobs"] = nullptr;
    finish["finish_reason"] = c.value("finish_reason", ordered_json());
    for (const auto& [key, v] : c.items())
      if (key != "index" && key != "message" && key != "text" && key != "logprobs" &&
          key != "finish_reason")
        finish[key] = v;
    emit(std::move(finish));
  }
  if (with_usage && full.contains("usage")) {
    ordered_json j = head;
    j["choices"] = ordered_json::array();
    j["usage"] = full["usage"];
    out.push_back(j.dump());
  }
  return out;
}

}  // namespace dynrt::actors

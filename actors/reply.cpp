#include "actors/reply.hpp"

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

ReplySink::ReplySink(ReplyCallbacks callbacks, std::string endpoint, const json& body)
    : callbacks_(std::move(callbacks)),
      endpoint_(std::move(endpoint)),
      stream_(engines::wants_stream(body)),
      include_usage_(include_usage(body)) {}

ReplySink::~ReplySink() {
  if (!answered_ && callbacks_.on_done)
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
  {
    std::lock_guard lock(mutex_);
    if (answered_) return false;
    if (reply.ok()) start(reply.served);  // an error is no start: a gateway answers it whole
    // A stored result for a streaming caller is replayed before the answer, under the lock,
    // so nothing else for this call can interleave.
    if (stream_ && !chunks_sent_ && reply.ok() && reply.served != Served::engine &&
        callbacks_.on_chunk && endpoint_.rfind("/v1/dynrt/tools/", 0) != 0) {
      for (const auto& c : replay_chunks(endpoint_, reply.body, include_usage_))
        callbacks_.on_chunk(c);
      chunks_sent_ = true;
    }
    answered_ = true;
    f = std::move(callbacks_.on_done);
  }
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

bool ReplySink::answered() const {
  std::lock_guard lock(mutex_);
  return answered_;
}

bool ReplySink::streamed() const {
  std::lock_guard lock(mutex_);
  return chunks_sent_;
}

std::vector<std::string> replay_chunks(std::string_view endpoint, std::string_view body,
                                       bool with_usage) {
  std::vector<std::string> out;
  const ordered_json full = ordered_json::parse(body, nullptr, false);
  if (full.is_discarded() || !full.is_object()) return out;
  const bool chat = endpoint.find("chat") != std::string_view::npos;
  ordered_json head;
  head["id"] = full.value("id", std::string());
  head["object"] = chat ? "chat.completion.chunk" : "text_completion";
  head["created"] = full.contains("created") ? full["created"] : ordered_json(0);
  head["model"] = full.value("model", std::string());
  auto emit = [&](ordered_json choice) {
    ordered_json j = head;
    j["choices"] = ordered_json::array({std::move(choice)});
    if (with_usage) j["usage"] = nullptr;
    out.push_back(j.dump());
  };
  std::string text, finish = "stop";
  if (full.contains("choices") && full["choices"].is_array() && !full["choices"].empty()) {
    const auto& c = full["choices"][0];
    if (chat && c.contains("message") && c["message"].is_object() &&
        c["message"].value("content", ordered_json()).is_string())
      text = c["message"]["content"].get<std::string>();
    else if (!chat && c.contains("text") && c["text"].is_string())
      text = c["text"].get<std::string>();
    if (c.contains("finish_reason") && c["finish_reason"].is_string())
      finish = c["finish_reason"].get<std::string>();
  }
  if (chat) {
    emit({{"index", 0},
          {"delta", {{"role", "assistant"}, {"content", ""}}},
          {"logprobs", nullptr},
          {"finish_reason", nullptr}});
  }
  // Pieces of four words (each with its leading space), like a live engine's chunks.
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = pos, words = 0;
    while (end < text.size() && words < 4) {
      ++end;  // the leading space or first character
      while (end < text.size() && text[end] != ' ')
        ++end;
      ++words;
    }
    const std::string piece = text.substr(pos, end - pos);
    if (chat)
      emit({{"index", 0},
            {"delta", {{"content", piece}}},
            {"logprobs", nullptr},
            {"finish_reason", nullptr}});
    else
      emit({{"index", 0}, {"text", piece}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
    pos = end;
  }
  if (chat)
    emit({{"index", 0},
          {"delta", ordered_json::object()},
          {"logprobs", nullptr},
          {"finish_reason", finish}});
  else
    emit({{"index", 0}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", finish}});
  if (with_usage && full.contains("usage")) {
    ordered_json j = head;
    j["choices"] = ordered_json::array();
    j["usage"] = full["usage"];
    out.push_back(j.dump());
  }
  return out;
}

std::string error_body(std::string_view message, std::string_view type, int code) {
  ordered_json j;
  j["error"] = {{"message", std::string(message)},
                {"type", std::string(type)},
                {"param", nullptr},
                {"code", code}};
  return j.dump();
}

Reply error_reply(int status, std::string_view type, std::string message) {
  Reply r;
  r.status = status;
  r.body = error_body(message, type, status);
  r.error = std::move(message);
  return r;
}

Reply error_reply(const engines::EngineError& e) {
  using engines::ErrorKind;
  std::string message = "engine: " + e.message;
  switch (e.kind) {
    case ErrorKind::http_status:
    case ErrorKind::engine_error: {
      // The engine's own answer, as it sent it.
      Reply r;
      r.status = e.status > 0 ? e.status : 502;
      r.body = !e.body.empty() ? e.body : error_body(message, "engine_error", r.status);
      r.error = std::move(message);
      return r;
    }
    case ErrorKind::connect_timeout:
    case ErrorKind::first_byte_timeout:
    case ErrorKind::idle_timeout:
    case ErrorKind::total_timeout:
      return error_reply(504, "engine_timeout", std::move(message));
    case ErrorKind::rejected:
      return error_reply(400, "invalid_request_error", std::move(message));
    case ErrorKind::cancelled:
      return error_reply(503, "service_unavailable", std::move(message));
    case ErrorKind::refused:
    case ErrorKind::malformed:
    case ErrorKind::truncated:
    case ErrorKind::internal:
      break;
  }
  return error_reply(502, "engine_error", std::move(message));
}

}  // namespace dynrt::actors

namespace dynrt {
std::string_view to_string(Served s) {
  switch (s) {
    case Served::engine:
      return "engine";
    case Served::fill:
      return "fill";
    case Served::cache:
      return "cache";
  }
  return "engine";
}
}  // namespace dynrt

#include "run/call.hpp"

#include "engines/openai/error_body.hpp"

#include <utility>

namespace dynrt {

std::string error_body(std::string_view message, std::string_view type, int code) {
  return engines::openai_error_body(message, type, code);
}

Reply error_reply(int status, std::string_view type, std::string message) {
  Reply r;
  r.status = status;
  r.body = error_body(message, type, status);
  r.error = std::move(message);
  // From a temporary: g++ 12 warns, wrongly, on assigning the literal (-Wrestrict).
  if (status == 503) r.retry_after = std::string("1");
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
      r.retry_after = e.retry_after;
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

Reply to_reply(engines::EngineResult result) {
  Reply r;
  r.status = result.status;
  r.body = std::move(result.body);
  r.usage = result.usage;
  r.finish_reason = std::move(result.finish_reason);
  r.served = Served::engine;
  return r;
}

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

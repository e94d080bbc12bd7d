#include "engines/engine.hpp"

namespace dynrt::engines {

std::string_view to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::refused:
      return "refused";
    case ErrorKind::connect_timeout:
      return "connect_timeout";
    case ErrorKind::first_byte_timeout:
      return "first_byte_timeout";
    case ErrorKind::idle_timeout:
      return "idle_timeout";
    case ErrorKind::total_timeout:
      return "total_timeout";
    case ErrorKind::http_status:
      return "http_status";
    case ErrorKind::malformed:
      return "malformed";
    case ErrorKind::truncated:
      return "truncated";
    case ErrorKind::cancelled:
      return "cancelled";
    case ErrorKind::rejected:
      return "rejected";
    case ErrorKind::internal:
      return "internal";
    case ErrorKind::engine_error:
      return "engine_error";
  }
  return "internal";
}

bool wants_stream(const nlohmann::json& body) {
  return body.is_object() && body.contains("stream") && body["stream"].is_boolean() &&
         body["stream"].get<bool>();
}

}  // namespace dynrt::engines

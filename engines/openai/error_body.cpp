#include "engines/openai/error_body.hpp"

#include <nlohmann/json.hpp>

namespace dynrt::engines {

std::string openai_error_body(std::string_view message, std::string_view type, int code,
                              std::string_view param) {
  using nlohmann::ordered_json;
  ordered_json error;
  error["message"] = message;
  error["type"] = type;
  error["param"] = param.empty() ? ordered_json(nullptr) : ordered_json(param);
  error["code"] = code;
  return ordered_json{{"error", std::move(error)}}.dump(-1, ' ', false,
                                                        ordered_json::error_handler_t::replace);
}

std::string_view openai_error_type(int status) {
  if (status == 404) return "not_found_error";
  if (status == 408) return "timeout_error";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

}  // namespace dynrt::engines

// The endpoints a call can name. A tool call travels as a call to kToolPrefix followed by the
// tool's name (/v1/dynrt/tools/<name>), with the arguments as the body; templates render tool
// stages to it, the gateway serves it, the runtime routes it to the tool engine.
#pragma once

#include <string_view>

namespace dynrt {

inline constexpr std::string_view kToolPrefix = "/v1/dynrt/tools/";

inline bool is_tool_endpoint(std::string_view endpoint) {
  return endpoint.substr(0, kToolPrefix.size()) == kToolPrefix;
}

// The tool a tool endpoint names ("" for any other endpoint).
inline std::string_view tool_name(std::string_view endpoint) {
  return is_tool_endpoint(endpoint) ? endpoint.substr(kToolPrefix.size()) : std::string_view{};
}

}  // namespace dynrt

// JSON text dynrt did not write itself, parsed with its nesting bounded.
//
// nlohmann::json parses iteratively, but copies, compares, hashes and writes its values
// recursively: a value nested a few hundred thousand levels deep (a megabyte of `[`) overflows
// the stack the first time it is copied or dumped, and the process dies. Text from outside — an
// engine's answer or stream chunk, a model's tool-call arguments, a tool's output, a shared-tier
// entry, an operator's file — is parsed through parse_json, and text nested deeper than
// kMaxJsonDepth reads as not JSON. Request bodies get the same bound from the gateway's strict
// parser. Pure; thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace dynrt {

inline constexpr std::size_t kMaxJsonDepth = 256;  // arrays and objects nested in one value

// Whether `text` nests arrays and objects more than `max_depth` deep, counted outside strings.
// Exact for valid JSON; for text that is not JSON the answer does not matter, the parse fails.
bool json_nests_deeper(std::string_view text, std::size_t max_depth = kMaxJsonDepth);

// "<what> nests arrays and objects deeper than <max_depth> levels": the refusal's wording.
std::string json_too_deep(std::string_view what, std::size_t max_depth = kMaxJsonDepth);

// `text` parsed, or a discarded value when it is not JSON or nests deeper than `max_depth`.
template <class Json = nlohmann::json>
Json parse_json(std::string_view text, std::size_t max_depth = kMaxJsonDepth) {
  if (json_nests_deeper(text, max_depth)) return Json(Json::value_t::discarded);
  return Json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace dynrt

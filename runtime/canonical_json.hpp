// One spelling per JSON value, so that equal content hashes equally.
//
// canonical_json() writes object keys sorted by byte order, no insignificant whitespace,
// strings with the minimal escapes JSON requires (bytes are otherwise copied, so distinct
// strings stay distinct), and every number in one spelling: a value with no fractional part
// whose magnitude is below 2^63 is written as the integer it holds (`1`, `1.0` and `1e0` all become
// `1`), any other finite value in the shortest form that reads back to the same double.
// Used for stage fingerprints and reuse names. Pure; thread-compatible.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace dynrt {

std::string canonical_json(const nlohmann::json& value);
void append_canonical_json(std::string& out, const nlohmann::json& value);

// The canonical spelling of one number (see above).
void append_canonical_number(std::string& out, double value);

}  // namespace dynrt

// YAML values as JSON: what a template's request bodies, arguments and parameters become, and
// what its fingerprint is computed over. Pure.
#pragma once

#include "dsl/yaml.hpp"

#include <nlohmann/json.hpp>

namespace dynrt::dsl {

// A YAML value as JSON under the YAML 1.2 core schema (plain `1` is a number, `"1"` a string).
nlohmann::json to_json(const yaml::Node& node);

}  // namespace dynrt::dsl

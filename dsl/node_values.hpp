// Internal to dsl/: typed reads of a YAML node's value for the compiler. Each answers
// nullopt (or nothing) for a missing node or a value of another type: the schema has already
// reported those, so the compiler only skips them. Pure.
#pragma once

#include "dsl/yaml.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dynrt::dsl::detail {

const yaml::MapEntry* entry_of(const yaml::Node* obj, std::string_view key);
// A scalar that reads as a string (or a number): not null, not a boolean.
bool is_string(const yaml::Node* n);
std::optional<std::string> string_of(const yaml::Node* n);
std::optional<double> number_of(const yaml::Node* n);  // finite numbers only
// An integer setting within [lo, hi]; out-of-range values were reported by the schema and
// must not reach a narrowing conversion (3e31 does not fit an int).
std::optional<int> int_of(const yaml::Node* n, int lo, int hi);
std::optional<bool> bool_of(const yaml::Node* n);
// A string or a sequence of them; other items are left out.
std::vector<const yaml::Node*> string_list(const yaml::Node* n);

}  // namespace dynrt::dsl::detail

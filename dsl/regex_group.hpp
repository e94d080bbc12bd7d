// Internal to dsl/: the pattern an RE2 expression's first capturing group can match, so that
// the compiler can test a decision's candidates against what its selection regex captures.
// A scanner of the pattern text, not a regex parser: it answers nullopt when unsure. Pure.
#pragma once

#include <optional>
#include <string>

namespace dynrt::dsl::detail {

// The text of the first capturing group of an RE2 pattern (with any leading flag group), so
// that candidates can be tested against what the group can capture. nullopt if unsure.
std::optional<std::string> first_group_pattern(const std::string& re);

}  // namespace dynrt::dsl::detail

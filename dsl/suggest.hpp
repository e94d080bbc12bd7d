// "Did you mean" suggestions for misspelled names.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dynrt::dsl {

// Optimal-string-alignment distance (Levenshtein plus adjacent transpositions).
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word` if it is close enough to be a plausible typo: at most one
// edit for words of up to four characters, two up to eight, three beyond. Ties go to the
// earliest candidate. A candidate that differs only in case always qualifies.
std::optional<std::string> closest(std::string_view word,
                                   const std::vector<std::string>& candidates);

}  // namespace dynrt::dsl

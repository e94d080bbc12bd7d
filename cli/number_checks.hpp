// Checks for numeric command-line options that CLI11's own do not make: its PositiveNumber and
// Range accept "nan" (every comparison with NaN is false) and, for an open upper end, print the
// largest double as the limit. A rate, a scale or a time that is not a finite number is refused
// here, with the bounds said in words. Header-only, so that dynrt-sim-engine and the bench tools
// share it without linking the CLI.
#pragma once

#include <CLI/CLI.hpp>

#include <cctype>
#include <cmath>
#include <sstream>
#include <string>

namespace dynrt::cli_checks {

namespace detail {
inline std::string finite_check(const std::string& text, double lo, bool lo_open, double hi,
                                const std::string& bounds) {
  double v = 0;
  std::size_t used = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    return "Value " + text + " is not a number";
  }
  if (used != text.size()) return "Value " + text + " is not a number";
  if (!std::isfinite(v)) return "Value " + text + " is not " + bounds;
  if (v < lo || (lo_open && v == lo) || v > hi) return "Value " + text + " is not " + bounds;
  return {};
}
}  // namespace detail

// A finite number above zero.
inline CLI::Validator positive_finite() {
  return CLI::Validator(
      [](std::string& text) {
        return detail::finite_check(text, 0, true, HUGE_VAL, "a finite number above 0");
      },
      "POSITIVE", "POSITIVE");
}

// A finite number of zero or more.
inline CLI::Validator non_negative_finite() {
  return CLI::Validator(
      [](std::string& text) {
        return detail::finite_check(text, 0, false, HUGE_VAL, "a finite number of 0 or more");
      },
      "NONNEGATIVE", "NONNEGATIVE");
}

// A number in [lo, hi].
inline CLI::Validator finite_range(double lo, double hi) {
  std::ostringstream bounds, desc;
  bounds << "a finite number in [" << lo << ", " << hi << "]";
  desc << "in [" << lo << " - " << hi << "]";
  return CLI::Validator(
      [lo, hi, b = bounds.str()](std::string& text) {
        return detail::finite_check(text, lo, false, hi, b);
      },
      desc.str(), "FINITE_RANGE");
}

// A whole number from 0 to 2^64 - 1, in decimal digits. CLI11 reads "-5" into an unsigned option
// as 2^64 - 5 (strtoull wraps a negated value), so a seed given as -5 would run as
// 18446744073709551611 without a word.
inline CLI::Validator unsigned_integer() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const std::string refused =
            "Value " + text + " is not a whole number from 0 to " + "18446744073709551615";
        if (text.empty()) return refused;
        for (const char c : text)
          if (!std::isdigit(static_cast<unsigned char>(c))) return refused;
        try {
          (void)std::stoull(text);
        } catch (const std::exception&) {
          return refused;
        }
        return {};
      },
      "UINT", "UINT");
}

}  // namespace dynrt::cli_checks

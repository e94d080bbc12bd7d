#include "dsl/regex_group.hpp"

namespace dynrt::dsl::detail {

std::optional<std::string> first_group_pattern(const std::string& re) {
  std::string flags;
  std::size_t i = 0;
  if (re.starts_with("(?") && re.size() > 2 && re[2] != ':' && re[2] != 'P' && re[2] != '<') {
    const auto close = re.find(')');
    if (close != std::string::npos) {
      flags = re.substr(0, close + 1);
      i = close + 1;
    }
  }
  bool in_class = false;
  for (; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\') {
      ++i;
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
      continue;
    }
    if (c == '[') {
      in_class = true;
      continue;
    }
    if (c != '(') continue;
    std::size_t body = i + 1;
    if (re.compare(body, 1, "?") == 0) {
      if (re.compare(body, 3, "?P<") == 0 || re.compare(body, 2, "?<") == 0) {
        body = re.find('>', body);
        if (body == std::string::npos) return std::nullopt;
        ++body;
      } else {
        continue;  // non-capturing or flags
      }
    }
    int depth = 1;
    bool cls = false;
    for (std::size_t j = body; j < re.size(); ++j) {
      const char d = re[j];
      if (d == '\\') {
        ++j;
        continue;
      }
      if (cls) {
        if (d == ']') cls = false;
        continue;
      }
      if (d == '[') cls = true;
      if (d == '(') ++depth;
      if (d == ')' && --depth == 0) return flags + "(?:" + re.substr(body, j - body) + ")";
    }
    return std::nullopt;
  }
  return flags + "(?:" + re.substr(flags.size()) + ")";  // no group: the whole match
}

}  // namespace dynrt::dsl::detail

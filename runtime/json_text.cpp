#include "runtime/json_text.hpp"

namespace dynrt {

bool json_nests_deeper(std::string_view text, std::size_t max_depth) {
  std::size_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped byte cannot end the string
      else if (c == '"')
        in_string = false;
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > max_depth) return true;
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default:
        break;
    }
  }
  return false;
}

std::string json_too_deep(std::string_view what, std::size_t max_depth) {
  return std::string(what) + " nests arrays and objects deeper than " + std::to_string(max_depth) +
         " levels";
}

}  // namespace dynrt

#include "runtime/canonical_json.hpp"

#include <array>
#include <charconv>
#include <cmath>

namespace dynrt {

namespace {

// Integral doubles below 2^63 are written as the integer they hold exactly.
constexpr double kTwoTo63 = 9223372036854775808.0;

void append_string(std::string& out, const std::string& s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 0xF]);
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

template <class Int>
void append_integer(std::string& out, Int v) {
  std::array<char, 32> buf{};
  const auto r = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  out.append(buf.data(), r.ptr);
}

}  // namespace

void append_canonical_number(std::string& out, double value) {
  if (!std::isfinite(value)) {
    out += "null";  // JSON has no spelling for NaN or infinities; nlohmann dumps them as null
    return;
  }
  if (std::trunc(value) == value && std::fabs(value) < kTwoTo63) {
    append_integer(out, static_cast<std::int64_t>(value));  // also folds -0 into 0
    return;
  }
  std::array<char, 64> buf{};
  const auto r = std::to_chars(buf.data(), buf.data() + buf.size(), value);
  out.append(buf.data(), r.ptr);
}

void append_canonical_json(std::string& out, const nlohmann::json& value) {
  using nlohmann::json;
  switch (value.type()) {
    case json::value_t::null:
    case json::value_t::discarded:
      out += "null";
      return;
    case json::value_t::boolean:
      out += value.get<bool>() ? "true" : "false";
      return;
    case json::value_t::number_integer: {
      append_integer(out, value.get<std::int64_t>());
      return;
    }
    case json::value_t::number_unsigned:
      append_integer(out, value.get<std::uint64_t>());
      return;
    case json::value_t::number_float:
      append_canonical_number(out, value.get<double>());
      return;
    case json::value_t::string:
      append_string(out, value.get_ref<const std::string&>());
      return;
    case json::value_t::binary:
      out += "null";
      return;
    case json::value_t::array: {
      out.push_back('[');
      bool first = true;
      for (const auto& item : value) {
        if (!first) out.push_back(',');
        first = false;
        append_canonical_json(out, item);
      }
      out.push_back(']');
      return;
    }
    case json::value_t::object: {
      // nlohmann::json keeps object members in a std::map, so iteration is in key order.
      out.push_back('{');
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        if (!first) out.push_back(',');
        first = false;
        append_string(out, key);
        out.push_back(':');
        append_canonical_json(out, item);
      }
      out.push_back('}');
      return;
    }
  }
}

std::string canonical_json(const nlohmann::json& value) {
  std::string out;
  append_canonical_json(out, value);
  return out;
}

}  // namespace dynrt

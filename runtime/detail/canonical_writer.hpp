// The canonical JSON writer behind canonical_json() and reuse names, templated on where the
// bytes go: a string (to inspect the encoding) or a streaming hash (to name it without
// building the string). Both must produce byte-identical output; see canonical_json.hpp for
// the rules.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

namespace dynrt::detail {

// A Sink has put(char) and put(const char*, std::size_t).

// True if any of the 8 bytes in `w` needs escaping in a JSON string: a control character
// (below 0x20), '"' or '\\'. Bit tricks on 8 bytes at a time (SWAR), because request bodies
// are mostly long runs of plain text and this scan is most of a reuse name's cost.
inline bool needs_escape(std::uint64_t w) {
  constexpr std::uint64_t kOnes = 0x0101010101010101ULL;
  constexpr std::uint64_t kHighs = 0x8080808080808080ULL;
  const std::uint64_t below_space = (w - kOnes * 0x20) & ~w & kHighs;
  const std::uint64_t q = w ^ (kOnes * '"');
  const std::uint64_t quote = (q - kOnes) & ~q & kHighs;
  const std::uint64_t b = w ^ (kOnes * '\\');
  const std::uint64_t backslash = (b - kOnes) & ~b & kHighs;
  return (below_space | quote | backslash) != 0;
}

template <class Sink>
void write_canonical_string(Sink& out, const std::string& s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.put('"');
  const char* run = s.data();  // start of a run of bytes copied as they are
  const char* const end = s.data() + s.size();
  const char* p = s.data();
  while (p != end) {
    if (end - p >= 8) {
      std::uint64_t w;
      std::memcpy(&w, p, 8);
      if (!needs_escape(w)) {
        p += 8;
        continue;
      }
    }
    const auto c = static_cast<unsigned char>(*p);
    const char* escape = nullptr;
    switch (c) {
      case '"':
        escape = "\\\"";
        break;
      case '\\':
        escape = "\\\\";
        break;
      case '\n':
        escape = "\\n";
        break;
      case '\r':
        escape = "\\r";
        break;
      case '\t':
        escape = "\\t";
        break;
      case '\b':
        escape = "\\b";
        break;
      case '\f':
        escape = "\\f";
        break;
      default:
        if (c >= 0x20) {
          ++p;
          continue;
        }
    }
    out.put(run, static_cast<std::size_t>(p - run));
    ++p;
    run = p;
    if (escape) {
      out.put(escape, 2);
    } else {
      const char u[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xF]};
      out.put(u, 6);
    }
  }
  out.put(run, static_cast<std::size_t>(end - run));
  out.put('"');
}

template <class Sink, class Int>
void write_canonical_integer(Sink& out, Int v) {
  std::array<char, 24> buf{};
  const auto r = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  out.put(buf.data(), static_cast<std::size_t>(r.ptr - buf.data()));
}

// Integral doubles below 2^63 are written as the integer they hold exactly, so 1, 1.0 and
// 1e0 share one spelling; others in the shortest form that reads back to the same double.
template <class Sink>
void write_canonical_number(Sink& out, double v) {
  constexpr double kTwoTo63 = 9223372036854775808.0;
  if (!std::isfinite(v)) {
    out.put("null", 4);  // JSON cannot spell NaN or infinities; nlohmann dumps them as null
    return;
  }
  if (std::trunc(v) == v && std::fabs(v) < kTwoTo63) {
    write_canonical_integer(out, static_cast<std::int64_t>(v));  // also folds -0 into 0
    return;
  }
  std::array<char, 32> buf{};
  const auto r = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  out.put(buf.data(), static_cast<std::size_t>(r.ptr - buf.data()));
}

// Writes `value`, skipping the top-level object members for which skip(key) is true.
template <class Sink, class Skip>
void write_canonical(Sink& out, const nlohmann::json& value, const Skip& skip, bool top = true) {
  using nlohmann::json;
  switch (value.type()) {
    case json::value_t::null:
    case json::value_t::discarded:
    case json::value_t::binary:
      out.put("null", 4);
      return;
    case json::value_t::boolean:
      if (value.get<bool>()) {
        out.put("true", 4);
      } else {
        out.put("false", 5);
      }
      return;
    case json::value_t::number_integer:
      write_canonical_integer(out, value.get<std::int64_t>());
      return;
    case json::value_t::number_unsigned:
      write_canonical_integer(out, value.get<std::uint64_t>());
      return;
    case json::value_t::number_float:
      write_canonical_number(out, value.get<double>());
      return;
    case json::value_t::string:
      write_canonical_string(out, value.get_ref<const std::string&>());
      return;
    case json::value_t::array: {
      out.put('[');
      bool first = true;
      for (const auto& item : value) {
        if (!first) out.put(',');
        first = false;
        write_canonical(out, item, skip, false);
      }
      out.put(']');
      return;
    }
    case json::value_t::object: {
      // nlohmann::json keeps members in a std::map: iteration is in byte order of the keys.
      out.put('{');
      bool first = true;
      for (auto it = value.begin(); it != value.end(); ++it) {
        if (top && skip(it.key())) continue;
        if (!first) out.put(',');
        first = false;
        write_canonical_string(out, it.key());
        out.put(':');
        write_canonical(out, it.value(), skip, false);
      }
      out.put('}');
      return;
    }
  }
}

struct StringSink {
  std::string& s;
  void put(char c) { s.push_back(c); }
  void put(const char* p, std::size_t n) { s.append(p, n); }
};

inline constexpr auto kSkipNothing = [](const std::string&) { return false; };

}  // namespace dynrt::detail

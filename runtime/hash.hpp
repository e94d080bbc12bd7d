// 128-bit content hashes (XXH3-128): stage fingerprints, reuse names, coordinates.
//
// A Hash128 is a plain value: comparable, hashable, printable as 32 hex digits. Hasher128
// streams several parts into one hash; each part is length-prefixed so that the pair
// ("ab", "c") and ("a", "bc") never collide by construction. Thread-compatible: a Hasher128
// is used by one thread; Hash128 values may be shared freely.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace dynrt {

struct Hash128 {
  std::uint64_t high = 0;
  std::uint64_t low = 0;

  friend auto operator<=>(const Hash128&, const Hash128&) = default;

  // 32 lowercase hex digits, high word first.
  std::string hex() const;
  // Parses hex() output; nullopt on anything else.
  static std::optional<Hash128> from_hex(std::string_view text);
};

// XXH3-128 of raw bytes, seed 0.
Hash128 xxh3_128(std::string_view bytes);

// Streams length-prefixed parts into one XXH3-128 hash.
class Hasher128 {
 public:
  Hasher128();
  ~Hasher128();
  Hasher128(const Hasher128&) = delete;
  Hasher128& operator=(const Hasher128&) = delete;

  // Adds one part; its length goes in first, so part boundaries are part of the hash.
  Hasher128& add(std::string_view part);
  Hasher128& add(const Hash128& part);
  Hash128 finish() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace dynrt

template <>
struct std::hash<dynrt::Hash128> {
  std::size_t operator()(const dynrt::Hash128& h) const noexcept {
    return static_cast<std::size_t>(h.low ^ (h.high * 0x9E3779B97F4A7C15ULL));
  }
};

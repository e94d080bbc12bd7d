#include "runtime/hash.hpp"

#include <xxhash.h>

#include <array>
#include <cstring>

namespace dynrt {

namespace {
constexpr char kHexDigits[] = "0123456789abcdef";

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

std::string Hash128::hex() const {
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[static_cast<std::size_t>(15 - i)] = kHexDigits[(high >> (4 * i)) & 0xF];
    out[static_cast<std::size_t>(31 - i)] = kHexDigits[(low >> (4 * i)) & 0xF];
  }
  return out;
}

std::optional<Hash128> Hash128::from_hex(std::string_view text) {
  if (text.size() != 32) return std::nullopt;
  Hash128 h;
  for (std::size_t i = 0; i < 32; ++i) {
    const int v = hex_value(text[i]);
    if (v < 0) return std::nullopt;
    std::uint64_t& word = i < 16 ? h.high : h.low;
    word = (word << 4) | static_cast<std::uint64_t>(v);
  }
  return h;
}

Hash128 xxh3_128(std::string_view bytes) {
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return Hash128{h.high64, h.low64};
}

struct Hasher128::State {
  XXH3_state_t* xxh = XXH3_createState();
  ~State() { XXH3_freeState(xxh); }
};

Hasher128::Hasher128() : state_(std::make_unique<State>()) {
  XXH3_128bits_reset(state_->xxh);
}

Hasher128::~Hasher128() = default;

Hasher128& Hasher128::add(std::string_view part) {
  // Little-endian length prefix, fixed width, so the encoding is platform-independent.
  std::array<unsigned char, 8> len{};
  std::uint64_t n = part.size();
  for (auto& b : len) {
    b = static_cast<unsigned char>(n & 0xFF);
    n >>= 8;
  }
  XXH3_128bits_update(state_->xxh, len.data(), len.size());
  XXH3_128bits_update(state_->xxh, part.data(), part.size());
  return *this;
}

Hasher128& Hasher128::add(const Hash128& part) {
  std::array<char, 16> bytes{};
  for (int i = 0; i < 8; ++i) {
    bytes[static_cast<std::size_t>(i)] = static_cast<char>((part.high >> (8 * i)) & 0xFF);
    bytes[static_cast<std::size_t>(8 + i)] = static_cast<char>((part.low >> (8 * i)) & 0xFF);
  }
  return add(std::string_view(bytes.data(), bytes.size()));
}

Hash128 Hasher128::finish() const {
  const XXH128_hash_t h = XXH3_128bits_digest(state_->xxh);
  return Hash128{h.high64, h.low64};
}

}  // namespace dynrt

#include "runtime/reuse_name.hpp"

#include "runtime/detail/canonical_writer.hpp"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack: no allocation per name
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace dynrt {

namespace {

constexpr std::array<std::string_view, 4> kNeutral = {"request_id", "stream", "stream_options",
                                                      "user"};

const auto kSkipNeutral = [](const std::string& key) { return is_output_neutral(key); };

// Feeds XXH3 through a small buffer: far fewer update calls than one per token.
class HashSink {
 public:
  HashSink() { XXH3_128bits_reset(&state_); }
  void put(char c) {
    if (used_ == buffer_.size()) flush();
    buffer_[used_++] = c;
  }
  void put(const char* p, std::size_t n) {
    if (n > buffer_.size() - used_) {
      flush();
      if (n >= buffer_.size()) {
        XXH3_128bits_update(&state_, p, n);
        return;
      }
    }
    std::memcpy(buffer_.data() + used_, p, n);
    used_ += n;
  }
  Hash128 finish() {
    flush();
    const XXH128_hash_t h = XXH3_128bits_digest(&state_);
    return Hash128{h.high64, h.low64};
  }

 private:
  void flush() {
    if (used_ > 0) XXH3_128bits_update(&state_, buffer_.data(), used_);
    used_ = 0;
  }
  XXH3_state_t state_;
  std::array<char, 1024> buffer_{};
  std::size_t used_ = 0;
};

template <class Sink>
void write_encoding(Sink& out, const Hash128& fingerprint, std::string_view endpoint,
                    const nlohmann::json& body) {
  constexpr std::string_view kScheme = "dynrt.reuse.v1\nstage:";
  out.put(kScheme.data(), kScheme.size());
  const std::string hex = fingerprint.hex();
  out.put(hex.data(), hex.size());
  constexpr std::string_view kEndpoint = "\nendpoint:";
  out.put(kEndpoint.data(), kEndpoint.size());
  out.put(endpoint.data(), endpoint.size());
  out.put('\n');
  detail::write_canonical(out, body, kSkipNeutral);
}

}  // namespace

std::span<const std::string_view> output_neutral_fields() {
  return kNeutral;
}

bool is_output_neutral(std::string_view field) {
  return std::find(kNeutral.begin(), kNeutral.end(), field) != kNeutral.end();
}

std::string reuse_encoding(const Hash128& stage_fingerprint, std::string_view endpoint,
                           const nlohmann::json& body) {
  std::string out;
  detail::StringSink sink{out};
  write_encoding(sink, stage_fingerprint, endpoint, body);
  return out;
}

Hash128 reuse_name(const Hash128& stage_fingerprint, std::string_view endpoint,
                   const nlohmann::json& body) {
  HashSink sink;
  write_encoding(sink, stage_fingerprint, endpoint, body);
  return sink.finish();
}

}  // namespace dynrt

// Fuzz target: any bytes as a server-sent event stream into engines::SseParser. However the
// network splits the stream, the parser must see the same events: the input is parsed whole,
// a byte at a time, and in pieces whose sizes come from the input itself.
#include "engines/openai/sse.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view stream(reinterpret_cast<const char*>(data), size);

  dynrt::engines::SseParser whole;
  std::vector<std::string> expected;
  whole.feed(stream, expected);

  dynrt::engines::SseParser bytewise;
  std::vector<std::string> got;
  for (std::size_t i = 0; i < size; ++i)
    bytewise.feed(stream.substr(i, 1), got);
  if (got != expected || bytewise.has_partial_event() != whole.has_partial_event()) std::abort();

  dynrt::engines::SseParser pieces;
  got.clear();
  for (std::size_t i = 0; i < size;) {
    const std::size_t n = 1 + data[i] % 17;
    pieces.feed(stream.substr(i, n), got);
    i += n;
  }
  if (got != expected || pieces.has_partial_event() != whole.has_partial_event()) std::abort();
  return 0;
}

#include "runtime/canonical_json.hpp"

#include "runtime/detail/canonical_writer.hpp"

namespace dynrt {

void append_canonical_number(std::string& out, double value) {
  detail::StringSink sink{out};
  detail::write_canonical_number(sink, value);
}

void append_canonical_json(std::string& out, const nlohmann::json& value) {
  detail::StringSink sink{out};
  detail::write_canonical(sink, value, detail::kSkipNothing);
}

std::string canonical_json(const nlohmann::json& value) {
  std::string out;
  append_canonical_json(out, value);
  return out;
}

}  // namespace dynrt

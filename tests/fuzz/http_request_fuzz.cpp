// Fuzz target: any bytes as an HTTP request body (and optionally tag header values) through the
// gateway's request path (gateway/request.hpp) and on into canonicalization and reuse names.
// Refusals must be clean; whatever is accepted must have a canonical spelling that parses back
// to itself and a reuse name that is the hash of its encoding.
//
// Input: byte 0 picks the route (bits 0-1) and whether a tag line follows (bit 2); the tag
// line is "workflow|id|stage\n"; the rest is the body. With bit 3 set, a model route's body is
// read as an Anthropic Messages (bit 4 clear) or OpenAI Responses (bit 4 set) request and
// translated first (protocols/protocols.hpp): a refusal must be a JSON error body in the
// protocol's shape, and a translation the same each time.
#include "gateway/request.hpp"
#include "protocols/protocols.hpp"
#include "runtime/canonical_json.hpp"
#include "runtime/hash.hpp"
#include "runtime/reuse_name.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

using nlohmann::json;

void check(bool ok) {
  if (!ok) std::abort();
}

// What the gateway does with a refusal: quote its message in a JSON error body.
void answer(const dynrt::gateway::Invalid& why) {
  check(!why.message.empty());
  (void)json(why.message).dump(-1, ' ', false, json::error_handler_t::replace);
}

void canonicalize(const dynrt::Request& request) {
  (void)request.body.dump();  // what an engine is sent: must not throw (strings are UTF-8)
  const std::string canonical = dynrt::canonical_json(request.body);
  const auto again = dynrt::gateway::parse_strict_json(canonical, 100'000);
  check(again.ok());
  check(dynrt::canonical_json(again.value) == canonical);
  const dynrt::Hash128 stage{};
  const std::string encoding = dynrt::reuse_encoding(stage, request.endpoint, request.body);
  check(dynrt::reuse_name(stage, request.endpoint, request.body) == dynrt::xxh3_128(encoding));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  dynrt::Tags tags;
  if (data[0] & 4) {
    const auto nl = in.find('\n');
    std::string_view line = in.substr(0, nl);
    in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
    for (std::string* tag : {&tags.workflow, &tags.workflow_id, &tags.stage}) {
      const auto bar = line.find('|');
      *tag = std::string(line.substr(0, bar));
      line = bar == std::string_view::npos ? std::string_view() : line.substr(bar + 1);
    }
  }
  static constexpr std::string_view kRoutes[] = {"/v1/chat/completions", "/v1/completions",
                                                 "/v1/dynrt/tools/lookup", "/v1/dynrt/writes"};
  const std::string_view route = kRoutes[data[0] & 3];
  if (route == "/v1/dynrt/writes") {
    const auto w = dynrt::gateway::parse_writes(in);
    if (!w.ok()) answer(w.invalid);
    for (const auto& k : w.keys)
      check(!k.empty());
    return 0;
  }
  std::string translated;
  if ((data[0] & 8) && route == "/v1/chat/completions") {
    namespace protocols = dynrt::protocols;
    const auto api = (data[0] & 16) ? protocols::Api::responses : protocols::Api::messages;
    const auto parsed = dynrt::gateway::parse_strict_json(in);
    if (!parsed.ok() || !parsed.value.is_object()) return 0;
    const auto chat = protocols::to_chat(api, parsed.value);
    if (!chat.ok()) {
      check(!chat.refused.message.empty());
      check(json::parse(protocols::error_body(api, chat.refused.message, 400, chat.refused.param),
                        nullptr, false)
                .is_object());
      return 0;
    }
    check(protocols::to_chat(api, parsed.value).chat == chat.chat);
    translated = chat.chat.dump(-1, ' ', false, json::error_handler_t::replace);
    in = translated;
  }
  const auto call = dynrt::gateway::parse_call(route, in, std::move(tags));
  if (!call.ok()) {
    answer(call.invalid);
    return 0;
  }
  check(call.request.body.is_object());
  canonicalize(call.request);
  return 0;
}

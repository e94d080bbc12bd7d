#include "gateway/request.hpp"

#include "runtime/csl/store.hpp"
#include "runtime/json_text.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>

namespace dynrt::gateway {

namespace {

using nlohmann::json;

// Builds the document like nlohmann's own DOM parser, and stops at the first key given twice
// or the first container past the depth limit. The stack holds the open containers; a pointer
// into a parent array stays valid because nothing is added to the parent while a child is open.
class StrictBuilder {
 public:
  explicit StrictBuilder(std::size_t max_depth) : max_depth_(max_depth) {}

  bool null() { return put(json(nullptr)); }
  bool boolean(bool v) { return put(json(v)); }
  bool number_integer(json::number_integer_t v) { return put(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return put(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return put(json(v)); }
  bool string(json::string_t& v) { return put(json(std::move(v))); }
  bool binary(json::binary_t&) { return fail("binary values are not JSON"); }
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& k) {
    if (stack_.back()->contains(k)) {
      json quoted = k;  // valid UTF-8: the lexer checked it
      return fail("the key " + quoted.dump() + " appears twice in one object");
    }
    key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 3: ...; last read: '..'":
    // keep the position and the reason, not the id or the echoed bytes.
    std::string what = e.what();
    if (const auto id = what.find("] "); id != std::string::npos) what.erase(0, id + 2);
    if (const auto echo = what.find("; last read"); echo != std::string::npos) what.resize(echo);
    return fail("the request body is not valid JSON: " + what);
  }

  json root;
  std::string error;

 private:
  bool fail(std::string message) {
    if (error.empty()) error = std::move(message);
    return false;
  }
  json* add(json v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      top.get_ref<json::array_t&>().push_back(std::move(v));
      return &top.get_ref<json::array_t&>().back();
    }
    return &top.get_ref<json::object_t&>().emplace(std::move(key_), std::move(v)).first->second;
  }
  bool put(json v) {
    add(std::move(v));
    return true;
  }
  bool open(json container) {
    if (stack_.size() >= max_depth_) return fail(json_too_deep("the request body", max_depth_));
    stack_.push_back(add(std::move(container)));
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  std::size_t max_depth_;
  std::vector<json*> stack_;
  std::string key_;
};

// A field that is absent or null.
const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

// An integer from `min` to 2^31 - 1 (nlohmann reads non-negative integers as unsigned).
bool fits_int32(const json& v, std::uint64_t min) {
  if (!v.is_number_integer()) return false;
  if (!v.is_number_unsigned() && v.get<std::int64_t>() < 0) return false;
  const auto n = v.get<std::uint64_t>();
  return n >= min && n <= std::uint64_t{std::numeric_limits<std::int32_t>::max()};
}

// The fields of a model call whose type dynrt or an engine relies on; null counts as absent.
Invalid check_fields(const json& body, bool chat) {
  auto wrong = [](std::string name, std::string_view what) {
    return Invalid{"`" + name + "` must be " + std::string(what), name};
  };
  if (const json* v = field(body, "model"); v && !v->is_string()) return wrong("model", "a string");
  if (const auto s = body.find("stream"); s != body.end() && !s->is_boolean())
    return wrong("stream", "a boolean");
  if (const json* v = field(body, "stream_options")) {
    if (!v->is_object()) return wrong("stream_options", "an object");
    if (const json* u = field(*v, "include_usage"); u && !u->is_boolean())
      return wrong("stream_options.include_usage", "a boolean");
  }
  if (chat) {
    const auto m = body.find("messages");
    if (m == body.end() || !m->is_array()) return wrong("messages", "an array");
    for (std::size_t i = 0; i < m->size(); ++i) {
      const json& msg = (*m)[i];
      const std::string at = "messages[" + std::to_string(i) + "]";
      if (!msg.is_object()) return wrong(at, "an object");
      const auto role = msg.find("role");
      if (role == msg.end() || !role->is_string()) return wrong(at + ".role", "a string");
      if (const json* c = field(msg, "content"); c && !c->is_string() && !c->is_array())
        return wrong(at + ".content", "a string, an array of parts or null");
    }
    if (const json* v = field(body, "logprobs"); v && !v->is_boolean())
      return wrong("logprobs", "a boolean");
  } else {
    const json* p = field(body, "prompt");
    if (!p || !(p->is_string() || p->is_array())) return wrong("prompt", "a string or an array");
    if (const json* v = field(body, "echo"); v && !v->is_boolean())
      return wrong("echo", "a boolean");
  }
  for (const char* name : {"max_tokens", "max_completion_tokens", "top_logprobs"})
    if (const json* v = field(body, name); v && !fits_int32(*v, 0))
      return wrong(name, "an integer from 0 to 2147483647");
  if (const json* v = field(body, "n"); v && !fits_int32(*v, 1))
    return wrong("n", "an integer from 1 to 2147483647");
  if (const json* v = field(body, "seed"); v && !v->is_number_integer())
    return wrong("seed", "an integer");
  for (const char* name : {"temperature", "top_p", "presence_penalty", "frequency_penalty"})
    if (const json* v = field(body, name); v && !v->is_number()) return wrong(name, "a number");
  if (const json* v = field(body, "stop")) {
    bool ok = v->is_string() || v->is_array();
    if (v->is_array())
      for (const auto& s : *v)
        ok = ok && s.is_string();
    if (!ok) return wrong("stop", "a string or an array of strings");
  }
  if (const json* v = field(body, "tools"); v && !v->is_array()) return wrong("tools", "an array");
  if (const json* v = field(body, "tool_choice"); v && !v->is_string() && !v->is_object())
    return wrong("tool_choice", "a string or an object");
  if (const json* v = field(body, "response_format"); v && !v->is_object())
    return wrong("response_format", "an object");
  if (const json* v = field(body, "user"); v && !v->is_string()) return wrong("user", "a string");
  return {};
}

Invalid check_tag(std::string_view value, const char* header) {
  if (value.size() > kMaxTagBytes)
    return {std::string(header) + " is longer than " + std::to_string(kMaxTagBytes) + " bytes",
            header};
  if (!valid_utf8(value)) return {std::string(header) + " is not valid UTF-8", header};
  for (const unsigned char c : value)
    if (c < 0x20 || c == 0x7f) return {std::string(header) + " holds a control character", header};
  return {};
}

ParsedJson parse_object(std::string_view body) {
  ParsedJson out = parse_strict_json(body);
  if (out.ok() && !out.value.is_object())
    out.invalid = {"the request body must be a JSON object", ""};
  return out;
}

}  // namespace

ParsedJson parse_strict_json(std::string_view text, std::size_t max_depth) {
  StrictBuilder b(max_depth);
  ParsedJson out;
  if (!json::sax_parse(text, &b, json::input_format_t::json, true, false)) {
    out.invalid = {b.error.empty() ? "the request body is not valid JSON" : b.error, ""};
    return out;
  }
  out.value = std::move(b.root);
  return out;
}

ParsedCall parse_call(std::string_view path, std::string_view body, Tags tags) {
  ParsedCall out;
  if (path.rfind(kToolsPrefix, 0) == 0) {
    const std::string_view name = path.substr(kToolsPrefix.size());
    if (name.empty() || name.find('/') != std::string_view::npos) {
      out.invalid = {"the tool name is missing or holds a `/`", ""};
      return out;
    }
    if (Invalid bad = check_tag(name, "the tool name"); !bad.message.empty()) {
      out.invalid = {std::move(bad.message), ""};
      return out;
    }
  } else if (path != "/v1/chat/completions" && path != "/v1/completions") {
    out.invalid = {"no model call or tool at " + std::string(path), ""};
    return out;
  }
  for (const auto& [value, header] : {std::pair{&tags.workflow, "X-DynRT-Workflow"},
                                      std::pair{&tags.workflow_id, "X-DynRT-Workflow-Id"},
                                      std::pair{&tags.stage, "X-DynRT-Stage"}})
    if (Invalid bad = check_tag(*value, header); !bad.message.empty()) {
      out.invalid = std::move(bad);
      return out;
    }
  ParsedJson parsed = parse_object(body);
  if (!parsed.ok()) {
    out.invalid = std::move(parsed.invalid);
    return out;
  }
  if (path.rfind(kToolsPrefix, 0) != 0) {
    out.invalid = check_fields(parsed.value, path == "/v1/chat/completions");
    if (!out.ok()) return out;
    const auto s = parsed.value.find("stream");
    out.stream = s != parsed.value.end() && s->get<bool>();
  }
  out.request = Request{std::string(path), std::move(parsed.value), std::move(tags)};
  return out;
}

ParsedWrites parse_writes(std::string_view body) {
  ParsedWrites out;
  ParsedJson parsed = parse_object(body);
  if (!parsed.ok()) {
    out.invalid = std::move(parsed.invalid);
    return out;
  }
  const auto keys = parsed.value.find("keys");
  if (keys == parsed.value.end() || !keys->is_array()) {
    out.invalid = {"`keys` must be an array of record keys", "keys"};
    return out;
  }
  for (auto& k : *keys) {
    if (!k.is_string() || k.get_ref<const std::string&>().empty()) {
      out.keys.clear();
      out.invalid = {"every record key must be a non-empty string", "keys"};
      return out;
    }
    if (const auto size = k.get_ref<const std::string&>().size(); size > csl::kMaxRecordKeyBytes) {
      const std::string at = "keys[" + std::to_string(out.keys.size()) + "]";
      out.keys.clear();
      out.invalid = {"`" + at + "` is " + std::to_string(size) +
                         " bytes; a record key is at most " +
                         std::to_string(csl::kMaxRecordKeyBytes),
                     at};
      return out;
    }
    out.keys.push_back(std::move(k.get_ref<std::string&>()));
  }
  return out;
}

namespace {

// %XX decoded (and nothing else: '+' stays '+', as in a path); nullopt when malformed or when
// the result is not UTF-8 or holds a control character.
std::optional<std::string> percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    const int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  if (!valid_utf8(out)) return std::nullopt;
  for (const unsigned char c : out)
    if (c < 0x20 || c == 0x7f) return std::nullopt;
  return out;
}

}  // namespace

ParsedRunQuery parse_run_query(std::string_view target) {
  ParsedRunQuery q;
  const auto qmark = target.find('?');
  const auto path = target.substr(0, qmark);
  const auto query =
      qmark == std::string_view::npos ? std::string_view() : target.substr(qmark + 1);
  auto id = percent_decode(path.substr(std::min(path.size(), kRunsPrefix.size())));
  if (!id || id->empty() || id->size() > kMaxTagBytes) {
    q.invalid = {"the workflow id in the path must be 1 to " + std::to_string(kMaxTagBytes) +
                     " bytes of percent-encoded UTF-8 without control characters",
                 "workflow_id"};
    return q;
  }
  q.id = std::move(*id);
  std::size_t at = 0;
  while (at < query.size()) {
    auto end = query.find('&', at);
    if (end == std::string_view::npos) end = query.size();
    const auto pair = query.substr(at, end - at);
    at = end + 1;
    if (pair.empty()) continue;
    const auto eq = pair.find('=');
    const auto name = pair.substr(0, eq);
    auto value =
        percent_decode(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1));
    if (name != "workflow" && name != "tenant") {
      q.invalid = {"unknown query parameter '" + std::string(name) +
                       "' (this route takes workflow and tenant)",
                   std::string(name)};
      return q;
    }
    if (!value || value->size() > kMaxTagBytes) {
      q.invalid = {"query parameter " + std::string(name) + " is malformed", std::string(name)};
      return q;
    }
    if (name == "workflow") {
      q.workflow = std::move(*value);
    } else {
      q.tenant = std::move(*value);
      q.tenant_given = true;
    }
  }
  return q;
}

bool valid_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    std::size_t len = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > text.size()) return false;
    for (std::size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    static constexpr std::uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

}  // namespace dynrt::gateway

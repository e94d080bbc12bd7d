#include "engines/sim/text.hpp"

#include "engines/read_file.hpp"
#include "runtime/json_text.hpp"
#include "runtime/reuse_name.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

namespace dynrt::engines::sim {

namespace {

using nlohmann::json;
using ordered_json = nlohmann::ordered_json;

constexpr std::int64_t kCreated = 1767225600;  // fixed, so response bytes are reproducible

constexpr std::array<std::string_view, 64> kWords = {
    "the",     "result",  "shows",    "that",   "a",      "branch",  "resolves", "before",
    "request", "model",   "returns",  "value",  "with",   "for",     "each",     "stage",
    "answer",  "weather", "calendar", "email",  "search", "passage", "entity",   "city",
    "report",  "summary", "when",     "then",   "data",   "record",  "version",  "tool",
    "call",    "handler", "output",   "input",  "query",  "because", "which",    "also",
    "this",    "these",   "from",     "into",   "over",   "under",   "after",    "while",
    "agent",   "plan",    "step",     "next",   "first",  "second",  "final",    "known",
    "history", "science", "place",    "person", "event",  "year",    "number",   "name"};

std::uint64_t mix(std::uint64_t& s) {  // splitmix64
  std::uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

double unit(std::uint64_t& s) {
  return static_cast<double>(mix(s) >> 11) * 0x1.0p-53;
}

bool is_chat(std::string_view endpoint) {
  return endpoint == "/v1/chat/completions";
}

std::string text_of(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (content.is_array()) {  // content parts: [{"type": "text", "text": ...}, ...]
    for (const auto& part : content) {
      if (part.is_object() && part.contains("text") && part["text"].is_string()) {
        out += part["text"].get<std::string>();
      }
    }
  }
  return out;
}

std::string last_message_text(const json& body) {
  if (body.contains("messages") && body["messages"].is_array() && !body["messages"].empty()) {
    const json& m = body["messages"].back();
    if (m.is_object() && m.contains("content")) return text_of(m["content"]);
  }
  if (body.contains("prompt")) return text_of(body["prompt"]);
  return {};
}

std::vector<std::string> tokenize(std::string_view text) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t j = i;
    while (j < text.size() && text[j] == ' ')
      ++j;  // leading spaces belong to the word
    while (j < text.size() && text[j] != ' ')
      ++j;
    out.emplace_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

std::int64_t int_field(const json& body, const char* name, std::int64_t fallback) {
  if (body.contains(name) && body[name].is_number_integer()) return body[name].get<std::int64_t>();
  return fallback;
}

// A field that is absent or null.
const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

ordered_json usage_json(const Usage& u) {
  ordered_json j;
  j["prompt_tokens"] = u.prompt_tokens;
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  j["completion_tokens"] = u.completion_tokens;
  return j;
}

ordered_json chunk_head(const ResponseMeta& m) {
  ordered_json j;
  j["id"] = m.id;
  j["object"] = m.chat ? "chat.completion.chunk" : "text_completion";
  j["created"] = kCreated;
  j["model"] = m.model;
  return j;
}

}  // namespace

// -- the script ---------------------------------------------------------------------------------

Hash128 content_key(const json& body) {
  return reuse_name(Hash128{}, "", body);
}

void Script::add_exact(const json& body, std::string response, json tool_calls) {
  Scripted s{std::move(response), std::move(tool_calls)};
  exact_added_.emplace_back(body, s);
  exact_[content_key(body)] = std::move(s);
}

void Script::write_jsonl(std::ostream& out) const {
  const auto line = [&out](json entry, const Scripted& s) {
    entry["response"] = s.text;
    if (!s.tool_calls.empty()) entry["tool_calls"] = s.tool_calls;
    out << entry.dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
  };
  for (const auto& [body, s] : exact_added_)
    line(json{{"request", body}}, s);
  for (const auto& [needle, s] : contains_)
    line(json{{"contains", needle}}, s);
}

void Script::add_contains(std::string needle, std::string response, json tool_calls) {
  contains_.emplace_back(std::move(needle), Scripted{std::move(response), std::move(tool_calls)});
}

const Scripted* Script::find(const json& body) const {
  if (!exact_.empty()) {
    const auto it = exact_.find(content_key(body));
    if (it != exact_.end()) return &it->second;
  }
  if (!contains_.empty()) {
    const std::string last = last_message_text(body);
    for (const auto& [needle, response] : contains_) {
      if (last.find(needle) != std::string::npos) return &response;
    }
  }
  return nullptr;
}

Expected<Script> Script::parse(std::string_view text) {
  Script s;
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    ++line_no;
    pos = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos || line.front() == '#') continue;
    const json entry = parse_json(line);
    const auto where = "script line " + std::to_string(line_no) + ": ";
    if (!entry.is_object()) return make_error(where + "not a JSON object");
    if (!entry.contains("response") || !entry["response"].is_string()) {
      return make_error(where + "needs a string \"response\"");
    }
    std::string response = entry["response"].get<std::string>();
    json calls = json::array();
    if (const auto tc = entry.find("tool_calls"); tc != entry.end()) {
      if (!tc->is_array()) return make_error(where + "\"tool_calls\" must be an array");
      for (const auto& c : *tc)
        if (!c.is_object() || !c.contains("name") || !c["name"].is_string() ||
            (c.contains("arguments") && !c["arguments"].is_object()))
          return make_error(where +
                            "each tool call needs a string \"name\" and an object \"arguments\"");
      calls = *tc;
    }
    if (entry.contains("request") && entry["request"].is_object()) {
      s.add_exact(entry["request"], std::move(response), std::move(calls));
    } else if (entry.contains("contains") && entry["contains"].is_string()) {
      s.add_contains(entry["contains"].get<std::string>(), std::move(response), std::move(calls));
    } else {
      return make_error(where + "needs a \"request\" object or a \"contains\" string");
    }
  }
  return s;
}

Expected<Script> Script::load(const std::string& path) {
  auto text = read_bounded(path, kMaxScriptBytes, "script");
  if (!text) return make_error(text.error().message);
  auto s = parse(*text);
  if (!s) return make_error(path + ": " + s.error().message);
  return s;
}

// -- generation ---------------------------------------------------------------------------------

std::int64_t estimate_prompt_tokens(std::string_view endpoint, const json& body) {
  std::size_t chars = 0;
  std::int64_t messages = 0;
  if (is_chat(endpoint) && body.contains("messages") && body["messages"].is_array()) {
    for (const auto& m : body["messages"]) {
      ++messages;
      if (m.is_object() && m.contains("content")) chars += text_of(m["content"]).size();
    }
  } else if (body.contains("prompt")) {
    chars += text_of(body["prompt"]).size();
  }
  if (body.contains("tools")) chars += body["tools"].dump().size();
  return static_cast<std::int64_t>((chars + 3) / 4) + 4 * messages + 1;
}

std::optional<BadField> check_fields(const json& body) {
  auto wrong = [](std::string_view name, std::string_view what) {
    return BadField{"`" + std::string(name) + "` must be " + std::string(what), std::string(name)};
  };
  if (!body.is_object()) return std::nullopt;
  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    const json* v = field(body, name);
    if (v && !(v->is_number_unsigned() || (v->is_number_integer() && v->get<std::int64_t>() >= 0)))
      return wrong(name, "an integer of at least 0");
  }
  if (const json* v = field(body, "n"); v && !v->is_number_integer())
    return wrong("n", "an integer");
  if (const json* v = field(body, "stream"); v && !v->is_boolean())
    return wrong("stream", "a boolean");
  if (const json* v = field(body, "stream_options")) {
    if (!v->is_object()) return wrong("stream_options", "an object");
    if (const json* u = field(*v, "include_usage"); u && !u->is_boolean())
      return wrong("stream_options.include_usage", "a boolean");
  }
  const auto is_string = [](const json& s) { return s.is_string(); };
  if (const json* v = field(body, "stop");
      v && !v->is_string() && !(v->is_array() && std::all_of(v->begin(), v->end(), is_string)))
    return wrong("stop", "a string or an array of strings");
  return std::nullopt;
}

Expected<Generation> generate(std::string_view endpoint, const json& body, const Script& script,
                              const TextParams& params) {
  if (!body.is_object()) return make_error("the request body is not a JSON object");
  const bool chat = is_chat(endpoint);
  if (chat && !(body.contains("messages") && body["messages"].is_array())) {
    return make_error("a chat completion request needs \"messages\"");
  }
  if (!chat && !body.contains("prompt")) {
    return make_error("a completion request needs \"prompt\"");
  }
  if (auto bad = check_fields(body)) return make_error(std::move(bad->message));
  if (int_field(body, "n", 1) != 1) return make_error("the simulated engine supports n = 1 only");
  Generation g;
  g.prompt_tokens = estimate_prompt_tokens(endpoint, body);
  const Hash128 key = content_key(body);
  const Scripted* scripted = script.find(body);
  if (scripted) {
    g.tokens = tokenize(scripted->text);
  } else {
    std::uint64_t s = key.low ^ (key.high * 0x9E3779B97F4A7C15ULL) ^ params.seed;
    // Lognormal length: exp(mu + sigma z), z standard normal by Box-Muller.
    const double u1 = std::max(unit(s), 1e-12);
    const double u2 = unit(s);
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    const auto n = std::max<std::int64_t>(
        1,
        static_cast<std::int64_t>(std::llround(params.median_tokens * std::exp(params.sigma * z))));
    const std::int64_t len = std::min<std::int64_t>(n, 32768);
    g.tokens.reserve(static_cast<std::size_t>(len));
    for (std::int64_t i = 0; i < len; ++i) {
      std::string word(kWords[mix(s) % kWords.size()]);
      g.tokens.push_back(i == 0 ? word : " " + word);
    }
  }
  g.finish_reason = "stop";
  // Stop sequences cut the text before their first occurrence.
  if (body.contains("stop")) {
    std::vector<std::string> stops;
    if (body["stop"].is_string()) stops.push_back(body["stop"].get<std::string>());
    if (body["stop"].is_array()) {
      for (const auto& s : body["stop"]) {
        if (s.is_string()) stops.push_back(s.get<std::string>());
      }
    }
    std::string text;
    for (const auto& t : g.tokens)
      text += t;
    std::size_t cut = std::string::npos;
    for (const auto& stop : stops) {
      if (!stop.empty()) cut = std::min(cut, text.find(stop));
    }
    if (cut != std::string::npos) g.tokens = tokenize(text.substr(0, cut));
  }
  const std::int64_t max_tokens = int_field(
      body, "max_tokens", int_field(body, "max_completion_tokens", params.max_default_tokens));
  if (max_tokens >= 0 && static_cast<std::int64_t>(g.tokens.size()) > max_tokens) {
    g.tokens.resize(static_cast<std::size_t>(max_tokens));
    g.finish_reason = "length";
  }
  if (chat && scripted && !scripted->tool_calls.empty() && g.finish_reason != "length") {
    const std::string key_hex = key.hex().substr(0, 12);
    for (std::size_t i = 0; i < scripted->tool_calls.size(); ++i) {
      const json& c = scripted->tool_calls[i];
      g.tool_calls.push_back({"call_" + key_hex + "_" + std::to_string(i),
                              c["name"].get<std::string>(),
                              c.value("arguments", json::object()).dump()});
    }
    g.finish_reason = "tool_calls";
  }
  return g;
}

// -- response bodies ----------------------------------------------------------------------------

ResponseMeta response_meta(std::string_view endpoint, const json& body) {
  ResponseMeta m;
  m.chat = is_chat(endpoint);
  m.id = std::string(m.chat ? "chatcmpl-" : "cmpl-") + content_key(body).hex().substr(0, 24);
  m.model = body.contains("model") && body["model"].is_string() ? body["model"].get<std::string>()
                                                                : "sim";
  // Read without value(), which throws on a field of another type: generate() refuses such a
  // body, but this is also called on its own.
  const json* options = body.is_object() ? field(body, "stream_options") : nullptr;
  const json* usage = options && options->is_object() ? field(*options, "include_usage") : nullptr;
  m.include_usage = usage && usage->is_boolean() && usage->get<bool>();
  return m;
}

std::string full_response(const ResponseMeta& m, const Generation& g) {
  std::string text;
  for (const auto& t : g.tokens)
    text += t;
  ordered_json j;
  j["id"] = m.id;
  j["object"] = m.chat ? "chat.completion" : "text_completion";
  j["created"] = kCreated;
  j["model"] = m.model;
  ordered_json choice;
  choice["index"] = 0;
  if (m.chat) {
    choice["message"] = ordered_json{{"role", "assistant"}, {"content", text}};
    if (!g.tool_calls.empty()) {
      ordered_json calls = ordered_json::array();
      for (const auto& c : g.tool_calls)
        calls.push_back({{"id", c.id},
                         {"type", "function"},
                         {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
      choice["message"]["tool_calls"] = std::move(calls);
    }
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = g.finish_reason;
  j["choices"] = ordered_json::array({choice});
  j["usage"] = usage_json(Usage{g.prompt_tokens, static_cast<std::int64_t>(g.tokens.size())});
  return j.dump();
}

namespace {

std::string chunk_with(const ResponseMeta& m, ordered_json choice) {
  ordered_json j = chunk_head(m);
  j["choices"] = ordered_json::array({std::move(choice)});
  if (m.include_usage) j["usage"] = nullptr;
  return j.dump();
}

}  // namespace

std::string role_chunk(const ResponseMeta& m) {
  ordered_json choice;
  choice["index"] = 0;
  choice["delta"] = ordered_json{{"role", "assistant"}, {"content", ""}};
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = nullptr;
  return chunk_with(m, std::move(choice));
}

std::string text_chunk(const ResponseMeta& m, std::string_view text) {
  ordered_json choice;
  choice["index"] = 0;
  if (m.chat) {
    choice["delta"] = ordered_json{{"content", std::string(text)}};
  } else {
    choice["text"] = std::string(text);
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = nullptr;
  return chunk_with(m, std::move(choice));
}

std::string tool_call_chunk(const ResponseMeta& m, std::size_t index, const GeneratedCall& c) {
  ordered_json choice;
  choice["index"] = 0;
  choice["delta"] = ordered_json{
      {"tool_calls",
       ordered_json::array({{{"index", index},
                             {"id", c.id},
                             {"type", "function"},
                             {"function", {{"name", c.name}, {"arguments", c.arguments}}}}})}};
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = nullptr;
  return chunk_with(m, std::move(choice));
}

std::string final_chunk(const ResponseMeta& m, std::string_view finish_reason) {
  ordered_json choice;
  choice["index"] = 0;
  if (m.chat) {
    choice["delta"] = ordered_json::object();
  } else {
    choice["text"] = "";
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = std::string(finish_reason);
  return chunk_with(m, std::move(choice));
}

std::string usage_chunk(const ResponseMeta& m, const Usage& usage) {
  ordered_json j = chunk_head(m);
  j["choices"] = ordered_json::array();
  j["usage"] = usage_json(usage);
  return j.dump();
}

}  // namespace dynrt::engines::sim

#include "protocols/protocols.hpp"

#include "runtime/json_text.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace dynrt::protocols {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// -- common ---------------------------------------------------------------------------------------

const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::string dump(const ordered_json& j) {
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

std::string frame(std::string_view event, const ordered_json& data) {
  std::string out = "event: ";
  out += event;
  out += "\ndata: ";
  out += dump(data);
  out += "\n\n";
  return out;
}

// The chat completion's id without its "chatcmpl-" prefix: the other protocols' ids keep it
// after their own prefixes, so that an answer keeps one identity in every form.
std::string id_suffix(const json& chat) {
  const auto it = chat.find("id");
  if (it == chat.end() || !it->is_string()) return "0";
  std::string id = it->get<std::string>();
  if (id.rfind("chatcmpl-", 0) == 0) id.erase(0, 9);
  return id.empty() ? "0" : id;
}

std::string model_of(const json& request, const json& chat) {
  if (const json* m = field(request, "model"); m && m->is_string()) return m->get<std::string>();
  if (const json* m = field(chat, "model"); m && m->is_string()) return m->get<std::string>();
  return "";
}

// Request fields copied to the chat request unchanged when present (after the type check the
// gateway's own would apply to a chat request: the engine's answer is the judge of the rest).
void copy_numbers(const json& body, json& chat, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (const json* v = field(body, n)) chat[n] = *v;
}

struct Refuse {
  Refusal r;
};

[[noreturn]] void refuse(std::string message, std::string param) {
  throw Refuse{{std::move(message), std::move(param)}};
}

void want(bool ok, const std::string& param, std::string_view what) {
  if (!ok) refuse("`" + param + "` must be " + std::string(what), param);
}

// An object's "type" in the caller's request: `fallback` when absent or null, a refusal naming
// it when it is anything but a string (json::value would throw out of the translation).
std::string type_of(const json& o, const std::string& at, const char* fallback = "") {
  const json* t = field(o, "type");
  if (!t) return fallback;
  want(t->is_string(), at + ".type", "a string");
  return t->get<std::string>();
}

// A member of an engine's answer read leniently: the fallback unless it has the expected type.
std::string string_or(const json& o, const char* name, std::string fallback = "") {
  if (!o.is_object()) return fallback;
  const auto it = o.find(name);
  return it != o.end() && it->is_string() ? it->get<std::string>() : fallback;
}

int index_or(const json& o, const char* name, int fallback) {
  const auto it = o.find(name);
  if (it == o.end() || !it->is_number_integer()) return fallback;
  if (it->is_number_unsigned())
    return it->get<std::uint64_t>() <= std::numeric_limits<int>::max() ? it->get<int>() : fallback;
  const auto v = it->get<std::int64_t>();
  return v >= std::numeric_limits<int>::min() && v <= std::numeric_limits<int>::max()
             ? static_cast<int>(v)
             : fallback;
}

// A tool-call's arguments as JSON text, as chat carries them.
std::string arguments_text(const json& input) {
  return input.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A chat tool-call's arguments as the object Anthropic's tool_use carries; arguments that are
// not a JSON object stay the text they are (docs/protocols.md).
json arguments_object(const std::string& text) {
  json v = parse_json(text);
  if (v.is_object()) return v;
  return text.empty() ? json::object() : json(text);
}

// A chat request with the wire request's model, once every field of it is one the protocol's
// translation knows (`known`) or may leave out (`ignored`); any other is refused by name.
json chat_head(const json& body, const std::set<std::string>& known,
               const std::set<std::string>& ignored) {
  for (const auto& [k, v] : body.items())
    if (!known.count(k) && !ignored.count(k) && !v.is_null())
      refuse("`" + k +
                 "` has no chat completions equivalent, and dynrt does not drop what it "
                 "cannot pass on",
             k);
  const json* model = field(body, "model");
  want(model && model->is_string(), "model", "a string");
  return json{{"model", *model}};
}

// -- Anthropic Messages: the request
// ---------------------------------------------------------------

// Fields of a Messages request that carry nothing a chat engine's answer depends on.
const std::set<std::string> kMessagesIgnored = {"metadata", "service_tier", "anthropic_version"};

json text_parts_or_string(const std::vector<json>& parts) {
  if (parts.size() == 1 && string_or(parts.front(), "type") == "text") return parts.front()["text"];
  return json(parts);
}

json image_part(const json& block, const std::string& at) {
  const json* src = field(block, "source");
  want(src && src->is_object(), at + ".source", "an object");
  const std::string type = src->value("type", "");
  std::string url;
  if (type == "base64") {
    const json* media = field(*src, "media_type");
    const json* data = field(*src, "data");
    want(media && media->is_string(), at + ".source.media_type", "a string");
    want(data && data->is_string(), at + ".source.data", "a string");
    url = "data:" + media->get<std::string>() + ";base64," + data->get<std::string>();
  } else if (type == "url") {
    const json* u = field(*src, "url");
    want(u && u->is_string(), at + ".source.url", "a string");
    url = u->get<std::string>();
  } else {
    refuse("an image source of type '" + type +
               "' cannot be sent to a chat completions engine (base64 and url can)",
           at + ".source.type");
  }
  return json{{"type", "image_url"}, {"image_url", {{"url", url}}}};
}

json text_block(const json& block, const std::string& at) {
  const json* t = field(block, "text");
  want(t && t->is_string(), at + ".text", "a string");
  return json{{"type", "text"}, {"text", *t}};
}

// A tool_result's content: a string, or text blocks.
json tool_result_content(const json& block, const std::string& at) {
  const json* c = field(block, "content");
  if (!c) return "";
  if (c->is_string()) return *c;
  want(c->is_array(), at + ".content", "a string or an array of blocks");
  std::vector<json> parts;
  for (std::size_t k = 0; k < c->size(); ++k) {
    const json& b = (*c)[k];
    const std::string bat = at + ".content[" + std::to_string(k) + "]";
    want(b.is_object(), bat, "an object");
    const std::string type = type_of(b, bat);
    if (type == "text")
      parts.push_back(text_block(b, bat));
    else if (type == "image")
      refuse(
          "an image inside a tool_result cannot be sent to a chat completions engine (a "
          "tool message holds text only)",
          bat + ".type");
    else
      refuse("a tool_result block of type '" + type + "' has no chat completions equivalent",
             bat + ".type");
  }
  return text_parts_or_string(parts);
}

void user_message(const json& content, const std::string& at, json& out) {
  std::vector<json> parts;
  for (std::size_t k = 0; k < content.size(); ++k) {
    const json& b = content[k];
    const std::string bat = at + "[" + std::to_string(k) + "]";
    want(b.is_object(), bat, "an object");
    const std::string type = type_of(b, bat);
    if (type == "text") {
      parts.push_back(text_block(b, bat));
    } else if (type == "image") {
      parts.push_back(image_part(b, bat));
    } else if (type == "tool_result") {
      const json* id = field(b, "tool_use_id");
      want(id && id->is_string(), bat + ".tool_use_id", "a string");
      // Chat has no failed-result flag: `is_error` is dropped (docs/protocols.md); the text
      // says what failed, as the tool wrote it.
      out.push_back(
          json{{"role", "tool"}, {"tool_call_id", *id}, {"content", tool_result_content(b, bat)}});
    } else {
      refuse("a user content block of type '" + type +
                 "' has no chat completions equivalent (text, image and tool_result do)",
             bat + ".type");
    }
  }
  if (!parts.empty())
    out.push_back(json{{"role", "user"}, {"content", text_parts_or_string(parts)}});
}

void assistant_message(const json& content, const std::string& at, json& out) {
  std::vector<json> parts;
  json calls = json::array();
  for (std::size_t k = 0; k < content.size(); ++k) {
    const json& b = content[k];
    const std::string bat = at + "[" + std::to_string(k) + "]";
    want(b.is_object(), bat, "an object");
    const std::string type = type_of(b, bat);
    if (type == "text") {
      parts.push_back(text_block(b, bat));
    } else if (type == "tool_use") {
      const json* id = field(b, "id");
      const json* name = field(b, "name");
      want(id && id->is_string(), bat + ".id", "a string");
      want(name && name->is_string(), bat + ".name", "a string");
      const json* input = field(b, "input");
      calls.push_back(json{
          {"id", *id},
          {"type", "function"},
          {"function",
           {{"name", *name}, {"arguments", arguments_text(input ? *input : json::object())}}}});
    } else if (type == "thinking" || type == "redacted_thinking") {
      // A chat engine neither takes its reasoning back nor checks a signature: dropped.
    } else {
      refuse("an assistant content block of type '" + type +
                 "' has no chat completions equivalent (text, tool_use and thinking do)",
             bat + ".type");
    }
  }
  json m{{"role", "assistant"}};
  if (!parts.empty()) {
    std::string text;  // chat carries an assistant turn's text as one string
    for (const auto& p : parts)
      text += p["text"].get<std::string>();
    m["content"] = text;
  } else if (calls.empty()) {
    m["content"] = "";
  }
  if (!calls.empty()) m["tool_calls"] = std::move(calls);
  out.push_back(std::move(m));
}

json messages_tools(const json& tools) {
  want(tools.is_array(), "tools", "an array");
  json out = json::array();
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    want(t.is_object(), at, "an object");
    if (const json* type = field(t, "type"); type && *type != "custom")
      refuse("the server tool '" + type->dump() +
                 "' runs on Anthropic's side and has no chat completions equivalent; declare "
                 "it as a client tool (name, description, input_schema)",
             at + ".type");
    const json* name = field(t, "name");
    want(name && name->is_string(), at + ".name", "a string");
    json fn{{"name", *name}};
    if (const json* d = field(t, "description")) fn["description"] = *d;
    const json* schema = field(t, "input_schema");
    want(schema && schema->is_object(), at + ".input_schema", "an object");
    fn["parameters"] = *schema;
    out.push_back(json{{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

void messages_tool_choice(const json& choice, json& chat) {
  want(choice.is_object(), "tool_choice", "an object");
  const std::string type = type_of(choice, "tool_choice");
  if (type == "auto") {
    chat["tool_choice"] = "auto";
  } else if (type == "any") {
    chat["tool_choice"] = "required";
  } else if (type == "none") {
    chat["tool_choice"] = "none";
  } else if (type == "tool") {
    const json* name = field(choice, "name");
    want(name && name->is_string(), "tool_choice.name", "a string");
    chat["tool_choice"] = json{{"type", "function"}, {"function", {{"name", *name}}}};
  } else {
    refuse("`tool_choice.type` must be auto, any, tool or none", "tool_choice.type");
  }
  if (const json* d = field(choice, "disable_parallel_tool_use");
      d && d->is_boolean() && d->get<bool>())
    chat["parallel_tool_calls"] = false;
}

json messages_to_chat(const json& body) {
  static const std::set<std::string> kKnown = {
      "model",       "max_tokens", "messages", "system",         "tools",  "tool_choice",
      "temperature", "top_p",      "top_k",    "stop_sequences", "stream", "thinking"};
  json chat = chat_head(body, kKnown, kMessagesIgnored);
  const json* max_tokens = field(body, "max_tokens");
  want(max_tokens && max_tokens->is_number_integer() && max_tokens->get<std::int64_t>() >= 1 &&
           max_tokens->get<std::int64_t>() <= 2147483647,
       "max_tokens", "an integer from 1 to 2147483647");
  chat["max_tokens"] = *max_tokens;
  if (const json* t = field(body, "thinking");
      t && !(t->is_object() && string_or(*t, "type") == "disabled"))
    refuse(
        "extended thinking has no chat completions equivalent: send the request without "
        "`thinking` (or with {\"type\": \"disabled\"})",
        "thinking");
  json messages = json::array();
  if (const json* sys = field(body, "system")) {
    if (sys->is_string()) {
      messages.push_back(json{{"role", "system"}, {"content", *sys}});
    } else {
      want(sys->is_array(), "system", "a string or an array of text blocks");
      std::vector<json> parts;
      for (std::size_t k = 0; k < sys->size(); ++k) {
        const std::string at = "system[" + std::to_string(k) + "]";
        want((*sys)[k].is_object() && type_of((*sys)[k], at) == "text", at, "a text block");
        parts.push_back(text_block((*sys)[k], at));
      }
      if (!parts.empty())
        messages.push_back(json{{"role", "system"}, {"content", text_parts_or_string(parts)}});
    }
  }
  const json* msgs = field(body, "messages");
  want(msgs && msgs->is_array(), "messages", "an array");
  for (std::size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    want(m.is_object(), at, "an object");
    const json* role = field(m, "role");
    want(role && (*role == "user" || *role == "assistant"), at + ".role", "user or assistant");
    const json* content = field(m, "content");
    want(content && (content->is_string() || content->is_array()), at + ".content",
         "a string or an array of content blocks");
    if (content->is_string()) {
      messages.push_back(json{{"role", *role}, {"content", *content}});
    } else if (*role == "user") {
      user_message(*content, at + ".content", messages);
    } else {
      assistant_message(*content, at + ".content", messages);
    }
  }
  chat["messages"] = std::move(messages);
  if (const json* tools = field(body, "tools")) chat["tools"] = messages_tools(*tools);
  if (const json* choice = field(body, "tool_choice")) messages_tool_choice(*choice, chat);
  copy_numbers(body, chat, {"temperature", "top_p", "top_k"});
  if (const json* stop = field(body, "stop_sequences")) {
    want(stop->is_array() &&
             std::all_of(stop->begin(), stop->end(), [](const json& s) { return s.is_string(); }),
         "stop_sequences", "an array of strings");
    chat["stop"] = *stop;
  }
  return chat;
}

// -- OpenAI Responses: the request
// -----------------------------------------------------------------

// Fields of a Responses request that carry nothing a chat engine's answer depends on: dynrt
// keeps no responses, so `store` and what to `include` of them change nothing.
const std::set<std::string> kResponsesIgnored = {
    "store",      "include",      "metadata",          "user",          "prompt_cache_key",
    "truncation", "service_tier", "safety_identifier", "stream_options"};

std::string input_text(const json& content, const std::string& at, std::vector<json>* parts) {
  if (content.is_string()) return content.get<std::string>();
  want(content.is_array(), at, "a string or an array of content parts");
  std::string text;
  for (std::size_t k = 0; k < content.size(); ++k) {
    const json& p = content[k];
    const std::string pat = at + "[" + std::to_string(k) + "]";
    want(p.is_object(), pat, "an object");
    const std::string type = type_of(p, pat);
    if (type == "input_text" || type == "output_text" || type == "text") {
      const json* t = field(p, "text");
      want(t && t->is_string(), pat + ".text", "a string");
      if (parts) parts->push_back(json{{"type", "text"}, {"text", *t}});
      text += t->get<std::string>();
    } else if (type == "input_image" && parts) {
      const json* u = field(p, "image_url");
      want(u && u->is_string(), pat + ".image_url",
           "a string (file_id images live in OpenAI's storage, which dynrt cannot read)");
      parts->push_back(json{{"type", "image_url"}, {"image_url", {{"url", *u}}}});
    } else {
      refuse("a content part of type '" + type + "' has no chat completions equivalent here",
             pat + ".type");
    }
  }
  return text;
}

json responses_tools(const json& tools) {
  want(tools.is_array(), "tools", "an array");
  json out = json::array();
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    want(t.is_object(), at, "an object");
    const std::string type = type_of(t, at);
    if (type != "function")
      refuse("the tool type '" + type +
                 "' runs on OpenAI's side (or needs a grammar) and has no chat completions "
                 "equivalent; declare it as a function tool",
             at + ".type");
    const json* name = field(t, "name");
    want(name && name->is_string(), at + ".name", "a string");
    json fn{{"name", *name}};
    if (const json* d = field(t, "description")) fn["description"] = *d;
    if (const json* p = field(t, "parameters")) fn["parameters"] = *p;
    if (const json* s = field(t, "strict")) fn["strict"] = *s;
    out.push_back(json{{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

json responses_to_chat(const json& body) {
  static const std::set<std::string> kKnown = {
      "model",       "input", "instructions",        "tools",  "tool_choice", "max_output_tokens",
      "temperature", "top_p", "parallel_tool_calls", "stream", "text",        "reasoning"};
  if (field(body, "previous_response_id"))
    refuse(
        "dynrt keeps no responses to continue from: send the whole conversation in `input` "
        "(as with store: false)",
        "previous_response_id");
  json chat = chat_head(body, kKnown, kResponsesIgnored);
  json messages = json::array();
  if (const json* ins = field(body, "instructions")) {
    want(ins->is_string(), "instructions", "a string");
    messages.push_back(json{{"role", "system"}, {"content", *ins}});
  }
  const json* input = field(body, "input");
  want(input && (input->is_string() || input->is_array()), "input",
       "a string or an array of input items");
  if (input->is_string()) {
    messages.push_back(json{{"role", "user"}, {"content", *input}});
  } else {
    for (std::size_t i = 0; i < input->size(); ++i) {
      const json& item = (*input)[i];
      const std::string at = "input[" + std::to_string(i) + "]";
      want(item.is_object(), at, "an object");
      const std::string type = type_of(item, at, "message");
      if (type == "message") {
        const json* role = field(item, "role");
        want(role && role->is_string(), at + ".role", "a string");
        std::string r = role->get<std::string>();
        if (r == "developer") r = "system";  // chat engines know the developer's turn as system
        if (r != "user" && r != "system" && r != "assistant")
          refuse("`" + at + ".role` must be user, system, developer or assistant", at + ".role");
        const json* content = field(item, "content");
        want(content != nullptr, at + ".content", "a string or an array of content parts");
        std::vector<json> parts;
        std::string text = input_text(*content, at + ".content", r == "user" ? &parts : nullptr);
        json content_out =
            content->is_string() || r != "user" ? json(text) : text_parts_or_string(parts);
        messages.push_back(json{{"role", r}, {"content", std::move(content_out)}});
      } else if (type == "function_call") {
        const json* id = field(item, "call_id");
        const json* name = field(item, "name");
        const json* args = field(item, "arguments");
        want(id && id->is_string(), at + ".call_id", "a string");
        want(name && name->is_string(), at + ".name", "a string");
        want(args && args->is_string(), at + ".arguments", "a string");
        json call{{"id", *id},
                  {"type", "function"},
                  {"function", {{"name", *name}, {"arguments", *args}}}};
        // Calls that follow an assistant turn (or one another) belong to that turn, as chat
        // carries them: one assistant message with its text and its tool calls.
        if (!messages.empty() && messages.back()["role"] == "assistant") {
          messages.back()["tool_calls"].push_back(std::move(call));
        } else {
          messages.push_back(json{{"role", "assistant"}, {"tool_calls", json::array({call})}});
        }
      } else if (type == "function_call_output") {
        const json* id = field(item, "call_id");
        const json* output = field(item, "output");
        want(id && id->is_string(), at + ".call_id", "a string");
        want(output != nullptr, at + ".output", "a string or an array of content parts");
        messages.push_back(json{{"role", "tool"},
                                {"tool_call_id", *id},
                                {"content", input_text(*output, at + ".output", nullptr)}});
      } else if (type == "reasoning") {
        // Reasoning handed back (encrypted or summarized) is for OpenAI's models: dropped.
      } else {
        refuse("an input item of type '" + type +
                   "' has no chat completions equivalent (message, function_call, "
                   "function_call_output and reasoning do)",
               at + ".type");
      }
    }
  }
  chat["messages"] = std::move(messages);
  if (const json* tools = field(body, "tools")) chat["tools"] = responses_tools(*tools);
  if (const json* choice = field(body, "tool_choice")) {
    if (choice->is_string()) {
      want(*choice == "auto" || *choice == "none" || *choice == "required", "tool_choice",
           "auto, none, required or a function");
      chat["tool_choice"] = *choice;
    } else {
      want(choice->is_object() && string_or(*choice, "type") == "function" &&
               field(*choice, "name") && (*choice)["name"].is_string(),
           "tool_choice", "auto, none, required or {\"type\": \"function\", \"name\": ...}");
      chat["tool_choice"] = json{{"type", "function"}, {"function", {{"name", (*choice)["name"]}}}};
    }
  }
  if (const json* m = field(body, "max_output_tokens")) {
    want(m->is_number_integer() && m->get<std::int64_t>() >= 1 &&
             m->get<std::int64_t>() <= 2147483647,
         "max_output_tokens", "an integer from 1 to 2147483647");
    chat["max_tokens"] = *m;
  }
  copy_numbers(body, chat, {"temperature", "top_p", "parallel_tool_calls"});
  if (const json* text = field(body, "text")) {
    want(text->is_object(), "text", "an object");
    if (const json* format = field(*text, "format")) {
      want(format->is_object(), "text.format", "an object");
      const std::string type = format->value("type", "");
      if (type == "json_schema") {
        json schema{{"name", format->value("name", "response")}};
        if (const json* s = field(*format, "schema")) schema["schema"] = *s;
        if (const json* s = field(*format, "strict")) schema["strict"] = *s;
        chat["response_format"] = json{{"type", "json_schema"}, {"json_schema", std::move(schema)}};
      } else if (type == "json_object") {
        chat["response_format"] = json{{"type", "json_object"}};
      } else if (type != "text") {
        refuse("`text.format.type` must be text, json_schema or json_object", "text.format.type");
      }
    }
  }
  if (const json* r = field(body, "reasoning")) {
    want(r->is_object(), "reasoning", "an object");
    if (const json* e = field(*r, "effort")) chat["reasoning_effort"] = *e;
  }
  return chat;
}

// -- chat answers, read as a sequence of happenings
// -------------------------------------------------

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

std::string stop_reason_of(const std::string& finish) {
  if (finish == "length") return "max_tokens";
  if (finish == "tool_calls" || finish == "function_call") return "tool_use";
  if (finish == "content_filter") return "refusal";
  return "end_turn";
}

ordered_json messages_usage(std::int64_t in, std::int64_t out) {
  return ordered_json{{"input_tokens", in}, {"output_tokens", out}};
}

ordered_json responses_usage(std::int64_t in, std::int64_t out) {
  return ordered_json{{"input_tokens", in},
                      {"input_tokens_details", {{"cached_tokens", 0}}},
                      {"output_tokens", out},
                      {"output_tokens_details", {{"reasoning_tokens", 0}}},
                      {"total_tokens", in + out}};
}

std::int64_t usage_of(const json& chat, const char* name) {
  const auto u = chat.find("usage");
  if (u == chat.end() || !u->is_object()) return 0;
  const auto v = u->find(name);
  return v != u->end() && v->is_number_integer() ? v->get<std::int64_t>() : 0;
}

ordered_json message_item(const std::string& id, const std::string& text, const char* status) {
  return ordered_json{{"id", id},
                      {"type", "message"},
                      {"status", status},
                      {"content", ordered_json::array({{{"type", "output_text"},
                                                        {"annotations", ordered_json::array()},
                                                        {"logprobs", ordered_json::array()},
                                                        {"text", text}}})},
                      {"role", "assistant"}};
}

ordered_json call_item(const std::string& id, const ToolCall& c, const char* status) {
  return ordered_json{{"id", id},         {"type", "function_call"},
                      {"status", status}, {"arguments", c.arguments},
                      {"call_id", c.id},  {"name", c.name}};
}

// The Response object: `status` in_progress, completed, incomplete or failed.
ordered_json response_object(const json& request, const std::string& id, std::int64_t created,
                             const std::string& model, const std::string& status,
                             ordered_json output, const ordered_json& usage,
                             const ordered_json& error = nullptr) {
  auto echo = [&](const char* name, ordered_json fallback) {
    const json* v = field(request, name);
    return v ? ordered_json(*v) : fallback;
  };
  ordered_json r;
  r["id"] = id;
  r["object"] = "response";
  r["created_at"] = created;
  r["status"] = status;
  r["error"] = error;
  r["incomplete_details"] = status == "incomplete" ? ordered_json{{"reason", "max_output_tokens"}}
                                                   : ordered_json(nullptr);
  r["instructions"] = echo("instructions", nullptr);
  r["max_output_tokens"] = echo("max_output_tokens", nullptr);
  r["model"] = model;
  r["output"] = std::move(output);
  r["parallel_tool_calls"] = echo("parallel_tool_calls", true);
  r["previous_response_id"] = nullptr;
  r["reasoning"] = ordered_json{{"effort", nullptr}, {"summary", nullptr}};
  r["store"] = false;
  r["temperature"] = echo("temperature", 1.0);
  r["text"] = echo("text", ordered_json{{"format", {{"type", "text"}}}});
  r["tool_choice"] = echo("tool_choice", "auto");
  r["tools"] = echo("tools", ordered_json::array());
  r["top_p"] = echo("top_p", 1.0);
  r["truncation"] = "disabled";
  r["usage"] = usage;
  r["metadata"] = echo("metadata", ordered_json::object());
  return r;
}

std::int64_t created_of(const json& chat) {
  const auto c = chat.find("created");
  return c != chat.end() && c->is_number_integer() ? c->get<std::int64_t>() : 0;
}

std::string anthropic_error_type(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
    case 529:
      return "overloaded_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

std::string openai_type(int status) {
  if (status == 404) return "not_found_error";
  if (status == 408) return "timeout_error";
  if (status == 429) return "rate_limit_exceeded";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

}  // namespace

// -- names ----------------------------------------------------------------------------------------

std::string_view to_string(Api api) {
  switch (api) {
    case Api::chat:
      return "chat";
    case Api::completions:
      return "completions";
    case Api::messages:
      return "messages";
    case Api::responses:
      return "responses";
  }
  return "chat";
}

std::string_view path_of(Api api) {
  switch (api) {
    case Api::chat:
      return "/v1/chat/completions";
    case Api::completions:
      return "/v1/completions";
    case Api::messages:
      return "/v1/messages";
    case Api::responses:
      return "/v1/responses";
  }
  return "/v1/chat/completions";
}

std::optional<Api> api_of_path(std::string_view path) {
  for (const Api a : {Api::chat, Api::completions, Api::messages, Api::responses})
    if (path == path_of(a)) return a;
  return std::nullopt;
}

std::optional<Api> api_of_name(std::string_view name) {
  for (const Api a : {Api::chat, Api::completions, Api::messages, Api::responses})
    if (name == to_string(a)) return a;
  return std::nullopt;
}

// -- requests
// --------------------------------------------------------------------------------------

ToChat to_chat(Api api, const json& body) {
  ToChat out;
  if (!body.is_object()) {
    out.refused = {"the request body must be a JSON object", ""};
    return out;
  }
  try {
    if (api == Api::messages)
      out.chat = messages_to_chat(body);
    else if (api == Api::responses)
      out.chat = responses_to_chat(body);
    else
      out.chat = body;
  } catch (Refuse& r) {
    out.refused = std::move(r.r);
    out.chat = nullptr;
    return out;
  }
  if (api != Api::chat && api != Api::completions) {
    if (const json* s = field(body, "stream")) {
      if (!s->is_boolean()) {
        out.refused = {"`stream` must be a boolean", "stream"};
        out.chat = nullptr;
        return out;
      }
      if (s->get<bool>()) {
        out.chat["stream"] = true;
        out.chat["stream_options"] = json{{"include_usage", true}};
      }
    }
  }
  return out;
}

// -- whole answers
// -----------------------------------------------------------------------------------

namespace {

std::optional<ordered_json> answer(Api api, const json& request, const json& chat) {
  if (!chat.is_object()) return std::nullopt;
  const auto choices = chat.find("choices");
  if (choices == chat.end() || !choices->is_array() || choices->empty() ||
      !(*choices)[0].is_object())
    return std::nullopt;
  const json& choice = (*choices)[0];
  const json message = choice.value("message", json::object());
  const std::string text = message.contains("content") && message["content"].is_string()
                               ? message["content"].get<std::string>()
                               : "";
  std::vector<ToolCall> calls;
  if (const auto tc = message.find("tool_calls"); tc != message.end() && tc->is_array())
    for (const auto& c : *tc) {
      if (!c.is_object()) continue;
      const json fn = c.value("function", json::object());
      calls.push_back({string_or(c, "id"), string_or(fn, "name"), string_or(fn, "arguments")});
    }
  const std::string finish = choice.contains("finish_reason") && choice["finish_reason"].is_string()
                                 ? choice["finish_reason"].get<std::string>()
                                 : "stop";
  const std::string suffix = id_suffix(chat);
  const std::string model = model_of(request, chat);
  const std::int64_t in = usage_of(chat, "prompt_tokens"),
                     out = usage_of(chat, "completion_tokens");
  if (api == Api::messages) {
    ordered_json content = ordered_json::array();
    if (!text.empty()) content.push_back({{"type", "text"}, {"text", text}});
    for (const auto& c : calls)
      content.push_back({{"type", "tool_use"},
                         {"id", c.id},
                         {"name", c.name},
                         {"input", arguments_object(c.arguments)}});
    ordered_json m;
    m["id"] = "msg_" + suffix;
    m["type"] = "message";
    m["role"] = "assistant";
    m["model"] = model;
    m["content"] = std::move(content);
    // vLLM names the stop string that ended the text in the choice's `stop_reason`.
    const auto matched = choice.find("stop_reason");
    const bool stopped_by_sequence =
        finish == "stop" && matched != choice.end() && matched->is_string();
    m["stop_reason"] = stopped_by_sequence ? "stop_sequence" : stop_reason_of(finish);
    m["stop_sequence"] = stopped_by_sequence ? ordered_json(*matched) : ordered_json(nullptr);
    m["usage"] = messages_usage(in, out);
    return m;
  }
  if (api == Api::responses) {
    ordered_json output = ordered_json::array();
    if (!text.empty() || calls.empty())
      output.push_back(message_item("msg_" + suffix, text, "completed"));
    for (std::size_t i = 0; i < calls.size(); ++i)
      output.push_back(call_item("fc_" + suffix + "_" + std::to_string(i), calls[i], "completed"));
    return response_object(request, "resp_" + suffix, created_of(chat), model,
                           finish == "length" ? "incomplete" : "completed", std::move(output),
                           responses_usage(in, out));
  }
  return ordered_json(chat);
}

}  // namespace

std::optional<std::string> from_chat(Api api, const json& request, std::string_view chat_text) {
  if (!translated(api)) return std::string(chat_text);
  auto out = answer(api, request, parse_json(chat_text));
  if (!out) return std::nullopt;
  return dump(*out);
}

std::optional<json> answer_of(Api api, const json& request, const json& chat) {
  auto out = answer(api, request, chat);
  if (!out) return std::nullopt;
  return json(std::move(*out));
}

// -- errors
// ------------------------------------------------------------------------------------------

std::string error_body(Api api, std::string_view message, int status, std::string_view param) {
  if (api == Api::messages)
    return dump(ordered_json{
        {"type", "error"},
        {"error", {{"type", anthropic_error_type(status)}, {"message", std::string(message)}}}});
  ordered_json error;
  error["message"] = std::string(message);
  error["type"] = openai_type(status);
  error["param"] = param.empty() ? ordered_json(nullptr) : ordered_json(std::string(param));
  error["code"] = status;
  return dump(ordered_json{{"error", std::move(error)}});
}

std::string error_message(std::string_view openai_body) {
  const json parsed = parse_json(openai_body);
  if (parsed.is_object() && parsed.contains("error")) {
    const json& e = parsed["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string())
      return e["message"].get<std::string>();
    if (e.is_string()) return e.get<std::string>();
  }
  return std::string(openai_body);
}

std::string translate_error(Api api, std::string_view openai_body, int status) {
  if (api != Api::messages) return std::string(openai_body);
  return error_body(api, error_message(openai_body), status);
}

// -- streams
// -----------------------------------------------------------------------------------------

struct StreamTranslator::State {
  Api api;
  json request;
  bool started = false;
  std::string suffix = "0";
  std::string model;
  std::int64_t created = 0;
  std::int64_t in = 0, out = 0;
  std::string finish = "stop";
  std::string matched_stop;  // vLLM's stop_reason: the stop string that ended the text
  int sequence = 0;          // Responses: every event's sequence_number
  // The block (Messages) or output item (Responses) open now: -1 none, 0 text, k + 1 tool call k.
  int open = -1;
  int index = -1;      // its index among the blocks or output items
  int text_items = 0;  // text blocks or message items opened so far
  std::string text;    // the open one's text
  std::map<int, ToolCall> calls;
  std::map<int, int> call_index;                // tool call -> its block or output item index
  ordered_json output = ordered_json::array();  // Responses: the items done so far

  std::string event(std::string_view name, ordered_json data) {
    if (api == Api::responses) {
      ordered_json d{{"type", std::string(name)}, {"sequence_number", sequence++}};
      for (auto& [k, v] : data.items())
        d[k] = std::move(v);
      return frame(name, d);
    }
    ordered_json d{{"type", std::string(name)}};
    for (auto& [k, v] : data.items())
      d[k] = std::move(v);
    return frame(name, d);
  }

  ordered_json response(const std::string& status, const ordered_json& error = nullptr) {
    return response_object(
        request, "resp_" + suffix, created, model, status, output,
        status == "in_progress" ? ordered_json(nullptr) : responses_usage(in, out), error);
  }

  std::string start() {
    started = true;
    if (api == Api::messages) {
      ordered_json m;
      m["id"] = "msg_" + suffix;
      m["type"] = "message";
      m["role"] = "assistant";
      m["model"] = model;
      m["content"] = ordered_json::array();
      m["stop_reason"] = nullptr;
      m["stop_sequence"] = nullptr;
      m["usage"] = messages_usage(in, 0);
      return event("message_start", {{"message", std::move(m)}});
    }
    std::string f = event("response.created", {{"response", response("in_progress")}});
    return f + event("response.in_progress", {{"response", response("in_progress")}});
  }

  std::string item_id() const {
    // Text after a tool call (rare) opens a second message item, with an id of its own.
    if (open == 0)
      return text_items <= 1 ? "msg_" + suffix
                             : "msg_" + suffix + "_" + std::to_string(text_items - 1);
    return "fc_" + suffix + "_" + std::to_string(open - 1);
  }

  std::string close() {
    if (open < 0) return {};
    std::string f;
    if (api == Api::messages) {
      f = event("content_block_stop", {{"index", index}});
    } else if (open == 0) {
      const std::string id = item_id();
      f = event("response.output_text.done", {{"item_id", id},
                                              {"output_index", index},
                                              {"content_index", 0},
                                              {"text", text},
                                              {"logprobs", ordered_json::array()}});
      f += event("response.content_part.done", {{"item_id", id},
                                                {"output_index", index},
                                                {"content_index", 0},
                                                {"part",
                                                 {{"type", "output_text"},
                                                  {"annotations", ordered_json::array()},
                                                  {"logprobs", ordered_json::array()},
                                                  {"text", text}}}});
      ordered_json item = message_item(id, text, "completed");
      f += event("response.output_item.done", {{"output_index", index}, {"item", item}});
      output.push_back(std::move(item));
    } else {
      const std::string id = item_id();
      const ToolCall& c = calls[open - 1];
      f = event("response.function_call_arguments.done",
                {{"item_id", id}, {"output_index", index}, {"arguments", c.arguments}});
      ordered_json item = call_item(id, c, "completed");
      f += event("response.output_item.done", {{"output_index", index}, {"item", item}});
      output.push_back(std::move(item));
    }
    open = -1;
    return f;
  }

  std::string open_text() {
    std::string f = close();
    open = 0;
    ++index;
    ++text_items;
    text.clear();
    if (api == Api::messages)
      return f + event("content_block_start",
                       {{"index", index}, {"content_block", {{"type", "text"}, {"text", ""}}}});
    const std::string id = item_id();
    ordered_json item{{"id", id},
                      {"type", "message"},
                      {"status", "in_progress"},
                      {"content", ordered_json::array()},
                      {"role", "assistant"}};
    f += event("response.output_item.added", {{"output_index", index}, {"item", std::move(item)}});
    f += event("response.content_part.added", {{"item_id", id},
                                               {"output_index", index},
                                               {"content_index", 0},
                                               {"part",
                                                {{"type", "output_text"},
                                                 {"annotations", ordered_json::array()},
                                                 {"logprobs", ordered_json::array()},
                                                 {"text", ""}}}});
    return f;
  }

  std::string open_call(int k) {
    std::string f = close();
    open = k + 1;
    ++index;
    call_index[k] = index;
    const ToolCall& c = calls[k];
    if (api == Api::messages)
      return f + event("content_block_start", {{"index", index},
                                               {"content_block",
                                                {{"type", "tool_use"},
                                                 {"id", c.id},
                                                 {"name", c.name},
                                                 {"input", ordered_json::object()}}}});
    return f + event("response.output_item.added",
                     {{"output_index", index}, {"item", call_item(item_id(), c, "in_progress")}});
  }

  std::string text_delta(const std::string& piece) {
    std::string f;
    if (open != 0) f = open_text();
    text += piece;
    if (api == Api::messages)
      return f + event("content_block_delta",
                       {{"index", index}, {"delta", {{"type", "text_delta"}, {"text", piece}}}});
    return f + event("response.output_text.delta", {{"item_id", item_id()},
                                                    {"output_index", index},
                                                    {"content_index", 0},
                                                    {"delta", piece},
                                                    {"logprobs", ordered_json::array()}});
  }

  std::string call_delta(int k, const json& delta) {
    std::string f;
    ToolCall& c = calls[k];
    const json fn = delta.value("function", json::object());
    if (delta.contains("id") && delta["id"].is_string()) c.id = delta["id"].get<std::string>();
    if (fn.contains("name") && fn["name"].is_string()) c.name += fn["name"].get<std::string>();
    if (open != k + 1) {
      if (c.id.empty()) c.id = "call_" + suffix + "_" + std::to_string(k);
      f = open_call(k);
    }
    const std::string piece = fn.contains("arguments") && fn["arguments"].is_string()
                                  ? fn["arguments"].get<std::string>()
                                  : "";
    if (piece.empty()) return f;
    c.arguments += piece;
    if (api == Api::messages)
      return f + event("content_block_delta",
                       {{"index", index},
                        {"delta", {{"type", "input_json_delta"}, {"partial_json", piece}}}});
    return f + event("response.function_call_arguments.delta",
                     {{"item_id", item_id()}, {"output_index", index}, {"delta", piece}});
  }
};

StreamTranslator::StreamTranslator(Api api, const json& request) : s_(std::make_unique<State>()) {
  s_->api = api;
  s_->request = request;
  s_->model = model_of(request, json::object());
}
StreamTranslator::~StreamTranslator() = default;
StreamTranslator::StreamTranslator(StreamTranslator&&) noexcept = default;
StreamTranslator& StreamTranslator::operator=(StreamTranslator&&) noexcept = default;

std::string StreamTranslator::chunk(std::string_view data) {
  State& s = *s_;
  const json c = parse_json(data);
  if (!c.is_object()) return {};
  std::string f;
  if (!s.started) {
    s.suffix = id_suffix(c);
    if (s.model.empty()) s.model = model_of(json::object(), c);
    s.created = created_of(c);
    f = s.start();
  }
  if (c.contains("usage") && c["usage"].is_object()) {
    s.in = usage_of(c, "prompt_tokens");
    s.out = usage_of(c, "completion_tokens");
  }
  const auto choices = c.find("choices");
  if (choices == c.end() || !choices->is_array()) return f;
  for (const auto& choice : *choices) {
    if (!choice.is_object() || index_or(choice, "index", 0) != 0) continue;
    const json delta = choice.value("delta", json::object());
    if (delta.contains("content") && delta["content"].is_string()) {
      const std::string piece = delta["content"].get<std::string>();
      if (!piece.empty()) f += s.text_delta(piece);
    }
    if (const auto tc = delta.find("tool_calls"); tc != delta.end() && tc->is_array())
      for (const auto& call : *tc)
        if (call.is_object()) f += s.call_delta(index_or(call, "index", 0), call);
    if (choice.contains("finish_reason") && choice["finish_reason"].is_string())
      s.finish = choice["finish_reason"].get<std::string>();
    if (choice.contains("stop_reason") && choice["stop_reason"].is_string())
      s.matched_stop = choice["stop_reason"].get<std::string>();
  }
  return f;
}

std::string StreamTranslator::finish() {
  State& s = *s_;
  std::string f = s.started ? std::string() : s.start();
  if (s.api == Api::responses && s.index < 0) f += s.open_text();  // an answer has a message
  f += s.close();
  if (s.api == Api::messages) {
    const bool by_sequence = s.finish == "stop" && !s.matched_stop.empty();
    f += s.event(
        "message_delta",
        {{"delta",
          {{"stop_reason", by_sequence ? "stop_sequence" : stop_reason_of(s.finish)},
           {"stop_sequence", by_sequence ? ordered_json(s.matched_stop) : ordered_json(nullptr)}}},
         {"usage", messages_usage(s.in, s.out)}});
    return f + s.event("message_stop", ordered_json::object());
  }
  const bool incomplete = s.finish == "length";
  return f + s.event(incomplete ? "response.incomplete" : "response.completed",
                     {{"response", s.response(incomplete ? "incomplete" : "completed")}});
}

std::string StreamTranslator::fail(std::string_view message, int status) {
  State& s = *s_;
  if (s.api == Api::messages)
    return frame("error", ordered_json::parse(error_body(Api::messages, message, status)));
  std::string f = s.started ? std::string() : s.start();
  return f + s.event("response.failed",
                     {{"response",
                       s.response("failed", ordered_json{{"code", openai_type(status)},
                                                         {"message", std::string(message)}})}});
}

}  // namespace dynrt::protocols

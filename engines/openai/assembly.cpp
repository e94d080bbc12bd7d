#include "engines/openai/assembly.hpp"

#include "engines/completion.hpp"

namespace dynrt::engines {

using nlohmann::json;
using ordered_json = nlohmann::ordered_json;

namespace {

// Appends a string fragment; false when the value is neither a string nor null.
bool append(std::optional<std::string>& to, const json& v) {
  if (v.is_null()) return true;
  if (!v.is_string()) return false;
  if (!to) to.emplace();
  *to += v.get_ref<const std::string&>();
  return true;
}

// Sets a value from a non-empty string (empty and null say nothing, as the SDKs read them).
bool assign(std::optional<std::string>& to, const json& v) {
  if (v.is_null()) return true;
  if (!v.is_string()) return false;
  if (!v.get_ref<const std::string&>().empty()) to = v.get<std::string>();
  return true;
}

// Fields that say nothing about the answer: llama.cpp's timings (different on every run) and
// OpenAI's obfuscation (random padding that hides the payload's size).
bool ignored(const std::string& key) {
  return key == "timings" || key == "obfuscation";
}

ordered_json to_ordered(const json& j) {
  return ordered_json(j);
}

}  // namespace

void StreamAssembler::unfaithful(std::string why) {
  if (unfaithful_.empty()) unfaithful_ = std::move(why);
}

void StreamAssembler::add(const json& chunk) {
  if (!chunk.is_object()) return unfaithful("a chunk is not a JSON object");
  for (const auto& [key, v] : chunk.items()) {
    if (key == "id") {
      if (id_.empty() && v.is_string()) id_ = v.get<std::string>();
    } else if (key == "model") {
      if (model_.empty() && v.is_string()) model_ = v.get<std::string>();
    } else if (key == "created") {
      if (v.is_number_integer()) created_ = v.get<std::int64_t>();
    } else if (key == "system_fingerprint") {
      if (!v.is_null()) system_fingerprint_ = v;
    } else if (key == "service_tier") {
      if (!v.is_null()) service_tier_ = v;
    } else if (key == "usage") {
      if (v.is_object()) {
        usage_json_ = v;
        usage_ = usage_of(v);
      }
    } else if (key == "choices") {
      if (!v.is_array()) return unfaithful("\"choices\" is not an array");
      for (const json& c : v)
        add_choice(c);
    } else if (key != "object" && !ignored(key) && !v.is_null()) {
      unfaithful("the chunk field \"" + key + "\" is not assembled");
    }
  }
}

void StreamAssembler::add_choice(const json& c) {
  if (!c.is_object()) return unfaithful("a choice is not an object");
  const auto index = c.find("index");
  if (index == c.end() || !index->is_number_integer() || index->get<std::int64_t>() < 0)
    return unfaithful("a choice has no index");
  Choice& choice = choices_[index->get<std::int64_t>()];
  for (const auto& [key, v] : c.items()) {
    if (key == "index") continue;
    if (key == "delta" && chat_) {
      if (v.is_object()) {
        add_delta(choice, v);
      } else if (!v.is_null()) {
        unfaithful("a delta is not an object");
      }
    } else if (key == "text" && !chat_) {
      if (!append(choice.content, v)) unfaithful("a choice's text is not a string");
    } else if (key == "finish_reason") {
      if (!v.is_null() && !v.is_string()) unfaithful("a finish_reason is not a string");
      if (v.is_string() && !v.get_ref<const std::string&>().empty())
        choice.finish_reason = v.get<std::string>();
    } else if (key == "stop_reason" || key == "matched_stop") {
      auto& slot = key == "stop_reason" ? choice.stop_reason : choice.matched_stop;
      if (!slot || !v.is_null()) slot = v;  // the last value given, null only when none was
    } else if (!v.is_null()) {
      // logprobs and the like: a body without them would not be what the engine answered.
      unfaithful("the choice field \"" + key + "\" is not assembled");
    }
  }
}

void StreamAssembler::add_delta(Choice& choice, const json& delta) {
  for (const auto& [key, v] : delta.items()) {
    bool ok = true;
    if (key == "role") {
      ok = assign(choice.role, v);
    } else if (key == "content") {
      ok = append(choice.content, v);
    } else if (key == "reasoning_content") {
      ok = append(choice.reasoning_content, v);
    } else if (key == "reasoning") {
      ok = append(choice.reasoning, v);
    } else if (key == "refusal") {
      ok = append(choice.refusal, v);
    } else if (key == "tool_calls") {
      if (v.is_array()) {
        for (const json& call : v)
          add_tool_call(choice, call);
      } else {
        ok = v.is_null();
      }
    } else if (key == "function_call") {
      if (v.is_object()) {
        if (!choice.function_call) choice.function_call.emplace();
        std::optional<std::string> args;
        ok = assign(choice.function_call->name, v.value("name", json())) &&
             append(args, v.value("arguments", json()));
        if (args) choice.function_call->arguments += *args;
      } else {
        ok = v.is_null();
      }
    } else {
      ok = v.is_null() || ignored(key);
    }
    if (!ok) unfaithful("the delta field \"" + key + "\" is not assembled");
  }
}

void StreamAssembler::add_tool_call(Choice& choice, const json& call) {
  if (!call.is_object()) return unfaithful("a tool call delta is not an object");
  const auto index = call.find("index");
  if (index == call.end() || !index->is_number_integer() || index->get<std::int64_t>() < 0)
    return unfaithful("a tool call delta has no index");
  ToolCall& t = choice.tool_calls[index->get<std::int64_t>()];
  for (const auto& [key, v] : call.items()) {
    bool ok = true;
    if (key == "index") {
      continue;
    } else if (key == "id") {
      ok = assign(t.id, v);
    } else if (key == "type") {
      ok = assign(t.type, v);
    } else if (key == "function") {
      if (v.is_object()) {
        for (const auto& [f, fv] : v.items()) {
          if (f == "name") {
            ok = ok && assign(t.name, fv);
          } else if (f == "arguments") {
            std::optional<std::string> args;
            ok = ok && append(args, fv);
            if (args) t.arguments += *args;
          } else {
            ok = ok && fv.is_null();
          }
        }
      } else {
        ok = v.is_null();
      }
    } else {
      ok = v.is_null();
    }
    if (!ok) unfaithful("the tool call field \"" + key + "\" is not assembled");
  }
}

std::string StreamAssembler::why_incomplete() const {
  if (!unfaithful_.empty()) return unfaithful_;
  if (choices_.empty()) return "the stream carried no choice";
  for (const auto& [index, c] : choices_) {
    const std::string which = "choice " + std::to_string(index);
    if (c.finish_reason.empty()) return which + " ended without a finish_reason";
    for (const auto& [k, t] : c.tool_calls)
      if (!t.id || !t.type || !t.name)
        return which + "'s tool call " + std::to_string(k) + " lacks its id, type or name";
    if (c.function_call && !c.function_call->name) return which + "'s function_call has no name";
  }
  return {};
}

std::string StreamAssembler::finish_reason() const {
  return choices_.empty() ? std::string() : choices_.begin()->second.finish_reason;
}

std::string StreamAssembler::body() const {
  return assembled().dump();
}

nlohmann::json StreamAssembler::document() const {
  return nlohmann::json(assembled());
}

nlohmann::ordered_json StreamAssembler::assembled() const {
  ordered_json j;
  j["id"] = id_;
  j["object"] = chat_ ? "chat.completion" : "text_completion";
  j["created"] = created_;
  j["model"] = model_;
  if (!system_fingerprint_.is_null()) j["system_fingerprint"] = to_ordered(system_fingerprint_);
  if (!service_tier_.is_null()) j["service_tier"] = to_ordered(service_tier_);
  ordered_json choices = ordered_json::array();
  for (const auto& [index, c] : choices_) {
    ordered_json choice;
    choice["index"] = index;
    if (chat_) {
      ordered_json m;
      m["role"] = c.role.value_or("assistant");
      const bool calls = !c.tool_calls.empty() || c.function_call.has_value();
      // "" before a tool call is no content (vLLM's role chunk sends it).
      m["content"] = c.content && !(calls && c.content->empty()) ? ordered_json(*c.content)
                                                                 : ordered_json(nullptr);
      if (c.refusal) m["refusal"] = *c.refusal;
      if (c.reasoning_content) m["reasoning_content"] = *c.reasoning_content;
      if (c.reasoning) m["reasoning"] = *c.reasoning;
      if (c.function_call)
        m["function_call"] = {{"name", c.function_call->name.value_or("")},
                              {"arguments", c.function_call->arguments}};
      if (!c.tool_calls.empty()) {
        ordered_json calls_json = ordered_json::array();
        for (const auto& [k, t] : c.tool_calls)
          calls_json.push_back(
              {{"id", t.id.value_or("")},
               {"type", t.type.value_or("function")},
               {"function", {{"name", t.name.value_or("")}, {"arguments", t.arguments}}}});
        m["tool_calls"] = std::move(calls_json);
      }
      choice["message"] = std::move(m);
    } else {
      choice["text"] = c.content.value_or("");
    }
    choice["logprobs"] = nullptr;
    choice["finish_reason"] =
        c.finish_reason.empty() ? ordered_json(nullptr) : ordered_json(c.finish_reason);
    if (c.stop_reason) choice["stop_reason"] = to_ordered(*c.stop_reason);
    if (c.matched_stop) choice["matched_stop"] = to_ordered(*c.matched_stop);
    choices.push_back(std::move(choice));
  }
  j["choices"] = std::move(choices);
  if (usage_json_.is_object()) {
    j["usage"] = to_ordered(usage_json_);
  } else {
    j["usage"] = ordered_json{{"prompt_tokens", 0}, {"completion_tokens", 0}, {"total_tokens", 0}};
  }
  return j;
}

}  // namespace dynrt::engines

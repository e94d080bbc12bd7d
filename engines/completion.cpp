#include "engines/completion.hpp"

#include "runtime/json_text.hpp"

#include <charconv>

namespace dynrt::engines {

using nlohmann::json;

bool is_error_object(const json& j) {
  if (!j.is_object()) return false;
  if (const auto e = j.find("error"); e != j.end() && !e->is_null()) return true;
  const auto o = j.find("object");
  return o != j.end() && o->is_string() && o->get<std::string>() == "error";
}

namespace {

// An error status given as a number (vLLM) or a numeric string; other codes
// ("rate_limit_exceeded") say nothing about the status.
std::optional<int> error_status(const json& code) {
  int status = 0;
  if (code.is_number_integer()) {
    const auto v = code.get<std::int64_t>();
    if (v < 400 || v > 599) return std::nullopt;
    status = static_cast<int>(v);
  } else if (code.is_string()) {
    const auto& s = code.get_ref<const std::string&>();
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), status);
    if (ec != std::errc() || end != s.data() + s.size() || status < 400 || status > 599)
      return std::nullopt;
  } else {
    return std::nullopt;
  }
  return status;
}

}  // namespace

ReportedError reported_error(const json& j) {
  ReportedError r;
  if (!j.is_object()) return r;
  // {"error": {"message", "type", "code"}}, {"error": "text"}, or the fields at the top level
  // ({"object": "error", "message", "code"}).
  const json* fields = &j;
  if (const auto e = j.find("error"); e != j.end()) {
    if (e->is_string()) r.message = e->get<std::string>();
    if (e->is_object()) fields = &*e;
  }
  if (const auto m = fields->find("message"); m != fields->end() && m->is_string())
    r.message = m->get<std::string>();
  if (const auto c = fields->find("code"); c != fields->end())
    if (const auto s = error_status(*c)) r.status = *s;
  return r;
}

std::optional<std::string> abnormal_parsed_completion(std::string_view endpoint,
                                                      const json& response) {
  const bool chat = endpoint == "/v1/chat/completions";
  if (!chat && endpoint != "/v1/completions")
    return "responses to " + std::string(endpoint) + " are not completions dynrt can check";
  if (!response.is_object()) return std::string("the response is not a JSON object");
  if (is_error_object(response))
    return "the response is an error: " + reported_error(response).message;
  const auto choices = response.find("choices");
  if (choices == response.end() || !choices->is_array() || choices->empty())
    return std::string("the response has no choices");
  for (std::size_t i = 0; i < choices->size(); ++i) {
    const json& c = (*choices)[i];
    const std::string which = "choice " + std::to_string(i);
    if (!c.is_object()) return which + " is not an object";
    if (chat && !(c.contains("message") && c["message"].is_object()))
      return which + " has no message";
    if (!chat && !(c.contains("text") && c["text"].is_string())) return which + " has no text";
    const auto f = c.find("finish_reason");
    if (f == c.end() || !f->is_string() || f->get_ref<const std::string&>().empty())
      return which + " has no finish_reason: the engine did not finish it";
  }
  return std::nullopt;
}

std::optional<std::string> abnormal_completion(std::string_view endpoint, std::string_view body) {
  const json j = parse_json(body);
  if (j.is_discarded()) return std::string("the response is not valid JSON");
  return abnormal_parsed_completion(endpoint, j);
}

Usage usage_of(const json& j) {
  Usage u;
  if (!j.is_object()) return u;
  if (const auto p = j.find("prompt_tokens"); p != j.end() && p->is_number_integer())
    u.prompt_tokens = p->get<std::int64_t>();
  if (const auto c = j.find("completion_tokens"); c != j.end() && c->is_number_integer())
    u.completion_tokens = c->get<std::int64_t>();
  return u;
}

std::string first_finish_reason(const json& j) {
  if (!j.is_object()) return {};
  const auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array() || choices->empty()) return {};
  const json& c = (*choices)[0];
  if (c.is_object() && c.contains("finish_reason") && c["finish_reason"].is_string())
    return c["finish_reason"].get<std::string>();
  return {};
}

}  // namespace dynrt::engines

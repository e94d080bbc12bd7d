#include "dsl/recognize.hpp"

#include "dsl/render.hpp"
#include "runtime/canonical_json.hpp"
#include "runtime/hash.hpp"

#include <re2/re2.h>

namespace dynrt::dsl {

using nlohmann::json;

std::string_view to_string(Recognized::Outcome o) {
  switch (o) {
    case Recognized::Outcome::recognized:
      return "recognized";
    case Recognized::Outcome::no_match:
      return "no_match";
    case Recognized::Outcome::ambiguous:
      return "ambiguous";
    case Recognized::Outcome::no_run:
      return "no_run";
  }
  return "no_match";
}

namespace {

bool same_rule(const MatchRule& a, const MatchRule& b) {
  return a.pointer == b.pointer && a.literal == b.literal &&
         (a.literal || a.regex_source == b.regex_source);
}

bool rule_holds(const MatchRule& r, const json& body) {
  const json* v = resolve_pointer(body, r.pointer);
  if (!v) return false;
  const std::string text = v->is_string() ? v->get<std::string>()
                                          : v->dump(-1, ' ', false, json::error_handler_t::replace);
  if (r.literal) return text == *r.literal;
  return r.regex && re2::RE2::PartialMatch(text, *r.regex);
}

}  // namespace

bool rules_hold(const std::vector<MatchRule>& rules, const json& body) {
  if (rules.empty()) return false;
  for (const auto& r : rules)
    if (!rule_holds(r, body)) return false;
  return true;
}

bool rules_exclude(const std::vector<MatchRule>& a, const std::vector<MatchRule>& b) {
  for (const auto& x : a)
    for (const auto& y : b) {
      if (x.pointer != y.pointer) continue;
      if (x.literal && y.literal && *x.literal != *y.literal) return true;
      if (x.literal && !y.literal && y.regex && !re2::RE2::PartialMatch(*x.literal, *y.regex))
        return true;
      if (y.literal && !x.literal && x.regex && !re2::RE2::PartialMatch(*y.literal, *x.regex))
        return true;
    }
  return false;
}

bool rules_cover(const std::vector<MatchRule>& wider, const std::vector<MatchRule>& narrower) {
  if (wider.empty()) return false;
  for (const auto& w : wider) {
    bool found = false;
    for (const auto& n : narrower)
      found = found || same_rule(w, n);
    if (!found) return false;
  }
  return true;
}

std::optional<std::string> conversation_run(const json& chat) {
  if (!chat.is_object()) return std::nullopt;
  const auto messages = chat.find("messages");
  if (messages == chat.end() || !messages->is_array()) return std::nullopt;
  json prefix = json::array();
  bool user = false;
  for (const auto& m : *messages) {
    // Not value(): it throws on a role of another type, and an embedder's body is unchecked.
    const auto r = m.is_object() ? m.find("role") : m.end();
    const std::string role = r != m.end() && r->is_string() ? r->get<std::string>() : "";
    if (role == "assistant") break;
    user = user || role == "user";
    prefix.push_back(m);
  }
  if (!user) return std::nullopt;
  json key{{"model", chat.value("model", json())}, {"messages", std::move(prefix)}};
  return "c-" + xxh3_128("dynrt.conversation.v1\n" + canonical_json(key)).hex();
}

Recognizer::Recognizer(const std::vector<std::shared_ptr<const TemplateGraph>>& graphs) {
  for (const auto& g : graphs) {
    if (!g || g->recognize.run == Recognize::Run::none) continue;
    for (const auto& s : g->stages)
      if (!s.match.empty()) rules_.push_back({g, &s, s.route()});
  }
}

std::vector<std::pair<std::string, std::string>> Recognizer::stages() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& e : rules_)
    out.emplace_back(e.graph->workflow, e.stage->name);
  return out;
}

Recognized Recognizer::recognize(std::string_view route, const json& wire, const json& chat,
                                 const HeaderLookup& header) const {
  Recognized out;
  std::vector<const Entry*> fit;
  for (const auto& e : rules_)
    if (e.route == route && rules_hold(e.stage->match, wire)) fit.push_back(&e);
  if (fit.empty()) {
    out.detail = "no stage's match rules hold";
    return out;
  }
  // Several fit: the most specific wins, the one whose rules include every other's.
  const Entry* found = nullptr;
  for (const Entry* c : fit) {
    bool widest_others = true;
    for (const Entry* o : fit)
      widest_others = widest_others && (o == c || (rules_cover(o->stage->match, c->stage->match) &&
                                                   !rules_cover(c->stage->match, o->stage->match)));
    if (widest_others) found = c;
  }
  if (!found) {
    out.outcome = Recognized::Outcome::ambiguous;
    for (std::size_t i = 0; i < fit.size(); ++i)
      out.detail += (i == 0                ? ""
                     : i + 1 == fit.size() ? " and "
                                           : ", ") +
                    fit[i]->graph->workflow + "." + fit[i]->stage->name;
    out.detail = "the rules of " + out.detail + " all hold, and none includes the others'";
    return out;
  }
  out.workflow = found->graph->workflow;
  out.stage = found->stage->name;
  const auto& how = found->graph->recognize;
  std::optional<std::string> run;
  if (how.run == Recognize::Run::header) {
    run = header ? header(how.header) : std::nullopt;
    if (run && run->empty()) run.reset();
    if (!run) out.detail = "the call has no " + how.header + " header to name its run";
  } else {
    run = conversation_run(chat);
    if (!run) out.detail = "the call has no user turn to name its conversation";
  }
  if (!run) {
    out.outcome = Recognized::Outcome::no_run;
    return out;
  }
  out.run = std::move(*run);
  out.outcome = Recognized::Outcome::recognized;
  return out;
}

}  // namespace dynrt::dsl

#include "dsl/compiler.hpp"

#include "dsl/node_values.hpp"
#include "dsl/render.hpp"
#include "dsl/schema.hpp"

#include <re2/re2.h>

#include <algorithm>
#include <cctype>
#include <memory>

namespace dynrt::dsl::detail {

namespace {

// RFC 9110 token characters: what a header name may be made of.
bool header_token(std::string_view name) {
  static constexpr std::string_view kExtra = "!#$%&'*+-.^_`|~";
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || kExtra.find(c) != std::string_view::npos;
  });
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

// `recognize:` and every stage's `match:` rules.
void Compiler::decode_recognition() {
  const MapEntry* rec = root_.find("recognize");
  if (rec && rec->value.is_mapping()) {
    const Node* run = rec->value.get("run");
    if (auto r = string_of(run); r && *r == "conversation") {
      g_.recognize.run = Recognize::Run::conversation;
    } else if (run && run->is_mapping()) {
      const Node* h = run->get("header");
      if (auto name = string_of(h)) {
        if (!header_token(*name)) {
          add(Rule::invalid_value, h->span, qt(*name) + " is not an HTTP header name",
              "/recognize/run/header");
        } else if (lower(*name).rfind("x-dynrt-", 0) == 0) {
          add(Rule::invalid_value, h->span,
              "a run is recognized by a header the client sends on its own; the X-DynRT-* "
              "headers are tags, and a tagged call is never recognized",
              "/recognize/run/header");
        } else {
          g_.recognize.run = Recognize::Run::header;
          g_.recognize.header = lower(*name);
        }
      }
    }
  }
  for (StageId id = 0; id < g_.stages.size(); ++id) {
    Stage& s = g_.stages[id];
    const Node* def = src_[id].def();
    const Node* match = def->is_mapping() ? def->get("match") : nullptr;
    if (!match || !match->is_sequence() || s.kind == StageKind::user) continue;
    const std::string path = stage_path(id) + "/match";
    for (std::size_t i = 0; i < match->items.size(); ++i) {
      const Node& r = match->items[i];
      if (!r.is_mapping()) continue;  // the schema reported it
      const std::string at = path + "/" + std::to_string(i);
      MatchRule rule;
      const Node* pointer = r.get("pointer");
      const Node* literal = r.get("literal");
      const Node* regex = r.get("regex");
      if (auto p = string_of(pointer)) {
        if (!valid_pointer(*p))
          add(Rule::invalid_value, pointer->span,
              qt(*p) +
                  " is not a JSON pointer; write \"/messages/0/content\" (RFC 6901, with "
                  "-1 for a list's last element)",
              at + "/pointer");
        rule.pointer = *p;
      }
      if (literal && regex) {
        add(Rule::invalid_value, regex->span, "a rule has either `literal` or `regex`, not both",
            at + "/regex");
        continue;
      }
      if (!literal && !regex) {
        add(Rule::missing_key, r.span,
            "a match rule needs `literal` (the exact value) or `regex` (a pattern in it)", at);
        continue;
      }
      if (auto l = string_of(literal)) rule.literal = *l;
      if (auto x = string_of(regex)) {
        rule.regex_source = *x;
        auto re = std::make_shared<re2::RE2>(*x, re2::RE2::Quiet);
        if (!re->ok()) {
          add(Rule::invalid_value, regex->span, "invalid regular expression: " + re->error(),
              at + "/regex");
          continue;
        }
        rule.regex = std::move(re);
      }
      s.match.push_back(std::move(rule));
    }
    if (g_.recognize.run == Recognize::Run::none && !match->items.empty() && !rec)
      add(Rule::missing_key, src_[id].def()->find("match")->key.span,
          "stage " + qt(s.name) +
              " has `match` rules, but the template has no `recognize:` saying which run an "
              "untagged call belongs to (run: conversation, or run: {header: NAME})",
          path);
  }
}

}  // namespace dynrt::dsl::detail

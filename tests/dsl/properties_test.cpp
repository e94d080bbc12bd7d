// Property tests (RapidCheck): the linter survives any input, and stage fingerprints depend on
// what a request means, never on how its YAML is written.
#include "dsl/lint.hpp"
#include "dsl/report.hpp"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>
#include <nlohmann/json.hpp>

#include <functional>

namespace dynrt::dsl {
namespace {

using nlohmann::json;

RC_GTEST_PROP(Properties, AnyBytesEndInFindingsWithSanePositions, (const std::string& bytes)) {
  const LintReport r = lint_text("p.yaml", bytes);
  RC_ASSERT(r.files.size() == 1u);
  const int lines = r.files[0].source ? r.files[0].source->line_count() : 1;
  for (const Diagnostic& d : r.diagnostics) {
    RC_ASSERT(d.begin.line >= 1);
    RC_ASSERT(d.begin.line <= lines);
    RC_ASSERT(d.begin.column >= 1);
    RC_ASSERT(!d.message.empty());
  }
  (void)format_text(r);
  (void)format_json(r);
}

RC_GTEST_PROP(Properties, AnyYamlishTextEndsInFindings, (const std::vector<std::size_t>& picks)) {
  const std::vector<std::string> pieces = {"version: 1\n",
                                           "workflow: w\n",
                                           "stages:\n",
                                           "  a:\n",
                                           "    kind: model\n",
                                           "    model: m\n",
                                           "    after: [a, b]\n",
                                           "  b: {kind: tool, tool: t}\n",
                                           "decisions:\n",
                                           "  d: {promotion: exclusive}\n",
                                           "&x ",
                                           "*x",
                                           "[",
                                           "]",
                                           "{",
                                           "}",
                                           "- ",
                                           ": ",
                                           "\"{{q}}\"",
                                           "'",
                                           "\"",
                                           "\n",
                                           "  ",
                                           "#",
                                           "!!str ",
                                           "? ",
                                           "|\n",
                                           "---\n",
                                           "\t",
                                           "loops: {l: {stages: [a], max: 2}}\n"};

  std::string text;
  for (const std::size_t p : picks)
    text += pieces[p % pieces.size()];
  const LintReport r = lint_text("p.yaml", text);
  RC_ASSERT(r.files.size() == 1u);
  if (!r.files[0].usable) RC_ASSERT(!r.diagnostics.empty());
}

// A random request body: nested objects and arrays of strings, integers and booleans.
json random_tree(int depth) {
  const int kind = *rc::gen::inRange(0, depth > 0 ? 5 : 3);
  switch (kind) {
    case 0:
      return *rc::gen::element<std::string>("hello", "{{query}}", "x y", "a:b", "#h", "say \"hi\"",
                                            "é", "");
    case 1:
      return *rc::gen::inRange(-1000, 1000);
    case 2:
      return *rc::gen::arbitrary<bool>();
    case 3: {
      json o = json::object();
      const int n = *rc::gen::inRange(1, 4);
      for (int i = 0; i < n; ++i)
        o["k" + std::to_string(*rc::gen::inRange(0, 6))] = random_tree(depth - 1);
      return o;
    }
    default: {
      json a = json::array();
      const int n = *rc::gen::inRange(0, 4);
      for (int i = 0; i < n; ++i)
        a.push_back(random_tree(depth - 1));
      return a;
    }
  }
}

std::string flow(const json& j, bool reverse) {
  if (j.is_object()) {
    std::vector<std::string> parts;
    for (const auto& [k, v] : j.items())
      parts.push_back(k + ": " + flow(v, reverse));
    if (reverse) std::reverse(parts.begin(), parts.end());
    std::string out = "{";
    for (std::size_t i = 0; i < parts.size(); ++i)
      out += (i ? ", " : "") + parts[i];
    return out + "}";
  }
  if (j.is_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < j.size(); ++i)
      out += (i ? ", " : "") + flow(j[i], reverse);
    return out + "]";
  }
  return j.dump();  // JSON strings are YAML double-quoted scalars
}

std::string block(const json& j, int indent) {
  const std::string pad(static_cast<std::size_t>(indent), ' ');
  if (!j.is_object() || j.empty()) return " " + flow(j, false) + "\n";
  std::string out = "\n";
  for (const auto& [k, v] : j.items())
    out += pad + k + ":" + block(v, indent + 2);
  return out;
}

std::string template_with(const std::string& request_yaml) {
  return "version: 1\nworkflow: p\ninputs: {query: {}}\nstages:\n  s:\n    kind: model\n"
         "    model: m\n    bind: {query: /q}\n    request:" +
         request_yaml;
}

std::optional<Hash128> fingerprint(const std::string& text) {
  const LintReport r = lint_text("p.yaml", text);
  if (!r.files[0].graph || r.files[0].graph->stages.empty()) return std::nullopt;
  return r.files[0].graph->stages[0].fingerprint;
}

void mutate_one_leaf(json& j) {
  if (j.is_object() && !j.empty()) {
    auto it = j.begin();
    std::advance(it, *rc::gen::inRange<long>(0, static_cast<long>(j.size())));
    return mutate_one_leaf(it.value());
  }
  if (j.is_array() && !j.empty()) {
    return mutate_one_leaf(j[*rc::gen::inRange<std::size_t>(0, j.size())]);
  }
  if (j.is_string()) {
    j = j.get<std::string>() + "!";
  } else if (j.is_number()) {
    j = j.get<int>() + 1;
  } else if (j.is_boolean()) {
    j = !j.get<bool>();
  } else if (j.is_object()) {
    j["added"] = 1;
  } else {
    j.push_back(1);
  }
}

RC_GTEST_PROP(Properties, FingerprintIgnoresFormatting, ()) {
  json body = json::object();
  body["messages"] = random_tree(3);
  body["extra"] = random_tree(2);
  const auto a = fingerprint(template_with(" " + flow(body, false) + "\n"));
  const auto b = fingerprint(template_with(" " + flow(body, true) + "\n"));
  const auto c = fingerprint(template_with(block(body, 6)));
  RC_ASSERT(a.has_value());
  RC_ASSERT(a == b);
  RC_ASSERT(a == c);
}

RC_GTEST_PROP(Properties, FingerprintFollowsEveryChange, ()) {
  json body = json::object();
  body["messages"] = random_tree(3);
  json changed = body;
  mutate_one_leaf(changed);
  RC_PRE(changed != body);
  const auto a = fingerprint(template_with(" " + flow(body, false) + "\n"));
  const auto b = fingerprint(template_with(" " + flow(changed, false) + "\n"));
  RC_ASSERT(a.has_value() && b.has_value());
  RC_ASSERT(*a != *b);
}

}  // namespace
}  // namespace dynrt::dsl

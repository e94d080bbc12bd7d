// Helpers shared by the dsl tests.
#pragma once

#include "dsl/lint.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace dynrt::dsl::testing {

inline LintReport lint(std::string text, const std::string& name = "t.yaml") {
  return lint_text(name, std::move(text));
}

// Rule names of the findings, in report order.
inline std::vector<std::string> rules(const LintReport& r) {
  std::vector<std::string> out;
  for (const auto& d : r.diagnostics)
    out.emplace_back(d.info().name);
  return out;
}

inline bool has_rule(const LintReport& r, std::string_view rule) {
  for (const auto& d : r.diagnostics) {
    if (d.info().name == rule) return true;
  }
  return false;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Compiles a template that must lint without errors.
inline TemplateGraph compile_clean(std::string text) {
  LintReport r = lint(std::move(text));
  for (const auto& d : r.diagnostics) {
    ADD_FAILURE() << d.begin.line << ":" << d.begin.column << ": " << d.message << " ["
                  << d.info().name << "]";
  }
  if (r.files.empty() || !r.files[0].graph) {
    ADD_FAILURE() << "no graph";
    return {};
  }
  return std::move(*r.files[0].graph);
}

// A minimal routing template; tests edit copies of it.
inline const char* kRouting = R"(version: 1
workflow: routing
inputs:
  query: {description: the request}
stages:
  router:
    kind: model
    model: qwen3-32b
    params: {temperature: 0}
    bind:
      query: /messages/1/content
    decides: handler
  handle:
    kind: model
    after: router
    speculable: true
    model: qwen3-32b
    params: {temperature: 0, max_tokens: 64}
    request:
      messages:
        - role: system
          content: "You are the {{handler}} handler."
        - role: user
          content: "{{query}}"
    outputs:
      call: /choices/0/message/content
  execute:
    kind: tool
    after: handle
    speculable: true
    tool: call_api
    arguments: {api: "{{handler}}", call: "{{call}}"}
    reads: ["api:{{handler}}"]
decisions:
  handler:
    promotion: exclusive
    candidates: {source: static, values: [weather, calendar, email]}
    selection:
      regex: 'HANDLER: (\w+)'
)";

}  // namespace dynrt::dsl::testing

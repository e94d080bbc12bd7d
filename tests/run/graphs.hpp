// The shipped templates (templates/), linted once, for tests that need a real template graph.
#pragma once

#include "dsl/lint.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace dynrt::testing {

inline const dsl::LintReport& shipped_templates() {
  static const dsl::LintReport report = dsl::lint_paths({"templates"});
  return report;
}

inline const dsl::TemplateGraph& graph(const std::string& workflow) {
  for (const auto* g : shipped_templates().graphs())
    if (g->workflow == workflow) return *g;
  ADD_FAILURE() << "no shipped template " << workflow;
  std::abort();
}

}  // namespace dynrt::testing

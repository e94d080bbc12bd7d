// Fuzz target: any bytes as a template file. Linting must end in findings, never a crash,
// a hang or unbounded memory; and whatever compiles must render without crashing.
#include "dsl/lint.hpp"
#include "dsl/render.hpp"
#include "dsl/report.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  const dynrt::dsl::LintReport report = dynrt::dsl::lint_text("fuzz.yaml", std::move(text));
  (void)dynrt::dsl::format_text(report);
  (void)dynrt::dsl::format_json(report);
  for (const auto& file : report.files) {
    if (!file.graph) continue;
    dynrt::dsl::Bindings vars;
    for (const auto& input : file.graph->inputs)
      vars[input.name] = "x";
    for (const auto& decision : file.graph->decisions)
      vars[decision.name] = "y";
    for (const auto& stage : file.graph->stages)
      (void)dynrt::dsl::render_stage(stage, vars);
  }
  return 0;
}

// Template compilation: a parsed YAML tree in, a TemplateGraph and findings out.
//
// compile_template() runs every check of the language on one template (schema, names and
// references, the stage graph, decision points, speculation safety) and reports every
// finding, not just the first. It builds the graph even around errors, skipping what is
// broken, so that a caller that suppresses a finding (an inline ignore) can still use the
// result; the linter decides whether the remaining findings allow that. Pure.
#pragma once

#include "dsl/diagnostic.hpp"
#include "dsl/template_graph.hpp"
#include "dsl/yaml.hpp"

#include <optional>

namespace dynrt::dsl {

// nullopt only when the document is not a mapping at all.
std::optional<TemplateGraph> compile_template(const SourceFile& file, const yaml::Node& root,
                                              DiagnosticSink& sink);

}  // namespace dynrt::dsl

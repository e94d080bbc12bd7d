#include "dsl/compile.hpp"

#include "dsl/compiler.hpp"
#include "dsl/schema.hpp"
#include "dsl/suggest.hpp"

namespace dynrt::dsl {

namespace detail {

std::string qt(std::string_view s) {
  return "\"" + std::string(s) + "\"";
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " and " : ", ";
    out += qt(names[i]);
  }
  return out;
}

std::optional<TemplateGraph> Compiler::run() {
  // A YAML file with none of a template's own keys is some other file in the templates folder
  // (serve's --config, a compose file): one finding that says so, not one per key.
  if (root_.is_mapping() && !root_.find("version") && !root_.find("workflow") &&
      !root_.find("stages")) {
    static const char* const kServeKeys[] = {"listen",     "engines",      "sim",     "tools",
                                             "switches",   "auth",         "library", "explain",
                                             "io_threads", "shared_stages"};
    std::vector<std::string> serve;
    for (const char* k : kServeKeys)
      if (root_.find(k)) serve.emplace_back(k);
    sink_.add(Rule::missing_key, Span{root_.span.begin, root_.span.begin},
              serve.empty()
                  ? "not a workflow template: the file has none of the keys \"version\", "
                    "\"workflow\" and \"stages\"; keep other YAML files out of the templates' "
                    "paths"
                  : "not a workflow template but, by its keys " + join_names(serve) +
                        ", a `dynrt serve` configuration: pass it with --config, and keep it out "
                        "of the templates' paths");
    return std::nullopt;
  }
  schema::validate(root_, schema::template_schema(), sink_);
  if (!root_.is_mapping()) return std::nullopt;
  g_.source_path = file_.path();
  header();
  declare_stages();
  declare_variables();
  for (StageId id = 0; id < g_.stages.size(); ++id)
    decode_stage(id);
  decode_loops();
  decode_recognition();
  classify_edges();
  decode_decisions();
  scan_templates();
  build_graph();
  check_dependencies();
  compute_downstream();
  check_speculation();
  check_record_keys();
  check_sharing();
  check_unused();
  fingerprints();
  return std::move(g_);
}

std::string_view Compiler::kind_name(VarKind k) {
  switch (k) {
    case VarKind::input:
      return "an input";
    case VarKind::decision:
      return "a decision point";
    case VarKind::output:
      return "an output";
    case VarKind::loop:
      return "a loop index";
  }
  return "a variable";
}

Diagnostic& Compiler::add(Rule rule, Span span, std::string msg, std::string path) {
  return sink_.add(rule, span, std::move(msg), std::move(path));
}

std::vector<std::string> Compiler::var_names() const {
  std::vector<std::string> out;
  for (const auto& [name, v] : vars_)
    out.push_back(name);
  return out;
}

std::vector<std::string> Compiler::stage_names() const {
  std::vector<std::string> out;
  for (const Stage& s : g_.stages)
    out.push_back(s.name);
  return out;
}

// An unknown-ref finding; `message` names the reference, a suggestion is added if close.
void Compiler::unknown(Span span, std::string message, const std::string& name,
                       const std::vector<std::string>& known, const std::string& path) {
  auto& d = add(Rule::unknown_ref, span, std::move(message), path);
  if (auto s = closest(name, known)) {
    d.message += "; did you mean " + qt(*s) + "?";
    d.suggestion = *s;
  }
}

// The span of `needle` inside a scalar, found in the source text (falls back to the scalar).
Span Compiler::locate(const Node& scalar, std::size_t value_offset, std::size_t length) const {
  const std::string& v = scalar.value;
  const std::string needle = v.substr(value_offset, length);
  if (needle.empty()) return scalar.span;
  int nth = 0;
  for (std::size_t p = v.find(needle); p != std::string::npos && p < value_offset;
       p = v.find(needle, p + needle.size())) {
    ++nth;
  }
  const std::string& text = file_.text();
  const std::size_t limit = scalar.span.end > scalar.span.begin ? scalar.span.end : text.size();
  std::size_t p = text.find(needle, scalar.span.begin);
  for (int k = 0; p != std::string::npos && k < nth; ++k) {
    p = text.find(needle, p + needle.size());
  }
  if (p == std::string::npos || p + needle.size() > limit) return scalar.span;
  return Span{p, p + needle.size()};
}

std::string Compiler::stage_path(StageId id) const {
  return "/stages/" + schema::pointer_token(g_.stages[id].name);
}

}  // namespace detail

std::optional<TemplateGraph> compile_template(const SourceFile& file, const yaml::Node& root,
                                              DiagnosticSink& sink) {
  return detail::Compiler(file, root, sink).run();
}

}  // namespace dynrt::dsl

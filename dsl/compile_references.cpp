#include "dsl/compiler.hpp"

#include "dsl/schema.hpp"

#include <algorithm>

namespace dynrt::dsl::detail {

void Compiler::use(StageId stage, const std::string& name, Span span, const std::string& path,
                   bool in_section) {
  const auto it = vars_.find(name);
  if (it == vars_.end()) {
    if (in_section) return;  // may be a field of the section's current item
    unknown(span,
            (stage == kNoId ? std::string("the drafter request")
                            : "stage " + qt(g_.stages[stage].name)) +
                " uses variable " + qt(name) + ", which is not defined",
            name, var_names(), path);
    return;
  }
  it->second.used = true;
  if (stage == kNoId) return;
  uses_.push_back(Use{name, span, stage});
  auto& u = g_.stages[stage].uses;
  if (std::find(u.begin(), u.end(), name) == u.end()) u.push_back(name);
}

void Compiler::scan_string(StageId stage, const Node& scalar, const std::string& path) {
  const MustacheScan scan = scan_mustache(scalar.value);
  if (scan.error) {
    add(Rule::invalid_value, locate(scalar, scan.error->offset, scan.error->length),
        scan.error->message, path);
    return;
  }
  for (const MustacheTag& tag : scan.tags) {
    if (tag.type == MustacheTag::Type::comment || tag.type == MustacheTag::Type::end ||
        tag.name == ".") {
      continue;
    }
    const bool opens =
        tag.type == MustacheTag::Type::section || tag.type == MustacheTag::Type::inverted;
    use(stage, std::string(root_name(tag.name)), locate(scalar, tag.offset, tag.length), path,
        tag.section_depth > 0 && !opens);
  }
}

void Compiler::scan_tree(StageId stage, const Node& n, const std::string& path) {
  switch (n.kind) {
    case Kind::scalar:
      if (yaml::resolve(n) == ScalarType::string) scan_string(stage, n, path);
      return;
    case Kind::sequence:
      for (std::size_t i = 0; i < n.items.size(); ++i) {
        scan_tree(stage, n.items[i], path + "/" + std::to_string(i));
      }
      return;
    case Kind::mapping:
      for (const MapEntry& e : n.entries) {
        scan_tree(stage, e.value, path + "/" + schema::pointer_token(e.key.value));
      }
      return;
    case Kind::null:
      return;
  }
}

void Compiler::scan_templates() {
  for (StageId id = 0; id < g_.stages.size(); ++id) {
    const Node* def = src_[id].def();
    if (!def->is_mapping()) continue;
    const std::string path = stage_path(id);
    for (const char* key : {"request", "arguments", "reads", "writes"}) {
      if (const Node* n = def->get(key)) scan_tree(id, *n, path + "/" + key);
    }
  }
  const Node* decisions = root_.get("decisions");
  if (!decisions || !decisions->is_mapping()) return;
  for (const MapEntry& e : decisions->entries) {
    const Node* c = e.value.is_mapping() ? e.value.get("candidates") : nullptr;
    const Node* r = c && c->is_mapping() ? c->get("request") : nullptr;
    if (r)
      scan_tree(kNoId, *r,
                "/decisions/" + schema::pointer_token(e.key.value) + "/candidates/request");
  }
}

void Compiler::check_unused() {
  for (const auto& [name, v] : vars_) {
    if (v.used) continue;
    if (v.kind == VarKind::input) {
      if (!v.bound) {
        add(Rule::unbound_input, v.span,
            "input " + qt(name) + " is never bound; add it to a stage's `bind`",
            "/inputs/" + schema::pointer_token(name));
      } else {
        add(Rule::unused_variable, v.span,
            "input " + qt(name) + " is bound but no template uses it",
            "/inputs/" + schema::pointer_token(name));
      }
    } else if (v.kind == VarKind::output) {
      add(Rule::unused_variable, v.span,
          "output " + qt(name) + " of stage " + qt(g_.stages[v.producer].name) + " is never used",
          stage_path(v.producer) + "/outputs/" + schema::pointer_token(name));
    }
  }
}

}  // namespace dynrt::dsl::detail

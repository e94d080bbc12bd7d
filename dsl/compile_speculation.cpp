#include "dsl/compiler.hpp"

#include "dsl/node_values.hpp"
#include "dsl/schema.hpp"

#include <algorithm>

namespace dynrt::dsl::detail {

using nlohmann::json;

void Compiler::check_speculation() {
  for (Stage& s : g_.stages) {
    const Node* def = src_[s.id].def();
    if (!def->is_mapping() || !s.speculable) continue;
    const std::string path = stage_path(s.id);
    const MapEntry* spec = def->find("speculable");
    if (!s.writes.empty()) {
      const Node* w = def->get("writes");
      add(Rule::speculable_writes, w->span,
          "stage " + qt(s.name) +
              " is speculable but writes external records; a fill must have no external "
              "effect (drop `speculable`, or move the write to a stage of its own)",
          path + "/writes");
    }
    if (s.kind != StageKind::model) continue;
    const bool seeded = s.params.contains("seed") && s.params["seed"].is_number();
    const json* t = s.params.contains("temperature") ? &s.params["temperature"] : nullptr;
    if (seeded || (t && t->is_number() && t->get<double>() == 0.0)) continue;
    const Node* params = def->get("params");
    const MapEntry* temp = entry_of(params, "temperature");
    add(Rule::nondeterministic_speculable, temp ? temp->value.span : spec->key.span,
        t ? "speculable stage " + qt(s.name) + " samples at temperature " + temp->value.value +
                " without a fixed seed, so a fill may differ from the canonical answer; set "
                "`temperature: 0` or a `seed`"
          : "speculable stage " + qt(s.name) +
                " sets no temperature (engines default to 1.0) and no seed, so a fill may "
                "differ from the canonical answer; set `temperature: 0` or a `seed`",
        path + (temp ? "/params/temperature" : "/speculable"));
  }
  const Node* decisions = root_.get("decisions");
  for (const Decision& dec : g_.decisions) {
    if (dec.decided_by == kNoId) continue;
    const bool any = std::any_of(dec.downstream.begin(), dec.downstream.end(),
                                 [&](StageId id) { return g_.stages[id].speculable; });
    if (any) continue;
    add(Rule::no_speculable_downstream, decisions->entries[dec.id].key.span,
        dec.downstream.empty()
            ? "no stage after " + qt(g_.stages[dec.decided_by].name) + " uses " + qt(dec.name) +
                  ", so nothing can be filled for it"
            : "no stage downstream of " + qt(dec.name) +
                  " is speculable, so nothing can be filled for it; mark the stages that are "
                  "safe to run twice `speculable: true`",
        "/decisions/" + schema::pointer_token(dec.name));
  }
}

}  // namespace dynrt::dsl::detail

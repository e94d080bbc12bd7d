#include "dsl/compiler.hpp"

#include "dsl/node_values.hpp"
#include "dsl/schema.hpp"

#include <set>

namespace dynrt::dsl::detail {

// A key template must start with literal text (comments render nothing, so they do not
// count): otherwise whatever value is rendered first, a caller's or a model's, can name any
// record ("secret:admin"), reading it into a result or invalidating it.
bool Compiler::scoped_key(const MustacheScan& scan) {
  std::size_t literal_from = 0;
  for (const MustacheTag& tag : scan.tags) {
    if (tag.offset > literal_from) return true;
    if (tag.type != MustacheTag::Type::comment) return false;
    literal_from = tag.offset + tag.length;
  }
  return true;  // no value is rendered before the end: a fixed key (or none)
}

void Compiler::check_record_keys() {
  for (StageId id = 0; id < g_.stages.size(); ++id) {
    const Node* def = src_[id].def();
    if (!def->is_mapping()) continue;
    for (const char* key : {"reads", "writes"}) {
      const Node* list = def->get(key);
      if (!list || !list->is_sequence()) continue;
      for (std::size_t i = 0; i < list->items.size(); ++i) {
        const Node& item = list->items[i];
        if (!is_string(&item)) continue;
        const MustacheScan scan = scan_mustache(item.value);
        if (scan.error || scoped_key(scan)) continue;  // bad tags: reported
        add(Rule::unscoped_record_key, item.span,
            "record key " + qt(item.value) +
                " starts with a mustache tag, so the value rendered there can name any "
                "record (\"secret:admin\", say); begin it with a literal prefix that names "
                "the kind of record, such as " +
                qt("page:" + item.value),
            stage_path(id) + "/" + key + "/" + std::to_string(i));
      }
    }
  }
}

// Variables whose value a caller chooses: those bound from an incoming request, and,
// transitively, the outputs and decisions of stages whose request carries one of them.
std::map<std::string, Compiler::CallerOrigin> Compiler::caller_derived() const {
  std::map<std::string, CallerOrigin> out;
  for (const Stage& s : g_.stages) {
    for (const auto& [name, ex] : s.bind) {
      const auto v = vars_.find(name);
      if (v != vars_.end() &&
          (v->second.kind == VarKind::input || v->second.kind == VarKind::decision)) {
        out.emplace(name, CallerOrigin{s.id, ""});
      }
    }
  }
  // A fixpoint: loop-carried values may flow against the declaration order.
  for (bool changed = true; changed;) {
    changed = false;
    for (const StageId id : g_.topological_order) {
      const Stage& s = g_.stages[id];
      const std::string* carried = nullptr;
      for (const auto& [name, ex] : s.bind) {
        if (!carried && out.count(name)) carried = &name;
      }
      for (const std::string& u : s.uses) {
        if (!carried && out.count(u)) carried = &u;
      }
      if (!carried) continue;
      std::vector<std::string> produced;
      for (const auto& [name, ex] : s.outputs)
        produced.push_back(name);
      if (s.decides != kNoId) produced.push_back(g_.decisions[s.decides].name);
      for (const std::string& p : produced) {
        if (out.emplace(p, CallerOrigin{id, *carried}).second) changed = true;
      }
    }
  }
  return out;
}

// "query", which stage "router" binds from a caller's request
std::string Compiler::caller_chain(const std::map<std::string, CallerOrigin>& origins,
                                   const std::string& var) const {
  const CallerOrigin& o = origins.at(var);
  const std::string& stage = g_.stages[o.stage].name;
  if (o.via.empty())
    return qt(var) + ", which stage " + qt(stage) + " binds from a caller's request";
  const bool decided = vars_.at(var).kind == VarKind::decision;
  return qt(var) + ", which stage " + qt(stage) + (decided ? " decides" : " produces") + " from " +
         caller_chain(origins, o.via);
}

void Compiler::check_sharing() {
  const std::string why =
      "; a result shared across tenants that was computed from one tenant's data can be "
      "served to another tenant that sends the same request";
  const std::string keep = why +
                           "; keep `share: tenant` unless that value is the same for "
                           "every tenant";
  const auto origins = caller_derived();
  for (const Stage& s : g_.stages) {
    if (s.share != Share::global) continue;
    const Node* def = src_[s.id].def();
    const std::string path = stage_path(s.id);
    const std::string shared = "stage " + qt(s.name) + " is shared across tenants (share: global)";
    if (!s.reads.empty()) {
      add(Rule::shared_stage_reads_records, def->get("share")->span,
          shared + " but reads records (" + join_names(s.reads) + "), which belong to one tenant" +
              why +
              ", and a write by one tenant invalidates results only within its own tenant and "
              "the shared scope; keep `share: tenant` unless every tenant reads the same "
              "records",
          path + "/share");
    }
    std::set<std::string> reported;
    for (const Use& u : uses_) {
      if (u.stage != s.id || !origins.count(u.var) || !reported.insert(u.var).second) continue;
      add(Rule::shared_stage_caller_input, u.span,
          shared + " but renders " + caller_chain(origins, u.var) + keep, path);
    }
    const Node* bind = def->get("bind");
    for (const auto& [name, ex] : s.bind) {
      if (!origins.count(name) || !reported.insert(name).second) continue;
      add(Rule::shared_stage_caller_input, bind->find(name)->key.span,
          shared + " but its request carries " + qt(name) +
              ", which it binds from a caller's request" + keep,
          path + "/bind/" + schema::pointer_token(name));
    }
  }
}

}  // namespace dynrt::dsl::detail

#include "run/stage.hpp"

#include "dsl/render.hpp"

#include "engines/completion.hpp"
#include "runtime/reuse_name.hpp"
#include "runtime/tenancy.hpp"

#include <algorithm>

namespace dynrt::run {

Hash128 stage_name(const Policy& policy, const dsl::Stage& stage, std::string_view endpoint,
                   const nlohmann::json& body, const Caller& caller, const std::string& run) {
  Hash128 name = reuse_name(stage.fingerprint, endpoint, body);
  if (stage.share == dsl::Share::tenant) name = tenancy::tenant_name(name, caller.tenant);
  if (!policy.private_fills) return name;
  Hasher128 h;
  h.add(name).add(run);
  return h.finish();
}

Strings read_records(const dsl::Stage& stage, const Strings& keys, const Caller& caller) {
  return tenancy::read_records(keys, caller.tenant, stage.share == dsl::Share::global);
}

Strings write_records(const Strings& keys, const Caller& caller) {
  // The default tenant is every deployment without keys: its writes reach every result, as
  // they did before tenants existed.
  return tenancy::write_records(keys, caller.tenant.empty()
                                          ? tenancy::WriteScope::all()
                                          : tenancy::WriteScope::of(caller.tenant));
}

std::optional<Strings> tool_records(const Policy& policy, const dsl::Stage& stage,
                                    const nlohmann::json& arguments, bool writes) {
  Strings keys;
  if (stage.kind != dsl::StageKind::tool) return keys;
  const auto it = policy.tools.find(stage.tool);
  if (it == policy.tools.end()) return keys;
  dsl::Bindings vars;
  if (arguments.is_object())
    for (const auto& [k, v] : arguments.items())
      vars[k] = v;
  for (const auto& t : writes ? it->second.writes : it->second.reads) {
    auto r = dsl::render_text(t, vars);
    if (!r) return std::nullopt;
    keys.push_back(r->is_string() ? r->get<std::string>() : r->dump());
  }
  return keys;
}

bool reusable(const dsl::Stage& s) {
  return s.speculable && s.kind != dsl::StageKind::user && s.writes.empty();
}

bool storable(std::string_view endpoint, const engines::EngineResult& r) {
  if (r.status != 200 || !r.complete) return false;
  // A tool's output is whatever the tool returns: the call succeeding is all there is to check.
  if (is_tool_endpoint(endpoint)) return true;
  return !engines::abnormal_completion(endpoint, r.body);
}

std::vector<dsl::StageId> fill_chain(const dsl::TemplateGraph& g, const dsl::Decision& d,
                                     int depth) {
  std::vector<dsl::StageId> chain;
  // compile_template() already merged the template's limits into the decision's.
  int max = std::max(1, d.limits.max_chain);
  if (depth > 0) max = std::min(max, depth);
  for (const dsl::StageId s : d.downstream) {
    if (s >= g.stages.size() || !reusable(g.stages[s])) break;
    chain.push_back(s);
    if (static_cast<int>(chain.size()) >= max) break;
  }
  return chain;
}

const dsl::Decision* governing(const dsl::TemplateGraph& g, const dsl::Stage& stage) {
  const dsl::Decision* found = nullptr;
  for (const auto& d : g.decisions)
    if (std::find(d.downstream.begin(), d.downstream.end(), stage.id) != d.downstream.end())
      found = &d;
  return found;
}

Duration ttl_of(const dsl::TemplateGraph& g, const dsl::Stage& stage) {
  double seconds = g.limits.ttl_s;
  if (const auto* d = governing(g, stage)) seconds = d->limits.ttl_s;
  if (stage.ttl_s) seconds = *stage.ttl_s;
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(seconds));
}

std::chrono::milliseconds wait_of(const dsl::TemplateGraph& g, const dsl::Stage& stage) {
  int ms = g.limits.wait_ms;
  if (const auto* d = governing(g, stage)) ms = d->limits.wait_ms;
  return std::chrono::milliseconds(std::max(0, ms));
}

EntryRefs producers_of(const dsl::Stage& stage, const Producers& producers) {
  EntryRefs out;
  for (const auto& var : stage.uses)
    if (auto it = producers.find(var); it != producers.end())
      if (std::find(out.begin(), out.end(), it->second) == out.end()) out.push_back(it->second);
  return out;
}

}  // namespace dynrt::run

#include "run/workflow_run.hpp"

#include "runtime/json_text.hpp"
#include "runtime/reuse_name.hpp"

#include <algorithm>

namespace dynrt::run {

using branch::Outcome;

WorkflowRun::WorkflowRun(GraphPtr graph, bool fills) : graph_(std::move(graph)), fills_(fills) {}

void WorkflowRun::open(const dsl::Decision& d, RunEffects& fx) {
  // A new repetition of the decision point supersedes the branch of the previous one.
  if (auto it = branches_.find(d.id); it != branches_.end()) {
    fx.abandon.push_back(it->second.id);
    branches_.erase(it);
  }
  if (!fills_ || d.limits.max_fills <= 0) return;
  BranchOpen o;
  o.chain = fill_chain(*graph_, d);
  if (o.chain.empty()) return;
  o.decision = d.id;
  o.bindings = vars_;
  o.producers = producers_;
  if (d.candidates.kind == dsl::CandidateSourceKind::extract)
    if (auto it = latest_.find(d.candidates.stage); it != latest_.end())
      o.source_output = it->second;
  fx.open.push_back(std::move(o));
}

void WorkflowRun::opened(const BranchOpen& o, std::uint64_t id) {
  Open b;
  b.id = id;
  b.chain = o.chain;
  branches_[o.decision] = b;
}

void WorkflowRun::settled(std::uint64_t id) {
  for (auto it = branches_.begin(); it != branches_.end(); ++it)
    if (it->second.id == id) {
      branches_.erase(it);
      return;
    }
}

void WorkflowRun::resolve(const dsl::Decision& d, Outcome outcome, std::string value,
                          RunEffects& fx) {
  if (outcome == Outcome::selected) vars_[d.name] = value;
  BranchResolve r;
  r.decision = d.id;
  r.outcome = outcome;
  r.value = std::move(value);
  if (auto it = branches_.find(d.id); it != branches_.end() && !it->second.resolved) {
    it->second.resolved = true;
    r.branch = it->second.id;
  }
  fx.resolve.push_back(std::move(r));
}

RunEffects WorkflowRun::demand(const dsl::Stage& stage, const nlohmann::json& body) {
  RunEffects fx;
  const auto& g = *graph_;
  std::vector<std::string> bound;
  if (auto b = dsl::bind_request(stage, body)) {
    for (auto& [k, v] : *b) {
      vars_[k] = v;
      producers_.erase(k);  // from the request, not from an entry
      bound.push_back(k);
    }
  }
  // A user's pick arrives as the variable the next request binds.
  for (const auto& d : g.decisions) {
    if (d.window != dsl::Window::user) continue;
    if (std::find(bound.begin(), bound.end(), d.name) == bound.end()) continue;
    const auto& v = vars_[d.name];
    if (v.is_string())
      resolve(d, Outcome::selected, v.get<std::string>(), fx);
    else
      resolve(d, Outcome::unreadable, {}, fx);
  }
  if (stage.decides != dsl::kNoId && g.decisions[stage.decides].window == dsl::Window::decode)
    open(g.decisions[stage.decides], fx);
  return fx;
}

RunEffects WorkflowRun::completed(const dsl::Stage& stage, std::string_view response,
                                  csl::EntryRef entry) {
  RunEffects fx;
  const auto& g = *graph_;
  auto doc = std::make_shared<nlohmann::json>(parse_json(response));
  if (doc->is_discarded()) return fx;
  // Kept in the stage's own protocol: an `extract` source reads it as the stage's answer.
  if (dsl::translated(stage.api)) {
    if (auto in = dsl::answer_in(stage.api, *doc))
      latest_[stage.id] = std::make_shared<const nlohmann::json>(std::move(*in));
  } else {
    latest_[stage.id] = doc;
  }
  if (auto outs = dsl::read_outputs(stage, *doc)) {
    for (auto& [k, v] : *outs) {
      vars_[k] = v;
      if (entry.valid())
        producers_[k] = entry;
      else
        producers_.erase(k);
    }
  }
  if (stage.decides != dsl::kNoId && g.decisions[stage.decides].window == dsl::Window::decode) {
    const auto& d = g.decisions[stage.decides];
    const auto sel = dsl::read_selection(d, *doc);
    using S = dsl::SelectionResult::Status;
    resolve(d,
            sel.status == S::selected    ? Outcome::selected
            : sel.status == S::ambiguous ? Outcome::ambiguous
                                         : Outcome::unreadable,
            sel.value, fx);
  }
  // A user's pick becomes possible once every stage before it has completed.
  for (const auto& d : g.decisions) {
    if (d.window != dsl::Window::user || d.decided_by >= g.stages.size()) continue;
    const auto& user = g.stages[d.decided_by];
    if (std::find(user.after.begin(), user.after.end(), stage.id) == user.after.end()) continue;
    if (std::all_of(user.after.begin(), user.after.end(),
                    [&](dsl::StageId s) { return latest_.count(s) > 0; }))
      open(d, fx);
  }
  return fx;
}

std::vector<WorkflowRun::Verdict> WorkflowRun::demanded(const dsl::Stage& stage, bool from_fill,
                                                        std::uint64_t fill_branch, bool cached) {
  std::vector<Verdict> out;
  for (auto& [decision, b] : branches_) {
    if (b.judged_at >= b.chain.size() || b.chain[b.judged_at] != stage.id || !b.resolved ||
        b.demanded)
      continue;
    if (cached && !from_fill) {
      if (++b.judged_at < b.chain.size()) continue;  // judged at the next stage
      b.demanded = true;
      out.push_back(Verdict{b.id, false, false});
      continue;
    }
    b.demanded = true;
    out.push_back(Verdict{b.id, from_fill && fill_branch == b.id, true});
  }
  return out;
}

std::optional<std::uint64_t> WorkflowRun::emission_target(dsl::DecisionId decision) const {
  if (decision >= graph_->decisions.size()) return std::nullopt;
  const auto& d = graph_->decisions[decision];
  if (d.window != dsl::Window::decode || d.promotion != dsl::Promotion::exclusive)
    return std::nullopt;
  const auto it = branches_.find(decision);
  if (it == branches_.end() || it->second.resolved) return std::nullopt;
  return it->second.id;
}

std::vector<std::uint64_t> WorkflowRun::open_branches() const {
  std::vector<std::uint64_t> out;
  for (const auto& [d, b] : branches_)
    out.push_back(b.id);
  return out;
}

std::optional<std::vector<std::string>> WorkflowRun::read_keys(const dsl::Stage& stage) const {
  std::vector<std::string> keys;
  for (const auto& k : stage.reads) {
    auto r = dsl::render_text(k, vars_);
    if (!r || !r->is_string()) return std::nullopt;
    keys.push_back(r->get<std::string>());
  }
  return keys;
}

std::optional<std::vector<std::string>> WorkflowRun::read_keys(const dsl::Stage& stage,
                                                               std::string_view endpoint,
                                                               const nlohmann::json& body) const {
  if (stage.reads.empty()) return std::vector<std::string>{};
  auto rendered = dsl::render_stage(stage, vars_);
  if (!rendered || rendered->endpoint != endpoint ||
      reuse_name(stage.fingerprint, endpoint, rendered->body) !=
          reuse_name(stage.fingerprint, endpoint, body))
    return std::nullopt;
  return std::move(rendered->reads);
}

std::optional<std::vector<std::string>> WorkflowRun::write_keys(const dsl::Stage& stage) const {
  std::vector<std::string> keys;
  for (const auto& k : stage.writes) {
    auto r = dsl::render_text(k, vars_);
    if (!r || !r->is_string()) return std::nullopt;
    keys.push_back(r->get<std::string>());
  }
  return keys;
}

}  // namespace dynrt::run

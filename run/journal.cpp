#include "run/journal.hpp"

#include "dsl/render.hpp"
#include "runtime/reuse_name.hpp"

#include <algorithm>
#include <limits>

namespace dynrt::run {

using nlohmann::json;

namespace {

void diff_into(const json& a, const json& b, const json::json_pointer& path, bool top,
               std::vector<DiffEntry>& out, std::size_t limit) {
  if (out.size() >= limit) return;
  if (a.is_object() && b.is_object()) {
    // Both objects iterate in key order: walk them together.
    auto ia = a.begin(), ib = b.begin();
    while ((ia != a.end() || ib != b.end()) && out.size() < limit) {
      const bool take_a = ib == b.end() || (ia != a.end() && ia.key() < ib.key());
      const bool take_b = ia == a.end() || (ib != b.end() && ib.key() < ia.key());
      const std::string& key = take_a ? ia.key() : ib.key();
      const bool neutral = top && is_output_neutral(key);
      const auto p = (path / key).to_string();
      if (take_a) {
        if (!neutral) out.push_back({p, *ia, std::nullopt});
        ++ia;
      } else if (take_b) {
        if (!neutral) out.push_back({p, std::nullopt, *ib});
        ++ib;
      } else {
        if (!neutral) diff_into(*ia, *ib, path / key, false, out, limit);
        ++ia;
        ++ib;
      }
    }
    return;
  }
  if (a.is_array() && b.is_array()) {
    const std::size_t n = std::max(a.size(), b.size());
    for (std::size_t i = 0; i < n && out.size() < limit; ++i) {
      const auto p = path / i;
      if (i >= b.size())
        out.push_back({p.to_string(), a[i], std::nullopt});
      else if (i >= a.size())
        out.push_back({p.to_string(), std::nullopt, b[i]});
      else
        diff_into(a[i], b[i], p, false, out, limit);
    }
    return;
  }
  if (a != b) out.push_back({path.to_string(), a, b});
}

json diff_json(const std::vector<DiffEntry>& diff) {
  json out = json::array();
  for (const auto& d : diff) {
    json e = {{"path", d.path}};
    if (d.expected) e["expected"] = *d.expected;
    if (d.sent) e["sent"] = *d.sent;
    out.push_back(std::move(e));
  }
  return out;
}

std::string_view gate_name(BranchNote::Gate g) {
  switch (g) {
    case BranchNote::Gate::pending:
      return "pending";
    case BranchNote::Gate::open:
      return "open";
    case BranchNote::Gate::closed:
      return "closed";
  }
  return "pending";
}

std::string squote(std::string_view s) {
  return "'" + std::string(s) + "'";
}

// The candidate a branch selected, or candidates.end() when the selection was none of them.
auto picked(const BranchNote& note) {
  return std::find_if(note.candidates.begin(), note.candidates.end(),
                      [&](const auto& c) { return c.value == note.selection; });
}

}  // namespace

std::vector<DiffEntry> request_diff(const json& expected, const json& sent, std::size_t limit) {
  std::vector<DiffEntry> out;
  diff_into(expected, sent, json::json_pointer(), true, out, limit);
  return out;
}

std::string_view to_string(MissReason r) {
  switch (r) {
    case MissReason::not_reusable:
      return "not_reusable";
    case MissReason::fill_running:
      return "fill_running";
    case MissReason::fill_failed:
      return "fill_failed";
    case MissReason::fill_cancelled:
      return "fill_cancelled";
    case MissReason::fill_discarded:
      return "fill_discarded";
    case MissReason::body_differed:
      return "body_differed";
    case MissReason::not_downstream:
      return "not_downstream";
    case MissReason::no_branch:
      return "no_branch";
    case MissReason::no_candidates:
      return "no_candidates";
    case MissReason::not_admitted:
      return "not_admitted";
    case MissReason::unpredicted:
      return "unpredicted";
    case MissReason::unresolved:
      return "unresolved";
    case MissReason::unknown_stage:
      return "unknown_stage";
  }
  return "unknown";
}

RunJournal::RunJournal(GraphPtr graph, const Policy& policy, Limits limits)
    : graph_(std::move(graph)), limits_(limits), fill_depth_(policy.fill_depth) {}

void RunJournal::arrived(std::uint64_t call, const std::string& stage, const std::string& endpoint,
                         double at_ms) {
  Call c;
  c.seq = next_seq_++;
  c.stage = stage;
  c.endpoint = endpoint;
  c.at_ms = at_ms;
  calls_.push_back(std::move(c));
  call_seq_[call] = calls_.back().seq;
  while (calls_.size() > limits_.calls) {
    calls_.erase(calls_.begin());
    ++calls_dropped_;
  }
  // Calls long answered no longer need their id: keep the map as bounded as the calls.
  while (call_seq_.size() > 2 * limits_.calls)
    call_seq_.erase(call_seq_.begin());
}

const RunJournal::Call* RunJournal::call(std::uint64_t call) const {
  const auto it = call_seq_.find(call);
  if (it == call_seq_.end() || calls_.empty() || it->second < calls_.front().seq) return nullptr;
  return &calls_[it->second - calls_.front().seq];
}

void RunJournal::answered(std::uint64_t call, const dsl::Stage& stage, const json& body,
                          Served served, int status, const DemandTrace& trace,
                          const dsl::Bindings& vars, double at_ms) {
  auto* c = const_cast<Call*>(this->call(call));
  if (!c) return;
  c->served = served;
  c->status = status;
  c->latency_ms = std::max(0.0, at_ms - c->at_ms);
  c->waited_ms = trace.waited_ms;
  c->waited = trace.waited_fill;
  if (served == Served::engine) c->why = explain(stage, body, trace, vars);
}

void RunJournal::passed(std::uint64_t call, bool unknown) {
  auto* c = const_cast<Call*>(this->call(call));
  if (!c) return;
  c->served = Served::engine;
  if (!unknown) return;  // a user stage: it always passes through
  Why w;
  w.reason = MissReason::unknown_stage;
  w.detail = "workflow '" + graph_->workflow + "' has no stage " + squote(c->stage) +
             ": the call passed through to its engine";
  c->why = std::move(w);
}

void RunJournal::rendered(FillRender render) {
  auto& rs = renders_[render.stage];
  // A fill renders a stage once; the same name from another fill is kept once too.
  for (const auto& r : rs)
    if (r.name == render.name && r.fill == render.fill) return;
  rs.push_back(std::move(render));
  while (rs.size() > limits_.renders)
    rs.erase(rs.begin());
}

void RunJournal::fill_finished(std::uint64_t fill, branch::FillStatus status) {
  fill_status_[fill] = status;
  while (fill_status_.size() > limits_.branches * 8)
    fill_status_.erase(fill_status_.begin());
}

void RunJournal::branch(BranchNote note) {
  for (const auto& c : note.candidates)
    if (c.fill != 0) fill_finished(c.fill, c.status);
  for (auto& b : branches_)
    if (b.branch == note.branch) {
      b = std::move(note);
      return;
    }
  branches_.push_back(std::move(note));
  while (branches_.size() > limits_.branches) {
    branches_.erase(branches_.begin());
    ++branches_dropped_;
  }
}

const BranchNote* RunJournal::latest_branch(dsl::DecisionId decision) const {
  for (auto it = branches_.rbegin(); it != branches_.rend(); ++it)
    if (it->decision == decision) return &*it;
  return nullptr;
}

const std::vector<dsl::DecisionId>* RunJournal::reaching(const dsl::Stage& stage) const {
  if (!reached_by_) {
    reached_by_.emplace();
    for (const auto& d : graph_->decisions)
      for (const auto s : fill_chain(*graph_, d, fill_depth_))
        (*reached_by_)[s].push_back(d.id);
  }
  const auto it = reached_by_->find(stage.id);
  return it == reached_by_->end() ? nullptr : &it->second;
}

const BranchNote* RunJournal::latest_of(const std::vector<dsl::DecisionId>& decisions) const {
  const BranchNote* note = nullptr;
  for (const auto d : decisions)
    if (const auto* n = latest_branch(d); n && (!note || n->branch > note->branch)) note = n;
  return note;
}

std::string RunJournal::unpredicted(const BranchNote& note) const {
  std::string names;
  for (const auto& c : note.candidates)
    names += (names.empty() ? "" : ", ") + squote(c.value);
  return "decision " + squote(graph_->decisions[note.decision].name) + " selected " +
         squote(note.selection) + ", which was none of the candidates (" + names + ")";
}

Why RunJournal::explain(const dsl::Stage& stage, const json& body, const DemandTrace& trace,
                        const dsl::Bindings& vars) const {
  Why w;
  const auto& g = *graph_;
  if (!trace.reusable) {
    w.reason = MissReason::not_reusable;
    w.detail = "stage " + squote(stage.name) +
               " is not speculable (or writes records), so its results are never filled or reused";
    return w;
  }
  // What the template renders for this stage from the run's variables, for comparison.
  if (const auto rendered = dsl::render_stage(stage, vars))
    w.template_diff = request_diff(rendered->body, body);

  const auto rs = renders_.find(stage.id);
  if (rs != renders_.end() && !rs->second.empty()) {
    // The fill that computed this exact request, if one did.
    for (auto it = rs->second.rbegin(); it != rs->second.rend(); ++it) {
      if (it->name != trace.name) continue;
      const auto st = fill_status_.find(it->fill);
      const std::string who = "the fill for candidate " + squote(it->candidate);
      if (trace.wait_timed_out) {
        w.reason = MissReason::fill_running;
        w.detail = who +
                   " was still running after the wait bound (wait_ms); the call ran "
                   "itself";
      } else if (st != fill_status_.end() && st->second == branch::FillStatus::failed) {
        w.reason = MissReason::fill_failed;
        w.detail = who +
                   " failed (an engine error or an unrenderable stage); the call ran "
                   "itself";
      } else if (st != fill_status_.end() && st->second == branch::FillStatus::cancelled) {
        w.reason = MissReason::fill_cancelled;
        w.detail = who +
                   " was cancelled (another candidate was selected, or the selection "
                   "was unusable)";
      } else {
        w.reason = MissReason::fill_discarded;
        w.detail = who +
                   " had computed this request, but its result was gone when the call "
                   "came (discarded with its branch, expired, or invalidated by a write)";
      }
      w.template_diff.clear();
      return w;
    }
    // Fills rendered the stage, but not this request: the closest of them, path by path.
    std::size_t best = std::numeric_limits<std::size_t>::max();
    const FillRender* closest = nullptr;
    for (const auto& r : rs->second) {
      auto d = request_diff(*r.body, body);
      if (d.size() < best) {
        best = d.size();
        closest = &r;
        w.diff = std::move(d);
      }
    }
    w.reason = MissReason::body_differed;
    w.compared_with =
        "fill " + std::to_string(closest->fill) + " (candidate " + squote(closest->candidate) + ")";
    std::string paths;
    for (std::size_t i = 0; i < w.diff.size() && i < 3; ++i)
      paths += (i ? ", " : "") + w.diff[i].path;
    if (w.diff.size() > 3) paths += ", ...";
    w.detail = "fills rendered stage " + squote(stage.name) +
               ", but the request differed from the closest one at " +
               (paths.empty() ? std::string("fields a reuse name covers") : paths);
    if (w.diff.empty())
      w.detail = "fills rendered stage " + squote(stage.name) +
                 " with the same body, but under another name (another tenant, or a private "
                 "fill)";
    // The fills rendered other candidates: when the pick was none of them, that is the cause.
    if (const auto* reached = reaching(stage))
      if (const BranchNote* n = latest_of(*reached);
          n && !w.diff.empty() &&
          (n->outcome == branch::Outcome::unpredicted || n->outcome == branch::Outcome::selected) &&
          picked(*n) == n->candidates.end())
        w.detail += "; " + unpredicted(*n) + ", so no fill rendered this request";
    return w;
  }
  const std::vector<dsl::DecisionId>* reached = reaching(stage);
  if (!reached) {
    w.reason = MissReason::not_downstream;
    w.detail = "no decision's fill chain reaches stage " + squote(stage.name) +
               "; only the library (an identical earlier call) can serve it";
    return w;
  }
  // The decision upstream whose branch was reported last.
  const BranchNote* note = latest_of(*reached);
  const auto& first_decision = g.decisions[reached->front()];
  if (!note) {
    w.reason = MissReason::no_branch;
    w.detail = "no branch of decision " + squote(first_decision.name) +
               " was open: its deciding stage had not been called in this run, or fills are off";
    return w;
  }
  const auto& d = g.decisions[note->decision];
  if (note->gate == BranchNote::Gate::closed) {
    w.reason = MissReason::not_admitted;
    w.by = "generation gate";
    w.refusal = note->gate_reason;
    w.detail = "the generation gate kept decision " + squote(d.name) + "'s branch closed (" +
               note->gate_reason + "), so no fill ran";
    return w;
  }
  if (note->proposed && note->candidates.empty()) {
    w.reason = MissReason::no_candidates;
    w.detail = "decision " + squote(d.name) + "'s predictor proposed no candidates";
    return w;
  }
  if (note->outcome == branch::Outcome::pending) {
    w.reason = MissReason::unresolved;
    w.detail = "decision " + squote(d.name) + " had not resolved when the call came";
    return w;
  }
  if (note->outcome != branch::Outcome::selected && note->outcome != branch::Outcome::unpredicted) {
    w.reason = MissReason::unresolved;
    w.detail = "decision " + squote(d.name) + "'s selection was " +
               std::string(branch::to_string(note->outcome)) + ", so nothing could be promoted";
    return w;
  }
  const auto cand = picked(*note);
  if (cand == note->candidates.end()) {
    w.reason = MissReason::unpredicted;
    w.detail = unpredicted(*note);
    return w;
  }
  if (cand->fill == 0) {
    w.reason = MissReason::not_admitted;
    w.by = "fill gate";
    w.refusal = cand->refused ? std::string(admission::to_string(*cand->refused)) : "not asked";
    w.detail =
        "the fill gate did not admit candidate " + squote(cand->value) + " (" + w.refusal + ")";
    return w;
  }
  // Admitted, yet it never rendered this stage: it ended before reaching it.
  const auto st = fill_status_.find(cand->fill);
  const auto status = st != fill_status_.end() ? st->second : cand->status;
  w.reason = status == branch::FillStatus::cancelled ? MissReason::fill_cancelled
             : status == branch::FillStatus::running ? MissReason::fill_running
                                                     : MissReason::fill_failed;
  w.detail = "the fill for candidate " + squote(cand->value) + " had not reached stage " +
             squote(stage.name) + " (" + std::string(branch::to_string(status)) + ")";
  return w;
}

json RunJournal::to_json() const {
  json calls = json::array();
  for (const auto& c : calls_) {
    json e = {{"seq", c.seq}, {"stage", c.stage}, {"endpoint", c.endpoint}, {"at_ms", c.at_ms}};
    if (c.served) {
      e["served"] = std::string(to_string(*c.served));
      if (c.status != 0) e["status"] = c.status;
      e["latency_ms"] = c.latency_ms;
      if (c.waited) e["waited_for_fill_ms"] = c.waited_ms;
    } else {
      e["served"] = nullptr;  // not answered yet
    }
    if (c.why) {
      json why = {{"reason", std::string(to_string(c.why->reason))}, {"detail", c.why->detail}};
      if (!c.why->by.empty()) why["by"] = c.why->by;
      if (!c.why->refusal.empty()) why["refusal"] = c.why->refusal;
      if (!c.why->compared_with.empty()) why["compared_with"] = c.why->compared_with;
      if (c.why->reason == MissReason::body_differed) why["diff"] = diff_json(c.why->diff);
      if (!c.why->template_diff.empty()) why["template_diff"] = diff_json(c.why->template_diff);
      e["why"] = std::move(why);
    }
    calls.push_back(std::move(e));
  }
  json branches = json::array();
  for (const auto& b : branches_) {
    json cands = json::array();
    for (const auto& c : b.candidates) {
      json e = {{"value", c.value}};
      if (c.fill != 0) {
        const auto st = fill_status_.find(c.fill);
        e["fill"] = c.fill;
        e["status"] =
            std::string(branch::to_string(st != fill_status_.end() ? st->second : c.status));
      } else {
        e["refused"] = c.refused ? std::string(admission::to_string(*c.refused)) : "not asked";
      }
      cands.push_back(std::move(e));
    }
    json e = {{"branch", b.branch},
              {"decision", graph_->decisions[b.decision].name},
              {"gate", std::string(gate_name(b.gate))},
              {"candidates", std::move(cands)},
              {"outcome", std::string(branch::to_string(b.outcome))}};
    if (!b.gate_reason.empty()) e["gate_reason"] = b.gate_reason;
    if (!b.selection.empty()) e["selection"] = b.selection;
    branches.push_back(std::move(e));
  }
  json out = {{"calls", std::move(calls)}, {"branches", std::move(branches)}};
  if (calls_dropped_) out["calls_dropped"] = calls_dropped_;
  if (branches_dropped_) out["branches_dropped"] = branches_dropped_;
  return out;
}

}  // namespace dynrt::run

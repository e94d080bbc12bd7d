#include "dsl/compiler.hpp"

#include "dsl/node_values.hpp"
#include "dsl/regex_group.hpp"
#include "dsl/schema.hpp"
#include "dsl/yaml_json.hpp"

#include <re2/re2.h>

#include <algorithm>
#include <set>

namespace dynrt::dsl::detail {

void Compiler::decode_decisions() {
  const Node* decisions = root_.get("decisions");
  // Who decides what, from the stages' `decides`.
  std::map<std::string, std::vector<std::pair<StageId, Span>>> deciders;
  for (StageId id = 0; id < g_.stages.size(); ++id) {
    const Node* def = src_[id].def();
    const Node* d = def->is_mapping() ? def->get("decides") : nullptr;
    if (!is_string(d)) continue;
    const auto it = vars_.find(d->value);
    if (it == vars_.end() || it->second.kind != VarKind::decision) {
      std::vector<std::string> known;
      for (const auto& [name, v] : vars_) {
        if (v.kind == VarKind::decision) known.push_back(name);
      }
      unknown(d->span,
              "stage " + qt(g_.stages[id].name) + " decides " + qt(d->value) +
                  ", which is not a declared decision point",
              d->value, known, stage_path(id) + "/decides");
      continue;
    }
    deciders[d->value].emplace_back(id, d->span);
  }
  if (!decisions || !decisions->is_mapping()) return;
  for (const MapEntry& e : decisions->entries) {
    Decision dec;
    dec.id = static_cast<DecisionId>(g_.decisions.size());
    dec.name = e.key.value;
    dec.limits = g_.limits;
    const std::string path = "/decisions/" + schema::pointer_token(dec.name);
    const auto& who = deciders[dec.name];
    if (who.empty()) {
      add(Rule::undecided_decision, e.key.span,
          "no stage decides decision point " + qt(dec.name) + "; add `decides: " + dec.name +
              "` to the stage whose output resolves it",
          path);
    } else {
      dec.decided_by = who.front().first;
      g_.stages[dec.decided_by].decides = dec.id;
      vars_[dec.name].producer = dec.decided_by;
      for (std::size_t i = 1; i < who.size(); ++i) {
        add(Rule::conflicting_decider, who[i].second,
            "decision point " + qt(dec.name) + " is already decided by stage " +
                qt(g_.stages[dec.decided_by].name) + "; one stage decides each decision",
            stage_path(who[i].first) + "/decides");
      }
    }
    if (e.value.is_mapping()) decode_decision(dec, e.value, path);
    g_.decisions.push_back(std::move(dec));
  }
}

void Compiler::decode_decision(Decision& dec, const Node& def, const std::string& path) {
  const Stage* decider = dec.decided_by == kNoId ? nullptr : &g_.stages[dec.decided_by];
  if (auto d = string_of(def.get("description"))) dec.description = *d;
  if (decider && decider->kind == StageKind::user) dec.window = Window::user;
  if (const Node* w = def.get("window");
      is_string(w) && (w->value == "decode" || w->value == "user")) {
    const Window explicit_window = w->value == "user" ? Window::user : Window::decode;
    if (decider && explicit_window != dec.window) {
      add(Rule::invalid_value, w->span,
          "window " + qt(w->value) + " does not fit the deciding stage " + qt(decider->name) +
              ", a " + std::string(to_string(decider->kind)) + " stage; " +
              (dec.window == Window::user ? "a user stage resolves in a user window"
                                          : "model and tool stages resolve in a decode window"),
          path + "/window");
    }
    dec.window = explicit_window;
  }
  if (auto p = string_of(def.get("promotion")); p && *p == "independent") {
    dec.promotion = Promotion::independent;
  }
  dec.limits = read_limits(def.get("limits"), g_.limits);
  if (const Node* c = def.get("candidates"); c && c->is_mapping()) {
    decode_candidates(dec, *c, path + "/candidates");
  }
  const Node* sel = def.get("selection");
  const std::string default_pointer = decider ? default_output_pointer(*decider) : "";
  if (decider) dec.selection.api = decider->api;
  if (sel && sel->is_mapping()) {
    dec.selection.extract = extractor(*sel, default_pointer, path + "/selection");
    if (const Node* m = sel->get("map"); m && m->is_mapping()) {
      for (const MapEntry& me : m->entries) {
        if (auto v = string_of(&me.value)) dec.selection.map[me.key.value] = *v;
      }
    }
    if (decider && decider->kind == StageKind::user) {
      auto& d = add(Rule::invalid_value, Span{sel->span.begin, sel->span.begin},
                    "`selection` is ignored for a decision a user stage decides: the demand "
                    "that follows names the pick through its `bind`",
                    path + "/selection");
      d.severity = Severity::warning;
    }
  } else {
    dec.selection.extract.pointer = default_pointer;
  }
  check_selection(dec, def, path);
}

void Compiler::decode_candidates(Decision& dec, const Node& c, const std::string& path) {
  CandidateSource& src = dec.candidates;
  const auto source = string_of(c.get("source"));
  if (!source) return;
  if (*source == "learned") src.kind = CandidateSourceKind::learned;
  if (*source == "extract") src.kind = CandidateSourceKind::extract;
  if (*source == "drafter") src.kind = CandidateSourceKind::drafter;
  if (auto m = int_of(c.get("max"), 1, kMaxCount)) src.max = *m;
  for (const Node* v : string_list(c.get("values")))
    src.values.push_back(v->value);
  if (src.kind == CandidateSourceKind::static_list && !c.get("max")) {
    src.max = std::max<int>(1, static_cast<int>(src.values.size()));
  }
  if (src.kind == CandidateSourceKind::extract) {
    if (const Node* st = c.get("stage"); is_string(st)) {
      const auto it = stage_ids_.find(st->value);
      if (it == stage_ids_.end()) {
        unknown(st->span,
                "the candidates of " + qt(dec.name) + " are read from " + qt(st->value) +
                    ", which is not a stage",
                st->value, stage_names(), path + "/stage");
      } else {
        src.stage = it->second;
      }
    }
    const std::string dp = src.stage == kNoId ? "" : default_output_pointer(g_.stages[src.stage]);
    src.extract = extractor(c, dp, path);
  }
  if (src.kind == CandidateSourceKind::drafter) {
    if (auto m = string_of(c.get("model"))) src.model = *m;
    if (const Node* r = c.get("request")) src.request = to_json(*r);
    if (const Node* p = c.get("params"); p && p->is_mapping()) src.params = to_json(*p);
    if (auto s = int_of(c.get("samples"), 1, 64)) src.samples = *s;
    if (auto t = int_of(c.get("timeout_ms"), 1, 600'000)) src.timeout_ms = *t;
  }
}

// A selection that can never produce a listed candidate would leave every fill unused.
void Compiler::check_selection(const Decision& dec, const Node& def, const std::string& path) {
  const CandidateSource& src = dec.candidates;
  if (src.values.empty() ||
      (src.kind != CandidateSourceKind::static_list && src.kind != CandidateSourceKind::learned)) {
    return;
  }
  const Node* sel = def.get("selection");
  if (!sel || !sel->is_mapping()) return;
  const std::set<std::string> candidates(src.values.begin(), src.values.end());
  if (const Node* m = sel->get("map"); m && m->is_mapping()) {
    for (const MapEntry& me : m->entries) {
      if (is_string(&me.value) && !candidates.count(me.value.value)) {
        add(Rule::selection_unmatchable, me.value.span,
            "the selection map yields " + qt(me.value.value) + ", which is not a candidate of " +
                qt(dec.name),
            path + "/selection/map/" + schema::pointer_token(me.key.value));
      }
    }
    return;
  }
  if (!dec.selection.extract.regex) return;
  const auto group = first_group_pattern(*dec.selection.extract.regex_source);
  if (!group) return;
  const re2::RE2 sub(*group, re2::RE2::Quiet);
  if (!sub.ok()) return;
  for (const std::string& c : src.values) {
    if (re2::RE2::FullMatch(c, sub)) return;
  }
  const Node* regex = sel->get("regex");
  add(Rule::selection_unmatchable, regex ? regex->span : sel->span,
      "the selection regex can capture none of the candidates of " + qt(dec.name) + " (" +
          join_names(src.values) + ")",
      path + "/selection/regex");
}

}  // namespace dynrt::dsl::detail

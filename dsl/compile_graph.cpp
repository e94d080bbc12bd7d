#include "dsl/compiler.hpp"

#include "dsl/node_values.hpp"

#include <algorithm>
#include <functional>
#include <queue>
#include <set>
#include <tuple>

namespace dynrt::dsl::detail {

std::size_t Compiler::loop_position(const Stage& s) const {
  const auto& order = g_.loops[s.loop].stages;
  return static_cast<std::size_t>(std::find(order.begin(), order.end(), s.id) - order.begin());
}

// An `after` naming a stage of the same loop that comes at or after this one in the loop's
// order means that stage's previous repetition: the loop's back edge.
void Compiler::classify_edges() {
  for (Stage& s : g_.stages) {
    std::vector<StageId> same;
    for (const StageId p : s.after) {
      const Stage& pred = g_.stages[p];
      if (s.loop != kNoId && pred.loop == s.loop && loop_position(pred) >= loop_position(s)) {
        s.after_previous.push_back(p);
      } else {
        same.push_back(p);
      }
    }
    s.after = std::move(same);
  }
}

void Compiler::build_graph() {
  const std::size_t n = g_.stages.size();
  // Same-repetition edges must be acyclic: find strongly connected components (Tarjan).
  std::vector<int> index(n, -1), low(n, 0), comp(n, -1);
  std::vector<bool> on_stack(n, false);
  std::vector<StageId> stack;
  std::vector<std::vector<StageId>> components;
  int counter = 0;
  std::function<void(StageId)> strong = [&](StageId v) {
    index[v] = low[v] = counter++;
    stack.push_back(v);
    on_stack[v] = true;
    for (const StageId w : g_.stages[v].after) {
      if (index[w] < 0) {
        strong(w);
        low[v] = std::min(low[v], low[w]);
      } else if (on_stack[w]) {
        low[v] = std::min(low[v], index[w]);
      }
    }
    if (low[v] == index[v]) {
      std::vector<StageId> c;
      StageId w;
      do {
        w = stack.back();
        stack.pop_back();
        on_stack[w] = false;
        comp[w] = static_cast<int>(components.size());
        c.push_back(w);
      } while (w != v);
      components.push_back(std::move(c));
    }
  };
  for (StageId v = 0; v < n; ++v) {
    if (index[v] < 0) strong(v);
  }
  std::set<std::pair<StageId, StageId>> cyclic_edges;
  for (auto& c : components) {
    const StageId only = c.front();
    const bool self = c.size() == 1 && std::count(g_.stages[only].after.begin(),
                                                  g_.stages[only].after.end(), only) > 0;
    if (c.size() < 2 && !self) continue;
    std::sort(c.begin(), c.end());
    std::vector<std::string> names;
    for (const StageId id : c)
      names.push_back(g_.stages[id].name);
    // Report at the `after` reference of the last-declared member that stays in the cycle.
    const StageId last = c.back();
    Span at = src_[last].entry->key.span;
    for (const StageId p : g_.stages[last].after) {
      if (comp[p] == comp[last]) {
        at = after_src_[{last, p}];
        break;
      }
    }
    add(Rule::cycle, at,
        self ? "stage " + qt(names[0]) + " runs after itself"
             : "stages " + join_names(names) +
                   " depend on each other in a cycle; if they repeat, declare them as a loop "
                   "(`loops:`) in the order one repetition runs them",
        stage_path(last) + "/after");
    for (const StageId a : c) {
      for (const StageId p : g_.stages[a].after) {
        if (comp[p] == comp[a]) cyclic_edges.insert({p, a});
      }
    }
  }
  // Topological order (Kahn) over acyclic edges; ties go to declaration order.
  std::vector<int> indegree(n, 0);
  std::vector<std::vector<StageId>> next(n);
  for (const Stage& s : g_.stages) {
    for (const StageId p : s.after) {
      if (cyclic_edges.count({p, s.id})) continue;
      next[p].push_back(s.id);
      ++indegree[s.id];
    }
  }
  std::priority_queue<StageId, std::vector<StageId>, std::greater<>> ready;
  for (StageId v = 0; v < n; ++v) {
    if (indegree[v] == 0) ready.push(v);
  }
  while (!ready.empty()) {
    const StageId v = ready.top();
    ready.pop();
    g_.topological_order.push_back(v);
    for (const StageId w : next[v]) {
      if (--indegree[w] == 0) ready.push(w);
    }
  }
  std::vector<std::size_t> position(n, 0);
  for (std::size_t i = 0; i < g_.topological_order.size(); ++i) {
    position[g_.topological_order[i]] = i;
  }
  for (const Stage& s : g_.stages) {
    for (const StageId p : s.after)
      g_.edges.push_back(Edge{p, s.id, false});
    for (const StageId p : s.after_previous)
      g_.edges.push_back(Edge{p, s.id, true});
  }
  std::sort(g_.edges.begin(), g_.edges.end(), [&](const Edge& a, const Edge& b) {
    return std::tuple(position[a.from], position[a.to], a.loop_carried) <
           std::tuple(position[b.from], position[b.to], b.loop_carried);
  });
  entry_and_reachability();
  ancestors();
}

void Compiler::entry_and_reachability() {
  if (g_.stages.empty()) return;
  const Node* entry = root_.get("entry");
  for (const Node* e : string_list(entry)) {
    const auto it = stage_ids_.find(e->value);
    if (it == stage_ids_.end()) {
      unknown(e->span, "entry " + qt(e->value) + " is not a stage", e->value, stage_names(),
              "/entry");
      continue;
    }
    g_.entry.push_back(it->second);
  }
  if (!entry) g_.entry.push_back(0);
  std::vector<std::vector<StageId>> next(g_.stages.size());
  for (const Edge& e : g_.edges)
    next[e.from].push_back(e.to);
  std::vector<bool> seen(g_.stages.size(), false);
  std::vector<StageId> work(g_.entry.begin(), g_.entry.end());
  for (const StageId s : work)
    seen[s] = true;
  while (!work.empty()) {
    const StageId v = work.back();
    work.pop_back();
    for (const StageId w : next[v]) {
      if (!seen[w]) {
        seen[w] = true;
        work.push_back(w);
      }
    }
  }
  for (const Stage& s : g_.stages) {
    if (seen[s.id]) continue;
    add(Rule::unreachable_stage, src_[s.id].entry->key.span,
        "stage " + qt(s.name) + " is not reachable from the entry stage" +
            (g_.entry.size() > 1 ? "s" : "") + "; give it an `after`, or list it in `entry`",
        stage_path(s.id));
  }
}

// ancestors_[s] holds every stage s runs after, directly or not, across repetitions.
void Compiler::ancestors() {
  const std::size_t n = g_.stages.size();
  ancestors_.assign(n, std::vector<bool>(n, false));
  for (StageId s = 0; s < n; ++s) {
    std::vector<StageId> work;
    auto push_preds = [&](StageId v) {
      for (const StageId p : g_.stages[v].after)
        work.push_back(p);
      for (const StageId p : g_.stages[v].after_previous)
        work.push_back(p);
    };
    push_preds(s);
    while (!work.empty()) {
      const StageId v = work.back();
      work.pop_back();
      if (ancestors_[s][v]) continue;
      ancestors_[s][v] = true;
      push_preds(v);
    }
  }
}

void Compiler::check_dependencies() {
  std::set<std::pair<StageId, std::string>> reported;
  for (const Use& u : uses_) {
    const Var& v = vars_.at(u.var);
    const Stage& s = g_.stages[u.stage];
    if (v.kind == VarKind::loop) {
      if (s.loop != v.loop && reported.insert({u.stage, u.var}).second) {
        add(Rule::missing_dependency, u.span,
            "stage " + qt(s.name) + " uses loop index " + qt(u.var) +
                ", but it is not a stage of that loop",
            stage_path(u.stage));
      }
      continue;
    }
    if (v.producer == kNoId) continue;  // inputs; undecided decisions are reported elsewhere
    if (v.producer == u.stage) {
      if (reported.insert({u.stage, u.var}).second) {
        add(Rule::missing_dependency, u.span,
            "stage " + qt(s.name) + " uses " + qt(u.var) + ", which it produces itself",
            stage_path(u.stage));
      }
      continue;
    }
    if (ancestors_[u.stage][v.producer] || !reported.insert({u.stage, u.var}).second) continue;
    const std::string& producer = g_.stages[v.producer].name;
    auto& d = add(Rule::missing_dependency, u.span,
                  "stage " + qt(s.name) + " uses " + qt(u.var) + ", which stage " + qt(producer) +
                      " " + (v.kind == VarKind::decision ? "decides" : "produces") +
                      ", but does not run after it; add \"" + producer + "\" to its `after`",
                  stage_path(u.stage));
    d.suggestion = producer;
  }
}

// The stages whose input depends on a decision's selection, directly or through outputs.
void Compiler::compute_downstream() {
  for (Decision& dec : g_.decisions) {
    if (dec.decided_by == kNoId) continue;
    std::set<std::string> tainted{dec.name};
    std::vector<StageId> down;
    for (const StageId id : g_.topological_order) {
      const Stage& s = g_.stages[id];
      if (id == dec.decided_by || !ancestors_[id][dec.decided_by]) continue;
      const bool depends = std::any_of(s.uses.begin(), s.uses.end(),
                                       [&](const std::string& u) { return tainted.count(u) > 0; });
      if (!depends) continue;
      down.push_back(id);
      for (const auto& [name, ex] : s.outputs)
        tainted.insert(name);
    }
    dec.downstream = std::move(down);
  }
}

}  // namespace dynrt::dsl::detail

#include "actors/workflow.hpp"

#include "actors/branch.hpp"
#include "actors/reply.hpp"
#include "runtime/reuse_name.hpp"

#include <chrono>
#include <unordered_map>

namespace dynrt::actors {

using namespace caf;
using branch::Outcome;

void pass_through(const Services& svc, const DemandPtr& d) {
  ++svc.counters->passthrough;
  ++svc.counters->served_engine;
  auto exec = std::make_shared<Exec>();
  exec->endpoint = d->request.endpoint;
  exec->body = d->request.body;
  exec->answer_to = d->sink;
  auto executor = svc.executor_for(exec->endpoint, exec->body);
  if (!executor) {
    d->sink->done(error_reply(404, "not_found", "no engine or tool serves " + exec->endpoint));
    return;
  }
  // Anonymous: the engine actor's reply (the handle) has nobody to go to.
  anon_send(executor, exec_atom::value, ExecPtr(exec));
}

namespace {

// Tool calls do not occupy the model engine's decode slots.
bool is_tool(const std::string& endpoint) { return endpoint.rfind("/v1/dynrt/tools/", 0) == 0; }

struct Pending {
  DemandPtr demand;
  dsl::StageId stage = dsl::kNoId;
  Hash128 name;
  bool store = false;  // a canonical result is kept for reuse
  ReadRefs reads;
  bool waiting = false;
  std::chrono::steady_clock::time_point wait_started{};
  double waited_ms = 0;
};

struct OpenBranch {
  caf::actor actor;
  std::uint64_t id = 0;
  bool resolved = false;
  bool demanded = false;
  dsl::StageId first_stage = dsl::kNoId;
};

struct InFlightFill {
  std::uint64_t fill = 0;
  std::vector<std::uint64_t> waiters;  // demand ids
};

struct WorkflowState {
  WorkflowInit init;
  dsl::Bindings vars;
  Producers producers;
  std::map<dsl::StageId, std::shared_ptr<const nlohmann::json>> latest;  // stage outputs
  std::map<dsl::DecisionId, OpenBranch> branches;   // the current branch of each decision
  std::unordered_map<Hash128, InFlightFill> fills;  // by reuse name
  std::map<std::uint64_t, Pending> pending;         // by demand id
  std::uint64_t received = 0;
  std::chrono::steady_clock::time_point last_activity;
  bool idle_timer = false;
  static inline const char* name = "dynrt.workflow";
};

using Self = stateful_actor<WorkflowState>*;

const Services& svc_of(Self self) {
  return *self->state.init.services;
}
const dsl::TemplateGraph& graph_of(Self self) {
  return *self->state.init.graph;
}

void touch(Self self) {
  auto& st = self->state;
  st.last_activity = std::chrono::steady_clock::now();
  if (!st.idle_timer) {
    st.idle_timer = true;
    self->delayed_send(self, svc_of(self).switches.workflow_idle, idle_atom::value);
  }
}

void abandon(Self self, dsl::DecisionId decision) {
  auto& st = self->state;
  const auto it = st.branches.find(decision);
  if (it == st.branches.end()) return;
  self->send(it->second.actor, abandon_atom::value);
  st.branches.erase(it);
}

void open_branch(Self self, const dsl::Decision& d) {
  auto& st = self->state;
  const auto& svc = svc_of(self);
  abandon(self, d.id);  // a new repetition of the decision point supersedes the old branch
  if (!svc.switches.fills || d.limits.max_fills <= 0) return;
  const auto chain = fill_chain(graph_of(self), d);
  if (chain.empty()) return;
  auto init = std::make_shared<BranchInit>();
  init->id = svc.counters->next_id++;
  init->graph = st.init.graph;
  init->decision = d.id;
  init->bindings = st.vars;
  init->producers = st.producers;
  if (d.candidates.kind == dsl::CandidateSourceKind::extract)
    if (auto it = st.latest.find(d.candidates.stage); it != st.latest.end())
      init->source_output = it->second;
  init->workflow = self;
  init->services = st.init.services;
  OpenBranch b;
  b.id = init->id;
  b.first_stage = chain.front();
  b.actor = spawn_branch_actor(self, std::move(init));
  st.branches[d.id] = std::move(b);
}

void resolve(Self self, const dsl::Decision& d, Outcome outcome, const std::string& value) {
  auto& st = self->state;
  if (outcome == Outcome::selected) st.vars[d.name] = value;
  auto it = st.branches.find(d.id);
  if (it != st.branches.end() && !it->second.resolved) {
    it->second.resolved = true;
    self->send(it->second.actor, resolve_atom::value, static_cast<std::int32_t>(outcome), value);
  } else if (outcome == Outcome::selected) {
    // No branch (fills off, or nothing to fill): the frequency predictor still learns.
    self->send(svc_of(self).pricing, learn_atom::value, std::uint64_t{0}, d.coordinate, value,
               std::int64_t{-1}, false);
  }
}

// A stage's response is known (executed, or served): variables, producers, branch events.
void completed(Self self, const dsl::Stage& stage, const std::string& bytes, csl::EntryRef ref) {
  auto& st = self->state;
  const auto& g = graph_of(self);
  auto doc = std::make_shared<nlohmann::json>(nlohmann::json::parse(bytes, nullptr, false));
  if (doc->is_discarded()) return;
  st.latest[stage.id] = doc;
  if (auto outs = dsl::read_outputs(stage, *doc)) {
    for (auto& [k, v] : *outs) {
      st.vars[k] = v;
      if (ref.valid())
        st.producers[k] = ref;
      else
        st.producers.erase(k);
    }
  }
  if (stage.decides != dsl::kNoId) {
    const auto& d = g.decisions[stage.decides];
    if (d.window == dsl::Window::decode) {
      const auto sel = dsl::read_selection(d, *doc);
      using S = dsl::SelectionResult::Status;
      resolve(self, d,
              sel.status == S::selected    ? Outcome::selected
              : sel.status == S::ambiguous ? Outcome::ambiguous
                                           : Outcome::unreadable,
              sel.value);
    }
  }
  // A user's pick becomes possible once every stage before it has completed.
  for (const auto& d : g.decisions) {
    if (d.window != dsl::Window::user || d.decided_by >= g.stages.size()) continue;
    const auto& user = g.stages[d.decided_by];
    if (std::find(user.after.begin(), user.after.end(), stage.id) == user.after.end()) continue;
    const bool ready = std::all_of(user.after.begin(), user.after.end(),
                                   [&](dsl::StageId s) { return st.latest.count(s) > 0; });
    if (ready) open_branch(self, d);
  }
}

// Tells a resolved branch its downstream demand came, and whether its fill served it.
void note_demand(Self self, const dsl::Stage& stage, bool from_fill, std::uint64_t fill_branch,
                 double saved_ms, double waited_ms) {
  auto& st = self->state;
  for (auto& [decision, b] : st.branches) {
    if (b.first_stage != stage.id || !b.resolved || b.demanded) continue;
    b.demanded = true;
    const bool consumed = from_fill && fill_branch == b.id;
    self->send(b.actor, demanded_atom::value, consumed, saved_ms, waited_ms);
  }
}

void answer(Self self, std::uint64_t id, Reply reply) {
  auto& st = self->state;
  auto it = st.pending.find(id);
  if (it == st.pending.end()) return;
  auto& c = *svc_of(self).counters;
  switch (reply.served) {
    case Served::engine:
      ++c.served_engine;
      break;
    case Served::fill:
      ++c.served_fill;
      break;
    case Served::cache:
      ++c.served_cache;
      break;
  }
  if (!reply.ok()) ++c.errors;
  it->second.demand->sink->done(std::move(reply));
  st.pending.erase(it);
}

void execute(Self self, std::uint64_t id);
void serve(Self self, std::uint64_t id, bool may_wait);

void served_from_library(Self self, std::uint64_t id, const ServeReply& hit) {
  auto& st = self->state;
  auto& p = st.pending.at(id);
  const auto& stage = graph_of(self).stages[p.stage];
  const double saved_ms = std::chrono::duration<double, std::milli>(hit.cost).count();
  svc_of(self).counters->saved_us += static_cast<std::int64_t>(saved_ms * 1000);
  Reply r;
  r.body = *hit.bytes;
  r.usage = {hit.usage.prompt_tokens, hit.usage.completion_tokens};
  r.served = hit.promoted ? Served::fill : Served::cache;
  const bool from_fill = hit.promoted && hit.provenance.origin == csl::Origin::fill;
  const double waited = p.waited_ms;
  answer(self, id, std::move(r));
  completed(self, stage, *hit.bytes, hit.ref);
  note_demand(self, stage, from_fill, hit.provenance.branch, saved_ms, waited);
}

void serve(Self self, std::uint64_t id, bool may_wait) {
  const Hash128 name = self->state.pending.at(id).name;
  const auto& sw = svc_of(self).switches;
  self->request(svc_of(self).csl, infinite, serve_atom::value, name, sw.reuse, sw.fills, sw.reuse)
      .then(
          [=](ServeReply& hit) {
            auto& st = self->state;
            auto it = st.pending.find(id);
            if (it == st.pending.end()) return;
            if (hit.found) return served_from_library(self, id, hit);
            auto f = st.fills.find(it->second.name);
            if (may_wait && sw.fills && f != st.fills.end()) {
              // Its fill is running: wait for it, within the decision's bound.
              auto& p = it->second;
              p.waiting = true;
              p.wait_started = std::chrono::steady_clock::now();
              f->second.waiters.push_back(id);
              ++svc_of(self).counters->waits;
              int wait_ms = 2000;
              for (const auto& d : graph_of(self).decisions)
                if (std::find(d.downstream.begin(), d.downstream.end(), p.stage) !=
                    d.downstream.end())
                  wait_ms = d.limits.wait_ms;
              self->delayed_send(self, std::chrono::milliseconds(std::max(0, wait_ms)),
                                 waitend_atom::value, id);
              return;
            }
            execute(self, id);
          },
          [=](error&) { execute(self, id); });
}

void stop_waiting(Self self, std::uint64_t id) {
  auto& st = self->state;
  auto& p = st.pending.at(id);
  if (!p.waiting) return;
  p.waiting = false;
  p.waited_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - p.wait_started)
          .count();
  if (auto f = st.fills.find(p.name); f != st.fills.end()) {
    auto& w = f->second.waiters;
    w.erase(std::remove(w.begin(), w.end(), id), w.end());
  }
}

void run(Self self, std::uint64_t id) {
  auto& st = self->state;
  auto& p = st.pending.at(id);
  const auto& svc = svc_of(self);
  auto exec = std::make_shared<Exec>();
  exec->endpoint = p.demand->request.endpoint;
  exec->body = p.demand->request.body;
  exec->kind = engines::RequestKind::canonical;
  exec->id = "dynrt-" + st.init.id + "-" + std::to_string(id);
  exec->reply_to = self;
  exec->tag = id;
  if (p.demand->sink->stream()) exec->stream_to = p.demand->sink;
  auto executor = svc.executor_for(exec->endpoint, exec->body);
  if (!executor)
    return answer(self, id,
                  error_reply(404, "not_found", "no engine or tool serves " + exec->endpoint));
  if (!is_tool(exec->endpoint)) self->send(svc.pricing, canon_atom::value, std::int32_t{1});
  self->send(executor, exec_atom::value, ExecPtr(exec));
}

void execute(Self self, std::uint64_t id) {
  auto& st0 = self->state;
  auto& p = st0.pending.at(id);
  const auto& stage = graph_of(self).stages[p.stage];
  p.store = false;
  if (svc_of(self).switches.reuse && reusable(stage)) {
    // The record keys it reads, rendered now; their versions are snapshotted before it runs,
    // so a write during the execution makes the result stale at insert.
    Strings keys;
    bool ok = true;
    for (const auto& k : stage.reads) {
      auto r = dsl::render_text(k, st0.vars);
      if (!r || !r->is_string()) {
        ok = false;
        break;
      }
      keys.push_back(r->get<std::string>());
    }
    if (ok) {
      p.store = true;
      self->request(svc_of(self).csl, infinite, snap_atom::value, keys)
          .then(
              [=](ReadRefs& reads) {
                auto& st = self->state;
                if (auto it = st.pending.find(id); it != st.pending.end()) {
                  it->second.reads = std::move(reads);
                  run(self, id);
                }
              },
              [=](error&) {
                self->state.pending.at(id).store = false;
                run(self, id);
              });
      return;
    }
  }
  run(self, id);
}

void executed(Self self, std::uint64_t id, const ExecResultPtr& r) {
  auto& st = self->state;
  auto it = st.pending.find(id);
  if (it == st.pending.end()) return;
  const auto& svc = svc_of(self);
  auto& p = it->second;
  if (!is_tool(p.demand->request.endpoint))
    self->send(svc.pricing, canon_atom::value, std::int32_t{-1});
  const auto& stage = graph_of(self).stages[p.stage];
  if (!r->ok) return answer(self, id, error_reply(r->error));
  self->send(
      svc.pricing, cost_atom::value, stage.fingerprint,
      static_cast<std::int64_t>(r->result.engine_time.count()),
      static_cast<double>(r->result.usage.prompt_tokens + r->result.usage.completion_tokens));
  Reply reply;
  reply.status = r->result.status;
  reply.body = r->result.body;
  reply.usage = r->result.usage;
  reply.finish_reason = r->result.finish_reason;
  reply.served = Served::engine;
  const double waited = p.waited_ms;
  if (!p.store || reply.status != 200) {
    answer(self, id, std::move(reply));
    completed(self, stage, r->result.body, {});
    note_demand(self, stage, false, 0, 0, waited);
    return;
  }
  // Stored before the answer goes out, so the next stage's demand finds its producer.
  auto in = std::make_shared<csl::Insert>();
  in->name = p.name;
  in->bytes = r->result.body;
  in->usage = {static_cast<std::uint32_t>(r->result.usage.prompt_tokens),
               static_cast<std::uint32_t>(r->result.usage.completion_tokens)};
  in->cost = r->result.engine_time;
  in->reads = std::move(p.reads);
  for (const auto& var : stage.uses)
    if (auto pr = st.producers.find(var); pr != st.producers.end())
      if (std::find(in->producers.begin(), in->producers.end(), pr->second) == in->producers.end())
        in->producers.push_back(pr->second);
  in->provenance = {csl::Origin::canonical, 0, 0};
  double ttl = 600;
  for (const auto& d : graph_of(self).decisions)
    if (std::find(d.downstream.begin(), d.downstream.end(), stage.id) != d.downstream.end())
      ttl = d.limits.ttl_s;
  if (stage.ttl_s) ttl = *stage.ttl_s;
  in->ttl = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(ttl));
  auto shared_reply = std::make_shared<Reply>(std::move(reply));
  self->request(svc.csl, infinite, store_atom::value, InsertPtr(in), false)
      .then(
          [=](csl::InsertResult& res) {
            const auto ref = res.status == csl::InsertStatus::stored ||
                                     res.status == csl::InsertStatus::duplicate
                                 ? res.ref
                                 : csl::EntryRef{};
            answer(self, id, std::move(*shared_reply));
            completed(self, stage, in->bytes, ref);
            note_demand(self, stage, false, 0, 0, waited);
          },
          [=](error&) {
            answer(self, id, std::move(*shared_reply));
            completed(self, stage, in->bytes, {});
          });
}

void on_demand(Self self, const DemandPtr& d) {
  auto& st = self->state;
  ++st.received;
  touch(self);
  const auto& g = graph_of(self);
  const dsl::Stage* stage = g.stage(d->request.tags.stage);
  if (!stage || stage->kind == dsl::StageKind::user) {
    pass_through(svc_of(self), d);
    return;
  }
  // Variables this request carries.
  std::vector<std::string> bound;
  if (auto b = dsl::bind_request(*stage, d->request.body)) {
    for (auto& [k, v] : *b) {
      st.vars[k] = v;
      st.producers.erase(k);
      bound.push_back(k);
    }
  }
  // A user's pick arrives as the variable the next request binds.
  for (const auto& dec : g.decisions) {
    if (dec.window != dsl::Window::user) continue;
    if (std::find(bound.begin(), bound.end(), dec.name) == bound.end()) continue;
    const auto& v = st.vars[dec.name];
    resolve(self, dec, v.is_string() ? Outcome::selected : Outcome::unreadable,
            v.is_string() ? v.get<std::string>() : std::string());
  }
  // A deciding stage: fills start while it runs.
  if (stage->decides != dsl::kNoId && g.decisions[stage->decides].window == dsl::Window::decode)
    open_branch(self, g.decisions[stage->decides]);
  Pending p;
  p.demand = d;
  p.stage = stage->id;
  p.name = reuse_name(stage->fingerprint, d->request.endpoint, d->request.body);
  const std::uint64_t id = d->id;
  st.pending.emplace(id, std::move(p));
  const auto& sw = svc_of(self).switches;
  if (reusable(*stage) && (sw.reuse || sw.fills))
    serve(self, id, true);
  else
    execute(self, id);
}

behavior workflow_actor(Self self, WorkflowInit init) {
  self->state.init = std::move(init);
  self->set_error_handler([](error&) {});  // stray errors (a dead engine's) end nothing
  ++self->state.init.services->counters->workflows_live;
  self->attach_functor([counters = self->state.init.services->counters](const error&) {
    --counters->workflows_live;
  });
  return {
      [=](demand_atom, const DemandPtr& d) { on_demand(self, d); },
      [=](engdone_atom, std::uint64_t id, const ExecResultPtr& r) { executed(self, id, r); },
      [=](std::uint64_t) {},  // an engine handle (canonical requests are not cancelled here)
      [=](fstart_atom, const Hash128& name, std::uint64_t fill) {
        self->state.fills[name].fill = fill;
      },
      [=](fend_atom, const Hash128& name, std::uint64_t fill, bool stored) {
        auto& st = self->state;
        auto it = st.fills.find(name);
        if (it == st.fills.end() || it->second.fill != fill) return;
        const auto waiters = std::move(it->second.waiters);
        st.fills.erase(it);
        for (const auto id : waiters) {
          if (!st.pending.count(id)) continue;
          stop_waiting(self, id);
          if (stored)
            serve(self, id, false);  // promote it now; no second wait
          else
            execute(self, id);
        }
      },
      [=](waitend_atom, std::uint64_t id) {
        auto& st = self->state;
        auto it = st.pending.find(id);
        if (it == st.pending.end() || !it->second.waiting) return;
        stop_waiting(self, id);
        ++svc_of(self).counters->wait_timeouts;
        execute(self, id);
      },
      [=](settle_atom, std::uint64_t branch, const FeedbackPtr&) {
        auto& st = self->state;
        for (auto it = st.branches.begin(); it != st.branches.end(); ++it)
          if (it->second.id == branch) {
            st.branches.erase(it);
            break;
          }
      },
      [=](idle_atom) {
        auto& st = self->state;
        st.idle_timer = false;
        const auto quiet = std::chrono::steady_clock::now() - st.last_activity;
        if (quiet >= svc_of(self).switches.workflow_idle && st.pending.empty()) {
          self->send(st.init.root, idle_atom::value, st.init.key, st.received);
        } else {
          st.idle_timer = true;
          self->delayed_send(self, svc_of(self).switches.workflow_idle, idle_atom::value);
        }
      },
      [=](stop_atom) {
        auto& st = self->state;
        std::vector<dsl::DecisionId> open;
        for (const auto& [d, b] : st.branches)
          open.push_back(d);
        for (const auto d : open)
          abandon(self, d);
        self->quit();
      },
  };
}

}  // namespace

caf::actor spawn_workflow_actor(event_based_actor* parent, WorkflowInit init) {
  return parent->spawn<linked>(workflow_actor, std::move(init));
}

}  // namespace dynrt::actors

#include "actors/workflow.hpp"

#include "actors/branch.hpp"
#include "actors/reply.hpp"
#include "actors/workflow_run.hpp"
#include "runtime/reuse_name.hpp"

#include <chrono>
#include <unordered_map>
#include <utility>

namespace dynrt::actors {

using namespace caf;
using branch::Outcome;

void pass_through(const Services& svc, const DemandPtr& d) {
  ++svc.counters->passthrough;
  ++svc.counters->served_engine;
  auto exec = std::make_shared<Exec>();
  exec->endpoint = d->request.endpoint;
  exec->body = d->request.body;
  exec->tenant = d->request.caller.tenant;
  exec->answer_to = d->sink;
  exec->call = d->sink;
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
bool is_tool(const std::string& endpoint) {
  return endpoint.rfind("/v1/dynrt/tools/", 0) == 0;
}

struct Pending {
  DemandPtr demand;
  dsl::StageId stage = dsl::kNoId;
  Hash128 name;
  bool store = false;  // a canonical result is kept for reuse
  ReadRefs reads;
  bool waiting = false;
  std::chrono::steady_clock::time_point wait_started{};
  double waited_ms = 0;
  std::uint64_t execution = 0;  // the coalesced execution this demand leads
  std::uint64_t joined = 0;     // ... or waits for (with `ticket`)
  csl::Ticket ticket = 0;
  bool may_join = true;  // false once a wait for another's execution timed out
};

struct InFlightFill {
  std::uint64_t fill = 0;
  std::vector<std::uint64_t> waiters;  // demand ids
};

struct WorkflowState {
  WorkflowInit init;
  std::unique_ptr<WorkflowRun> run;                 // variables, producers, outputs, branches
  std::map<std::uint64_t, caf::actor> branches;     // open branch actors by branch id
  std::unordered_map<Hash128, InFlightFill> fills;  // by reuse name
  std::map<std::uint64_t, Pending> pending;         // by demand id
  std::uint64_t received = 0;
  bool retiring = false;  // out of the root's table: answer what is in flight, then end
  static inline const char* name = "dynrt.workflow";
};

using Self = stateful_actor<WorkflowState>*;

const Services& svc_of(Self self) {
  return *self->state.init.services;
}
const dsl::TemplateGraph& graph_of(Self self) {
  return *self->state.init.graph;
}

// Retiring: abandons the branches (their fills are cancelled, their shadows discarded) and
// ends once nothing is in flight. Idempotent: it runs again each time a call is answered.
void retire(Self self) {
  auto& st = self->state;
  st.retiring = true;
  for (const auto& [id, actor] : st.branches)
    self->send(actor, abandon_atom::value);
  st.branches.clear();
  if (st.pending.empty()) self->quit();
}

// Carries out what the run's state says: abandon, resolve, open branches.
void apply(Self self, Effects fx) {
  auto& st = self->state;
  const auto& svc = svc_of(self);
  if (st.retiring) fx.open.clear();  // a run that is ending speculates no more
  for (const auto id : fx.abandon)
    if (auto it = st.branches.find(id); it != st.branches.end()) {
      self->send(it->second, abandon_atom::value);
      st.branches.erase(it);
    }
  for (const auto& r : fx.resolve) {
    if (r.branch) {
      if (auto it = st.branches.find(*r.branch); it != st.branches.end())
        self->send(it->second, resolve_atom::value, static_cast<std::int32_t>(r.outcome), r.value);
    } else if (r.outcome == Outcome::selected) {
      // No branch (fills off, or nothing to fill): the frequency predictor still learns.
      self->send(svc.pricing, learn_atom::value, std::uint64_t{0},
                 graph_of(self).decisions[r.decision].coordinate, r.value, std::int64_t{-1}, false);
    }
  }
  for (auto& o : fx.open) {
    auto init = std::make_shared<BranchInit>();
    init->id = svc.counters->next_id++;
    init->graph = st.init.graph;
    init->decision = o.decision;
    init->bindings = o.bindings;
    init->producers = o.producers;
    init->source_output = o.source_output;
    init->run = st.init.key;
    init->caller = st.init.caller;
    init->workflow = self;
    init->services = st.init.services;
    const auto id = init->id;
    st.branches[id] = spawn_branch_actor(self, std::move(init));
    st.run->opened(o, id);
  }
}

// A stage's response is known (executed, or served).
void completed(Self self, const dsl::Stage& stage, const std::string& bytes, csl::EntryRef ref) {
  apply(self, self->state.run->completed(stage, bytes, ref));
}

// Tells the resolved branches whose downstream this is that their demand came.
void note_demand(Self self, const dsl::Stage& stage, bool from_fill, std::uint64_t fill_branch,
                 double saved_ms, double waited_ms) {
  auto& st = self->state;
  bool first = false;
  for (const auto& [id, consumed] : st.run->demanded(stage, from_fill, fill_branch)) {
    first = first || (consumed && id == fill_branch);
    if (auto it = st.branches.find(id); it != st.branches.end())
      self->send(it->second, demanded_atom::value, consumed, saved_ms, waited_ms);
  }
  // A later stage of a fill chain (a read after its retrieve, an executor after its handler):
  // the branch that filled it saved this too, so its return learns it (Eq. 4). The branch
  // may have settled already; the controller revises a settled branch's return.
  if (from_fill && !first && fill_branch != 0)
    self->send(svc_of(self).pricing, credit_atom::value, fill_branch, saved_ms);
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
  it->second.demand->sink->done(std::move(reply));  // which counts an error answer
  st.pending.erase(it);
  // Ends in a message of its own: the caller may still be in the middle of the answer's
  // bookkeeping.
  if (st.retiring && st.pending.empty()) self->send(self, stop_atom::value);
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
              self->delayed_send(self, st.run->wait_of(graph_of(self).stages[p.stage]),
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
  if (p.joined != 0) {
    self->send(svc_of(self).csl, leave_atom::value, p.joined, p.ticket);
    p.joined = 0;
    return;
  }
  if (auto f = st.fills.find(p.name); f != st.fills.end()) {
    auto& w = f->second.waiters;
    w.erase(std::remove(w.begin(), w.end(), id), w.end());
  }
}

// A led execution ended: tells the csl, which answers the demands that joined it.
void land(Self self, Pending& p, Landed::Outcome outcome, const Reply& reply, InsertPtr in,
          Duration cost = Duration{0}) {
  if (p.execution == 0) return;
  auto l = std::make_shared<Landed>();
  l->outcome = outcome;
  l->reply = reply;
  l->cost = cost;
  // Anonymous: the csl's answer (the insert's outcome) is of no use here.
  anon_send(svc_of(self).csl, land_atom::value, std::exchange(p.execution, 0), LandedPtr(l),
            std::move(in));
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
  exec->tenant = st.init.caller.tenant;
  exec->reply_to = self;
  exec->tag = id;
  if (p.demand->sink->stream()) exec->stream_to = p.demand->sink;
  exec->call = p.demand->sink;
  auto executor = svc.executor_for(exec->endpoint, exec->body);
  if (!executor) {
    auto r = error_reply(404, "not_found", "no engine or tool serves " + exec->endpoint);
    land(self, p, Landed::Outcome::error, r, nullptr);
    return answer(self, id, std::move(r));
  }
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
    // so a write during the execution makes the result stale at insert. The same step leads
    // the execution or joins an identical one in flight (coalescing, csl/coalescer.hpp).
    if (auto keys = st0.run->read_keys(stage, p.demand->request.endpoint, p.demand->request.body)) {
      p.store = true;
      const auto bound = st0.run->wait_of(stage);
      const bool may_join = p.may_join && bound.count() > 0;
      self->request(svc_of(self).csl, infinite, claim_atom::value, p.name,
                    read_records(stage, *keys, st0.init.caller), st0.run->producers_of(stage),
                    may_join, actor_cast<actor>(self), id)
          .then(
              [=](ClaimReply& c) {
                auto& st = self->state;
                auto it = st.pending.find(id);
                if (it == st.pending.end()) return;
                auto& q = it->second;
                if (c.found) return served_from_library(self, id, c.hit);
                if (c.kind == csl::ClaimKind::join) {
                  q.waiting = true;
                  q.wait_started = std::chrono::steady_clock::now();
                  q.joined = c.execution;
                  q.ticket = c.ticket;
                  ++svc_of(self).counters->coalesced;
                  self->delayed_send(self, bound, waitend_atom::value, id);
                  return;
                }
                q.execution = c.kind == csl::ClaimKind::lead ? c.execution : 0;
                q.reads = std::move(c.reads);
                run(self, id);
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

// The execution this demand joined ended.
void joined_landed(Self self, std::uint64_t id, const LandedPtr& l) {
  auto& st = self->state;
  auto it = st.pending.find(id);
  if (it == st.pending.end() || !it->second.waiting || it->second.joined == 0) return;
  auto& p = it->second;
  p.joined = 0;  // the csl has forgotten it already
  stop_waiting(self, id);
  switch (l->outcome) {
    case Landed::Outcome::retry:
      return execute(self, id);  // the first to claim again leads, the others join it
    case Landed::Outcome::error:
      return answer(self, id, l->reply);
    case Landed::Outcome::result:
      break;
  }
  const auto& stage = graph_of(self).stages[p.stage];
  const double saved_ms = std::chrono::duration<double, std::milli>(l->cost).count();
  svc_of(self).counters->saved_us += static_cast<std::int64_t>(saved_ms * 1000);
  const double waited = p.waited_ms;
  Reply r = l->reply;
  r.served = Served::cache;
  answer(self, id, std::move(r));
  completed(self, stage, l->reply.body, l->ref);
  note_demand(self, stage, false, 0, saved_ms, waited);
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
  if (!r->ok) {
    auto e = error_reply(r->error);
    // A client's disconnect must not fail the others: they claim again instead.
    land(self, p,
         r->error.kind == engines::ErrorKind::cancelled ? Landed::Outcome::retry
                                                        : Landed::Outcome::error,
         e, nullptr);
    return answer(self, id, std::move(e));
  }
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
  if (p.store && reply.status == 200 && !storable(p.demand->request.endpoint, r->result)) {
    // Not a normal completion: its caller gets it as the engine sent it, but it is not stored,
    // and the demands that joined it run themselves rather than be served it as `cache`.
    land(self, p, Landed::Outcome::retry, reply, nullptr);
    p.store = false;
  }
  const double waited = p.waited_ms;
  if (!p.store || reply.status != 200) {
    land(self, p, Landed::Outcome::error, reply, nullptr);
    // A stage that writes records: its writes are in force before its answer goes out, so
    // nothing that read the old versions is served after the caller learns of the write.
    // The stage's template writes, and whatever records the tool reported writing.
    auto writes = st.run->write_keys(stage);
    if (!writes) writes.emplace();
    writes->insert(writes->end(), r->writes.begin(), r->writes.end());
    if (reply.status == 200 && !writes->empty()) {
      auto shared = std::make_shared<Reply>(std::move(reply));
      self->request(svc.csl, infinite, write_atom::value, write_records(*writes, st.init.caller))
          .then([=](std::uint64_t) { answer(self, id, std::move(*shared)); },
                [=](error&) { answer(self, id, std::move(*shared)); });
    } else {
      answer(self, id, std::move(reply));
    }
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
  in->producers = st.run->producers_of(stage);
  in->provenance = {csl::Origin::canonical, 0, 0};
  in->ttl = st.run->ttl_of(stage);
  auto shared_reply = std::make_shared<Reply>(std::move(reply));
  auto stored = [&] {
    if (p.execution == 0)
      return self->request(svc.csl, infinite, store_atom::value, InsertPtr(in), false);
    auto l = std::make_shared<Landed>();
    l->outcome = Landed::Outcome::result;
    l->reply = *shared_reply;
    l->cost = r->result.engine_time;
    return self->request(svc.csl, infinite, land_atom::value, std::exchange(p.execution, 0),
                         LandedPtr(l), InsertPtr(in));
  }();
  stored.then(
      [=](csl::InsertResult& res) {
        const auto ref =
            res.status == csl::InsertStatus::stored || res.status == csl::InsertStatus::duplicate
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
  const auto& g = graph_of(self);
  const dsl::Stage* stage = g.stage(d->request.tags.stage);
  if (!stage || stage->kind == dsl::StageKind::user) {
    pass_through(svc_of(self), d);
    return;
  }
  // Variables, a user's pick it carries, a branch it opens (before it runs, so fills overlap).
  apply(self, st.run->demand(*stage, d->request.body));
  Pending p;
  p.demand = d;
  p.stage = stage->id;
  p.name = stage_name(svc_of(self).switches, *stage, d->request.endpoint, d->request.body,
                      st.init.caller, st.init.key);
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
  self->state.run = std::make_unique<WorkflowRun>(self->state.init.graph,
                                                  self->state.init.services->switches.fills);
  self->set_error_handler([](error&) {});  // stray errors (a dead engine's) end nothing
  ++self->state.init.services->counters->workflows_live;
  // However it ends, the root learns it (and frees the run's key if it still holds it).
  self->attach_functor([counters = self->state.init.services->counters,
                        root = caf::actor_addr(self->state.init.root.address()),
                        key = self->state.init.key, id = self->id()](const error&) {
    --counters->workflows_live;
    if (auto r = caf::actor_cast<caf::actor>(root)) anon_send(r, gone_atom::value, key, id);
  });
  return {
      [=](demand_atom, const DemandPtr& d) { on_demand(self, d); },
      [=](engdone_atom, std::uint64_t id, const ExecResultPtr& r) { executed(self, id, r); },
      [=](coaldone_atom, std::uint64_t id, const LandedPtr& l) { joined_landed(self, id, l); },
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
        it->second.may_join = false;  // runs now; it may still lead if nothing is in flight
        execute(self, id);
      },
      [=](settle_atom, std::uint64_t branch, const FeedbackPtr&) {
        self->state.run->settled(branch);
        self->state.branches.erase(branch);
      },
      // The root saw no demand for the idle time: the run is idle if nothing is in flight.
      [=](idle_atom) {
        auto& st = self->state;
        if (st.pending.empty())
          self->send(st.init.root, idle_atom::value, st.init.key, st.received);
      },
      [=](stop_atom) { retire(self); },
  };
}

}  // namespace

// Not linked to the root (see root_actor): the root ends it through its table.
caf::actor spawn_workflow_actor(event_based_actor* parent, WorkflowInit init) {
  return parent->spawn(workflow_actor, std::move(init));
}

}  // namespace dynrt::actors

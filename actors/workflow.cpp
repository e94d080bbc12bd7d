#include "actors/workflow.hpp"

#include "actors/branch.hpp"
#include "actors/reply.hpp"
#include "actors/services.hpp"
#include "run/demand_flow.hpp"
#include "run/workflow_run.hpp"

#include <unordered_map>
#include <utility>

namespace dynrt::actors {

using namespace caf;
using run::DemandEffects;
using run::RunEffects;

namespace {

struct WorkflowState {
  WorkflowInit init;
  std::unique_ptr<run::WorkflowRun> run;                 // variables, producers, outputs, branches
  std::unique_ptr<run::DemandFlow> flow;                 // every demand in flight
  std::shared_ptr<run::RunJournal> journal;              // `dynrt explain` (null: off)
  TimePoint started{};                                   // the run's first demand
  std::map<std::uint64_t, caf::actor> branches;          // open branch actors by branch id
  std::unordered_map<std::uint64_t, DemandPtr> demands;  // the calls in flight, by demand id
  // Aborts a demand's own execution (a hedged demand its fill answered first), by demand id,
  // until the execution ends.
  std::unordered_map<std::uint64_t, std::shared_ptr<Cancellation>> executions;
  // The fill actors computing a stage result of this run, by fill id, while any result they
  // announced has not ended (a chain announces its next stage before the last one ends).
  struct FillActor {
    caf::actor actor;
    int announced = 0;
  };
  std::unordered_map<std::uint64_t, FillActor> fills;
  std::uint64_t received = 0;
  bool retiring = false;  // out of the root's table: answer what is in flight, then end
  static inline const char* name = "dynrt.workflow";
};

using Self = stateful_actor<WorkflowState>*;

const Services& svc_of(Self self) {
  return *self->state.init.services;
}

double run_ms(Self self) {
  const auto& st = self->state;
  return run::ms_of(svc_of(self).time->now() - st.started);
}

// The run's journal as `dynrt explain` shows it.
nlohmann::json explanation(Self self, bool live) {
  const auto& st = self->state;
  auto out = st.journal ? st.journal->to_json() : nlohmann::json::object();
  out["workflow"] = st.init.graph->workflow;
  out["id"] = st.init.id;
  out["live"] = live;
  return out;
}

// Ends the actor; its journal stays readable for a while (RunRecords).
void finish(Self self) {
  const auto& svc = svc_of(self);
  auto& st = self->state;
  if (st.journal && svc.records)
    svc.records->keep(st.init.key,
                      RunRecords::Run{std::move(st.journal), st.init.graph->workflow, st.init.id},
                      svc.time->now());
  self->quit();
}

// Retiring: abandons the branches (their fills are cancelled, their shadows discarded) and
// ends once nothing is in flight. Idempotent: it runs again each time a call is answered.
void retire(Self self) {
  auto& st = self->state;
  st.retiring = true;
  for (const auto& [id, actor] : st.branches)
    self->send(actor, abandon_atom::value);
  st.branches.clear();
  if (st.flow->idle()) finish(self);
}

// A call no fill or library entry served although one might have (the journal's reasons that
// a template or a client can act on): `RuntimeConfig::on_near_miss` hears of it.
bool near_miss(const run::Why& why) {
  using R = run::MissReason;
  switch (why.reason) {
    case R::not_reusable:
    case R::not_downstream:
    case R::no_branch:
    case R::no_candidates:
    case R::unresolved:
      return !why.template_diff.empty();
    default:
      return true;
  }
}

// Tells `RuntimeConfig::on_near_miss` of the journal's call `id`, if it is a near miss.
void tell_near_miss(Self self, std::uint64_t id) {
  auto& st = self->state;
  const auto& svc = svc_of(self);
  if (!svc.on_near_miss || !st.journal) return;
  const auto* c = st.journal->call(id);
  if (!c || !c->why || !near_miss(*c->why)) return;
  auto e = explanation(self, true);
  for (auto& call : e["calls"])
    if (call["seq"] == c->seq) {
      svc.on_near_miss(nlohmann::json{{"workflow", st.init.graph->workflow},
                                      {"id", st.init.id},
                                      {"tenant", st.init.caller.tenant},
                                      {"call", call}});
      return;
    }
}

// Carries out what the run's state says: abandon, resolve, open branches.
void apply(Self self, RunEffects fx) {
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
        self->send(it->second, resolve_atom::value, r.outcome, r.value);
    } else if (r.outcome == branch::Outcome::selected) {
      // No branch (fills off, or nothing to fill): the frequency predictor still learns.
      self->send(svc.pricing, learn_atom::value,
                 Resolution{0, st.init.graph->decisions[r.decision].coordinate, r.value,
                            std::nullopt, false});
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

void carry_out(Self self, DemandEffects fx);

// Asks `to` and feeds its answer (or nullopt when none comes) back into the flow.
template <class Reply, class Event, class... Ts>
void ask(Self self, const caf::actor& to, Event event, Ts&&... msg) {
  self->request(to, infinite, std::forward<Ts>(msg)...)
      .then([=](Reply& r) { carry_out(self, event(self->state.flow.get(), std::move(r))); },
            [=](error&) { carry_out(self, event(self->state.flow.get(), std::nullopt)); });
}

// Runs the demand's own request on its engine or tool.
void execute(Self self, const run::demand::Execute& e) {
  auto& st = self->state;
  const auto& svc = svc_of(self);
  const auto it = st.demands.find(e.id);
  if (it == st.demands.end()) return;
  const auto& d = *it->second;
  auto exec = std::make_shared<Exec>();
  exec->endpoint = d.request.endpoint;
  exec->body = d.request.body;
  exec->kind = engines::RequestKind::canonical;
  exec->id = "dynrt-" + st.init.id + "-" + std::to_string(e.id);
  exec->tenant = st.init.caller.tenant;
  exec->reply_to = self;
  exec->tag = e.id;
  if (d.sink->stream()) exec->stream_to = d.sink;
  exec->call = d.sink;
  // A deciding stage whose branch is open: read the selection as it is decoded.
  if (svc.policy.emission)
    if (const auto* stage = st.init.graph->stage(d.request.tags.stage);
        stage && stage->decides != dsl::kNoId && st.run->emission_target(stage->decides))
      exec->watch = std::make_shared<EmissionWatch>(st.init.graph, stage->decides,
                                                    exec->endpoint != "/v1/completions", self);
  auto executor = svc.executor_for(exec->endpoint, exec->body);
  if (!executor) return carry_out(self, st.flow->refused(e.id, no_executor_reply(exec->endpoint)));
  exec->cancel = std::make_shared<Cancellation>();
  st.executions[e.id] = exec->cancel;
  if (e.loads_engine) self->send(svc.pricing, canon_atom::value, std::int32_t{1});
  self->send(executor, exec_atom::value, ExecPtr(exec));
}

void answer(Self self, run::demand::Answer a) {
  auto& st = self->state;
  const auto it = st.demands.find(a.id);
  if (it == st.demands.end()) return;
  const auto& svc = svc_of(self);
  count_served(*svc.counters, a.reply.served);
  // Each stage a fill's result served counts, not only a branch's first (the one that judges it).
  if (a.reply.served == Served::fill) ++svc.counters->fills_consumed;
  if (st.journal)
    if (const auto* stage = st.init.graph->stage(it->second->request.tags.stage)) {
      st.journal->answered(a.id, *stage, it->second->request.body, a.reply.served, a.reply.status,
                           a.trace, st.run->vars(), run_ms(self));
      tell_near_miss(self, a.id);
    }
  it->second->sink->done(std::move(a.reply));  // which counts an error answer
  st.demands.erase(it);
  // Ends in a message of its own: the caller may still be in the middle of the answer's
  // bookkeeping.
  if (st.retiring && st.demands.empty()) self->send(self, stop_atom::value);
}

// Carries out what the demand flow decided, in order.
void carry_out(Self self, DemandEffects fx) {
  namespace rd = run::demand;
  using run::DemandFlow;
  auto& st = self->state;
  const auto& svc = svc_of(self);
  const auto csl = svc.csl;
  for (auto& effect : fx) {
    std::visit(
        [&](auto& e) {
          using E = std::decay_t<decltype(e)>;
          if constexpr (std::is_same_v<E, rd::Probe>) {
            ask<ServeReply>(
                self, csl,
                [id = e.id](DemandFlow* f, std::optional<ServeReply> r) {
                  return f->served(id, r);
                },
                serve_atom::value, e.name, e.query);
          } else if constexpr (std::is_same_v<E, rd::Claim>) {
            ask<ClaimReply>(
                self, csl,
                [id = e.id](DemandFlow* f, std::optional<ClaimReply> r) {
                  return f->claimed(id, std::move(r));
                },
                claim_atom::value, e.name, e.records, e.producers, e.may_join,
                actor_cast<actor>(self), e.id);
          } else if constexpr (std::is_same_v<E, rd::Execute>) {
            execute(self, e);
          } else if constexpr (std::is_same_v<E, rd::Cancel>) {
            if (auto it = st.executions.find(e.id); it != st.executions.end()) it->second->cancel();
          } else if constexpr (std::is_same_v<E, rd::Unload>) {
            self->send(svc.pricing, canon_atom::value, std::int32_t{-1});
          } else if constexpr (std::is_same_v<E, rd::Promote>) {
            if (auto it = st.fills.find(e.fill); it != st.fills.end())
              self->send(it->second.actor, promote_atom::value);
          } else if constexpr (std::is_same_v<E, rd::Store>) {
            auto event = [id = e.id](DemandFlow* f, std::optional<csl::InsertResult> r) {
              return f->stored(id, r);
            };
            if (e.execution == 0)
              ask<csl::InsertResult>(self, csl, event, store_atom::value, e.insert, false);
            else
              ask<csl::InsertResult>(self, csl, event, land_atom::value, e.execution, e.landed,
                                     e.insert);
          } else if constexpr (std::is_same_v<E, rd::Land>) {
            // Anonymous: the library's answer (the insert's outcome) is of no use here.
            anon_send(csl, land_atom::value, e.execution, e.landed, InsertPtr());
          } else if constexpr (std::is_same_v<E, rd::Leave>) {
            self->send(csl, leave_atom::value, e.execution, e.ticket);
          } else if constexpr (std::is_same_v<E, rd::Write>) {
            // The answer waits for the write either way: a failed write is the graph stopping.
            self->request(csl, infinite, write_atom::value, e.records)
                .then(
                    [self, id = e.id](const WriteResult&) {
                      carry_out(self, self->state.flow->written(id));
                    },
                    [self, id = e.id](error&) { carry_out(self, self->state.flow->written(id)); });
          } else if constexpr (std::is_same_v<E, rd::Answer>) {
            answer(self, std::move(e));
          } else if constexpr (std::is_same_v<E, rd::Branches>) {
            apply(self, std::move(e.effects));
          } else if constexpr (std::is_same_v<E, rd::Demanded>) {
            if (auto it = st.branches.find(e.branch); it != st.branches.end())
              self->send(it->second, demanded_atom::value, e.consumed, e.saved_ms, e.waited_ms,
                         e.judged);
          } else if constexpr (std::is_same_v<E, rd::Credit>) {
            self->send(svc.pricing, credit_atom::value, e.branch, e.saved_ms, e.waited_ms);
          } else if constexpr (std::is_same_v<E, rd::ArmWait>) {
            svc.post_at(e.at, self, waitend_atom::value, e.id, e.wait);
          } else if constexpr (std::is_same_v<E, rd::Cost>) {
            self->send(svc.pricing, cost_atom::value, e.sample);
          }
        },
        effect);
  }
  const auto tally = st.flow->take_tally();
  auto& c = *svc.counters;
  c.waits += tally.waits;
  c.wait_timeouts += tally.wait_timeouts;
  c.hedge_fills += tally.hedge_fills;
  c.coalesced += tally.coalesced;
  c.saved_us += std::chrono::duration_cast<std::chrono::microseconds>(tally.saved).count();
}

void on_demand(Self self, const DemandPtr& d) {
  auto& st = self->state;
  ++st.received;
  const dsl::Stage* stage = st.init.graph->stage(d->request.tags.stage);
  if (st.journal) {
    if (st.received == 1) st.started = svc_of(self).time->now();
    st.journal->arrived(d->id, d->request.tags.stage, d->request.endpoint, run_ms(self));
  }
  if (!stage || stage->kind == dsl::StageKind::user) {
    if (st.journal) st.journal->passed(d->id, !stage);
    if (!stage) {
      if (const auto m = run::misdirected_stage(d->request.tags, *st.init.graph))
        svc_of(self).misdirected->notice(*m);
      tell_near_miss(self, d->id);
    }
    forward(svc_of(self), d->request, d->sink);
    return;
  }
  st.demands.emplace(d->id, d);
  carry_out(self, st.flow->start(d->id, *stage, d->request.endpoint,
                                 std::shared_ptr<const nlohmann::json>(d, &d->request.body),
                                 d->request.wire));
}

behavior workflow_actor(Self self, WorkflowInit init) {
  auto& st = self->state;
  st.init = std::move(init);
  const auto& svc = *st.init.services;
  st.run = std::make_unique<run::WorkflowRun>(st.init.graph, svc.policy.fills);
  st.flow = std::make_unique<run::DemandFlow>(
      *st.run, *svc.time, run::DemandFlow::Config{svc.policy, st.init.caller, st.init.key});
  if (svc.policy.explain) st.journal = std::make_shared<run::RunJournal>(st.init.graph, svc.policy);
  self->set_error_handler([](error&) {});  // stray errors (a dead engine's) end nothing
  ++svc.counters->workflows_live;
  // However it ends, the root learns it (and frees the run's key if it still holds it).
  self->attach_functor([counters = svc.counters, root = caf::actor_addr(st.init.root.address()),
                        key = st.init.key, id = self->id()](const error&) {
    --counters->workflows_live;
    if (auto r = caf::actor_cast<caf::actor>(root)) anon_send(r, gone_atom::value, key, id);
  });
  return {
      [=](demand_atom, const DemandPtr& d) { on_demand(self, d); },
      [=](engdone_atom, std::uint64_t id, const ExecResultPtr& r) {
        auto& s = self->state;
        s.executions.erase(id);
        carry_out(self, s.flow->executed(id, *r));
        // A cancelled execution of an answered demand may be the last thing a retiring run
        // waited for.
        if (s.retiring && s.flow->idle()) self->send(self, stop_atom::value);
      },
      [=](coaldone_atom, std::uint64_t id, const LandedPtr& l) {
        carry_out(self, self->state.flow->landed(id, *l));
      },
      [=](std::uint64_t) {},  // an engine handle (canonical requests are not cancelled here)
      [=](announce_atom, const Hash128& name, std::uint64_t fill, const FillRenderPtr& render) {
        auto& s = self->state;
        if (render && s.journal) s.journal->rendered(*render);
        auto& f = s.fills[fill];
        f.actor = actor_cast<actor>(self->current_sender());
        ++f.announced;
        carry_out(self, s.flow->fill_started(name, fill));
      },
      [=](bnote_atom, const BranchNotePtr& note) {
        if (self->state.journal) self->state.journal->branch(*note);
      },
      [=](explain_atom) { return explanation(self, true); },
      [=](fend_atom, const Hash128& name, std::uint64_t fill, bool stored) {
        auto& s = self->state;
        if (auto it = s.fills.find(fill); it != s.fills.end() && --it->second.announced <= 0)
          s.fills.erase(it);
        carry_out(self, s.flow->fill_ended(name, fill, stored));
      },
      [=](emitted_atom, std::uint64_t decision, const std::string& selection, bool decoding) {
        auto& s = self->state;
        if (!decoding) ++svc_of(self).counters->emissions;
        if (const auto b = s.run->emission_target(static_cast<dsl::DecisionId>(decision)))
          if (const auto it = s.branches.find(*b); it != s.branches.end())
            self->send(it->second, emitted_atom::value, selection, decoding);
      },
      [=](waitend_atom, std::uint64_t id, std::uint64_t wait) {
        carry_out(self, self->state.flow->wait_over(id, wait));
      },
      [=](settle_atom, std::uint64_t branch, const FeedbackPtr&) {
        self->state.run->settled(branch);
        self->state.branches.erase(branch);
      },
      // The root saw no demand for the idle time: the run is idle if nothing is in flight.
      [=](idle_atom) {
        auto& s = self->state;
        if (s.flow->idle()) self->send(s.init.root, idle_atom::value, s.init.key, s.received);
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

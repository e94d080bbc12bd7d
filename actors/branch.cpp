#include "actors/branch.hpp"

#include "actors/fill.hpp"
#include "runtime/json_text.hpp"
#include "runtime/predictor.hpp"

#include <algorithm>
#include <chrono>
#include <functional>

namespace dynrt::actors {

using namespace caf;
using branch::FillStatus;
using branch::Outcome;

namespace {

struct BranchActorState {
  BranchInitPtr init;
  std::unique_ptr<branch::BranchState> branch;
  std::map<branch::FillId, caf::actor> fills;
  std::vector<dsl::StageId> chain;
  TimePoint started{};
  bool gated_open = false;  // Action 0 opened it: the controller tracks it
  // Action 0 was asked: the branch settles with the pricing actor when it ends, however it
  // ends (settling there also returns any reservation of it still held).
  std::shared_ptr<bool> asked_gate = std::make_shared<bool>(false);
  std::shared_ptr<Cancellation> drafts = std::make_shared<Cancellation>();  // drafter samples
  // The deadlines it armed with the time service (the drafter's time box, the settle deadline),
  // each a token; disarmed when it ends, so nothing of it outlives it.
  std::shared_ptr<std::vector<std::uint64_t>> deadlines =
      std::make_shared<std::vector<std::uint64_t>>();
  bool settled = false;
  // drafter sampling
  std::vector<std::string> votes;
  int samples_out = 0;
  double draft_engine_ms = 0;      // engine time of the samples that answered
  double draft_prompt_tokens = 0;  // ... and the prompt tokens they had prefilled
  bool proposed = false;
  bool answered = false;  // Action 1's first answer came (its fills are known)
  run::BranchNote note;   // what `dynrt explain` learns of it
  static inline const char* name = "dynrt.branch";
};

using Self = stateful_actor<BranchActorState>*;

const dsl::Decision& decision_of(const BranchActorState& st) {
  return st.init->graph->decisions[st.init->decision];
}

// Tells the workflow the branch's state, for its journal (`dynrt explain`).
void report(Self self) {
  const auto& st = self->state;
  if (!st.init->services->policy.explain) return;
  self->send(st.init->workflow, bnote_atom::value,
             BranchNotePtr(std::make_shared<const run::BranchNote>(st.note)));
}

run::BranchNote::Candidate* noted(BranchActorState& st, std::uint64_t fill) {
  for (auto& c : st.note.candidates)
    if (c.fill == fill) return &c;
  return nullptr;
}

void maybe_settle(Self self, bool force = false) {
  auto& st = self->state;
  if (st.settled) return;
  if (!force && !st.branch->settleable()) return;
  const auto& svc = *st.init->services;
  // Whatever still runs (a forced settle) is cancelled, and its reservation returned now.
  for (const auto& f : st.branch->fills())
    if (f.status == FillStatus::running) {
      if (auto it = st.fills.find(f.id); it != st.fills.end())
        self->send(it->second, fcancel_atom::value);
      if (const auto res = st.branch->finished(f.id, FillStatus::cancelled, Duration{0}); res != 0)
        self->send(svc.pricing, release_atom::value, res);
    }
  st.settled = true;
  auto fb = std::make_shared<branch::Feedback>(st.branch->settle());
  ++svc.counters->branches_settled;
  // Engine time nobody consumed: every fill's, less the consumed winner's.
  double wasted = fb->fill_ms;
  if (fb->consumed)
    if (const auto* w = st.branch->winner())
      wasted -= std::chrono::duration<double, std::milli>(w->engine_time).count();
  if (wasted > 0) svc.counters->wasted_us += static_cast<std::int64_t>(wasted * 1000);
  // The pricing actor's settle is sent as the actor ends (branch_actor's attach_functor).
  self->send(st.init->workflow, settle_atom::value, st.branch->id(), FeedbackPtr(fb));
  self->quit();
}

// `Atom` to itself after `delay`, through the time service (which holds only its address).
template <class Atom>
void arm(Self self, Duration delay, Atom atom) {
  auto& st = self->state;
  const auto& svc = *st.init->services;
  st.deadlines->push_back(svc.post_at(svc.time->now() + delay, self, atom));
}

void spawn_fills(Self self, const AdmitReply& admitted, bool emitted = false) {
  auto& st = self->state;
  const auto& svc = *st.init->services;
  for (const auto& [rank, reservation] : admitted.admitted) {
    if (rank >= st.branch->candidates().size()) {
      self->send(svc.pricing, release_atom::value, reservation);
      continue;
    }
    if (st.branch->outrun(rank)) {  // the decider already emitted another selection
      self->send(svc.pricing, release_atom::value, reservation);
      continue;
    }
    const std::uint64_t id = svc.counters->next_id++;
    st.branch->admit(id, rank, reservation);
    auto init = std::make_shared<FillInit>();
    init->id = id;
    init->branch = st.branch->id();
    init->rank = rank;
    init->candidate = st.branch->candidates()[rank];
    init->graph = st.init->graph;
    init->decision = st.init->decision;
    init->chain = st.chain;
    init->bindings = st.init->bindings;
    init->bindings[decision_of(st).name] = init->candidate;
    init->producers = st.init->producers;
    init->producers.erase(decision_of(st).name);
    init->run = st.init->run;
    init->caller = st.init->caller;
    init->workflow = st.init->workflow;
    init->branch_actor = self;
    init->services = st.init->services;
    init->emitted = emitted;
    ++svc.counters->fills_issued;
    if (rank < st.note.candidates.size()) {
      st.note.candidates[rank].fill = id;
      st.note.candidates[rank].refused.reset();
      st.note.candidates[rank].status = FillStatus::running;
    }
    st.fills.emplace(id, spawn_fill_actor(self, std::move(init)));
  }
}

// Action 1's question for this branch: every candidate, each with its chain.
std::shared_ptr<AdmitRequest> admit_request(Self self) {
  auto& st = self->state;
  const auto& svc = *st.init->services;
  auto req = std::make_shared<AdmitRequest>();
  req->branch = st.branch->id();
  req->tenant = st.init->caller.tenant;
  req->fill_share = st.init->caller.fill_share;
  Hashes chain;
  for (const auto s : st.chain)
    chain.push_back(st.init->graph->stages[s].fingerprint);
  req->chains.assign(st.branch->candidates().size(), chain);
  req->max_fills = decision_of(st).limits.max_fills;
  if (svc.policy.fanout >= 0) req->max_fills = std::min(req->max_fills, svc.policy.fanout);
  return req;
}

// Asks Action 1 and starts the fills it admits (or returns them, if the branch moved on).
void admit(Self self, std::shared_ptr<AdmitRequest> req) {
  const auto& svc = *self->state.init->services;
  const bool emitted = req->emitted.has_value();
  self->request(svc.pricing, infinite, admit_atom::value, AdmitRequestPtr(std::move(req)))
      .then(
          [=](AdmitReply& reply) {
            if (!emitted) {
              self->state.answered = true;
              auto& cands = self->state.note.candidates;
              for (std::size_t r = 0; r < reply.refused.size() && r < cands.size(); ++r)
                if (cands[r].fill == 0 && reply.refused[r] != admission::Refusal::none)
                  cands[r].refused = reply.refused[r];
            }
            if (self->state.branch->phase() == branch::Phase::filling) {
              if (emitted) svc.counters->fills_emitted += reply.admitted.size();
              spawn_fills(self, reply, emitted);
              report(self);
            } else {
              for (const auto& [rank, res] : reply.admitted)
                self->send(svc.pricing, release_atom::value, res);
            }
            maybe_settle(self);
          },
          [=](error&) {
            if (!emitted) self->state.answered = true;
            maybe_settle(self);
          });
}

// Eq. 4's setup charge: the time until the candidates, and any drafting's engine time.
void charge_setup(Self self, Duration setup) {
  const auto& st = self->state;
  self->send(st.init->services->pricing, setup_atom::value, st.branch->id(),
             static_cast<std::int64_t>(setup.count()), st.draft_engine_ms, st.draft_prompt_tokens);
}

// Asks Action 0 whether this branch is worth predicting and filling, and calls `on_open` if
// it is. A closed branch runs nothing more; it settles once resolved.
void ask_gate(Self self, std::function<void()> on_open) {
  auto& st0 = self->state;
  const auto& svc = *st0.init->services;
  ++svc.counters->branches_opened;
  *st0.asked_gate = true;
  self->request(svc.pricing, infinite, gate_atom::value, st0.branch->id(), st0.branch->coordinate(),
                st0.branch->exclusive())
      .then(
          [=](GateReply& gate) {
            auto& st = self->state;
            st.note.gate = gate.open ? run::BranchNote::Gate::open : run::BranchNote::Gate::closed;
            st.note.gate_reason = std::string(admission::to_string(gate.reason));
            report(self);
            if (!gate.open) {
              ++svc.counters->branches_gated;
              return maybe_settle(self);
            }
            st.gated_open = true;
            on_open();
          },
          [=](error&) { maybe_settle(self); });
}

// The ranking is in. A drafter's branch passed Action 0 before drafting; any other asks it
// now, when there is something to fill. Then Action 1.
void proposed(Self self, std::vector<std::string> candidates) {
  auto& st0 = self->state;
  if (st0.proposed) return;
  st0.proposed = true;
  const auto setup = st0.init->services->time->now() - st0.started;
  st0.branch->propose(std::move(candidates), setup);
  st0.note.proposed = true;
  for (const auto& c : st0.branch->candidates())
    st0.note.candidates.push_back({c, 0, std::nullopt, FillStatus::running});
  const auto charge_and_admit = [=] {
    auto& st = self->state;
    charge_setup(self, setup);
    if (st.branch->phase() != branch::Phase::filling || st.branch->candidates().empty())
      return maybe_settle(self);
    admit(self, admit_request(self));
  };
  if (st0.gated_open) return charge_and_admit();  // the drafting was its setup
  if (st0.branch->candidates().empty() || st0.branch->phase() != branch::Phase::filling) {
    report(self);
    return maybe_settle(self);  // nothing to fill (settles once resolved)
  }
  ask_gate(self, charge_and_admit);
}

void draft(Self self) {
  auto& st = self->state;
  const auto& d = decision_of(st);
  const auto& src = d.candidates;
  const auto& svc = *st.init->services;
  const auto first = dsl::render_draft(src, st.init->bindings, 0);
  if (!first) return proposed(self, {});
  const auto executor = svc.executor_for(first->endpoint, first->body);
  if (!executor) return proposed(self, {});
  const int n = std::max(1, src.samples);
  for (int i = 0; i < n; ++i) {
    auto exec = std::make_shared<Exec>();
    exec->endpoint = first->endpoint;
    exec->body = dsl::draft_sample(*first, i).body;
    exec->kind = engines::RequestKind::fill;
    exec->priority = svc.policy.fill_priority;
    exec->id = "dynrt-draft-" + std::to_string(st.branch->id()) + "-" + std::to_string(i);
    exec->tenant = st.init->caller.tenant;
    exec->reply_to = self;
    exec->tag = static_cast<std::uint64_t>(i);
    exec->cancel = st.drafts;
    anon_send(executor, exec_atom::value, ExecPtr(exec));
    ++svc.counters->draft_samples;
  }
  st.samples_out = n;
  arm(self, std::chrono::milliseconds(std::max(1, src.timeout_ms)), timebox_atom::value);
}

void propose(Self self) {
  auto& st = self->state;
  const auto& d = decision_of(st);
  const auto& src = d.candidates;
  PredictorContext ctx;
  ctx.vocabulary = src.values;
  ctx.max = static_cast<std::size_t>(std::max(0, src.max));
  switch (src.kind) {
    case dsl::CandidateSourceKind::static_list:
      return proposed(self, StaticPredictor().rank(d.coordinate, ctx));
    case dsl::CandidateSourceKind::extract:
      if (st.init->source_output)
        ctx.observed = dsl::extract_candidates(src, *st.init->source_output);
      return proposed(self, FromOutputPredictor().rank(d.coordinate, ctx));
    case dsl::CandidateSourceKind::learned:
      self->request(st.init->services->pricing, infinite, rank_atom::value, d.coordinate,
                    std::make_shared<const PredictorContext>(std::move(ctx)))
          .then([=](Strings& ranked) { proposed(self, std::move(ranked)); },
                [=](error&) { proposed(self, {}); });
      return;
    case dsl::CandidateSourceKind::drafter:
      // Action 0 first: refusing to draft is the only way to save the drafter's engine time.
      return ask_gate(self, [=] {
        if (!self->state.proposed) draft(self);  // unless the decider already resolved it
      });
  }
}

void drafted(Self self) {
  auto& st = self->state;
  st.drafts->cancel();  // at the time box: the samples still out would rank nothing now
  const auto& d = decision_of(st);
  PredictorContext ctx;
  ctx.observed = st.votes;
  ctx.max = static_cast<std::size_t>(std::max(0, d.candidates.max));
  proposed(self, DrafterPredictor().rank(d.coordinate, ctx));
}

behavior branch_actor(Self self, BranchInitPtr init) {
  auto& st0 = self->state;
  st0.init = init;
  const auto& d = init->graph->decisions[init->decision];
  st0.branch = std::make_unique<branch::BranchState>(init->id, d.coordinate,
                                                     d.promotion == dsl::Promotion::exclusive);
  st0.chain = run::fill_chain(*init->graph, d, init->services->policy.fill_depth);
  st0.started = init->services->time->now();
  st0.note.branch = init->id;
  st0.note.decision = init->decision;
  self->attach_functor([asked = st0.asked_gate, drafts = st0.drafts, deadlines = st0.deadlines,
                        pricing = caf::actor_addr(init->services->pricing.address()),
                        time = init->services->time, id = init->id](const error&) {
    drafts->cancel();  // samples still running are of no use now
    for (const auto token : *deadlines)
      time->disarm(token);
    if (*asked)
      if (auto p = caf::actor_cast<caf::actor>(pricing)) anon_send(p, settle_atom::value, id);
  });
  // A fill that dies abnormally is a failed fill, not a reason for the branch to die; an exit
  // from the workflow (shutdown) ends the branch with it.
  self->set_exit_handler([=](exit_msg& msg) {
    if (msg.source == self->state.init->workflow.address()) {
      maybe_settle(self, true);  // returns the reservations of fills still running
      return self->quit(msg.reason);
    }
    for (auto& [id, a] : self->state.fills)
      if (a.address() == msg.source && msg.reason) {
        if (const auto res = self->state.branch->finished(id, FillStatus::failed, Duration{0}))
          self->send(self->state.init->services->pricing, release_atom::value, res);
        maybe_settle(self);
      }
  });
  self->set_error_handler([](error&) {});
  self->send(self, kickoff_atom::value);
  return {
      [=](kickoff_atom) { propose(self); },
      // drafter samples
      [=](engdone_atom, std::uint64_t, const ExecResultPtr& r) {
        auto& st = self->state;
        if (r->ok) {
          const auto us =
              std::chrono::duration_cast<std::chrono::microseconds>(r->result.engine_time).count();
          st.init->services->counters->drafting_us += us;
          st.draft_engine_ms += static_cast<double>(us) / 1000;
          st.draft_prompt_tokens += static_cast<double>(r->result.usage.prompt_tokens);
        }
        if (st.proposed) return;
        if (r->ok) {
          const auto doc = parse_json(r->result.body);
          if (!doc.is_discarded()) {
            const auto sel = dsl::read_selection(decision_of(st), doc);
            if (sel.status == dsl::SelectionResult::Status::selected) st.votes.push_back(sel.value);
          }
        }
        if (--st.samples_out <= 0) drafted(self);
      },
      [=](fstored_atom, std::uint64_t fill, const csl::EntryRef& ref) {
        auto& st = self->state;
        if (!st.branch->stored(fill, ref))
          self->send(st.init->services->csl, drop_atom::value, EntryRefs{ref});
      },
      [=](fdone_atom, std::uint64_t fill, FillStatus status, std::int64_t engine_ns,
          std::int64_t unfinished_ns) {
        auto& st = self->state;
        // Counted once, with the engine time the branch records (not for a fill it already
        // wrote off when it settled early).
        const bool recorded = std::any_of(
            st.branch->fills().begin(), st.branch->fills().end(),
            [&](const auto& f) { return f.id == fill && f.status == FillStatus::running; });
        if (recorded)
          st.init->services->counters->unfinished_us +=
              std::chrono::duration_cast<std::chrono::microseconds>(Duration(unfinished_ns))
                  .count();
        if (auto* c = noted(st, fill)) {
          c->status = status;
          report(self);
        }
        if (const auto res = st.branch->finished(fill, status, Duration(engine_ns))) {
          // Its whole chain came from the library: no engine work, so no price to charge.
          if (status == FillStatus::done && engine_ns == 0)
            self->send(st.init->services->pricing, refund_atom::value, res);
          self->send(st.init->services->pricing, release_atom::value, res);
        }
        st.fills.erase(fill);
        maybe_settle(self);
      },
      [=](resolve_atom, Outcome outcome, const std::string& selection) {
        auto& st = self->state;
        const auto& svc = *st.init->services;
        if (!st.proposed) {
          // Resolved before the predictor answered (a fast decider): nothing to fill. A
          // drafter that ran is still charged its time.
          st.proposed = true;
          const auto setup = svc.time->now() - st.started;
          st.branch->propose({}, setup);
          st.drafts->cancel();
          if (st.gated_open) charge_setup(self, setup);
        }
        const auto res = st.branch->resolve(outcome, selection);
        st.note.outcome = res.outcome;
        st.note.selection = selection;
        report(self);
        for (const auto id : res.cancel)
          if (auto it = st.fills.find(id); it != st.fills.end())
            self->send(it->second, fcancel_atom::value);
        if (!res.discard.empty()) self->send(svc.csl, drop_atom::value, EntryRefs(res.discard));
        const bool readable =
            res.outcome == Outcome::selected || res.outcome == Outcome::unpredicted;
        if (readable)
          self->send(svc.pricing, learn_atom::value,
                     Resolution{st.branch->id(), st.branch->coordinate(), selection,
                                res.selected_rank, st.gated_open});
        arm(self, svc.policy.settle_after, settleby_atom::value);
        maybe_settle(self);
      },
      // Resolve on emission: the decider's selection showed before its output ended
      // (`decoding`: and its decode has gone on past it).
      [=](emitted_atom, const std::string& selection, bool decoding) {
        auto& st = self->state;
        const auto& svc = *st.init->services;
        if (!decoding) {
          for (const auto id : st.branch->emitted(selection))
            if (auto it = st.fills.find(id); it != st.fills.end()) {
              ++svc.counters->fills_outrun;
              self->send(it->second, fcancel_atom::value);
            }
          return;
        }
        // The winner has no fill (Action 1 did not admit it, or no candidate named it) and the
        // decode goes on: start one now, at p = 1, for the call the caller is about to make.
        // Only in a branch Action 0 opened, and not while Action 1's first answer is still out
        // (its fills are not known).
        if (!st.gated_open || !st.answered || st.branch->phase() != branch::Phase::filling) return;
        auto rank = st.branch->uncovered(selection);
        if (!rank && (rank = st.branch->adopt(selection)))
          st.note.candidates.push_back({selection, 0, std::nullopt, FillStatus::running});
        if (!rank) return;
        auto req = admit_request(self);
        req->emitted = *rank;
        admit(self, std::move(req));
      },
      [=](demanded_atom, bool consumed, double saved_ms, double wait_ms, bool judged) {
        auto& st = self->state;
        const auto& svc = *st.init->services;
        st.branch->demanded(consumed, saved_ms, wait_ms);
        if (const auto* w = st.branch->winner()) {
          if (st.gated_open && judged)
            self->send(svc.pricing, usable_atom::value, st.branch->id(),
                       static_cast<std::uint64_t>(w->rank), consumed, saved_ms, wait_ms);
        }
        maybe_settle(self);
      },
      [=](abandon_atom) {
        auto& st = self->state;
        if (st.branch->phase() != branch::Phase::resolved) {
          // Never resolved: nothing of it may ever be promoted.
          std::vector<csl::EntryRef> all;
          for (const auto& f : st.branch->fills())
            all.insert(all.end(), f.shadows.begin(), f.shadows.end());
          if (!all.empty()) self->send(st.init->services->csl, drop_atom::value, EntryRefs(all));
        }
        maybe_settle(self, true);
      },
      // The drafter's time box: rank what the samples gave so far.
      [=](timebox_atom) {
        if (!self->state.proposed) drafted(self);
      },
      [=](settleby_atom) { maybe_settle(self, true); },
  };
}

}  // namespace

caf::actor spawn_branch_actor(event_based_actor* parent, BranchInitPtr init) {
  return parent->spawn<linked>(branch_actor, std::move(init));
}

}  // namespace dynrt::actors

#include "actors/fill.hpp"

#include "run/fill_chain.hpp"

#include <optional>
#include <utility>

namespace dynrt::actors {

using namespace caf;
using branch::FillStatus;
using run::FillChain;
using run::FillEffects;

namespace {

struct FillState {
  FillInitPtr init;
  std::unique_ptr<FillChain> chain;
  // Aborts the engine requests this fill started; cancelled when the actor ends, however it
  // ends (a cancel, its branch's or the graph's exit), so no fill outlives its actor on the
  // engine.
  std::shared_ptr<Cancellation> cancel = std::make_shared<Cancellation>();
  // Raises its engine requests to canonical priority once a call waits for its result.
  std::shared_ptr<Promotion> promotion;
  // Engine time of requests that ended without a result (failed, or cancelled while running):
  // no engine reports it, so it is the wall time on the graph's clock from the request's start,
  // as a URL engine's own engine time is.
  std::optional<TimePoint> executing_since;
  Duration unfinished{0};
  static inline const char* name = "dynrt.fill";
};

using Self = stateful_actor<FillState>*;

void carry_out(Self self, FillEffects fx);

// Asks the library and feeds its answer (or nullopt when none comes) back into the chain.
template <class Reply, class Event, class... Ts>
void ask_csl(Self self, Event event, Ts&&... msg) {
  self->request(self->state.init->services->csl, infinite, std::forward<Ts>(msg)...)
      .then([=](Reply& r) { carry_out(self, event(*self->state.chain, std::move(r))); },
            [=](error&) { carry_out(self, event(*self->state.chain, std::nullopt)); });
}

// Carries out what the chain decided, in order; the actor ends once the chain has finished
// (its exit aborts an engine request still running, FillState::cancel).
void carry_out(Self self, FillEffects fx) {
  using namespace run::fill;
  const auto init = self->state.init;
  const auto& svc = *init->services;
  for (auto& effect : fx) {
    std::visit(
        [&](auto& e) {
          using E = std::decay_t<decltype(e)>;
          if constexpr (std::is_same_v<E, Announce>) {
            FillRenderPtr render;
            if (svc.policy.explain)
              render = std::make_shared<const run::FillRender>(run::FillRender{
                  init->id, init->branch, init->candidate, e.stage, e.name, std::move(e.body)});
            self->send(init->workflow, announce_atom::value, e.name, init->id, render);
          } else if constexpr (std::is_same_v<E, Ended>) {
            self->send(init->workflow, fend_atom::value, e.name, init->id, e.stored);
          } else if constexpr (std::is_same_v<E, Probe>) {
            ask_csl<ServeReply>(
                self, [](FillChain& c, std::optional<ServeReply> r) { return c.served(r); },
                serve_atom::value, e.name, e.query);
          } else if constexpr (std::is_same_v<E, Snapshot>) {
            ask_csl<run::ReadSnapshot>(
                self,
                [](FillChain& c, std::optional<run::ReadSnapshot> r) {
                  return c.snapshotted(std::move(r));
                },
                snap_atom::value, e.records);
          } else if constexpr (std::is_same_v<E, Execute>) {
            auto exec = std::make_shared<Exec>();
            exec->endpoint = std::move(e.endpoint);
            exec->body = std::move(e.body);
            exec->kind = engines::RequestKind::fill;
            // An emitted winner's fill runs as the canonical call it anticipates would (0), and
            // so does one a call already waits for.
            const auto& promotion = self->state.promotion;
            exec->priority = init->emitted || promotion->promoted() ? 0 : svc.policy.fill_priority;
            exec->promotion = promotion;
            exec->id = "dynrt-fill-" + std::to_string(init->id) + "-" +
                       std::to_string(self->state.chain->step());
            exec->tenant = init->caller.tenant;
            exec->reply_to = self;
            exec->tag = e.tag;
            exec->cancel = self->state.cancel;
            const auto executor = svc.executor_for(exec->endpoint, exec->body);
            if (!executor) return carry_out(self, self->state.chain->unroutable());
            self->state.executing_since = svc.time->now();
            // Anonymous: the engine's handle is not needed (exec->cancel aborts the request).
            // The completion comes as (engdone_atom, tag, result).
            anon_send(executor, exec_atom::value, ExecPtr(exec));
          } else if constexpr (std::is_same_v<E, Store>) {
            ask_csl<csl::InsertResult>(
                self, [](FillChain& c, std::optional<csl::InsertResult> r) { return c.stored(r); },
                store_atom::value, e.insert, true);
          } else if constexpr (std::is_same_v<E, Kept>) {
            ++svc.counters->shadows_stored;
            // The branch decides whether it may stay (a loser's goes).
            self->send(init->branch_actor, fstored_atom::value, init->id, e.ref);
          } else if constexpr (std::is_same_v<E, Drop>) {
            self->send(svc.csl, drop_atom::value, EntryRefs{e.ref});
          } else if constexpr (std::is_same_v<E, Suppressed>) {
            ++svc.counters->fills_suppressed;
          } else if constexpr (std::is_same_v<E, Cost>) {
            self->send(svc.pricing, cost_atom::value, e.sample);
          } else if constexpr (std::is_same_v<E, Finish>) {
            count_finished(*svc.counters, e.status);
            auto& st = self->state;
            if (st.executing_since) {  // cancelled while its request ran
              st.unfinished += svc.time->now() - *st.executing_since;
              st.executing_since.reset();
            }
            self->send(init->branch_actor, fdone_atom::value, init->id, e.status,
                       static_cast<std::int64_t>((e.engine_time + st.unfinished).count()),
                       static_cast<std::int64_t>(st.unfinished.count()));
          }
        },
        effect);
  }
  if (self->state.chain->finished()) self->quit();
}

behavior fill_actor(Self self, FillInitPtr init) {
  auto& st = self->state;
  st.init = init;
  const auto& svc = *init->services;
  // Aliasing: the count keeps the counters alive as long as a request may still promote.
  st.promotion = std::make_shared<Promotion>(
      std::shared_ptr<std::atomic<std::uint64_t>>(svc.counters, &svc.counters->fills_requeued));
  st.chain = std::make_unique<FillChain>(
      FillChain::Config{init->id, init->branch, init->graph, init->chain, init->bindings,
                        init->producers, svc.policy, init->caller, init->run});
  self->set_error_handler([](error&) {});
  ++svc.counters->fills_running;
  self->attach_functor([cancel = st.cancel, counters = svc.counters](const error&) {
    cancel->cancel();
    --counters->fills_running;
  });
  self->send(self, kickoff_atom::value);  // start once the behavior is installed
  return {
      [=](kickoff_atom) { carry_out(self, self->state.chain->start()); },
      [=](fcancel_atom) { carry_out(self, self->state.chain->cancel()); },
      [=](promote_atom) {
        auto& promotion = *self->state.promotion;
        if (promotion.promoted()) return;
        ++self->state.init->services->counters->fills_promoted;
        promotion.promote();
      },
      [=](engdone_atom, std::uint64_t tag, const ExecResultPtr& r) {
        auto& s = self->state;
        if (s.executing_since && tag == s.chain->tag()) {
          if (!r->ok) s.unfinished += s.init->services->time->now() - *s.executing_since;
          s.executing_since.reset();
        }
        carry_out(self, s.chain->executed(tag, *r));
      },
  };
}

}  // namespace

caf::actor spawn_fill_actor(event_based_actor* parent, FillInitPtr init) {
  return parent->spawn<linked>(fill_actor, std::move(init));
}

}  // namespace dynrt::actors

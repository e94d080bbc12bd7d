#include "actors/fill.hpp"

#include "runtime/reuse_name.hpp"

#include <chrono>

namespace dynrt::actors {

using namespace caf;
using branch::FillStatus;

namespace {

struct FillState {
  FillInitPtr init;
  dsl::Bindings vars;
  Producers producers;
  std::size_t step = 0;
  bool cancelled = false;
  bool finished = false;
  bool busy_in_csl = false;          // a library call is pending; a cancel waits for it
  std::optional<Hash128> announced;  // the stage's reuse name the workflow knows is running
  // Aborts the engine requests this fill started; cancelled when the actor ends, however it
  // ends (a cancel, its branch's or the graph's exit), so no fill outlives its actor on the
  // engine.
  std::shared_ptr<Cancellation> cancel = std::make_shared<Cancellation>();
  std::uint64_t tag = 0;
  std::function<void(const ExecResultPtr&)> on_result;  // the completion of request `tag`
  Duration engine_time{0};
  static inline const char* name = "dynrt.fill";
};

using Self = stateful_actor<FillState>*;

Duration ttl_of(const dsl::Decision& d, const dsl::Stage& s) {
  const double seconds = s.ttl_s ? *s.ttl_s : d.limits.ttl_s;
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(seconds));
}

std::vector<csl::EntryRef> producers_of(const dsl::Stage& s, const Producers& producers) {
  std::vector<csl::EntryRef> out;
  for (const auto& var : s.uses) {
    const auto it = producers.find(var);
    if (it == producers.end()) continue;
    if (std::find(out.begin(), out.end(), it->second) == out.end()) out.push_back(it->second);
  }
  return out;
}

void end_announced(Self self, bool stored) {
  auto& st = self->state;
  if (!st.announced) return;
  self->send(st.init->workflow, fend_atom::value, *st.announced, st.init->id, stored);
  st.announced.reset();
}

void finish(Self self, FillStatus status) {
  auto& st = self->state;
  if (st.finished) return;
  st.finished = true;
  end_announced(self, false);
  st.on_result = nullptr;
  auto& c = *st.init->services->counters;
  switch (status) {
    case FillStatus::done:
      ++c.fills_completed;
      break;
    case FillStatus::failed:
      ++c.fills_failed;
      break;
    case FillStatus::cancelled:
      ++c.fills_cancelled;
      break;
    case FillStatus::running:
      break;
  }
  self->send(st.init->branch_actor, fdone_atom::value, st.init->id,
             static_cast<std::int32_t>(status), static_cast<std::int64_t>(st.engine_time.count()));
  self->quit();  // its exit aborts an engine request still running (FillState::cancel)
}

void next_stage(Self self);

// A stage's result is in hand (from the engine or a library hit): bind its outputs and go on.
// The stage ended with `bytes` (`stored`: its shadow is in the library): its outputs feed the
// next stage, which is announced to the workflow *before* this one's end. A demand waiting for
// this stage is answered only after that end arrives, so the workflow knows of the next
// stage's fill before its caller can send the next stage's demand, which then waits for the
// fill instead of racing it to the engine.
void advance(Self self, const dsl::Stage& stage, const std::string& bytes, csl::EntryRef ref,
             bool stored) {
  auto& st = self->state;
  const auto ended = st.announced;
  st.announced.reset();
  const auto doc = nlohmann::json::parse(bytes, nullptr, false);
  if (!doc.is_discarded())
    if (auto outs = dsl::read_outputs(stage, doc)) {
      for (auto& [k, v] : *outs) {
        st.vars[k] = v;
        if (ref.valid()) st.producers[k] = ref;
      }
    }
  ++st.step;
  const auto init = st.init;  // next_stage() may finish, and the actor with it
  next_stage(self);
  if (ended) self->send(init->workflow, fend_atom::value, *ended, init->id, stored);
}

void run_on_engine(Self self, const dsl::Stage& stage, dsl::RenderedRequest req,
                   const Hash128& name) {
  auto& st0 = self->state;
  const auto& svc = *st0.init->services;
  st0.busy_in_csl = true;
  self->request(svc.csl, infinite, snap_atom::value,
                read_records(stage, req.reads, st0.init->caller))
      .then(
          [=](ReadRefs& reads) {
            auto& sx = self->state;
            sx.busy_in_csl = false;
            if (sx.cancelled) return finish(self, FillStatus::cancelled);
            auto exec = std::make_shared<Exec>();
            exec->endpoint = req.endpoint;
            exec->body = req.body;
            exec->kind = engines::RequestKind::fill;
            exec->priority = svc.switches.fill_priority;
            exec->id = "dynrt-fill-" + std::to_string(sx.init->id) + "-" + std::to_string(sx.step);
            exec->tenant = sx.init->caller.tenant;
            exec->reply_to = self;
            exec->tag = ++sx.tag;
            exec->cancel = sx.cancel;
            const auto executor = svc.executor_for(req.endpoint, req.body);
            if (!executor) return finish(self, FillStatus::failed);
            auto shared_reads = std::make_shared<ReadRefs>(std::move(reads));
            // Anonymous: the engine's handle is not needed (exec->cancel aborts the request).
            anon_send(executor, exec_atom::value, ExecPtr(exec));
            // The completion comes as (engdone_atom, tag, result).
            sx.on_result = [=](const ExecResultPtr& r) {
              auto& sy = self->state;
              // Only a normal completion becomes a shadow; anything else is a miss.
              if (!r->ok || !storable(req.endpoint, r->result))
                return finish(self, sy.cancelled ? FillStatus::cancelled : FillStatus::failed);
              sy.engine_time += r->result.engine_time;
              self->send(svc.pricing, cost_atom::value, stage.fingerprint,
                         static_cast<std::int64_t>(r->result.engine_time.count()),
                         static_cast<double>(r->result.usage.prompt_tokens +
                                             r->result.usage.completion_tokens));
              auto in = std::make_shared<csl::Insert>();
              in->name = name;
              in->bytes = r->result.body;
              in->usage = {static_cast<std::uint32_t>(r->result.usage.prompt_tokens),
                           static_cast<std::uint32_t>(r->result.usage.completion_tokens)};
              in->cost = r->result.engine_time;
              in->reads = *shared_reads;
              in->producers = producers_of(stage, sy.producers);
              in->provenance = {csl::Origin::fill, sy.init->id, sy.init->branch};
              const auto& d = sy.init->graph->decisions[sy.init->decision];
              in->ttl = ttl_of(d, stage);
              sy.busy_in_csl = true;
              self->request(svc.csl, infinite, store_atom::value, InsertPtr(in), true)
                  .then(
                      [=](csl::InsertResult& res) {
                        auto& st = self->state;
                        st.busy_in_csl = false;
                        const bool stored = res.status == csl::InsertStatus::stored;
                        if (stored) {
                          ++svc.counters->shadows_stored;
                          // The branch decides whether it may stay (a loser's goes).
                          self->send(st.init->branch_actor, fstored_atom::value, st.init->id,
                                     res.ref);
                        }
                        if (st.cancelled) {
                          if (stored) self->send(svc.csl, drop_atom::value, EntryRefs{res.ref});
                          return finish(self, FillStatus::cancelled);
                        }
                        if (stored || res.status == csl::InsertStatus::duplicate)
                          return advance(self, stage, in->bytes, res.ref, stored);
                        end_announced(self, false);
                        finish(self, FillStatus::failed);  // stale, no room
                      },
                      [=](error&) { finish(self, FillStatus::failed); });
            };
          },
          [=](error&) { finish(self, FillStatus::failed); });
}

void next_stage(Self self) {
  auto& st0 = self->state;
  if (st0.cancelled) return finish(self, FillStatus::cancelled);
  const auto& init = *st0.init;
  if (st0.step >= init.chain.size()) return finish(self, FillStatus::done);
  const dsl::Stage& stage = init.graph->stages[init.chain[st0.step]];
  auto rendered = dsl::render_stage(stage, st0.vars);
  // An unrenderable first stage is a failed fill; a later one just ends the chain.
  if (!rendered) return finish(self, st0.step == 0 ? FillStatus::failed : FillStatus::done);
  const Hash128 name = stage_name(init.services->switches, stage, rendered->endpoint,
                                  rendered->body, init.caller, init.run);
  st0.announced = name;
  self->send(init.workflow, fstart_atom::value, name, init.id);
  const auto& svc = *init.services;
  if (!svc.switches.reuse) return run_on_engine(self, stage, std::move(*rendered), name);
  st0.busy_in_csl = true;
  auto req = std::make_shared<dsl::RenderedRequest>(std::move(*rendered));
  self->request(svc.csl, infinite, serve_atom::value, name, true, false, true)
      .then(
          [=](ServeReply& hit) {
            auto& st = self->state;
            st.busy_in_csl = false;
            if (st.cancelled) return finish(self, FillStatus::cancelled);
            if (!hit.found) return run_on_engine(self, stage, std::move(*req), name);
            // Already in the library: nothing to run for this stage.
            if (st.step == 0) ++svc.counters->fills_suppressed;
            advance(self, stage, *hit.bytes, hit.ref, true);
          },
          [=](error&) { finish(self, FillStatus::failed); });
}

behavior fill_actor(Self self, FillInitPtr init) {
  self->state.init = init;
  self->state.vars = init->bindings;
  self->state.producers = init->producers;
  self->set_error_handler([](error&) {});
  ++init->services->counters->fills_running;
  self->attach_functor(
      [cancel = self->state.cancel, counters = init->services->counters](const error&) {
        cancel->cancel();
        --counters->fills_running;
      });
  self->send(self, fstart_atom::value);  // start once the behavior is installed
  return {
      [=](fstart_atom) { next_stage(self); },
      [=](fcancel_atom) {
        auto& st = self->state;
        st.cancelled = true;
        // A library call in flight finishes first (a shadow it stores must be discarded);
        // an engine request is aborted now.
        if (!st.busy_in_csl) finish(self, FillStatus::cancelled);
      },
      [=](engdone_atom, std::uint64_t tag, const ExecResultPtr& r) {
        auto& st = self->state;
        if (tag != st.tag || !st.on_result || st.finished) return;  // a stale completion
        auto f = std::move(st.on_result);
        st.on_result = nullptr;
        f(r);
      },
  };
}

}  // namespace

caf::actor spawn_fill_actor(event_based_actor* parent, FillInitPtr init) {
  return parent->spawn<linked>(fill_actor, std::move(init));
}

}  // namespace dynrt::actors

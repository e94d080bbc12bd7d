#include "actors/services.hpp"

#include "actors/reply.hpp"
#include "engines/completion.hpp"
#include "run/deadlines.hpp"
#include "runtime/predictor.hpp"
#include "runtime/reuse_name.hpp"
#include "runtime/tenancy.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace dynrt::actors {

using namespace caf;

// -- helpers shared by the actors ---------------------------------------------------------------

Hash128 stage_name(const Switches& switches, const dsl::Stage& stage, std::string_view endpoint,
                   const nlohmann::json& body, const Caller& caller, const std::string& run) {
  Hash128 name = reuse_name(stage.fingerprint, endpoint, body);
  if (stage.share == dsl::Share::tenant) name = tenancy::tenant_name(name, caller.tenant);
  if (!switches.private_fills) return name;
  Hasher128 h;
  h.add(name).add(run);
  return h.finish();
}

std::vector<std::string> read_records(const dsl::Stage& stage, const std::vector<std::string>& keys,
                                      const Caller& caller) {
  return tenancy::read_records(keys, caller.tenant, stage.share == dsl::Share::global);
}

std::vector<std::string> write_records(const std::vector<std::string>& keys, const Caller& caller) {
  // The default tenant is every deployment without keys: its writes reach every result, as
  // they did before tenants existed.
  return tenancy::write_records(keys, caller.tenant.empty()
                                          ? tenancy::WriteScope::all()
                                          : tenancy::WriteScope::of(caller.tenant));
}

bool reusable(const dsl::Stage& s) {
  return s.speculable && s.kind != dsl::StageKind::user && s.writes.empty();
}

bool storable(const std::string& endpoint, const engines::EngineResult& r) {
  if (r.status != 200 || !r.complete) return false;
  // A tool's output is whatever the tool returns: the call succeeding is all there is to check.
  if (endpoint.rfind("/v1/dynrt/tools/", 0) == 0) return true;
  return !engines::abnormal_completion(endpoint, r.body);
}

const dsl::SpeculationLimits& limits_of(const dsl::TemplateGraph&, const dsl::Decision& d) {
  return d.limits;  // compile_template() already merged the template's limits into it
}

std::vector<dsl::StageId> fill_chain(const dsl::TemplateGraph& g, const dsl::Decision& d) {
  std::vector<dsl::StageId> chain;
  const int max = std::max(1, limits_of(g, d).max_chain);
  for (const dsl::StageId s : d.downstream) {
    if (s >= g.stages.size() || !reusable(g.stages[s])) break;
    chain.push_back(s);
    if (static_cast<int>(chain.size()) >= max) break;
  }
  return chain;
}

caf::actor Services::executor_for(const std::string& endpoint, const nlohmann::json& body) const {
  if (endpoint.rfind("/v1/dynrt/tools/", 0) == 0) return tools;
  if (body.is_object()) {
    const auto it = body.find("model");
    if (it != body.end() && it->is_string()) {
      const auto m = by_model.find(it->get<std::string>());
      if (m != by_model.end()) return m->second;
    }
  }
  return default_engine;
}

// -- engine ---------------------------------------------------------------------------------------

namespace {

// The engine requests an engine actor has in flight, so that its end (shutdown) cancels them.
struct InFlight {
  std::mutex mutex;
  std::unordered_set<std::uint64_t> handles;
};

// Posts an engine's callbacks to the requesting actor (or answers a pass-through directly).
class ActorSink final : public engines::ResponseSink {
 public:
  explicit ActorSink(ExecPtr exec, std::shared_ptr<InFlight> in_flight = nullptr)
      : exec_(std::move(exec)), in_flight_(std::move(in_flight)) {}
  // Called once submit() returned the handle.
  void submitted(std::uint64_t handle) {
    if (!in_flight_ || handle == 0) return;
    std::lock_guard lock(in_flight_->mutex);
    handle_ = handle;
    if (!finished_) in_flight_->handles.insert(handle);
  }
  void on_chunk(std::string_view data) override {
    if (exec_->stream_to) exec_->stream_to->chunk(data);
    if (exec_->answer_to) exec_->answer_to->chunk(data);
  }
  void on_complete(engines::EngineResult result) override { complete(std::move(result), {}); }
  void complete(engines::EngineResult result, std::vector<std::string> writes) {
    auto r = std::make_shared<ExecResult>();
    r->ok = true;
    r->result = std::move(result);
    r->writes = std::move(writes);
    deliver(std::move(r));
  }
  void on_error(engines::EngineError error) override {
    auto r = std::make_shared<ExecResult>();
    r->error = std::move(error);
    deliver(std::move(r));
  }

 private:
  void deliver(std::shared_ptr<ExecResult> r) {
    if (in_flight_) {
      std::lock_guard lock(in_flight_->mutex);
      finished_ = true;  // possibly before submit() returned the handle
      if (handle_ != 0) in_flight_->handles.erase(handle_);
    }
    if (!exec_) return;
    if (exec_->answer_to) {
      Reply reply;
      if (r->ok) {
        reply.status = r->result.status;
        reply.body = std::move(r->result.body);
        reply.usage = r->result.usage;
        reply.finish_reason = r->result.finish_reason;
      } else {
        reply = error_reply(r->error);
      }
      exec_->answer_to->done(std::move(reply));
    }
    if (exec_->reply_to)
      anon_send(exec_->reply_to, engdone_atom::value, exec_->tag, ExecResultPtr(std::move(r)));
    exec_.reset();  // drop the actor handle: the engine may keep this sink a while
  }

 private:
  ExecPtr exec_;
  std::shared_ptr<InFlight> in_flight_;
  std::uint64_t handle_ = 0;
  bool finished_ = false;
};

}  // namespace

behavior engine_actor(event_based_actor* self, std::shared_ptr<engines::Engine> engine,
                      std::shared_ptr<engines::ToolEngine> tools) {
  auto in_flight = std::make_shared<InFlight>();
  // A requester that did not want the handle may answer it with an error; that is no reason
  // to end (the default error handler would quit).
  self->set_error_handler([](error&) {});
  // When the graph stops, what this actor started and nobody will read is aborted.
  self->attach_functor([engine, in_flight](const error&) {
    if (!engine) return;
    std::vector<std::uint64_t> handles;
    {
      std::lock_guard lock(in_flight->mutex);
      handles.assign(in_flight->handles.begin(), in_flight->handles.end());
      in_flight->handles.clear();
    }
    for (const auto h : handles)
      engine->cancel(h);
  });
  return {
      [=](exec_atom, const ExecPtr& exec) -> std::uint64_t {
        if (exec->endpoint.rfind("/v1/dynrt/tools/", 0) == 0) {
          const std::string name = exec->endpoint.substr(16);
          auto sink = std::make_shared<ActorSink>(exec);
          if (!tools || !tools->has(name)) {
            sink->on_error(
                {engines::ErrorKind::http_status, 404, {}, "no tool named \"" + name + "\""});
            return 0;
          }
          const auto started = std::chrono::steady_clock::now();
          // Tool callbacks may run inline (the corpus); the sink only posts messages.
          tools->call({name, exec->body, exec->tenant}, [sink, started](engines::ToolOutcome r) {
            if (!r) {
              sink->on_error(r.error());  // a tool server's 503 stays a 503, Retry-After kept
              return;
            }
            engines::EngineResult out;
            out.body = r->output.dump();
            out.finish_reason = "stop";
            out.engine_time = std::chrono::steady_clock::now() - started;
            sink->complete(std::move(out), std::move(r->writes));
          });
          return 0;
        }
        if (!engine) {
          ActorSink(exec).on_error({engines::ErrorKind::refused, 0, {}, "no engine configured"});
          return 0;
        }
        engines::EngineRequest req;
        req.endpoint = exec->endpoint;
        req.body = exec->body;
        req.kind = exec->kind;
        req.priority = exec->priority;
        req.id = exec->id;
        req.tenant = exec->tenant;
        auto sink = std::make_shared<ActorSink>(exec, in_flight);
        const auto handle = engine->submit(std::move(req), sink);
        sink->submitted(handle);
        if (exec->call && handle != 0)
          exec->call->set_canceller([engine, handle] { engine->cancel(handle); });
        if (exec->cancel && handle != 0)
          exec->cancel->add([engine, handle] { engine->cancel(handle); });
        return handle;
      },
      [=](abort_atom, std::uint64_t handle) {
        if (engine && handle != 0) engine->cancel(handle);
      },
  };
}

// -- csl
// -------------------------------------------------------------------------------------------

namespace {

struct CslState {
  SteadyClock clock;
  std::unique_ptr<csl::Store> store;
  std::shared_ptr<Counters> counters;
  std::shared_ptr<StatsBoard> board;
  csl::Coalescer coalescer;
  std::unordered_map<csl::Ticket, std::pair<caf::actor, std::uint64_t>> waiters;  // actor, demand
  csl::Ticket next_ticket = 1;

  // After every message: the board is what Runtime::stats() reads.
  void publish() const {
    board->publish(
        CslSnapshot{store->stats(), store->size(), store->shadow_count(), store->bytes()});
  }
};

ServeReply to_reply(const csl::Hit& hit, bool promoted) {
  ServeReply r;
  r.found = true;
  r.promoted = promoted;
  r.ref = hit.ref;
  r.bytes = std::make_shared<const std::string>(hit.bytes);
  r.usage = hit.usage;
  r.cost = hit.cost;
  r.provenance = hit.provenance;
  return r;
}

}  // namespace

behavior csl_actor(stateful_actor<CslState>* self, CslConfig config,
                   std::shared_ptr<Counters> counters, std::shared_ptr<StatsBoard> board) {
  self->state.store = std::make_unique<csl::Store>(self->state.clock, config.limits);
  self->state.counters = counters;
  self->state.board = std::move(board);
  self->state.publish();
  self->state.store->set_observer([counters](const Hash128&, csl::RemovalReason why) {
    if (why == csl::RemovalReason::discarded) ++counters->shadows_discarded;
  });
  return {
      // Probe (confirmed entries, when reuse is on), then promote (a shadow, when fills are
      // on). One message, so no write can fall between the two.
      [=](serve_atom, const Hash128& name, bool probe, bool promote, bool keep) -> ServeReply {
        auto& store = *self->state.store;
        store.expire(64);
        ServeReply r;
        if (probe)
          if (auto hit = store.probe(name)) r = to_reply(*hit, false);
        if (!r.found && promote)
          if (auto hit = store.promote(name)) {
            r = to_reply(*hit, true);
            // Without cross-request reuse a promoted result serves this demand only; the fill
            // chain built on it stays promotable (its later stages' demands come next).
            if (!keep) store.retire(hit->ref);
          }
        self->state.publish();
        return r;
      },
      [=](snap_atom, const Strings& keys) -> ReadRefs { return self->state.store->snapshot(keys); },
      // A canonical miss of a reusable stage: served if its result has meanwhile been stored,
      // else it leads an execution, joins the identical one in flight, or runs alone.
      [=](claim_atom, const Hash128& name, const Strings& keys, const EntryRefs& producers,
          bool may_join, const caf::actor& waiter, std::uint64_t demand) -> ClaimReply {
        auto& st = self->state;
        auto& store = *st.store;
        store.expire(64);
        ClaimReply r;
        if (const auto ref = store.find(name); ref && store.state(*ref) == csl::State::confirmed)
          if (auto hit = store.probe(name)) {
            r.found = true;
            r.hit = to_reply(*hit, false);
            st.publish();
            return r;
          }
        const csl::Ticket ticket = st.next_ticket++;
        auto c = st.coalescer.claim(store, name, keys, producers, ticket, may_join);
        r.kind = c.kind;
        r.execution = c.execution;
        r.reads = std::move(c.reads);
        if (c.kind == csl::ClaimKind::join) {
          r.ticket = ticket;
          st.waiters.emplace(ticket, std::make_pair(waiter, demand));
        }
        st.publish();
        return r;
      },
      // A led execution ended: its result is stored (when `in` is given and still fresh) and
      // every waiter that joined it is answered, all in one step.
      [=](land_atom, std::uint64_t execution, const LandedPtr& landed,
          const InsertPtr& in) -> csl::InsertResult {
        auto& st = self->state;
        csl::InsertResult res;
        if (in) {
          st.store->expire(64);
          res = st.store->put_confirmed(*in);
        }
        auto out = std::make_shared<Landed>(*landed);
        if (in &&
            (res.status == csl::InsertStatus::stored || res.status == csl::InsertStatus::duplicate))
          out->ref = res.ref;
        const LandedPtr shared = out;
        for (const auto ticket : st.coalescer.finish(execution)) {
          auto w = st.waiters.find(ticket);
          if (w == st.waiters.end()) continue;
          self->send(w->second.first, coaldone_atom::value, w->second.second, shared);
          st.waiters.erase(w);
        }
        st.publish();
        return res;
      },
      [=](leave_atom, std::uint64_t execution, csl::Ticket ticket) {
        self->state.coalescer.leave(execution, ticket);
        self->state.waiters.erase(ticket);
      },
      [=](store_atom, const InsertPtr& in, bool shadow) -> csl::InsertResult {
        auto& store = *self->state.store;
        store.expire(64);
        auto res = shadow ? store.put_shadow(*in) : store.put_confirmed(*in);
        self->state.publish();
        return res;
      },
      [=](drop_atom, const EntryRefs& refs) {
        for (const auto& r : refs)
          self->state.store->discard(r);
        self->state.publish();
      },
      [=](write_atom, const Strings& keys) -> std::uint64_t {
        ++self->state.counters->writes;
        const auto removed = self->state.store->write(keys);
        self->state.publish();
        return removed;
      },
  };
}

// -- timer ---------------------------------------------------------------------------------------

namespace {

struct TimerState {
  struct Due {
    caf::actor_addr to;
    std::int32_t which = 0;
  };
  SteadyClock clock;
  run::Deadlines<Due> deadlines;
  std::optional<TimePoint> wake_at;  // the earliest wake-up on its way
};

// One wake-up message for the earliest deadline, however many are pending.
void schedule_wake(stateful_actor<TimerState>* self) {
  auto& st = self->state;
  const auto next = st.deadlines.next();
  if (!next || (st.wake_at && *st.wake_at <= *next)) return;
  st.wake_at = *next;
  self->delayed_send(self, std::max(Duration::zero(), *next - st.clock.now()), wake_atom::value);
}

}  // namespace

behavior timer_actor(stateful_actor<TimerState>* self) {
  return {
      [=](arm_atom, std::uint64_t token, std::int64_t delay_ns, std::int32_t which) {
        auto& st = self->state;
        st.deadlines.add(
            token, st.clock.now() + Duration(delay_ns),
            TimerState::Due{caf::actor_cast<caf::actor_addr>(self->current_sender()), which});
        schedule_wake(self);
      },
      [=](disarm_atom, std::uint64_t token) { self->state.deadlines.cancel(token); },
      [=](wake_atom) {
        auto& st = self->state;
        st.wake_at.reset();
        for (auto& d : st.deadlines.pop_due(st.clock.now()))
          if (auto to = caf::actor_cast<caf::actor>(d.to))
            self->send(to, expire_atom::value, d.which);
        schedule_wake(self);
      },
  };
}

caf::actor spawn_timer_actor(event_based_actor* parent) {
  return parent->spawn<linked>(timer_actor);
}

// -- pricing
// ---------------------------------------------------------------------------------------

namespace {

struct PricingState {
  SteadyClock clock;
  std::shared_ptr<StatsBoard> board;
  std::unique_ptr<admission::Controller> controller;
  admission::CostModel costs;
  FrequencyPredictor frequency;
  std::vector<std::shared_ptr<engines::Engine>> engines;
  int decode_slots = 0;
  int canonical = 0;  // canonical requests in flight (own accounting)

  // Canonical pressure from the accounting and the engines' latest snapshots.
  void observe() {
    int slots = decode_slots, queued = 0, busy = 0;
    double kv_total = 0;
    for (const auto& e : engines) {
      const auto s = e->load();
      if (!s.valid) continue;
      if (decode_slots == 0) slots += s.slots_total;
      queued += s.queued;
      busy += s.slots_busy;
      kv_total += s.kv_total;
    }
    if (slots <= 0) slots = 64;
    // The sim reports its pool in tokens; vLLM and SGLang only a used fraction (kv_total 1):
    // for those the configured pool size (RuntimeConfig::kv_tokens) stands.
    if (kv_total > 1000) costs.set_kv_tokens(kv_total);
    // Canonical load: dynrt's own count of the canonical requests it runs, or what the engines
    // report busy beyond dynrt's fills (pass-through traffic, other clients), whichever is more.
    const int canonical_now = std::max(canonical, busy - controller->fills_in_flight());
    controller->observe_load(std::min(1.0, static_cast<double>(canonical_now) / slots),
                             std::min(1.0, static_cast<double>(queued) / slots));
  }

  // After every message: the board is what Runtime::stats() reads.
  void publish() const {
    const auto& c = *controller;
    board->publish(PricingSnapshot{c.stats(), c.envelope().envelope(clock.now()),
                                   c.fills_in_flight(), c.kv_reserved(), c.open_branches()});
  }
};

}  // namespace

behavior pricing_actor(stateful_actor<PricingState>* self, PricingConfig config) {
  auto& st = self->state;
  st.controller = std::make_unique<admission::Controller>(st.clock, config.admission);
  st.costs = admission::CostModel(config.costs);
  st.engines = std::move(config.engines);
  st.decode_slots = config.decode_slots;
  st.board = std::move(config.board);
  st.publish();
  return {
      [=](gate_atom, std::uint64_t branch, const Hash128& coordinate) -> GateReply {
        self->state.observe();
        const auto d = self->state.controller->open_branch(branch, coordinate);
        self->state.publish();
        return GateReply{d.open, static_cast<int>(d.reason)};
      },
      [=](rank_atom, const Hash128& coordinate, const PredictorContextPtr& ctx) -> Strings {
        return self->state.frequency.rank(coordinate, *ctx);
      },
      [=](admit_atom, const AdmitRequestPtr& req) -> AdmitReply {
        auto& s = self->state;
        s.observe();
        std::vector<admission::Candidate> cands;
        for (std::size_t rank = 0; rank < req->chains.size(); ++rank) {
          admission::Candidate c;
          c.rank = rank;
          c.gain_ms = s.costs.gain_ms(req->chains[rank]);
          c.footprint = s.costs.footprint(req->chains[rank]);
          cands.push_back(c);
        }
        const auto d = s.controller->admit(req->branch, cands, req->max_fills,
                                           admission::TenantShare{req->tenant, req->fill_share});
        AdmitReply out;
        for (const auto& f : d.admitted)
          out.admitted.emplace_back(cands[f.candidate].rank, f.reservation);
        s.publish();
        return out;
      },
      [=](setup_atom, std::uint64_t branch, std::int64_t setup_ns) {
        self->state.controller->charge_setup(branch, Duration(setup_ns));
      },
      [=](learn_atom, std::uint64_t branch, const Hash128& coordinate, const std::string& selection,
          std::int64_t rank, bool report) {
        self->state.frequency.observe(coordinate, selection);
        if (report)
          self->state.controller->resolve(
              branch, rank >= 0 ? std::optional<std::size_t>(static_cast<std::size_t>(rank))
                                : std::nullopt);
      },
      [=](usable_atom, std::uint64_t branch, std::uint64_t rank, bool consumed, double ms) {
        if (consumed)
          self->state.controller->consumed(branch, rank, ms);
        else
          self->state.controller->missed(branch, rank, ms);
      },
      [=](release_atom, std::uint64_t reservation) {
        self->state.controller->release(reservation);
        self->state.observe();
        self->state.publish();
      },
      [=](settle_atom, std::uint64_t branch) {
        self->state.controller->settle(branch);
        self->state.publish();
      },
      [=](refund_atom, std::uint64_t reservation) { self->state.controller->refund(reservation); },
      [=](credit_atom, std::uint64_t branch, double saved_ms) {
        self->state.controller->credit(branch, saved_ms);
      },
      [=](cost_atom, const Hash128& stage, std::int64_t engine_ns, double tokens) {
        self->state.costs.observe(stage, Duration(engine_ns), tokens);
      },
      [=](canon_atom, std::int32_t delta) {
        self->state.canonical = std::max(0, self->state.canonical + delta);
        self->state.observe();
        self->state.publish();
      },
  };
}

caf::actor spawn_engine_actor(event_based_actor* parent, std::shared_ptr<engines::Engine> engine,
                              std::shared_ptr<engines::ToolEngine> tools) {
  return parent->spawn<linked>(engine_actor, std::move(engine), std::move(tools));
}

caf::actor spawn_csl_actor(event_based_actor* parent, CslConfig config,
                           std::shared_ptr<Counters> counters, std::shared_ptr<StatsBoard> board) {
  return parent->spawn<linked>(csl_actor, std::move(config), std::move(counters), std::move(board));
}

caf::actor spawn_pricing_actor(event_based_actor* parent, PricingConfig config) {
  return parent->spawn<linked>(pricing_actor, std::move(config));
}

}  // namespace dynrt::actors

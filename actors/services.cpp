#include "actors/services.hpp"

#include "actors/reply.hpp"
#include "engines/completion.hpp"
#include "run/load.hpp"
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

caf::actor Services::executor_for(const std::string& endpoint, const nlohmann::json& body) const {
  const auto r = router.route(endpoint, body);
  switch (r.kind) {
    case engines::Router::Route::Kind::engine:
      return engine_actors[r.engine];
    case engines::Router::Route::Kind::tool:
      return tools;
    case engines::Router::Route::Kind::none:
      break;
  }
  return {};
}

Reply no_executor_reply(const std::string& endpoint) {
  return error_reply(404, "not_found", "no engine or tool serves " + endpoint);
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
    if (exec_->watch) exec_->watch->feed(data);
  }
  void on_progress(std::string_view data) override {
    if (exec_ && exec_->watch) exec_->watch->feed(data);
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
    if (exec_->answer_to)
      exec_->answer_to->done(r->ok ? to_reply(r->result) : error_reply(r->error));
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

// Answers a pass-through call from the engine's thread, as the engine answered it.
class DirectSink final : public engines::ResponseSink {
 public:
  explicit DirectSink(std::shared_ptr<ReplySink> sink) : sink_(std::move(sink)) {}
  void on_chunk(std::string_view data) override { sink_->chunk(data); }
  void on_complete(engines::EngineResult r) override { sink_->done(to_reply(std::move(r))); }
  void on_error(engines::EngineError e) override { sink_->done(error_reply(e)); }

 private:
  std::shared_ptr<ReplySink> sink_;
};

}  // namespace

void MisdirectedNotices::notice(const run::Misdirected& m) {
  if (m.reason == "no_workflow")
    ++counters_->tags_no_workflow;
  else if (m.reason == "unknown_workflow")
    ++counters_->tags_unknown_workflow;
  else if (m.reason == "no_workflow_id")
    ++counters_->tags_no_run_id;
  else
    ++counters_->tags_unknown_stage;
  if (!hear_) return;
  {
    std::lock_guard lock(mutex_);
    if (told_.size() >= kMaxKinds) return;
    if (!told_.insert(m.reason + '\0' + m.workflow + '\0' + m.stage).second) return;
  }
  hear_(nlohmann::json{
      {"reason", m.reason}, {"workflow", m.workflow}, {"stage", m.stage}, {"detail", m.detail}});
}

void forward(const Services& svc, const Request& request, std::shared_ptr<ReplySink> sink) {
  ++svc.counters->passthrough;
  ++svc.counters->served_engine;
  const auto route = svc.router.route(request.endpoint, request.body);
  switch (route.kind) {
    case engines::Router::Route::Kind::engine: {
      // Straight to the engine from the caller's thread: Engine::submit never blocks.
      const auto& engine = svc.router.engines()[route.engine];
      engines::EngineRequest req;
      req.tenant = request.caller.tenant;
      req.endpoint = request.endpoint;
      req.body = request.body;
      const auto handle = engine->submit(std::move(req), std::make_shared<DirectSink>(sink));
      if (handle != 0) sink->set_canceller([engine, handle] { engine->cancel(handle); });
      return;
    }
    case engines::Router::Route::Kind::tool: {
      const auto name = engines::tool_name(request.endpoint);
      if (const auto t = svc.policy.tools.find(name);
          t != svc.policy.tools.end() && !t->second.writes.empty()) {
        sink->done(error_reply(400, "invalid_request_error",
                               "tool '" + std::string(name) +
                                   "' writes records: call it as a tagged stage of a workflow, "
                                   "so that what it writes is invalidated"));
        return;
      }
      // Through the tools' actor: a tool may run inline, and the caller may be an I/O thread.
      auto exec = std::make_shared<Exec>();
      exec->endpoint = request.endpoint;
      exec->body = request.body;
      exec->tenant = request.caller.tenant;
      exec->answer_to = sink;
      exec->call = sink;
      // Anonymous: the actor's reply (the handle) has nobody to go to.
      anon_send(svc.tools, exec_atom::value, ExecPtr(exec));
      return;
    }
    case engines::Router::Route::Kind::none:
      break;
  }
  sink->done(no_executor_reply(request.endpoint));
}

behavior engine_actor(event_based_actor* self, std::shared_ptr<engines::Engine> engine,
                      std::shared_ptr<engines::ToolEngine> tools,
                      std::shared_ptr<const TimeService> time) {
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
        if (engines::is_tool_endpoint(exec->endpoint)) {
          const std::string name(engines::tool_name(exec->endpoint));
          auto sink = std::make_shared<ActorSink>(exec);
          if (!tools || !tools->has(name)) {
            sink->on_error(
                {engines::ErrorKind::http_status, 404, {}, "no tool named \"" + name + "\""});
            return 0;
          }
          const auto started = time->now();
          // Tool callbacks may run inline (the corpus); the sink only posts messages.
          tools->call({name, exec->body, exec->tenant}, [sink, started,
                                                         time](engines::ToolOutcome r) {
            if (!r) {
              // A tool server's 503 stays a 503, Retry-After kept.
              sink->on_error(r.error());
              return;
            }
            sink->complete(engines::tool_result(*r, time->now() - started), std::move(r->writes));
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
        req.progress = exec->watch != nullptr;
        auto sink = std::make_shared<ActorSink>(exec, in_flight);
        const auto handle = engine->submit(std::move(req), sink);
        sink->submitted(handle);
        if (exec->call && handle != 0)
          exec->call->set_canceller([engine, handle] { engine->cancel(handle); });
        if (exec->cancel && handle != 0)
          exec->cancel->add([engine, handle] { engine->cancel(handle); });
        // Weak: the promotion lives as long as the request's sink, which the engine holds; a
        // strong reference would keep the engine alive through its own in-flight requests.
        if (exec->promotion && handle != 0)
          exec->promotion->add([weak = std::weak_ptr<engines::Engine>(engine), handle] {
            const auto e = weak.lock();
            return e && e->promote(handle, 0);
          });
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

// A local result that read records, with what the shared tier checks before it serves: every
// record key it read (its producers' too) and the oldest fence they were read under.
struct TierMeta {
  std::vector<std::string> keys;
  csl::TierFence fence;
};

// A request to the shared tier whose answer the actor waits for.
struct TierWait {
  enum class Kind { validate, get, write };
  Kind kind = Kind::get;
  caf::response_promise promise;
  ServeReply reply;           // validate: the local hit it checks
  bool share = false;         // validate: a promotion to write through when it passes
  TierMeta read;              // validate: what it read (the entry may leave while it is checked)
  bool probe = false;         // validate: on failure, look for a current result in the tier
  Duration ttl{0};            // validate: the hit's TTL left
  Hash128 name;               // get, validate
  std::uint64_t removed = 0;  // write: entries removed here
  std::vector<caf::response_promise> joined;  // get: demands for the same name asked meanwhile
};

std::uint64_t ref_key(csl::EntryRef r) {
  return (std::uint64_t{r.index} << 32) | r.generation;
}

// Two fences of one result: the older one, or none (never checkable) across epochs.
csl::TierFence older(const csl::TierFence& a, const csl::TierFence& b) {
  if (a.epoch != b.epoch) return {};
  return {a.epoch, std::min(a.seq, b.seq)};
}

struct CslState {
  std::unique_ptr<csl::Store> store;
  std::shared_ptr<Counters> counters;
  std::shared_ptr<StatsBoard> board;
  csl::Coalescer coalescer;
  std::unordered_map<csl::Ticket, std::pair<caf::actor, std::uint64_t>> waiters;  // actor, demand
  csl::Ticket next_ticket = 1;
  std::shared_ptr<store::SharedTier> tier;  // none: a library of this process only
  std::shared_ptr<LifeGate> life;
  std::unordered_map<std::uint64_t, TierMeta> meta;  // by ref_key, entries that read records
  std::unordered_map<std::uint64_t, TierWait> waits;
  std::unordered_map<Hash128, std::uint64_t> getting;  // name -> its tier lookup in flight
  std::uint64_t next_wait = 1;
  TierCounts tier_counts;

  // After every message: the board is what Runtime::stats() reads.
  void publish() const {
    board->publish(CslSnapshot{store->stats(), store->size(), store->shadow_count(), store->bytes(),
                               tier_counts});
  }

  csl::TierFence fence() const {
    if (!tier) return {};
    const auto f = tier->fence();
    return {f.epoch, f.seq};
  }

  // After `in` was stored at `ref`: what the tier must check before it serves, if it read any
  // record (itself, or through the entries it was built from).
  void remember(csl::EntryRef ref, const csl::Insert& in) {
    if (!tier) return;
    TierMeta m;
    std::optional<csl::TierFence> fence;
    if (!in.reads.empty()) fence = in.fence;
    for (const auto& r : in.reads)
      m.keys.push_back(r.key);
    for (const auto& p : in.producers) {
      const auto it = meta.find(ref_key(p));
      if (it == meta.end()) continue;
      m.keys.insert(m.keys.end(), it->second.keys.begin(), it->second.keys.end());
      fence = fence ? older(*fence, it->second.fence) : it->second.fence;
    }
    if (m.keys.empty()) return;
    std::sort(m.keys.begin(), m.keys.end());
    m.keys.erase(std::unique(m.keys.begin(), m.keys.end()), m.keys.end());
    m.fence = *fence;
    meta[ref_key(ref)] = std::move(m);
  }

  // Writes a confirmed result through to the tier, with what it read (`read`: none when it
  // read no record), unless it read records under no fence: computed while the tier was
  // unreachable, it cannot be shown fresh to another replica.
  void share(const std::optional<TierMeta>& read, const Hash128& name, std::string bytes,
             csl::Usage usage, Duration cost, Duration ttl) {
    if (!tier) return;
    store::SharedEntry e;
    if (read) {
      if (read->fence.epoch.empty()) return;
      e.keys = read->keys;
      e.fence = {read->fence.epoch, read->fence.seq};
    } else {
      e.fence = tier->fence();  // it read nothing: the fence only names the epoch
      if (e.fence.epoch.empty()) return;
    }
    e.bytes = std::move(bytes);
    e.usage = usage;
    e.cost = cost;
    e.ttl = ttl;
    tier->put(name, std::move(e));
    ++tier_counts.shared;
  }

  // What the live entry `ref` read, as remember() kept it.
  std::optional<TierMeta> read_by(csl::EntryRef ref) const {
    const auto it = meta.find(ref_key(ref));
    if (it == meta.end()) return std::nullopt;
    return it->second;
  }

  // Right after remember(ref, in): `ref` is live, so its meta is there if it read records.
  void share(csl::EntryRef ref, const csl::Insert& in) {
    share(read_by(ref), in.name, in.bytes, in.usage, in.cost, in.ttl);
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

// The callback a tier request answers through: a message back to the actor, unless the graph
// has stopped (the tier's threads outlive no Runtime, but may answer while it stops).
std::function<void(TierAnswer)> answer_to(stateful_actor<CslState>* self, std::uint64_t id) {
  return [life = self->state.life, me = caf::actor_addr(self->address()), id](TierAnswer a) {
    a.id = id;
    auto msg = std::make_shared<const TierAnswer>(std::move(a));
    life->run_if_open([&] {
      if (auto to = caf::actor_cast<caf::actor>(me)) caf::anon_send(to, tier_atom::value, msg);
    });
  };
}

std::uint64_t wait_for(stateful_actor<CslState>* self, TierWait w) {
  const auto id = self->state.next_wait++;
  self->state.waits.emplace(id, std::move(w));
  return id;
}

// A local miss for `name`: ask the tier, or join the lookup for it already in flight, so a
// fill and a demand missing together import one result with one request.
void get_from_tier(stateful_actor<CslState>* self, const Hash128& name,
                   caf::response_promise promise) {
  auto& st = self->state;
  if (const auto g = st.getting.find(name); g != st.getting.end()) {
    st.waits.at(g->second).joined.push_back(std::move(promise));
    return;
  }
  TierWait w;
  w.kind = TierWait::Kind::get;
  w.promise = std::move(promise);
  w.name = name;
  const auto id = wait_for(self, std::move(w));
  st.getting.emplace(name, id);
  st.tier->get(name, [cb = answer_to(self, id)](std::optional<store::SharedEntry> e) {
    cb(TierAnswer{0, e.has_value(), std::move(e)});
  });
}

// The tier answered request `a.id`: the waiting demand (or write) gets its answer now.
void tier_answered(stateful_actor<CslState>* self, const TierAnswer& a) {
  auto& st = self->state;
  auto it = st.waits.find(a.id);
  if (it == st.waits.end()) return;
  TierWait w = std::move(it->second);
  st.waits.erase(it);
  auto& store = *st.store;
  switch (w.kind) {
    case TierWait::Kind::validate:
      if (a.ok) {
        if (w.share)
          st.share(std::move(w.read), w.name, *w.reply.bytes, w.reply.usage, w.reply.cost, w.ttl);
        w.promise.deliver(w.reply);
      } else {
        // A record it read was written (through another replica, or the tier could not say):
        // never served; gone here too, with what was built on it.
        ++st.tier_counts.checks_failed;
        store.drop(w.reply.ref);
        if (!w.probe) {
          w.promise.deliver(ServeReply{});
          break;
        }
        // Another replica may have computed it again since the write: look there.
        get_from_tier(self, w.name, std::move(w.promise));
      }
      break;
    case TierWait::Kind::get: {
      st.getting.erase(w.name);
      if (!a.entry) {
        w.promise.deliver(ServeReply{});
        for (auto& p : w.joined)
          p.deliver(ServeReply{});
        break;
      }
      const auto& e = *a.entry;
      // A local copy, first tier for the next demand; it keeps what the tier checked, so its
      // later hits are checked the same way. Versions are this replica's as of now: a local
      // write after this point refuses or removes it like any other result.
      csl::Insert in;
      in.name = w.name;
      in.bytes = e.bytes;
      in.usage = e.usage;
      in.cost = e.cost;
      in.reads = store.snapshot(e.keys);
      in.ttl = e.ttl;
      in.fence = {e.fence.epoch, e.fence.seq};
      store.expire(64);
      const auto res = store.put_confirmed(in);
      if (res.status == csl::InsertStatus::stored) st.remember(res.ref, in);
      ServeReply r;
      r.found = true;
      r.ref = res.status == csl::InsertStatus::stored || res.status == csl::InsertStatus::duplicate
                  ? res.ref
                  : csl::EntryRef{};
      r.bytes = std::make_shared<const std::string>(e.bytes);
      r.usage = e.usage;
      r.cost = e.cost;
      ++st.tier_counts.imported;
      w.promise.deliver(r);
      for (auto& p : w.joined)
        p.deliver(r);
      break;
    }
    case TierWait::Kind::write:
      w.promise.deliver(WriteResult{w.removed, a.ok});
      break;
  }
  st.publish();
}

}  // namespace

behavior csl_actor(stateful_actor<CslState>* self, CslConfig config,
                   std::shared_ptr<Counters> counters, std::shared_ptr<StatsBoard> board) {
  auto& init = self->state;
  init.store = std::make_unique<csl::Store>(*config.clock, config.limits);
  init.counters = counters;
  init.board = std::move(board);
  init.tier = std::move(config.tier);
  init.life = std::move(config.life);
  init.publish();
  init.store->set_observer(
      [self, counters](csl::EntryRef ref, const Hash128&, csl::RemovalReason why) {
        if (why == csl::RemovalReason::discarded) ++counters->shadows_discarded;
        if (!self->state.meta.empty()) self->state.meta.erase(ref_key(ref));
      });
  if (init.tier) {
    // Another replica's write: its readers here go now (a lost message only keeps them longer:
    // their next hit is checked against the tier anyway).
    init.tier->on_invalidation(
        [life = init.life, me = caf::actor_addr(self->address())](std::vector<std::string> keys) {
          life->run_if_open([&] {
            if (auto to = caf::actor_cast<caf::actor>(me))
              caf::anon_send(to, remote_atom::value, Strings(std::move(keys)));
          });
        });
  }
  return {
      // Probe (confirmed entries, when reuse is on), then promote (a shadow, when fills are
      // on). One message, so no write can fall between the two. With the shared tier, a hit
      // that read records is checked against it first, and a miss looks there.
      [=](serve_atom, const Hash128& name, const ServeQuery& q) -> caf::result<ServeReply> {
        auto& st = self->state;
        auto& store = *st.store;
        store.expire(64);
        ServeReply r;
        Duration ttl{0};
        if (q.probe)
          if (auto hit = store.probe(name)) {
            r = to_reply(*hit, false);
            ttl = hit->ttl_left;
          }
        if (!r.found && q.promote)
          if (auto hit = store.promote(name)) {
            r = to_reply(*hit, true);
            ttl = hit->ttl_left;
            // Without cross-request reuse a promoted result serves this demand only; the fill
            // chain built on it stays promotable (its later stages' demands come next).
            if (!q.keep) store.retire(hit->ref);
          }
        st.publish();
        if (!st.tier) return r;
        const bool share = r.promoted && q.keep;
        if (r.found) {
          const auto m = st.meta.find(ref_key(r.ref));
          if (m == st.meta.end()) {
            if (share) st.share(std::nullopt, name, *r.bytes, r.usage, r.cost, ttl);
            return r;
          }
          TierWait w;
          w.kind = TierWait::Kind::validate;
          w.promise = self->make_response_promise();
          w.reply = r;
          w.share = share;
          w.probe = q.probe;
          w.read = m->second;
          w.ttl = ttl;
          w.name = name;
          const auto id = wait_for(self, std::move(w));
          st.tier->validate(m->second.keys, {m->second.fence.epoch, m->second.fence.seq},
                            [cb = answer_to(self, id)](bool ok) {
                              cb(TierAnswer{0, ok, {}});
                            });
          return caf::result<ServeReply>(caf::delegated<ServeReply>());
        }
        if (!q.probe) return r;
        get_from_tier(self, name, self->make_response_promise());
        return caf::result<ServeReply>(caf::delegated<ServeReply>());
      },
      [=](tier_atom, const TierAnswerPtr& a) { tier_answered(self, *a); },
      [=](remote_atom, const Strings& keys) {
        ++self->state.tier_counts.remote_writes;
        self->state.store->write(keys);
        self->state.publish();
      },
      [=](snap_atom, const Strings& keys) -> run::ReadSnapshot {
        return {self->state.store->snapshot(keys), self->state.fence()};
      },
      // A canonical miss of a reusable stage: served if its result has meanwhile been stored,
      // else it leads an execution, joins the identical one in flight, or runs alone.
      [=](claim_atom, const Hash128& name, const Strings& keys, const EntryRefs& producers,
          bool may_join, const caf::actor& waiter, std::uint64_t demand) -> ClaimReply {
        auto& st = self->state;
        auto& store = *st.store;
        store.expire(64);
        ClaimReply r;
        // (A result the tier would have to check first is not served here: the execution runs.)
        if (const auto ref = store.find(name);
            ref && store.state(*ref) == csl::State::confirmed && !st.meta.count(ref_key(*ref)))
          if (auto hit = store.probe(name)) {
            r.found = true;
            r.hit = to_reply(*hit, false);
            st.publish();
            return r;
          }
        const csl::Ticket ticket = st.next_ticket++;
        r.fence = st.fence();  // before the versions: a write between the two only refuses more
        // With the shared tier, an execution in flight that reads records is not joined: a write
        // another replica took may have made it stale before this replica heard of it (the
        // coalescer can only compare this replica's versions). Its result, stored, is checked.
        const bool join = may_join && !(st.tier && !keys.empty());
        auto c = st.coalescer.claim(store, name, keys, producers, ticket, join);
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
          if (res.status == csl::InsertStatus::stored) {
            st.remember(res.ref, *in);
            st.share(res.ref, *in);
          }
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
        auto& st = self->state;
        auto& store = *st.store;
        store.expire(64);
        auto res = shadow ? store.put_shadow(*in) : store.put_confirmed(*in);
        if (res.status == csl::InsertStatus::stored) {
          st.remember(res.ref, *in);
          if (!shadow) st.share(res.ref, *in);
        }
        st.publish();
        return res;
      },
      [=](drop_atom, const EntryRefs& refs) {
        for (const auto& r : refs)
          self->state.store->discard(r);
        self->state.publish();
      },
      // In force here at once; with the shared tier, answered once the tier has it (or could
      // not take it: then it is in force on this replica only, and sent when the tier is back).
      [=](write_atom, const Strings& keys) -> caf::result<WriteResult> {
        auto& st = self->state;
        ++st.counters->writes;
        const auto removed = st.store->write(keys);
        st.publish();
        if (!st.tier) return WriteResult{removed, false};
        TierWait w;
        w.kind = TierWait::Kind::write;
        w.promise = self->make_response_promise();
        w.removed = removed;
        const auto id = wait_for(self, std::move(w));
        st.tier->write(keys, [cb = answer_to(self, id)](bool shared) {
          cb(TierAnswer{0, shared, {}});
        });
        return caf::result<WriteResult>(caf::delegated<WriteResult>());
      },
  };
}

caf::actor spawn_csl_actor(event_based_actor* parent, CslConfig config,
                           std::shared_ptr<Counters> counters, std::shared_ptr<StatsBoard> board) {
  return parent->spawn<linked>(csl_actor, std::move(config), std::move(counters), std::move(board));
}

// -- pricing
// ---------------------------------------------------------------------------------------

namespace {

struct PricingState {
  std::shared_ptr<const TimeService> clock;
  std::shared_ptr<StatsBoard> board;
  std::unique_ptr<admission::Controller> controller;
  admission::CostModel costs;
  FrequencyPredictor frequency;
  std::vector<std::shared_ptr<engines::Engine>> engines;
  int decode_slots = 0;
  int canonical = 0;  // canonical requests in flight (own accounting)

  // Canonical pressure from the accounting and the engines' latest snapshots (run/load.hpp).
  void observe() {
    std::vector<engines::LoadSnapshot> loads;
    loads.reserve(engines.size());
    for (const auto& e : engines)
      loads.push_back(e->load());
    const auto p = run::pressure_of(loads, decode_slots, canonical, controller->fills_in_flight());
    // Otherwise the configured pool size (RuntimeConfig::kv_tokens) stands.
    if (p.kv_tokens) costs.set_kv_tokens(*p.kv_tokens);
    controller->set_decode_slots(p.slots);
    controller->set_prefill(p.prefill_ms_per_token, p.batches);
    controller->observe_load(p.canonical, p.queued, p.kv);
    for (std::size_t i = 0; i < loads.size(); ++i)
      controller->observe_decode(i, run::decode_reading(loads[i]));
  }

  // After every message: the board is what Runtime::stats() reads.
  void publish() const {
    const auto& c = *controller;
    board->publish(PricingSnapshot{c.stats(), c.envelope().envelope(clock->now()),
                                   c.fills_in_flight(), c.kv_reserved(), c.open_branches()});
  }
};

}  // namespace

behavior pricing_actor(stateful_actor<PricingState>* self, PricingConfig config) {
  auto& st = self->state;
  st.clock = config.clock;
  st.controller = std::make_unique<admission::Controller>(*st.clock, config.admission);
  st.costs = admission::CostModel(config.costs);
  st.engines = std::move(config.engines);
  st.decode_slots = config.decode_slots;
  st.board = std::move(config.board);
  st.publish();
  return {
      [=](gate_atom, std::uint64_t branch, const Hash128& coordinate, bool exclusive) -> GateReply {
        self->state.observe();
        const auto d = self->state.controller->open_branch(branch, coordinate, exclusive);
        self->state.publish();
        return GateReply{d.open, d.reason};
      },
      [=](rank_atom, const Hash128& coordinate, const PredictorContextPtr& ctx) -> Strings {
        return self->state.frequency.rank(coordinate, *ctx);
      },
      [=](admit_atom, const AdmitRequestPtr& req) -> AdmitReply {
        auto& s = self->state;
        s.observe();
        const auto candidate = [&](std::size_t rank) {
          admission::Candidate c;
          c.rank = rank;
          c.gain_ms = s.costs.gain_ms(req->chains[rank]);
          c.footprint = s.costs.footprint(req->chains[rank]);
          return c;
        };
        if (req->emitted) {  // resolve on emission: just the emitted winner, at p = 1
          AdmitReply out;
          const std::size_t rank = *req->emitted;
          if (rank >= req->chains.size()) return out;
          if (const auto f =
                  s.controller->admit_emitted(req->branch, candidate(rank),
                                              admission::TenantShare{req->tenant, req->fill_share}))
            out.admitted.emplace_back(rank, f->reservation);
          s.publish();
          return out;
        }
        std::vector<admission::Candidate> cands;
        for (std::size_t rank = 0; rank < req->chains.size(); ++rank)
          cands.push_back(candidate(rank));
        const auto d = s.controller->admit(req->branch, cands, req->max_fills,
                                           admission::TenantShare{req->tenant, req->fill_share});
        AdmitReply out;
        for (const auto& f : d.admitted)
          out.admitted.emplace_back(cands[f.candidate].rank, f.reservation);
        out.refused = d.refused;  // candidates are asked in rank order
        s.publish();
        return out;
      },
      [=](setup_atom, std::uint64_t branch, std::int64_t setup_ns, double draft_slot_ms,
          double draft_prompt_tokens) {
        self->state.controller->charge_setup(branch, Duration(setup_ns), draft_slot_ms,
                                             draft_prompt_tokens);
      },
      [=](learn_atom, const Resolution& r) {
        self->state.frequency.observe(r.coordinate, r.selection);
        if (r.report) self->state.controller->resolve(r.branch, r.rank);
      },
      [=](usable_atom, std::uint64_t branch, std::uint64_t rank, bool consumed, double saved_ms,
          double wait_ms) {
        if (consumed)
          self->state.controller->consumed(branch, rank, saved_ms, wait_ms);
        else
          self->state.controller->missed(branch, rank, wait_ms);
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
      [=](credit_atom, std::uint64_t branch, double saved_ms, double wait_ms) {
        self->state.controller->credit(branch, saved_ms, wait_ms);
      },
      [=](cost_atom, const run::CostSample& c) {
        self->state.costs.observe(c.stage, c.engine_time, c.tokens, c.prompt_tokens);
      },
      [=](canon_atom, std::int32_t delta) {
        self->state.canonical = std::max(0, self->state.canonical + delta);
        self->state.observe();
        self->state.publish();
      },
  };
}

caf::actor spawn_engine_actor(event_based_actor* parent, std::shared_ptr<engines::Engine> engine,
                              std::shared_ptr<engines::ToolEngine> tools,
                              std::shared_ptr<const TimeService> time) {
  return parent->spawn<linked>(engine_actor, std::move(engine), std::move(tools), std::move(time));
}

caf::actor spawn_pricing_actor(event_based_actor* parent, PricingConfig config) {
  return parent->spawn<linked>(pricing_actor, std::move(config));
}

}  // namespace dynrt::actors

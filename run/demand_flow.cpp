#include "run/demand_flow.hpp"

#include <algorithm>
#include <utility>

namespace dynrt::run {

using namespace demand;

namespace {

// A library hit's bytes and usage as an answer (its `served` is the caller's to set).
Reply reply_of(const ServeReply& hit) {
  Reply r;
  r.body = *hit.bytes;
  r.usage = {hit.usage.prompt_tokens, hit.usage.completion_tokens};
  return r;
}

}  // namespace

DemandFlow::DemandFlow(WorkflowRun& run, const Clock& clock, Config config)
    : run_(run), clock_(clock), config_(std::move(config)) {}

const dsl::Stage& DemandFlow::stage_of(const Pending& p) const {
  return run_.graph().stages[p.stage];
}

DemandEffects DemandFlow::start(DemandId id, const dsl::Stage& stage, std::string endpoint,
                                std::shared_ptr<const nlohmann::json> body,
                                const nlohmann::json& wire) {
  DemandEffects fx;
  // Variables, a user's pick it carries, a branch it opens (before it runs, so fills overlap).
  // A stage written as Messages or Responses binds from the request in that form; a call that
  // did not come in it binds nothing there.
  fx.push_back(Branches{run_.demand(stage, dsl::translated(stage.api) ? wire : *body)});
  Pending p;
  p.stage = stage.id;
  p.name = stage_name(config_.policy, stage, endpoint, *body, config_.caller, config_.run);
  p.endpoint = std::move(endpoint);
  p.streams = engines::wants_stream(*body);
  p.body = std::move(body);
  auto& q = pending_.insert_or_assign(id, std::move(p)).first->second;
  const auto& policy = config_.policy;
  if (reusable(stage) && (policy.reuse || policy.fills))
    serve(id, q, true, fx);
  else
    execute(id, q, fx);
  return fx;
}

void DemandFlow::serve(DemandId id, Pending& p, bool may_wait, DemandEffects& fx) {
  const auto& policy = config_.policy;
  // Whether to wait is decided when the answer comes: the fill may end meanwhile.
  p.may_wait = may_wait;
  fx.push_back(Probe{id, p.name, ServeQuery{policy.reuse, policy.fills, policy.reuse}});
}

DemandEffects DemandFlow::served(DemandId id, const std::optional<ServeReply>& reply) {
  DemandEffects fx;
  const auto it = pending_.find(id);
  if (it == pending_.end()) return fx;
  auto& p = it->second;
  if (std::exchange(p.racing, false)) {
    // A hedged demand's probe for its fill's result: taken only while its own has not come.
    if (reply && reply->found && !p.answer) take_fill(id, p, *reply, fx);
    return fx;
  }
  const bool may_wait = std::exchange(p.may_wait, false);
  if (!reply) {
    execute(id, p, fx);
    return fx;
  }
  if (reply->found) {
    from_library(id, *reply, fx);
    return fx;
  }
  const auto f = fills_.find(p.name);
  if (may_wait && config_.policy.fills && f != fills_.end()) {
    // Its fill is running: wait for it, within the decision's bound, at canonical priority.
    f->second.waiters.push_back(id);
    if (!std::exchange(f->second.promoted, true)) fx.push_back(Promote{f->second.fill});
    p.waited_fill = true;
    ++tally_.waits;
    wait(id, p, wait_of(run_.graph(), stage_of(p)), fx);
    return fx;
  }
  execute(id, p, fx);
  return fx;
}

void DemandFlow::wait(DemandId id, Pending& p, std::chrono::milliseconds bound, DemandEffects& fx) {
  const TimePoint now = clock_.now();
  p.waiting_since = now;
  p.wait = next_wait_++;
  fx.push_back(ArmWait{id, p.wait, now + std::chrono::duration_cast<Duration>(bound)});
}

void DemandFlow::stop_waiting(DemandId id, Pending& p, DemandEffects& fx) {
  if (!p.waiting_since) return;
  p.waited_ms = ms_of(clock_.now() - *p.waiting_since);
  p.waiting_since.reset();
  if (p.joined != 0) {
    fx.push_back(Leave{std::exchange(p.joined, 0), p.ticket});
    return;
  }
  leave_fill(id, p);
}

void DemandFlow::leave_fill(DemandId id, const Pending& p) {
  if (auto f = fills_.find(p.name); f != fills_.end()) {
    auto& w = f->second.waiters;
    w.erase(std::remove(w.begin(), w.end(), id), w.end());
  }
}

void DemandFlow::execute(DemandId id, Pending& p, DemandEffects& fx) {
  const auto& stage = stage_of(p);
  p.store = false;
  if (config_.policy.reuse && reusable(stage)) {
    // The record keys it reads, rendered now; their versions are snapshotted before it runs,
    // so a write during the execution makes the result stale at insert. The same step leads
    // the execution or joins an identical one in flight (coalescing, csl/coalescer.hpp).
    auto keys = run_.read_keys(stage, p.endpoint, *p.body);
    const auto tool_reads = tool_records(config_.policy, stage, *p.body, false);
    if (keys && tool_reads) keys->insert(keys->end(), tool_reads->begin(), tool_reads->end());
    if (keys && tool_reads) {
      p.store = true;
      p.claiming = true;
      const auto bound = wait_of(run_.graph(), stage);
      fx.push_back(Claim{id, p.name, read_records(stage, *keys, config_.caller),
                         run_.producers_of(stage), p.may_join && bound.count() > 0});
      return;
    }
  }
  run_itself(id, p, fx);
}

void DemandFlow::run_itself(DemandId id, Pending& p, DemandEffects& fx) {
  // A configured tool that writes records: which ones must be known before it runs, or the
  // results that read them could not be invalidated. A call they do not render for is refused.
  if (!tool_records(config_.policy, stage_of(p), *p.body, true)) {
    auto reply = error_reply(400, "invalid_request_error",
                             "tool '" + stage_of(p).tool +
                                 "' writes records named from its arguments, and these "
                                 "arguments do not name them");
    land(p, Landed::Outcome::error, reply, fx);
    answer(id, std::move(reply), fx);
    return;
  }
  p.executing = true;
  fx.push_back(Execute{id, !is_tool_endpoint(p.endpoint)});
}

DemandEffects DemandFlow::claimed(DemandId id, std::optional<ClaimReply> reply) {
  DemandEffects fx;
  if (const auto a = abandoned_.find(id); a != abandoned_.end() && a->second.claiming) {
    // Its fill answered it meanwhile: an execution it was given is not run, so whoever joined
    // it claims again (the fill's result is in the library by then).
    abandoned_.erase(a);
    if (reply && !reply->found && reply->kind == csl::ClaimKind::lead) {
      auto l = std::make_shared<Landed>();
      l->outcome = Landed::Outcome::retry;
      fx.push_back(Land{reply->execution, std::move(l)});
    }
    return fx;
  }
  const auto it = pending_.find(id);
  if (it == pending_.end()) return fx;
  auto& p = it->second;
  p.claiming = false;
  if (!reply) {
    p.store = false;
    run_itself(id, p, fx);
    return fx;
  }
  if (reply->found) {
    from_library(id, reply->hit, fx);
    return fx;
  }
  if (reply->kind == csl::ClaimKind::join) {
    p.joined = reply->execution;
    p.ticket = reply->ticket;
    ++tally_.coalesced;
    wait(id, p, wait_of(run_.graph(), stage_of(p)), fx);
    return fx;
  }
  p.execution = reply->kind == csl::ClaimKind::lead ? reply->execution : 0;
  p.reads = std::move(reply->reads);
  p.fence = std::move(reply->fence);
  run_itself(id, p, fx);
  return fx;
}

void DemandFlow::land(Pending& p, Landed::Outcome outcome, const Reply& reply, DemandEffects& fx) {
  if (p.execution == 0) return;
  auto l = std::make_shared<Landed>();
  l->outcome = outcome;
  l->reply = reply;
  fx.push_back(Land{std::exchange(p.execution, 0), std::move(l)});
}

DemandEffects DemandFlow::refused(DemandId id, Reply reply) {
  DemandEffects fx;
  const auto it = pending_.find(id);
  if (it == pending_.end()) return fx;
  land(it->second, Landed::Outcome::error, reply, fx);
  answer(id, std::move(reply), fx);
  return fx;
}

void DemandFlow::answer(DemandId id, Reply reply, DemandEffects& fx) {
  const auto it = pending_.find(id);
  if (it == pending_.end()) return;
  // Answered by its own execution: the fill it also waited for no longer concerns it.
  const auto& p = it->second;
  if (p.hedged) leave_fill(id, p);
  DemandTrace trace{p.name, reusable(stage_of(p)), p.waited_fill, p.wait_timed_out, p.waited_ms};
  pending_.erase(it);
  fx.push_back(Answer{id, std::move(reply), std::move(trace)});
}

void DemandFlow::completed(const dsl::Stage& stage, const std::string& response, csl::EntryRef ref,
                           bool from_fill, std::uint64_t fill_branch, double saved_ms,
                           double waited_ms, bool cached, DemandEffects& fx) {
  fx.push_back(Branches{run_.completed(stage, response, ref)});
  bool first = false;
  for (const auto& v : run_.demanded(stage, from_fill, fill_branch, cached)) {
    first = first || (v.consumed && v.branch == fill_branch);
    fx.push_back(Demanded{v.branch, v.consumed, saved_ms, waited_ms, v.judged});
  }
  // A later stage of a fill chain (a read after its retrieve, an executor after its handler):
  // the branch that filled it saved this too, so its return learns it (Eq. 4). The branch
  // may have settled already; the controller revises a settled branch's return.
  if (from_fill && !first && fill_branch != 0)
    fx.push_back(Credit{fill_branch, saved_ms, waited_ms});
}

void DemandFlow::from_library(DemandId id, const ServeReply& hit, DemandEffects& fx) {
  const auto& p = pending_.at(id);
  const auto& stage = stage_of(p);
  const double saved_ms = ms_of(hit.cost);
  tally_.saved += hit.cost;
  Reply r = reply_of(hit);
  r.served = hit.promoted ? Served::fill : Served::cache;
  const bool from_fill = hit.promoted && hit.provenance.origin == csl::Origin::fill;
  const double waited = p.waited_ms;
  answer(id, std::move(r), fx);
  completed(stage, *hit.bytes, hit.ref, from_fill, hit.provenance.branch, saved_ms, waited,
            /*cached=*/!from_fill, fx);
}

DemandEffects DemandFlow::landed(DemandId id, const Landed& l) {
  DemandEffects fx;
  const auto it = pending_.find(id);
  if (it == pending_.end() || !it->second.waiting_since || it->second.joined == 0) return fx;
  auto& p = it->second;
  p.joined = 0;  // the library has forgotten it already
  stop_waiting(id, p, fx);
  switch (l.outcome) {
    case Landed::Outcome::retry:
      execute(id, p, fx);  // the first to claim again leads, the others join it
      return fx;
    case Landed::Outcome::error:
      answer(id, l.reply, fx);
      return fx;
    case Landed::Outcome::result:
      break;
  }
  const auto& stage = stage_of(p);
  tally_.saved += l.cost;
  const double waited = p.waited_ms;
  Reply r = l.reply;
  r.served = Served::cache;
  answer(id, std::move(r), fx);
  completed(stage, l.reply.body, l.ref, false, 0, ms_of(l.cost), waited, /*cached=*/true, fx);
  return fx;
}

DemandEffects DemandFlow::executed(DemandId id, const ExecResult& r) {
  DemandEffects fx;
  if (const auto a = abandoned_.find(id); a != abandoned_.end() && !a->second.claiming) {
    // The fill answered it first; this execution was cancelled (or ended anyway): dropped.
    if (a->second.loads_engine) fx.push_back(Unload{});
    abandoned_.erase(a);
    return fx;
  }
  const auto it = pending_.find(id);
  if (it == pending_.end()) return fx;
  auto& p = it->second;
  p.executing = false;
  if (!is_tool_endpoint(p.endpoint)) fx.push_back(Unload{});
  const auto& stage = stage_of(p);
  if (!r.ok) {
    auto e = error_reply(r.error);
    // A client's disconnect must not fail the others: they claim again instead.
    land(p,
         r.error.kind == engines::ErrorKind::cancelled ? Landed::Outcome::retry
                                                       : Landed::Outcome::error,
         e, fx);
    answer(id, std::move(e), fx);
    return fx;
  }
  fx.push_back(Cost{cost_of(stage, r.result)});
  Reply reply = to_reply(r.result);
  if (p.store && reply.status == 200 && !storable(p.endpoint, r.result)) {
    // Not a normal completion: its caller gets it as the engine sent it, but it is not stored,
    // and the demands that joined it run themselves rather than be served it as `cache`.
    land(p, Landed::Outcome::retry, reply, fx);
    p.store = false;
  }
  const double waited = p.waited_ms;
  if (!p.store || reply.status != 200) {
    land(p, Landed::Outcome::error, reply, fx);
    // A stage that writes records: its writes are in force before its answer goes out, so
    // nothing that read the old versions is served after the caller learns of the write.
    // The stage's template writes, and whatever records the tool reported writing.
    auto writes = run_.write_keys(stage);
    if (!writes) writes.emplace();
    writes->insert(writes->end(), r.writes.begin(), r.writes.end());
    // A configured tool's writes, rendered from this call's arguments (run_itself() refused a
    // call whose write keys do not render, before it ran).
    if (const auto tw = tool_records(config_.policy, stage, *p.body, true))
      writes->insert(writes->end(), tw->begin(), tw->end());
    if (reply.status == 200 && !writes->empty()) {
      p.answer = std::move(reply);
      fx.push_back(Write{id, write_records(*writes, config_.caller)});
    } else {
      answer(id, std::move(reply), fx);
    }
    completed(stage, r.result.body, {}, false, 0, 0, waited, false, fx);
    return fx;
  }
  // Stored before the answer goes out, so the next stage's demand finds its producer.
  auto in = std::make_shared<const csl::Insert>(
      insert_of(p.name, r.result, std::move(p.reads), run_.producers_of(stage),
                {csl::Origin::canonical, 0, 0}, ttl_of(run_.graph(), stage), std::move(p.fence)));
  Store s{id, in, std::exchange(p.execution, 0), nullptr};
  if (s.execution != 0) {
    auto l = std::make_shared<Landed>();
    l->outcome = Landed::Outcome::result;
    l->reply = reply;
    l->cost = r.result.engine_time;
    s.landed = std::move(l);
  }
  p.answer = std::move(reply);
  p.response = std::shared_ptr<const std::string>(in, &in->bytes);
  fx.push_back(std::move(s));
  return fx;
}

DemandEffects DemandFlow::stored(DemandId id, const std::optional<csl::InsertResult>& res) {
  DemandEffects fx;
  const auto it = pending_.find(id);
  if (it == pending_.end() || !it->second.answer) return fx;
  auto& p = it->second;
  const auto& stage = stage_of(p);
  const auto ref = res && (res->status == csl::InsertStatus::stored ||
                           res->status == csl::InsertStatus::duplicate)
                       ? res->ref
                       : csl::EntryRef{};
  const double waited = p.waited_ms;
  const auto response = p.response;
  answer(id, std::move(*p.answer), fx);
  completed(stage, *response, ref, false, 0, 0, waited, false, fx);
  return fx;
}

DemandEffects DemandFlow::written(DemandId id) {
  DemandEffects fx;
  const auto it = pending_.find(id);
  if (it == pending_.end() || !it->second.answer) return fx;
  answer(id, std::move(*it->second.answer), fx);
  return fx;
}

DemandEffects DemandFlow::fill_started(const Hash128& name, std::uint64_t fill) {
  fills_[name].fill = fill;
  return {};
}

DemandEffects DemandFlow::fill_ended(const Hash128& name, std::uint64_t fill, bool stored) {
  DemandEffects fx;
  const auto it = fills_.find(name);
  if (it == fills_.end() || it->second.fill != fill) return fx;
  const auto waiters = std::move(it->second.waiters);
  fills_.erase(it);
  for (const auto id : waiters) {
    const auto p = pending_.find(id);
    if (p == pending_.end()) continue;
    if (std::exchange(p->second.hedged, false)) {
      // It runs itself meanwhile: the fill's result answers it if it comes first.
      if (stored && !p->second.answer) {
        serve(id, p->second, false, fx);
        p->second.racing = true;
      }
      continue;
    }
    stop_waiting(id, p->second, fx);
    if (stored)
      serve(id, p->second, false, fx);  // promote it now; no second wait
    else
      execute(id, p->second, fx);
  }
  return fx;
}

DemandEffects DemandFlow::wait_over(DemandId id, std::uint64_t wait) {
  DemandEffects fx;
  const auto it = pending_.find(id);
  if (it == pending_.end() || !it->second.waiting_since || it->second.wait != wait) return fx;
  auto& p = it->second;
  const bool on_fill = p.joined == 0;
  p.wait_timed_out = p.wait_timed_out || on_fill;
  stop_waiting(id, p, fx);
  ++tally_.wait_timeouts;
  p.may_join = false;  // runs now; it may still lead if nothing is in flight
  if (on_fill && !p.streams) {
    // Hedged: it keeps its place among the fill's waiters (see the header).
    if (auto f = fills_.find(p.name); f != fills_.end()) {
      f->second.waiters.push_back(id);
      p.hedged = true;
    }
  }
  execute(id, p, fx);
  return fx;
}

void DemandFlow::take_fill(DemandId id, Pending& p, const ServeReply& hit, DemandEffects& fx) {
  ++tally_.hedge_fills;
  if (p.executing) {
    fx.push_back(Cancel{id});
    abandoned_[id] = Abandoned{!is_tool_endpoint(p.endpoint), false};
  } else if (p.claiming) {
    abandoned_[id] = Abandoned{false, true};
  }
  if (p.execution != 0) {
    // It led an execution others joined: they get the fill's result, as they would its own.
    auto l = std::make_shared<Landed>();
    l->outcome = Landed::Outcome::result;
    l->reply = reply_of(hit);
    l->cost = hit.cost;
    l->ref = hit.ref;
    fx.push_back(Land{std::exchange(p.execution, 0), std::move(l)});
  }
  from_library(id, hit, fx);
}

}  // namespace dynrt::run

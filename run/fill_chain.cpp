#include "run/fill_chain.hpp"

#include "runtime/json_text.hpp"

#include <utility>

namespace dynrt::run {

using namespace fill;
using branch::FillStatus;

FillChain::FillChain(Config config)
    : config_(std::move(config)), vars_(config_.bindings), producers_(config_.producers) {}

FillEffects FillChain::start() {
  FillEffects fx;
  next_stage(fx);
  return fx;
}

void FillChain::finish(FillStatus status, FillEffects& fx) {
  if (finished_) return;
  finished_ = true;
  executing_ = false;
  if (announced_) fx.push_back(Ended{*std::exchange(announced_, std::nullopt), false});
  if (next_) fx.push_back(Ended{*std::exchange(next_, std::nullopt), false});
  fx.push_back(Finish{status, engine_time_});
}

void FillChain::next_stage(FillEffects& fx) {
  if (cancelled_) return finish(FillStatus::cancelled, fx);
  if (step_ >= config_.chain.size()) return finish(FillStatus::done, fx);
  auto rendered = dsl::render_stage(stage(), vars_);
  // An unrenderable first stage is a failed fill; a later one just ends the chain.
  if (!rendered) return finish(step_ == 0 ? FillStatus::failed : FillStatus::done, fx);
  request_ = std::move(*rendered);
  const Hash128 name = name_of(stage(), *request_);
  announced_ = name;
  // Announced already when the previous stage completed (see executed()), unless it rendered
  // differently then.
  if (const auto early = std::exchange(next_, std::nullopt); early != name) {
    if (early) fx.push_back(Ended{*early, false});
    fx.push_back(
        Announce{name, stage().id, std::make_shared<const nlohmann::json>(request_->body)});
  }
  if (!config_.policy.reuse) return run_on_engine(fx);
  busy_ = true;
  fx.push_back(Probe{name, ServeQuery{true, false, true}});
}

FillEffects FillChain::served(const std::optional<ServeReply>& hit) {
  FillEffects fx;
  if (finished_ || !busy_) return fx;
  busy_ = false;
  if (!hit) {
    finish(FillStatus::failed, fx);
  } else if (cancelled_) {
    finish(FillStatus::cancelled, fx);
  } else if (!hit->found) {
    run_on_engine(fx);
  } else {
    // Already in the library: nothing to run for this stage.
    if (step_ == 0) fx.push_back(Suppressed{});
    advance(*hit->bytes, hit->ref, true, fx);
  }
  return fx;
}

void FillChain::run_on_engine(FillEffects& fx) {
  auto keys = request_->reads;
  const auto tool_reads = tool_records(config_.policy, stage(), request_->body, false);
  if (!tool_reads) return finish(step_ == 0 ? FillStatus::failed : FillStatus::done, fx);
  keys.insert(keys.end(), tool_reads->begin(), tool_reads->end());
  busy_ = true;
  fx.push_back(Snapshot{read_records(stage(), keys, config_.caller)});
}

FillEffects FillChain::snapshotted(std::optional<ReadSnapshot> snapshot) {
  FillEffects fx;
  if (finished_ || !busy_) return fx;
  busy_ = false;
  if (!snapshot) {
    finish(FillStatus::failed, fx);
    return fx;
  }
  if (cancelled_) {
    finish(FillStatus::cancelled, fx);
    return fx;
  }
  reads_ = std::move(snapshot->reads);
  fence_ = std::move(snapshot->fence);
  executing_ = true;
  fx.push_back(Execute{++tag_, request_->endpoint, request_->body});
  return fx;
}

FillEffects FillChain::unroutable() {
  FillEffects fx;
  finish(FillStatus::failed, fx);
  return fx;
}

FillEffects FillChain::executed(std::uint64_t tag, const ExecResult& r) {
  FillEffects fx;
  if (finished_ || !executing_ || tag != tag_) return fx;  // a stale completion
  executing_ = false;
  // Only a normal completion becomes a shadow; anything else is a miss.
  if (!r.ok || !storable(request_->endpoint, r.result)) {
    finish(cancelled_ ? FillStatus::cancelled : FillStatus::failed, fx);
    return fx;
  }
  const auto& s = stage();
  engine_time_ += r.result.engine_time;
  fx.push_back(Cost{cost_of(s, r.result)});
  busy_ = true;
  insert_ = std::make_shared<const csl::Insert>(
      insert_of(*announced_, r.result, std::move(reads_), producers_of(s, producers_),
                {csl::Origin::fill, config_.id, config_.branch}, ttl_of(*config_.graph, s),
                std::move(fence_)));
  announce_next(insert_->bytes, fx);
  fx.push_back(Store{insert_});
  return fx;
}

// Once the shadow is in the library a demand can be promoted from it, and its caller's next
// call may reach the workflow before the library's answer reaches this fill. So the next stage
// is announced now, ahead of the store: that call then waits for the fill instead of running.
void FillChain::announce_next(const std::string& bytes, FillEffects& fx) {
  if (step_ + 1 >= config_.chain.size()) return;
  const auto outs = outputs(bytes);
  if (!outs) return;
  auto vars = vars_;
  for (auto& [k, v] : *outs)
    vars[k] = v;
  const auto& s = config_.graph->stages[config_.chain[step_ + 1]];
  const auto rendered = dsl::render_stage(s, vars);
  if (!rendered) return;
  next_ = name_of(s, *rendered);
  fx.push_back(Announce{*next_, s.id, std::make_shared<const nlohmann::json>(rendered->body)});
}

Hash128 FillChain::name_of(const dsl::Stage& s, const dsl::RenderedRequest& r) const {
  return stage_name(config_.policy, s, r.endpoint, r.body, config_.caller, config_.run);
}

std::optional<dsl::Bindings> FillChain::outputs(const std::string& bytes) const {
  const auto doc = parse_json(bytes);
  if (doc.is_discarded()) return std::nullopt;
  auto outs = dsl::read_outputs(stage(), doc);
  if (!outs) return std::nullopt;
  return std::move(*outs);
}

FillEffects FillChain::stored(const std::optional<csl::InsertResult>& res) {
  FillEffects fx;
  if (finished_ || !busy_) return fx;
  busy_ = false;
  if (!res) {
    finish(FillStatus::failed, fx);
    return fx;
  }
  const bool stored = res->status == csl::InsertStatus::stored;
  if (stored) fx.push_back(Kept{res->ref});
  if (cancelled_) {
    if (stored) fx.push_back(Drop{res->ref});
    finish(FillStatus::cancelled, fx);
    return fx;
  }
  if (stored || res->status == csl::InsertStatus::duplicate) {
    advance(insert_->bytes, res->ref, stored, fx);
    return fx;
  }
  finish(FillStatus::failed, fx);  // stale, no room
  return fx;
}

// The stage ended with `bytes` (`stored`: its shadow is in the library): its outputs feed the
// next stage, which is announced before this one's end (see the header).
void FillChain::advance(const std::string& bytes, csl::EntryRef ref, bool stored, FillEffects& fx) {
  const auto ended = std::exchange(announced_, std::nullopt);
  if (auto outs = outputs(bytes))
    for (auto& [k, v] : *outs) {
      vars_[k] = v;
      if (ref.valid()) producers_[k] = ref;
    }
  ++step_;
  next_stage(fx);
  if (ended) fx.push_back(Ended{*ended, stored});
}

FillEffects FillChain::cancel() {
  FillEffects fx;
  if (finished_) return fx;
  cancelled_ = true;
  // A library call in flight finishes first (a shadow it stores must be discarded); an engine
  // request is aborted as the actor ends.
  if (!busy_) finish(FillStatus::cancelled, fx);
  return fx;
}

}  // namespace dynrt::run

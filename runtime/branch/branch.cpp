#include "runtime/branch/branch.hpp"

#include <algorithm>
#include <chrono>

namespace dynrt::branch {

std::string_view to_string(Phase p) {
  switch (p) {
    case Phase::proposing:
      return "proposing";
    case Phase::filling:
      return "filling";
    case Phase::resolved:
      return "resolved";
    case Phase::settled:
      return "settled";
  }
  return "?";
}

std::string_view to_string(FillStatus s) {
  switch (s) {
    case FillStatus::running:
      return "running";
    case FillStatus::done:
      return "done";
    case FillStatus::failed:
      return "failed";
    case FillStatus::cancelled:
      return "cancelled";
  }
  return "?";
}

std::string_view to_string(Outcome o) {
  switch (o) {
    case Outcome::pending:
      return "pending";
    case Outcome::selected:
      return "selected";
    case Outcome::unpredicted:
      return "unpredicted";
    case Outcome::ambiguous:
      return "ambiguous";
    case Outcome::unreadable:
      return "unreadable";
    case Outcome::abandoned:
      return "abandoned";
  }
  return "?";
}

BranchState::BranchState(BranchId id, const Hash128& coordinate, bool exclusive)
    : id_(id), coordinate_(coordinate), exclusive_(exclusive) {
  feedback_.branch = id;
  feedback_.coordinate = coordinate;
}

void BranchState::propose(std::vector<std::string> candidates, Duration setup) {
  if (phase_ != Phase::proposing) return;
  candidates_ = std::move(candidates);
  feedback_.proposed = candidates_.size();
  feedback_.setup = setup;
  phase_ = Phase::filling;
}

Fill* BranchState::find(FillId fill) {
  for (auto& f : fills_)
    if (f.id == fill) return &f;
  return nullptr;
}

void BranchState::admit(FillId fill, std::size_t rank, std::uint64_t reservation) {
  if (phase_ != Phase::filling || rank >= candidates_.size() || find(fill)) return;
  Fill f;
  f.id = fill;
  f.rank = rank;
  f.candidate = candidates_[rank];
  f.reservation = reservation;
  fills_.push_back(std::move(f));
  ++feedback_.admitted;
}

bool BranchState::stored(FillId fill, const csl::EntryRef& shadow) {
  Fill* f = find(fill);
  if (!f || f->loser || phase_ == Phase::settled) return false;
  f->shadows.push_back(shadow);
  return true;
}

std::uint64_t BranchState::finished(FillId fill, FillStatus status, Duration engine_time) {
  Fill* f = find(fill);
  if (!f || f->status != FillStatus::running || status == FillStatus::running) return 0;
  f->status = status;
  f->engine_time = engine_time;
  feedback_.fill_ms += std::chrono::duration<double, std::milli>(engine_time).count();
  switch (status) {
    case FillStatus::done:
      ++feedback_.completed;
      break;
    case FillStatus::failed:
      ++feedback_.failed;
      break;
    case FillStatus::cancelled:
      ++feedback_.cancelled;
      break;
    case FillStatus::running:
      break;
  }
  return f->reservation;
}

std::vector<FillId> BranchState::emitted(const std::string& selection) {
  std::vector<FillId> out;
  if (!exclusive_ || emitted_ || phase_ == Phase::resolved || phase_ == Phase::settled) return out;
  emitted_ = selection;
  for (const auto& f : fills_)
    if (f.status == FillStatus::running && outrun(f.rank)) out.push_back(f.id);
  return out;
}

bool BranchState::outrun(std::size_t rank) const {
  return emitted_ && phase_ != Phase::resolved && rank < candidates_.size() &&
         candidates_[rank] != *emitted_;
}

std::optional<std::size_t> BranchState::uncovered(const std::string& selection) const {
  const auto it = std::find(candidates_.begin(), candidates_.end(), selection);
  if (it == candidates_.end()) return std::nullopt;
  const auto rank = static_cast<std::size_t>(it - candidates_.begin());
  for (const auto& f : fills_)
    if (f.rank == rank && (f.status == FillStatus::running || f.status == FillStatus::done))
      return std::nullopt;
  return rank;
}

std::optional<std::size_t> BranchState::adopt(const std::string& selection) {
  if (phase_ != Phase::filling || !emitted_ || *emitted_ != selection || selection.empty())
    return std::nullopt;
  if (std::find(candidates_.begin(), candidates_.end(), selection) != candidates_.end())
    return std::nullopt;
  candidates_.push_back(selection);
  return candidates_.size() - 1;
}

Resolution BranchState::resolve(Outcome outcome, std::string selection) {
  Resolution r;
  if (phase_ == Phase::resolved || phase_ == Phase::settled || outcome == Outcome::pending ||
      outcome == Outcome::abandoned) {
    r.outcome = feedback_.outcome;
    return r;
  }
  if (outcome == Outcome::selected || outcome == Outcome::unpredicted) {
    const auto it = std::find(candidates_.begin(), candidates_.end(), selection);
    if (it != candidates_.end()) {
      outcome = Outcome::selected;
      r.selected_rank = static_cast<std::size_t>(it - candidates_.begin());
    } else {
      outcome = Outcome::unpredicted;
    }
  }
  phase_ = Phase::resolved;
  feedback_.outcome = r.outcome = outcome;
  feedback_.selection = std::move(selection);
  feedback_.selected_rank = r.selected_rank;

  // Which fills lose: every one but the winner (exclusive); none, for an independent decision
  // with a readable selection; every one when nothing may be promoted.
  const bool usable = outcome == Outcome::selected || outcome == Outcome::unpredicted;
  for (auto& f : fills_) {
    bool lose;
    if (!usable)
      lose = true;
    else if (!exclusive_)
      lose = false;
    else
      lose = !(r.selected_rank && f.rank == *r.selected_rank);
    if (!lose) continue;
    f.loser = true;
    if (f.status == FillStatus::running) r.cancel.push_back(f.id);
    r.discard.insert(r.discard.end(), f.shadows.begin(), f.shadows.end());
    f.shadows.clear();
  }
  return r;
}

void BranchState::demanded(bool consumed, double saved_ms, double wait_ms) {
  if (feedback_.demanded) return;
  feedback_.demanded = true;
  feedback_.consumed = consumed;
  feedback_.saved_ms = saved_ms;
  feedback_.wait_ms = wait_ms;
}

std::size_t BranchState::running() const {
  return static_cast<std::size_t>(std::count_if(
      fills_.begin(), fills_.end(), [](const Fill& f) { return f.status == FillStatus::running; }));
}

const Fill* BranchState::winner() const {
  if (feedback_.outcome != Outcome::selected || !feedback_.selected_rank) return nullptr;
  for (const auto& f : fills_)
    if (f.rank == *feedback_.selected_rank) return &f;
  return nullptr;
}

bool BranchState::settleable() const {
  if (phase_ != Phase::resolved || running() > 0) return false;
  // A winner that completed waits for its demand; anything else has nothing to wait for.
  const Fill* w = winner();
  return !(w && w->status == FillStatus::done && !feedback_.demanded);
}

Feedback BranchState::settle() {
  if (phase_ != Phase::settled) {
    if (feedback_.outcome == Outcome::pending) feedback_.outcome = Outcome::abandoned;
    phase_ = Phase::settled;
  }
  return feedback_;
}

}  // namespace dynrt::branch

#include "runtime/admission/controller.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

namespace dynrt::admission {

namespace {
// What a consumed fill saved its demand: the execution it did, less the time the demand still
// waited for it to finish. Nonsense input counts as nothing.
double latency_saved(double execution_ms, double wait_ms) {
  const auto sane = [](double ms) { return std::isfinite(ms) && ms > 0 ? ms : 0.0; };
  return sane(execution_ms) - sane(wait_ms);
}
}  // namespace

std::string_view to_string(AdmissionPolicy p) {
  switch (p) {
    case AdmissionPolicy::priced:
      return "priced";
    case AdmissionPolicy::threshold:
      return "threshold";
    case AdmissionPolicy::always:
      return "always";
    case AdmissionPolicy::fixed_load:
      return "static";
    case AdmissionPolicy::priced_generation:
      return "priced-generation";
    case AdmissionPolicy::priced_fills:
      return "priced-fills";
    case AdmissionPolicy::unpriced:
      return "unpriced";
  }
  return "priced";
}

std::optional<AdmissionPolicy> admission_policy_from(std::string_view name) {
  for (const auto p : {AdmissionPolicy::priced, AdmissionPolicy::threshold, AdmissionPolicy::always,
                       AdmissionPolicy::fixed_load, AdmissionPolicy::priced_generation,
                       AdmissionPolicy::priced_fills, AdmissionPolicy::unpriced})
    if (to_string(p) == name) return p;
  return std::nullopt;
}

Controller::Controller(const Clock& clock, AdmissionConfig config)
    : clock_(clock),
      config_(config),
      envelope_(config.horizon),
      curves_(config.prices),
      fit_(config.prices.interference, config.interference_fit),
      rng_(config.seed ^ 0x9E3779B97F4A7C15ULL) {}

// splitmix64: deterministic audits for a given seed, whatever the standard library.
double Controller::uniform() {
  std::uint64_t z = (rng_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

Controller::ClassState& Controller::state(const Hash128& coordinate) {
  return classes_.try_emplace(coordinate, config_.evidence_memory).first->second;
}

// The usability posterior forgets at the class model's pace: what is left of the evidence
// beyond the Beta(1, 1) prior is discounted before the new outcome is added.
void Controller::learn_usability(ClassState& c, bool usable) {
  const double m = c.model.memory();
  c.usability.alpha = 1 + m * (c.usability.alpha - 1) + (usable ? 1 : 0);
  c.usability.beta = 1 + m * (c.usability.beta - 1) + (usable ? 0 : 1);
}

double Controller::calibration(const ClassState& c, std::size_t rank) const {
  if (config_.calibration_memory <= 0) return 1;
  rank = std::min(rank, kCalibratedRanks - 1);
  if (rank >= c.calibration.size()) return 1;  // no fill of this rank judged yet
  const double w = std::max(config_.calibration_prior, 1e-9);
  const ClassState::Calibration& k = c.calibration[rank];
  return std::min(1.0, (k.used + w) / (k.p + w));
}

double Controller::ms_open(const Branch& b) const {
  return std::chrono::duration<double, std::milli>(clock_.now() - b.opened).count();
}

void Controller::learn_head_start(Branch& b, ClassState& c, double wait_ms) {
  if (config_.head_start_memory <= 0 || std::exchange(b.head_start_seen, true)) return;
  const double head = std::max(0.0, ms_open(b) - std::max(wait_ms, 0.0));
  c.head_start_ms = c.head_start_ms < 0
                        ? head
                        : c.head_start_ms + config_.head_start_memory * (head - c.head_start_ms);
}

std::optional<double> Controller::head_start_left(const Branch& b, const ClassState& c) const {
  if (config_.head_start_memory <= 0 || c.head_start_ms < 0) return std::nullopt;
  return std::max(0.0, c.head_start_ms - ms_open(b));
}

double Controller::priced_gain(const Branch& b, const ClassState& c, double gain_ms) const {
  const auto left = head_start_left(b, c);
  return left ? std::min(gain_ms, *left) : gain_ms;
}

// A loser of an exclusive branch is cancelled when the branch resolves, which is before its
// winner's demand comes: the head start left bounds how long it runs. A fill that is not
// consumed is a loser (1 - sel, the selection's upper quantile: optimistic, so this errs
// towards the whole run) or a selected fill its demand did not use (sel - p), which runs to
// its end.
double Controller::unused_share(const Branch& b, const ClassState& c, std::size_t rank, double p,
                                double slot_ms) const {
  const auto left_ms = head_start_left(b, c);
  if (!b.exclusive || !left_ms || slot_ms <= 0 || p >= 1) return 1;
  const double left = std::min(1.0, *left_ms / slot_ms);
  const double sel = std::clamp(c.selection.upper(rank), p, 1.0);
  return ((1 - sel) * left + (sel - p)) / (1 - p);
}

Controller::Branch* Controller::find(BranchId branch) {
  const auto it = branches_.find(branch);
  return it == branches_.end() ? nullptr : &it->second;
}

// -- load ---------------------------------------------------------------------------------------

void Controller::record_load() {
  LoadView v;
  v.fill = static_cast<double>(fills_in_flight_) / curves_.fill_slots();
  v.kv = kv_reserved_ / config_.prices.kv_budget;
  v.rho = rho_;
  v.engine_kv = engine_kv_;
  v.demanded = demanded_;
  envelope_.observe(clock_.now(), v);
}

void Controller::observe_load(double rho, double backlog, double engine_kv) {
  rho_ = std::clamp(rho, 0.0, 1.0);
  backlog_ = std::max(backlog, 0.0);
  engine_kv_ = std::clamp(engine_kv, 0.0, 1.0);
  curves_.set_engine_load(rho_, engine_kv_);
  record_load();
}

void Controller::observe_decode(std::size_t engine, const DecodeReading& reading) {
  if (!config_.fit_interference) return;
  fit_.observe(engine, reading);
  curves_.set_interference_scale(std::max(fit_.scale(), config_.min_price_scale));
  stats_.interference_scale = fit_.scale();
  stats_.interference_intervals = fit_.intervals();
}

LoadView Controller::view() const {
  return envelope_.view(clock_.now());
}

// -- Action 0 -----------------------------------------------------------------------------------

GenerationDecision Controller::open_branch(BranchId branch, const Hash128& coordinate,
                                           bool exclusive) {
  ClassState& c = state(coordinate);
  const TimePoint now = clock_.now();
  GenerationDecision d;
  d.x = make_context(ContextInputs{envelope_.envelope(now), rho_, c.consumption, backlog_,
                                   kv_reserved_ / config_.prices.kv_budget});
  const int n = c.model.samples();
  const int n0 = config_.cold_trials;
  const bool priced_gate = config_.policy == AdmissionPolicy::priced ||
                           config_.policy == AdmissionPolicy::priced_generation;
  if (!priced_gate) {
    // Fixed policies: open unless the static rule's load limits are exceeded.
    if (config_.policy == AdmissionPolicy::fixed_load &&
        (rho_ > config_.static_max_rho || backlog_ > config_.static_max_backlog)) {
      d.reason = GateReason::closed;
      ++stats_.branches_closed;
      return d;
    }
    d.open = true;
    d.reason = GateReason::fixed;
  } else if (n < n0) {
    if (n + c.pending >= n0) {  // Algorithm 1, line 4: the cold trials are in flight
      d.reason = GateReason::cold_pending;
      ++stats_.branches_closed;
      return d;
    }
    d.open = true;
    d.reason = GateReason::cold_trial;
    ++stats_.cold_trials;
  } else {
    d.u0 = c.model.ucb(d.x);  // Eq. 5
    if (d.u0 > 0) {
      d.open = true;
      d.reason = GateReason::ucb;
    } else if (uniform() < config_.generation_audit ||
               (config_.audit_after > 0 && c.refused + 1 >= config_.audit_after)) {
      // A closed class keeps gathering evidence, so that it can open again when fills pay.
      d.open = true;
      d.reason = GateReason::audit;
      ++stats_.generation_audits;
    } else {
      d.reason = GateReason::closed;
      ++c.refused;
      ++stats_.branches_closed;
      return d;
    }
  }
  c.refused = 0;
  // BeginTrial: registered before expansion, so feedback during setup finds it.
  branches_.erase(branch);  // an id opened twice starts afresh
  Branch& b = branches_.try_emplace(branch).first->second;
  b.coordinate = coordinate;
  b.x = d.x;
  b.opened = now;
  b.audit = d.reason == GateReason::audit;
  b.exclusive = exclusive;
  ++c.pending;
  ++stats_.branches_opened;
  return d;
}

// -- Action 1 -----------------------------------------------------------------------------------

FillDecision Controller::admit(BranchId branch, std::span<const Candidate> candidates,
                               int max_fills, TenantShare tenant) {
  FillDecision out;
  out.view = view();
  Branch* b = find(branch);
  if (!b || b->settled) {
    out.refused.assign(candidates.size(), Refusal::closed);
    return out;
  }
  ClassState& c = state(b->coordinate);
  std::vector<PricedCandidate> priced;
  priced.reserve(candidates.size());
  const bool priced_fills =
      config_.policy == AdmissionPolicy::priced || config_.policy == AdmissionPolicy::priced_fills;
  std::vector<double> raw_p;  // before calibration
  raw_p.reserve(candidates.size());
  for (const Candidate& cand : candidates) {
    // p = selection upper quantile x usability posterior mean x its rank's calibration.
    raw_p.push_back(c.selection.upper(cand.rank) * c.usability.mean());
    // The fixed policies weigh nothing by p; it is reported uncalibrated.
    const double p = raw_p.back() * (priced_fills ? calibration(c, cand.rank) : 1.0);
    const double gain = priced_fills ? priced_gain(*b, c, cand.gain_ms) : cand.gain_ms;
    Footprint footprint = cand.footprint;
    if (priced_fills) footprint.unused_share = unused_share(*b, c, cand.rank, p, footprint.slot_ms);
    priced.push_back(PricedCandidate{p, gain, footprint});
    out.p.push_back(p);
    b->predicted_ranks.push_back(cand.rank);
  }
  // The tenant's share of the budget, and what its fills already hold.
  const auto [slot_cap, kv_cap] = caps(tenant);
  const auto held = accounts_.find(std::string(tenant.tenant));
  const Account account = held == accounts_.end() ? Account{} : held->second;
  Budget budget;
  const int by_max = max_fills - b->admitted;
  const int by_slots = static_cast<int>(curves_.fill_slots()) - fills_in_flight_;
  const int by_share = slot_cap - account.fills;
  budget.fills = std::max(0, std::min({by_max, by_slots, by_share}));
  const int fill_budget = budget.fills;
  budget.kv_share =
      std::max(0.0, std::min(config_.prices.kv_budget - kv_reserved_, kv_cap - account.kv_share));
  std::vector<ReservationId> made(candidates.size(), 0);
  // Utility per ms of slot time, at the view the decision started from.
  const auto density = [&](std::size_t i) {
    const double ms = std::max(1.0, priced[i].footprint.slot_ms);
    return utility(priced[i], out.view, curves_) / ms;
  };
  // A branch the generation gate opened by an audit pays no reserve price: its probe is how a
  // closed class learns. A seeded probe of a refused candidate in an open branch does pay it:
  // that evidence can wait for a slot no likely candidate needs.
  const bool audited = b->audit;
  std::vector<bool> below_reserve(candidates.size(), false);  // asked more than once, counted once
  out.refused.assign(candidates.size(), priced_fills ? Refusal::utility : Refusal::threshold);
  std::vector<bool> eligible(candidates.size(), false);  // it passed its policy's own test
  Hooks hooks;
  hooks.reserve = [&](std::size_t i) {
    const double price = budget_reserve();
    if (priced_fills && !audited && price > 0 && density(i) <= price) {
      below_reserve[i] = true;
      out.refused[i] = Refusal::reserve;
      return false;
    }
    const auto share_refusals = stats_.share_refused;
    made[i] = reserve(branch, candidates[i].footprint.kv_share, tenant);
    if (made[i] == 0)
      out.refused[i] =
          stats_.share_refused != share_refusals ? Refusal::tenant_share : Refusal::fill_budget;
    return made[i] != 0;
  };
  // An audited branch probes: its best feasible candidate is admitted even at non-positive
  // utility (Algorithm 1, line 12), or the audit would learn the setup cost and nothing of
  // the fills, and a class closed because its fills failed could never see them pay. An open
  // branch probes its best refused candidate at the seeded rate fill_audit.
  // Either probe is spent only on a candidate that could pay: one whose fill would be worth
  // its price at this load if it were sure to be used once selected. A probe teaches the
  // usability (whether a selected candidate's fill is used); the selection is learned from
  // every branch that reaches Action 1, probed or not. A candidate that would not pay even at
  // usability 1 cannot be admitted whatever its probe shows, so probing it only delays the
  // others (at high load on the tight profile such probes were most of ReAct's fills).
  // Its utility at p = the selection's bound x `use` x `factor`.
  const auto utility_at = [&](std::size_t i, double use, double factor) {
    PricedCandidate at = priced[i];
    at.p = c.selection.upper(candidates[i].rank) * use * factor;
    at.footprint.unused_share = unused_share(*b, c, candidates[i].rank, at.p, at.footprint.slot_ms);
    return utility(at, out.view, curves_);
  };
  const auto could_pay = [&](std::size_t i) { return utility_at(i, 1, 1) > 0; };
  // A seeded probe in an open branch is spent at the full rate on a candidate whose fill would
  // pay at the usability posterior's upper bound, its rank's calibration kept; on one that
  // would pay only at a usability or a selection past what the evidence allows, at a fraction
  // of it. A class whose fills pay only when surely used and selected at the bound (a rank its
  // bound overrates, fills late at load) would otherwise pay for probes at every twentieth
  // branch that its evidence says will not pay.
  const auto worth_probing = [&](std::size_t i) {
    if (!could_pay(i)) return false;
    if (utility_at(i, c.usability.quantile(config_.usability_bound),
                   calibration(c, candidates[i].rank)) > 0)
      return true;
    return uniform() < config_.fill_audit_beyond_bound;
  };
  hooks.audit = [&](std::size_t i) {
    if (std::exchange(b->audit, false)) return could_pay(i);
    return uniform() < config_.fill_audit && worth_probing(i);
  };
  std::vector<Step> steps;
  if (priced_fills) {
    // The reserve price learns what a branch's best candidate is typically worth (before this
    // branch's admissions change it).
    double best = 0;
    for (std::size_t i = 0; i < priced.size(); ++i)
      best = std::max(best, density(i));
    if (best > 0)
      top_density_ = top_density_ == 0
                         ? best  // the first branch seeds it
                         : top_density_ + config_.budget_reserve_memory * (best - top_density_);
    steps = admit_fills(priced, out.view, curves_, budget, hooks);
  } else {
    // Fixed policies: in rank order, every candidate (always) or those whose p reaches the
    // fixed threshold, as long as the budgets and reservations allow. No repricing.
    // The confidence a fixed threshold is compared with is the predictor's alone (the
    // selection posterior's upper quantile), as speculative agents score their next action.
    // Every candidate is judged by the rule, so one the budget had no room for is reported as
    // refused by the budget, not by the rule.
    for (std::size_t i = 0; i < priced.size(); ++i) {
      const bool all = config_.policy == AdmissionPolicy::always ||
                       config_.policy == AdmissionPolicy::priced_generation;
      const double confidence = c.selection.upper(candidates[i].rank);
      if (config_.policy == AdmissionPolicy::unpriced) {
        // Eq. 7 with the fill's own engine time as its cost.
        const auto t = threshold(priced[i].gain_ms, priced[i].footprint.slot_ms);
        if (!t || confidence <= *t) continue;
      } else if (!all && confidence < config_.fixed_threshold) {
        continue;
      }
      eligible[i] = true;
      if (!feasible(budget, priced[i].footprint) || !hooks.reserve(i)) continue;  // fills left too
      const double cost = curves_.cost(out.view, priced[i].footprint);
      steps.push_back(Step{i, utility(priced[i], out.view, curves_), cost, false});
      --budget.fills;
      budget.kv_share -= priced[i].footprint.kv_share;
    }
  }
  // A candidate worth its price (or passing the fixed rule) that no step took and no
  // reservation refused: the budget ran out before it.
  const Refusal out_of_budget = by_max <= std::min(by_slots, by_share) ? Refusal::max_fills
                                : by_share < by_slots                  ? Refusal::tenant_share
                                                                       : Refusal::fill_budget;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const bool default_reason =
        out.refused[i] == Refusal::utility || (out.refused[i] == Refusal::threshold && eligible[i]);
    if (!default_reason) continue;
    const bool worth = priced_fills ? utility(priced[i], out.view, curves_) > 0 : eligible[i];
    if (worth && (static_cast<int>(steps.size()) >= fill_budget ||
                  !feasible(Budget{1, budget.kv_share}, priced[i].footprint)))
      out.refused[i] =
          static_cast<int>(steps.size()) >= fill_budget ? out_of_budget : Refusal::fill_budget;
  }
  for (const Step& s : steps) {
    out.refused[s.index] = Refusal::none;
    out.admitted.push_back(
        FillChoice{s.index, made[s.index], priced[s.index].p, s.utility, s.cost_ms, s.audit});
    b->reservations.push_back(made[s.index]);
    Reservation& r = reservations_.at(made[s.index]);
    r.rank = candidates[s.index].rank;
    r.p = priced[s.index].p;
    demanded_ += r.p;
    b->charged.emplace_back(r.rank, s.cost_ms);
    b->y -= s.cost_ms;  // Eq. 4: the fills this branch enabled
    ++b->admitted;
    stats_.admitted_p += r.p;
    stats_.fill_audits += s.audit ? 1 : 0;
    // Counted once its fate is known, at the estimate before calibration (the factor is what
    // multiplies it).
    if (config_.calibration_memory > 0) b->calibrated.push_back({r.rank, raw_p[s.index]});
  }
  stats_.fills_admitted += steps.size();
  stats_.reserve_refused +=
      static_cast<std::uint64_t>(std::count(below_reserve.begin(), below_reserve.end(), true));
  stats_.fills_refused += candidates.size() - steps.size();
  if (!steps.empty()) record_load();
  return out;
}

Controller::ShareCaps Controller::caps(const TenantShare& tenant) const {
  const double share = std::clamp(tenant.share, 0.0, 1.0);
  return {static_cast<int>(std::floor(share * curves_.fill_slots() + 1e-9)),
          share * config_.prices.kv_budget};
}

ReservationId Controller::reserve(BranchId branch, double kv, TenantShare tenant) {
  // Atomic: both the fill count and the KV share, against every branch's reservations.
  const auto [slot_cap, kv_cap] = caps(tenant);
  if (fills_in_flight_ + 1 > static_cast<int>(curves_.fill_slots()) ||
      kv_reserved_ + kv > config_.prices.kv_budget + kKvSlack) {
    ++stats_.reservations_refused;
    return 0;
  }
  auto& acc = accounts_[std::string(tenant.tenant)];
  if (acc.fills + 1 > slot_cap || acc.kv_share + kv > kv_cap + kKvSlack) {
    if (acc.fills == 0) accounts_.erase(std::string(tenant.tenant));
    ++stats_.reservations_refused;
    ++stats_.share_refused;
    return 0;
  }
  ++acc.fills;
  acc.kv_share += kv;
  const ReservationId id = next_reservation_++;
  reservations_.emplace(id, Reservation{branch, kv, std::string(tenant.tenant)});
  ++fills_in_flight_;
  kv_reserved_ += kv;
  return id;
}

std::optional<FillChoice> Controller::admit_emitted(BranchId branch, const Candidate& candidate,
                                                    TenantShare tenant) {
  Branch* b = find(branch);
  if (!b || b->settled) return std::nullopt;
  const LoadView v = view();
  const ReservationId id = reserve(branch, candidate.footprint.kv_share, tenant);
  if (id == 0) return std::nullopt;
  reservations_.at(id).rank = candidate.rank;
  reservations_.at(id).p = 1;
  demanded_ += 1;
  // p = 1: charged its price as any fill (Eq. 4), given back when it is consumed.
  const double cost = curves_.cost(v, candidate.footprint);
  b->reservations.push_back(id);
  b->charged.emplace_back(candidate.rank, cost);
  b->y -= cost;
  ++b->admitted;
  ++stats_.fills_admitted;
  ++stats_.emitted_admitted;
  stats_.admitted_p += 1;
  record_load();
  return FillChoice{0, id, 1.0, candidate.gain_ms, cost, false};
}

double Controller::budget_reserve() const {
  const double o =
      std::clamp(static_cast<double>(fills_in_flight_) / curves_.fill_slots(), 0.0, 1.0);
  const double over = std::max(0.0, 2 * o - 1);  // nothing until half the budget is in use
  return over * over * top_density_;
}

void Controller::charge_setup(BranchId branch, Duration setup, double draft_slot_ms,
                              double draft_prompt_tokens) {
  if (Branch* b = find(branch)) {
    double ms = std::chrono::duration<double, std::milli>(setup).count();
    if (draft_slot_ms > 0 || draft_prompt_tokens > 0)
      ms += curves_.cost(view(), Footprint{draft_slot_ms, 0, draft_prompt_tokens});
    if (b->settled) {
      revise(branch, -ms);
    } else {
      b->y -= ms;  // Eq. 4: T_setup, charged whatever the predictor produced
    }
  }
}

// -- feedback -----------------------------------------------------------------------------------

void Controller::resolve(BranchId branch, std::optional<std::size_t> selected_rank) {
  Branch* b = find(branch);
  if (!b || b->resolved) return;
  b->resolved = true;
  ClassState& c = state(b->coordinate);
  if (b->predicted_ranks.empty()) return;
  for (const std::size_t rank : b->predicted_ranks) {
    c.selection.observe(rank, selected_rank && *selected_rank == rank);
  }
  c.selection.next_branch();
  for (const std::size_t rank : b->predicted_ranks)
    c.selection.refresh(rank);
  // The fills of candidates not selected are now known to go unused; the selected one's is
  // counted when its demand judges it (consumed or missed), or never, if the library answered
  // its demand (its result may have been the fill's own, promoted by another run).
  std::erase_if(b->calibrated, [&](const Branch::Calibrated& f) {
    if (selected_rank && f.rank == *selected_rank) return false;
    count_use(c, f, false);
    return true;
  });
}

std::optional<Controller::Branch::Calibrated> Controller::take_calibrated(Branch& b,
                                                                          std::size_t rank) {
  const auto it = std::find_if(b.calibrated.begin(), b.calibrated.end(),
                               [&](const Branch::Calibrated& f) { return f.rank == rank; });
  if (it == b.calibrated.end()) return std::nullopt;
  const Branch::Calibrated fill = *it;
  b.calibrated.erase(it);
  return fill;
}

void Controller::count_use(ClassState& c, const Branch::Calibrated& fill, bool used) const {
  const double m = config_.calibration_memory;
  const std::size_t rank = std::min(fill.rank, kCalibratedRanks - 1);
  if (rank >= c.calibration.size()) c.calibration.resize(rank + 1);
  ClassState::Calibration& k = c.calibration[rank];
  k.p = m * k.p + fill.p;
  k.used = m * k.used + (used ? 1 : 0);
}

void Controller::consumed(BranchId branch, std::size_t rank, double saved_ms, double wait_ms) {
  Branch* b = find(branch);
  if (!b) return;
  ClassState& c = state(b->coordinate);
  learn_usability(c, true);
  learn_head_start(*b, c, wait_ms);
  if (b->consumed == 0) ++stats_.fills_used;  // a report repeated is one use
  if (const auto fill = take_calibrated(*b, rank)) count_use(c, *fill, true);
  ++b->consumed;
  // Eq. 4: the latency a consumed fill saved, and its price back (see the header).
  revise(branch, latency_saved(saved_ms, wait_ms) + give_back(*b, rank));
}

void Controller::credit(BranchId branch, double saved_ms, double wait_ms) {
  revise(branch, latency_saved(saved_ms, wait_ms));
}

void Controller::missed(BranchId branch, std::size_t rank, double wait_ms) {
  Branch* b = find(branch);
  if (!b) return;
  ClassState& c = state(b->coordinate);
  learn_usability(c, false);
  learn_head_start(*b, c, wait_ms);
  if (const auto fill = take_calibrated(*b, rank)) count_use(c, *fill, false);
  revise(branch, -wait_ms);  // Eq. 4: an expired wait
}

int Controller::fills_in_flight(std::string_view tenant) const {
  const auto it = accounts_.find(std::string(tenant));
  return it == accounts_.end() ? 0 : it->second.fills;
}

void Controller::refund(ReservationId reservation) {
  const auto it = reservations_.find(reservation);
  if (it == reservations_.end()) return;
  Branch* b = find(it->second.branch);
  if (!b) return;
  // It did no engine work: neither used nor wasted, the calibration leaves it out.
  (void)take_calibrated(*b, it->second.rank);
  revise(it->second.branch, give_back(*b, it->second.rank));
}

double Controller::give_back(Branch& b, std::size_t rank) {
  double back = 0;
  for (auto& [r, ms] : b.charged)
    if (r == rank) back += std::exchange(ms, 0.0);
  return back;
}

void Controller::release(ReservationId reservation) {
  const auto it = reservations_.find(reservation);
  if (it == reservations_.end()) return;
  --fills_in_flight_;
  demanded_ = fills_in_flight_ == 0 ? 0 : std::max(0.0, demanded_ - it->second.p);
  kv_reserved_ = std::max(0.0, kv_reserved_ - it->second.kv_share);
  if (fills_in_flight_ == 0) kv_reserved_ = 0;  // no residue of rounding once none is held
  if (const auto acc = accounts_.find(it->second.tenant); acc != accounts_.end()) {
    acc->second.kv_share = std::max(0.0, acc->second.kv_share - it->second.kv_share);
    if (--acc->second.fills <= 0) accounts_.erase(acc);
  }
  reservations_.erase(it);
  record_load();
}

void Controller::settle(BranchId branch) {
  Branch* b = find(branch);
  if (!b || b->settled) return;
  b->settled = true;
  // A reservation still held when its branch settles belongs to nobody any more: a fill never
  // spawned (the branch ended while Action 1 was answering) or one whose end was never
  // reported. Returning it here is what keeps a burst of ending branches from draining the
  // budget for good; release() of an id already returned does nothing.
  for (const ReservationId r : b->reservations)
    release(r);
  ClassState& c = state(b->coordinate);
  b->observation = c.model.observe(b->x, b->y);
  c.pending = std::max(0, c.pending - 1);
  if (b->admitted > 0) {
    const double share = static_cast<double>(b->consumed) / b->admitted;
    c.consumption += config_.consumption_memory * (share - c.consumption);
  }
  settled_order_.push_back(branch);
  while (settled_order_.size() > config_.settled_memory) {
    branches_.erase(settled_order_.front());
    settled_order_.pop_front();
  }
}

void Controller::revise(BranchId branch, double delta_ms) {
  Branch* b = find(branch);
  if (!b) return;
  const double old_y = b->y;
  b->y += delta_ms;
  if (b->settled) state(b->coordinate).model.revise(b->observation, b->x, old_y, b->y);
}

// -- inspection ---------------------------------------------------------------------------------

const ClassModel* Controller::model(const Hash128& coordinate) const {
  const auto it = classes_.find(coordinate);
  return it == classes_.end() ? nullptr : &it->second.model;
}

const RankSelection* Controller::selection(const Hash128& coordinate) const {
  const auto it = classes_.find(coordinate);
  return it == classes_.end() ? nullptr : &it->second.selection;
}

const BetaPosterior* Controller::usability(const Hash128& coordinate) const {
  const auto it = classes_.find(coordinate);
  return it == classes_.end() ? nullptr : &it->second.usability;
}

std::optional<double> Controller::branch_return(BranchId branch) const {
  const auto it = branches_.find(branch);
  if (it == branches_.end()) return std::nullopt;
  return it->second.y;
}

std::string_view to_string(GateReason r) {
  switch (r) {
    case GateReason::cold_trial:
      return "cold trial";
    case GateReason::cold_pending:
      return "cold trials pending";
    case GateReason::ucb:
      return "expected benefit above its price";
    case GateReason::closed:
      return "expected benefit below its price";
    case GateReason::audit:
      return "audit";
    case GateReason::fixed:
      return "fixed policy";
  }
  return "unknown";
}

std::string_view to_string(Refusal r) {
  switch (r) {
    case Refusal::none:
      return "admitted";
    case Refusal::utility:
      return "price";
    case Refusal::threshold:
      return "threshold";
    case Refusal::max_fills:
      return "max_fills";
    case Refusal::fill_budget:
      return "fill budget";
    case Refusal::tenant_share:
      return "tenant share";
    case Refusal::reserve:
      return "reserve price";
    case Refusal::closed:
      return "branch closed";
  }
  return "unknown";
}

}  // namespace dynrt::admission

// Load-priced admission with delayed feedback (paper section 3.4, Algorithm 1): the state
// the pricing actor owns.
//
// The controller keeps the load history and its causal envelope, the price curves, the KV and
// fill reservations of fills in flight, and per branch class (coordinate) the rank-conditioned
// selection posteriors, the usability posterior and the ridge model of the generation gate.
// A branch goes through it in this order:
//   open_branch      Action 0: cold trial, UCB, or a seeded audit; registers the trial
//                    before expansion so feedback that arrives during setup is not lost
//   admit            Action 1: sequential repricing over the proposed candidates, with
//                    atomic reservations and seeded audits
//   charge_setup     the predictor's time, charged whether or not it produced anything, and a
//                    drafter's engine time at its price (what its samples cost canonical work)
//   resolve          selection statistics for every predicted candidate; the fills of the
//                    candidates not selected count as unused in their rank's calibration of p
//   consumed/missed  usability (and calibration) for admitted, selected fills; savings and
//                    waits
//   release          a fill finished or was cancelled: its reservation returns (once; a second
//                    release of the same id does nothing)
//   settle           the branch's return y becomes one observation of its class; every
//                    reservation of the branch not yet released returns with it
//   revise           a later event changes y without adding an observation
//
// Deterministic for a given seed and clock; single-threaded.
#pragma once

#include "runtime/admission/beta.hpp"
#include "runtime/admission/fill_gate.hpp"
#include "runtime/admission/generation_gate.hpp"
#include "runtime/admission/interference_fit.hpp"
#include "runtime/admission/load.hpp"
#include "runtime/admission/price.hpp"
#include "runtime/clock.hpp"
#include "runtime/hash.hpp"

#include <cstdint>
#include <deque>
#include <memory_resource>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dynrt::admission {

using BranchId = std::uint64_t;
using ReservationId = std::uint64_t;

// How the two gates decide. `priced` is DynBranch's controller; the others are the fixed
// policies the paper compares it with (section 5.4-5.5, Figure 15) and that `dynrt bench`
// runs as baselines. Every policy keeps learning (posteriors, feedback), so the probabilities
// a threshold compares against are the same estimates the priced gate uses.
enum class AdmissionPolicy {
  priced,      ///< Action 0 by UCB on the learned return, Action 1 by sequential repricing
  threshold,   ///< Action 0 always open; Action 1 admits candidates whose selection
               ///< confidence (the rank's posterior upper quantile) >= fixed_threshold
  always,      ///< Action 0 always open; Action 1 admits every candidate the budgets allow
  fixed_load,  ///< Action 0 open only below a fixed load (static_max_rho, static_max_backlog);
               ///< Action 1 as `threshold`
  // The two halves of `priced`, for the two-level ablation (the paper's Figure 13a):
  priced_generation,  ///< Action 0 priced; Action 1 admits every candidate the budgets allow
  priced_fills,       ///< Action 0 always open; Action 1 by sequential repricing
  // A latency-cost objective that does not see the load (the DSP baseline): Action 0 always
  // open; Action 1 admits a candidate when its selection confidence p gives
  // p G - (1 - p) T > 0, with T the fill's own engine time (its slot time): Eq. 6 with a
  // price of one ms of delay per ms of fill, whatever the load.
  unpriced,
};

std::string_view to_string(AdmissionPolicy p);
std::optional<AdmissionPolicy> admission_policy_from(std::string_view name);

struct AdmissionConfig {
  AdmissionPolicy policy = AdmissionPolicy::priced;
  double fixed_threshold = 0.5;                // threshold and fixed_load: the p a candidate needs
  double static_max_rho = 0.25;                // fixed_load: canonical pressure at most this ...
  double static_max_backlog = 0.03;            // ... and queued requests per slot at most this
  Duration horizon = std::chrono::seconds(5);  // H of the causal envelope
  PriceParams prices;
  int cold_trials = 8;             // n0: trials per class before the UCB rule applies
  double generation_audit = 0.05;  // chance a closed generation gate opens anyway
  int audit_after = 20;            // ... and it surely opens after this many refusals in a row
  double fill_audit = 0.05;        // chance one refused candidate that could pay is admitted anyway
  // ... where it would pay at the usability posterior's usability_bound quantile and its rank's
  // calibration; where it would pay only past them, fill_audit x fill_audit_beyond_bound.
  double usability_bound = 0.95;
  double fill_audit_beyond_bound = 0.1;
  // gamma: the weight an observation of a class loses with each newer one, in the gate's
  // model (ClassModel) and in its usability posterior. 1 forgets nothing.
  double evidence_memory = 0.9;
  double consumption_memory = 0.1;  // weight of the newest branch in the consumption EWMA
  // Calibration of p (priced Action 1 only): per class and predicted rank, the p of the fills
  // admitted below 1 whose fate is known, against how many of them were used, each sum
  // discounted by this much per fill of that rank (0.99: about the last hundred). A candidate
  // is priced at
  //     p x min(1, (used + calibration_prior) / (sum of those fills' p + calibration_prior)),
  // so that a rank whose fills are used less often than their p said (the selection's upper
  // quantile, and the winner's curse of admitting the candidates it overrates most) is priced
  // at the share it really gets. Per rank, as the selection posterior is: a class whose top
  // candidate is nearly always picked overrates its unlikely ones, not its top one. A fill's fate
  // is known when its branch resolves (a candidate not selected: unused) or its demand judges it
  // (used or missed); one whose demand the library answered, or that found its whole chain there,
  // is left out. Never raised: a p below the share used only admits too little. calibration_memory
  // 0 turns it off.
  double calibration_memory = 0.99;
  double calibration_prior = 2;  // pseudo-fills used at their p: the factor starts at 1
  // The gain a fill is priced at (priced Action 1 only): at most the head start it can have
  // over its demand. A fill hides at most the time from its start to the demand for its
  // result (the paper's Lemma A.6: the smaller of the window and the execution), so a
  // candidate's G is capped at the class's mean head start (from a branch's opening to its
  // selected candidate's demand, less the demand's wait for the fill), less the time since
  // this branch opened. The mean weighs the newest branch by this much; 0 turns the cap off.
  double head_start_memory = 0.1;
  // The fill budget's reserve price (priced Action 1 only): once more than half the budget is
  // in use, a candidate must be worth, per ms of slot time, more than (2 o_fill - 1)^2 times
  // the typical best candidate of a branch (an EWMA with this weight per branch). The last
  // slots are kept for likely candidates: where fills outnumber the budget, a branch's second
  // and third choices would otherwise hold the slots the next branches' first choices need.
  // 0 turns it off.
  double budget_reserve_memory = 0.05;
  std::size_t settled_memory = 4096;  // settled branches kept for delayed feedback
  // How the engines' inter-token latency corrects the prices' interference curve
  // (observe_decode); `fit_interference` false keeps the curve as it is.
  bool fit_interference = true;
  InterferenceFitParams interference_fit;
  // The least of the fit's scale the prices take: by default an engine that reads as stretching
  // less than the curve gets no cheaper fills. A fill admitted too cheaply slows every request
  // beside it; one refused costs only its own saving. And the fit reads low where an interval
  // mixes small batches (the sharing overhead falls on some of its steps only): 0.7-0.9 at a
  // tenth of saturation on an engine that stretches exactly as the curve.
  double min_price_scale = 1.0;
  std::uint64_t seed = 1;
};

enum class GateReason {
  cold_trial,    ///< opened: the class has had fewer than n0 trials, pending ones included
  cold_pending,  ///< closed: the remaining cold trials are in flight; wait for their feedback
  ucb,           ///< opened: U0 > 0
  closed,        ///< closed: U0 <= 0
  audit,         ///< opened by an audit despite U0 <= 0 (seeded, or after audit_after refusals);
                 ///< its Action 1 admits at least the best feasible candidate
  fixed,         ///< opened by a fixed policy (AdmissionPolicy other than priced)
};

std::string_view to_string(GateReason r);

// Why Action 1 left a candidate out (FillDecision::refused), as `dynrt explain` reports it.
enum class Refusal {
  none,          ///< admitted
  utility,       ///< its expected benefit did not beat its price at the load (U <= 0)
  threshold,     ///< below a fixed policy's confidence threshold
  max_fills,     ///< the decision's max_fills was reached
  fill_budget,   ///< the engines' fill slots or KV budget were taken
  tenant_share,  ///< the tenant held its share of the fill budget
  reserve,       ///< worth less than the fill budget's reserve price
  closed,        ///< the branch was not open with the controller (gate closed or settled)
};
std::string_view to_string(Refusal r);

struct GenerationDecision {
  bool open = false;
  GateReason reason = GateReason::closed;
  double u0 = 0;  // Eq. 5 at this context (meaningful after the cold trials)
  Context x = Context::Zero();
};

struct Candidate {
  std::size_t rank = 0;  // position in the predictor's ordering, 0 first
  double gain_ms = 0;    // G: execution its consumption would save after C1 lookup
  Footprint footprint;
};

struct FillChoice {
  std::size_t candidate = 0;  // index into admit()'s candidates
  ReservationId reservation = 0;
  double p = 0;
  double utility = 0;
  double cost_ms = 0;  // C_s at the projected load it was admitted at
  bool audit = false;
};

struct FillDecision {
  std::vector<FillChoice> admitted;  // in admission order
  std::vector<double> p;             // per candidate: the probability the gate used
  std::vector<Refusal> refused;      // per candidate: none if admitted, else why not
  LoadView view;                     // V_H the decision started from
};

struct AdmissionStats {
  std::uint64_t branches_opened = 0;
  std::uint64_t branches_closed = 0;
  std::uint64_t cold_trials = 0;
  std::uint64_t generation_audits = 0;
  std::uint64_t fills_admitted = 0;
  std::uint64_t fills_refused = 0;
  std::uint64_t fill_audits = 0;
  std::uint64_t reservations_refused = 0;
  std::uint64_t share_refused = 0;     // ... of which: the tenant held its share of the budget
  std::uint64_t emitted_admitted = 0;  // winners admitted when their decider emitted them
  std::uint64_t reserve_refused = 0;   // candidates worth less than the budget's reserve price
  // The sum of p over admitted fills (1 for a winner admitted on emission), and how many of
  // them served the call their branch's selection made (consumed()): over fills_admitted, the
  // p the gate weighed fills by against the share that were used, a check of its calibration.
  double admitted_p = 0;
  std::uint64_t fills_used = 0;
  // The engines' stretch over the price curves' interference, as the fit reads it now, and the
  // load intervals it has read (InterferenceFit); the prices take it from min_price_scale up.
  double interference_scale = 1;
  std::uint64_t interference_intervals = 0;
};

// Whose budget a branch's fills are charged to: a tenant may hold at most `share` of the fill
// slots (rounded down) and of the KV budget at once, so one tenant's speculation cannot spend
// the capacity another's would use. The default tenant with share 1 is the whole budget.
struct TenantShare {
  std::string_view tenant;
  double share = 1.0;
};

class Controller {
 public:
  Controller(const Clock& clock, AdmissionConfig config = {});

  // -- load ----------------------------------------------------------------------------------
  // Canonical pressure rho (canonical requests in flight / decode slots) and queue backlog
  // (queued requests / decode slots), from an engine snapshot or the periodic probe. Fill
  // and KV occupancy come from the controller's own reservations.
  void observe_load(double rho, double backlog, double engine_kv = 0);
  LoadView view() const;  // V_H now
  const LoadEnvelope& envelope() const { return envelope_; }
  const PriceCurves& prices() const { return curves_; }
  // The engines' decode slots, read from their load: the price curves count the canonical
  // requests a fill slows as rho times this.
  void set_decode_slots(double slots) { curves_.set_decode_slots(slots); }
  // What a prompt token stalls the engines' decode steps by, and over how many batches
  // (PriceCurves::set_prefill).
  void set_prefill(double ms_per_token, int batches) { curves_.set_prefill(ms_per_token, batches); }
  // The engines' token counters at a load reading: the interference fit reads the stretch they
  // show, and the slot and KV prices follow it (InterferenceFit).
  // `engine` names the engine the reading is of (an index the caller keeps stable).
  void observe_decode(std::size_t engine, const DecodeReading& reading);
  const InterferenceFit& interference_fit() const { return fit_; }

  // -- a branch ------------------------------------------------------------------------------
  // `exclusive`: the branch cancels its losers' fills when it resolves, so a fill that is not
  // consumed is priced only until then (Footprint::unused_share); an independent branch's
  // candidates run to the end whichever is picked.
  GenerationDecision open_branch(BranchId branch, const Hash128& coordinate,
                                 bool exclusive = false);
  // Action 1 for a branch open_branch() opened; max_fills is the template's per-branch limit.
  FillDecision admit(BranchId branch, std::span<const Candidate> candidates, int max_fills,
                     TenantShare tenant = {});
  // Resolve on emission: the decider of a branch open_branch() opened has emitted `candidate`,
  // which Action 1 did not admit. It is admitted at p = 1 (U = Ĝ > 0) if the fill budget and
  // the tenant's share have room, past the template's max_fills and the reserve price: the
  // caller's next call is about to demand it. nullopt when it does not fit.
  std::optional<FillChoice> admit_emitted(BranchId branch, const Candidate& candidate,
                                          TenantShare tenant = {});
  // Eq. 4's T_setup: the time from the branch's start to its candidates. `draft_slot_ms`, the
  // engine time a drafter's samples took, and `draft_prompt_tokens`, the prompt tokens they had
  // the engine prefill, are charged too, at the price the curves give them at the current load,
  // as a fill's are: at load, drafting delays canonical work.
  void charge_setup(BranchId branch, Duration setup, double draft_slot_ms = 0,
                    double draft_prompt_tokens = 0);
  // The branch resolved; selected_rank is the rank of the selected candidate among those
  // predicted, or nullopt if the selection was none of them. (An ambiguous selection should
  // not be reported: nothing is learned from it.)
  void resolve(BranchId branch, std::optional<std::size_t> selected_rank);
  // An admitted, selected fill was consumed in time. Its execution took `saved_ms`, and the
  // demand waited `wait_ms` for it to finish: the return grows by the difference, the latency
  // the fill saved (at load a fill that started late saves little of its execution; negative
  // when the wait was longer than the execution). The price charged for it at admission is
  // given back: C_s is the delay a fill imposes when it is *not* consumed (Eq. 6); a consumed
  // fill did work its demand would otherwise have done. Charging it anyway teaches the class
  // that its best branches lose money, most where every offer is filled (independent
  // promotion).
  void consumed(BranchId branch, std::size_t rank, double saved_ms, double wait_ms = 0);
  // An admitted, selected fill missed its deadline; the demand waited `wait_ms` for it. This
  // lowers usability; it is not a prediction error.
  void missed(BranchId branch, std::size_t rank, double wait_ms);
  // A later stage of an admitted fill's chain was served from it: the branch's return grows by
  // its execution `saved_ms` less what its demand waited for it, `wait_ms`, as in consumed()
  // (revised if it has settled); usability is not touched (that counts the fill once, at its
  // first stage).
  void credit(BranchId branch, double saved_ms, double wait_ms = 0);
  // The admitted fill ran no engine work (the library already held its whole chain): the
  // price charged at admission is given back, since G after a C1 lookup was zero and nothing
  // was imposed on canonical requests. Call before release(); once per reservation.
  void refund(ReservationId reservation);
  void release(ReservationId reservation);
  // Also releases the branch's reservations still held. Unknown or settled branches: nothing.
  void settle(BranchId branch);
  // Delayed feedback after settle(): the branch's return changes by delta_ms.
  void revise(BranchId branch, double delta_ms);

  // -- inspection ----------------------------------------------------------------------------
  const AdmissionStats& stats() const { return stats_; }
  const ClassModel* model(const Hash128& coordinate) const;
  const RankSelection* selection(const Hash128& coordinate) const;
  const BetaPosterior* usability(const Hash128& coordinate) const;
  std::optional<double> branch_return(BranchId branch) const;
  int fills_in_flight() const { return fills_in_flight_; }
  // Fills in flight charged to `tenant`.
  int fills_in_flight(std::string_view tenant) const;
  double kv_reserved() const { return kv_reserved_; }
  // The fill budget's reserve price now: ms of utility per ms of slot time a candidate must
  // beat (see AdmissionConfig::budget_reserve_memory).
  double budget_reserve() const;
  // Branches opened and not yet settled (each holds a pending trial of its class).
  std::size_t open_branches() const { return branches_.size() - settled_order_.size(); }

 private:
  struct ClassState {
    explicit ClassState(double memory) : model(Context::Zero(), memory) {}
    ClassModel model;
    RankSelection selection;
    BetaPosterior usability;
    double consumption = 0.5;  // EWMA of consumed / admitted fills
    // Per predicted rank: the discounted sum of the p of fills whose fate is known, and how
    // many of them were used (ranks past kCalibratedRanks share the last entry).
    struct Calibration {
      double p = 0;
      double used = 0;
    };
    std::vector<Calibration> calibration;
    double head_start_ms = -1;  // mean head start of a fill over its demand (-1: none yet)
    int pending = 0;            // opened, not yet settled
    int refused = 0;            // decisions closed in a row
  };
  // Allocator-aware, so that a branch's lists come from the controller's pool (memory_).
  struct Branch {
    using allocator_type = std::pmr::polymorphic_allocator<>;
    explicit Branch(const allocator_type& a)
        : predicted_ranks(a), reservations(a), charged(a), calibrated(a) {}
    Hash128 coordinate;
    Context x = Context::Zero();
    TimePoint opened{};             // when the generation gate opened it
    bool head_start_seen = false;   // its selected candidate's demand has been judged
    double y = 0;                   // the full-path return so far (Eq. 4)
    std::uint64_t observation = 0;  // its index in the class model, once settled
    bool audit = false;             // opened by an audit: Action 1 probes
    bool exclusive = false;         // its losers are cancelled when it resolves
    std::pmr::vector<std::size_t> predicted_ranks;
    std::pmr::vector<ReservationId> reservations;
    // What each admitted candidate's fill was charged (rank, ms), until given back.
    std::pmr::vector<std::pair<std::size_t, double>> charged;
    // The fills admitted at a p below 1, which their rank's calibration counts.
    struct Calibrated {
      std::size_t rank = 0;
      double p = 0;  // before calibration
    };
    std::pmr::vector<Calibrated> calibrated;
    int admitted = 0;
    int consumed = 0;
    bool resolved = false;
    bool settled = false;
  };
  // What one tenant's fills hold; kept while it holds anything.
  struct Account {
    int fills = 0;
    double kv_share = 0;
  };
  struct Reservation {
    BranchId branch;
    double kv_share;
    std::string tenant;
    std::size_t rank = 0;  // the candidate it was admitted for
    double p = 0;          // its chance of being consumed, as priced (1 for an emitted winner)
  };

  // The price still charged for the branch's fill of candidate `rank`, now given back (0 when
  // it already was).
  double give_back(Branch& b, std::size_t rank);
  // The most fills and KV share `tenant`'s share of the fill budget allows.
  struct ShareCaps {
    int fills = 0;
    double kv = 0;
  };
  ShareCaps caps(const TenantShare& tenant) const;
  // Reserves one fill's slot and KV share for `tenant` (0 when the budget or its share is full).
  ReservationId reserve(BranchId branch, double kv, TenantShare tenant);
  double uniform();
  ClassState& state(const Hash128& coordinate);
  static void learn_usability(ClassState& c, bool usable);
  // The factor the p of the class's rank-`rank` candidate is priced at
  // (AdmissionConfig::calibration_memory), in (0, 1].
  double calibration(const ClassState& c, std::size_t rank) const;
  static constexpr std::size_t kCalibratedRanks = 16;
  // The branch's calibrated fill of candidate `rank`, taken out of its list (nullopt if none).
  static std::optional<Branch::Calibrated> take_calibrated(Branch& b, std::size_t rank);
  // One calibrated fill whose fate is known: used, or not.
  void count_use(ClassState& c, const Branch::Calibrated& fill, bool used) const;
  // The demand for the branch's selected candidate came `wait_ms` before now: the head start
  // a fill started at the branch's opening had over it (AdmissionConfig::head_start_memory).
  void learn_head_start(Branch& b, ClassState& c, double wait_ms);
  // How long ago the generation gate opened the branch, in ms.
  double ms_open(const Branch& b) const;
  // The head start a fill starting now can still have over its demand (ms, at least 0);
  // nullopt where the class has none yet or the cap is off (head_start_memory 0).
  std::optional<double> head_start_left(const Branch& b, const ClassState& c) const;
  // G as the candidate is priced: at most the head start left to a fill starting now.
  double priced_gain(const Branch& b, const ClassState& c, double gain_ms) const;
  // Footprint::unused_share of a fill of candidate `rank`, admitted now at probability p of
  // being consumed, that would hold a slot for slot_ms.
  double unused_share(const Branch& b, const ClassState& c, std::size_t rank, double p,
                      double slot_ms) const;
  Branch* find(BranchId branch);
  void record_load();

  const Clock& clock_;
  AdmissionConfig config_;
  LoadEnvelope envelope_;
  PriceCurves curves_;
  InterferenceFit fit_;
  std::unordered_map<Hash128, ClassState> classes_;
  // Branch records outlive the runs around which they are made (settled ones are kept for
  // delayed feedback); from a pool of their own they do not pin pages of those runs' memory,
  // which could then not go back to the system after a burst.
  std::pmr::unsynchronized_pool_resource memory_;
  std::pmr::unordered_map<BranchId, Branch> branches_{&memory_};
  std::pmr::deque<BranchId> settled_order_{&memory_};
  std::unordered_map<ReservationId, Reservation> reservations_;
  ReservationId next_reservation_ = 1;
  int fills_in_flight_ = 0;
  double demanded_ = 0;  // the reservations' p, summed (LoadView::demanded)
  std::unordered_map<std::string, Account> accounts_;  // by tenant
  double kv_reserved_ = 0;
  double top_density_ = 0;  // EWMA of each branch's best utility per ms of slot time
  double rho_ = 0;
  double backlog_ = 0;
  double engine_kv_ = 0;
  std::uint64_t rng_;
  AdmissionStats stats_;
};

}  // namespace dynrt::admission

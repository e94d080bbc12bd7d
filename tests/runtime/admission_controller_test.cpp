// The controller: Action 0 with cold trials, UCB and audits; Action 1 with reservations;
// feedback; and learning on synthetic branch classes. Seeded and deterministic.
#include "runtime/admission/controller.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

namespace dynrt::admission {
namespace {

using std::chrono::milliseconds;

const Hash128 kClass = xxh3_128("routing/handler");

TEST(ClassModel, ShermanMorrisonKeepsTheExactInverse) {
  ClassModel m;
  Eigen::Matrix<double, kContextDim, kContextDim> a =
      Eigen::Matrix<double, kContextDim, kContextDim>::Identity();
  Context q = Context::Zero();
  for (int i = 0; i < 20; ++i) {
    ContextInputs in{0.05 * i, 0.02 * i, 0.5, 0.1 * (i % 3), 0.3};
    const Context x = make_context(in);
    const double y = 100.0 - 10 * i;
    m.observe(x, y);
    a += x * x.transpose();
    q += x * y;
  }
  EXPECT_TRUE(m.a_inverse().isApprox(a.inverse(), 1e-9));
  EXPECT_TRUE(m.q().isApprox(q, 1e-12));
  const Context x = make_context(ContextInputs{0.4, 0.3, 0.6, 0.2, 0.1});
  EXPECT_NEAR(m.mean(x), x.dot(a.inverse() * q), 1e-9);  // Eq. 5, first term
  EXPECT_NEAR(m.radius(x), m.sigma() * std::sqrt(x.dot(a.inverse() * x)), 1e-9);
}

TEST(ClassModel, RevisionMovesQAndSigmaButAddsNoObservation) {
  ClassModel m;
  const Context x = make_context(ContextInputs{0.5, 0.5, 0.5, 0, 0});
  const auto index = m.observe(x, 100);
  const auto a = m.a_inverse();
  m.revise(index, x, 100, 250);
  EXPECT_EQ(m.samples(), 1);
  EXPECT_TRUE(m.a_inverse().isApprox(a));
  EXPECT_TRUE(m.q().isApprox(x * 250.0));
  EXPECT_NEAR(m.sigma(), 250, 1e-9);
}

TEST(ClassModel, DiscountedEvidenceWeighsEachObservationByItsAge) {
  const double g = 0.8;
  ClassModel m(Context::Zero(), g);
  Eigen::Matrix<double, kContextDim, kContextDim> e =
      Eigen::Matrix<double, kContextDim, kContextDim>::Zero();
  Context q = Context::Zero();
  double y2 = 0, w = 0;
  std::vector<std::uint64_t> index;
  std::vector<Context> xs;
  for (int i = 0; i < 12; ++i) {
    const Context x = make_context(ContextInputs{0.07 * i, 0.03 * i, 0.4, 0.1 * (i % 4), 0.2});
    const double y = 50.0 - 9 * i;
    index.push_back(m.observe(x, y));
    xs.push_back(x);
    e = g * e + x * x.transpose();  // the ridge prior I is not discounted
    q = g * q + x * y;
    y2 = g * y2 + y * y;
    w = g * w + 1;
  }
  const auto identity = Eigen::Matrix<double, kContextDim, kContextDim>::Identity();
  EXPECT_TRUE(m.a_inverse().isApprox((identity + e).inverse(), 1e-9));
  EXPECT_TRUE(m.q().isApprox(q, 1e-9));
  EXPECT_NEAR(m.sigma(), std::sqrt(y2 / w), 1e-9);
  EXPECT_EQ(m.samples(), 12);
  // Delayed feedback on the third observation lands at its present weight, g^9.
  m.revise(index[2], xs[2], 32, 132);
  EXPECT_TRUE(m.q().isApprox(q + std::pow(g, 9) * 100 * xs[2], 1e-9));
  EXPECT_EQ(m.samples(), 12);
}

TEST(Context, HasItsSixDocumentedComponents) {
  const Context x = make_context(ContextInputs{0.7, 0.2, 0.4, 3.0, 0.25});
  EXPECT_EQ(x(0), 1.0);           // bias
  EXPECT_EQ(x(1), 0.7);           // horizon pressure
  EXPECT_NEAR(x(2), 0.5, 1e-12);  // transient low: 0.7 - 0.2
  EXPECT_EQ(x(3), 0.4);           // consumption
  EXPECT_EQ(x(4), 1.0);           // backlog, capped
  EXPECT_EQ(x(5), 0.25);          // KV occupancy
}

class ControllerTest : public ::testing::Test {
 protected:
  AdmissionConfig config(int cold = 3, double gen_audit = 0, double fill_audit = 0) {
    AdmissionConfig c;
    c.cold_trials = cold;
    c.generation_audit = gen_audit;
    c.fill_audit = fill_audit;
    c.seed = 42;
    // The tests' clock stands still unless they move it, so a demand would come the instant its
    // branch opened and no fill could have a head start: the cap has tests of its own.
    c.head_start_memory = 0;
    return c;
  }
  // Twice the gain at which a fill of kClass's candidate `rank` with footprint `f` breaks even
  // at the current load if surely used once selected: it could pay, and at a usability below
  // a half it is believed not to.
  static double gain_that_could_pay(const Controller& ctl, std::size_t rank, Footprint f) {
    const double sel = ctl.selection(kClass)->upper(rank);
    return 2 * (1 - sel) / sel * ctl.prices().cost(ctl.view(), f);
  }
  // The default configuration with the calibration of p at `memory` (0: off).
  AdmissionConfig calibrating(double memory) {
    AdmissionConfig c = config();
    c.calibration_memory = memory;
    return c;
  }
  // The fill decision on two candidates of kClass after `branches` branches at light load, each
  // admitting `fills` of them and selecting rank 0, whose fill is consumed: calibrated, then
  // with calibration off.
  std::pair<FillDecision, FillDecision> after_selecting_the_first(int fills, int branches) {
    const std::vector<Candidate> cands = {{0, 30000, Footprint{1500, 0.004}},
                                          {1, 30000, Footprint{1500, 0.004}}};
    ManualClock clock;
    Controller calibrated(clock_, calibrating(0.99));
    Controller plain(clock, calibrating(0));
    for (Controller* ctl : {&calibrated, &plain}) {
      ctl->observe_load(0.1, 0);
      for (BranchId id = 1; id <= static_cast<BranchId>(branches); ++id) {
        EXPECT_TRUE(ctl->open_branch(id, kClass).open);
        EXPECT_EQ(ctl->admit(id, cands, fills).admitted.size(), static_cast<std::size_t>(fills));
        ctl->resolve(id, std::size_t{0});
        ctl->consumed(id, 0, 2000);
        ctl->settle(id);
      }
      EXPECT_TRUE(ctl->open_branch(1000, kClass).open);
    }
    return {calibrated.admit(1000, cands, fills), plain.admit(1000, cands, fills)};
  }
  // A controller with every seeded probe drawn (fill_audit 1) and `beyond_bound` as the rate
  // past the evidence's bound, after 30 branches of kClass at a load where fills have a price:
  // each fills all of `cands`, selects the first, and that fill is consumed (`used`) or comes
  // too late for its demand.
  std::unique_ptr<Controller> probing_after(double beyond_bound, std::vector<Candidate> cands,
                                            bool used) {
    AdmissionConfig c = config(/*cold=*/1000, /*gen_audit=*/0, /*fill_audit=*/1);
    c.fill_audit_beyond_bound = beyond_bound;
    auto ctl = std::make_unique<Controller>(clock_, c);
    ctl->observe_load(0.3, 0);
    for (BranchId b = 1; b <= 30; ++b) {
      EXPECT_TRUE(ctl->open_branch(b, kClass).open);
      const FillDecision d = ctl->admit(b, cands, static_cast<int>(cands.size()));
      EXPECT_EQ(d.admitted.size(), cands.size());
      ctl->resolve(b, std::size_t{0});
      if (used)
        ctl->consumed(b, 0, 2000);
      else
        ctl->missed(b, 0, 500);
      for (const FillChoice& fill : d.admitted)
        ctl->release(fill.reservation);
      ctl->settle(b);
    }
    return ctl;
  }
  ManualClock clock_;
};

TEST_F(ControllerTest, ColdTrialsCountPendingOnes) {
  Controller ctl(clock_, config(/*cold=*/2));
  ctl.observe_load(0.3, 0);
  EXPECT_EQ(ctl.open_branch(1, kClass).reason, GateReason::cold_trial);
  EXPECT_EQ(ctl.open_branch(2, kClass).reason, GateReason::cold_trial);
  // Both cold trials are in flight: wait for their feedback (Algorithm 1, line 4).
  const GenerationDecision d = ctl.open_branch(3, kClass);
  EXPECT_FALSE(d.open);
  EXPECT_EQ(d.reason, GateReason::cold_pending);
  ctl.settle(1);
  ctl.settle(2);
  EXPECT_NE(ctl.open_branch(4, kClass).reason, GateReason::cold_pending);
  EXPECT_EQ(ctl.model(kClass)->samples(), 2);
}

TEST_F(ControllerTest, AdmitReservesAndReleaseReturns) {
  Controller ctl(clock_, config());
  ctl.observe_load(0.1, 0);
  ASSERT_TRUE(ctl.open_branch(1, kClass).open);
  const std::vector<Candidate> cands = {{0, 3000, Footprint{1500, 0.01}},
                                        {1, 3000, Footprint{1500, 0.01}}};
  const FillDecision d = ctl.admit(1, cands, /*max_fills=*/1);
  ASSERT_EQ(d.admitted.size(), 1u);  // the template allows one fill per branch
  EXPECT_EQ(d.p.size(), 2u);
  EXPECT_NEAR(d.p[0], 0.5 * 0.5, 1e-12);  // prior selection mean x prior usability mean
  EXPECT_EQ(ctl.fills_in_flight(), 1);
  EXPECT_NEAR(ctl.kv_reserved(), 0.01, 1e-12);
  EXPECT_NEAR(ctl.view().fill, 1.0 / 16, 1e-12);
  EXPECT_NEAR(*ctl.branch_return(1), -d.admitted[0].cost_ms, 1e-9);  // Eq. 4: enabled cost
  ctl.release(d.admitted[0].reservation);
  EXPECT_EQ(ctl.fills_in_flight(), 0);
  EXPECT_EQ(ctl.kv_reserved(), 0);
  ctl.release(d.admitted[0].reservation);  // twice is harmless
  EXPECT_EQ(ctl.fills_in_flight(), 0);
}

// The load view counts the fills in flight by their chance of being consumed (the p each was
// admitted at; 1 for an emitted winner), so the prices charge new fills for delaying them.
TEST_F(ControllerTest, TheViewWeighsTheFillsInFlightByTheirChanceOfBeingConsumed) {
  Controller ctl(clock_, config());
  ctl.observe_load(0.1, 0);
  ASSERT_TRUE(ctl.open_branch(1, kClass).open);
  const std::vector<Candidate> cands = {{0, 3000, Footprint{1500, 0.001}},
                                        {1, 3000, Footprint{1500, 0.001}}};
  const FillDecision d = ctl.admit(1, cands, 2);
  ASSERT_EQ(d.admitted.size(), 2u);
  EXPECT_NEAR(ctl.view().demanded, d.admitted[0].p + d.admitted[1].p, 1e-12);
  EXPECT_GT(ctl.view().demanded, 0);
  const std::optional<FillChoice> emitted =
      ctl.admit_emitted(1, Candidate{2, 3000, Footprint{1500, 0.001}});
  ASSERT_TRUE(emitted.has_value());
  EXPECT_NEAR(ctl.view().demanded, d.admitted[0].p + d.admitted[1].p + 1, 1e-12);
  ctl.release(d.admitted[0].reservation);
  EXPECT_NEAR(ctl.view().demanded, d.admitted[1].p + 1, 1e-12);
  ctl.release(emitted->reservation);
  ctl.release(d.admitted[1].reservation);
  EXPECT_EQ(ctl.view().demanded, 0);
}

// When a branch ends while Action 1 is answering, the fills it was granted never start and
// nobody releases their reservations: its settlement must, or the budget drains for good.
TEST_F(ControllerTest, SettleReturnsTheReservationsTheBranchStillHolds) {
  Controller ctl(clock_, config());
  ctl.observe_load(0.1, 0);
  ASSERT_TRUE(ctl.open_branch(1, kClass).open);
  ASSERT_TRUE(ctl.open_branch(2, kClass).open);
  const std::vector<Candidate> cands = {{0, 3000, Footprint{1500, 0.01}},
                                        {1, 3000, Footprint{1500, 0.01}}};
  const FillDecision late = ctl.admit(1, cands, /*max_fills=*/2);
  const FillDecision kept = ctl.admit(2, cands, /*max_fills=*/1);
  ASSERT_EQ(late.admitted.size(), 2u);
  ASSERT_EQ(kept.admitted.size(), 1u);
  ctl.release(late.admitted[0].reservation);  // one of branch 1's fills ran and ended
  EXPECT_EQ(ctl.open_branches(), 2u);
  ctl.settle(1);  // the other never started
  EXPECT_EQ(ctl.fills_in_flight(), 1) << "branch 2's fill still holds its slot";
  EXPECT_NEAR(ctl.kv_reserved(), 0.01, 1e-12);
  EXPECT_EQ(ctl.open_branches(), 1u);
  ctl.release(late.admitted[1].reservation);  // a late release of it: nothing happens
  EXPECT_EQ(ctl.fills_in_flight(), 1);
  ctl.settle(2);
  EXPECT_EQ(ctl.fills_in_flight(), 0);
  EXPECT_EQ(ctl.kv_reserved(), 0);
  EXPECT_EQ(ctl.open_branches(), 0u);
}

// A tenant's fills hold at most its share of the budget (a quarter of 16 slots: 4), whatever
// other tenants hold; each tenant's release gives back its own room.
TEST_F(ControllerTest, ATenantsFillsNeverExceedItsShare) {
  AdmissionConfig c = config();
  c.policy = AdmissionPolicy::always;
  Controller ctl(clock_, c);
  ctl.observe_load(0.05, 0);
  const std::vector<Candidate> cands = {{0, 5000, Footprint{1000, 0.001}},
                                        {1, 5000, Footprint{1000, 0.001}},
                                        {2, 5000, Footprint{1000, 0.001}}};
  const TenantShare acme{"acme", 0.25};
  std::vector<ReservationId> held;
  for (BranchId b = 1; b <= 3; ++b) {
    ASSERT_TRUE(ctl.open_branch(b, kClass).open);
    for (const auto& f : ctl.admit(b, cands, 3, acme).admitted)
      held.push_back(f.reservation);
  }
  EXPECT_EQ(held.size(), 4u);
  EXPECT_EQ(ctl.fills_in_flight("acme"), 4);
  EXPECT_EQ(ctl.stats().share_refused, 0u) << "refused by the budget check, not by a reservation";
  // Another tenant's branch still gets its fills: acme cannot spend beta's capacity.
  ASSERT_TRUE(ctl.open_branch(4, kClass).open);
  EXPECT_EQ(ctl.admit(4, cands, 3, TenantShare{"beta", 0.25}).admitted.size(), 3u);
  EXPECT_EQ(ctl.fills_in_flight("beta"), 3);
  EXPECT_EQ(ctl.fills_in_flight(), 7);
  // acme gets one slot back for each fill that ends.
  ctl.release(held[0]);
  ASSERT_TRUE(ctl.open_branch(5, kClass).open);
  EXPECT_EQ(ctl.admit(5, cands, 3, acme).admitted.size(), 1u);
  EXPECT_EQ(ctl.fills_in_flight("acme"), 4);
  for (BranchId b = 1; b <= 5; ++b)
    ctl.settle(b);
  EXPECT_EQ(ctl.fills_in_flight("acme"), 0);
  EXPECT_EQ(ctl.fills_in_flight("beta"), 0);
  EXPECT_EQ(ctl.fills_in_flight(), 0);
}

// The KV share is bounded the same way: a tenant with a tenth of a 0.1 KV budget holds 0.01.
TEST_F(ControllerTest, ATenantsKvReservationNeverExceedsItsShare) {
  AdmissionConfig c = config();
  c.policy = AdmissionPolicy::always;
  c.prices.kv_budget = 0.1;
  Controller ctl(clock_, c);
  ctl.observe_load(0.05, 0);
  const std::vector<Candidate> cands = {{0, 5000, Footprint{1000, 0.006}},
                                        {1, 5000, Footprint{1000, 0.006}}};
  ASSERT_TRUE(ctl.open_branch(1, kClass).open);
  EXPECT_EQ(ctl.admit(1, cands, 2, TenantShare{"acme", 0.1}).admitted.size(), 1u);
  EXPECT_NEAR(ctl.kv_reserved(), 0.006, 1e-12);
  ctl.settle(1);
  EXPECT_EQ(ctl.kv_reserved(), 0);
}

TEST_F(ControllerTest, ReservationsAreSharedAcrossBranches) {
  AdmissionConfig c = config();
  c.prices.kv_budget = 0.03;
  Controller ctl(clock_, c);
  ctl.observe_load(0.05, 0);
  const std::vector<Candidate> cands = {{0, 5000, Footprint{1000, 0.02}}};
  ASSERT_TRUE(ctl.open_branch(1, kClass).open);
  ASSERT_TRUE(ctl.open_branch(2, kClass).open);
  EXPECT_EQ(ctl.admit(1, cands, 3).admitted.size(), 1u);
  EXPECT_TRUE(ctl.admit(2, cands, 3).admitted.empty());  // the KV budget is held by branch 1
}

TEST_F(ControllerTest, FeedbackUpdatesSelectionForEveryPredictedRankAndUsabilityForAdmitted) {
  Controller ctl(clock_, config());
  ctl.observe_load(0.1, 0);
  ASSERT_TRUE(ctl.open_branch(1, kClass).open);
  const std::vector<Candidate> cands = {{0, 3000, Footprint{800, 0.005}},
                                        {1, 3000, Footprint{800, 0.005}},
                                        {2, 3000, Footprint{800, 0.005}}};
  const FillDecision d = ctl.admit(1, cands, 3);
  ctl.resolve(1, 1);  // the rank-1 candidate was selected
  const RankSelection& sel = *ctl.selection(kClass);
  EXPECT_EQ(sel.posterior(0).beta, 2);
  EXPECT_EQ(sel.posterior(1).alpha, 2);
  EXPECT_EQ(sel.posterior(2).beta, 2);
  EXPECT_EQ(sel.branches(), 1u);
  const double before = *ctl.branch_return(1);
  ctl.missed(1, 1, 120);  // its fill missed the deadline: the demand waited 120 ms
  EXPECT_NEAR(*ctl.branch_return(1), before - 120, 1e-9);
  EXPECT_EQ(sel.posterior(1).alpha, 2);  // not a prediction error
  for (const FillChoice& f : d.admitted)
    ctl.release(f.reservation);
  ctl.settle(1);
  EXPECT_EQ(ctl.model(kClass)->samples(), 1);
  // A delayed consumption after settlement revises, without a second observation; the
  // consumed fill's price is given back with its saving.
  double price = 0;
  for (const FillChoice& f : d.admitted)
    if (cands[f.candidate].rank == 1) price = f.cost_ms;
  ASSERT_GT(price, 0);
  ctl.consumed(1, 1, 900);
  EXPECT_EQ(ctl.model(kClass)->samples(), 1);
  EXPECT_NEAR(*ctl.branch_return(1), before - 120 + 900 + price, 1e-9);
}

// Eq. 4 charges the fills a branch enabled at C_s, the delay a fill imposes when it is not
// consumed (Eq. 6): a consumed fill's price is given back with its saving, the others' stay.
TEST_F(ControllerTest, AConsumedFillsPriceIsGivenBackTheOthersStayCharged) {
  Controller ctl(clock_, config());
  ctl.observe_load(0.2, 0);
  ASSERT_TRUE(ctl.open_branch(1, kClass).open);
  const std::vector<Candidate> cands = {{0, 3000, Footprint{1500, 0.004}},
                                        {1, 3000, Footprint{1500, 0.004}},
                                        {2, 3000, Footprint{1500, 0.004}}};
  const FillDecision d = ctl.admit(1, cands, 3);
  ASSERT_EQ(d.admitted.size(), 3u);
  double charged = 0, kept = 0;
  for (const FillChoice& c : d.admitted) {
    ASSERT_GT(c.cost_ms, 0);
    charged += c.cost_ms;
    if (cands[c.candidate].rank != 1) kept += c.cost_ms;
  }
  EXPECT_NEAR(*ctl.branch_return(1), -charged, 1e-9);
  ctl.resolve(1, std::size_t{1});
  ctl.consumed(1, 1, 2000);
  EXPECT_NEAR(*ctl.branch_return(1), 2000 - kept, 1e-9);
  ctl.consumed(1, 1, 0);  // reported twice: its price is not given back twice
  EXPECT_NEAR(*ctl.branch_return(1), 2000 - kept, 1e-9);
  ctl.settle(1);
  EXPECT_NEAR(*ctl.branch_return(1), 2000 - kept, 1e-9);
}

// The stats carry what a check of the gate's calibration needs: the p each admitted fill was
// weighed by, and how many fills served their branch's selection.
TEST_F(ControllerTest, StatsAddUpThePOfAdmittedFillsAndTheFillsUsed) {
  Controller ctl(clock_, config());
  ctl.observe_load(0.2, 0);
  ASSERT_TRUE(ctl.open_branch(1, kClass).open);
  const std::vector<Candidate> cands = {{0, 3000, Footprint{1500, 0.004}},
                                        {1, 3000, Footprint{1500, 0.004}},
                                        {2, 3000, Footprint{1500, 0.004}}};
  const FillDecision d = ctl.admit(1, cands, 2);
  ASSERT_EQ(d.admitted.size(), 2u);
  double p = 0;
  for (const FillChoice& c : d.admitted)
    p += c.p;
  EXPECT_GT(p, 0);
  EXPECT_NEAR(ctl.stats().admitted_p, p, 1e-12);
  const auto emitted = ctl.admit_emitted(1, cands[2]);
  ASSERT_TRUE(emitted.has_value());
  EXPECT_NEAR(ctl.stats().admitted_p, p + 1, 1e-12) << "an emitted winner is admitted at p = 1";
  EXPECT_EQ(ctl.stats().fills_admitted, 3u);
  EXPECT_EQ(ctl.stats().fills_used, 0u);
  ctl.resolve(1, std::size_t{0});
  ctl.consumed(1, 0, 2000);
  ctl.consumed(1, 0, 0);  // reported twice: one use
  EXPECT_EQ(ctl.stats().fills_used, 1u);
  ctl.settle(1);
  ASSERT_TRUE(ctl.open_branch(2, kClass).open);
  const FillDecision e = ctl.admit(2, cands, 1);
  ASSERT_EQ(e.admitted.size(), 1u);
  ctl.resolve(2, std::size_t{1});
  ctl.missed(2, 0, 100);  // a miss is not a use
  ctl.settle(2);
  EXPECT_EQ(ctl.stats().fills_used, 1u);
}

// Branches of a class whose three candidates are all filled and whose selection cycles over
// them: each fill is used a third of the time, while the selection posterior's upper quantile
// says more. Returns the mean p of the last branch's admitted fills.
namespace {
double cycle_selections(Controller& ctl, int branches) {
  const std::vector<Candidate> cands = {{0, 30000, Footprint{1500, 0.004}},
                                        {1, 30000, Footprint{1500, 0.004}},
                                        {2, 30000, Footprint{1500, 0.004}}};
  double mean_p = 0;
  for (int i = 1; i <= branches; ++i) {
    const BranchId id = static_cast<BranchId>(i);
    EXPECT_TRUE(ctl.open_branch(id, kClass).open);
    const FillDecision d = ctl.admit(id, cands, 3);
    EXPECT_EQ(d.admitted.size(), 3u);
    mean_p = 0;
    for (const FillChoice& c : d.admitted)
      mean_p += c.p / static_cast<double>(d.admitted.size());
    const std::size_t selected = static_cast<std::size_t>(i % 3);
    ctl.resolve(id, selected);
    ctl.consumed(id, selected, 2000);
    ctl.settle(id);
  }
  return mean_p;
}
}  // namespace

// The p a class's fills are priced at follows the share of its admitted fills that are used,
// not the selection's optimistic upper quantile alone; calibration_memory 0 turns that off.
TEST_F(ControllerTest, PIsPricedAtTheShareOfItsAdmittedFillsThatAreUsed) {
  ManualClock clock;
  Controller calibrated(clock_, calibrating(0.99));
  Controller plain(clock, calibrating(0));
  calibrated.observe_load(0.1, 0);
  plain.observe_load(0.1, 0);
  const double p = cycle_selections(calibrated, 300);
  const double raw = cycle_selections(plain, 300);
  EXPECT_GT(raw, 0.36) << "the upper quantile overrates a third";
  EXPECT_NEAR(p, 1.0 / 3, 0.03);
  EXPECT_LT(p, raw);
  // Both saw the same selections: the posteriors are the same, only the factor differs.
  EXPECT_EQ(calibrated.selection(kClass)->posterior(0).alpha,
            plain.selection(kClass)->posterior(0).alpha);
}

// A class whose fills are used at least as often as their p said is priced at p as it is:
// the factor is never above 1.
TEST_F(ControllerTest, CalibrationNeverRaisesP) {
  const auto [a, b] = after_selecting_the_first(/*fills=*/1, 50);  // rank 0, always selected
  EXPECT_EQ(a.p, b.p);
  EXPECT_GT(a.p[0], 0.9);
}

// The calibration is per predicted rank, as the selection posterior is: where the top
// candidate is always picked and the second never, the second's p is priced down and the
// top one's is left alone (one factor per class would have priced both down).
TEST_F(ControllerTest, AnOverratedRankIsPricedDownWithoutTheOthers) {
  const auto [a, b] = after_selecting_the_first(/*fills=*/2, 60);
  ASSERT_EQ(a.p.size(), 2u);
  EXPECT_EQ(a.p[0], b.p[0]) << "the top rank's fills are used as often as its p says";
  EXPECT_GT(b.p[1], 0) << "the upper quantile still gives the second rank a chance";
  EXPECT_LT(a.p[1], 0.5 * b.p[1]) << "none of the second rank's fills were used";
}

namespace {
// Branches of kClass whose selected candidate (rank 0, always) is demanded `head` after the
// branch opened and finds its fill done; the clock moves by `head` for each.
void demand_after(Controller& ctl, ManualClock& clock, BranchId first, int branches,
                  Duration head) {
  const std::vector<Candidate> cands = {{0, 30000, Footprint{1500, 0.004}}};
  for (BranchId id = first; id < first + static_cast<BranchId>(branches); ++id) {
    ASSERT_TRUE(ctl.open_branch(id, kClass).open);
    ASSERT_EQ(ctl.admit(id, cands, 1).admitted.size(), 1u);
    clock.advance(head);
    ctl.resolve(id, std::size_t{0});
    ctl.consumed(id, 0, 30000, /*wait_ms=*/0);
    ctl.settle(id);
  }
}
}  // namespace

// A fill hides at most the head start it has over its demand (Lemma A.6): a candidate's G is
// priced at the class's mean head start, less the time its branch has already been open.
// head_start_memory 0 prices the whole execution.
TEST_F(ControllerTest, AFillsGainIsPricedAtMostAtTheHeadStartItCanHave) {
  ManualClock plain_clock;
  AdmissionConfig capping = config();
  capping.head_start_memory = 0.1;
  Controller capped(clock_, capping);
  Controller plain(plain_clock, config());
  for (Controller* ctl : {&capped, &plain})
    ctl->observe_load(0.2, 0);
  demand_after(capped, clock_, 1, 20, std::chrono::seconds(1));
  demand_after(plain, plain_clock, 1, 20, std::chrono::seconds(1));
  const std::vector<Candidate> cands = {{0, 30000, Footprint{1500, 0.004}}};
  for (Controller* ctl : {&capped, &plain})
    ASSERT_TRUE(ctl->open_branch(100, kClass).open);
  // 400 ms after the branch opened: 600 ms of head start is left.
  clock_.advance(std::chrono::milliseconds(400));
  plain_clock.advance(std::chrono::milliseconds(400));
  const FillDecision a = capped.admit(100, cands, 1);
  const FillDecision b = plain.admit(100, cands, 1);
  ASSERT_EQ(a.admitted.size(), 1u);
  ASSERT_EQ(b.admitted.size(), 1u);
  const FillChoice& x = a.admitted[0];
  const FillChoice& y = b.admitted[0];
  EXPECT_EQ(x.p, y.p);
  EXPECT_NEAR(x.cost_ms, y.cost_ms, 1e-9);
  EXPECT_NEAR(x.utility, x.p * 600 - (1 - x.p) * x.cost_ms, 1e-6);
  EXPECT_NEAR(y.utility, y.p * 30000 - (1 - y.p) * y.cost_ms, 1e-6);
}

// An exclusive branch cancels its losers when it resolves, before its winner's demand comes, so
// a fill that is not consumed runs at most for the head start left: a loser's slot and KV are
// priced for that long. A selected fill its demand does not use runs to its end. An
// independent branch's candidates all run to their end, and so does every fill before a head
// start is known.
TEST_F(ControllerTest, AnExclusiveBranchsLoserIsPricedUntilItsBranchResolves) {
  AdmissionConfig capping = config();
  capping.head_start_memory = 1;
  Controller ctl(clock_, capping);
  ctl.observe_load(0.3, 0);
  Footprint f{1500, 0.004};
  f.prompt_tokens = 200;
  const std::vector<Candidate> cands = {{0, 30000, f}, {1, 30000, f}};
  const auto cost_at = [&](const LoadView& v, double unused_share) {
    Footprint g = f;
    g.unused_share = unused_share;
    return ctl.prices().cost(v, g);
  };
  // No head start known yet: priced whole.
  ASSERT_TRUE(ctl.open_branch(1, kClass, /*exclusive=*/true).open);
  const FillDecision cold = ctl.admit(1, cands, 2);
  ASSERT_EQ(cold.admitted.size(), 2u);
  EXPECT_NEAR(cold.admitted[0].cost_ms, cost_at(cold.view, 1), 1e-9);
  clock_.advance(std::chrono::seconds(1));
  ctl.resolve(1, std::size_t{0});
  ctl.consumed(1, 0, 30000, /*wait_ms=*/0);
  ctl.settle(1);
  // Rank 0 picked a second after opening: 1,000 ms of head start. Two branches of the class,
  // opened 400 ms ago, so 600 ms of the fill's 1,500 are left (0.4).
  ASSERT_TRUE(ctl.open_branch(2, kClass, /*exclusive=*/true).open);
  ASSERT_TRUE(ctl.open_branch(3, kClass, /*exclusive=*/false).open);
  clock_.advance(std::chrono::milliseconds(400));
  const FillDecision exclusive = ctl.admit(2, cands, 1);
  ctl.settle(2);
  const FillDecision independent = ctl.admit(3, cands, 1);
  for (const FillDecision* d : {&exclusive, &independent}) {
    ASSERT_EQ(d->admitted.size(), 1u);
    ASSERT_EQ(d->admitted[0].candidate, 0u);
  }
  const double p = exclusive.p[0];
  const double sel = ctl.selection(kClass)->upper(0);
  ASSERT_LT(p, sel) << "the fill's own usability is below 1: some selected fills go unused";
  ASSERT_LT(sel, 1);
  // Not consumed: a loser (1 - sel) runs 0.4 of its time, an unused winner (sel - p) all of it.
  const double share = ((1 - sel) * 0.4 + (sel - p)) / (1 - p);
  EXPECT_NEAR(exclusive.admitted[0].cost_ms, cost_at(exclusive.view, share), 1e-9);
  EXPECT_NEAR(independent.admitted[0].cost_ms, cost_at(independent.view, 1), 1e-9);
  EXPECT_LT(exclusive.admitted[0].cost_ms, independent.admitted[0].cost_ms);
  EXPECT_NEAR(exclusive.admitted[0].utility, p * 600 - (1 - p) * exclusive.admitted[0].cost_ms,
              1e-6);
}

// The head start is learned from the demand's arrival, not from when the fill was judged: a
// demand that waited for its fill had the time since the branch opened less that wait. Once
// the head start is spent the candidate is worth nothing and is refused, where the whole
// execution would have paid.
TEST_F(ControllerTest, ACandidateWhoseHeadStartIsSpentIsRefused) {
  AdmissionConfig capping = config();
  capping.head_start_memory = 1;  // the latest branch's head start alone
  Controller ctl(clock_, capping);
  ctl.observe_load(0.2, 0);
  demand_after(ctl, clock_, 1, 5, std::chrono::seconds(1));
  // A branch whose demand came 200 ms after it opened and waited 800 ms for the fill.
  const std::vector<Candidate> cands = {{0, 30000, Footprint{1500, 0.004}}};
  ASSERT_TRUE(ctl.open_branch(10, kClass).open);
  ASSERT_EQ(ctl.admit(10, cands, 1).admitted.size(), 1u);
  clock_.advance(std::chrono::seconds(1));
  ctl.resolve(10, std::size_t{0});
  ctl.consumed(10, 0, 30000, /*wait_ms=*/800);
  ctl.settle(10);
  ASSERT_TRUE(ctl.open_branch(11, kClass).open);
  clock_.advance(std::chrono::milliseconds(150));
  const FillDecision d = ctl.admit(11, cands, 1);
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_NEAR(d.admitted[0].utility, d.p[0] * 50 - (1 - d.p[0]) * d.admitted[0].cost_ms, 1e-6);
  ctl.settle(11);
  ASSERT_TRUE(ctl.open_branch(12, kClass).open);
  clock_.advance(std::chrono::milliseconds(300));
  const FillDecision spent = ctl.admit(12, cands, 1);
  EXPECT_TRUE(spent.admitted.empty());
  EXPECT_EQ(spent.refused[0], Refusal::utility);
}

// The prices learn from each engine reading whether the engines' own load is already past the
// largest stretch Figure 5b measured (their KV then adds no stretch and is free).
TEST_F(ControllerTest, EngineReadingsTellThePricesWhetherTheirLoadIsPastTheMeasuredStretch) {
  Controller ctl(clock_, config());
  ctl.observe_load(0.5, 0, 0.1);
  EXPECT_FALSE(ctl.prices().past_measured_stretch());
  const Footprint f{2000, 0.01};
  const double priced = ctl.prices().cost(ctl.view(), f);
  ctl.observe_load(0.5, 0, 0.3);
  EXPECT_TRUE(ctl.prices().past_measured_stretch());
  EXPECT_LT(ctl.prices().cost(ctl.view(), f), priced);
  EXPECT_EQ(ctl.prices().at(ctl.view()).kv, 0);
}

// A fill's fate is counted only when it is known: a selected fill whose demand the library
// answered (never judged) and a fill that found its whole chain in the library (refunded)
// leave the calibration alone, while the fill of a candidate not selected counts as unused.
TEST_F(ControllerTest, TheCalibrationCountsOnlyFillsWhoseFateIsKnown) {
  const std::vector<Candidate> cands = {{0, 30000, Footprint{1500, 0.004}},
                                        {1, 30000, Footprint{1500, 0.004}}};
  // kind 0: selected, never judged; 1: refunded, then not selected; 2: not selected.
  const auto p_after = [&](int kind, double memory) {
    ManualClock clock;
    AdmissionConfig c = calibrating(memory);
    c.policy = AdmissionPolicy::priced_fills;  // Action 0 open whatever the returns
    Controller ctl(clock, c);
    ctl.observe_load(0.1, 0);
    for (BranchId id = 1; id <= 40; ++id) {
      EXPECT_TRUE(ctl.open_branch(id, kClass).open);
      const FillDecision d = ctl.admit(id, cands, 1);
      EXPECT_EQ(d.admitted.size(), 1u);
      if (d.admitted.empty()) return -1.0;
      const std::size_t rank = cands[d.admitted[0].candidate].rank;
      if (kind == 1) ctl.refund(d.admitted[0].reservation);
      ctl.resolve(id, kind == 0 ? rank : 1 - rank);
      ctl.settle(id);
    }
    EXPECT_TRUE(ctl.open_branch(100, kClass).open);
    return ctl.admit(100, cands, 1).p[0];
  };
  EXPECT_EQ(p_after(0, 0.99), p_after(0, 0));
  EXPECT_EQ(p_after(1, 0.99), p_after(1, 0));
  EXPECT_LT(p_after(2, 0.99), 0.9 * p_after(2, 0)) << "unselected fills are unused";
}

// Resolve on emission: the emitted winner Action 1 left out is admitted at p = 1, past the
// template's max_fills, charged its price like any fill; only the fill budget stops it.
TEST_F(ControllerTest, AnEmittedWinnerIsAdmittedAtCertaintyWhileTheBudgetHasRoom) {
  Controller ctl(clock_, config());
  ctl.observe_load(0.2, 0);
  ASSERT_TRUE(ctl.open_branch(1, kClass).open);
  const std::vector<Candidate> cands = {{0, 3000, Footprint{1500, 0.004}},
                                        {1, 3000, Footprint{1500, 0.004}}};
  const FillDecision d = ctl.admit(1, cands, /*max_fills=*/1);
  ASSERT_EQ(d.admitted.size(), 1u);
  const auto before = *ctl.branch_return(1);
  const auto f = ctl.admit_emitted(1, cands[1]);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->p, 1.0);
  EXPECT_GT(f->cost_ms, 0);
  EXPECT_NEAR(*ctl.branch_return(1), before - f->cost_ms, 1e-9) << "Eq. 4 charges it";
  EXPECT_EQ(ctl.fills_in_flight(), 2);
  EXPECT_EQ(ctl.stats().emitted_admitted, 1u);
  ctl.resolve(1, std::size_t{1});
  ctl.consumed(1, 1, 2000);
  EXPECT_NEAR(*ctl.branch_return(1), before + 2000, 1e-9) << "consumed: its price given back";
  ctl.settle(1);
  EXPECT_EQ(ctl.fills_in_flight(), 0) << "settling returns both reservations";
  EXPECT_FALSE(ctl.admit_emitted(1, cands[1]).has_value()) << "a settled branch admits nothing";
  // A full fill budget refuses it.
  ASSERT_TRUE(ctl.open_branch(2, kClass).open);
  std::vector<ReservationId> held;
  for (int i = 0; i < 16; ++i)
    if (const auto g = ctl.admit_emitted(2, cands[0])) held.push_back(g->reservation);
  EXPECT_EQ(held.size(), 16u);
  EXPECT_FALSE(ctl.admit_emitted(2, cands[0]).has_value());
  for (const auto id : held)
    ctl.release(id);
}

// A fill refunded because it ran nothing (its chain came from the library) and then consumed
// gets its price back once.
TEST_F(ControllerTest, ARefundedFillIsNotRefundedAgainWhenConsumed) {
  Controller ctl(clock_, config());
  ctl.observe_load(0.5, 0);
  ASSERT_TRUE(ctl.open_branch(1, kClass).open);
  const std::vector<Candidate> cands = {{0, 3000, Footprint{1500, 0.004}}};
  const FillDecision d = ctl.admit(1, cands, 1);
  ASSERT_EQ(d.admitted.size(), 1u);
  ctl.refund(d.admitted[0].reservation);
  ctl.release(d.admitted[0].reservation);
  EXPECT_NEAR(*ctl.branch_return(1), 0, 1e-9);
  ctl.consumed(1, 0, 0);
  EXPECT_NEAR(*ctl.branch_return(1), 0, 1e-9);
}

// The fill budget's reserve price: while the budget is nearly spent, a candidate worth much
// less per slot-ms than a branch's typical best is refused, so the last slots go to the next
// branches' likely candidates; with the budget empty the same candidate is admitted.
TEST_F(ControllerTest, ANearlySpentFillBudgetKeepsItsLastSlotsForLikelyCandidates) {
  Controller ctl(clock_, config(/*cold=*/100));
  ctl.observe_load(0, 0);  // an idle engine: no price, only the budget binds
  const std::vector<Candidate> cands = {{0, 3000, Footprint{1500, 0.001}},
                                        {1, 600, Footprint{1500, 0.001}}};
  // An empty budget: both are worth filling.
  ASSERT_TRUE(ctl.open_branch(1, kClass).open);
  const FillDecision first = ctl.admit(1, cands, 2);
  EXPECT_EQ(first.admitted.size(), 2u);
  EXPECT_EQ(ctl.stats().reserve_refused, 0u);
  // Fill the budget (16 fills) to 14 with the likely candidates of other branches.
  for (BranchId b = 2; ctl.fills_in_flight() < 14; ++b) {
    ASSERT_TRUE(ctl.open_branch(b, kClass).open);
    ctl.admit(b, cands, 1);
  }
  ASSERT_EQ(ctl.fills_in_flight(), 14);
  EXPECT_EQ(ctl.stats().reserve_refused, 0u);
  EXPECT_GT(ctl.budget_reserve(), 0);
  ASSERT_TRUE(ctl.open_branch(100, kClass).open);
  const FillDecision late = ctl.admit(100, cands, 2);
  ASSERT_EQ(late.admitted.size(), 1u);  // the likely one only
  EXPECT_EQ(late.admitted[0].candidate, 0u);
  EXPECT_EQ(ctl.stats().reserve_refused, 1u);
}

// A seeded probe (fill_audit) of a candidate worth nothing runs while the fill budget has
// room, but not in the slots the reserve price keeps for likely candidates: the evidence can
// wait, and a top offer refused for want of a slot cannot. (HCI at 0.7 of saturation on
// `h200x4-32b` lost about 5% of its top offers to such probes.)
TEST_F(ControllerTest, ASeededProbeWaitsForASlotNoLikelyCandidateNeeds) {
  Controller ctl(clock_, config(/*cold=*/100, /*gen_audit=*/0, /*fill_audit=*/1));
  ctl.observe_load(0.3, 0);  // a load at which a fill has a price
  const std::vector<Candidate> likely = {{0, 3000, Footprint{1500, 0.001}}};
  ASSERT_GT(ctl.prices().cost(ctl.view(), Footprint{1500, 0.001}), 0);
  // The budget empty: the probe runs.
  ASSERT_TRUE(ctl.open_branch(1, kClass).open);
  // The second offer is worth less than its price at the usability believed (a half, the
  // prior), and more if surely used once selected: a probe could show it pays.
  const std::vector<Candidate> offers = {
      {0, 3000, Footprint{1500, 0.001}},
      {1, gain_that_could_pay(ctl, 1, Footprint{1500, 0.001}), Footprint{1500, 0.001}}};
  const FillDecision early = ctl.admit(1, offers, 2);
  ASSERT_EQ(early.admitted.size(), 2u);
  EXPECT_TRUE(early.admitted[1].audit);
  EXPECT_EQ(early.admitted[1].candidate, 1u);
  for (BranchId b = 2; ctl.fills_in_flight() < 14; ++b) {
    ASSERT_TRUE(ctl.open_branch(b, kClass).open);
    ASSERT_EQ(ctl.admit(b, likely, 1).admitted.size(), 1u);
  }
  ASSERT_GT(ctl.budget_reserve(), 0);
  // 14 of 16 slots in use: the likely candidate is admitted, the probe refused by the reserve.
  ASSERT_TRUE(ctl.open_branch(100, kClass).open);
  const FillDecision late = ctl.admit(100, offers, 2);
  ASSERT_EQ(late.admitted.size(), 1u);
  EXPECT_EQ(late.admitted[0].candidate, 0u);
  EXPECT_FALSE(late.admitted[0].audit);
  EXPECT_EQ(late.refused[1], Refusal::reserve);
  EXPECT_EQ(ctl.fills_in_flight(), 15);
}

// A branch the generation gate opened by an audit still probes at any occupancy: it is how a
// closed class learns, and the reserve price must not lock it out.
TEST_F(ControllerTest, AnAuditedBranchProbesPastTheReservePrice) {
  AdmissionConfig c = config(/*cold=*/2, /*gen_audit=*/0, /*fill_audit=*/0);
  c.audit_after = 1;
  Controller ctl(clock_, c);
  ctl.observe_load(0.3, 0);  // a load at which a fill has a price
  // Two cold trials that fail, each holding one fill slot: the class closes.
  const std::vector<Candidate> likely = {{0, 3000, Footprint{1500, 0.001}}};
  for (BranchId b = 1; b <= 2; ++b) {
    ASSERT_TRUE(ctl.open_branch(b, kClass).open);
    ctl.charge_setup(b, milliseconds(5000));
    ASSERT_EQ(ctl.admit(b, likely, 1).admitted.size(), 1u);
    ctl.resolve(b, std::nullopt);
    ctl.settle(b);  // returns both reservations
  }
  // Fill 14 of 16 slots from the cold trials of other classes.
  for (BranchId b = 10; ctl.fills_in_flight() < 14; ++b) {
    ASSERT_TRUE(ctl.open_branch(b, xxh3_128("routing/other " + std::to_string(b))).open);
    ASSERT_EQ(ctl.admit(b, likely, 1).admitted.size(), 1u);
  }
  ASSERT_GT(ctl.budget_reserve(), 0);
  const GenerationDecision d = ctl.open_branch(100, kClass);
  ASSERT_TRUE(d.open);
  ASSERT_EQ(d.reason, GateReason::audit);
  // Worth less than its price at what the class believes, more if surely used once selected.
  ASSERT_GT(ctl.prices().cost(ctl.view(), Footprint{1500, 0.001}), 0);
  const std::vector<Candidate> unlikely = {
      {0, gain_that_could_pay(ctl, 0, Footprint{1500, 0.001}), Footprint{1500, 0.001}}};
  const FillDecision f = ctl.admit(100, unlikely, 1);
  ASSERT_EQ(f.admitted.size(), 1u);
  EXPECT_TRUE(f.admitted[0].audit);
  EXPECT_LE(f.admitted[0].utility, 0);
}

TEST_F(ControllerTest, SetupIsChargedWhetherOrNotThePredictorProducedAnything) {
  Controller ctl(clock_, config());
  ASSERT_TRUE(ctl.open_branch(7, kClass).open);
  ctl.charge_setup(7, milliseconds(40));
  ctl.admit(7, {}, 3);  // the time-boxed predictor returned nothing
  ctl.settle(7);
  EXPECT_NEAR(*ctl.branch_return(7), -40, 1e-9);
}

// A drafter's samples took engine time that canonical requests waited behind: it is charged
// at the price of that slot time under the load, on top of the setup's own time, so that the
// generation gate closes a drafter that does not pay at load.
TEST_F(ControllerTest, ADraftersEngineTimeIsChargedAtItsPrice) {
  Controller ctl(clock_, config());
  ctl.observe_load(0.6, 0.2);
  const double price = ctl.prices().cost(ctl.view(), Footprint{800, 0});
  ASSERT_GT(price, 0);
  ASSERT_TRUE(ctl.open_branch(7, kClass).open);
  ctl.charge_setup(7, milliseconds(40), /*draft_slot_ms=*/800);
  ctl.admit(7, {}, 3);
  ctl.settle(7);
  EXPECT_NEAR(*ctl.branch_return(7), -40 - price, 1e-9);
  // An idle engine: the drafter's time costs nothing beyond the setup's own.
  Controller idle(clock_, config());
  ASSERT_TRUE(idle.open_branch(8, kClass).open);
  idle.charge_setup(8, milliseconds(40), 800);
  idle.settle(8);
  EXPECT_NEAR(*idle.branch_return(8), -40 - idle.prices().cost(idle.view(), {800, 0}), 1e-9);
  EXPECT_LT(idle.prices().cost(idle.view(), {800, 0}), price);
}

// Under chunked prefill the samples' prompts stalled the canonical requests decoding beside
// them: the prompt tokens are charged too, once the engines say what a prompt token costs.
TEST_F(ControllerTest, ADraftersPromptsAreChargedAtThePrefillPrice) {
  Controller ctl(clock_, config());
  ctl.observe_load(0.6, 0.2);
  ctl.set_prefill(0.15, 2);
  const double decode = ctl.prices().cost(ctl.view(), Footprint{800, 0});
  const double prompts = ctl.prices().cost(ctl.view(), Footprint{0, 0, 4000});
  EXPECT_NEAR(prompts, 4000 * ctl.prices().at(ctl.view()).prefill, 1e-9);
  ASSERT_GT(prompts, decode);  // eight samples of 500 tokens outweigh their decode here
  ASSERT_TRUE(ctl.open_branch(7, kClass).open);
  ctl.charge_setup(7, milliseconds(40), 800, 4000);
  ctl.settle(7);
  EXPECT_NEAR(*ctl.branch_return(7), -40 - decode - prompts, 1e-9);
}

// Runs `n` branches of a synthetic class: each opened branch admits what the gate allows and
// pays `setup`; when `pays`, its selected top candidate is consumed and saves 2 s.
struct Scenario {
  Controller& ctl;
  BranchId next = 1;
  int opened = 0;
  int audits = 0;
  int last_open = -1;   // index of the last branch the gate opened, audits aside
  int first_open = -1;  // ... and of the first
  int run = 0;

  void branches(int n, bool pays, double setup_ms) {
    for (int i = 0; i < n; ++i, ++run) {
      const BranchId b = next++;
      const GenerationDecision d = ctl.open_branch(b, kClass);
      if (!d.open) continue;
      ++opened;
      if (d.reason == GateReason::audit) {
        ++audits;
      } else {
        last_open = run;
        if (first_open < 0) first_open = run;
      }
      ctl.charge_setup(b, std::chrono::microseconds(static_cast<int>(setup_ms * 1000)));
      const std::vector<Candidate> cands = {{0, 2000, Footprint{1500, 0.004}},
                                            {1, 2000, Footprint{1500, 0.004}}};
      const FillDecision f = ctl.admit(b, cands, 2);
      ctl.resolve(b, pays || late ? std::optional<std::size_t>(0) : std::nullopt);
      for (const FillChoice& c : f.admitted) {
        if (pays && c.candidate == 0) ctl.consumed(b, 0, 2000);
        if (late && c.candidate == 0) ctl.missed(b, 0, 500);
        ctl.release(c.reservation);
      }
      ctl.settle(b);
    }
  }
  // The predictor is right, but the fills end after the demand stopped waiting for them.
  void late_branches(int n, double setup_ms) {
    late = true;
    branches(n, false, setup_ms);
    late = false;
  }
  bool late = false;
};

TEST_F(ControllerTest, TheGateOpensForAPayingClassAndClosesWhenItStopsPaying) {
  Controller ctl(clock_, config(/*cold=*/4, /*gen_audit=*/0.05, /*fill_audit=*/0.05));
  ctl.observe_load(0.2, 0);
  Scenario s{ctl};
  s.branches(60, /*pays=*/true, /*setup_ms=*/30);
  EXPECT_GE(s.opened, 55);  // after the cold trials, U0 > 0: open
  EXPECT_GT(ctl.model(kClass)->mean(make_context(ContextInputs{0.2, 0.2, 1, 0, 0})), 0);

  // Predictions stop paying: setup cost, nothing consumed. The gate closes within a bounded
  // number of branches (13-14 with these seeds; 40 allowed), then only audits open it.
  s.branches(400, /*pays=*/false, /*setup_ms=*/300);
  EXPECT_LT(s.last_open, 60 + 40);
  Scenario tail{ctl, s.next};
  tail.branches(200, false, 300);
  EXPECT_EQ(tail.opened, tail.audits);
  EXPECT_GT(tail.audits, 0);  // and audits keep probing it
  EXPECT_LT(tail.audits, 30);
}

// A cold start whose trials all fail (a predictor that is wrong at first, fills that came too
// late): the class closes. When the predictions start to pay, the gate must find its way back
// on its own, through its audits, and open on U0 again, not stay C1-only for good.
TEST_F(ControllerTest, AClassClosedByAFailedColdStartReopensWhenFillsPay) {
  Controller ctl(clock_, config(/*cold=*/4, /*gen_audit=*/0.05, /*fill_audit=*/0.05));
  ctl.observe_load(0.2, 0);
  Scenario cold{ctl};
  cold.late_branches(40, /*setup_ms=*/300);
  EXPECT_LT(cold.last_open, 20);  // closed after the failed trials
  Scenario paying{ctl, cold.next};
  paying.branches(200, /*pays=*/true, /*setup_ms=*/30);
  // U0 opens it again after a few audits (at the 15th paying branch with this seed): each
  // audit probes the fills, and the failed start fades from the class's evidence.
  EXPECT_GE(paying.first_open, 0);
  EXPECT_LT(paying.first_open, 25);
  Scenario settled{ctl, paying.next};
  settled.branches(100, true, 30);
  EXPECT_GE(settled.opened - settled.audits, 90);
}

// With the seeded audits off, a closed class is still audited after audit_after refusals in a
// row, so it cannot lock itself out whatever the seed.
TEST_F(ControllerTest, AClosedClassIsAuditedAfterAuditAfterRefusalsEvenWithoutSeededAudits) {
  AdmissionConfig c = config(/*cold=*/4, /*gen_audit=*/0, /*fill_audit=*/0);
  c.audit_after = 10;
  Controller ctl(clock_, c);
  ctl.observe_load(0.2, 0);
  Scenario cold{ctl};
  cold.late_branches(60, /*setup_ms=*/300);
  EXPECT_GE(cold.audits, 4);  // at least one in every ten closed decisions
  EXPECT_LE(cold.audits, 6);
  Scenario paying{ctl, cold.next};
  paying.branches(100, /*pays=*/true, /*setup_ms=*/30);
  EXPECT_GE(paying.first_open, 0);
  EXPECT_LT(paying.first_open, 25);
}

// An audit that opened the generation gate makes Action 1 probe: its best candidate is admitted
// although its utility is not positive, so the audit learns how the fills fare. A probe is
// spent only on a candidate that could pay: one worth its price if it were sure to be used
// once selected. A probe teaches how often a selected candidate's fill is used; a candidate
// that would not pay even then cannot be admitted whatever it shows.
TEST_F(ControllerTest, AnAuditedBranchProbesItsBestCandidateIfItCouldPay) {
  AdmissionConfig c = config(/*cold=*/2, /*gen_audit=*/0, /*fill_audit=*/1);
  c.audit_after = 1;  // every closed decision is audited
  Controller ctl(clock_, c);
  ctl.observe_load(0.2, 0);
  Scenario cold{ctl};
  cold.late_branches(2, /*setup_ms=*/5000);  // the cold trials: fills late, setup dear
  const double price = ctl.prices().cost(ctl.view(), Footprint{1500, 0.004});
  ASSERT_GT(price, 0);
  // No gain: no usability makes it pay. Neither the audited branch nor the seeded probe
  // admits it.
  const std::vector<Candidate> worthless = {{0, 0, Footprint{1500, 0.004}}};
  ASSERT_EQ(ctl.open_branch(100, kClass).reason, GateReason::audit);
  const FillDecision audited = ctl.admit(100, worthless, 1);
  EXPECT_TRUE(audited.admitted.empty());
  EXPECT_EQ(audited.refused[0], Refusal::utility);
  // With a gain the price outweighs even at usability 1 (p at the selection's bound) it is not
  // probed either; with one that would pay if surely used, the audited branch probes it.
  const double sel = ctl.selection(kClass)->upper(0);
  ASSERT_GT(sel, 0);
  ASSERT_LT(sel, 1);
  const double could_pay = gain_that_could_pay(ctl, 0, Footprint{1500, 0.004});
  ASSERT_EQ(ctl.open_branch(101, kClass).reason, GateReason::audit);
  const FillDecision small =  // a quarter of it: half the break-even
      ctl.admit(101, std::vector<Candidate>{{0, 0.25 * could_pay, Footprint{1500, 0.004}}}, 1);
  EXPECT_TRUE(small.admitted.empty());
  ASSERT_EQ(ctl.open_branch(102, kClass).reason, GateReason::audit);
  const FillDecision could =
      ctl.admit(102, std::vector<Candidate>{{0, could_pay, Footprint{1500, 0.004}}}, 1);
  ASSERT_EQ(could.admitted.size(), 1U);
  EXPECT_TRUE(could.admitted[0].audit);
  EXPECT_LE(could.admitted[0].utility, 0);  // at the usability believed it does not pay
}

// A seeded probe in an open branch is spent at the full rate on a candidate that would pay at
// the usability posterior's upper bound (usability_bound), and at fill_audit_beyond_bound of
// that rate on one that would pay only at a usability above it: a class whose selected fills
// are seldom used (late, at load) keeps learning, but stops paying at every branch for probes
// its evidence says will not pay. (ReAct at 0.85 of saturation on `h200x4-32b`: such probes
// were nearly all of full dynrt's fills, and made it slower than C1 alone on every seed.)
TEST_F(ControllerTest, ASeededProbeIsRareWhereOnlyAUsabilityPastItsBoundWouldPay) {
  const Footprint f{1500, 0.001};
  // Selected top candidates whose fills came too late for their demands.
  const auto seldom_used = [&](double beyond_bound) {
    return probing_after(beyond_bound, {{0, 1e7, f}}, /*used=*/false);
  };
  auto strict = seldom_used(/*beyond_bound=*/0);
  const BetaPosterior& usability = *strict->usability(kClass);
  const double bound = usability.quantile(AdmissionConfig{}.usability_bound);
  ASSERT_LT(usability.mean(), bound);
  ASSERT_LT(bound, 0.5);
  // A second candidate's gain at which its fill breaks even at usability u (its p = the
  // selection's bound times u; never selected, so its calibration factor is 1).
  const double sel = strict->selection(kClass)->upper(1);
  const double cost = strict->prices().cost(strict->view(), f);
  ASSERT_GT(cost, 0);
  const auto breaking_even_at = [&](double u) { return cost / (sel * u) - cost; };
  const auto probe = [&](Controller& ctl, BranchId b, double u) {
    EXPECT_TRUE(ctl.open_branch(b, kClass).open);
    return ctl.admit(b, std::vector<Candidate>{{1, breaking_even_at(u), f}}, 1);
  };
  // Between the posterior's mean and its bound: probed (its utility is not positive).
  const FillDecision within = probe(*strict, 100, (usability.mean() + bound) / 2);
  ASSERT_EQ(within.admitted.size(), 1u);
  EXPECT_TRUE(within.admitted[0].audit);
  EXPECT_LE(within.admitted[0].utility, 0);
  // Past the bound, though it would pay if surely used: not probed at a rate of 0 ...
  for (BranchId b = 101; b <= 120; ++b) {
    const FillDecision past = probe(*strict, b, (bound + 1) / 2);
    EXPECT_TRUE(past.admitted.empty());
    EXPECT_EQ(past.refused[0], Refusal::utility);
  }
  // ... and probed at the full rate when the rate past the bound is 1.
  auto lenient = seldom_used(/*beyond_bound=*/1);
  const FillDecision past = probe(*lenient, 100, (bound + 1) / 2);
  ASSERT_EQ(past.admitted.size(), 1u);
  EXPECT_TRUE(past.admitted[0].audit);
}

// The same where selected fills are used but a rank's selection bound overrates it: its fills
// were used less often than their p said, and its calibration factor prices it lower. A probe
// that would pay only past the factor is as rare as one past the usability's bound.
TEST_F(ControllerTest, ASeededProbeIsRareWhereOnlyARankPastItsCalibrationWouldPay) {
  const Footprint f{1500, 0.001};
  // Both candidates filled; the first is always selected, and its fill used.
  const auto overrated = [&](double beyond_bound) {
    return probing_after(beyond_bound, {{0, 1e7, f}, {1, 1e7, f}}, /*used=*/true);
  };
  auto strict = overrated(/*beyond_bound=*/0);
  const BetaPosterior& usability = *strict->usability(kClass);
  const double bound = usability.quantile(AdmissionConfig{}.usability_bound);
  ASSERT_GT(usability.mean(), 0.8);  // the selected fills were used
  const double sel = strict->selection(kClass)->upper(1);
  const double cost = strict->prices().cost(strict->view(), f);
  ASSERT_GT(cost, 0);
  // The second rank's factor: the p it is priced at over the selection's bound and the
  // usability (a candidate with no gain is refused, and its p reported).
  ASSERT_TRUE(strict->open_branch(99, kClass).open);
  const FillDecision read = strict->admit(99, std::vector<Candidate>{{1, 0, f}}, 1);
  ASSERT_TRUE(read.admitted.empty());
  const double factor = read.p[0] / (sel * usability.mean());
  ASSERT_LT(factor, 0.8);
  const auto probe = [&](Controller& ctl, BranchId b, double p_breaking_even) {
    EXPECT_TRUE(ctl.open_branch(b, kClass).open);
    return ctl.admit(b, std::vector<Candidate>{{1, cost / p_breaking_even - cost, f}}, 1);
  };
  // Paying at the usability's bound with the factor: probed.
  const FillDecision within = probe(*strict, 100, sel * factor * (usability.mean() + bound) / 2);
  ASSERT_EQ(within.admitted.size(), 1u);
  EXPECT_TRUE(within.admitted[0].audit);
  // Paying at the usability's bound only without the factor: not probed at a rate of 0 ...
  const double past_factor = sel * bound * (1 + factor) / 2;
  for (BranchId b = 101; b <= 120; ++b) {
    const FillDecision past = probe(*strict, b, past_factor);
    EXPECT_TRUE(past.admitted.empty());
    EXPECT_EQ(past.refused[0], Refusal::utility);
  }
  // ... and probed when the rate past the bound is 1.
  auto lenient = overrated(/*beyond_bound=*/1);
  const FillDecision past = probe(*lenient, 100, past_factor);
  ASSERT_EQ(past.admitted.size(), 1u);
  EXPECT_TRUE(past.admitted[0].audit);
}

TEST_F(ControllerTest, IsDeterministicForASeed) {
  auto run = [&] {
    ManualClock clock;
    Controller ctl(clock, config(4, 0.1, 0.1));
    ctl.observe_load(0.4, 0.1);
    Scenario s{ctl};
    s.branches(80, true, 50);
    s.branches(80, false, 200);
    return std::make_pair(s.opened, ctl.stats().fills_admitted);
  };
  EXPECT_EQ(run(), run());
}

TEST_F(ControllerTest, AlwaysPolicyOpensEveryBranchAndAdmitsUpToTheBudgets) {
  AdmissionConfig c = config();
  c.policy = AdmissionPolicy::always;
  c.prices.kv_budget = 0.05;
  Controller ctl(clock_, c);
  ctl.observe_load(1.0, 5.0);  // saturated: the priced gate would refuse
  const GenerationDecision g = ctl.open_branch(1, kClass);
  EXPECT_TRUE(g.open);
  EXPECT_EQ(g.reason, GateReason::fixed);
  const std::vector<Candidate> cands = {{0, 10, Footprint{100000, 0.02}},
                                        {1, 10, Footprint{100000, 0.02}},
                                        {2, 10, Footprint{100000, 0.02}}};
  const FillDecision d = ctl.admit(1, cands, 3);
  ASSERT_EQ(d.admitted.size(), 2u);  // the third does not fit the KV budget
  EXPECT_EQ(d.admitted[0].candidate, 0u);
  EXPECT_EQ(d.admitted[1].candidate, 1u);
  EXPECT_LT(d.admitted[0].utility, 0);  // admitted although the price exceeds the benefit
  EXPECT_EQ(ctl.fills_in_flight(), 2);
}

TEST_F(ControllerTest, ThresholdPolicyAdmitsOnlyCandidatesWhoseSelectionConfidenceReachesIt) {
  AdmissionConfig c = config();
  c.policy = AdmissionPolicy::threshold;
  c.fixed_threshold = 0.3;
  Controller ctl(clock_, c);
  ctl.observe_load(0.1, 0);
  // Teach the class that rank 0 is selected: its confidence rises above 0.3, rank 1's falls.
  const std::vector<Candidate> cands = {{0, 3000, Footprint{800, 0.005}},
                                        {1, 3000, Footprint{800, 0.005}}};
  for (BranchId b = 1; b <= 6; ++b) {
    ASSERT_TRUE(ctl.open_branch(b, kClass).open);
    const FillDecision d = ctl.admit(b, cands, 2);
    ctl.resolve(b, 0);
    for (const FillChoice& f : d.admitted) {
      if (f.candidate == 0) ctl.consumed(b, 0, 1000);
      ctl.release(f.reservation);
    }
    ctl.settle(b);
  }
  ASSERT_TRUE(ctl.open_branch(7, kClass).open);
  const FillDecision d = ctl.admit(7, cands, 2);
  EXPECT_GE(ctl.selection(kClass)->upper(0), 0.3);
  EXPECT_LT(ctl.selection(kClass)->upper(1), 0.3);
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].candidate, 0u);
}

// The load-blind policy (the DSP baseline) weighs a candidate's gain against its own engine
// time, whatever the load: the same candidates at an idle and at a busy engine.
TEST_F(ControllerTest, UnpricedPolicyWeighsGainAgainstTheFillsOwnTimeWhateverTheLoad) {
  AdmissionConfig c = config();
  c.policy = AdmissionPolicy::unpriced;
  // Prior confidence 0.5 (upper quantile of Beta(1, 1) at t = 0 is higher, but below 1):
  // worth it when p G > (1 - p) T. A gain of 3 s against 0.5 s of engine time passes; a
  // gain of 0.1 s against 5 s does not.
  const std::vector<Candidate> cands = {{0, 3000, Footprint{500, 0.001}},
                                        {1, 100, Footprint{5000, 0.001}}};
  for (const double rho : {0.0, 0.9}) {
    Controller ctl(clock_, c);
    ctl.observe_load(rho, 0);
    ASSERT_TRUE(ctl.open_branch(1, kClass).open);
    const FillDecision d = ctl.admit(1, cands, 2);
    ASSERT_EQ(d.admitted.size(), 1u) << "rho " << rho;
    EXPECT_EQ(d.admitted[0].candidate, 0u);
  }
}

TEST_F(ControllerTest, StaticPolicyOpensOnlyBelowItsLoadLimits) {
  AdmissionConfig c = config();
  c.policy = AdmissionPolicy::fixed_load;
  c.static_max_rho = 0.25;
  c.static_max_backlog = 0.03;
  Controller ctl(clock_, c);
  ctl.observe_load(0.2, 0.0);
  EXPECT_TRUE(ctl.open_branch(1, kClass).open);
  ctl.observe_load(0.3, 0.0);
  EXPECT_FALSE(ctl.open_branch(2, kClass).open);
  ctl.observe_load(0.1, 0.05);
  EXPECT_FALSE(ctl.open_branch(3, kClass).open);
  EXPECT_EQ(ctl.stats().branches_closed, 2u);
}

// A fixed rule's candidate that passes the rule but finds no slot is refused by the budget, and
// said so (it was reported as refused by the rule whenever the budget was spent on arrival).
TEST_F(ControllerTest, AFixedRulesCandidateWithNoSlotLeftIsRefusedByTheBudget) {
  AdmissionConfig c = config();
  c.policy = AdmissionPolicy::fixed_load;
  c.fixed_threshold = 0.3;
  Controller ctl(clock_, c);
  ctl.observe_load(0.1, 0);
  // Rank 0 is always the pick: its confidence passes the rule, rank 1's falls below it.
  const std::vector<Candidate> cands = {{0, 3000, Footprint{800, 0.001}},
                                        {1, 3000, Footprint{800, 0.001}}};
  for (BranchId b = 1; b <= 8; ++b) {
    ASSERT_TRUE(ctl.open_branch(b, kClass).open);
    ctl.admit(b, cands, 2);
    ctl.resolve(b, std::size_t{0});
    ctl.settle(b);  // returns its reservations
  }
  ASSERT_LT(ctl.selection(kClass)->upper(1), 0.3);
  for (BranchId b = 10; ctl.fills_in_flight() < 16; ++b) {
    ASSERT_TRUE(ctl.open_branch(b, kClass).open);
    ASSERT_EQ(ctl.admit(b, cands, 2).admitted.size(), 1u);
  }
  ASSERT_TRUE(ctl.open_branch(100, kClass).open);
  const FillDecision full = ctl.admit(100, cands, 2);
  EXPECT_TRUE(full.admitted.empty());
  ASSERT_EQ(full.refused.size(), 2u);
  EXPECT_EQ(full.refused[0], Refusal::fill_budget);
  EXPECT_EQ(full.refused[1], Refusal::threshold);  // the rule refused it, whatever the budget
}

TEST_F(ControllerTest, ChainCreditRaisesTheReturnWithoutTouchingUsability) {
  Controller ctl(clock_, config());
  ctl.observe_load(0.1, 0);
  ASSERT_TRUE(ctl.open_branch(1, kClass).open);
  const double before = *ctl.branch_return(1);
  ctl.credit(1, 2500);  // the read after a retrieve was served from the fill
  EXPECT_NEAR(*ctl.branch_return(1), before + 2500, 1e-9);
  ctl.settle(1);
  ctl.credit(1, 500);  // after settlement: a revision, no second observation
  EXPECT_NEAR(*ctl.branch_return(1), before + 3000, 1e-9);
  EXPECT_EQ(ctl.model(kClass)->samples(), 1);
  ctl.credit(99, 100);  // an unknown branch is ignored
}

// Eq. 4's saving is latency: a fill the demand still had to wait for saved its execution less
// that wait. Crediting the whole execution taught a drafted class at load that its fills paid
// when the demands mostly waited for them.
TEST_F(ControllerTest, AConsumedFillSavesItsExecutionLessTheWaitForIt) {
  Controller ctl(clock_, config());
  ctl.observe_load(0.2, 0);
  ASSERT_TRUE(ctl.open_branch(1, kClass).open);
  const double before = *ctl.branch_return(1);
  ctl.resolve(1, std::size_t{0});
  ctl.consumed(1, 0, 2000, 1500);  // a 2 s execution the demand waited 1.5 s for: 0.5 s saved
  EXPECT_NEAR(*ctl.branch_return(1), before + 500, 1e-9);
  ctl.credit(1, 800, 300);  // the chain's next stage, also waited for
  EXPECT_NEAR(*ctl.branch_return(1), before + 1000, 1e-9);
  ctl.credit(1, 200, 700);  // a wait longer than the execution: the fill cost latency
  EXPECT_NEAR(*ctl.branch_return(1), before + 500, 1e-9);
  ctl.credit(1, std::nan(""), -5);  // nonsense counts as nothing
  EXPECT_NEAR(*ctl.branch_return(1), before + 500, 1e-9);
  ctl.settle(1);
  ctl.credit(1, 1000, 400);  // after settlement: a revision by the same rule
  EXPECT_NEAR(*ctl.branch_return(1), before + 1100, 1e-9);
  EXPECT_EQ(ctl.model(kClass)->samples(), 1);
}

TEST_F(ControllerTest, RefundGivesBackTheAdmissionPriceOnce) {
  Controller ctl(clock_, config());
  ctl.observe_load(0.3, 0);
  ASSERT_TRUE(ctl.open_branch(1, kClass).open);
  const std::vector<Candidate> cands = {{0, 3000, Footprint{1500, 0.01}}};
  const FillDecision d = ctl.admit(1, cands, 1);
  ASSERT_EQ(d.admitted.size(), 1u);
  ASSERT_GT(d.admitted[0].cost_ms, 0);
  EXPECT_NEAR(*ctl.branch_return(1), -d.admitted[0].cost_ms, 1e-9);
  ctl.refund(d.admitted[0].reservation);
  ctl.refund(d.admitted[0].reservation);  // once only
  EXPECT_NEAR(*ctl.branch_return(1), 0, 1e-9);
  ctl.release(d.admitted[0].reservation);
  ctl.refund(d.admitted[0].reservation);  // after release: nothing
  EXPECT_NEAR(*ctl.branch_return(1), 0, 1e-9);
}

// The ablation's halves: each prices one gate and leaves the other open.
TEST_F(ControllerTest, HalfPricedPoliciesPriceOneGateAndOpenTheOther) {
  const std::vector<Candidate> cands = {{0, 10, Footprint{100000, 0.02}},
                                        {1, 10, Footprint{100000, 0.02}}};
  {
    // Action 0 open whatever the load; Action 1 repriced: nothing at a price above the gain.
    AdmissionConfig c = config();
    c.policy = AdmissionPolicy::priced_fills;
    Controller ctl(clock_, c);
    ctl.observe_load(1.0, 5.0);
    const GenerationDecision g = ctl.open_branch(1, kClass);
    EXPECT_TRUE(g.open);
    EXPECT_EQ(g.reason, GateReason::fixed);
    EXPECT_TRUE(ctl.admit(1, cands, 2).admitted.empty());
  }
  {
    // Action 0 priced (its cold trials first); Action 1 admits what the budgets allow.
    AdmissionConfig c = config();
    c.policy = AdmissionPolicy::priced_generation;
    Controller ctl(clock_, c);
    ctl.observe_load(1.0, 5.0);
    const GenerationDecision g = ctl.open_branch(1, kClass);
    EXPECT_TRUE(g.open);
    EXPECT_EQ(g.reason, GateReason::cold_trial);
    const FillDecision d = ctl.admit(1, cands, 2);
    ASSERT_EQ(d.admitted.size(), 2u);
    EXPECT_LT(d.admitted[0].utility, 0);
  }
}

TEST(AdmissionPolicy, NamesRoundTrip) {
  for (const auto p : {AdmissionPolicy::priced, AdmissionPolicy::threshold, AdmissionPolicy::always,
                       AdmissionPolicy::fixed_load, AdmissionPolicy::priced_generation,
                       AdmissionPolicy::priced_fills, AdmissionPolicy::unpriced})
    EXPECT_EQ(admission_policy_from(to_string(p)), p);
  EXPECT_EQ(admission_policy_from("sometimes"), std::nullopt);
}

}  // namespace
}  // namespace dynrt::admission

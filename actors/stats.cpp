// The one registry of what the runtime counts: every live counter, the RuntimeStats field it is
// read into and the metric it is exported as. Runtime::stats() and metrics() both walk it.
#include "actors/messages.hpp"
#include "actors/runtime.hpp"

#include <array>

namespace dynrt::actors {
namespace {

struct CounterSpec {
  std::atomic<std::uint64_t> Counters::*live;
  std::uint64_t RuntimeStats::*stat;
  std::string_view name;  // empty: read into RuntimeStats, exported elsewhere (or not at all)
  std::string_view help;
  std::string_view labels = {};
  std::string_view type = "counter";
};

// One row per line: these are tables, read across.
// clang-format off
constexpr std::array kCounters = {
    CounterSpec{&Counters::served_engine, &RuntimeStats::served_engine, "dynrt_requests_total", "Calls answered, by how they were served.", R"({served="engine"})"},
    CounterSpec{&Counters::served_fill, &RuntimeStats::served_fill, "dynrt_requests_total", "Calls answered, by how they were served.", R"({served="fill"})"},
    CounterSpec{&Counters::served_cache, &RuntimeStats::served_cache, "dynrt_requests_total", "Calls answered, by how they were served.", R"({served="cache"})"},
    CounterSpec{&Counters::requests, &RuntimeStats::requests, "dynrt_calls_received_total", "Calls received (answered or still in flight)."},
    CounterSpec{&Counters::passthrough, &RuntimeStats::passthrough, "dynrt_passthrough_total", "Untagged or unknown calls forwarded unchanged."},
    CounterSpec{&Counters::tags_no_workflow, &RuntimeStats::tags_no_workflow, "dynrt_tags_ignored_total", "Tagged calls forwarded unchanged because their tags named nothing loaded, by reason (dynrt serve logs each kind once at warn).", R"({reason="no_workflow"})"},
    CounterSpec{&Counters::tags_unknown_workflow, &RuntimeStats::tags_unknown_workflow, "dynrt_tags_ignored_total", "Tagged calls forwarded unchanged because their tags named nothing loaded, by reason (dynrt serve logs each kind once at warn).", R"({reason="unknown_workflow"})"},
    CounterSpec{&Counters::tags_no_run_id, &RuntimeStats::tags_no_run_id, "dynrt_tags_ignored_total", "Tagged calls forwarded unchanged because their tags named nothing loaded, by reason (dynrt serve logs each kind once at warn).", R"({reason="no_workflow_id"})"},
    CounterSpec{&Counters::tags_unknown_stage, &RuntimeStats::tags_unknown_stage, "dynrt_tags_ignored_total", "Tagged calls forwarded unchanged because their tags named nothing loaded, by reason (dynrt serve logs each kind once at warn).", R"({reason="unknown_stage"})"},
    CounterSpec{&Counters::errors, &RuntimeStats::errors, "dynrt_errors_total", "Calls answered with an error."},
    CounterSpec{&Counters::waits, &RuntimeStats::waits, "dynrt_waits_total", "Demands that waited for the fill computing their result."},
    CounterSpec{&Counters::wait_timeouts, &RuntimeStats::wait_timeouts, "dynrt_wait_timeouts_total", "Demands whose wait passed its bound; they ran on the engine."},
    CounterSpec{&Counters::hedge_fills, &RuntimeStats::hedge_fills, "dynrt_wait_timeouts_fill_answered_total", "Demands past their wait's bound that the fill still answered first (their own run was cancelled)."},
    CounterSpec{&Counters::fills_issued, &RuntimeStats::fills_issued, "dynrt_fills_issued_total", "Fills admitted and started."},
    CounterSpec{&Counters::fills_consumed, &RuntimeStats::fills_consumed, "dynrt_fills_consumed_total", "Fill results that served a call: one per stage of a fill's chain that was demanded."},
    CounterSpec{&Counters::fills_cancelled, &RuntimeStats::fills_cancelled, "dynrt_fills_cancelled_total", "Fills aborted (losers, unusable selections)."},
    CounterSpec{&Counters::emissions, &RuntimeStats::emissions, "dynrt_selections_emitted_total", "Selections read from a deciding stage's decode before it ended (resolve on emission)."},
    CounterSpec{&Counters::fills_outrun, &RuntimeStats::fills_outrun, "dynrt_fills_cancelled_on_emission_total", "Fills of other candidates stopped when the decider emitted its selection (also counted as cancelled)."},
    CounterSpec{&Counters::fills_emitted, &RuntimeStats::fills_emitted, "dynrt_fills_started_on_emission_total", "Fills of an emitted selection that Action 1 had not admitted, or that no candidate named, started when the decider emitted it (also counted as issued)."},
    CounterSpec{&Counters::draft_samples, &RuntimeStats::draft_samples, "dynrt_draft_samples_total", "Drafter samples sent to an engine, for branches the generation gate opened."},
    CounterSpec{&Counters::fills_promoted, &RuntimeStats::fills_promoted, "dynrt_fills_promoted_total", "Fills a call came to wait for, raised to canonical priority from then on."},
    CounterSpec{&Counters::fills_requeued, &RuntimeStats::fills_requeued, "dynrt_fill_requests_requeued_total", "Engine requests of promoted fills that were still queued and moved up the engine's queue (engines that can re-queue: the simulated one)."},
    CounterSpec{&Counters::fills_failed, &RuntimeStats::fills_failed, "dynrt_fills_failed_total", "Fills that failed (a miss, never an answer)."},
    CounterSpec{&Counters::fills_completed, &RuntimeStats::fills_completed, "dynrt_fills_completed_total", "Fills that ran their whole chain."},
    CounterSpec{&Counters::fills_suppressed, &RuntimeStats::fills_suppressed, "dynrt_fills_suppressed_total", "Fills whose first stage was already in the library (no engine work)."},
    CounterSpec{&Counters::coalesced, &RuntimeStats::coalesced, "dynrt_coalesced_total", "Demands that joined an identical execution in flight instead of running it again."},
    CounterSpec{&Counters::shadows_stored, &RuntimeStats::shadows_stored, "dynrt_shadows_stored_total", "Fill results stored as shadows."},
    CounterSpec{&Counters::shadows_discarded, &RuntimeStats::shadows_discarded, "dynrt_shadows_discarded_total", "Fill results discarded unused."},
    CounterSpec{&Counters::branches_opened, &RuntimeStats::branches_opened, "dynrt_branches_opened_total", "Decision points that asked the generation gate (with their candidates, or before drafting them)."},
    CounterSpec{&Counters::branches_gated, &RuntimeStats::branches_gated, "dynrt_branches_gated_total", "Branches the generation gate kept closed."},
    CounterSpec{&Counters::branches_settled, &RuntimeStats::branches_settled, "dynrt_branches_settled_total", "Branches settled (feedback given)."},
    CounterSpec{&Counters::writes, &RuntimeStats::writes, "dynrt_writes_total", "Write notifications applied."},
    CounterSpec{&Counters::workflows_live, &RuntimeStats::workflows_live, "dynrt_workflows_live", "Workflow runs with a live actor.", {}, "gauge"},
    CounterSpec{&Counters::runs_evicted, &RuntimeStats::runs_evicted, "dynrt_runs_evicted_total", "Workflow runs retired to stay within --max-live-runs (their speculation is lost)."},
    CounterSpec{&Counters::runs_expired, &RuntimeStats::runs_expired, "dynrt_runs_expired_total", "Workflow runs ended after --workflow-idle-ms."},
    CounterSpec{&Counters::runs_refused, &RuntimeStats::runs_refused, "dynrt_runs_refused_total", "New workflow runs refused with 429: their key held its live-run limit."},
    CounterSpec{&Counters::fills_running, &RuntimeStats::fills_running, "dynrt_fills_running", "Fill actors alive.", {}, "gauge"},
};
// What is read from elsewhere than a live counter: times, the gates, the pricing actor's and the
// library's last published numbers.
struct DerivedSpec {
  std::string_view name;
  std::string_view type;
  std::string_view help;
  double (*value)(const RuntimeStats&);
};

constexpr std::array kDerived = {
    DerivedSpec{"dynrt_engine_saved_seconds_total", "counter", "Engine time of results served without execution.", [](const RuntimeStats& s) { return s.engine_ms_saved / 1000; }},
    DerivedSpec{"dynrt_engine_wasted_seconds_total", "counter", "Engine time of fills nobody consumed, including fill requests stopped midway (cancelled losers) and failed ones, measured as wall time on the engine.", [](const RuntimeStats& s) { return s.engine_ms_wasted / 1000; }},
    DerivedSpec{"dynrt_engine_drafting_seconds_total", "counter", "Engine time of drafter samples that answered (candidate generation, charged to the generation gate).", [](const RuntimeStats& s) { return s.engine_ms_drafting / 1000; }},
    DerivedSpec{"dynrt_gate_branches_opened_total", "counter", "Generation gate (Action 0): opened.", [](const RuntimeStats& s) { return double(s.admission.branches_opened); }},
    DerivedSpec{"dynrt_gate_branches_closed_total", "counter", "Generation gate (Action 0): kept closed.", [](const RuntimeStats& s) { return double(s.admission.branches_closed); }},
    DerivedSpec{"dynrt_gate_fills_admitted_total", "counter", "Fill gate (Action 1): admitted.", [](const RuntimeStats& s) { return double(s.admission.fills_admitted); }},
    DerivedSpec{"dynrt_gate_fills_admitted_p_total", "counter", "Fill gate (Action 1): the sum over admitted fills of p, the chance of use it weighed each by (Eq. 6). Over dynrt_gate_fills_admitted_total, the mean p, to compare with the share dynrt_gate_fills_used_total is of it.", [](const RuntimeStats& s) { return s.admission.admitted_p; }},
    DerivedSpec{"dynrt_gate_fills_used_total", "counter", "Fill gate (Action 1): admitted fills that served the call their branch's selection made.", [](const RuntimeStats& s) { return double(s.admission.fills_used); }},
    DerivedSpec{"dynrt_gate_fills_refused_total", "counter", "Fill gate (Action 1): refused.", [](const RuntimeStats& s) { return double(s.admission.fills_refused); }},
    DerivedSpec{"dynrt_fills_share_refused_total", "counter", "Fill reservations refused: their tenant held its share of the fill budget.", [](const RuntimeStats& s) { return double(s.admission.share_refused); }},
    DerivedSpec{"dynrt_fills_reserve_refused_total", "counter", "Fill candidates refused because they were worth less than the fill budget's reserve price (the budget nearly spent).", [](const RuntimeStats& s) { return double(s.admission.reserve_refused); }},
    DerivedSpec{"dynrt_load_envelope", "gauge", "The causal load envelope rho_H (Eq. 3).", [](const RuntimeStats& s) { return s.envelope; }},
    DerivedSpec{"dynrt_gate_interference_scale", "gauge", "The engines' decode-step stretch over the price curves' interference curve, as their inter-token latency reads it (1 until enough intervals were read, or where no engine states its lone-request token gap); the slot and KV prices are the curve's times this.", [](const RuntimeStats& s) { return s.admission.interference_scale; }},
    DerivedSpec{"dynrt_fills_in_flight", "gauge", "Fills holding a reservation.", [](const RuntimeStats& s) { return double(s.fills_in_flight); }},
    DerivedSpec{"dynrt_fill_kv_reserved", "gauge", "KV share (of the KV budget) reserved by fills.", [](const RuntimeStats& s) { return s.kv_reserved; }},
    DerivedSpec{"dynrt_branches_open", "gauge", "Branches the generation gate opened, not yet settled.", [](const RuntimeStats& s) { return double(s.branches_open); }},
    DerivedSpec{"dynrt_csl_entries", "gauge", "Entries in the Completed-Subgraph Library.", [](const RuntimeStats& s) { return double(s.csl_entries); }},
    DerivedSpec{"dynrt_csl_shadows", "gauge", "Shadows (fill results not yet promoted).", [](const RuntimeStats& s) { return double(s.csl_shadows); }},
    DerivedSpec{"dynrt_csl_bytes", "gauge", "Result bytes held by the library.", [](const RuntimeStats& s) { return double(s.csl_bytes); }},
    DerivedSpec{"dynrt_csl_hits_total", "counter", "Library probes that served a confirmed entry.", [](const RuntimeStats& s) { return double(s.csl.hits); }},
    DerivedSpec{"dynrt_csl_misses_total", "counter", "Library probes that found nothing servable.", [](const RuntimeStats& s) { return double(s.csl.misses); }},
    DerivedSpec{"dynrt_csl_promotions_total", "counter", "Shadows promoted by an exact demand.", [](const RuntimeStats& s) { return double(s.csl.promotions); }},
    DerivedSpec{"dynrt_csl_invalidations_total", "counter", "Entries removed by writes (with cascade).", [](const RuntimeStats& s) { return double(s.csl.invalidated + s.csl.orphaned); }},
};
// The shared library tier's, exported only when one is configured.
constexpr std::array kShared = {
    DerivedSpec{"dynrt_shared_connected", "gauge", "1 while the shared library tier's Redis is reachable.", [](const RuntimeStats& s) { return double(s.shared.tier.connected); }},
    DerivedSpec{"dynrt_shared_hits_total", "counter", "Results brought in from the shared tier (computed by any replica) to serve local misses; misses for one name at once share one lookup.", [](const RuntimeStats& s) { return double(s.shared.imported); }},
    DerivedSpec{"dynrt_shared_misses_total", "counter", "Shared tier lookups that found no current result.", [](const RuntimeStats& s) { return double(s.shared.tier.misses); }},
    DerivedSpec{"dynrt_shared_stale_total", "counter", "Shared results found out of date (a record they read was written) and not served.", [](const RuntimeStats& s) { return double(s.shared.tier.stale); }},
    DerivedSpec{"dynrt_shared_checks_failed_total", "counter", "Results held here refused before serving: the shared tier had a newer write to a record they read, or could not be asked.", [](const RuntimeStats& s) { return double(s.shared.checks_failed); }},
    DerivedSpec{"dynrt_shared_puts_total", "counter", "Results written through to the shared tier.", [](const RuntimeStats& s) { return double(s.shared.tier.puts); }},
    DerivedSpec{"dynrt_shared_puts_refused_total", "counter", "Results the shared tier refused: a record they read was written after they started.", [](const RuntimeStats& s) { return double(s.shared.tier.puts_refused); }},
    DerivedSpec{"dynrt_shared_writes_total", "counter", "Writes that reached the shared tier before they were answered.", [](const RuntimeStats& s) { return double(s.shared.tier.writes); }},
    DerivedSpec{"dynrt_shared_writes_deferred_total", "counter", "Writes answered while the shared tier was unreachable (in force on this replica; sent when it is back).", [](const RuntimeStats& s) { return double(s.shared.tier.writes_deferred); }},
    DerivedSpec{"dynrt_shared_pending_writes", "gauge", "Record keys written while the shared tier was unreachable, not yet sent.", [](const RuntimeStats& s) { return double(s.shared.tier.pending_writes); }},
    DerivedSpec{"dynrt_shared_invalidations_total", "counter", "Writes taken by other replicas, applied to this replica's library.", [](const RuntimeStats& s) { return double(s.shared.remote_writes); }},
    DerivedSpec{"dynrt_shared_errors_total", "counter", "Shared tier requests that failed (unreachable, timed out, bad answer): each was a miss.", [](const RuntimeStats& s) { return double(s.shared.tier.errors); }},
    DerivedSpec{"dynrt_shared_reconnects_total", "counter", "Connections to the shared tier's Redis established.", [](const RuntimeStats& s) { return double(s.shared.tier.reconnects); }},
    DerivedSpec{"dynrt_shared_epoch_changes_total", "counter", "Times the shared tier's data was found replaced (Redis restarted empty): every shared result before it is void.", [](const RuntimeStats& s) { return double(s.shared.tier.epoch_changes); }},
};
// clang-format on

}  // namespace

namespace {

// A Prometheus label value: backslash, double quote and line feed escaped.
std::string label_value(std::string_view v) {
  std::string out;
  for (const char c : v) {
    if (c == '\\' || c == '"')
      out += {'\\', c};
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

}  // namespace

// One run of each name, a label set per replica; only for engines that are pools.
void pool_metrics(const RuntimeStats& s, std::vector<Metric>& out) {
  if (s.pools.empty()) return;
  const auto each = [&](std::string_view name, std::string_view type, std::string_view help,
                        auto&& value) {
    for (const auto& p : s.pools)
      for (const auto& r : p.stats.replicas)
        value(name, type, help,
              "{engine=\"" + label_value(p.engine) + "\",replica=\"" + label_value(r.name) + "\"",
              r);
  };
  each("dynrt_engine_replica_requests_total", "counter",
       "Requests a pool sent to each replica (failovers included), by kind.",
       [&](auto n, auto t, auto h, const std::string& l, const engines::ReplicaStats& r) {
         out.push_back({n, t, h, l + ",kind=\"canonical\"}", double(r.canonical)});
         out.push_back({n, t, h, l + ",kind=\"fill\"}", double(r.fills)});
       });
  each("dynrt_engine_replica_failures_total", "counter",
       "Requests that failed on each replica of a pool with a fault of the replica.",
       [&](auto n, auto t, auto h, const std::string& l, const engines::ReplicaStats& r) {
         out.push_back({n, t, h, l + "}", double(r.failures)});
       });
  each("dynrt_engine_replica_in_flight", "gauge", "Requests a pool has in flight on each replica.",
       [&](auto n, auto t, auto h, const std::string& l, const engines::ReplicaStats& r) {
         out.push_back({n, t, h, l + "}", double(r.in_flight)});
       });
  each("dynrt_engine_replica_load", "gauge",
       "Each replica's busy share of its capacity as the pool reads it (reported running and "
       "queued requests or its own in flight, and KV occupancy, whichever is higher).",
       [&](auto n, auto t, auto h, const std::string& l, const engines::ReplicaStats& r) {
         out.push_back({n, t, h, l + "}", r.load});
       });
  each("dynrt_engine_replica_available", "gauge",
       "1 while a pool sends canonical requests to the replica (its circuit is not open).",
       [&](auto n, auto t, auto h, const std::string& l, const engines::ReplicaStats& r) {
         out.push_back(
             {n, t, h, l + "}", double(r.canonical_circuit != engines::CircuitState::open)});
       });
  for (const auto& p : s.pools)
    out.push_back({"dynrt_engine_failovers_total", "counter",
                   "Canonical requests a pool moved to another replica after a replica failed.",
                   "{engine=\"" + label_value(p.engine) + "\"}", double(p.stats.failovers)});
}

// Recognition without tags: one label set per stage with match rules, and per reason.
void recognition_metrics(const RuntimeStats& s, std::vector<Metric>& out) {
  if (!s.recognition.enabled) return;
  for (const auto& [st, n] : s.recognition.recognized)
    out.push_back(
        {"dynrt_recognized_total", "counter",
         "Calls without X-DynRT-* headers that a template's match rules recognized, "
         "by workflow and stage.",
         "{workflow=\"" + label_value(st.first) + "\",stage=\"" + label_value(st.second) + "\"}",
         double(n)});
  const std::pair<const char*, std::uint64_t> reasons[] = {{"no_match", s.recognition.no_match},
                                                           {"ambiguous", s.recognition.ambiguous},
                                                           {"no_run", s.recognition.no_run}};
  for (const auto& [reason, n] : reasons)
    out.push_back({"dynrt_unrecognized_total", "counter",
                   "Calls without X-DynRT-* headers that no template recognized, by why: no "
                   "stage's match rules held, two stages' did, or the call did not say its run.",
                   std::string("{reason=\"") + reason + "\"}", double(n)});
}

void read_counters(const Counters& c, RuntimeStats& s) {
  for (const auto& spec : kCounters)
    s.*spec.stat = (c.*spec.live).load(std::memory_order_relaxed);
  s.engine_ms_saved = static_cast<double>(c.saved_us.load()) / 1000;
  s.engine_ms_wasted = static_cast<double>(c.wasted_us.load()) / 1000;
  s.engine_ms_unfinished = static_cast<double>(c.unfinished_us.load()) / 1000;
  s.engine_ms_drafting = static_cast<double>(c.drafting_us.load()) / 1000;
}

void count_served(Counters& c, Served how) {
  static constexpr std::array kServed = {&Counters::served_engine, &Counters::served_fill,
                                         &Counters::served_cache};
  ++(c.*kServed[static_cast<std::size_t>(how)]);
}

void count_finished(Counters& c, branch::FillStatus status) {
  // Indexed by FillStatus: running (never a finish), done, failed, cancelled.
  static constexpr std::array<std::atomic<std::uint64_t> Counters::*, 4> kFinished = {
      nullptr, &Counters::fills_completed, &Counters::fills_failed, &Counters::fills_cancelled};
  if (auto counter = kFinished[static_cast<std::size_t>(status)]) ++(c.*counter);
}

}  // namespace dynrt::actors

namespace dynrt {

std::vector<Metric> metrics(const RuntimeStats& s) {
  std::vector<Metric> out;
  for (const auto& spec : actors::kCounters)
    out.push_back({spec.name, spec.type, spec.help, std::string(spec.labels),
                   static_cast<double>(s.*spec.stat)});
  for (const auto& spec : actors::kDerived)
    out.push_back({spec.name, spec.type, spec.help, {}, spec.value(s)});
  if (s.shared.enabled)
    for (const auto& spec : actors::kShared)
      out.push_back({spec.name, spec.type, spec.help, {}, spec.value(s)});
  actors::pool_metrics(s, out);
  actors::recognition_metrics(s, out);
  return out;
}

}  // namespace dynrt

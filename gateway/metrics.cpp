#include "gateway/metrics.hpp"

#include <sstream>

namespace dynrt::gateway {

std::string prometheus_text(const RuntimeStats& s) {
  std::ostringstream out;
  auto metric = [&](const char* name, const char* type, const char* help, double value,
                    const char* labels = "") {
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n'
        << name << labels << ' ' << value << '\n';
  };
  out << "# HELP dynrt_requests_total Calls answered, by how they were served.\n"
      << "# TYPE dynrt_requests_total counter\n"
      << "dynrt_requests_total{served=\"engine\"} " << s.served_engine << '\n'
      << "dynrt_requests_total{served=\"fill\"} " << s.served_fill << '\n'
      << "dynrt_requests_total{served=\"cache\"} " << s.served_cache << '\n';
  metric("dynrt_passthrough_total", "counter", "Untagged or unknown calls forwarded unchanged.",
         static_cast<double>(s.passthrough));
  metric("dynrt_errors_total", "counter", "Calls answered with an error.",
         static_cast<double>(s.errors));
  metric("dynrt_fills_issued_total", "counter", "Fills admitted and started.",
         static_cast<double>(s.fills_issued));
  metric("dynrt_fills_consumed_total", "counter", "Fills whose result served the selected demand.",
         static_cast<double>(s.fills_consumed));
  metric("dynrt_fills_cancelled_total", "counter", "Fills aborted (losers, unusable selections).",
         static_cast<double>(s.fills_cancelled));
  metric("dynrt_fills_failed_total", "counter", "Fills that failed (a miss, never an answer).",
         static_cast<double>(s.fills_failed));
  metric("dynrt_coalesced_total", "counter",
         "Demands that joined an identical execution in flight instead of running it again.",
         static_cast<double>(s.coalesced));
  metric("dynrt_shadows_discarded_total", "counter", "Fill results discarded unused.",
         static_cast<double>(s.shadows_discarded));
  metric("dynrt_engine_saved_seconds_total", "counter",
         "Engine time of results served without execution.", s.engine_ms_saved / 1000);
  metric("dynrt_engine_wasted_seconds_total", "counter", "Engine time of fills nobody consumed.",
         s.engine_ms_wasted / 1000);
  metric("dynrt_branches_opened_total", "counter", "Decision points reached with candidates.",
         static_cast<double>(s.branches_opened));
  metric("dynrt_gate_branches_opened_total", "counter", "Generation gate (Action 0): opened.",
         static_cast<double>(s.admission.branches_opened));
  metric("dynrt_gate_branches_closed_total", "counter", "Generation gate (Action 0): kept closed.",
         static_cast<double>(s.admission.branches_closed));
  metric("dynrt_gate_fills_admitted_total", "counter", "Fill gate (Action 1): admitted.",
         static_cast<double>(s.admission.fills_admitted));
  metric("dynrt_gate_fills_refused_total", "counter", "Fill gate (Action 1): refused.",
         static_cast<double>(s.admission.fills_refused));
  metric("dynrt_load_envelope", "gauge", "The causal load envelope rho_H (Eq. 3).", s.envelope);
  metric("dynrt_fills_in_flight", "gauge", "Fills holding a reservation.", s.fills_in_flight);
  metric("dynrt_csl_entries", "gauge", "Entries in the Completed-Subgraph Library.",
         static_cast<double>(s.csl_entries));
  metric("dynrt_csl_shadows", "gauge", "Shadows (fill results not yet promoted).",
         static_cast<double>(s.csl_shadows));
  metric("dynrt_csl_bytes", "gauge", "Result bytes held by the library.",
         static_cast<double>(s.csl_bytes));
  metric("dynrt_csl_hits_total", "counter", "Library probes that served a confirmed entry.",
         static_cast<double>(s.csl.hits));
  metric("dynrt_csl_misses_total", "counter", "Library probes that found nothing servable.",
         static_cast<double>(s.csl.misses));
  metric("dynrt_csl_promotions_total", "counter", "Shadows promoted by an exact demand.",
         static_cast<double>(s.csl.promotions));
  metric("dynrt_csl_invalidations_total", "counter", "Entries removed by writes (with cascade).",
         static_cast<double>(s.csl.invalidated + s.csl.orphaned));
  metric("dynrt_writes_total", "counter", "Write notifications applied.",
         static_cast<double>(s.writes));
  metric("dynrt_workflows_live", "gauge", "Workflow runs with a live actor.",
         static_cast<double>(s.workflows_live));
  metric("dynrt_runs_evicted_total", "counter",
         "Workflow runs retired to stay within --max-live-runs (their speculation is lost).",
         static_cast<double>(s.runs_evicted));
  metric("dynrt_runs_expired_total", "counter", "Workflow runs ended after --workflow-idle-ms.",
         static_cast<double>(s.runs_expired));
  metric("dynrt_runs_refused_total", "counter",
         "New workflow runs refused with 429: their key held its live-run limit.",
         static_cast<double>(s.runs_refused));
  metric("dynrt_fills_share_refused_total", "counter",
         "Fill reservations refused: their tenant held its share of the fill budget.",
         static_cast<double>(s.admission.share_refused));
  metric("dynrt_fills_running", "gauge", "Fill actors alive.",
         static_cast<double>(s.fills_running));
  metric("dynrt_fill_kv_reserved", "gauge", "KV share (of the KV budget) reserved by fills.",
         s.kv_reserved);
  metric("dynrt_branches_open", "gauge", "Branches the generation gate opened, not yet settled.",
         static_cast<double>(s.branches_open));
  return out.str();
}

std::string prometheus_text(const AuthRefusals& refused) {
  std::ostringstream out;
  out << "# HELP dynrt_auth_refused_total Requests refused by the API keys, by reason.\n"
      << "# TYPE dynrt_auth_refused_total counter\n"
      << "dynrt_auth_refused_total{reason=\"unauthenticated\"} " << refused.unauthenticated << '\n'
      << "dynrt_auth_refused_total{reason=\"forbidden\"} " << refused.forbidden << '\n'
      << "dynrt_auth_refused_total{reason=\"rate_limited\"} " << refused.rate_limited << '\n';
  return out.str();
}

}  // namespace dynrt::gateway

#include "bench/sweep.hpp"

#include "bench/cell.hpp"
#include "bench/http_cell.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iomanip>
#include <random>
#include <sstream>
#include <utility>

namespace dynrt::bench {

using nlohmann::json;
using namespace detail;

namespace {

// The bursts that find the saturation rate: from kFirstBurst runs, doubled until the measured
// rate moves by less than 10% (a burst too small for the engine never fills it), up to
// kMaxBurst. Larger bursts move it by ±10% around the same value (Routing on h200x4-32b:
// 132, 140, 154, 141 and 134 runs/s from 2,000 to 32,000 runs).
constexpr std::size_t kFirstBurst = 2000;
constexpr std::size_t kMaxBurst = 16000;
// The bursts draw their runs from this seed, whatever --seed is: the saturation rate is the
// workload's and the profile's, and a seed's records must not depend on which seed a run
// started from (`--seed 7 --seeds 1` writes the records `--seed 6 --seeds 2` writes for 7).
// 1 is --seed's default, so the default runs measure what they always did.
constexpr std::uint64_t kSaturationSeed = 1;
constexpr double kWarmupShare = 0.2;  // left out of the latency figures
constexpr double kDrainShare = 0.1;
// ... and the warm-up lasts at least this many simulated seconds: the runs of the first 30 s
// are added in front of the measured ones when 20% of the runs would arrive sooner. A cell
// measures a deployment that has been running, not the controller's cold start: at 160 HCI
// runs/s, 1,000 runs last 6 s, and the generation gate's cold trials only settle (a user
// pick and the act after it) when the last of them has arrived.
constexpr double kWarmupSeconds = 30;
// ... and the drain lasts at least this many: a run is measured only while arrivals continue
// through its whole life, not as the load falls away at the trace's end. The last 10% of the
// runs are too few where runs are long against the rate: at 95 HCI runs/s on h200x4-32b, 1,000
// runs leave out the last second of arrivals where a run (offer, the user's think time, act)
// lasts 3 to 10 s, and the floor measured 2.95 s at 0.95 against 3.50 s with the load held.
constexpr double kDrainSeconds = 30;

// The runs that arrive in `seconds` at `rate`.
std::size_t timed_runs(double rate, double seconds) {
  return static_cast<std::size_t>(std::ceil(rate * seconds));
}

double sample_sd(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean(v);
  double sum = 0;
  for (const double x : v)
    sum += (x - m) * (x - m);
  return std::sqrt(sum / static_cast<double>(v.size() - 1));
}

// The rate at which `runs` floor runs, all arriving at once, finish: 90% of them over the
// time from their arrival until the 90th percent finished. (Not the middle 80% of the
// completions: the engine shares its batch, so runs that arrive together finish together,
// and the spread of their completions says nothing of how much work the engine got through.
// That measure put Routing's saturation at 140 runs/s on h200x4-32b, where the floor's
// latency grows without bound from 42.)
Saturation burst(const SweepOptions& o, const BenchOptions& bo, const dsl::TemplateGraph& g,
                 std::size_t runs) {
  Saturation s;
  s.workload = g.workflow;
  Workload w = bench_workload(g, kSaturationSeed, runs, o.predictability, o.repeat_rate,
                              o.selection_first, o.contexts);
  // A user's think time holds no engine resource: in the burst the engine would idle while
  // every user thinks at once, and the rate would measure the users, not the engine.
  for (auto& r : w.runs)
    r.think_s = 0;
  Trace t{&g, &w, std::vector<double>(w.runs.size(), 0.0), 0};
  std::vector<double> finished;
  CellContext cx;
  cx.options = &bo;
  cx.trace = &t;
  cx.arm = "floor";
  cx.finished_at_out = &finished;
  run_cell(cx);
  std::vector<double> done;
  for (const double f : finished)
    if (f >= 0) done.push_back(f);
  std::sort(done.begin(), done.end());
  s.runs = w.runs.size();
  if (done.size() < 10) return s;
  const std::size_t hi = done.size() * 9 / 10;
  s.window_s = done[hi];
  if (s.window_s > 0) s.rate = static_cast<double>(hi + 1) / s.window_s;
  return s;
}

Saturation find_saturation(const SweepOptions& o, const BenchOptions& bo,
                           const dsl::TemplateGraph& g) {
  if (o.saturation > 0) return Saturation{g.workflow, o.saturation, 0, 0};  // given, not measured
  Saturation s = burst(o, bo, g, std::max(kFirstBurst, o.requests));
  while (s.runs * 2 <= kMaxBurst) {
    const Saturation bigger = burst(o, bo, g, s.runs * 2);
    const bool settled = std::abs(bigger.rate - s.rate) <= 0.1 * s.rate;
    s = bigger;
    if (settled) break;
  }
  return s;
}

std::string fixed(double v, int digits = 2) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

// What a cell reads of the sweep's options.
BenchOptions cell_options(const SweepOptions& o) {
  BenchOptions bo;
  bo.profile = o.profile;
  bo.interference_scale = o.interference_scale;
  bo.emission = o.emission;
  bo.templates = o.templates;
  return bo;
}

// One arm's cells over the seeds: means, the s.d. of the cells' means, the lowest accuracy.
SweepPoint over_seeds(const std::vector<CellResult>& cells) {
  SweepPoint p;
  p.seeds = cells.size();
  std::vector<double> means, p50, p99, ratio, issued, consumed, wasted, gate, drafts, drafting;
  std::vector<double> kv_use, kv_wait;
  std::vector<std::vector<StageTime>> stages;
  std::vector<double> fill_p, fill_used, fit;
  for (const auto& c : cells) {
    stages.push_back(c.stages);
    fit.push_back(c.interference_fit);
    if (c.fill_p >= 0) {
      fill_p.push_back(c.fill_p);
      fill_used.push_back(c.fill_used_share);
    }
    means.push_back(c.mean_s);
    p50.push_back(c.p50_s);
    p99.push_back(c.p99_s);
    ratio.push_back(c.ratio_to_floor);
    issued.push_back(c.fills_issued);
    consumed.push_back(c.fills_consumed);
    wasted.push_back(c.wasted_engine_s);
    drafts.push_back(c.draft_samples);
    drafting.push_back(c.drafting_engine_s);
    kv_use.push_back(c.kv_use);
    kv_wait.push_back(c.kv_wait_share);
    if (c.gate_open_share >= 0) gate.push_back(c.gate_open_share);
    p.accuracy = std::min(p.accuracy, c.accuracy);
    p.failures += c.failures;
    if (p.first_failure.empty()) p.first_failure = c.first_failure;
  }
  p.mean_s = mean(means);
  p.sd_s = sample_sd(means);
  p.p50_s = mean(p50);
  p.p99_s = mean(p99);
  p.ratio_to_floor = mean(ratio);
  p.fills_issued = mean(issued);
  p.fills_consumed = mean(consumed);
  p.wasted_engine_s = mean(wasted);
  p.gate_open_share = gate.empty() ? -1 : mean(gate);
  p.draft_samples = mean(drafts);
  p.drafting_engine_s = mean(drafting);
  p.kv_use = mean(kv_use);
  p.kv_wait_share = mean(kv_wait);
  p.stages = mean_stage_times(stages);
  p.fill_p = fill_p.empty() ? -1 : mean(fill_p);
  p.fill_used_share = fill_used.empty() ? -1 : mean(fill_used);
  p.interference_fit = mean(fit);
  return p;
}

// Every arm on one trace, the floor first: each cell's result (its ratio to the floor's set),
// each run's latency per arm when `latencies` is given, and the progress line. With `http`,
// each arm dynrt serve can run is run again over HTTP into `over_http` (its ratio to the floor
// over HTTP; its accuracy against the floor's bodies in process).
std::vector<CellResult> run_arms(const std::vector<std::string>& arms, const BenchOptions& bo,
                                 const Trace& t, std::size_t measure_from, std::size_t measure_to,
                                 std::vector<std::vector<double>>* latencies, std::ostream& line,
                                 const HttpCellOptions* http = nullptr,
                                 std::vector<std::optional<CellResult>>* over_http = nullptr) {
  std::vector<CellResult> out;
  Bodies floor_bodies;
  if (latencies) latencies->assign(arms.size(), {});
  if (over_http) over_http->assign(arms.size(), std::nullopt);
  const CellResult* http_floor = nullptr;
  for (std::size_t a = 0; a < arms.size(); ++a) {
    CellContext cx;
    cx.options = &bo;
    cx.trace = &t;
    cx.arm = arms[a];
    cx.measure_from = measure_from;
    cx.measure_to = measure_to;
    if (latencies) cx.latency_out = &(*latencies)[a];
    if (a == 0)
      cx.bodies_out = &floor_bodies;
    else
      cx.floor_bodies = &floor_bodies;
    CellResult c = run_cell(cx);
    set_ratio(c, out.empty() ? c : out.front());
    line << ' ' << arms[a] << ' ' << fixed(c.mean_s) << 's';
    if (http && over_http && http_arm(arms[a])) {
      cx.bodies_out = nullptr;
      cx.floor_bodies = &floor_bodies;
      cx.latency_out = nullptr;
      CellResult h = run_http_cell(cx, *http);
      set_ratio(h, http_floor ? *http_floor : h);
      line << " (http " << fixed(h.mean_s) << "s";
      if (h.failures) line << ", " << h.failures << " failed: " << h.first_failure;
      line << ')';
      (*over_http)[a] = std::move(h);
      if (a == 0) http_floor = &*(*over_http)[0];
    }
    out.push_back(std::move(c));
  }
  return out;
}

// The report's first lines: the command, the profile and the seeds.
void heading(std::ostream& md, const char* title, const SweepOptions& o) {
  md << "# " << title << "\n\nengine profile " << o.profile;
  if (o.interference_scale != 1.0)
    md << " (true interference " << fixed(o.interference_scale) << "× the price curves' fit)";
  if (o.contexts != Contexts::compact) md << ", " << to_string(o.contexts) << "-sized contexts";
  md << ", " << o.seeds << " seed" << (o.seeds == 1 ? "" : "s") << " from " << o.first_seed << ", ";
}

// What both reports' JSON share: the options, the saturation rates, the records and points.
template <class Point>
json report_json(const SweepOptions& o, const std::map<std::string, Saturation>& saturation,
                 const std::vector<SweepRecord>& records, const std::vector<Point>& points,
                 double wall_s) {
  json j;
  j["profile"] = o.profile;
  j["interference_scale"] = o.interference_scale;
  j["selection_first"] = o.selection_first;
  j["contexts"] = to_string(o.contexts);
  j["emission"] = o.emission;
  j["requests"] = o.requests;
  j["seeds"] = o.seeds;
  j["first_seed"] = o.first_seed;
  j["repeat_rate"] = o.repeat_rate;
  j["predictability"] = o.predictability;
  j["saturation"] = json::object();
  for (const auto& [name, s] : saturation)
    j["saturation"][name] = {
        {"rate", s.rate}, {"burst_runs", s.runs}, {"ninety_percent_done_s", s.window_s}};
  j["records"] = json::array();
  for (const auto& r : records)
    j["records"].push_back(r.to_json());
  j["points"] = json::array();
  for (const auto& p : points)
    j["points"].push_back(p.to_json());
  j["wall_s"] = wall_s;
  return j;
}

}  // namespace

json SweepRecord::to_json() const {
  json j = {{"workload", workload},
            {"profile", profile},
            {"load", load},
            {"rate", rate},
            {"arm", arm},
            {"seed", seed},
            {"mean_s", cell.mean_s},
            {"p50_s", cell.p50_s},
            {"p99_s", cell.p99_s},
            {"ratio_to_floor", cell.ratio_to_floor},
            {"accuracy", cell.accuracy},
            {"fills_issued", cell.fills_issued},
            {"fills_consumed", cell.fills_consumed},
            {"wasted_engine_s", cell.wasted_engine_s},
            {"speculative_engine_s", cell.speculative_engine_s},
            {"served_fill", cell.served_fill},
            {"served_cache", cell.served_cache},
            {"waits", cell.waits},
            {"wait_timeouts", cell.wait_timeouts},
            {"hedge_fills", cell.hedge_fills},
            {"requeued", cell.requeued},
            {"fills_outrun", cell.fills_outrun},
            {"draft_samples", cell.draft_samples},
            {"drafting_engine_s", cell.drafting_engine_s},
            {"kv_use", cell.kv_use},
            {"kv_wait_share", cell.kv_wait_share},
            {"window_over_downstream", cell.window_over_downstream},
            {"gate_open_share", cell.gate_open_share},
            {"gate_audit_share", cell.gate_audit_share},
            {"fill_p", cell.fill_p},
            {"fill_used_share", cell.fill_used_share},
            {"interference_fit", cell.interference_fit},
            {"requests", cell.requests},
            {"completed", cell.completed},
            {"failures", cell.failures},
            {"stages", stage_times_json(cell.stages)},
            {"wall_s", cell.wall_s}};
  if (cell.failures) j["first_failure"] = cell.first_failure;
  if (http)
    j["http"] = {{"mean_s", http->mean_s},
                 {"p50_s", http->p50_s},
                 {"p99_s", http->p99_s},
                 {"ratio_to_floor", http->ratio_to_floor},
                 {"accuracy", http->accuracy},
                 {"fills_issued", http->fills_issued},
                 {"fills_consumed", http->fills_consumed},
                 {"served_fill", http->served_fill},
                 {"served_cache", http->served_cache},
                 {"interference_fit", http->interference_fit},
                 {"completed", http->completed},
                 {"failures", http->failures},
                 {"first_failure", http->first_failure},
                 {"wall_s", http->wall_s}};
  return j;
}

json SweepPoint::to_json() const {
  json j = {{"workload", workload},
            {"load", load},
            {"rate", rate},
            {"arm", arm},
            {"seeds", seeds},
            {"mean_s", mean_s},
            {"sd_s", sd_s},
            {"p50_s", p50_s},
            {"p99_s", p99_s},
            {"ratio_to_floor", ratio_to_floor},
            {"accuracy", accuracy},
            {"fills_issued", fills_issued},
            {"fills_consumed", fills_consumed},
            {"wasted_engine_s", wasted_engine_s},
            {"gate_open_share", gate_open_share},
            {"fill_p", fill_p},
            {"fill_used_share", fill_used_share},
            {"interference_fit", interference_fit},
            {"draft_samples", draft_samples},
            {"drafting_engine_s", drafting_engine_s},
            {"kv_use", kv_use},
            {"kv_wait_share", kv_wait_share},
            {"failures", failures},
            {"stages", stage_times_json(stages)}};
  if (failures) j["first_failure"] = first_failure;
  if (http)
    j["http"] = {{"seeds", http->seeds},
                 {"mean_s", http->mean_s},
                 {"sd_s", http->sd_s},
                 {"p99_s", http->p99_s},
                 {"ratio_to_floor", http->ratio_to_floor},
                 {"accuracy", http->accuracy},
                 {"fills_issued", http->fills_issued},
                 {"fills_consumed", http->fills_consumed},
                 {"failures", http->failures}};
  return j;
}

json SweepResult::to_json(const SweepOptions& o) const {
  json j = report_json(o, saturation, records, points, wall_s);
  j["loads"] = o.loads;
  j["trimmed"] = {{"warmup_share", kWarmupShare},
                  {"warmup_min_s", kWarmupSeconds},
                  {"drain_share", kDrainShare},
                  {"drain_min_s", kDrainSeconds}};
  return j;
}

const SweepPoint* find_point(const SweepResult& r, const std::string& workload, double load,
                             const std::string& arm) {
  for (const auto& p : r.points)
    if (p.workload == workload && p.load == load && p.arm == arm) return &p;
  return nullptr;
}

CellTrim trim_cell(std::size_t requests, double rate) {
  // The share of `requests` left out at one end, and the runs added there so that it lasts
  // at least `seconds`.
  const auto ends = [&](double share, double seconds) {
    const auto left_out = static_cast<std::size_t>(share * static_cast<double>(requests));
    const std::size_t timed = timed_runs(rate, seconds);
    return std::pair{left_out, timed > left_out ? timed - left_out : 0};
  };
  const auto [warm, front] = ends(kWarmupShare, kWarmupSeconds);
  const auto [drain, back] = ends(kDrainShare, kDrainSeconds);
  const std::size_t runs = requests + front + back;
  return CellTrim{runs, warm + front, runs - drain - back};
}

double cell_runs_bound(std::size_t requests, double rate) {
  // + 2: trim_cell rounds each end's timed runs up.
  return static_cast<double>(requests) + rate * (kWarmupSeconds + kDrainSeconds) + 2;
}

SweepResult run_sweep(const SweepOptions& o) {
  SweepResult out;
  const auto wall_start = std::chrono::steady_clock::now();
  Graphs loaded = load_graphs(o.templates, o.workloads, o.profile);
  if (!loaded.error.empty()) {
    out.error = loaded.error;
    return out;
  }
  auto& graphs = loaded.by_workload;
  const std::vector<std::string> arms = arms_with_floor(o.arms);

  BenchOptions bo = cell_options(o);
  HttpCellOptions http;
  if (o.http) {
    http.time_scale = o.http_time_scale;
    http.dir = o.http_dir;
    http.record = o.http_record;
    if (const auto missing = find_http_binaries(http); !missing.empty()) {
      out.error = "--http: " + missing;
      return out;
    }
  }

  for (const auto& name : o.workloads) {
    const dsl::TemplateGraph& g = *graphs[name];
    const Saturation sat = find_saturation(o, bo, g);
    out.saturation[name] = sat;
    if (o.progress)
      *o.progress << name << ": the floor saturates at " << fixed(sat.rate) << " runs/s ("
                  << (sat.runs ? std::to_string(sat.runs) + "-run burst" : std::string("given"))
                  << ")\n"
                  << std::flush;
    if (sat.rate <= 0) {
      out.error = name + ": the floor's saturation rate could not be measured";
      return out;
    }
    for (const double load : o.loads) {
      const double rate = load * sat.rate;
      std::vector<std::vector<CellResult>> by_arm(arms.size()), by_arm_http(arms.size());
      for (std::size_t k = 0; k < o.seeds; ++k) {
        const std::uint64_t seed = o.first_seed + k;
        bo.seed = seed;
        const CellTrim tr = trim_cell(o.requests, rate);
        const Workload w = bench_workload(g, seed, tr.runs, o.predictability, o.repeat_rate,
                                          o.selection_first, o.contexts);
        Trace t{&g, &w, arrivals(seed, rate, w.runs.size()), rate};
        std::ostringstream line;
        line << name << " load " << load << " seed " << seed << ":";
        std::vector<std::optional<CellResult>> over_http;
        const auto cells = run_arms(arms, bo, t, tr.measure_from, tr.measure_to, nullptr, line,
                                    o.http ? &http : nullptr, &over_http);
        for (std::size_t a = 0; a < arms.size(); ++a) {
          by_arm[a].push_back(cells[a]);
          out.records.push_back(
              {name, o.profile, load, rate, arms[a], seed, cells[a], over_http[a]});
          if (over_http[a]) by_arm_http[a].push_back(*over_http[a]);
        }
        if (o.progress) *o.progress << line.str() << '\n' << std::flush;
      }
      for (std::size_t a = 0; a < arms.size(); ++a) {
        SweepPoint p = over_seeds(by_arm[a]);
        p.workload = name;
        p.load = load;
        p.rate = rate;
        p.arm = arms[a];
        if (!by_arm_http[a].empty())
          p.http = std::make_shared<const SweepPoint>(over_seeds(by_arm_http[a]));
        out.points.push_back(p);
      }
    }
  }
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return out;
}

// Where each arm's answer time went, at the highest load swept up to kStageTableLoad (the
// targets compare arms up to there; the lowest load if every load is above): per stage, the
// seconds per run of its calls served by the engine / a fill / a cache.
constexpr double kStageTableLoad = 0.85;

void stage_table(std::ostream& md, const SweepResult& r, const std::string& workload,
                 const std::vector<std::string>& arms, const std::vector<double>& loads) {
  std::optional<double> at;
  for (const double load : loads)
    if (find_point(r, workload, load, "floor") && load <= kStageTableLoad + 1e-9 &&
        (!at || load > *at))
      at = load;
  if (!at)
    for (const double load : loads)
      if (find_point(r, workload, load, "floor") && (!at || load < *at)) at = load;
  if (!at) return;
  std::vector<std::string> stages;
  for (const auto& a : arms)
    if (const SweepPoint* p = find_point(r, workload, *at, a))
      for (const StageTime& t : p->stages)
        if (std::find(stages.begin(), stages.end(), t.stage) == stages.end())
          stages.push_back(t.stage);
  if (stages.empty()) return;
  md << "\nAnswer time per run at load " << *at
     << ", by stage: seconds of its calls served by the engine / a fill / a cache (the calls' "
        "answer times added up; calls side by side overlap in a run's latency):\n\n| arm |";
  for (const auto& s : stages)
    md << ' ' << s << " |";
  md << "\n|---|";
  for (std::size_t i = 0; i < stages.size(); ++i)
    md << "---|";
  md << '\n';
  for (const auto& a : arms) {
    const SweepPoint* p = find_point(r, workload, *at, a);
    if (!p) continue;
    md << "| " << a << " |";
    for (const auto& stage : stages) {
      const auto seconds_of = [&](const char* served) {
        double sum = 0;
        for (const StageTime& t : p->stages)
          if (t.stage == stage && t.served == served) sum += t.per_run_s;
        return fixed(sum);
      };
      md << ' ' << seconds_of("engine") << " / " << seconds_of("fill") << " / "
         << seconds_of("cache") << " |";
    }
    md << '\n';
  }
  // How long the prompts are (--contexts): the floor sends every call to the engine.
  if (const SweepPoint* floor = find_point(r, workload, *at, "floor")) {
    std::string sizes;
    for (const StageTime& t : floor->stages)
      if (t.served == "engine" && t.prompt_tokens > 1)
        sizes += (sizes.empty() ? "" : ", ") + t.stage + " " + fixed(t.prompt_tokens, 0);
    if (!sizes.empty())
      md << "\nPrompt tokens per model call, as the engine counts them: " << sizes << ".\n";
  }
  // Whether the KV pools bound: the floor's mean KV in use, and the share of time its queues
  // waited for KV with a slot free, per load.
  std::string kv;
  for (const double load : loads)
    if (const SweepPoint* floor = find_point(r, workload, load, "floor"))
      kv += (kv.empty() ? "" : ", ") + fixed(load) + ": " + fixed(floor->kv_use * 100, 0) + "% (" +
            fixed(floor->kv_wait_share * 100, 0) + "%)";
  if (!kv.empty())
    md << "\nThe floor's KV pools in use on average, and (in brackets) the share of time its "
          "queues waited for KV with a decode slot free, by load: "
       << kv << ".\n";
}

std::string format_sweep(const SweepOptions& o, const SweepResult& r) {
  std::ostringstream md;
  heading(md, ("dynrt bench " + o.command).c_str(), o);
  md << o.requests << " runs per cell (the first " << kWarmupShare * 100 << "% and the last "
     << kDrainShare * 100 << "% left out of the latencies; where the first " << kWarmupShare * 100
     << "% would arrive within " << kWarmupSeconds
     << " simulated seconds, the runs of those seconds are added in front and left out "
        "instead, and behind where the last "
     << kDrainShare * 100 << "% would arrive within " << kDrainSeconds << "), exact-repeat rate "
     << o.repeat_rate;
  if (o.predictability != 1.0) md << ", predictability " << o.predictability;
  md << "; simulated time, latencies in simulated seconds, mean ± 1 s.d. over seeds. Ran in "
     << fixed(r.wall_s, 1) << " s.\n";
  std::vector<std::string> arms;
  for (const auto& p : r.points)
    if (std::find(arms.begin(), arms.end(), p.arm) == arms.end()) arms.push_back(p.arm);
  for (const auto& [name, sat] : r.saturation) {
    md << "\n## " << name << "\n\nThe floor saturates at " << fixed(sat.rate)
       << " runs per simulated second ("
       << (sat.runs ? std::to_string(sat.runs) +
                          " runs arriving at once; 90% of them had finished after " +
                          fixed(sat.window_s) + " s"
                    : std::string("given with --saturation, not measured"))
       << ").\n\n| load | rate |";
    for (const auto& a : arms)
      md << ' ' << a << " |";
    md << "\n|---|---|";
    for (std::size_t i = 0; i < arms.size(); ++i)
      md << "---|";
    md << '\n';
    for (const double load : o.loads) {
      const SweepPoint* floor = find_point(r, name, load, "floor");
      if (!floor) continue;
      md << "| " << load << " | " << fixed(floor->rate) << " |";
      for (const auto& a : arms) {
        const SweepPoint* p = find_point(r, name, load, a);
        if (!p) {
          md << " – |";
          continue;
        }
        md << ' ' << fixed(p->mean_s) << " ± " << fixed(p->sd_s);
        if (a != "floor") md << " (" << fixed(p->ratio_to_floor, 3) << "×)";
        if (p->failures) md << ", " << p->failures << " failed";
        md << " |";
      }
      md << '\n';
    }
    // What the table's "N failed" does not say: why (the first failed run of each cell).
    for (const auto& p : r.points)
      if (p.workload == name && p.failures)
        md << "\n"
           << p.arm << " at " << p.load << ": " << p.failures
           << " run(s) failed; the first: " << p.first_failure << "\n";
    // A table of one figure per (load, arm other than the floor).
    const auto per_arm = [&](const std::string& title,
                             const std::function<std::string(const SweepPoint&)>& cell) {
      md << "\n" << title << ":\n\n| load |";
      for (const auto& a : arms)
        if (a != "floor") md << ' ' << a << " |";
      md << "\n|---|";
      for (std::size_t i = 1; i < arms.size(); ++i)
        md << "---|";
      md << '\n';
      for (const double load : o.loads) {
        if (!find_point(r, name, load, "floor")) continue;
        md << "| " << load << " |";
        for (const auto& a : arms) {
          if (a == "floor") continue;
          const SweepPoint* p = find_point(r, name, load, a);
          md << ' ' << (p ? cell(*p) : std::string("–")) << " |";
        }
        md << '\n';
      }
    };
    per_arm("Fills issued / consumed per run, and engine-seconds wasted per run",
            [](const SweepPoint& p) {
              return fixed(p.fills_issued) + " / " + fixed(p.fills_consumed) + ", " +
                     fixed(p.wasted_engine_s) + " s";
            });
    per_arm(
        "The fill gate's mean p for the fills it admitted / the share of them that served "
        "their branch's selection",
        [](const SweepPoint& p) {
          return p.fill_p < 0 ? std::string("–")
                              : fixed(p.fill_p) + " / " + fixed(p.fill_used_share);
        });
    // A drafter's cost (templates whose candidates a draft model samples), and how often the
    // generation gate let it run.
    bool drafted = false;
    for (const auto& p : r.points)
      drafted = drafted || (p.workload == name && p.draft_samples > 0);
    if (drafted)
      per_arm(
          "Drafter samples and their engine-seconds per run, and the share of branches the "
          "generation gate opened",
          [](const SweepPoint& p) {
            return fixed(p.draft_samples) + ", " + fixed(p.drafting_engine_s) + " s, " +
                   (p.gate_open_share < 0 ? std::string("–") : fixed(p.gate_open_share));
          });
    stage_table(md, r, name, arms, o.loads);
    // In process against over HTTP (--http).
    bool http_any = false;
    for (const double load : o.loads)
      for (const auto& a : arms) {
        const SweepPoint* p = find_point(r, name, load, a);
        if (!p || !p->http) continue;
        const SweepPoint& h = *p->http;
        if (!http_any)
          md << "\nIn process (simulated time) against over HTTP (dynrt serve in front of "
                "dynrt-sim-engine, "
             << fixed(o.http_time_scale, 0)
             << " real ms per simulated second): mean latency, ratio to the floor, fills issued "
                "and consumed per run, accuracy against the floor in process:\n\n"
                "| load | arm | in process | over HTTP | HTTP against in process | fills issued / "
                "consumed, in process | over HTTP | accuracy over HTTP |\n"
                "|---|---|---|---|---|---|---|---|\n";
        http_any = true;
        md << "| " << load << " | " << a << " | " << fixed(p->mean_s) << " ± " << fixed(p->sd_s)
           << " (" << fixed(p->ratio_to_floor, 3) << "×) | " << fixed(h.mean_s) << " ± "
           << fixed(h.sd_s) << " (" << fixed(h.ratio_to_floor, 3) << "×) | "
           << (h.mean_s >= p->mean_s ? "+" : "")
           << fixed(p->mean_s > 0 ? 100 * (h.mean_s / p->mean_s - 1) : 0, 1) << "% | "
           << fixed(p->fills_issued) << " / " << fixed(p->fills_consumed) << " | "
           << fixed(h.fills_issued) << " / " << fixed(h.fills_consumed) << " | "
           << fixed(h.accuracy, 3);
        if (h.failures) md << ", " << h.failures << " failed";
        md << " |\n";
      }
    // Priced against open: how many fewer fills both gates priced issue, at what latency.
    bool any = false;
    for (const double load : o.loads) {
      const SweepPoint* full = find_point(r, name, load, "full");
      const SweepPoint* open = find_point(r, name, load, "always");
      if (!full || !open || open->mean_s <= 0) continue;
      if (!any) md << "\nBoth gates priced (full) against both open (always):\n\n";
      any = true;
      md << "- load " << load << ": " << fixed(full->fills_issued) << " against "
         << fixed(open->fills_issued) << " fills per run ("
         << (full->fills_issued > 0 ? fixed(open->fills_issued / full->fills_issued, 1) + "×"
                                    : std::string("all"))
         << " fewer), mean latency " << (full->mean_s >= open->mean_s ? "+" : "")
         << fixed(100 * (full->mean_s / open->mean_s - 1), 1) << "%";
      if (open->draft_samples > 0)
        md << ", drafting " << fixed(full->drafting_engine_s) << " against "
           << fixed(open->drafting_engine_s) << " engine-s per run";
      md << '\n';
    }
  }
  return md.str();
}

const std::vector<BurstyPhase>& bursty_phases() {
  static const std::vector<BurstyPhase> phases = {
      {"A", 0.15, -1}, {"B", 0.9, -1}, {"C", 0.9, 0.9}, {"D", 0.15, -1}};
  return phases;
}

namespace {

constexpr std::size_t kWarmupPhase = static_cast<std::size_t>(-1);

// The bursty trace of one seed: `warm` runs of warm-up at the first phase's rate (phase
// kWarmupPhase, left out of every figure), then the workload's runs in four phases, the
// arrivals of each at its phase's rate after the previous phase's last; phase C's runs mostly
// replaced by exact repeats of popular ones (under ids of their own). `phase_of` gets each
// run's phase.
Workload bursty_workload(const dsl::TemplateGraph& g, const SweepOptions& o, std::uint64_t seed,
                         double saturation, std::size_t warm, std::vector<double>& arrival_s,
                         std::vector<std::size_t>& phase_of) {
  Workload w = bench_workload(g, seed, o.requests + warm, o.predictability, o.repeat_rate,
                              o.selection_first, o.contexts);
  const auto& phases = bursty_phases();
  const std::size_t n = w.runs.size();
  const std::size_t per = std::max<std::size_t>(1, o.requests / phases.size());
  std::mt19937_64 rng(seed * 7'919 + 17);
  std::uniform_real_distribution<double> coin(0, 1);
  arrival_s.assign(n, 0);
  phase_of.assign(n, 0);
  double t = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t ph = i < warm ? 0 : std::min((i - warm) / per, phases.size() - 1);
    phase_of[i] = i < warm ? kWarmupPhase : ph;
    std::exponential_distribution<double> gap(phases[ph].load * saturation);
    t += gap(rng);
    arrival_s[i] = t;
    if (i >= warm && phases[ph].repeat_share > 0 && !w.popular.empty() &&
        coin(rng) < phases[ph].repeat_share) {
      const std::size_t k =
          static_cast<std::size_t>(coin(rng) * coin(rng) * static_cast<double>(w.popular.size()));
      Run r = w.popular[std::min(k, w.popular.size() - 1)];
      r.workflow_id = w.runs[i].workflow_id + "-c";
      r.popular = static_cast<int>(k);
      r.think_s = w.runs[i].think_s;
      w.runs[i] = std::move(r);
    }
  }
  return w;
}

}  // namespace

json BurstyPoint::to_json() const {
  json j = {{"workload", workload},
            {"arm", arm},
            {"seeds", seeds},
            {"mean_s", mean_s},
            {"sd_s", sd_s},
            {"phase_mean_s", phase_mean_s},
            {"fills_issued", fills_issued},
            {"wasted_engine_s", wasted_engine_s},
            {"accuracy", accuracy},
            {"failures", failures}};
  if (failures) j["first_failure"] = first_failure;
  return j;
}

json BurstyResult::to_json(const SweepOptions& o) const {
  json j = report_json(o, saturation, records, points, wall_s);
  j["phases"] = json::array();
  for (const auto& p : bursty_phases())
    j["phases"].push_back({{"name", p.name}, {"load", p.load}, {"repeat_share", p.repeat_share}});
  return j;
}

BurstyResult run_bursty(const SweepOptions& o) {
  BurstyResult out;
  const auto wall_start = std::chrono::steady_clock::now();
  Graphs loaded = load_graphs(o.templates, o.workloads, o.profile);
  if (!loaded.error.empty()) {
    out.error = loaded.error;
    return out;
  }
  const std::vector<std::string> arms = arms_with_floor(o.arms);
  BenchOptions bo = cell_options(o);
  const std::size_t phases = bursty_phases().size();
  for (const auto& name : o.workloads) {
    const dsl::TemplateGraph& g = *loaded.by_workload[name];
    const Saturation sat = find_saturation(o, bo, g);
    out.saturation[name] = sat;
    if (sat.rate <= 0) {
      out.error = name + ": the floor's saturation rate could not be measured";
      return out;
    }
    std::vector<std::vector<CellResult>> cells(arms.size());
    std::vector<std::vector<std::vector<double>>> phase_means(arms.size());
    for (std::size_t k = 0; k < o.seeds; ++k) {
      const std::uint64_t seed = o.first_seed + k;
      bo.seed = seed;
      std::vector<double> at;
      std::vector<std::size_t> phase_of;
      // The same warm-up as a sweep cell's: the first 30 simulated seconds, at phase A's rate.
      const std::size_t warm = timed_runs(bursty_phases().front().load * sat.rate, kWarmupSeconds);
      const Workload w = bursty_workload(g, o, seed, sat.rate, warm, at, phase_of);
      Trace t{&g, &w, at, 0};
      std::ostringstream line;
      line << name << " bursty seed " << seed << ":";
      std::vector<std::vector<double>> latency;
      const auto arm_cells = run_arms(arms, bo, t, warm, w.runs.size(), &latency, line);
      for (std::size_t a = 0; a < arms.size(); ++a) {
        std::vector<std::vector<double>> by_phase(phases);
        for (std::size_t i = 0; i < latency[a].size(); ++i)
          if (latency[a][i] >= 0 && phase_of[i] != kWarmupPhase)
            by_phase[phase_of[i]].push_back(latency[a][i]);
        std::vector<double> means;
        for (const auto& v : by_phase)
          means.push_back(mean(v));
        phase_means[a].push_back(means);
        cells[a].push_back(arm_cells[a]);
        out.records.push_back({name, o.profile, -1, 0, arms[a], seed, arm_cells[a], std::nullopt});
      }
      if (o.progress) *o.progress << line.str() << '\n' << std::flush;
    }
    for (std::size_t a = 0; a < arms.size(); ++a) {
      BurstyPoint p;
      p.workload = name;
      p.arm = arms[a];
      const SweepPoint over = over_seeds(cells[a]);
      p.seeds = over.seeds;
      p.accuracy = over.accuracy;
      p.failures = over.failures;
      p.first_failure = over.first_failure;
      p.mean_s = over.mean_s;
      p.sd_s = over.sd_s;
      p.fills_issued = over.fills_issued;
      p.wasted_engine_s = over.wasted_engine_s;
      for (std::size_t ph = 0; ph < phases; ++ph) {
        std::vector<double> v;
        for (const auto& seed_means : phase_means[a])
          v.push_back(seed_means[ph]);
        p.phase_mean_s.push_back(mean(v));
      }
      out.points.push_back(p);
    }
  }
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return out;
}

std::string format_bursty(const SweepOptions& o, const BurstyResult& r) {
  std::ostringstream md;
  heading(md, "dynrt bench bursty", o);
  md << o.requests
     << " runs per trace in four phases, after 30 simulated seconds of warm-up at phase A's "
        "rate (left out):";
  for (const auto& p : bursty_phases()) {
    md << ' ' << p.name << " at " << p.load << "× saturation";
    if (p.repeat_share > 0) md << " (" << p.repeat_share * 100 << "% exact repeats)";
    md << (p.name == "D" ? "." : ",");
  }
  md << " Mean latency over the whole trace ± 1 s.d. over seeds; ran in " << fixed(r.wall_s, 1)
     << " s.\n";
  for (const auto& [name, sat] : r.saturation) {
    md << "\n## " << name << " (saturation " << fixed(sat.rate)
       << " runs/s)\n\n| arm | mean s | × floor | A | B | C | D | fills / run | wasted engine-s / "
          "run | accuracy |\n|---|---|---|---|---|---|---|---|---|---|\n";
    const BurstyPoint* floor = nullptr;
    for (const auto& p : r.points)
      if (p.workload == name && p.arm == "floor") floor = &p;
    for (const auto& p : r.points) {
      if (p.workload != name) continue;
      md << "| " << p.arm << " | " << fixed(p.mean_s) << " ± " << fixed(p.sd_s) << " | "
         << (floor && floor->mean_s > 0 ? fixed(p.mean_s / floor->mean_s, 3) : "–") << " |";
      for (const double m : p.phase_mean_s)
        md << ' ' << fixed(m) << " |";
      md << ' ' << fixed(p.fills_issued) << " | " << fixed(p.wasted_engine_s) << " | "
         << fixed(p.accuracy, 3)
         << (p.failures ? ", " + std::to_string(p.failures) + " failed" : "") << " |\n";
    }
    for (const auto& p : r.points)
      if (p.workload == name && p.failures)
        md << "\n"
           << p.arm << ": " << p.failures << " run(s) failed; the first: " << p.first_failure
           << "\n";
  }
  return md.str();
}

}  // namespace dynrt::bench

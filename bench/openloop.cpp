#include "bench/openloop.hpp"

#include "actors/runtime.hpp"
#include "actors/time.hpp"
#include "bench/cell.hpp"
#include "bench/driver.hpp"
#include "bench/sim_world.hpp"
#include "dsl/lint.hpp"
#include "dsl/report.hpp"
#include "engines/sim/engine.hpp"
#include "engines/sim/profiles.hpp"
#include "engines/sim/text.hpp"
#include "engines/tools/corpus.hpp"
#include "runtime/endpoints.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

namespace dynrt::bench {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

const std::vector<std::string>& bench_workloads() {
  static const std::vector<std::string> w = {"routing", "react", "subagent", "hci"};
  return w;
}

const std::vector<std::string>& bench_arms() {
  static const std::vector<std::string> a = {"floor",   "c1-only", "c2-only", "full",   "instcache",
                                             "helium+", "spagent", "dsp",     "static", "always"};
  return a;
}

const std::vector<std::string>& ablation_arms() {
  static const std::vector<std::string> a = {
      "floor", "full",   "priced-generation", "priced-fills", "always", "p=0.3", "p=0.5", "p=0.7",
      "p=0.9", "p=0.999"};
  return a;
}

std::vector<double> default_rates(const std::string& workload) {
  if (workload == "hci") return {0.3, 0.8};
  return {0.12, 0.8};
}

namespace detail {

// -- arms ---------------------------------------------------------------------------------------

enum class HarnessCache { none, whole_request, per_stage };

struct Arm {
  bool reuse = false;
  bool fills = false;
  int fanout = -1;
  int fill_depth = 0;
  bool private_fills = false;
  admission::AdmissionPolicy policy = admission::AdmissionPolicy::priced;
  double fixed_threshold = 0.5;  // threshold policies: the p a candidate needs
  HarnessCache cache = HarnessCache::none;
};

Arm arm_of(const std::string& name) {
  Arm a;
  if (name == "c1-only") a.reuse = true;
  if (name == "c2-only") a.fills = true;
  if (name == "full" || name == "static" || name == "always") a.reuse = a.fills = true;
  if (name == "static") a.policy = admission::AdmissionPolicy::fixed_load;
  if (name == "always") a.policy = admission::AdmissionPolicy::always;
  if (name == "instcache") a.cache = HarnessCache::whole_request;
  if (name == "helium+") a.cache = HarnessCache::per_stage;
  // The ablation's arms: full dynrt with one gate priced and the other open, or with a fixed
  // threshold in place of Action 1 and Action 0 open ("p=0.9").
  if (name == "priced-generation" || name == "priced-fills" || name.rfind("p=", 0) == 0)
    a.reuse = a.fills = true;
  if (name == "priced-generation") a.policy = admission::AdmissionPolicy::priced_generation;
  if (name == "priced-fills") a.policy = admission::AdmissionPolicy::priced_fills;
  if (name.rfind("p=", 0) == 0) {
    a.policy = admission::AdmissionPolicy::threshold;
    a.fixed_threshold = std::strtod(name.c_str() + 2, nullptr);
  }
  if (name == "spagent") {
    a.fills = a.private_fills = true;
    a.fanout = 1;      // the next action only, whatever it is ...
    a.fill_depth = 0;  // ... model stages included, down its whole chain
    a.policy = admission::AdmissionPolicy::threshold;
  }
  if (name == "dsp") {
    a.fills = a.private_fills = true;
    a.fanout = 1;      // one speculative plan ...
    a.fill_depth = 0;  // ... as deep as the chain goes, when it is worth its cost
    a.policy = admission::AdmissionPolicy::unpriced;
  }
  return a;
}

bool is_dynrt_arm(const std::string& arm) {
  return arm == "c1-only" || arm == "c2-only" || arm == "full" || arm == "static" ||
         arm == "always";
}

// -- statistics ---------------------------------------------------------------------------------

double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

void tally_runs(const CellContext& cx, const std::vector<double>& latency,
                const std::vector<std::string>& errors, const Bodies& bodies, CellResult& res) {
  const std::size_t n = latency.size();
  std::vector<double> ok;
  std::size_t accurate = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (latency[i] >= 0) {
      if (i >= cx.measure_from && i < cx.measure_to) ok.push_back(latency[i]);
      ++res.completed;
      if (cx.floor_bodies && i < cx.floor_bodies->size() && (*cx.floor_bodies)[i] == bodies[i])
        ++accurate;
    } else {
      ++res.failures;
      if (res.first_failure.empty())
        res.first_failure = errors[i].empty() ? "the run never finished" : errors[i];
    }
  }
  res.mean_s = mean(ok);
  res.p50_s = percentile(ok, 50);
  res.p99_s = percentile(ok, 99);
  res.accuracy =
      cx.floor_bodies && n ? static_cast<double>(accurate) / static_cast<double>(n) : 1.0;
}

// Nearest rank.
double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

double seconds(Duration d) {
  return std::chrono::duration<double>(d).count();
}

// Adds `calls` and `seconds` to the row of (stage, served), appended the first time.
// `prompt_tokens` is a total too (the calls' prompt tokens) until per_run() divides it.
void add_stage_time(std::vector<StageTime>& rows, const std::string& stage,
                    const std::string& served, double calls, double seconds, double prompt_tokens) {
  auto it = std::find_if(rows.begin(), rows.end(), [&](const StageTime& r) {
    return r.stage == stage && r.served == served;
  });
  if (it == rows.end()) it = rows.insert(rows.end(), StageTime{stage, served, 0, 0, 0, 0});
  it->calls += calls;
  it->per_run_s += seconds;
  it->prompt_tokens += prompt_tokens;
}

// Totals into means over n (runs or cells): calls and seconds per run, seconds and prompt
// tokens per call.
std::vector<StageTime> per_run(std::vector<StageTime> rows, double n) {
  if (n <= 0) return {};
  for (StageTime& r : rows) {
    r.prompt_tokens = r.calls > 0 ? r.prompt_tokens / r.calls : 0;
    r.calls /= n;
    r.per_run_s /= n;
    r.mean_s = r.calls > 0 ? r.per_run_s / r.calls : 0;
  }
  return rows;
}

void StageTally::add(const RunResult& run) {
  ++runs_;
  for (const Step& step : run.steps) {
    const bool model = step.endpoint.rfind(kToolPrefix, 0) != 0;
    add_stage_time(
        sums_, step.stage, std::string(to_string(step.reply.served)), 1, seconds(step.latency),
        model
            ? static_cast<double>(engines::sim::estimate_prompt_tokens(step.endpoint, step.request))
            : 0.0);
  }
}

std::vector<StageTime> StageTally::stage_times() const {
  return per_run(sums_, static_cast<double>(runs_));
}

// One run's engine-driven resolution windows over the downstream work they hold up: the answer
// latency of each model stage that decides, against the stages after it in its repetition.
// -1 when the run has no such window.
double window_over_downstream(const dsl::TemplateGraph& g, const RunResult& rr) {
  double window = 0, downstream = 0;
  std::size_t rep = 0;
  bool after_window = false;
  for (const Step& s : rr.steps) {
    if (s.repetition != rep) {
      rep = s.repetition;
      after_window = false;
    }
    const dsl::Stage* stage = g.stage(s.stage);
    const double t = std::chrono::duration<double>(s.latency).count();
    if (stage && stage->kind == dsl::StageKind::model && stage->decides != dsl::kNoId) {
      window += t;
      after_window = true;
    } else if (after_window) {
      downstream += t;
    }
  }
  return window > 0 && downstream > 0 ? window / downstream : -1;
}

// -- traces -------------------------------------------------------------------------------------

// Poisson arrivals at `rate` per simulated second, the same for every arm.
std::vector<double> arrivals(std::uint64_t seed, double rate, std::size_t n) {
  std::mt19937_64 rng(seed * 1'000'003 + static_cast<std::uint64_t>(rate * 1000));
  std::exponential_distribution<double> gap(rate);
  std::vector<double> out;
  double t = 0;
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(t);
    t += gap(rng);
  }
  return out;
}

// Sub-Agent: the entity pool for which about 26% of `fresh_runs` fresh runs' sub-tasks
// (sub-agent, entity) already occurred in an earlier one (paper section 2.2), given the
// sub-agent skew.
std::size_t subagent_pool(double fresh_runs) {
  const auto runs = static_cast<std::size_t>(std::max(1.0, std::round(fresh_runs)));
  const double p0 = 0.9;  // the workload's top sub-agent share at full predictability
  const double q = p0 * p0 + (1 - p0) * (1 - p0) / 3;  // two runs pick the same sub-agent
  std::size_t best = 1;
  double best_gap = 1e9;
  for (std::size_t e = 1; e <= 4096; ++e) {
    double sum = 0;
    for (std::size_t i = 0; i < runs; ++i)
      sum += 1 - std::pow(1 - q / static_cast<double>(e), static_cast<double>(i));
    const double gap = std::abs(sum / static_cast<double>(runs) - 0.26);
    if (gap < best_gap) {
      best_gap = gap;
      best = e;
    }
  }
  return best;
}

std::vector<std::string> linked_entities(const Workload& w, const std::string& entity) {
  std::vector<std::string> out;
  for (const auto& rec : w.corpus)
    if (rec["key"] == "corpus:" + entity) {
      const std::string text = rec["text"];
      std::size_t pos = 0;
      while ((pos = text.find("[[", pos)) != std::string::npos) {
        const auto end = text.find("]]", pos);
        if (end == std::string::npos) break;
        out.push_back(text.substr(pos + 2, end - pos - 2));
        pos = end + 2;
      }
    }
  return out;
}

// What the generated trace actually has, next to the paper's figure for it.
json trace_statistics(const Workload& w) {
  json s = {{"runs", w.runs.size()}};
  std::size_t repeats = 0;
  for (const auto& r : w.runs)
    repeats += r.popular >= 0 ? 1 : 0;
  s["exact_repeat_share"] = w.runs.empty() ? 0.0 : static_cast<double>(repeats) / w.runs.size();
  if (w.workflow == "routing" || w.workflow == "subagent") {
    std::map<std::string, int> freq;
    std::size_t picks = 0;
    for (const auto& r : w.runs)
      for (const auto& p : r.picks) {
        ++freq[p];
        ++picks;
      }
    int top = 0;
    for (const auto& [k, v] : freq)
      top = std::max(top, v);
    s["top1_coverage"] = picks ? static_cast<double>(top) / picks : 0.0;
    s["paper_top1_coverage"] = "0.59-0.94 (section 2.2)";
    s["candidates_per_branch"] = 3;  // both templates' decisions propose at most 3
  }
  if (w.workflow == "react") {
    std::size_t hops = 0, linked = 0, retrievals = 0, recurring = 0;
    for (const auto& r : w.runs) {
      std::set<std::string> seen;
      for (std::size_t h = 0; h < r.picks.size(); ++h) {
        ++retrievals;
        if (seen.count(r.picks[h])) ++recurring;
        seen.insert(r.picks[h]);
        if (h == 0) continue;
        ++hops;
        const auto links = linked_entities(w, r.picks[h - 1]);
        if (std::find(links.begin(), links.end(), r.picks[h]) != links.end()) ++linked;
      }
    }
    s["next_entity_in_top3"] = hops ? static_cast<double>(linked) / hops : 0.0;
    s["paper_next_entity_in_top3"] = 0.61;
    s["retrievals_recurring_in_run"] =
        retrievals ? static_cast<double>(recurring) / retrievals : 0.0;
    s["paper_retrievals_recurring_in_run"] = 0.12;
  }
  if (w.workflow == "subagent") {
    std::set<std::string> seen;
    std::size_t fresh = 0, recurring = 0;
    for (const auto& r : w.runs) {
      const std::string task = r.picks.empty() ? "" : r.picks[0] + ":" + r.entity;
      if (r.popular < 0) {
        ++fresh;
        if (seen.count(task)) ++recurring;
      }
      seen.insert(task);
    }
    s["subtasks_recurring_across_runs"] = fresh ? static_cast<double>(recurring) / fresh : 0.0;
    s["paper_subtasks_recurring_across_runs"] = 0.26;
  }
  if (w.workflow == "hci") {
    std::size_t top = 0;
    std::vector<double> think;
    for (const auto& r : w.runs) {
      if (!r.picks.empty() && r.picks[0].rfind("book a flight", 0) == 0) ++top;
      think.push_back(r.think_s);
    }
    s["top_offer_picked"] = w.runs.empty() ? 0.0 : static_cast<double>(top) / w.runs.size();
    s["paper_top_offer_picked"] = 29.0 / 30;
    s["think_s_p50"] = percentile(think, 50);
    s["paper_think_s_p50"] = 2.7;
  }
  return s;
}

void write_trace(const std::filesystem::path& dir, const Workload& w,
                 const std::vector<std::pair<double, std::vector<double>>>& schedules) {
  std::filesystem::create_directories(dir);
  std::ofstream out(dir / (w.workflow + ".jsonl"));
  for (std::size_t i = 0; i < w.runs.size(); ++i) {
    const Run& r = w.runs[i];
    json line = {{"workflow_id", r.workflow_id}, {"input", r.input}, {"picks", r.picks}};
    if (!r.entity.empty()) line["entity"] = r.entity;
    if (r.think_s > 0) line["think_s"] = r.think_s;
    if (r.popular >= 0) line["repeats_popular"] = r.popular;
    json at = json::object();
    for (const auto& [rate, times] : schedules) {
      std::ostringstream key;
      key << rate;
      at[key.str()] = times[i];
    }
    line["arrival_s"] = at;
    out << line.dump() << '\n';
  }
}

// -- one cell -------------------------------------------------------------------------------------

std::string cache_key(const Step& s) {
  return s.endpoint + '\n' + s.request.dump();
}

std::string whole_request_key(const Run& r) {
  std::string k = r.input;
  for (const auto& p : r.picks)
    k += '\x1f' + p;
  return k;
}

class ProgressBar {
 public:
  using Style = BenchOptions::ProgressStyle;
  ProgressBar(std::ostream* out, Style style, std::string label, std::size_t total)
      : out_(out), style_(style), label_(std::move(label)), total_(total) {}
  void show(std::size_t done) {
    if (!out_ || style_ != Style::bar || done == shown_) return;
    shown_ = done;
    const std::size_t width = 24;
    const std::size_t filled = total_ ? done * width / total_ : width;
    *out_ << '\r' << std::left << std::setw(34) << label_ << " [" << std::string(filled, '#')
          << std::string(width - filled, '.') << "] " << done << '/' << total_ << std::flush;
  }
  void finish(const std::string& summary) {
    if (!out_) return;
    if (style_ == Style::lines) {
      *out_ << std::left << std::setw(34) << label_ << ' ' << total_ << '/' << total_ << "  "
            << summary << '\n'
            << std::flush;
      return;
    }
    shown_ = SIZE_MAX;
    show(total_);
    *out_ << "  " << summary << '\n' << std::flush;
  }

 private:
  std::ostream* out_;
  Style style_;
  std::string label_;
  std::size_t total_;
  std::size_t shown_ = SIZE_MAX;
};

CellResult run_cell(const CellContext& cx) {
  const BenchOptions& o = *cx.options;
  const Trace& t = *cx.trace;
  const Workload& w = *t.workload;
  const dsl::TemplateGraph& g = *t.graph;
  const Arm arm = arm_of(cx.arm);
  const auto wall_start = Clock::now();

  CellResult res;
  res.workload = w.workflow;
  res.rate = t.rate;
  res.arm = cx.arm;
  res.requests = w.runs.size();

  auto profile = engines::sim::sim_profile(o.profile);
  if (!profile) {
    res.first_failure = profile.error().message;
    res.failures = res.requests;
    return res;
  }
  engines::sim::SimEngineOptions eo;
  eo.stepped = true;
  eo.workers = profile->workers;
  engines::sim::SimParams params = profile->params;
  params.interference_scale = o.interference_scale;
  auto engine = std::make_shared<engines::sim::SimEngine>(params, w.script, eo);
  auto time = std::make_shared<ManualTime>();
  SimWorld world(time, engine);
  auto corpus = engines::Corpus::from_json(w.corpus);
  if (!corpus.ok()) {
    res.first_failure = "corpus: " + corpus.error().message;
    res.failures = res.requests;
    return res;
  }
  for (const auto& [name, key] : w.tools)
    (*corpus)->add_tool(name, {engines::Corpus::Kind::lookup, key});
  RuntimeConfig cfg;
  cfg.engines.push_back({"sim", engine, {}});
  cfg.tools = *corpus;
  cfg.template_paths = {o.templates};
  cfg.reuse = arm.reuse;
  cfg.fills = arm.fills;
  cfg.fanout = cx.fanout >= 0 ? cx.fanout : arm.fanout;
  cfg.fill_depth = arm.fill_depth;
  cfg.private_fills = arm.private_fills;
  cfg.emission = o.emission;
  cfg.admission.policy = arm.policy;
  cfg.admission.fixed_threshold = arm.fixed_threshold;
  cfg.admission.seed = o.seed;
  // Every time rule runs in simulated time as configured: the envelope's 5 s horizon, the
  // 30 s settle deadline, the templates' wait_ms and ttl_s.
  cfg.stepped = true;
  cfg.time = time;
  cfg.threads = 1;
  cfg.explain_runs = 0;  // nobody reads a cell's run journals
  auto created = Runtime::create(cfg);
  if (!created.ok()) {
    res.first_failure = created.error().message;
    res.failures = res.requests;
    return res;
  }
  std::unique_ptr<Runtime> rt = std::move(*created);
  world.attach(rt.get());

  // Harness-side caches of the baselines (one thread: no locks).
  std::map<std::string, std::vector<Reply>> whole;  // instcache: every step's reply, by run
  std::map<std::string, Reply> stage_cache;         // helium+: by exact body
  // helium+: identical calls in flight wait for the first one's answer.
  std::map<std::string, std::vector<std::function<void(Reply)>>> stage_waiters;
  std::size_t harness_hits = 0;
  auto finish_stage = [&](const std::string& key, const Reply& reply) {
    const auto it = stage_waiters.find(key);
    if (it == stage_waiters.end()) return;
    if (reply.ok() && reply.status == 200) stage_cache.emplace(key, reply);
    auto waiters = std::move(it->second);
    stage_waiters.erase(it);
    for (auto& answer : waiters) {
      Reply r = reply;
      if (r.ok() && r.status == 200) {
        ++harness_hits;
        r.served = Served::cache;
      }
      answer(std::move(r));
    }
  };

  // One run as a harness drives it, with the arm's harness cache in front of the Runtime;
  // `done` gets its result and, for HCI, the user turn's latency.
  auto drive_one = [&](const Run& run, std::function<void(RunResult, double user_turn_s)> done) {
    struct State {
      std::optional<std::vector<Reply>> whole;
      std::size_t step_index = 0;
      std::vector<std::string> owned;  // helium+: calls this run executes for the waiters
      double user_turn_s = 0;
    };
    auto st = std::make_shared<State>();
    if (arm.cache == HarnessCache::whole_request)
      if (const auto it = whole.find(whole_request_key(run)); it != whole.end())
        st->whole = it->second;
    AsyncDriveOptions d;
    d.clock = time.get();
    d.on_user = [&world](const Run& r, std::size_t, std::function<void()> resume) {
      world.at(r.think_s, std::move(resume));
    };
    d.intercept = [&, st](Step& s, std::function<void(Reply)> answer) -> bool {
      const std::size_t j = st->step_index++;
      if (st->whole && j < st->whole->size()) {
        ++harness_hits;
        Reply r = (*st->whole)[j];
        r.served = Served::cache;
        answer(std::move(r));
        return true;
      }
      if (arm.cache != HarnessCache::per_stage) return false;
      const dsl::Stage* stage = g.stage(s.stage);
      if (!stage || !stage->speculable || !stage->writes.empty()) return false;
      const std::string key = cache_key(s);
      if (const auto it = stage_cache.find(key); it != stage_cache.end()) {
        ++harness_hits;
        Reply r = it->second;
        r.served = Served::cache;
        answer(std::move(r));
        return true;
      }
      const auto [it, first] = stage_waiters.try_emplace(key);
      if (first) {
        st->owned.push_back(key);
        return false;
      }
      it->second.push_back(std::move(answer));
      return true;
    };
    d.after_step = [&, st](const Step& s) {
      if (s.stage == "act") st->user_turn_s = seconds(s.latency);
      if (arm.cache != HarnessCache::per_stage) return;
      const std::string key = cache_key(s);
      if (std::find(st->owned.begin(), st->owned.end(), key) != st->owned.end())
        finish_stage(key, s.reply);
    };
    drive_async(*rt, g, run, std::move(d),
                [&, st, run_copy = run, done = std::move(done)](RunResult rr) {
                  // A call this run owned but that failed: its waiters get the failure.
                  Reply failed;
                  failed.status = 502;
                  failed.error = rr.error.empty() ? "not executed" : rr.error;
                  for (const auto& key : st->owned)
                    finish_stage(key, failed);
                  if (arm.cache == HarnessCache::whole_request && !st->whole && rr.ok()) {
                    std::vector<Reply> replies;
                    for (const auto& s : rr.steps)
                      replies.push_back(s.reply);
                    whole.emplace(whole_request_key(run_copy), std::move(replies));
                  }
                  done(std::move(rr), st->user_turn_s);
                });
  };

  // InstCache: before the trace, the predicted requests (the more popular half of the popular
  // ones) are executed and cached, one after another; untimed.
  if (arm.cache == HarnessCache::whole_request) {
    const std::size_t predicted = (w.popular.size() + 1) / 2;
    for (std::size_t k = 0; k < predicted; ++k) {
      Run warm = w.popular[k];
      warm.workflow_id = w.workflow + "-predicted-" + std::to_string(k);
      warm.think_s = 0;
      bool warmed = false;
      drive_one(warm, [&](RunResult, double) { warmed = true; });
      world.run_until([&] { return warmed; });
    }
  }
  harness_hits = 0;

  // Open loop: each run starts at its arrival time, whatever the others are doing.
  const std::size_t n = w.runs.size();
  std::vector<double> latency(n, -1);
  std::vector<double> window_ratio(n, -1);
  std::vector<std::string> errors(n);
  Bodies bodies(n);
  std::size_t done = 0;
  std::vector<double> finished_at(n, -1);
  StageTally stage_tally;
  ProgressBar bar(o.progress, o.progress_style, cx.label, n);
  const double start_s = world.now_s();
  const auto counters_at_start = engine->counters();
  for (std::size_t i = 0; i < n; ++i) {
    world.at(t.arrival_s[i], [&, i] {
      const double arrived = world.now_s();
      drive_one(w.runs[i], [&, i, arrived](RunResult rr, double user_turn_s) {
        if (rr.ok()) {
          if (i >= cx.measure_from && i < cx.measure_to) stage_tally.add(rr);
          if (cx.finished_at_out) finished_at[i] = world.now_s() - start_s;
          latency[i] = w.workflow == "hci" ? user_turn_s : world.now_s() - arrived;
          window_ratio[i] = window_over_downstream(g, rr);
          for (const auto& s : rr.steps)
            bodies[i].push_back(s.reply.body);
        } else {
          errors[i] = rr.error;
        }
        bar.show(++done);
      });
    });
  }
  if (!world.run_until([&] { return done == n; }))
    for (std::size_t i = 0; i < n; ++i)
      if (latency[i] < 0 && errors[i].empty()) errors[i] = "the run never finished";
  res.wall_s = std::chrono::duration<double>(Clock::now() - wall_start).count();
  const double span_s = world.now_s() - start_s;

  const RuntimeStats st = rt->stats();
  rt->shutdown();
  engine->drain();
  const auto counters = engine->counters();

  tally_runs(cx, latency, errors, bodies, res);
  res.stages = stage_tally.stage_times();
  std::vector<double> ratios;
  for (const double r : window_ratio)
    if (r >= 0) ratios.push_back(r);
  if (!ratios.empty()) res.window_over_downstream = percentile(ratios, 50);
  const double per = n ? 1.0 / static_cast<double>(n) : 0;
  res.fills_issued = static_cast<double>(st.fills_issued) * per;
  res.fills_consumed = static_cast<double>(st.fills_consumed) * per;
  res.fills_discarded = static_cast<double>(st.shadows_discarded + st.fills_cancelled) * per;
  res.speculative_engine_s = seconds(counters.background_busy) * per;
  // How full the KV pools were over the trace, and how often they, not the slots, held
  // requests back (engines/sim/model.hpp).
  if (const engines::LoadSnapshot pool = engine->load(); span_s > 0 && pool.kv_total > 0) {
    res.kv_use = (counters.kv_token_s - counters_at_start.kv_token_s) / (pool.kv_total * span_s);
    res.kv_wait_share = seconds(counters.kv_wait - counters_at_start.kv_wait) /
                        (std::max(1, pool.batches) * span_s);
  }
  // The simulated engine knows the slot time of each cancelled request exactly (from its
  // admission, without the queue): it replaces the runtime's wall-time measure of them.
  res.wasted_engine_s = std::min(
      res.speculative_engine_s,
      ((st.engine_ms_wasted - st.engine_ms_unfinished) / 1000.0 + seconds(counters.wasted)) * per);
  res.served_fill = static_cast<double>(st.served_fill) * per;
  res.waits = static_cast<double>(st.waits) * per;
  res.wait_timeouts = static_cast<double>(st.wait_timeouts) * per;
  res.hedge_fills = static_cast<double>(st.hedge_fills) * per;
  res.requeued = static_cast<double>(st.fills_requeued) * per;
  res.fills_outrun = static_cast<double>(st.fills_outrun) * per;
  res.draft_samples = static_cast<double>(st.draft_samples) * per;
  res.drafting_engine_s = st.engine_ms_drafting / 1000.0 * per;
  const auto& gate = st.admission;
  if (gate.fills_admitted > 0) {
    const double admitted = static_cast<double>(gate.fills_admitted);
    res.fill_p = gate.admitted_p / admitted;
    res.fill_used_share = static_cast<double>(gate.fills_used) / admitted;
  }
  res.interference_fit = gate.interference_scale;
  if (const auto decided = gate.branches_opened + gate.branches_closed; decided > 0) {
    res.gate_open_share = static_cast<double>(gate.branches_opened) / static_cast<double>(decided);
    res.gate_audit_share = gate.branches_opened ? static_cast<double>(gate.generation_audits) /
                                                      static_cast<double>(gate.branches_opened)
                                                : 0;
  }
  // Harness-cache hits during the trace (InstCache's warm-up is not counted: it ran before).
  res.served_cache = static_cast<double>(st.served_cache + harness_hits) * per;
  if (cx.bodies_out) *cx.bodies_out = std::move(bodies);
  if (cx.finished_at_out) *cx.finished_at_out = std::move(finished_at);
  if (cx.latency_out) *cx.latency_out = latency;
  std::ostringstream summary;
  summary << std::fixed << std::setprecision(2) << "mean " << res.mean_s << " s";
  if (res.failures) summary << ", " << res.failures << " failed";
  bar.finish(summary.str());
  return res;
}

Graphs load_graphs(const std::string& templates, const std::vector<std::string>& workloads,
                   const std::string& profile) {
  Graphs out;
  if (auto p = engines::sim::sim_profile(profile); !p) {
    out.error = p.error().message;
    return out;
  }
  out.report = dsl::lint_paths({templates});
  if (!out.report.usage_errors.empty()) {
    out.error = out.report.usage_errors.front();
    return out;
  }
  // The runtime loads a folder only when none of its templates has an error (as dynrt serve
  // does): say so here, with the findings, rather than let every run of every cell fail.
  if (out.report.count(dsl::Severity::error) > 0) {
    std::string findings = dsl::format_text(out.report);
    while (!findings.empty() && findings.back() == '\n')
      findings.pop_back();
    out.error = "the templates in " + templates + " have errors; fix them (dynrt lint " +
                templates + ") and run again:\n" + findings;
    return out;
  }
  for (const auto* g : out.report.graphs())
    out.by_workload[g->workflow] = g;
  for (const auto& name : workloads) {
    const auto g = out.by_workload.find(name);
    if (g == out.by_workload.end()) {
      out.error = "no template for workload \"" + name + "\" in " + templates;
      return out;
    }
    if (const auto why = trace_cannot_drive(*g->second)) {
      out.error = g->second->source_path + ": " + *why;
      return out;
    }
  }
  return out;
}

std::vector<std::string> arms_with_floor(const std::vector<std::string>& asked) {
  std::vector<std::string> arms = {"floor"};
  for (const auto& a : asked.empty() ? bench_arms() : asked)
    if (a != "floor") arms.push_back(a);
  return arms;
}

Workload bench_workload(const dsl::TemplateGraph& graph, std::uint64_t seed, std::size_t runs,
                        double predictability, double repeat_rate, bool selection_first,
                        Contexts contexts) {
  WorkloadOptions wo;
  wo.selection_first = selection_first;
  wo.contexts = contexts;
  wo.seed = seed;
  wo.runs = runs;
  wo.predictability = predictability;
  wo.repeat_rate = repeat_rate;
  // Fresh runs recur against earlier fresh runs and the popular requests' sub-tasks.
  const double requests = static_cast<double>(runs);
  const double pool = repeat_rate > 0 ? std::max(2.0, std::floor(requests / 8.0)) : 0.0;
  wo.subagent_entities = subagent_pool(requests * (1 - repeat_rate) + pool);
  return make_workload(graph, wo);
}

void set_ratio(CellResult& c, const CellResult& floor) {
  c.ratio_to_floor = floor.mean_s > 0 ? c.mean_s / floor.mean_s : 0;
}

std::string rate_label(double r) {
  std::ostringstream s;
  s << r;
  return s.str();
}

}  // namespace detail

using namespace detail;

json StageTime::to_json() const {
  return {{"stage", stage},   {"served", served},       {"calls_per_run", calls},
          {"mean_s", mean_s}, {"s_per_run", per_run_s}, {"prompt_tokens", prompt_tokens}};
}

json stage_times_json(const std::vector<StageTime>& stages) {
  json out = json::array();
  for (const auto& s : stages)
    out.push_back(s.to_json());
  return out;
}

std::vector<StageTime> mean_stage_times(const std::vector<std::vector<StageTime>>& cells) {
  std::vector<StageTime> sums;
  for (const auto& cell : cells)
    for (const StageTime& t : cell)
      add_stage_time(sums, t.stage, t.served, t.calls, t.per_run_s, t.prompt_tokens * t.calls);
  return per_run(std::move(sums), static_cast<double>(cells.size()));
}

json CellResult::to_json() const {
  return {{"workload", workload},
          {"rate", rate},
          {"arm", arm},
          {"requests", requests},
          {"completed", completed},
          {"failures", failures},
          {"mean_s", mean_s},
          {"p50_s", p50_s},
          {"p99_s", p99_s},
          {"ratio_to_floor", ratio_to_floor},
          {"accuracy", accuracy},
          {"fills_issued_per_request", fills_issued},
          {"fills_consumed_per_request", fills_consumed},
          {"fills_discarded_per_request", fills_discarded},
          {"speculative_engine_s_per_request", speculative_engine_s},
          {"wasted_engine_s_per_request", wasted_engine_s},
          {"served_fill_per_request", served_fill},
          {"served_cache_per_request", served_cache},
          {"waits_per_request", waits},
          {"wait_timeouts_per_request", wait_timeouts},
          {"hedge_fills_per_request", hedge_fills},
          {"requeued_per_request", requeued},
          {"gate_open_share", gate_open_share},
          {"gate_audit_share", gate_audit_share},
          {"fill_p", fill_p},
          {"fill_used_share", fill_used_share},
          {"interference_fit", interference_fit},
          {"window_over_downstream", window_over_downstream},
          {"stages", stage_times_json(stages)},
          {"wall_s", wall_s}};
}

namespace {

// The floor, then full dynrt against it, on one trace (the sweeps' pairs).
std::pair<CellResult, CellResult> floor_and_full(const BenchOptions& o, const Trace& t,
                                                 const std::string& label) {
  Bodies floor_bodies;
  CellContext cx;
  cx.options = &o;
  cx.trace = &t;
  cx.arm = "floor";
  cx.bodies_out = &floor_bodies;
  cx.label = label + " floor";
  CellResult floor = run_cell(cx);
  set_ratio(floor, floor);
  cx.arm = "full";
  cx.bodies_out = nullptr;
  cx.floor_bodies = &floor_bodies;
  cx.label = label + " full";
  CellResult full = run_cell(cx);
  set_ratio(full, floor);
  return {floor, full};
}

}  // namespace

BenchResult run_bench(const BenchOptions& o) {
  BenchResult out;
  Graphs loaded = load_graphs(o.templates, o.workloads, o.profile);
  if (!loaded.error.empty()) {
    out.error = loaded.error;
    return out;
  }
  auto& graphs = loaded.by_workload;
  const std::vector<std::string> arms = arms_with_floor(o.arms);
  const std::filesystem::path dir = o.out_dir;

  auto workload_for = [&](const std::string& name, double predictability, double repeat_rate) {
    return bench_workload(*graphs[name], o.seed, o.requests, predictability, repeat_rate);
  };

  for (const auto& name : o.workloads) {
    const Workload w = workload_for(name, 1.0, o.repeat_rate);
    out.traces[name] = trace_statistics(w);
    const std::vector<double> rates = o.rates.empty() ? default_rates(name) : o.rates;
    std::vector<std::pair<double, std::vector<double>>> schedules;
    for (const double rate : rates)
      schedules.emplace_back(rate, arrivals(o.seed, rate, w.runs.size()));
    if (!o.out_dir.empty()) write_trace(dir / "traces", w, schedules);
    for (const auto& [rate, times] : schedules) {
      Trace t{graphs[name], &w, times, rate};
      Bodies floor_bodies;
      CellResult floor;
      for (const auto& arm : arms) {
        CellContext cx;
        cx.options = &o;
        cx.trace = &t;
        cx.arm = arm;
        cx.floor_bodies = arm == "floor" ? nullptr : &floor_bodies;
        cx.bodies_out = arm == "floor" ? &floor_bodies : nullptr;
        cx.label = name + " λ=" + rate_label(rate) + " " + arm;
        CellResult c = run_cell(cx);
        if (arm == "floor") floor = c;
        // What the trace's windows are, measured on the floor at the first rate (F3: 0.36-0.77).
        if (arm == "floor" && rate == schedules.front().first && c.window_over_downstream >= 0) {
          out.traces[name]["window_over_downstream"] = c.window_over_downstream;
          out.traces[name]["paper_window_over_downstream"] = "0.36-0.77 (F3)";
        }
        set_ratio(c, floor);
        out.cells.push_back(std::move(c));
      }
    }
  }
  if (!o.sweeps) return out;

  // Figure 9a: fanout K on Routing at low load (full dynrt, the standard trace).
  if (graphs.count("routing")) {
    const Workload w = workload_for("routing", 1.0, o.repeat_rate);
    const double rate = default_rates("routing").front();
    Trace t{graphs["routing"], &w, arrivals(o.seed, rate, w.runs.size()), rate};
    for (int k = 0; k <= 3; ++k) {
      CellContext cx;
      cx.options = &o;
      cx.trace = &t;
      cx.arm = "full";
      cx.fanout = k;
      cx.label = "fanout routing K=" + std::to_string(k);
      out.fanout.push_back({"routing", rate, k, run_cell(cx)});
    }
    // Figure 10a: exact-repeat rate on Routing at low load, floor against full.
    for (const double rr : {0.2, 0.4, 0.6, 0.8}) {
      const Workload wr = workload_for("routing", 1.0, rr);
      Trace tr{graphs["routing"], &wr, arrivals(o.seed, rate, wr.runs.size()), rate};
      RepeatPoint p{"routing", rate, rr, {}, {}};
      std::tie(p.floor, p.full) = floor_and_full(o, tr, "repeat " + rate_label(rr));
      out.repeat.push_back(std::move(p));
    }
  }
  // No harm: ReAct whose next entity ignores the passage (open vocabulary, unpredictable),
  // with no repeats; full dynrt must stay within 3% of the floor.
  if (graphs.count("react")) {
    const Workload w = workload_for("react", 0.0, 0.0);
    const double rate = default_rates("react").front();
    Trace t{graphs["react"], &w, arrivals(o.seed, rate, w.runs.size()), rate};
    auto [floor, full] = floor_and_full(o, t, "unpredictable react");
    out.unpredictable = {floor, full};
    out.traces["react-unpredictable"] = trace_statistics(w);
  }
  return out;
}

json BenchResult::to_json(const BenchOptions& o) const {
  json j;
  j["seed"] = o.seed;
  j["profile"] = o.profile;
  j["interference_scale"] = o.interference_scale;
  j["requests"] = o.requests;
  j["repeat_rate"] = o.repeat_rate;
  j["records"] = json::array();
  for (const auto& c : cells)
    j["records"].push_back(c.to_json());
  j["traces"] = traces;
  json sweeps = json::object();
  if (!fanout.empty()) {
    sweeps["fanout"] = json::array();
    for (const auto& f : fanout) {
      json r = f.cell.to_json();
      r["k"] = f.k;
      r["consumed_engine_s_per_request"] =
          std::max(0.0, f.cell.speculative_engine_s - f.cell.wasted_engine_s);
      r["discarded_share"] = f.cell.speculative_engine_s > 0
                                 ? f.cell.wasted_engine_s / f.cell.speculative_engine_s
                                 : 0.0;
      sweeps["fanout"].push_back(r);
    }
  }
  if (!repeat.empty()) {
    sweeps["repeat"] = json::array();
    for (const auto& p : repeat)
      sweeps["repeat"].push_back(
          {{"workload", p.workload},
           {"rate", p.rate},
           {"repeat_rate", p.repeat_rate},
           {"floor_mean_s", p.floor.mean_s},
           {"full_mean_s", p.full.mean_s},
           {"speedup", p.full.mean_s > 0 ? p.floor.mean_s / p.full.mean_s : 0},
           {"accuracy", p.full.accuracy}});
  }
  if (!unpredictable.empty()) {
    sweeps["unpredictable"] = json::array();
    for (const auto& c : unpredictable)
      sweeps["unpredictable"].push_back(c.to_json());
  }
  j["sweeps"] = sweeps;
  return j;
}

namespace {

std::string fixed(double v, int digits = 2) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

// Table 2 (4 GPUs, the smaller of the two figures where they differ): C2-only's reduction.
double table2_reduction(const std::string& workload) {
  if (workload == "routing") return 18.6;
  if (workload == "react") return 8.5;
  if (workload == "subagent") return 34.0;
  if (workload == "hci") return 46.6;
  return 0;
}

const CellResult* find(const BenchResult& r, const std::string& w, double rate,
                       const std::string& arm) {
  for (const auto& c : r.cells)
    if (c.workload == w && c.rate == rate && c.arm == arm) return &c;
  return nullptr;
}

}  // namespace

std::string format_bench(const BenchOptions& o, const BenchResult& r) {
  std::ostringstream md;
  md << "# dynrt bench\n\nengine profile " << o.profile
     << (o.interference_scale != 1.0
             ? " (true interference " + fixed(o.interference_scale) + "× the price curves' fit)"
             : std::string())
     << ", seed " << o.seed << ", " << o.requests << " requests per cell, exact-repeat rate "
     << o.repeat_rate << "; run in simulated time, latencies in simulated seconds.\n";
  std::vector<std::string> workloads;
  for (const auto& c : r.cells)
    if (std::find(workloads.begin(), workloads.end(), c.workload) == workloads.end())
      workloads.push_back(c.workload);
  for (const auto& w : workloads) {
    md << "\n## " << w << (w == "hci" ? " (latency of the user turn after the think gap)" : "")
       << "\n\n| rate | arm | mean s | p50 s | p99 s | × floor | accuracy | fills issued / "
          "consumed / discarded per req | spec. engine-s / req (wasted) | served fill / cache "
          "per req | gate open (audits) | failures "
          "|\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& c : r.cells) {
      if (c.workload != w) continue;
      md << "| " << c.rate << " | " << c.arm << " | " << fixed(c.mean_s) << " | " << fixed(c.p50_s)
         << " | " << fixed(c.p99_s) << " | " << fixed(c.ratio_to_floor, 3) << " | "
         << fixed(c.accuracy, 3) << " | " << fixed(c.fills_issued) << " / "
         << fixed(c.fills_consumed) << " / " << fixed(c.fills_discarded) << " | "
         << fixed(c.speculative_engine_s) << " (" << fixed(c.wasted_engine_s) << ") | "
         << fixed(c.served_fill) << " / " << fixed(c.served_cache) << " | "
         << (c.gate_open_share < 0
                 ? std::string("–")
                 : fixed(c.gate_open_share) + " (" + fixed(c.gate_audit_share) + ")")
         << " | " << c.failures << (c.first_failure.empty() ? "" : " (" + c.first_failure + ")")
         << " |\n";
    }
    if (const auto it = r.traces.find(w); it != r.traces.end())
      md << "\nTrace: `" << it->second.dump() << "`\n";
  }
  if (!r.fanout.empty()) {
    md << "\n## Fanout K (Figure 9a: Routing, full dynrt)\n\n| K | mean s | × K=0 | spec. "
          "engine-s / req | wasted | discarded share |\n|---|---|---|---|---|---|\n";
    const double base = r.fanout.front().cell.mean_s;
    for (const auto& f : r.fanout)
      md << "| " << f.k << " | " << fixed(f.cell.mean_s) << " | "
         << fixed(base > 0 ? f.cell.mean_s / base : 0, 3) << " | "
         << fixed(f.cell.speculative_engine_s) << " | " << fixed(f.cell.wasted_engine_s) << " | "
         << fixed(f.cell.speculative_engine_s > 0
                      ? f.cell.wasted_engine_s / f.cell.speculative_engine_s
                      : 0,
                  3)
         << " |\n";
  }
  if (!r.repeat.empty()) {
    md << "\n## Exact-repeat rate (Figure 10a: Routing)\n\n| repeat rate | floor mean s | full "
          "mean s | speedup | accuracy |\n|---|---|---|---|---|\n";
    for (const auto& p : r.repeat)
      md << "| " << p.repeat_rate << " | " << fixed(p.floor.mean_s) << " | " << fixed(p.full.mean_s)
         << " | " << fixed(p.full.mean_s > 0 ? p.floor.mean_s / p.full.mean_s : 0) << "× | "
         << fixed(p.full.accuracy, 3) << " |\n";
  }

  // The targets, checked.
  md << "\n## Targets\n\n| target | workload | measured | result |\n|---|---|---|---|\n";
  auto line = [&](const std::string& target, const std::string& w, const std::string& measured,
                  bool pass) {
    md << "| " << target << " | " << w << " | " << measured << " | " << (pass ? "met" : "MISSED")
       << " |\n";
  };
  for (const auto& w : workloads) {
    std::vector<double> rates;
    for (const auto& c : r.cells)
      if (c.workload == w && std::find(rates.begin(), rates.end(), c.rate) == rates.end())
        rates.push_back(c.rate);
    if (rates.empty()) continue;
    const double low = *std::min_element(rates.begin(), rates.end());
    if (const auto* full = find(r, w, low, "full"))
      line("full ≤ 0.54× floor at low load", w, fixed(full->ratio_to_floor, 3),
           full->ratio_to_floor <= 0.54);
    for (const double rate : rates) {
      const auto* full = find(r, w, rate, "full");
      if (!full) continue;
      std::string best = "full";
      double best_mean = full->mean_s;
      for (const auto& c : r.cells)
        if (c.workload == w && c.rate == rate && c.arm != "full" && c.mean_s < best_mean) {
          best_mean = c.mean_s;
          best = c.arm;
        }
      line("full lowest of all arms at λ=" + rate_label(rate), w,
           best == "full"
               ? "full " + fixed(full->mean_s) + " s"
               : best + " " + fixed(best_mean) + " s < full " + fixed(full->mean_s) + " s",
           best == "full");
    }
    double worst = 1;
    for (const auto& c : r.cells)
      if (c.workload == w && is_dynrt_arm(c.arm)) worst = std::min(worst, c.accuracy);
    line("accuracy 1.0 (every dynrt arm)", w, fixed(worst, 3), worst == 1.0);
    if (const auto* c2 = find(r, w, low, "c2-only")) {
      const double reduction = 100 * (1 - c2->ratio_to_floor);
      line("C2-only reduction ≥ Table 2 (" + fixed(table2_reduction(w), 1) + "%)", w,
           fixed(reduction, 1) + "%", reduction >= table2_reduction(w));
    }
  }
  if (r.unpredictable.size() == 2) {
    const double excess = 100 * (r.unpredictable[1].ratio_to_floor - 1);
    line("no harm: full within 3% of the floor, unpredictable trace", "react",
         (excess >= 0 ? "+" : "") + fixed(excess, 1) + "%", excess <= 3.0);
  }
  return md.str();
}

}  // namespace dynrt::bench

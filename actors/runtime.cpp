#include "actors/runtime.hpp"

#include "actors/messages.hpp"
#include "actors/reply.hpp"
#include "actors/services.hpp"
#include "actors/workflow.hpp"
#include "dsl/lint.hpp"
#include "dsl/recognize.hpp"
#include "dsl/report.hpp"
#include "run/run_table.hpp"

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace dynrt::actors {
using GraphMap = std::map<std::string, GraphPtr>;  // by workflow name
using GraphMapPtr = std::shared_ptr<const GraphMap>;
}  // namespace dynrt::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dynrt::actors::GraphMapPtr)

namespace dynrt {

using namespace caf;
using namespace dynrt::actors;

namespace {

using services_atom = atom_constant<atom("services")>;
using reload_atom = atom_constant<atom("reload")>;  // root: templates recompiled

struct RootInit {
  GraphMap graphs;
  RuntimeConfig config;
  std::shared_ptr<RunRecords> records;
  std::shared_ptr<Counters> counters;
  std::shared_ptr<MisdirectedNotices> notices;
  std::shared_ptr<StatsBoard> board;
  std::shared_ptr<TimeService> time;
  std::shared_ptr<LifeGate> life;
};

run::Policy policy_of(const RuntimeConfig& cfg) {
  return run::Policy{.reuse = cfg.reuse,
                     .fills = cfg.fills,
                     .fill_priority = cfg.fill_priority,
                     .fanout = cfg.fanout,
                     .fill_depth = cfg.fill_depth,
                     .private_fills = cfg.private_fills,
                     .emission = cfg.emission,
                     .explain = cfg.explain_runs > 0,
                     .settle_after = cfg.settle_after,
                     .tools = cfg.tool_records};
}

// At most this many idle checks per sweep, and sweeps this far apart while runs are due: a mass
// expiry (every run of a burst going quiet at once) is spread over time, at up to 25,600 runs
// a second, instead of flooding the root's mailbox (and the demands queued behind it) with
// checks, answers and ends all at once.
constexpr std::size_t kSweepBatch = 256;
constexpr auto kSweepPause = std::chrono::milliseconds(10);

// A live run: its actor and the key (Caller::key) whose call started it, for per-key limits.
struct RunRef {
  caf::actor actor;
  std::string owner;
};

struct RootState {
  GraphMap graphs;
  ServicesPtr services;
  Duration idle{0};
  std::unique_ptr<run::RunTable<RunRef>> runs;
  // Live runs in the table per owning key (only keys with a limit of their own are counted).
  std::unordered_map<std::string, std::size_t> owned;
  // Runs that left the table (evicted or expired) and are finishing the calls they have in
  // flight; each says when it ends (gone_atom).
  std::unordered_map<caf::actor_id, caf::actor> retiring;
  bool sweep_scheduled = false;  // a sweep_atom is on its way
  static inline const char* name = "dynrt.root";
};

using RootSelf = stateful_actor<RootState>*;

// A run left the table: it no longer counts against its key's limit.
void disown(RootState& st, const RunRef& run) {
  if (run.owner.empty()) return;
  const auto it = st.owned.find(run.owner);
  if (it == st.owned.end()) return;
  if (--it->second == 0) st.owned.erase(it);
}

// A run leaves the table: it abandons its branches, answers what it has in flight and ends.
void retire(RootSelf self, RunRef run) {
  disown(self->state, run);
  self->send(run.actor, stop_atom::value);
  self->state.retiring.emplace(run.actor.id(), std::move(run.actor));
}

// The key a run is known by: its tenant, workflow and id, so two tenants' runs never meet.
std::string run_key(const Request& r) {
  std::string key = std::to_string(r.caller.tenant.size());
  key += ':';
  key += r.caller.tenant;
  key += r.tags.workflow;
  key += '\x1f';
  key += r.tags.workflow_id;
  return key;
}

// Asks the runs quiet for the idle time whether they are idle (no call in flight); a run that
// is answers, and leaves. Batched: what is left is swept a little later.
void sweep(RootSelf self) {
  auto& st = self->state;
  const auto& svc = *st.services;
  const TimePoint now = svc.time->now();
  for (const auto& r : st.runs->due(now, st.idle, kSweepBatch))
    self->send(r.handle.actor, idle_atom::value);
  if (!st.sweep_scheduled && st.runs->any_due(now, st.idle)) {
    st.sweep_scheduled = true;
    svc.post_at(now + kSweepPause, self, sweep_atom::value);
  }
}

Duration tick_of(Duration idle) {
  return std::clamp<Duration>(idle / 4, std::chrono::milliseconds(10), std::chrono::seconds(1));
}

// The root: owns the shared actors (linked, so one exit ends the graph) and routes each demand
// to its workflow actor, spawning it on first use. Live runs are bounded in number (the least
// recently demanded is retired to make room) and in time (a run quiet for workflow_idle with
// nothing in flight ends). Workflow actors are not linked to the root: an actor's links are a
// list, and removing one of n links costs O(n), so linking every run made expiring n runs cost
// O(n^2); the root reaches them through its table instead, and at its exit ends them all.
behavior root_actor(RootSelf self, std::shared_ptr<const RootInit> init) {
  self->state.graphs = init->graphs;
  auto svc = std::make_shared<Services>();
  const auto& cfg = init->config;
  self->state.idle = std::chrono::duration_cast<Duration>(cfg.workflow_idle);
  self->state.runs = std::make_unique<run::RunTable<RunRef>>(cfg.max_live_runs);
  svc->counters = init->counters;
  svc->board = init->board;
  svc->time = init->time;
  svc->life = init->life;
  svc->policy = policy_of(cfg);
  svc->records = init->records;
  svc->on_near_miss = cfg.on_near_miss;
  svc->misdirected = init->notices;
  PricingConfig pricing;
  pricing.admission = cfg.admission;
  pricing.costs = cfg.costs;
  if (cfg.kv_tokens > 0) pricing.costs.kv_tokens = cfg.kv_tokens;
  pricing.decode_slots = cfg.decode_slots;
  pricing.clock = svc->time;
  for (const auto& b : cfg.engines) {
    svc->router.add(b.engine, b.models);
    svc->engine_actors.push_back(spawn_engine_actor(self, b.engine, nullptr, svc->time));
    pricing.engines.push_back(b.engine);
  }
  if (cfg.tools) {
    svc->router.set_tools(cfg.tools);
    svc->tools = spawn_engine_actor(self, nullptr, cfg.tools, svc->time);
  }
  svc->csl = spawn_csl_actor(self, CslConfig{cfg.csl, svc->time, cfg.shared_library, svc->life},
                             svc->counters, svc->board);
  pricing.board = svc->board;
  svc->pricing = spawn_pricing_actor(self, std::move(pricing));
  self->state.services = svc;
  self->set_error_handler([](error&) {});
  // The end of the graph (shutdown, or a shared actor failing): every run ends with it.
  self->set_exit_handler([=](exit_msg& msg) {
    auto& st = self->state;
    st.runs->for_each([&](const auto& r) { self->send_exit(r.handle.actor, msg.reason); });
    for (const auto& [id, a] : st.retiring)
      self->send_exit(a, msg.reason);
    self->quit(msg.reason);
  });
  // The periodic idle check.
  const auto tick = [=] {
    const auto& s = *self->state.services;
    s.post_at(s.time->now() + tick_of(self->state.idle), self, tick_atom::value);
  };
  tick();
  return {
      [=](demand_atom, const DemandPtr& d) {
        auto& st = self->state;
        const auto& tags = d->request.tags;
        const auto g = st.graphs.find(tags.workflow);
        if (tags.workflow_id.empty() || g == st.graphs.end()) {
          forward(*st.services, d->request, d->sink);  // a reload dropped its workflow
          return;
        }
        const auto& caller = d->request.caller;
        std::string key = run_key(d->request);
        const TimePoint now = st.services->time->now();
        if (auto* r = st.runs->touch(key, now)) {
          self->send(r->handle.actor, demand_atom::value, d);
          return;
        }
        std::string owner;
        if (caller.max_live_runs > 0) {
          auto& n = st.owned[caller.key];
          if (n >= caller.max_live_runs) {
            ++st.services->counters->runs_refused;
            // Retry-After: a run of the key's ends after the idle time at the latest.
            const auto idle_s =
                std::chrono::duration_cast<std::chrono::seconds>(st.idle).count() + 1;
            auto reply = error_reply(
                429, "rate_limit_exceeded",
                "this key already holds its limit of " + std::to_string(caller.max_live_runs) +
                    " live workflow runs; reuse a workflow id or wait for runs to go idle");
            reply.retry_after = std::to_string(std::max<std::int64_t>(1, idle_s));
            d->sink->done(std::move(reply));
            return;
          }
          ++n;
          owner = caller.key;
        }
        auto a = spawn_workflow_actor(
            self, WorkflowInit{key, tags.workflow_id, caller, g->second, st.services, self});
        for (auto& evicted : st.runs->add(std::move(key), RunRef{a, std::move(owner)}, now)) {
          ++st.services->counters->runs_evicted;
          retire(self, std::move(evicted.handle));
        }
        self->send(a, demand_atom::value, d);
      },
      [=](tick_atom) {
        sweep(self);
        tick();
      },
      [=](sweep_atom) {
        self->state.sweep_scheduled = false;
        sweep(self);
      },
      // A run answered its idle check: it ends only if no demand was routed to it since.
      [=](idle_atom, const std::string& key, std::uint64_t received) {
        auto& st = self->state;
        if (auto r = st.runs->erase_if_quiet(key, received)) {
          ++st.services->counters->runs_expired;
          retire(self, std::move(r->handle));
        }
      },
      // A workflow actor ended (retired, or failed on its own: then its key is free again).
      [=](gone_atom, const std::string& key, caf::actor_id id) {
        auto& st = self->state;
        st.retiring.erase(id);
        RunRef gone;
        if (st.runs->erase_if(key, [&](const RunRef& r) {
              if (r.actor.id() != id) return false;
              gone = r;
              return true;
            }))
          disown(st, gone);
      },
      // From outside the graph (Runtime::write): the answer goes back through the callback.
      [=](write_atom, const Strings& keys, const WriteAnswerPtr& answer) {
        self->request(self->state.services->csl, infinite, write_atom::value, keys)
            .then([answer](const WriteResult& r) { (*answer)(r); },
                  [answer](error&) { (*answer)(WriteResult{}); });
      },
      // `dynrt explain`: the journals of `tenant`'s runs with workflow id `id` (of `workflow`, or
      // of every workflow): a live run's from its actor, an ended one's from the records.
      [=](explain_atom, const std::string& tenant, const std::string& id,
          const std::string& workflow, const ExplainAnswerPtr& answer) {
        auto& st = self->state;
        const auto& services = *st.services;
        if (!services.policy.explain) return (*answer)({});  // no journals kept
        auto found = std::make_shared<std::vector<nlohmann::json>>();
        // Answers once every live run asked has answered (or failed to).
        auto pending = std::make_shared<std::size_t>(1);
        auto one_done = [found, pending, answer] {
          if (--*pending == 0) (*answer)(std::move(*found));
        };
        for (const auto& [name, graph] : st.graphs) {
          if (!workflow.empty() && name != workflow) continue;
          Request r;
          r.caller.tenant = tenant;
          r.tags.workflow = name;
          r.tags.workflow_id = id;
          const auto key = run_key(r);
          if (auto* run = st.runs->find(key)) {
            ++*pending;
            self->request(run->handle.actor, infinite, explain_atom::value)
                .then(
                    [found, one_done](nlohmann::json& j) {
                      found->push_back(std::move(j));
                      one_done();
                    },
                    [one_done](error&) { one_done(); });
          } else if (services.records) {
            if (auto kept = services.records->find(key, services.time->now()))
              found->push_back(std::move(*kept));
          }
        }
        one_done();
      },
      [=](services_atom) { return self->state.services; },
      // New runs start on the new graphs; a live run keeps the graph it started with, so one
      // run never mixes two versions of its template.
      [=](reload_atom, const GraphMapPtr& graphs) { self->state.graphs = *graphs; },
  };
}

std::string findings_text(const dsl::LintReport& report) {
  if (report.count(dsl::Severity::error) == 0 && report.usage_errors.empty()) return {};
  std::string out = dsl::format_text(report);
  for (const auto& u : report.usage_errors)
    out += u + "\n";
  return out;
}

struct Compiled {
  GraphMap graphs;
  std::vector<std::string> names;  // in the order the templates were read
};

// What recognizes untagged calls for `compiled`'s templates, in the order they were read.
std::shared_ptr<const dsl::Recognizer> recognizer_of(const Compiled& compiled) {
  std::vector<std::shared_ptr<const dsl::TemplateGraph>> graphs;
  for (const auto& name : compiled.names)
    graphs.push_back(compiled.graphs.at(name));
  return std::make_shared<const dsl::Recognizer>(graphs);
}

// Compiles what the linter made of the templates (`reports`, in the order they were read); any
// error-severity finding refuses them all. Then the configuration's shared stages apply.
Expected<Compiled> compile_reports(const std::vector<const dsl::LintReport*>& reports,
                                   const RuntimeConfig& config) {
  Compiled out;
  for (const auto* report : reports) {
    const std::string errors = findings_text(*report);
    if (!errors.empty()) return make_error("templates do not lint clean:\n" + errors);
    for (const auto* g : report->graphs()) {
      if (out.graphs.count(g->workflow))
        return make_error("two templates define workflow \"" + g->workflow + "\"");
      out.graphs.emplace(g->workflow, std::make_shared<const dsl::TemplateGraph>(*g));
      out.names.push_back(g->workflow);
    }
  }
  // The configuration's shared stages: the same as `share: global` in the template, except
  // that the stage's fingerprint (and so its names for the default tenant) stays as it was.
  for (const auto& name : config.shared_stages) {
    const auto dot = name.find('.');
    const auto g =
        dot == std::string::npos ? out.graphs.end() : out.graphs.find(name.substr(0, dot));
    if (g == out.graphs.end() || !g->second->stage(name.substr(dot + 1)))
      return make_error("shared stage \"" + name +
                        "\" names no stage of the templates (expected workflow.stage)");
    auto copy = std::make_shared<dsl::TemplateGraph>(*g->second);
    for (auto& st : copy->stages)
      if (st.name == name.substr(dot + 1)) st.share = dsl::Share::global;
    g->second = std::move(copy);
  }
  return out;
}

// Lints (reading template_paths anew) and compiles every configured template.
Expected<Compiled> compile_templates(const RuntimeConfig& config,
                                     const dsl::LintReport* linted = nullptr) {
  std::vector<dsl::LintReport> reports;
  reports.reserve(1 + config.template_texts.size());
  std::vector<const dsl::LintReport*> in_order;
  if (linted)
    in_order.push_back(linted);
  else if (!config.template_paths.empty())
    in_order.push_back(&reports.emplace_back(dsl::lint_paths(config.template_paths)));
  for (const auto& [name, text] : config.template_texts)
    in_order.push_back(&reports.emplace_back(dsl::lint_text(name, text)));
  return compile_reports(in_order, config);
}

// Gives the memory of ended runs back to the system. A burst of runs churns through many small
// allocations on every thread's malloc arena; once the runs end, their pages are mostly free
// but glibc returns only the top of each arena, so resident memory would stay at the burst's
// peak. After at least kTrimAfter runs have ended it calls malloc_trim(0), and once more when
// the resolved branches of those runs have met their settle deadline (their actors' memory is
// held until then). Its own thread: trimming walks the heap, which no actor or I/O thread
// should wait for.
class MemoryTrimmer {
 public:
  static constexpr std::uint64_t kTrimAfter = 1024;
  static constexpr auto kCheck = std::chrono::seconds(5);

  MemoryTrimmer(std::shared_ptr<const Counters> counters, std::chrono::milliseconds settle_after)
      : counters_(std::move(counters)), settle_after_(settle_after) {
#if defined(__GLIBC__)
    thread_ = std::thread([this] { run(); });
#endif
  }
  ~MemoryTrimmer() {
    stop();
  }
  void stop() {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void run() {
#if defined(__GLIBC__)
    using clock = std::chrono::steady_clock;
    std::uint64_t trimmed_at = 0;
    std::optional<clock::time_point> again;
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(lock, kCheck, [this] { return stopping_; })) {
      const std::uint64_t ended = counters_->runs_evicted + counters_->runs_expired;
      const bool many = ended - trimmed_at >= kTrimAfter;
      if (many || (again && clock::now() >= *again)) {
        malloc_trim(0);
        again.reset();
        if (many) again = clock::now() + settle_after_ + kCheck;
        trimmed_at = ended;
      }
    }
#endif
  }

  std::shared_ptr<const Counters> counters_;
  std::chrono::milliseconds settle_after_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

// The calls not yet answered, for cancel() and shutdown. A call leaves as it is answered (its
// on_done is wrapped), so the table never holds more than the calls in flight. Thread-safe;
// shared with the wrapped callbacks, which may run after the Runtime is gone.
class CallTable {
 public:
  void add(CallId id, const std::shared_ptr<ReplySink>& sink) {
    std::lock_guard lock(mutex_);
    calls_.emplace(id, sink);
  }
  void remove(CallId id) {
    {
      std::lock_guard lock(mutex_);
      calls_.erase(id);
    }
    left_.notify_all();
  }
  std::shared_ptr<ReplySink> find(CallId id) {
    std::lock_guard lock(mutex_);
    const auto it = calls_.find(id);
    return it == calls_.end() ? nullptr : it->second.lock();
  }
  // Shutdown: answers every call still here with `reply`, then waits, up to `bound`, for the
  // calls whose sink another thread was destroying meanwhile (an engine thread dropping its
  // last reference): the sink's destructor answers them, and they leave once it has.
  void answer_all(const Reply& reply, std::chrono::milliseconds bound) {
    std::vector<std::shared_ptr<ReplySink>> live;
    {
      std::lock_guard lock(mutex_);
      for (const auto& [id, w] : calls_)
        if (auto sink = w.lock()) live.push_back(std::move(sink));
    }
    for (const auto& sink : live) {
      sink->cancel();  // a pass-through call's engine request, which no actor owns
      sink->done(reply);
    }
    live.clear();
    std::unique_lock lock(mutex_);
    left_.wait_for(lock, bound, [&] { return calls_.empty(); });
    calls_.clear();
  }

 private:
  std::mutex mutex_;
  std::condition_variable left_;
  std::unordered_map<CallId, std::weak_ptr<ReplySink>> calls_;
};

}  // namespace

struct Runtime::Impl {
  RuntimeConfig config;
  // The loaded templates' names; replaced by reload() under templates_mutex.
  std::vector<std::string> names;
  std::set<std::string, std::less<>> workflow_set;
  mutable std::shared_mutex templates_mutex;
  std::mutex reload_mutex;  // one reload at a time

  // Recognition without tags over the loaded templates; replaced by reload() with them.
  std::shared_ptr<const dsl::Recognizer> recognizer;

  bool claims(const std::string& workflow) const {
    std::shared_lock lock(templates_mutex);
    return workflow_set.count(workflow) > 0;
  }

  // A tagged call no template claims: say why (its tags name nothing loaded).
  void misdirected(const Tags& tags) {
    std::optional<run::Misdirected> m;
    {
      std::shared_lock lock(templates_mutex);
      m = run::misdirected_call(tags, names, workflow_set.count(tags.workflow) > 0);
    }
    if (m) notices->notice(*m);
  }

  // Counts of recognition (RuntimeStats::Recognition); calls recognize on their own threads.
  struct RecognitionCounts {
    mutable std::mutex mutex;
    std::map<std::pair<std::string, std::string>, std::uint64_t> recognized;
    std::uint64_t no_match = 0, ambiguous = 0, no_run = 0;
  } recognition;

  void recognition_stats(RuntimeStats::Recognition& out) const {
    std::shared_ptr<const dsl::Recognizer> r;
    {
      std::shared_lock lock(templates_mutex);
      r = recognizer;
    }
    std::lock_guard lock(recognition.mutex);
    out.enabled = (r && !r->empty()) || !recognition.recognized.empty();
    if (r)
      for (const auto& st : r->stages())
        out.recognized[st] = 0;
    for (const auto& [st, n] : recognition.recognized)
      out.recognized[st] = n;
    out.no_match = recognition.no_match;
    out.ambiguous = recognition.ambiguous;
    out.no_run = recognition.no_run;
  }

  // An untagged call a template's match rules claim gets that template's tags (tags win: a
  // call with any tag is left as it is). Runs on the caller's thread; pure lookups only.
  void recognize(Request& request) {
    if (!request.tags.empty()) return;
    std::shared_ptr<const dsl::Recognizer> r;
    {
      std::shared_lock lock(templates_mutex);
      r = recognizer;
    }
    if (!r || r->empty()) return;
    const auto& wire = request.wire.is_null() ? request.body : request.wire;
    const auto& route = request.route.empty() ? request.endpoint : request.route;
    const auto& headers = request.headers;
    auto found = r->recognize(route, wire, request.body, [&](std::string_view name) {
      for (const auto& [n, v] : headers)
        if (n == name) return std::optional<std::string>(v);
      return std::optional<std::string>();
    });
    std::lock_guard lock(recognition.mutex);
    switch (found.outcome) {
      case dsl::Recognized::Outcome::recognized:
        ++recognition.recognized[{found.workflow, found.stage}];
        request.tags =
            Tags{std::move(found.workflow), std::move(found.run), std::move(found.stage)};
        return;
      case dsl::Recognized::Outcome::no_match:
        ++recognition.no_match;
        return;
      case dsl::Recognized::Outcome::ambiguous:
        ++recognition.ambiguous;
        return;
      case dsl::Recognized::Outcome::no_run:
        ++recognition.no_run;
        return;
    }
  }

  std::shared_ptr<Counters> counters = std::make_shared<Counters>();
  std::shared_ptr<MisdirectedNotices> notices;  // shared with the actors (Services)
  std::shared_ptr<StatsBoard> board = std::make_shared<StatsBoard>();
  std::shared_ptr<TimeService> time;     // the configured one, or own_time
  std::shared_ptr<SystemTime> own_time;  // when none was configured
  std::shared_ptr<LifeGate> life_gate = std::make_shared<LifeGate>();
  std::unique_ptr<MemoryTrimmer> trimmer;
  std::unique_ptr<actor_system_config> sys_config;
  std::unique_ptr<actor_system> system;
  caf::scheduler::test_coordinator* stepper = nullptr;  // a stepped runtime's scheduler
  caf::actor root;
  ServicesPtr services;
  std::atomic<std::uint64_t> next_demand{1};
  bool stopped = false;
  // Held shared by calls that use the actor system, exclusively by shutdown() while it marks
  // the runtime stopped: after that no call touches the system shutdown() destroys.
  std::shared_mutex life;
  std::shared_ptr<CallTable> calls = std::make_shared<CallTable>();
};

Expected<std::unique_ptr<Runtime>> Runtime::create(RuntimeConfig config) {
  return create(std::move(config), nullptr);
}

Expected<std::unique_ptr<Runtime>> Runtime::create(RuntimeConfig config,
                                                   const dsl::LintReport& linted) {
  return create(std::move(config), &linted);
}

Expected<std::unique_ptr<Runtime>> Runtime::create(RuntimeConfig config,
                                                   const dsl::LintReport* linted) {
  if (config.engines.empty() || !config.engines.front().engine)
    return make_error("dynrt::Runtime needs at least one engine");
  // A SystemTime fires on a thread of its own, which a stepped graph must never see.
  if (config.stepped && !config.time)
    return make_error("a stepped dynrt::Runtime needs the time it is stepped by (a ManualTime)");
  auto compiled = compile_templates(config, linted);
  if (!compiled) return compiled.error();
  auto init = std::make_shared<RootInit>();
  auto recognizer = recognizer_of(*compiled);
  init->graphs = std::move(compiled->graphs);
  std::vector<std::string> names = std::move(compiled->names);

  auto impl = std::make_unique<Impl>();
  impl->recognizer = std::move(recognizer);
  impl->names = std::move(names);
  impl->workflow_set.insert(impl->names.begin(), impl->names.end());
  impl->sys_config = std::make_unique<actor_system_config>();
  impl->sys_config->set("scheduler.max-threads", std::max(1, config.threads));
  if (config.stepped) impl->sys_config->set("scheduler.policy", caf::atom("testing"));
  if (config.time) {
    impl->time = config.time;
  } else {
    impl->own_time = std::make_shared<SystemTime>();
    impl->time = impl->own_time;
  }
  impl->system = std::make_unique<actor_system>(*impl->sys_config);
  if (config.stepped)
    impl->stepper = &dynamic_cast<caf::scheduler::test_coordinator&>(impl->system->scheduler());
  init->config = config;
  init->records = std::make_shared<RunRecords>(
      config.explain_runs, std::chrono::duration_cast<Duration>(config.explain_keep));
  init->counters = impl->counters;
  impl->notices = std::make_shared<MisdirectedNotices>(impl->counters, config.on_misdirected);
  init->notices = impl->notices;
  init->board = impl->board;
  init->time = impl->time;
  init->life = impl->life_gate;
  impl->config = std::move(config);
  impl->root = impl->system->spawn(root_actor, std::shared_ptr<const RootInit>(init));
  {
    scoped_actor self{*impl->system};
    auto started = self->request(impl->root, infinite, services_atom::value);
    // Stepped, nothing runs until asked: the root answers inside run(), before the receive.
    if (impl->stepper) impl->stepper->run();
    started.receive([&](ServicesPtr& s) { impl->services = s; }, [&](error&) {});
  }
  if (!impl->services) return make_error("dynrt::Runtime: the actor graph did not start");
  // A stepped runtime is a simulation's: it runs for the length of one, on one thread.
  if (!impl->stepper)
    impl->trimmer = std::make_unique<MemoryTrimmer>(impl->counters, impl->config.settle_after);
  return std::unique_ptr<Runtime>(new Runtime(std::move(impl)));
}

Runtime::Runtime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Runtime::~Runtime() {
  shutdown();
}

CallId Runtime::complete(Request request, ReplyCallbacks callbacks) {
  const CallId id = impl_->next_demand++;
  // The call leaves the table once its callback has run, so shutdown() can wait for answers
  // given on other threads.
  callbacks.on_done = [calls = impl_->calls, id, done = std::move(callbacks.on_done)](Reply r) {
    if (done) done(std::move(r));
    calls->remove(id);
  };
  // Every call's sink counts its own error answer, whichever path gives it (pass-through,
  // workflow, refusal, shutdown).
  auto sink = std::make_shared<ReplySink>(
      std::move(callbacks), request.endpoint, request.body,
      std::shared_ptr<std::atomic<std::uint64_t>>(impl_->counters, &impl_->counters->errors));
  if (!request.body.is_object()) {
    sink->done(error_reply(400, "invalid_request_error", "the request body must be a JSON object"));
    return id;
  }
  {
    std::shared_lock life(impl_->life);
    if (!impl_->stopped) {
      impl_->calls->add(id, sink);
      ++impl_->counters->requests;
      impl_->recognize(request);
      // A call no template claims goes straight to its engine from the caller's thread:
      // Engine::submit never blocks, and two mailbox hops are saved on the transparent path.
      const auto& tags = request.tags;
      if (tags.workflow_id.empty() || !impl_->claims(tags.workflow)) {
        if (!tags.empty()) impl_->misdirected(tags);
        forward(*impl_->services, request, std::move(sink));
        return id;
      }
      auto d = std::make_shared<Demand>();
      d->id = id;
      d->request = std::move(request);
      d->sink = std::move(sink);
      anon_send(impl_->root, demand_atom::value, DemandPtr(std::move(d)));
      return id;
    }
  }
  // Answered outside the lock: the callback may call back into the runtime.
  sink->done(error_reply(503, "service_unavailable", "dynrt is shutting down"));
  return id;
}

void Runtime::cancel(CallId call) {
  if (auto sink = impl_->calls->find(call)) sink->cancel();
}

std::future<Reply> Runtime::complete(Request request) {
  auto promise = std::make_shared<std::promise<Reply>>();
  auto future = promise->get_future();
  complete(
      std::move(request),
      ReplyCallbacks{nullptr, [promise](Reply r) { promise->set_value(std::move(r)); }, nullptr});
  return future;
}

CallId Runtime::tool(std::string name, nlohmann::json arguments, Tags tags,
                     ReplyCallbacks callbacks, Caller caller) {
  return complete(Request{std::string(kToolPrefix) + name, std::move(arguments), std::move(tags),
                          std::move(caller)},
                  std::move(callbacks));
}

std::future<Reply> Runtime::tool(std::string name, nlohmann::json arguments, Tags tags,
                                 Caller caller) {
  return complete(Request{std::string(kToolPrefix) + name, std::move(arguments), std::move(tags),
                          std::move(caller)});
}

std::future<std::size_t> Runtime::write(std::vector<std::string> keys, tenancy::WriteScope scope) {
  auto promise = std::make_shared<std::promise<std::size_t>>();
  auto future = promise->get_future();
  write(
      std::move(keys), [promise](WriteResult r) { promise->set_value(r.removed); },
      std::move(scope));
  return future;
}

void Runtime::write(std::vector<std::string> keys, std::function<void(WriteResult)> done,
                    tenancy::WriteScope scope) {
  auto answer = std::make_shared<Answer<WriteResult>>(std::move(done));
  {
    std::shared_lock life(impl_->life);
    if (!impl_->stopped) {
      anon_send(impl_->root, write_atom::value, Strings(tenancy::write_records(keys, scope)),
                answer);
      return;
    }
  }
  (*answer)(WriteResult{});
}

void Runtime::explain(std::string id, std::function<void(std::vector<nlohmann::json>)> done,
                      std::string workflow, std::string tenant) {
  auto answer = std::make_shared<Answer<std::vector<nlohmann::json>>>(std::move(done));
  std::shared_lock life(impl_->life);
  if (!impl_->stopped)
    anon_send(impl_->root, explain_atom::value, std::move(tenant), std::move(id),
              std::move(workflow), answer);
  // Stopped: the answer's destructor answers with nothing.
}

std::future<std::vector<nlohmann::json>> Runtime::explain(std::string id, std::string workflow,
                                                          std::string tenant) {
  auto promise = std::make_shared<std::promise<std::vector<nlohmann::json>>>();
  auto future = promise->get_future();
  explain(
      std::move(id),
      [promise](std::vector<nlohmann::json> runs) { promise->set_value(std::move(runs)); },
      std::move(workflow), std::move(tenant));
  return future;
}

bool Runtime::shares_library() const {
  return impl_->config.shared_library != nullptr;
}

RuntimeStats Runtime::stats() const {
  RuntimeStats s;
  read_counters(*impl_->counters, s);
  impl_->recognition_stats(s.recognition);
  std::shared_lock life(impl_->life);
  if (impl_->stopped) return s;  // the graph is gone, and with it what it held
  s.actors_running = impl_->system->registry().running();
  // What the csl and the pricing actor last published: no message, no wait, whatever the
  // graph is doing.
  const auto [csl, pricing] = impl_->board->read();
  s.csl = csl.stats;
  s.csl_entries = csl.entries;
  s.csl_shadows = csl.shadows;
  s.csl_bytes = csl.bytes;
  if (const auto& tier = impl_->config.shared_library) {
    s.shared.enabled = true;
    s.shared.imported = csl.tier.imported;
    s.shared.checks_failed = csl.tier.checks_failed;
    s.shared.remote_writes = csl.tier.remote_writes;
    s.shared.shared = csl.tier.shared;
    s.shared.tier = tier->stats();
  }
  s.admission = pricing.stats;
  s.envelope = pricing.envelope;
  s.fills_in_flight = pricing.fills_in_flight;
  s.kv_reserved = pricing.kv_reserved;
  s.branches_open = pricing.open_branches;
  for (const auto& b : impl_->config.engines)
    if (const auto pool = std::dynamic_pointer_cast<engines::EnginePool>(b.engine))
      s.pools.push_back({b.name, pool->stats()});
  return s;
}

std::size_t Runtime::run_pending() {
  std::shared_lock life(impl_->life);
  if (impl_->stopped || !impl_->stepper) return 0;
  return impl_->stepper->run();
}

std::vector<std::string> Runtime::workflows() const {
  std::shared_lock lock(impl_->templates_mutex);
  return impl_->names;
}

Expected<std::vector<std::string>> Runtime::reload() {
  std::lock_guard one(impl_->reload_mutex);
  // Linting reads files: it runs here, on the caller's thread, never on an actor's.
  auto compiled = compile_templates(impl_->config);
  if (!compiled) return compiled.error();
  std::shared_lock life(impl_->life);
  if (impl_->stopped) return make_error("dynrt::Runtime: stopped; nothing reloaded");
  // The root gets the graphs before the direct path learns the names: a call for a new
  // workflow that slips through in between is forwarded unchanged, never misrouted.
  auto recognizer = recognizer_of(*compiled);
  anon_send(impl_->root, reload_atom::value,
            GraphMapPtr(std::make_shared<const GraphMap>(std::move(compiled->graphs))));
  std::unique_lock lock(impl_->templates_mutex);
  impl_->recognizer = std::move(recognizer);
  impl_->names = compiled->names;
  impl_->workflow_set = {compiled->names.begin(), compiled->names.end()};
  return compiled->names;
}

const RuntimeConfig& Runtime::config() const {
  return impl_->config;
}

void Runtime::shutdown() {
  {
    std::unique_lock life(impl_->life);
    if (impl_->stopped) return;
    impl_->stopped = true;
  }
  if (impl_->trimmer) impl_->trimmer->stop();
  // The root's exit reaches every actor through the links; fills and engine requests in
  // flight are cancelled as their actors end.
  anon_send_exit(impl_->root, exit_reason::user_shutdown);
  impl_->root = nullptr;
  impl_->services.reset();
  if (impl_->stepper) {
    impl_->stepper->run();  // the exits, on this thread
    // Nothing runs an actor outside run(): one still alive here would hang the wait forever.
    impl_->system->await_actors_before_shutdown(false);
  } else {
    impl_->system->await_all_actors_done();
  }
  // Deadlines still armed post nothing into the system about to go.
  impl_->life_gate->close();
  if (impl_->own_time) impl_->own_time->stop();
  // Calls whose answer was still to come from an engine get theirs now, before this returns.
  impl_->calls->answer_all(
      error_reply(503, "service_unavailable", "dynrt stopped before this call was answered"),
      std::chrono::seconds(5));
  impl_->system.reset();
}

}  // namespace dynrt

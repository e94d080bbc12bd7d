#include "actors/runtime.hpp"

#include "actors/messages.hpp"
#include "actors/reply.hpp"
#include "actors/services.hpp"
#include "actors/workflow.hpp"
#include "dsl/lint.hpp"
#include "dsl/report.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <unordered_map>

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
  std::shared_ptr<Counters> counters;
};

struct LiveWorkflow {
  caf::actor actor;
  std::uint64_t sent = 0;
};

struct RootState {
  GraphMap graphs;
  ServicesPtr services;
  std::unordered_map<std::string, LiveWorkflow> workflows;
  static inline const char* name = "dynrt.root";
};

// The root: owns the shared actors (linked, so one exit ends the graph) and routes each demand
// to its workflow actor, spawning it on first use and ending it after its idle timeout.
behavior root_actor(stateful_actor<RootState>* self, std::shared_ptr<const RootInit> init) {
  self->state.graphs = init->graphs;
  auto svc = std::make_shared<Services>();
  const auto& cfg = init->config;
  svc->counters = init->counters;
  svc->switches.reuse = cfg.reuse;
  svc->switches.fills = cfg.fills;
  svc->switches.fill_priority = cfg.fill_priority;
  svc->switches.fanout = cfg.fanout;
  svc->switches.fill_depth = cfg.fill_depth;
  svc->switches.private_fills = cfg.private_fills;
  svc->switches.settle_after = cfg.settle_after;
  svc->switches.workflow_idle = cfg.workflow_idle;
  PricingConfig pricing;
  pricing.admission = cfg.admission;
  pricing.costs = cfg.costs;
  if (cfg.kv_tokens > 0) pricing.costs.kv_tokens = cfg.kv_tokens;
  pricing.decode_slots = cfg.decode_slots;
  for (std::size_t i = 0; i < cfg.engines.size(); ++i) {
    const auto& b = cfg.engines[i];
    auto a = spawn_engine_actor(self, b.engine, nullptr);
    if (i == 0) svc->default_engine = a;
    for (const auto& m : b.models)
      svc->by_model.emplace(m, a);
    pricing.engines.push_back(b.engine);
  }
  if (cfg.tools) svc->tools = spawn_engine_actor(self, nullptr, cfg.tools);
  svc->csl = spawn_csl_actor(self, CslConfig{cfg.csl}, svc->counters);
  svc->pricing = spawn_pricing_actor(self, std::move(pricing));
  self->state.services = svc;
  self->set_error_handler([](error&) {});
  return {
      [=](demand_atom, const DemandPtr& d) {
        auto& st = self->state;
        ++st.services->counters->requests;
        const auto& tags = d->request.tags;
        const auto g = st.graphs.find(tags.workflow);
        if (tags.workflow_id.empty() || g == st.graphs.end()) {
          pass_through(*st.services, d);
          return;
        }
        const std::string key = tags.workflow + '\x1f' + tags.workflow_id;
        auto& w = st.workflows[key];
        if (!w.actor)
          w.actor = spawn_workflow_actor(
              self, WorkflowInit{key, tags.workflow_id, g->second, st.services, self});
        ++w.sent;
        self->send(w.actor, demand_atom::value, d);
      },
      // A workflow has been quiet; it ends only if nothing was sent to it since it said so.
      [=](idle_atom, const std::string& key, std::uint64_t received) {
        auto& st = self->state;
        auto it = st.workflows.find(key);
        if (it == st.workflows.end() || it->second.sent != received) return;
        self->send(it->second.actor, stop_atom::value);
        st.workflows.erase(it);
      },
      // From outside the graph (Runtime::write): the answer goes back through the callback.
      [=](write_atom, const Strings& keys, const WriteAnswerPtr& answer) {
        self->request(self->state.services->csl, infinite, write_atom::value, keys)
            .then([answer](std::uint64_t removed) { (*answer)(removed); },
                  [answer](error&) { (*answer)(0); });
      },
      [=](stats_atom, const StatsAnswerPtr& answer) {
        auto parts = std::make_shared<StatsParts>();
        parts->actors_running = self->system().registry().running();
        self->request(self->state.services->csl, infinite, stats_atom::value)
            .then(
                [=](CslSnapshot& c) {
                  parts->csl = c;
                  self->request(self->state.services->pricing, infinite, stats_atom::value)
                      .then(
                          [=](PricingSnapshot& p) {
                            parts->pricing = p;
                            (*answer)(*parts);
                          },
                          [=](error&) { (*answer)(*parts); });
                },
                [=](error&) { (*answer)(*parts); });
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

// Lints and compiles every template; any error-severity finding refuses them all.
Expected<Compiled> compile_templates(
    const std::vector<std::string>& paths,
    const std::vector<std::pair<std::string, std::string>>& texts) {
  Compiled out;
  auto add = [&](const dsl::LintReport& report) -> std::optional<Error> {
    const std::string errors = findings_text(report);
    if (!errors.empty()) return make_error("templates do not lint clean:\n" + errors);
    for (const auto* g : report.graphs()) {
      if (out.graphs.count(g->workflow))
        return make_error("two templates define workflow \"" + g->workflow + "\"");
      out.graphs.emplace(g->workflow, std::make_shared<const dsl::TemplateGraph>(*g));
      out.names.push_back(g->workflow);
    }
    return std::nullopt;
  };
  if (!paths.empty())
    if (auto e = add(dsl::lint_paths(paths))) return *e;
  for (const auto& [name, text] : texts)
    if (auto e = add(dsl::lint_text(name, text))) return *e;
  return out;
}

// Answers a pass-through call from the engine's thread, as the engine answered it.
class DirectSink final : public engines::ResponseSink {
 public:
  explicit DirectSink(std::shared_ptr<ReplySink> sink) : sink_(std::move(sink)) {}
  void on_chunk(std::string_view data) override { sink_->chunk(data); }
  void on_complete(engines::EngineResult r) override {
    Reply reply;
    reply.status = r.status;
    reply.body = std::move(r.body);
    reply.usage = r.usage;
    reply.finish_reason = std::move(r.finish_reason);
    sink_->done(std::move(reply));
  }
  void on_error(engines::EngineError e) override { sink_->done(error_reply(e)); }

 private:
  std::shared_ptr<ReplySink> sink_;
};

}  // namespace

struct Runtime::Impl {
  RuntimeConfig config;
  // The loaded templates' names; replaced by reload() under templates_mutex.
  std::vector<std::string> names;
  std::set<std::string, std::less<>> workflow_set;
  mutable std::shared_mutex templates_mutex;
  std::mutex reload_mutex;  // one reload at a time

  bool claims(const std::string& workflow) const {
    std::shared_lock lock(templates_mutex);
    return workflow_set.count(workflow) > 0;
  }

  void direct(Request request, std::shared_ptr<ReplySink> sink) {
    ++counters->requests;
    ++counters->passthrough;
    ++counters->served_engine;
    std::shared_ptr<engines::Engine> engine = config.engines.front().engine;
    if (const auto m = request.body.find("model"); m != request.body.end() && m->is_string())
      for (const auto& b : config.engines)
        if (std::find(b.models.begin(), b.models.end(), m->get<std::string>()) != b.models.end()) {
          engine = b.engine;
          break;
        }
    engines::EngineRequest req;
    req.endpoint = std::move(request.endpoint);
    req.body = std::move(request.body);
    const auto handle = engine->submit(std::move(req), std::make_shared<DirectSink>(sink));
    if (handle != 0) sink->set_canceller([engine, handle] { engine->cancel(handle); });
  }
  std::shared_ptr<Counters> counters = std::make_shared<Counters>();
  std::unique_ptr<actor_system_config> sys_config;
  std::unique_ptr<actor_system> system;
  caf::actor root;
  ServicesPtr services;
  std::atomic<std::uint64_t> next_demand{1};
  std::mutex mutex;
  bool stopped = false;
  // Held shared by calls that use the actor system, exclusively by shutdown() while it marks
  // the runtime stopped: after that no call touches the system shutdown() destroys.
  std::shared_mutex life;
  // Calls not known to be answered, for cancel() and shutdown; pruned as it grows.
  std::unordered_map<CallId, std::weak_ptr<ReplySink>> sinks;
  std::size_t sinks_pruned_at = 0;

  void track(CallId id, const std::shared_ptr<ReplySink>& s) {
    std::lock_guard lock(mutex);
    sinks.emplace(id, s);
    if (sinks.size() >= 2 * sinks_pruned_at + 1024) {
      std::erase_if(sinks, [](const auto& entry) {
        auto p = entry.second.lock();
        return !p || p->answered();
      });
      sinks_pruned_at = sinks.size();
    }
  }
};

Expected<std::unique_ptr<Runtime>> Runtime::create(RuntimeConfig config) {
  if (config.engines.empty() || !config.engines.front().engine)
    return make_error("dynrt::Runtime needs at least one engine");
  auto compiled = compile_templates(config.template_paths, config.template_texts);
  if (!compiled) return compiled.error();
  auto init = std::make_shared<RootInit>();
  init->graphs = std::move(compiled->graphs);
  std::vector<std::string> names = std::move(compiled->names);

  auto impl = std::make_unique<Impl>();
  impl->names = std::move(names);
  impl->workflow_set.insert(impl->names.begin(), impl->names.end());
  impl->sys_config = std::make_unique<actor_system_config>();
  impl->sys_config->set("scheduler.max-threads", std::max(1, config.threads));
  impl->system = std::make_unique<actor_system>(*impl->sys_config);
  init->config = config;
  init->counters = impl->counters;
  impl->config = std::move(config);
  impl->root = impl->system->spawn(root_actor, std::shared_ptr<const RootInit>(init));
  {
    scoped_actor self{*impl->system};
    self->request(impl->root, infinite, services_atom::value)
        .receive([&](ServicesPtr& s) { impl->services = s; }, [&](error&) {});
  }
  if (!impl->services) return make_error("dynrt::Runtime: the actor graph did not start");
  return std::unique_ptr<Runtime>(new Runtime(std::move(impl)));
}

Runtime::Runtime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Runtime::~Runtime() {
  shutdown();
}

CallId Runtime::complete(Request request, ReplyCallbacks callbacks) {
  // Every call's sink counts its own error answer, whichever path gives it (pass-through,
  // workflow, refusal, shutdown).
  auto sink = std::make_shared<ReplySink>(
      std::move(callbacks), request.endpoint, request.body,
      std::shared_ptr<std::atomic<std::uint64_t>>(impl_->counters, &impl_->counters->errors));
  const CallId id = impl_->next_demand++;
  if (!request.body.is_object()) {
    sink->done(error_reply(400, "invalid_request_error", "the request body must be a JSON object"));
    return id;
  }
  {
    std::shared_lock life(impl_->life);
    if (!impl_->stopped) {
      impl_->track(id, sink);
      // A model call no template claims goes straight to its engine from the caller's thread:
      // Engine::submit never blocks, and two mailbox hops are saved on the transparent path.
      const auto& tags = request.tags;
      if (request.endpoint.rfind("/v1/dynrt/tools/", 0) != 0 &&
          (tags.workflow_id.empty() || !impl_->claims(tags.workflow))) {
        impl_->direct(std::move(request), std::move(sink));
        return id;
      }
      auto d = std::make_shared<Demand>();
      d->id = id;
      d->request = std::move(request);
      d->sink = std::move(sink);
      d->arrived = SteadyClock().now();
      anon_send(impl_->root, demand_atom::value, DemandPtr(std::move(d)));
      return id;
    }
  }
  // Answered outside the lock: the callback may call back into the runtime.
  sink->done(error_reply(503, "service_unavailable", "dynrt is shutting down"));
  return id;
}

void Runtime::cancel(CallId call) {
  std::shared_ptr<ReplySink> sink;
  {
    std::lock_guard lock(impl_->mutex);
    const auto it = impl_->sinks.find(call);
    if (it == impl_->sinks.end()) return;
    sink = it->second.lock();
  }
  if (sink) sink->cancel();
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
                     ReplyCallbacks callbacks) {
  return complete(Request{"/v1/dynrt/tools/" + name, std::move(arguments), std::move(tags)},
                  std::move(callbacks));
}

std::future<Reply> Runtime::tool(std::string name, nlohmann::json arguments, Tags tags) {
  return complete(Request{"/v1/dynrt/tools/" + name, std::move(arguments), std::move(tags)});
}

std::future<std::size_t> Runtime::write(std::vector<std::string> keys) {
  auto promise = std::make_shared<std::promise<std::size_t>>();
  auto future = promise->get_future();
  write(std::move(keys), [promise](std::size_t removed) { promise->set_value(removed); });
  return future;
}

void Runtime::write(std::vector<std::string> keys, std::function<void(std::size_t)> done) {
  auto answer = std::make_shared<Answer<std::uint64_t>>(
      [done = std::move(done)](std::uint64_t removed) { done(removed); });
  {
    std::shared_lock life(impl_->life);
    if (!impl_->stopped) {
      anon_send(impl_->root, write_atom::value, Strings(std::move(keys)), answer);
      return;
    }
  }
  (*answer)(0);
}

RuntimeStats Runtime::stats() const {
  RuntimeStats s;
  const auto& c = *impl_->counters;
  s.requests = c.requests;
  s.served_engine = c.served_engine;
  s.served_fill = c.served_fill;
  s.served_cache = c.served_cache;
  s.passthrough = c.passthrough;
  s.errors = c.errors;
  s.waits = c.waits;
  s.wait_timeouts = c.wait_timeouts;
  s.coalesced = c.coalesced;
  s.branches_opened = c.branches_opened;
  s.branches_gated = c.branches_gated;
  s.branches_settled = c.branches_settled;
  s.fills_issued = c.fills_issued;
  s.fills_suppressed = c.fills_suppressed;
  s.fills_completed = c.fills_completed;
  s.fills_failed = c.fills_failed;
  s.fills_cancelled = c.fills_cancelled;
  s.fills_consumed = c.fills_consumed;
  s.shadows_stored = c.shadows_stored;
  s.shadows_discarded = c.shadows_discarded;
  s.engine_ms_saved = static_cast<double>(c.saved_us.load()) / 1000;
  s.engine_ms_wasted = static_cast<double>(c.wasted_us.load()) / 1000;
  s.writes = c.writes;
  s.workflows_live = c.workflows_live;
  // Asked of the root by message (no scoped actor: one alive during shutdown would keep the
  // actor system from ending); if the graph stops first, the answer comes back empty.
  auto promise = std::make_shared<std::promise<StatsParts>>();
  auto future = promise->get_future();
  {
    std::shared_lock life(impl_->life);
    if (impl_->stopped) return s;
    anon_send(impl_->root, stats_atom::value,
              std::make_shared<Answer<StatsParts>>(
                  [promise](StatsParts parts) { promise->set_value(std::move(parts)); }));
  }
  const StatsParts parts = future.get();
  s.csl = parts.csl.stats;
  s.csl_entries = parts.csl.entries;
  s.csl_shadows = parts.csl.shadows;
  s.csl_bytes = parts.csl.bytes;
  s.admission = parts.pricing.stats;
  s.envelope = parts.pricing.envelope;
  s.fills_in_flight = parts.pricing.fills_in_flight;
  s.actors_running = parts.actors_running;
  return s;
}

std::vector<std::string> Runtime::workflows() const {
  std::shared_lock lock(impl_->templates_mutex);
  return impl_->names;
}

Expected<std::vector<std::string>> Runtime::reload() {
  std::lock_guard one(impl_->reload_mutex);
  // Linting reads files: it runs here, on the caller's thread, never on an actor's.
  auto compiled = compile_templates(impl_->config.template_paths, impl_->config.template_texts);
  if (!compiled) return compiled.error();
  std::shared_lock life(impl_->life);
  if (impl_->stopped) return make_error("dynrt::Runtime: stopped; nothing reloaded");
  // The root gets the graphs before the direct path learns the names: a call for a new
  // workflow that slips through in between is forwarded unchanged, never misrouted.
  anon_send(impl_->root, reload_atom::value,
            GraphMapPtr(std::make_shared<const GraphMap>(std::move(compiled->graphs))));
  std::unique_lock lock(impl_->templates_mutex);
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
  // The root's exit reaches every actor through the links; fills and engine requests in
  // flight are cancelled as their actors end.
  anon_send_exit(impl_->root, exit_reason::user_shutdown);
  impl_->root = nullptr;
  impl_->services.reset();
  impl_->system->await_all_actors_done();
  // Calls whose answer was still to come from an engine get theirs now.
  std::unordered_map<CallId, std::weak_ptr<ReplySink>> sinks;
  {
    std::lock_guard lock(impl_->mutex);
    sinks.swap(impl_->sinks);
  }
  for (auto& [id, w] : sinks)
    if (auto s = w.lock()) {
      s->cancel();  // a pass-through call's engine request, which no actor owns
      s->done(
          error_reply(503, "service_unavailable", "dynrt stopped before this call was answered"));
    }
  impl_->system.reset();
}

}  // namespace dynrt

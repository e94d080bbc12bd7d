#include "bench/history.hpp"

#include "bench/driver.hpp"
#include "bench/workloads.hpp"
#include "dsl/lint.hpp"
#include "dsl/report.hpp"
#include "engines/sim/engine.hpp"
#include "engines/tools/corpus.hpp"
#include "runtime/endpoints.hpp"
#include "runtime/reuse_name.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <random>
#include <regex>
#include <semaphore>
#include <thread>

namespace dynrt::bench::history {

using nlohmann::json;

namespace {

constexpr std::string_view kTools = kToolPrefix;

void collect_strings(const json& j, std::vector<const std::string*>& out) {
  if (j.is_string()) {
    out.push_back(&j.get_ref<const std::string&>());
  } else if (j.is_array() || j.is_object()) {
    for (const auto& v : j)
      collect_strings(v, out);
  }
}

}  // namespace

std::string marked(const std::string& text, const std::string& key, std::uint64_t version) {
  return text + " [rev:" + key + "@" + std::to_string(version) + "]";
}

Reads embedded_reads(const json& request) {
  static const std::regex marker(R"(\[rev:([^@\]]+)@(\d+)\])");
  std::vector<const std::string*> strings;
  collect_strings(request, strings);
  Reads out;
  for (const auto* s : strings)
    for (auto it = std::sregex_iterator(s->begin(), s->end(), marker); it != std::sregex_iterator();
         ++it)
      out.emplace_back((*it)[1].str(), std::stoull((*it)[2].str()));
  return out;
}

Reads tool_reads(const json& output) {
  Reads out;
  auto one = [&](const json& j) {
    if (j.is_object() && j.contains("key") && j["key"].is_string() && j.contains("version") &&
        j["version"].is_number_unsigned() && j["version"].get<std::uint64_t>() > 0)
      out.emplace_back(j["key"].get<std::string>(), j["version"].get<std::uint64_t>());
  };
  one(output);
  if (output.is_object() && output.contains("results") && output["results"].is_array())
    for (const auto& r : output["results"])
      one(r);
  return out;
}

// -- Checker ----------------------------------------------------------------------------------

Checker::Checker(Oracle oracle, std::map<std::string, std::string> tool_keys)
    : oracle_(std::move(oracle)), tool_keys_(std::move(tool_keys)) {}

void Checker::text(const std::string& key, std::uint64_t version, const std::string& text) {
  std::lock_guard lock(mutex_);
  texts_[key][version] = xxh3_128(text);
}

void Checker::acked(const std::string& key, std::uint64_t version) {
  std::lock_guard lock(mutex_);
  const std::uint64_t t = now();  // under the lock: a check that follows sees it
  auto& v = acks_[key];
  v.emplace_back(t, std::max(version, v.empty() ? 0 : v.back().second));
  ++report_.writes;
}

std::uint64_t Checker::acked_floor(const std::string& key, std::uint64_t before) const {
  const auto it = acks_.find(key);
  if (it == acks_.end()) return 0;
  const auto& v = it->second;
  auto pos = std::lower_bound(v.begin(), v.end(), std::make_pair(before, std::uint64_t{0}));
  return pos == v.begin() ? 0 : std::prev(pos)->second;
}

void Checker::violation(std::uint64_t Report::*kind, std::string what) {
  ++(report_.*kind);
  if (report_.examples.size() < 20) report_.examples.push_back(std::move(what));
}

bool Checker::model_ok(const std::string& endpoint, const json& request, const std::string& body) {
  const Hash128 req = xxh3_128(endpoint + '\n' + request.dump());
  {
    std::lock_guard lock(mutex_);
    if (auto it = answers_.find(req); it != answers_.end()) return it->second == xxh3_128(body);
  }
  const Hash128 expected = xxh3_128(oracle_(endpoint, request));
  std::lock_guard lock(mutex_);
  answers_.emplace(req, expected);
  return expected == xxh3_128(body);
}

bool Checker::tool_ok(const std::string& endpoint, const json& request, const json& output) {
  const auto spec = tool_keys_.find(endpoint.substr(kTools.size()));
  if (spec == tool_keys_.end()) return true;  // not a corpus tool: nothing to compare with
  const auto key = engines::render_key(spec->second, request);
  if (!key || !output.is_object() || output.value("key", std::string()) != *key) return false;
  if (!output.value("found", true)) return true;
  const auto version = output.value("version", std::uint64_t{0});
  std::lock_guard lock(mutex_);
  const auto k = texts_.find(*key);
  if (k == texts_.end()) return false;
  const auto v = k->second.find(version);
  return v != k->second.end() && v->second == xxh3_128(output.value("passage", std::string()));
}

namespace {
// One execution of an exact request by a tenant: the reuse name without a stage (the request's
// content as dynrt names it), with the tenant.
Hash128 execution_of(const std::string& tenant, const std::string& endpoint, const json& request) {
  Hasher128 h;
  h.add(tenant).add(reuse_name(Hash128{}, endpoint, request));
  return h.finish();
}
}  // namespace

void Checker::executed(const std::string& tenant, const std::string& endpoint,
                       const json& request) {
  const Hash128 e = execution_of(tenant, endpoint, request);
  std::lock_guard lock(mutex_);
  executed_.insert(e);
}

void Checker::served(const std::string& endpoint, const json& request, const Reply& reply,
                     std::uint64_t floor, const std::string& tenant) {
  if (!reply.ok()) {
    std::lock_guard lock(mutex_);
    ++report_.errors;
    if (report_.examples.size() < 20)
      report_.examples.push_back("error on " + endpoint + ": " + reply.error);
    return;
  }
  const bool tool = endpoint.rfind(kTools, 0) == 0;
  json output;
  Reads reads;
  bool exact = true;
  if (tool) {
    output = json::parse(reply.body, nullptr, false);
    reads = tool_reads(output);
    exact = tool_ok(endpoint, request, output);
  } else {
    reads = embedded_reads(request);
    exact = model_ok(endpoint, request, reply.body);
  }
  const Hash128 execution = execution_of(tenant, endpoint, request);
  std::lock_guard lock(mutex_);
  ++report_.serves;
  if (reply.served != Served::engine) {
    ++report_.tenant_checked;
    if (!executed_.count(execution))
      violation(&Report::cross_tenant, "cross-tenant: " + endpoint + " served (" +
                                           std::string(to_string(reply.served)) + ") to tenant '" +
                                           tenant + "' which never executed it");
  }
  switch (reply.served) {
    case Served::engine:
      ++report_.served_engine;
      break;
    case Served::fill:
      ++report_.served_fill;
      break;
    case Served::cache:
      ++report_.served_cache;
      break;
  }
  for (const auto& [key, version] : reads) {
    ++report_.reads_checked;
    const auto floor_version = acked_floor(key, floor);
    if (version < floor_version)
      violation(&Report::stale, "stale: " + endpoint + " served (" +
                                    std::string(to_string(reply.served)) + ") " + key + "@" +
                                    std::to_string(version) + " after " + key + "@" +
                                    std::to_string(floor_version) + " was acknowledged");
  }
  if (!exact)
    violation(&Report::unauthorized,
              "unauthorized: " + endpoint + " served (" + std::string(to_string(reply.served)) +
                  ") bytes the engine does not answer for " + request.dump().substr(0, 200));
}

Report Checker::report() const {
  std::lock_guard lock(mutex_);
  return report_;
}

// -- the randomized run -----------------------------------------------------------------------

namespace {

// The engine and the tools as dynrt sees them, telling the checker of every execution and
// whose it is before passing it on.
class RecordingEngine final : public engines::Engine {
 public:
  RecordingEngine(std::shared_ptr<engines::Engine> inner, Checker& checker)
      : inner_(std::move(inner)), checker_(checker) {}
  engines::RequestHandle submit(engines::EngineRequest request,
                                std::shared_ptr<engines::ResponseSink> sink) override {
    checker_.executed(request.tenant, request.endpoint, request.body);
    return inner_->submit(std::move(request), std::move(sink));
  }
  void cancel(engines::RequestHandle handle) override { inner_->cancel(handle); }
  engines::LoadSnapshot load() const override { return inner_->load(); }
  std::string name() const override { return inner_->name(); }

 private:
  std::shared_ptr<engines::Engine> inner_;
  Checker& checker_;
};

class RecordingTools final : public engines::ToolEngine {
 public:
  RecordingTools(std::shared_ptr<engines::ToolEngine> inner, Checker& checker)
      : inner_(std::move(inner)), checker_(checker) {}
  bool has(std::string_view tool) const override { return inner_->has(tool); }
  void call(engines::ToolCall call, engines::ToolCallback done) override {
    checker_.executed(call.tenant, std::string(kTools) + call.tool, call.arguments);
    inner_->call(std::move(call), std::move(done));
  }

 private:
  std::shared_ptr<engines::ToolEngine> inner_;
  Checker& checker_;
};

struct Bench {
  Workload workload;
  const dsl::TemplateGraph* graph = nullptr;
  std::shared_ptr<engines::sim::SimEngine> engine, reference;
  std::shared_ptr<engines::Corpus> corpus;
  std::vector<std::unique_ptr<Runtime>> runtimes;  // the replicas
  std::unique_ptr<Checker> checker;
  std::vector<std::string> keys;
  std::map<std::string, std::string> base;  // the corpus texts before any write
};

}  // namespace

Report run_history(const RunOptions& o) {
  Report total;
  const auto lint = dsl::lint_paths({o.templates});
  // A runtime loads no folder with an error in it: say why, rather than "no template".
  if (!lint.usage_errors.empty() || lint.count(dsl::Severity::error) > 0) {
    std::string why = !lint.usage_errors.empty() ? lint.usage_errors.front()
                                                 : "the templates in " + o.templates +
                                                       " have errors:\n" + dsl::format_text(lint);
    while (!why.empty() && why.back() == '\n')
      why.pop_back();
    total.examples.push_back(why);
    ++total.errors;
    return total;
  }
  std::vector<std::unique_ptr<Bench>> benches;
  for (std::size_t i = 0; i < o.workloads.size(); ++i) {
    auto b = std::make_unique<Bench>();
    for (const auto* g : lint.graphs())
      if (g->workflow == o.workloads[i]) b->graph = g;
    if (!b->graph) {
      total.examples.push_back("no template for workload " + o.workloads[i]);
      ++total.errors;
      return total;
    }
    WorkloadOptions wo;
    wo.seed = o.seed + i;
    wo.runs = o.runs;
    b->workload = make_workload(*b->graph, wo);
    for (auto& doc : b->workload.corpus) {
      const std::string key = doc["key"];
      b->keys.push_back(key);
      b->base[key] = doc["text"];
      doc["text"] = marked(doc["text"], key, 1);
    }
    engines::sim::SimEngineOptions eo;
    eo.time_scale = o.time_scale;
    b->engine = std::make_shared<engines::sim::SimEngine>(engines::sim::SimParams{},
                                                          b->workload.script, eo);
    b->reference = std::make_shared<engines::sim::SimEngine>(
        engines::sim::SimParams{}, b->workload.script, engines::sim::SimEngineOptions{0, "ref"});
    b->corpus = *engines::Corpus::from_json(b->workload.corpus);
    std::map<std::string, std::string> tool_keys;
    for (const auto& [name, key] : b->workload.tools) {
      b->corpus->add_tool(name, {engines::Corpus::Kind::lookup, key});
      tool_keys[name] = key;
    }
    auto* ref = b->reference.get();
    b->checker = std::make_unique<Checker>(
        [ref](const std::string& endpoint, const json& body) {
          return ask_engine(*ref, endpoint, body);
        },
        tool_keys);
    for (const auto& doc : b->workload.corpus)
      b->checker->text(doc["key"], 1, doc["text"]);
    if (o.replicas > 1 && o.library.empty()) {
      total.examples.push_back("replicas need a shared library (RunOptions::library)");
      ++total.errors;
      return total;
    }
    for (int r = 0; r < std::max(1, o.replicas); ++r) {
      RuntimeConfig cfg;
      cfg.engines.push_back({"sim", std::make_shared<RecordingEngine>(b->engine, *b->checker), {}});
      cfg.tools = std::make_shared<RecordingTools>(b->corpus, *b->checker);
      cfg.template_paths = {o.templates};
      cfg.workflow_idle = std::chrono::milliseconds(200);  // 10^5 runs: do not keep them all
      if (!o.library.empty()) {
        std::string why;
        const auto address = store::RedisAddress::parse(o.library, &why);
        if (!address) {
          total.examples.push_back("--library: " + why);
          ++total.errors;
          return total;
        }
        store::TierConfig tier;
        tier.address = *address;
        tier.prefix = o.library_prefix + o.workloads[i] + ":";
        cfg.shared_library = std::make_shared<store::SharedTier>(std::move(tier));
      }
      auto rt = Runtime::create(cfg);
      if (!rt.ok()) {
        total.examples.push_back(rt.error().message);
        ++total.errors;
        return total;
      }
      b->runtimes.push_back(std::move(*rt));
    }
    benches.push_back(std::move(b));
  }

  std::atomic<std::uint64_t> ops{0}, next_run{0}, not_shared{0};
  std::atomic<bool> done{false};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> writers, drivers;
  std::vector<std::unique_ptr<std::counting_semaphore<>>> tokens;
  for (std::size_t i = 0; i < benches.size(); ++i) {
    tokens.push_back(std::make_unique<std::counting_semaphore<>>(0));
    auto& b = *benches[i];
    auto& token = *tokens.back();
    writers.emplace_back([&, i] {
      std::mt19937_64 rng(o.seed * 7919 + i);
      std::size_t writes_made = 0;
      while (true) {
        token.acquire();
        if (done) return;
        const std::string& key = b.keys[rng() % b.keys.size()];
        const std::uint64_t v = b.corpus->version(key) + 1;
        const std::string text =
            marked(b.base[key] + " Revision " + std::to_string(v) + ".", key, v);
        b.checker->text(key, v, text);  // before a tool can read it
        b.corpus->put(key, text);
        if (o.tell_writes) {
          // Through each replica in turn; answered once every replica's next call sees it, or
          // (Redis unreachable) once it is in force on that replica only.
          auto& through = *b.runtimes[writes_made++ % b.runtimes.size()];
          std::promise<WriteResult> answered;
          through.write({key}, [&](WriteResult r) { answered.set_value(r); });
          const bool shared = answered.get_future().get().shared;
          if (b.runtimes.size() > 1 && !shared) ++not_shared;
        }
        b.checker->acked(key, v);
        if (++ops >= o.ops) done = true;
      }
    });
    for (int d = 0; d < o.drivers; ++d)
      drivers.emplace_back([&, i, d] {
        std::mt19937_64 rng(o.seed * 104729 + i * 1000 + static_cast<std::uint64_t>(d));
        std::uint64_t served = 0;
        while (!done) {
          Run run = b.workload.runs[rng() % b.workload.runs.size()];
          run.workflow_id += "-h" + std::to_string(next_run++);
          std::uint64_t issued = 0, tool_issued = 0;
          DriveOptions opts;
          if (o.tenants > 0) opts.caller.tenant = "t" + std::to_string(rng() % o.tenants);
          opts.before_step = [&](const Step& s) {
            issued = b.checker->now();
            if (s.endpoint.rfind(kTools, 0) == 0) tool_issued = issued;
          };
          opts.after_step = [&](const Step& s) {
            const bool tool = s.endpoint.rfind(kTools, 0) == 0;
            b.checker->served(s.endpoint, s.request, s.reply,
                              tool || tool_issued == 0 ? issued : tool_issued, opts.caller.tenant);
            if (++served % static_cast<std::uint64_t>(std::max(1, o.serves_per_write)) == 0)
              token.release();
            if (++ops >= o.ops) done = true;
          };
          // Run affinity: the whole run on one replica, the replicas taken in turn.
          auto& replica = *b.runtimes[static_cast<std::size_t>(d) % b.runtimes.size()];
          const auto r = drive(replica, *b.graph, run, opts);
          if (!r.ok() && o.verbose)
            std::fprintf(stderr, "run %s: %s\n", run.workflow_id.c_str(), r.error.c_str());
        }
      });
  }
  for (auto& t : drivers)
    t.join();
  done = true;
  for (auto& t : tokens)
    t->release();  // wakes each writer to see `done`
  for (auto& t : writers)
    t.join();
  total.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  for (auto& b : benches) {
    const auto r = b->checker->report();
    total.writes += r.writes;
    total.serves += r.serves;
    total.stale += r.stale;
    total.unauthorized += r.unauthorized;
    total.cross_tenant += r.cross_tenant;
    total.tenant_checked += r.tenant_checked;
    total.errors += r.errors;
    total.reads_checked += r.reads_checked;
    total.served_engine += r.served_engine;
    total.served_fill += r.served_fill;
    total.served_cache += r.served_cache;
    for (const auto& e : r.examples)
      if (total.examples.size() < 20) total.examples.push_back(b->graph->workflow + ": " + e);
    for (auto& rt : b->runtimes) {
      const auto st = rt->stats();
      total.coalesced += st.coalesced;
      total.invalidated += st.csl.invalidated;
      total.stale_inserts += st.csl.stale_inserts;
      total.shared_hits += st.shared.imported;
      total.shared_checks_failed += st.shared.checks_failed;
      rt->shutdown();
    }
  }
  total.writes_not_shared = not_shared;
  return total;
}

}  // namespace dynrt::bench::history

#include "bench/driver.hpp"

#include "dsl/render.hpp"

#include <algorithm>
#include <future>

namespace dynrt::bench {

using nlohmann::json;

namespace {

// The stages of one repetition, in order: the loop's when there is one, else all of them.
std::vector<dsl::StageId> stage_order(const dsl::TemplateGraph& g) {
  if (!g.loops.empty()) return g.loops.front().stages;
  return g.topological_order;
}

}  // namespace

RunResult drive(Runtime& rt, const dsl::TemplateGraph& g, const Run& run,
                const DriveOptions& options) {
  RunResult out;
  dsl::Bindings vars;
  const std::string& w = g.workflow;
  if (w == "react") vars["question"] = run.input;
  if (w == "subagent") {
    vars["question"] = run.input;
    vars["entity"] = run.entity;
  }
  if (w == "hci") vars["dialog"] = run.input;
  const std::size_t reps = g.loops.empty() ? 1 : std::max<std::size_t>(1, run.picks.size());
  for (std::size_t rep = 0; rep < reps; ++rep) {
    if (w == "routing") vars["query"] = routing_query(run, rep);
    for (const dsl::StageId sid : stage_order(g)) {
      const dsl::Stage& stage = g.stages[sid];
      if (stage.kind == dsl::StageKind::user) {
        if (options.on_user) options.on_user(run, rep);
        if (stage.decides != dsl::kNoId && rep < run.picks.size())
          vars[g.decisions[stage.decides].name] = run.picks[rep];
        continue;
      }
      Step step;
      step.stage = stage.name;
      step.repetition = rep;
      if (w == "react" && stage.name == "think") {
        step.endpoint = "/v1/chat/completions";
        step.request = react_think_request(run, rep);
      } else if (w == "subagent" && stage.name == "plan") {
        step.endpoint = "/v1/chat/completions";
        step.request = subagent_plan_request(run);
      } else {
        auto r = dsl::render_stage(stage, vars);
        if (!r) {
          out.error = "stage " + stage.name + ": " + r.error().message;
          return out;
        }
        step.endpoint = r->endpoint;
        step.request = std::move(r->body);
      }
      if (options.stream && stage.kind == dsl::StageKind::model) {
        step.request["stream"] = true;
        step.request["stream_options"] = {{"include_usage", true}};
      }
      if (options.before_step) options.before_step(step);
      const auto started = std::chrono::steady_clock::now();
      if (!options.intercept || !options.intercept(step)) {
        std::promise<Reply> done;
        auto future = done.get_future();
        auto chunks = std::make_shared<std::vector<std::string>>();
        rt.complete(Request{step.endpoint, step.request, Tags{w, run.workflow_id, stage.name},
                            options.caller},
                    ReplyCallbacks{[chunks](std::string_view c) { chunks->emplace_back(c); },
                                   [&done](Reply r) { done.set_value(std::move(r)); }, nullptr});
        step.reply = future.get();
        step.chunks = std::move(*chunks);
      }
      step.latency = std::chrono::steady_clock::now() - started;
      if (!step.reply.ok() || step.reply.status != 200) {
        out.error = "stage " + stage.name + " answered " + std::to_string(step.reply.status) +
                    ": " + step.reply.error;
        out.steps.push_back(std::move(step));
        return out;
      }
      const json doc = json::parse(step.reply.body, nullptr, false);
      if (!doc.is_discarded()) {
        if (auto outs = dsl::read_outputs(stage, doc))
          for (auto& [k, v] : *outs)
            vars[k] = v;
        if (stage.decides != dsl::kNoId) {
          const auto& d = g.decisions[stage.decides];
          const auto sel = dsl::read_selection(d, doc);
          if (sel.status == dsl::SelectionResult::Status::selected) vars[d.name] = sel.value;
        }
      }
      if (options.after_step) options.after_step(step);
      out.steps.push_back(std::move(step));
    }
  }
  return out;
}

std::string ask_engine(engines::Engine& engine, const std::string& endpoint, const json& body) {
  struct Sink : engines::ResponseSink {
    std::promise<std::string> p;
    void on_chunk(std::string_view) override {}
    void on_complete(engines::EngineResult r) override { p.set_value(std::move(r.body)); }
    void on_error(engines::EngineError e) override { p.set_value("error: " + e.message); }
  };
  auto sink = std::make_shared<Sink>();
  auto answer = sink->p.get_future();
  engines::EngineRequest req;
  req.endpoint = endpoint;
  req.body = body;
  engine.submit(std::move(req), sink);
  return answer.get();
}

}  // namespace dynrt::bench

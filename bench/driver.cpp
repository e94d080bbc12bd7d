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

RunSteps::RunSteps(const dsl::TemplateGraph& g, const Run& run, bool stream)
    : g_(g),
      run_(run),
      stream_(stream),
      order_(stage_order(g)),
      reps_(g.loops.empty() ? 1 : std::max<std::size_t>(1, run.picks.size())) {
  const std::string& w = g.workflow;
  if (w == "react") vars_["question"] = run.input;
  if (w == "subagent") {
    vars_["question"] = run.input;
    vars_["entity"] = run.entity;
  }
  if (w == "hci") vars_["dialog"] = run.input;
}

RunSteps::Next RunSteps::next(Step& step) {
  const std::string& w = g_.workflow;
  for (;;) {
    if (rep_ >= reps_) return Next::done;
    if (index_ >= order_.size()) {
      ++rep_;
      index_ = 0;
      rep_started_ = false;
      continue;
    }
    if (!rep_started_) {
      rep_started_ = true;
      if (w == "routing") vars_["query"] = routing_query(run_, rep_);
    }
    const dsl::Stage& stage = g_.stages[order_[index_]];
    step = Step{};
    step.stage = stage.name;
    step.repetition = rep_;
    if (stage.kind == dsl::StageKind::user) return Next::user;
    if (w == "react" && stage.name == "think") {
      step.endpoint = "/v1/chat/completions";
      step.request = react_think_request(run_, rep_);
    } else if (w == "subagent" && stage.name == "plan") {
      step.endpoint = "/v1/chat/completions";
      step.request = subagent_plan_request(run_);
    } else {
      auto r = dsl::render_stage(stage, vars_);
      if (!r) {
        error_ = "stage " + stage.name + ": " + r.error().message;
        return Next::error;
      }
      step.endpoint = r->endpoint;
      step.request = std::move(r->body);
    }
    if (stream_ && stage.kind == dsl::StageKind::model) {
      step.request["stream"] = true;
      step.request["stream_options"] = {{"include_usage", true}};
    }
    return Next::request;
  }
}

void RunSteps::user_done() {
  const dsl::Stage& stage = g_.stages[order_[index_]];
  if (stage.decides != dsl::kNoId && rep_ < run_.picks.size())
    vars_[g_.decisions[stage.decides].name] = run_.picks[rep_];
  ++index_;
}

void RunSteps::answered(const Step& step) {
  const dsl::Stage& stage = g_.stages[order_[index_]];
  ++index_;
  const json doc = json::parse(step.reply.body, nullptr, false);
  if (doc.is_discarded()) return;
  if (auto outs = dsl::read_outputs(stage, doc))
    for (auto& [k, v] : *outs)
      vars_[k] = v;
  if (stage.decides != dsl::kNoId) {
    const auto& d = g_.decisions[stage.decides];
    const auto sel = dsl::read_selection(d, doc);
    if (sel.status == dsl::SelectionResult::Status::selected) vars_[d.name] = sel.value;
  }
}

namespace {

std::string failure(const Step& step) {
  return "stage " + step.stage + " answered " + std::to_string(step.reply.status) + ": " +
         step.reply.error;
}

bool failed(const Step& step) {
  return !step.reply.ok() || step.reply.status != 200;
}

}  // namespace

RunResult drive(Runtime& rt, const dsl::TemplateGraph& g, const Run& run,
                const DriveOptions& options) {
  RunResult out;
  RunSteps steps(g, run, options.stream);
  for (;;) {
    Step step;
    switch (steps.next(step)) {
      case RunSteps::Next::done:
        return out;
      case RunSteps::Next::error:
        out.error = steps.error();
        return out;
      case RunSteps::Next::user:
        if (options.on_user) options.on_user(run, step.repetition);
        steps.user_done();
        continue;
      case RunSteps::Next::request:
        break;
    }
    if (options.before_step) options.before_step(step);
    const auto started = std::chrono::steady_clock::now();
    if (!options.intercept || !options.intercept(step)) {
      std::promise<Reply> done;
      auto future = done.get_future();
      auto chunks = std::make_shared<std::vector<std::string>>();
      rt.complete(Request{step.endpoint, step.request,
                          Tags{g.workflow, run.workflow_id, step.stage}, options.caller},
                  ReplyCallbacks{[chunks](std::string_view c) { chunks->emplace_back(c); },
                                 [&done](Reply r) { done.set_value(std::move(r)); }, nullptr});
      step.reply = future.get();
      step.chunks = std::move(*chunks);
    }
    step.latency = std::chrono::steady_clock::now() - started;
    if (failed(step)) {
      out.error = failure(step);
      out.steps.push_back(std::move(step));
      return out;
    }
    steps.answered(step);
    if (options.after_step) options.after_step(step);
    out.steps.push_back(std::move(step));
  }
}

namespace {

// One run in flight without a thread of its own: its state lives here, kept alive by the
// callbacks that will continue it.
struct AsyncRun : std::enable_shared_from_this<AsyncRun> {
  AsyncRun(Send transport, const dsl::TemplateGraph& graph, Run r, AsyncDriveOptions o,
           std::function<void(RunResult)> on_done)
      : send_to(std::move(transport)),
        g(graph),
        run(std::move(r)),
        options(std::move(o)),
        done(std::move(on_done)),
        steps(graph, run, options.stream) {}

  TimePoint now() const { return options.clock ? options.clock->now() : SteadyClock().now(); }

  // Takes steps until one has to wait for an answer or the run ends.
  void next() {
    for (;;) {
      Step step;
      switch (steps.next(step)) {
        case RunSteps::Next::done:
          return finish();
        case RunSteps::Next::error:
          out.error = steps.error();
          return finish();
        case RunSteps::Next::user:
          if (!options.on_user) {
            steps.user_done();
            continue;
          }
          options.on_user(run, step.repetition, [self = shared_from_this()] {
            self->steps.user_done();
            self->next();
          });
          return;
        case RunSteps::Next::request:
          return send(std::move(step));
      }
    }
  }

  void send(Step step) {
    const TimePoint started = now();
    auto pending = std::make_shared<Step>(std::move(step));
    auto answer = [self = shared_from_this(), pending, started](Reply r) {
      pending->reply = std::move(r);
      pending->latency = self->now() - started;
      self->answered(std::move(*pending));
    };
    if (options.intercept && options.intercept(*pending, answer)) return;
    Step& s = *pending;
    send_to(
        s, Tags{g.workflow, run.workflow_id, s.stage}, options.caller,
        [pending](std::string_view c) { pending->chunks.emplace_back(c); }, std::move(answer));
  }

  void answered(Step step) {
    if (failed(step)) {
      out.error = failure(step);
      out.steps.push_back(std::move(step));
      return finish();
    }
    steps.answered(step);
    if (options.after_step) options.after_step(step);
    out.steps.push_back(std::move(step));
    next();
  }

  void finish() {
    if (auto d = std::exchange(done, nullptr)) d(std::move(out));
  }

  Send send_to;
  const dsl::TemplateGraph& g;
  const Run run;
  AsyncDriveOptions options;
  std::function<void(RunResult)> done;
  RunSteps steps;
  RunResult out;
};

}  // namespace

void drive_async(Send send, const dsl::TemplateGraph& g, const Run& run, AsyncDriveOptions options,
                 std::function<void(RunResult)> done) {
  std::make_shared<AsyncRun>(std::move(send), g, run, std::move(options), std::move(done))->next();
}

void drive_async(Runtime& rt, const dsl::TemplateGraph& g, const Run& run,
                 AsyncDriveOptions options, std::function<void(RunResult)> done) {
  drive_async(
      [&rt](Step& s, const Tags& tags, const Caller& caller,
            std::function<void(std::string_view)> on_chunk, std::function<void(Reply)> answer) {
        rt.complete(Request{s.endpoint, s.request, tags, caller},
                    ReplyCallbacks{std::move(on_chunk), std::move(answer), nullptr});
      },
      g, run, std::move(options), std::move(done));
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

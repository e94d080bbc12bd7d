// Drives one workflow run through a dynrt::Runtime the way a harness would: each stage's
// request is rendered from the template with the variables gathered from earlier responses
// (or built by the workload for deciding stages the template leaves to the harness), tagged
// with the workflow, the run's id and the stage, and sent only after the previous answer came
// back. A user stage takes the run's recorded pick.
//
// drive() blocks its thread for the whole run; drive_async() sends each request from the
// previous answer's callback, so that many runs share one thread (the bench's simulations,
// where the whole Runtime is stepped on one thread in simulated time).
#pragma once

#include "actors/runtime.hpp"
#include "bench/workloads.hpp"
#include "dsl/render.hpp"
#include "dsl/template_graph.hpp"
#include "engines/engine.hpp"
#include "runtime/clock.hpp"

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dynrt::bench {

struct Step {
  std::string stage;
  std::size_t repetition = 0;
  std::string endpoint;
  nlohmann::json request;
  Reply reply;
  std::vector<std::string> chunks;  // streamed runs
  std::chrono::steady_clock::duration latency{};
};

struct RunResult {
  std::vector<Step> steps;
  std::string error;  // empty: every step answered 200 and the harness could continue
  bool ok() const { return error.empty(); }
};

struct DriveOptions {
  bool stream = false;  // ask model stages to stream (stream_options.include_usage too)
  // Called before each request is sent and after each answer (tests record and write here).
  std::function<void(const Step&)> before_step;
  std::function<void(const Step&)> after_step;
  // Called at a user stage before its pick is taken (the bench waits the think time here).
  std::function<void(const Run&, std::size_t repetition)> on_user;
  // Called before a request goes to the Runtime: returning true means the step's reply was
  // filled in by the caller (a harness-side cache of the baselines) and nothing is sent.
  std::function<bool(Step&)> intercept;
  Caller caller = {};  // whose calls these are (tenant, key, limits)
};

RunResult drive(Runtime& runtime, const dsl::TemplateGraph& graph, const Run& run,
                const DriveOptions& options = {});

// The steps of one run in order, as a harness takes them: which stage comes next, its request
// (rendered with the variables earlier answers bound), and what each answer binds. Pure; both
// drivers walk a run with it.
class RunSteps {
 public:
  RunSteps(const dsl::TemplateGraph& graph, const Run& run, bool stream);
  enum class Next { request, user, done, error };
  // The next step: a request (`step` is filled in), a user stage (`step.repetition` is set;
  // its pick is bound once user_done() is called), the end of the run, or an error (error()).
  Next next(Step& step);
  void user_done();
  // The answer to the request next() gave: binds its outputs and its selection, if any.
  void answered(const Step& step);
  const std::string& error() const { return error_; }

 private:
  const dsl::TemplateGraph& g_;
  const Run& run_;
  bool stream_;
  std::vector<dsl::StageId> order_;
  std::size_t reps_;
  std::size_t rep_ = 0;
  std::size_t index_ = 0;  // into order_
  bool rep_started_ = false;
  dsl::Bindings vars_;
  std::string error_;
};

// A run driven without blocking. Its requests are sent from the thread that calls
// drive_async() and then from the answers' callbacks; `done` is called once, with the result,
// on the thread of the last answer.
struct AsyncDriveOptions {
  bool stream = false;
  // Latencies are measured on this clock (a simulation's); null: the steady clock.
  const Clock* clock = nullptr;
  std::function<void(const Step&)> after_step;
  // A user stage: the harness calls `resume` when the user has answered (after a think time).
  std::function<void(const Run&, std::size_t repetition, std::function<void()> resume)> on_user;
  // Called before a request goes to the Runtime: returning true means the caller answers the
  // step instead, now or later, by calling `answer` once (a harness-side cache).
  std::function<bool(Step&, std::function<void(Reply)> answer)> intercept;
  Caller caller = {};
};

void drive_async(Runtime& runtime, const dsl::TemplateGraph& graph, const Run& run,
                 AsyncDriveOptions options, std::function<void(RunResult)> done);

// Where drive_async() sends a request: `step` is the request, tagged with `tags` (a transport
// may append the streamed chunks to it); `answer` is called once with the reply, on any thread.
using Send = std::function<void(Step& step, const Tags& tags, const Caller& caller,
                                std::function<void(std::string_view chunk)> on_chunk,
                                std::function<void(Reply)> answer)>;
// The same through any transport (over HTTP, say: bench/http_cell.hpp).
void drive_async(Send send, const dsl::TemplateGraph& graph, const Run& run,
                 AsyncDriveOptions options, std::function<void(RunResult)> done);

// The engine's own answer to `body` (its complete response, or "error: ..."), asked of it
// directly without dynrt: the reference that tests and the history checker compare with.
std::string ask_engine(engines::Engine& engine, const std::string& endpoint,
                       const nlohmann::json& body);

}  // namespace dynrt::bench

// Drives one workflow run through a dynrt::Runtime the way a harness would: each stage's
// request is rendered from the template with the variables gathered from earlier responses
// (or built by the workload for deciding stages the template leaves to the harness), tagged
// with the workflow, the run's id and the stage, and sent only after the previous answer came
// back. A user stage takes the run's recorded pick.
#pragma once

#include "actors/runtime.hpp"
#include "bench/workloads.hpp"
#include "dsl/template_graph.hpp"
#include "engines/engine.hpp"

#include <chrono>
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

// The engine's own answer to `body` (its complete response, or "error: ..."), asked of it
// directly without dynrt: the reference that tests and the history checker compare with.
std::string ask_engine(engines::Engine& engine, const std::string& endpoint,
                       const nlohmann::json& body);

}  // namespace dynrt::bench

// `sim`: the embedded simulated engine, the default engine of `dynrt serve` and `dynrt bench`.
//
// SimEngine runs the SimModel (engines/sim/model.hpp) on a thread of its own against the real
// clock, scaled: with `time_scale` N, one simulated second takes N real milliseconds (1000 is
// real time; 10 replays a minute of traffic in 0.6 s). Time scale 0 runs the simulation as fast
// as it can: simulated time jumps to each next event, which is what tests and overhead
// benchmarks use, with no sleeping. Sink callbacks run on the engine's thread.
#pragma once

#include "engines/engine.hpp"
#include "engines/sim/model.hpp"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace dynrt::engines::sim {

struct SimEngineOptions {
  double time_scale = 1000;  // real milliseconds per simulated second; 0: as fast as possible
  std::string name = "sim";
};

class SimEngine final : public Engine {
 public:
  SimEngine(SimParams params = {}, Script script = {}, SimEngineOptions options = {});
  // Stops the thread; requests still in flight get on_error(internal, "engine stopped").
  ~SimEngine() override;
  SimEngine(const SimEngine&) = delete;
  SimEngine& operator=(const SimEngine&) = delete;

  RequestHandle submit(EngineRequest request, std::shared_ptr<ResponseSink> sink) override;
  void cancel(RequestHandle handle) override;
  LoadSnapshot load() const override;
  std::string name() const override { return options_.name; }

  SimCounters counters() const;
  SimTime simulated_now() const;
  // Blocks until no request is in flight and every callback has returned (for tests and
  // clean shutdowns: after it, the engine holds no sink and calls none).
  void drain();

 private:
  SimTime sim_now_locked() const;
  void run();

  const SimEngineOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  SimModel model_;
  std::unordered_map<RequestHandle, std::shared_ptr<ResponseSink>> sinks_;
  RequestHandle next_handle_ = 1;
  std::chrono::steady_clock::time_point real_start_;
  SimTime jump_{0};  // simulated time reached by jumping (time scale 0)
  bool stop_ = false;
  bool delivering_ = false;  // callbacks are running outside the lock
  std::thread thread_;
};

}  // namespace dynrt::engines::sim

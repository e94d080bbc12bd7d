// `sim`: the embedded simulated engine, the default engine of `dynrt serve` and `dynrt bench`.
//
// SimEngine runs the SimModel (engines/sim/model.hpp) on a thread of its own against the real
// clock, scaled: with `time_scale` N, one simulated second takes N real milliseconds (1000 is
// real time; 10 replays a minute of traffic in 0.6 s). Time scale 0 runs the simulation as fast
// as it can: simulated time jumps to each next event, which is what tests and overhead
// benchmarks use, with no sleeping. Sink callbacks run on the engine's thread.
//
// Stepped (`stepped`), the engine has no thread and no clock of its own: it moves only when
// advance_to() is called, and calls its sinks on that caller's thread. A discrete-event loop
// asks next_event() when the engine next has something to do and advances it there, beside
// the other parts of a simulation that run on the same simulated clock (`dynrt bench`).
//
// `workers` SimModels serve as one engine, as a data-parallel deployment behind one endpoint
// (each worker its own slots and KV pool, engines/sim/profiles.hpp). Every request goes to the
// least-loaded worker; between equally loaded ones, a fill (priority above 0) prefers the one
// running the fewest canonical requests, so that speculation runs on other workers while there
// are idle ones. (Sending every fill to the worker with the fewest canonical requests piled
// them onto one worker, where a compute-bound step made each run twice as long.) load()
// reports the workers summed.
#pragma once

#include "engines/engine.hpp"
#include "engines/sim/model.hpp"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

namespace dynrt::engines::sim {

struct SimEngineOptions {
  double time_scale = 1000;  // real milliseconds per simulated second; 0: as fast as possible
  std::string name = "sim";
  int workers = 1;       // SimModels behind the one engine, each with the whole SimParams
  bool stepped = false;  // no thread: time moves in advance_to() only (time_scale is unused)
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
  bool promote(RequestHandle handle, int priority) override;
  LoadSnapshot load() const override;
  std::string name() const override { return options_.name; }

  SimCounters counters() const;  // the workers' summed
  int workers() const { return static_cast<int>(models_.size()); }
  // One worker's load (index below workers()).
  LoadSnapshot worker_load(int worker) const;
  SimTime simulated_now() const;
  // Blocks until no request is in flight and every callback has returned (for tests and
  // clean shutdowns: after it, the engine holds no sink and calls none). Stepped, it advances
  // through every event still pending instead.
  void drain();

  // Stepped only: when the engine next has something to do (nothing: idle), and moving its
  // time to `t` (never backwards), which delivers every event up to then on this thread.
  std::optional<SimTime> next_event() const;
  void advance_to(SimTime t);

 private:
  SimTime sim_now_locked() const;
  std::optional<SimTime> next_event_locked() const;
  std::size_t pick_worker(const EngineRequest& request) const;
  // Worker `i`'s load at the engine's time `now`, counting what waits to arrive there as queued.
  LoadSnapshot worker_load_locked(std::size_t i, SimTime now) const;
  using Ready = std::vector<std::pair<std::shared_ptr<ResponseSink>, SimEvent>>;
  // Advances the workers to `now` and takes the sinks to call, in time order.
  void collect_locked(SimTime now, std::vector<SimEvent>& events, Ready& ready);
  static void deliver(Ready& ready);
  void run();

  const SimEngineOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::vector<SimModel> models_;                          // the workers
  std::unordered_map<RequestHandle, std::size_t> owner_;  // request -> its worker
  std::unordered_map<RequestHandle, std::shared_ptr<ResponseSink>> sinks_;
  RequestHandle next_handle_ = 1;
  std::chrono::steady_clock::time_point real_start_;
  SimTime jump_{0};  // simulated time reached by jumping (time scale 0) or stepping
  bool stop_ = false;
  bool delivering_ = false;  // callbacks are running outside the lock
  std::thread thread_;
};

}  // namespace dynrt::engines::sim

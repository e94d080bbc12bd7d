// A simulation on one thread and one simulated clock: a stepped dynrt::Runtime
// (RuntimeConfig::stepped), a stepped simulated engine and whatever the harness arms on the
// clock (arrivals, think times). Each turn runs every actor message pending, then moves the
// clock to the earliest thing due (a deadline of the graph or of the harness, or the engine's
// next event) and lets it happen. Nothing waits for real time, so a simulated hour costs only
// the CPU its events take, and the same inputs give the same result every time.
#pragma once

#include "actors/runtime.hpp"
#include "actors/time.hpp"
#include "engines/sim/engine.hpp"

#include <functional>
#include <memory>

namespace dynrt::bench {

class SimWorld {
 public:
  // `engine` must be stepped (SimEngineOptions::stepped); the Runtime given to attach() must be
  // stepped on `time`.
  SimWorld(std::shared_ptr<ManualTime> time, std::shared_ptr<engines::sim::SimEngine> engine);
  void attach(Runtime* runtime) { rt_ = runtime; }

  ManualTime& time() { return *time_; }
  double now_s() const;
  // Calls `fire` `after_s` simulated seconds from now, on this thread.
  void at(double after_s, std::function<void()> fire);
  // Turns until `done` holds (checked whenever the actors are idle); false if nothing was left
  // to happen before it did, i.e. `done` can never come to hold.
  bool run_until(const std::function<bool()>& done);

 private:
  std::shared_ptr<ManualTime> time_;
  std::shared_ptr<engines::sim::SimEngine> engine_;
  Runtime* rt_ = nullptr;
};

}  // namespace dynrt::bench

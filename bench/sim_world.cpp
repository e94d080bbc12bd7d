#include "bench/sim_world.hpp"

#include <algorithm>
#include <optional>

namespace dynrt::bench {

SimWorld::SimWorld(std::shared_ptr<ManualTime> time,
                   std::shared_ptr<engines::sim::SimEngine> engine)
    : time_(std::move(time)), engine_(std::move(engine)) {}

double SimWorld::now_s() const {
  return std::chrono::duration<double>(time_->now().time_since_epoch()).count();
}

void SimWorld::at(double after_s, std::function<void()> fire) {
  const auto after =
      std::chrono::duration_cast<Duration>(std::chrono::duration<double>(std::max(0.0, after_s)));
  time_->arm(time_->now() + after, std::move(fire));
}

bool SimWorld::run_until(const std::function<bool()>& done) {
  for (;;) {
    if (rt_) rt_->run_pending();
    if (done()) return true;
    std::optional<TimePoint> next = time_->next_due();
    if (const auto e = engine_->next_event()) {
      // The engine's clock starts with the world's, at the epoch.
      const TimePoint t = TimePoint{} + *e;
      next = next ? std::min(*next, t) : t;
    }
    if (!next) return false;
    const TimePoint t = std::max(*next, time_->now());
    time_->set(t);  // the graph's and the harness's deadlines due now
    engine_->advance_to(t.time_since_epoch());
  }
}

}  // namespace dynrt::bench

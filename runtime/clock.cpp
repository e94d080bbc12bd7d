#include "runtime/clock.hpp"

namespace dynrt {

TimePoint SteadyClock::now() const {
  return std::chrono::time_point_cast<Duration>(std::chrono::steady_clock::now());
}

}  // namespace dynrt

#include "engines/retry.hpp"

#include <algorithm>
#include <cmath>

namespace dynrt::engines {

bool retryable(const EngineError& error) {
  switch (error.kind) {
    case ErrorKind::refused:
    case ErrorKind::connect_timeout:
      return true;
    case ErrorKind::http_status:
      return error.status == 429 || error.status == 502 || error.status == 503;
    default:
      return false;
  }
}

RetryPolicy::RetryPolicy(RetryOptions options) : options_(options), rng_(options.seed) {}

void RetryPolicy::started() {
  ++stats_.in_flight;
}

void RetryPolicy::finished(bool retried) {
  stats_.in_flight = std::max(0, stats_.in_flight - 1);
  if (retried) stats_.retrying = std::max(0, stats_.retrying - 1);
}

std::optional<Duration> RetryPolicy::next(RequestKind kind, const EngineError& error, int attempt,
                                          bool delivered, std::optional<Duration> retry_after) {
  if (kind != RequestKind::canonical || delivered || attempt >= options_.max_attempts ||
      !retryable(error)) {
    return std::nullopt;
  }
  if (retry_after && *retry_after > options_.retry_after_cap) return std::nullopt;
  if (attempt == 1) {  // the request's first retry takes a place in the budget
    const int budget = std::max(
        options_.budget_min, static_cast<int>(std::floor(options_.budget_ratio *
                                                         static_cast<double>(stats_.in_flight))));
    if (stats_.retrying >= budget) {
      ++stats_.budget_refused;
      return std::nullopt;
    }
    ++stats_.retrying;
  }
  ++stats_.retries;
  const int doublings = std::min(attempt - 1, 30);
  const Duration ceiling =
      std::min(options_.backoff_max, options_.backoff_base * (std::int64_t{1} << doublings));
  Duration delay{0};
  if (ceiling > Duration::zero()) {
    std::uniform_int_distribution<Duration::rep> jitter(0, ceiling.count());
    delay = Duration(jitter(rng_));
  }
  if (retry_after) delay = std::max(delay, *retry_after);
  return delay;
}

}  // namespace dynrt::engines

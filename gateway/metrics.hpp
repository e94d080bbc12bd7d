// What GET /metrics answers: the Runtime's statistics and the gateway's own counters in the
// Prometheus text format (0.0.4). Pure functions of the numbers they are given; any thread.
#pragma once

#include "actors/runtime.hpp"

#include <cstdint>
#include <string>

namespace dynrt::gateway {

// Requests the API keys refused, by why (never by key).
struct AuthRefusals {
  std::uint64_t unauthenticated = 0;  // 401
  std::uint64_t forbidden = 0;        // 403
  std::uint64_t rate_limited = 0;     // 429
};

// The Runtime's statistics: served, fills, library, gates, runs.
std::string prometheus_text(const RuntimeStats& stats);
// dynrt_auth_refused_total, one series per reason.
std::string prometheus_text(const AuthRefusals& refused);

}  // namespace dynrt::gateway

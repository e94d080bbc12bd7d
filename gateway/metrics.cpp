#include "gateway/metrics.hpp"

#include <cmath>
#include <iomanip>
#include <sstream>

namespace dynrt::gateway {

std::string prometheus_text(const RuntimeStats& s) {
  // dynrt::metrics is the one registry of what the runtime counts; a name that comes with
  // several label sets comes in a run and gets its HELP and TYPE once.
  std::ostringstream out;
  std::string_view previous;
  for (const auto& m : metrics(s)) {
    if (m.name != previous)
      out << "# HELP " << m.name << ' ' << m.help << "\n# TYPE " << m.name << ' ' << m.type << '\n';
    previous = m.name;
    out << m.name << m.labels << ' ';
    // Counts as whole numbers (a default stream would print 1234567 as 1.23457e+06).
    if (std::floor(m.value) == m.value && std::abs(m.value) < 9e15)
      out << static_cast<long long>(m.value);
    else
      out << std::setprecision(12) << m.value;
    out << '\n';
  }
  return out.str();
}

std::string prometheus_text(const AuthRefusals& refused) {
  std::ostringstream out;
  out << "# HELP dynrt_auth_refused_total Requests refused by the API keys, by reason.\n"
      << "# TYPE dynrt_auth_refused_total counter\n"
      << "dynrt_auth_refused_total{reason=\"unauthenticated\"} " << refused.unauthenticated << '\n'
      << "dynrt_auth_refused_total{reason=\"forbidden\"} " << refused.forbidden << '\n'
      << "dynrt_auth_refused_total{reason=\"rate_limited\"} " << refused.rate_limited << '\n';
  return out.str();
}

}  // namespace dynrt::gateway

#include "runtime/admission/oracle.hpp"

#include <cassert>
#include <limits>

namespace dynrt::admission {

OracleResult exact_oracle(std::span<const PricedCandidate> candidates, LoadView v,
                          const PriceCurves& curves, Budget budget) {
  const std::size_t k = candidates.size();
  assert(k < 31);
  const std::uint32_t full = (std::uint32_t{1} << k);
  constexpr double kNone = -std::numeric_limits<double>::infinity();
  OracleResult out;
  out.by_set.assign(full, kNone);
  std::vector<std::uint8_t> last(full, 0);  // the last member of the best order of each set
  std::vector<LoadView> view(full);
  std::vector<Budget> left(full);
  out.by_set[0] = 0;
  view[0] = v;
  left[0] = budget;
  // Subsets in increasing numeric order: every S - {s} comes before S.
  for (std::uint32_t set = 1; set < full; ++set) {
    for (std::size_t s = 0; s < k; ++s) {
      const std::uint32_t bit = std::uint32_t{1} << s;
      if (!(set & bit)) continue;
      const std::uint32_t before = set ^ bit;
      if (out.by_set[before] == kNone) continue;
      const Footprint& f = candidates[s].footprint;
      if (!feasible(left[before], f)) continue;
      const double value = out.by_set[before] + utility(candidates[s], view[before], curves);
      if (value > out.by_set[set]) {
        out.by_set[set] = value;
        last[set] = static_cast<std::uint8_t>(s);
        view[set] = curves.project(view[before], f);  // the same for every order of `set`
        left[set] = Budget{left[before].fills - 1, left[before].kv_share - f.kv_share};
      }
    }
    if (out.by_set[set] > out.best) {
      out.best = out.by_set[set];
      out.set = set;
    }
  }
  for (std::uint32_t set = out.set; set != 0; set ^= std::uint32_t{1} << last[set]) {
    out.order.insert(out.order.begin(), last[set]);
  }
  return out;
}

}  // namespace dynrt::admission

// The admission replay behind `dynrt bench admission`: deterministic for a seed, and the
// fill gate keeps at least the paper's figures against the exact oracle (Appendix B:
// oracle-set match 98.0%, 99.36% of the sequence-aware utility).
#include "bench/admission_replay.hpp"

#include <gtest/gtest.h>

namespace dynrt::bench {
namespace {

TEST(AdmissionReplay, IsDeterministicForASeed) {
  const AdmissionReplayOptions o{500, 9};
  const AdmissionReplayResult a = replay_admission(o);
  const AdmissionReplayResult b = replay_admission(o);
  EXPECT_EQ(format_admission_replay(o, a), format_admission_replay(o, b));
  EXPECT_NE(format_admission_replay(o, a),
            format_admission_replay(AdmissionReplayOptions{500, 10},
                                    replay_admission(AdmissionReplayOptions{500, 10})));
}

TEST(AdmissionReplay, TheGateMatchesThePaperAgainstTheOracle) {
  for (const std::uint64_t seed : {1, 2, 3}) {
    const AdmissionReplayResult r = replay_admission(AdmissionReplayOptions{2000, seed});
    ASSERT_GT(r.positive, 200u) << seed;
    EXPECT_GE(r.set_match_rate(r.gate), 0.980) << seed;
    EXPECT_GE(r.utility_ratio(r.gate), 0.9936) << seed;
    // The refinements never lose utility against Algorithm 1 alone.
    EXPECT_GE(r.gate.sum_j, r.algorithm1.sum_j) << seed;
    EXPECT_LE(r.gate.sum_j, r.sum_j_star * (1 + 1e-9)) << seed;
  }
}

TEST(AdmissionReplay, ReportNamesItsFigures) {
  const AdmissionReplayOptions o{300, 1};
  const std::string text = format_admission_replay(o, replay_admission(o));
  EXPECT_NE(text.find("\noracle-set match: "), std::string::npos) << text;
  EXPECT_NE(text.find("\nutility: "), std::string::npos) << text;
}

}  // namespace
}  // namespace dynrt::bench

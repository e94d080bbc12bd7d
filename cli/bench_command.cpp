#include "bench/admission_replay.hpp"
#include "cli/commands.hpp"

#include <iostream>
#include <memory>

namespace dynrt::cli {

void add_bench_commands(CLI::App& app, std::function<int()>& run) {
  CLI::App* bench = app.add_subcommand("bench", "Measure what dynrt buys, reproducibly");
  bench->require_subcommand(1);

  auto replay = std::make_shared<bench::AdmissionReplayOptions>();
  CLI::App* admission = bench->add_subcommand(
      "admission", "Replay the fill gate against the exact admission oracle (paper Appendix B)");
  admission->footer(
      "Generates seeded admission snapshots (2-8 candidates, mixed loads and budgets), runs\n"
      "the implemented sequential repricing and the exact ordered-subset oracle on each, and\n"
      "prints the oracle-set match rate and the share of the oracle's sequence-aware utility\n"
      "the rule keeps. Deterministic for a seed.");
  admission->add_option("--snapshots", replay->snapshots, "Snapshots to replay")
      ->check(CLI::Range(1, 10'000'000))
      ->capture_default_str();
  admission->add_option("--seed", replay->seed, "Seed of the snapshot generator")
      ->capture_default_str();
  admission
      ->add_option("--min-candidates", replay->min_candidates, "Fewest candidates a snapshot has")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  admission
      ->add_option("--max-candidates", replay->max_candidates, "Most candidates a snapshot has")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  admission->callback([replay, &run] {
    run = [replay] {
      if (replay->min_candidates > replay->max_candidates) {
        std::cerr << "dynrt bench admission: --min-candidates is above --max-candidates\n";
        return kExitUsage;
      }
      const bench::AdmissionReplayResult result = bench::replay_admission(*replay);
      std::cout << bench::format_admission_replay(*replay, result);
      return kExitOk;
    };
  });
}

}  // namespace dynrt::cli

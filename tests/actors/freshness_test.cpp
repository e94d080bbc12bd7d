// Freshness under concurrency: runs of the Sub-Agent workflow on several threads share the
// library while a writer changes the records their sub-tasks read. Every tool result served
// (executed, promoted or reused) must reflect at least every write acknowledged before its
// demand was sent: zero stale serves.
#include "tests/actors/rig.hpp"

#include <mutex>
#include <random>
#include <thread>

namespace dynrt::testing {
namespace {

TEST(Freshness, ConcurrentRunsAndWritesNeverServeAStaleResult) {
  auto w = bench::make_workload(graph("subagent"), {21, 48, 1.0});
  Rig rig(w, {true, true, 0});

  std::mutex mutex;
  std::map<std::string, std::uint64_t> acked;  // record -> version acknowledged to the writer
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> checked{0}, stale{0}, from_library{0};

  std::thread writer([&] {
    std::mt19937_64 rng(99);
    std::vector<std::string> keys;
    for (const auto& doc : w.corpus)
      keys.push_back(doc["key"].get<std::string>());
    std::uint64_t n = 0;
    while (!done) {
      const std::string& key = keys[rng() % keys.size()];
      rig.corpus->put(key, "Revision " + std::to_string(++n) + " of " + key);
      const std::uint64_t version = rig.corpus->version(key);
      rig.runtime->write({key}).get();  // in force from here on
      std::lock_guard lock(mutex);
      acked[key] = std::max(acked[key], version);
    }
  });

  auto drive_some = [&](std::size_t first, std::size_t step) {
    for (std::size_t i = first; i < w.runs.size(); i += step) {
      // Each run twice: the second finds its sub-task in the library unless a write intervened.
      for (int pass = 0; pass < 2; ++pass) {
        bench::Run run = w.runs[i];
        run.workflow_id += "-" + std::to_string(pass);
        std::map<std::string, std::uint64_t> floor;  // acked versions when the demand was sent
        bench::DriveOptions o;
        o.before_step = [&](const bench::Step&) {
          std::lock_guard lock(mutex);
          floor = acked;
        };
        o.after_step = [&](const bench::Step& s) {
          if (s.stage != "research") return;
          const auto out = nlohmann::json::parse(s.reply.body);
          const std::string key = out["key"];
          const std::uint64_t version = out["version"];
          ++checked;
          if (s.reply.served != Served::engine) ++from_library;
          if (const auto it = floor.find(key); it != floor.end() && version < it->second) {
            ++stale;
            ADD_FAILURE() << "stale serve of " << key << ": version " << version << " after "
                          << it->second << " was acknowledged (served by "
                          << to_string(s.reply.served) << ")";
          }
        };
        const auto r = rig.drive(run, o);
        EXPECT_TRUE(r.ok()) << r.error;
      }
    }
  };
  std::vector<std::thread> drivers;
  for (std::size_t t = 0; t < 4; ++t)
    drivers.emplace_back(drive_some, t, 4);
  for (auto& t : drivers)
    t.join();
  done = true;
  writer.join();

  EXPECT_EQ(stale.load(), 0u);
  EXPECT_EQ(checked.load(), 2 * w.runs.size());
  // Not vacuous: results were reused, and writes invalidated some.
  EXPECT_GT(from_library.load(), 0u);
  const auto st = rig.runtime->stats();
  EXPECT_GT(st.writes, 0u);
  EXPECT_GT(st.csl.invalidated + st.csl.stale_inserts, 0u);
}

}  // namespace
}  // namespace dynrt::testing

// Metadata per CSL entry at 1M entries, payload excluded (target: <= 200 bytes).
//   ./build/csl_memory
// Fills a store with empty results (so the payload is excluded) and reports the resident-
// memory growth per entry for three shapes: no reads; one read of a shared record (1,000
// records); one read of a record of its own, half of them with a producer edge. Each shape
// runs in a child process of its own, so freed memory of one does not flatter the next.
#include "runtime/clock.hpp"
#include "runtime/csl/store.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace {

using namespace dynrt::csl;

long resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  long size = 0;
  long resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

dynrt::Hash128 name_of(std::uint64_t i) {
  return dynrt::Hash128{i * 0x9E3779B97F4A7C15ULL, ~i};
}

void measure(const char* shape, int reads_mode) {
  constexpr std::size_t kEntries = 1'000'000;
  dynrt::ManualClock clock;
  Limits limits;
  limits.max_entries = kEntries;
  const long before = resident_bytes();
  {
    Store store(clock, limits);
    std::vector<std::string> key(1);
    EntryRef previous;
    for (std::size_t i = 0; i < kEntries; ++i) {
      Insert in;
      in.name = name_of(i);
      if (reads_mode == 1) {
        key[0] = "doc:" + std::to_string(i % 1000);
        in.reads = store.snapshot(key);
      } else if (reads_mode == 2) {
        key[0] = "doc:" + std::to_string(i);
        in.reads = store.snapshot(key);
        if (previous.valid() && i % 2 == 1) in.producers = {previous};
      }
      previous = store.put_confirmed(std::move(in)).ref;
    }
    const long after = resident_bytes();
    std::printf("%-44s %8zu entries  RSS +%7.1f MB  %6.1f bytes/entry\n", shape, store.size(),
                static_cast<double>(after - before) / 1e6,
                static_cast<double>(after - before) / static_cast<double>(store.size()));
  }
}

}  // namespace

int main() {
  const char* shapes[] = {"no reads", "one read of a shared record (1,000 records)",
                          "one read of its own record, half with a producer"};
  for (int mode = 0; mode < 3; ++mode) {
    std::fflush(stdout);
    const pid_t child = fork();
    if (child == 0) {
      measure(shapes[mode], mode);
      std::fflush(stdout);
      _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
  }
  return 0;
}

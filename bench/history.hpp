// A history checker for dynrt's concurrency guarantees: it records every write (its
// invocation, with the text it puts, and its acknowledgment, in one logical order) and every
// served result (the logical time its demand was sent, the exact request, the bytes and the
// record versions they were built from), and checks, as each is recorded:
//   stale         a result was built from a version of record k older than a write to k whose
//                 acknowledgment came before the result's demand was sent (its floor);
//   unauthorized  a result is not what the engine (or the tool, at the version it reports)
//                 answers for that exact request: a model result differs byte for byte from the
//                 reference engine's answer, or a tool result names another record than the
//                 request's, or carries a text the record never had at that version;
//   cross-tenant  a result served from the library or a fill (not executed for the call) to a
//                 tenant that had no execution of that exact request of its own (as a canonical
//                 call or a fill) before: another tenant's work. The engine and the tools are
//                 wrapped to record each execution with its tenant (EngineRequest::tenant).
// Record versions: a tool result carries {"key", "version"} (corpus lookups); every corpus text
// carries a marker "[rev:<key>@<version>]", so a model result's versions are the markers in
// the request the harness sent (the tool outputs it embedded). A model stage's floor is the
// send time of the tool demand whose output its request embeds (the harness's own data), since
// its request, not dynrt, fixes what it reads; its exactness is the byte check.
//
// run_history() is the randomized run the test suite (short) and history_benchmark (10^6
// operations) use: several workloads, each on its own Runtime over the simulated engine and a
// versioned corpus, driver threads running seeded random runs (so that runs recur across
// workflow ids, sharing fills and library results), and one writer thread per workload.
#pragma once

#include "actors/runtime.hpp"
#include "runtime/hash.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace dynrt::bench::history {

using Reads = std::vector<std::pair<std::string, std::uint64_t>>;  // (record, version)

// A corpus text with its version marker, and the markers found in any string of `request`.
std::string marked(const std::string& text, const std::string& key, std::uint64_t version);
Reads embedded_reads(const nlohmann::json& request);
// The versions a tool result reports: {"key","version"}, or "results": [{"key","version"}...].
Reads tool_reads(const nlohmann::json& output);

struct Report {
  std::uint64_t writes = 0;
  std::uint64_t serves = 0;
  std::uint64_t stale = 0;
  std::uint64_t unauthorized = 0;
  std::uint64_t cross_tenant = 0;
  std::uint64_t tenant_checked = 0;  // serves from the library or a fill checked for it
  std::uint64_t errors = 0;          // calls answered with an error (a run then stops)
  std::uint64_t reads_checked = 0;   // (record, version) pairs checked for staleness
  std::uint64_t served_engine = 0, served_fill = 0, served_cache = 0;
  std::uint64_t coalesced = 0, invalidated = 0, stale_inserts = 0;  // from the runtimes' stats
  // With replicas: results one replica served that another computed, local results refused by
  // the tier's check, writes that were answered not shared (Redis unreachable).
  std::uint64_t shared_hits = 0, shared_checks_failed = 0, writes_not_shared = 0;
  std::vector<std::string> examples;  // the first violations, described
  double wall_s = 0;
  std::uint64_t ops() const { return writes + serves; }
};

class Checker {
 public:
  // The engine's answer to a model request, computed without dynrt.
  using Oracle = std::function<std::string(const std::string& endpoint, const nlohmann::json&)>;
  // `tool_keys`: tool name -> its record key template ("kb:{{collection}}:{{entity}}").
  Checker(Oracle oracle, std::map<std::string, std::string> tool_keys);

  // Logical time: taken just before a demand is sent.
  std::uint64_t now() { return clock_.fetch_add(1) + 1; }
  // A record's text at a version: the corpus's at the start, or a write's, recorded before the
  // write is made (a tool may read it before the write is acknowledged).
  void text(const std::string& key, std::uint64_t version, const std::string& text);
  // The write of `key` to `version` was acknowledged (takes its logical time now).
  void acked(const std::string& key, std::uint64_t version);
  // The engine or a tool began executing `request` for `tenant` (before any answer of it).
  void executed(const std::string& tenant, const std::string& endpoint,
                const nlohmann::json& request);
  // A served result, to a call of `tenant`. `floor`: the logical time from which acknowledged
  // writes must show.
  void served(const std::string& endpoint, const nlohmann::json& request, const Reply& reply,
              std::uint64_t floor, const std::string& tenant = {});

  Report report() const;

 private:
  void violation(std::uint64_t Report::*kind, std::string what);
  std::uint64_t acked_floor(const std::string& key, std::uint64_t before) const;  // under mutex_
  bool model_ok(const std::string& endpoint, const nlohmann::json& request,
                const std::string& body);
  bool tool_ok(const std::string& endpoint, const nlohmann::json& request,
               const nlohmann::json& output);

  Oracle oracle_;
  std::map<std::string, std::string> tool_keys_;
  std::atomic<std::uint64_t> clock_{0};
  mutable std::mutex mutex_;
  // per record: (ack time, highest version acknowledged by then), in ack order
  std::unordered_map<std::string, std::vector<std::pair<std::uint64_t, std::uint64_t>>> acks_;
  std::unordered_map<std::string, std::unordered_map<std::uint64_t, Hash128>> texts_;
  std::unordered_map<Hash128, Hash128> answers_;  // request -> the reference answer
  std::unordered_set<Hash128> executed_;          // (tenant, request) executions
  Report report_;
};

struct RunOptions {
  std::uint64_t seed = 1;
  std::uint64_t ops = 2000;  // served results + writes, then the run stops
  std::vector<std::string> workloads = {"subagent", "react", "routing"};
  int drivers = 4;           // driver threads per workload
  double time_scale = 0.02;  // the sim engine's real ms per simulated second
  int serves_per_write = 8;  // the writer's pace
  std::size_t runs = 48;     // distinct runs per workload (they recur)
  std::string templates = "templates";
  bool verbose = false;
  // Tenants the runs are spread over (each run is one tenant's, chosen by the seed, so the same
  // run content recurs in every tenant); 0: the default tenant only.
  int tenants = 3;
  // false: the writers change the corpus without telling dynrt (a harness that forgets
  // POST /v1/dynrt/writes); the checker must then find stale serves. Tests use it.
  bool tell_writes = true;
  // Replicas per workload: each its own Runtime over the same engine and corpus, sharing their
  // library through `library` (redis://...; required when replicas > 1). Each run goes to one
  // replica (run affinity), the drivers spread runs over all of them, and the writer sends each
  // write through the next replica in turn.
  int replicas = 1;
  std::string library;
  std::string library_prefix = "dynrt-history:";  // keys of this run; the workload is added
};

// Runs the randomized history; the report says what it checked and found.
Report run_history(const RunOptions& options);

}  // namespace dynrt::bench::history

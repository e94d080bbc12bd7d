// The rules about one stage of a template that every run-level lifecycle applies the same way:
// under which name its result is stored and served, which records it reads and writes, whether
// it may be reused or filled, how long its results live and how long its demand waits for a
// fill. One place for each rule: the demand flow, the fill chain and the workflow run all ask
// here. Pure functions of the template graph, the policy and the caller.
#pragma once

#include "dsl/template_graph.hpp"
#include "engines/engine.hpp"
#include "run/call.hpp"
#include "runtime/clock.hpp"
#include "runtime/csl/store.hpp"
#include "runtime/hash.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dynrt::run {

using GraphPtr = std::shared_ptr<const dsl::TemplateGraph>;
using Producers = std::map<std::string, csl::EntryRef>;  // variable -> the entry that made it
using ReadRefs = std::vector<csl::ReadRef>;
using EntryRefs = std::vector<csl::EntryRef>;
using Strings = std::vector<std::string>;
using Hashes = std::vector<Hash128>;

// The records a configured tool reads and writes, as record-key templates over the call's
// arguments ("weather:{{city}}"): a call's keys are rendered from its own arguments before it
// runs, so a read's version is taken before the tool answers, as a stage's `reads` are.
struct ToolRecords {
  Strings reads;
  Strings writes;
};

// The runtime's policy, as RuntimeConfig sets it (its defaults are dynrt; `dynrt bench` moves
// them for its sweeps and baselines).
struct Policy {
  bool reuse = true;  // C1: serve confirmed results across requests
  bool fills = true;  // C2: run fills while branches resolve
  int fill_priority = 10;
  int fanout = -1;             // most fills per branch; -1: each decision's max_fills
  int fill_depth = 0;          // stages a fill runs down its chain; 0: the whole chain
  bool private_fills = false;  // a fill's result serves only demands of the run that made it
  // Resolve on emission: an exclusive branch stops its other candidates' fills as soon as the
  // decider's selection can be read from its decode, not at the end of the decode.
  bool emission = true;
  // Keep each run's journal for `dynrt explain` (how each call was served, and why not).
  bool explain = true;
  std::chrono::milliseconds settle_after{30'000};
  std::map<std::string, ToolRecords, std::less<>> tools;  // by tool name
};

// The name a result of `stage` is stored and served under, for a run of `caller` known as
// `run`: the reuse name, mixed with the caller's tenant unless the stage is `share: global`
// (runtime/tenancy.hpp), and with private fills (the SPAgent-like baseline) salted with the
// run, so that no other run's demand can ever match it.
Hash128 stage_name(const Policy& policy, const dsl::Stage& stage, std::string_view endpoint,
                   const nlohmann::json& body, const Caller& caller, const std::string& run);
// The record keys an execution of `stage` for `caller` reads, for `keys` as rendered.
Strings read_records(const dsl::Stage& stage, const Strings& keys, const Caller& caller);
// The record keys a write of `keys` by `caller`'s run bumps: within its tenant (and the shared
// scope), or everywhere for the default tenant.
Strings write_records(const Strings& keys, const Caller& caller);

// The record keys a call of tool stage `stage` with `arguments` reads (or `writes`) by its
// tool's configuration (Policy::tools): none for a model stage or a tool with none; nullopt when
// one does not render from the arguments (the call's read-set is then unknown: not stored).
std::optional<Strings> tool_records(const Policy& policy, const dsl::Stage& stage,
                                    const nlohmann::json& arguments, bool writes);

// Whether stage `s` may run as a fill or be served from the library.
bool reusable(const dsl::Stage& s);
// Whether an execution's result for `endpoint` may become a library entry or a shadow: only one
// that completed normally (engines/completion.hpp), whatever engine produced it. An abnormal
// result still answers the call that ran it, as the engine sent it.
bool storable(std::string_view endpoint, const engines::EngineResult& r);
// The speculable prefix of a decision's downstream: at most its max_chain stages, and at most
// `depth` when depth > 0.
std::vector<dsl::StageId> fill_chain(const dsl::TemplateGraph& g, const dsl::Decision& d,
                                     int depth = 0);

// The decision whose downstream `stage` is (the last one, if several): its limits govern the
// stage's results and waits.
const dsl::Decision* governing(const dsl::TemplateGraph& g, const dsl::Stage& stage);
// The life of `stage`'s stored results: the stage's own ttl_s, else its governing decision's,
// else the template's.
Duration ttl_of(const dsl::TemplateGraph& g, const dsl::Stage& stage);
// How long a demand for `stage` waits for a fill (or an identical execution) computing it.
std::chrono::milliseconds wait_of(const dsl::TemplateGraph& g, const dsl::Stage& stage);
// The entries whose outputs rendered `stage`'s input, from the producers of its variables.
EntryRefs producers_of(const dsl::Stage& stage, const Producers& producers);

// Milliseconds of a duration, as the feedback and the counters take them.
inline double ms_of(Duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace dynrt::run

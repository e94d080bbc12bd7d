// What the lifecycles of run/ are told: an execution's result, the library's answers to a
// probe and to a claim, and what a led execution's waiters are answered with. The actors carry
// these in their messages; the state machines take them as events.
#pragma once

#include "engines/engine.hpp"
#include "run/call.hpp"
#include "run/stage.hpp"
#include "runtime/csl/coalescer.hpp"
#include "runtime/csl/store.hpp"

#include <memory>
#include <string>
#include <vector>

namespace dynrt::run {

// An execution on an engine or a tool ended.
struct ExecResult {
  bool ok = false;
  engines::EngineResult result;
  engines::EngineError error;
  Strings writes;  // records a tool call reported writing
};
using ExecResultPtr = std::shared_ptr<const ExecResult>;

// What to look for in the library: confirmed entries (`probe`), shadows to promote
// (`promote`), and whether a promoted shadow stays for later demands (`keep`).
struct ServeQuery {
  bool probe = true;
  bool promote = true;
  bool keep = true;
};

struct ServeReply {
  bool found = false;
  bool promoted = false;  // a shadow promoted by this demand (else a confirmed hit)
  csl::EntryRef ref;
  std::shared_ptr<const std::string> bytes;
  csl::Usage usage;
  Duration cost{0};
  csl::Provenance provenance;
};

// The answer to a claim: a library hit, or how the miss executes (csl/coalescer.hpp).
struct ClaimReply {
  bool found = false;
  ServeReply hit;  // found
  csl::ClaimKind kind = csl::ClaimKind::alone;
  std::uint64_t execution = 0;
  csl::Ticket ticket = 0;  // join: for the leave
  ReadRefs reads;          // lead, alone: the versions the execution starts from
  csl::TierFence fence;    // lead, alone: the shared tier's fence it starts from
};

// The versions of the records an execution reads, and the shared tier's fence, as they were
// before it started (what a fill's result is stored with).
struct ReadSnapshot {
  ReadRefs reads;
  csl::TierFence fence;
};

// What a led execution's waiters are answered with.
struct Landed {
  enum class Outcome {
    result,  ///< the engine's answer (served to each waiter as `cache`)
    error,   ///< the engine's error, or a non-200 answer: each waiter gets the same
    retry,   ///< the leader was cancelled (its client went): each waiter claims again
  };
  Outcome outcome = Outcome::retry;
  Reply reply;
  Duration cost{0};   // engine time each waiter saved
  csl::EntryRef ref;  // the stored (or already present) entry, for the waiters' producers
};
using LandedPtr = std::shared_ptr<const Landed>;
using InsertPtr = std::shared_ptr<const csl::Insert>;

// The library entry an execution's result becomes (a canonical entry or a fill's shadow).
csl::Insert insert_of(const Hash128& name, const engines::EngineResult& result, ReadRefs reads,
                      EntryRefs producers, csl::Provenance provenance, Duration ttl,
                      csl::TierFence fence = {});

// What an execution of a stage cost, for the cost model that prices fills.
struct CostSample {
  Hash128 stage;  // the stage's fingerprint
  Duration engine_time{0};
  double tokens = 0;  // prompt and completion
  double prompt_tokens = 0;
};
inline CostSample cost_of(const dsl::Stage& stage, const engines::EngineResult& r) {
  return {stage.fingerprint, r.engine_time,
          static_cast<double>(r.usage.prompt_tokens + r.usage.completion_tokens),
          static_cast<double>(r.usage.prompt_tokens)};
}

}  // namespace dynrt::run

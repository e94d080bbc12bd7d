// The branch state machine and its record (paper section 3.3, Figure 6): what one open branch
// owns between the moment its decision point is reached and the moment it settles.
//
//   proposing --propose()--> filling --resolve()--> resolved --settle()--> settled
//
// A branch proposes ranked candidates, admits some of them as fills (each holding a
// reservation in the pricing actor), and records the shadows each fill stores, stage by stage
// down its chain. resolve() applies the selection:
//   - selected, exclusive: the other candidates' running fills are cancelled and their
//     shadows discarded; the winner's stay, still invisible until an exact demand promotes them;
//   - selected, independent: every shadow stays eligible until it expires;
//   - a selection none of the candidates predicted: exclusive discards everything,
//     independent keeps the completed offers;
//   - ambiguous or unreadable: nothing may be promoted, so everything is cancelled and
//     discarded.
// A loser's shadow that arrives after resolution (its fill raced the cancel) is discarded on
// arrival. The branch settles once it is resolved, no fill is running, and the winner's fill
// (if any) has met its demand or the caller gives up waiting (an expiry); the Feedback record
// is what the pricing actor and the statistics learn from.
//
// Pure; single-threaded (the branch actor owns one).
#pragma once

#include "runtime/clock.hpp"
#include "runtime/csl/store.hpp"
#include "runtime/hash.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dynrt::branch {

using BranchId = std::uint64_t;
using FillId = std::uint64_t;

enum class Phase { proposing, filling, resolved, settled };

enum class FillStatus {
  running,    ///< rendering, probing or on the engine
  done,       ///< its chain ended (every stage it could run has a shadow or a hit)
  failed,     ///< an engine error, an unrenderable stage, a refused insert: a miss, no harm
  cancelled,  ///< aborted (an exclusive loser, an unusable selection, shutdown)
};

enum class Outcome {
  pending,      ///< not resolved yet
  selected,     ///< resolved to one of the proposed candidates
  unpredicted,  ///< resolved to a value none of the candidates named
  ambiguous,    ///< the selection matched several different values
  unreadable,   ///< the selection could not be read from the decider's output
  abandoned,    ///< never resolved (the workflow ended or the branch expired first)
};

std::string_view to_string(Phase p);
std::string_view to_string(FillStatus s);
std::string_view to_string(Outcome o);

struct Fill {
  FillId id = 0;
  std::size_t rank = 0;
  std::string candidate;
  std::uint64_t reservation = 0;
  FillStatus status = FillStatus::running;
  std::vector<csl::EntryRef> shadows;  // stage by stage down its chain
  Duration engine_time{0};
  bool loser = false;  // marked by resolve(): anything it still stores is discarded
};

struct Resolution {
  Outcome outcome = Outcome::pending;
  std::optional<std::size_t> selected_rank;  // rank of the selection among the candidates
  std::vector<FillId> cancel;                // running fills to abort now
  std::vector<csl::EntryRef> discard;        // shadows to remove now
};

// What a settled branch reports.
struct Feedback {
  BranchId branch = 0;
  Hash128 coordinate;
  Outcome outcome = Outcome::pending;
  std::string selection;
  std::optional<std::size_t> selected_rank;
  std::size_t proposed = 0;
  std::size_t admitted = 0;
  std::size_t completed = 0;  // fills that ended done
  std::size_t cancelled = 0;
  std::size_t failed = 0;
  bool demanded = false;  // the selected downstream stage was demanded
  bool consumed = false;  // ... and served from this branch's fill
  double saved_ms = 0;    // engine time the consumption saved
  double wait_ms = 0;     // how long the demand waited for the fill
  double fill_ms = 0;     // engine time the fills spent (the speculative cost)
  Duration setup{0};      // proposing time
};

class BranchState {
 public:
  BranchState(BranchId id, const Hash128& coordinate, bool exclusive);

  BranchId id() const { return id_; }
  const Hash128& coordinate() const { return coordinate_; }
  bool exclusive() const { return exclusive_; }
  Phase phase() const { return phase_; }

  // The predictor's ranking; the branch moves to filling (with or without fills).
  void propose(std::vector<std::string> candidates, Duration setup);
  const std::vector<std::string>& candidates() const { return candidates_; }

  // A fill admitted for candidates()[rank].
  void admit(FillId fill, std::size_t rank, std::uint64_t reservation);
  // A fill stored a shadow. False: the fill lost (or the branch promotes nothing) and the
  // caller discards the shadow at once.
  bool stored(FillId fill, const csl::EntryRef& shadow);
  // A fill ended. Returns its reservation the first time (release it), 0 otherwise.
  std::uint64_t finished(FillId fill, FillStatus status, Duration engine_time);

  // Resolve on emission: the decider emitted `selection` before its output ended. For an
  // exclusive branch not yet resolved, the other candidates' fills are then of no use (unless
  // the rest of the output contradicts it); returns the running ones to cancel, and from now on
  // outrun() tells the caller not to start theirs. resolve() still decides what is promoted.
  std::vector<FillId> emitted(const std::string& selection);
  bool outrun(std::size_t rank) const;
  // The rank of the candidate named `selection` when no fill of it is running or done: an
  // emitted winner that may still be filled. nullopt otherwise, or when no candidate names it.
  std::optional<std::size_t> uncovered(const std::string& selection) const;
  // ... and when no candidate names it: the emitted selection becomes a candidate after the
  // predicted ones (which keep their ranks), so that its fill may start before the decider's
  // output ends. Its rank; nullopt unless the branch is filling and `selection` is the one
  // emitted, named by no candidate. The predictor is still judged on the ranks it proposed
  // (Feedback::proposed), where this one is not.
  std::optional<std::size_t> adopt(const std::string& selection);

  Resolution resolve(Outcome outcome, std::string selection);
  // The selected downstream stage was demanded: served from this branch's fill or not.
  void demanded(bool consumed, double saved_ms, double wait_ms);

  // Resolved, no fill running, and nothing left to wait for.
  bool settleable() const;
  // Ends the branch (also when it was never resolved: abandoned). Idempotent.
  Feedback settle();

  const std::vector<Fill>& fills() const { return fills_; }
  std::size_t running() const;
  // The winner's fill, if one was admitted for the selection.
  const Fill* winner() const;
  const std::string& selection() const { return feedback_.selection; }
  Outcome outcome() const { return feedback_.outcome; }

 private:
  Fill* find(FillId fill);

  BranchId id_;
  Hash128 coordinate_;
  bool exclusive_;
  Phase phase_ = Phase::proposing;
  std::vector<std::string> candidates_;
  std::vector<Fill> fills_;
  std::optional<std::string> emitted_;
  Feedback feedback_;
};

}  // namespace dynrt::branch

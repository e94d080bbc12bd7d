#include "run/results.hpp"

namespace dynrt::run {

csl::Insert insert_of(const Hash128& name, const engines::EngineResult& result, ReadRefs reads,
                      EntryRefs producers, csl::Provenance provenance, Duration ttl,
                      csl::TierFence fence) {
  csl::Insert in;
  in.name = name;
  in.bytes = result.body;
  in.usage = {static_cast<std::uint32_t>(result.usage.prompt_tokens),
              static_cast<std::uint32_t>(result.usage.completion_tokens)};
  in.cost = result.engine_time;
  in.reads = std::move(reads);
  in.producers = std::move(producers);
  in.provenance = provenance;
  in.ttl = ttl;
  in.fence = std::move(fence);
  return in;
}

}  // namespace dynrt::run

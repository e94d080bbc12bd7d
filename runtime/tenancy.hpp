// Tenancy: which results a call may be served, and which records a write reaches.
//
// Every call carries a tenant (the gateway's keys name it; an embedder sets Caller::tenant;
// the empty tenant is the default, and with no keys configured every call has it). Two rules
// keep tenants apart, both applied where names and record keys are made, so the library,
// coalescing and fills need no notion of tenants of their own:
//
//   - Names. A tenant-scoped stage's reuse name is mixed with the tenant, so one tenant's
//     entries, shadows and in-flight executions are invisible to every other; a stage declared
//     `share: global` keeps the plain name, and its results serve every tenant. The default
//     tenant's names are the plain names, so a single-tenant deployment sees the same names as
//     before tenants existed.
//   - Records. A read of record `k` is recorded under two record keys: the reader's scope (its
//     tenant's, or the shared scope for a global stage) and the all-scopes key. A tenant's write
//     of `k` bumps its own scope and the shared scope (a shared result that read `k` may have
//     read what the tenant just changed); a write everywhere (an admin's, or an embedder's
//     plain Runtime::write) bumps the all-scopes key, which every reader of `k` recorded.
//     So a tenant's write never invalidates another tenant's results, and freshness holds for
//     every reader of `k` whichever scope wrote it.
//
// Pure; thread-safe.
#pragma once

#include "runtime/hash.hpp"

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dynrt::tenancy {

// The name under which a result of a tenant-scoped stage is stored and found for `tenant`:
// `name` itself for the default (empty) tenant.
Hash128 tenant_name(const Hash128& name, std::string_view tenant);

// The record keys an execution reads, for a reader in `tenant` (ignored when `shared`, the
// stage is `share: global`): two per key, see above.
std::vector<std::string> read_records(std::span<const std::string> keys, std::string_view tenant,
                                      bool shared);

// Who a write reaches: one tenant (and the shared scope), or every scope.
struct WriteScope {
  bool everywhere = true;
  std::string tenant;  // when not everywhere
  static WriteScope all() { return {}; }
  static WriteScope of(std::string tenant) { return {false, std::move(tenant)}; }
};

// The record keys a write of `keys` bumps.
std::vector<std::string> write_records(std::span<const std::string> keys, const WriteScope& scope);

}  // namespace dynrt::tenancy

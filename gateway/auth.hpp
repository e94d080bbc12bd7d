// API keys, scopes, tenants and per-key limits: who may use `dynrt serve`, and for what.
//
// A key file (or the `auth` section of the --config file) lists the keys:
//
//   defaults:                 # limits for keys that set none of their own (all optional)
//     rps: 50                 # requests per second, a token bucket ...
//     burst: 100              # ... holding this many (default: rps, at least 1)
//     max_live_runs: 1000     # live workflow runs the key may hold (0: no limit of its own)
//     fill_share: 0.5         # fraction of the fill budget its tenant's speculation may hold
//   keys:
//     - name: acme-app        # for logs and metrics; the key itself never appears anywhere
//       key_sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//       tenant: acme
//       scopes: [infer]
//       limits: {rps: 20}
//     - name: ops
//       key_env: DYNRT_OPS_KEY  # the key itself, read from the environment at load
//       tenant: ops
//       scopes: [admin]
//
// (A bare YAML list of keys is accepted too.) Scopes: `infer` (chat, completions, tools,
// models), `write` (/v1/dynrt/writes, within the key's tenant), `metrics` (/metrics), `admin`
// (everything, and writes that reach every tenant). A key is stored only as its SHA-256; a
// presented key is hashed and compared with every configured hash in constant time.
//
// KeyRing parsing and TokenBucket are pure; Authenticator is thread-safe (the I/O threads
// authenticate while SIGHUP replaces the ring).
#pragma once

#include "runtime/clock.hpp"
#include "runtime/expected.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace YAML {
class Node;
}

namespace dynrt::gateway {

enum Scope : unsigned {
  kScopeInfer = 1u << 0,
  kScopeWrite = 1u << 1,
  kScopeMetrics = 1u << 2,
  kScopeAdmin = 1u << 3,  // implies every other scope
};
std::string_view scope_name(Scope s);

struct KeyLimits {
  double rps = 0;    // 0: no rate limit
  double burst = 0;  // tokens the bucket holds; 0: rps (at least 1)
  std::size_t max_live_runs = 0;
  double fill_share = 1.0;
};

using Digest = std::array<std::uint8_t, 32>;
Digest sha256(std::string_view data);
std::string to_hex(const Digest& digest);  // 64 lowercase hexadecimal digits

struct ApiKey {
  std::string name;
  Digest digest{};
  std::string tenant;
  unsigned scopes = 0;
  KeyLimits limits;
  bool allows(Scope s) const { return (scopes & (s | kScopeAdmin)) != 0; }
};

struct KeyRing {
  std::vector<ApiKey> keys;
  // The key whose SHA-256 is `digest`, compared with every key in constant time; null if none.
  const ApiKey* find(const Digest& digest) const;
};

// Reads a key file's text (`source` names it in errors, which are "source:line:col: what").
// The environment is read for `key_env` entries. Refused: a missing or duplicate name, a key
// given both or neither way, a digest that is not 64 hex digits, an unset or empty key_env, a
// tenant outside [A-Za-z0-9._-]{1,64}, an unknown scope or field, a limit out of range, two
// entries with the same key.
Expected<KeyRing> parse_keys(std::string_view text, std::string_view source);
Expected<KeyRing> parse_keys(const YAML::Node& node, std::string_view source);
// At most kMaxKeyFileBytes are read (a pipe works: `--keys <(vault read ...)`).
inline constexpr std::size_t kMaxKeyFileBytes = std::size_t{1} << 20;
Expected<KeyRing> load_keys_file(const std::string& path);

// A token bucket: `rate` tokens a second up to `capacity`; starts full. Pure: time is passed in.
class TokenBucket {
 public:
  TokenBucket(double rate, double capacity, TimePoint now);
  // Takes a token if there is one; otherwise says how long until there is.
  bool take(TimePoint now, Duration* wait = nullptr);
  void reconfigure(double rate, double capacity);

 private:
  void refill(TimePoint now);
  double rate_;
  double capacity_;
  double tokens_;
  TimePoint last_;
};

struct AuthResult {
  enum class Outcome { ok, unauthenticated, forbidden, rate_limited };
  Outcome outcome = Outcome::ok;
  std::string message;      // for the error body; never contains the key
  std::string retry_after;  // rate_limited: whole seconds
  std::string tenant;       // ok
  std::string key_name;     // ok, forbidden, rate_limited
  KeyLimits limits;         // ok
  bool admin = false;       // ok
};

// Decides every request: enabled() once keys are configured; until then everything is allowed
// (one tenant, no limits), as before keys existed.
class Authenticator {
 public:
  explicit Authenticator(std::optional<KeyRing> ring = std::nullopt,
                         const Clock& clock = default_clock());
  bool enabled() const;
  // `authorization`: the request's Authorization header (empty if none); `needed`: the scope
  // of the route. Checks the key, then its scope, then its rate.
  AuthResult check(std::string_view authorization, Scope needed);
  // A new ring (SIGHUP): keys still present keep their buckets.
  void replace(KeyRing ring);
  std::size_t key_count() const;

  static const Clock& default_clock();

 private:
  const Clock& clock_;
  mutable std::mutex mutex_;
  std::shared_ptr<const KeyRing> ring_;                   // null: no keys configured
  std::unordered_map<std::string, TokenBucket> buckets_;  // by key name
};

}  // namespace dynrt::gateway

#include "gateway/auth.hpp"

#include "engines/read_file.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>

namespace dynrt::gateway {

std::string_view scope_name(Scope s) {
  switch (s) {
    case kScopeInfer:
      return "infer";
    case kScopeWrite:
      return "write";
    case kScopeMetrics:
      return "metrics";
    case kScopeAdmin:
      return "admin";
  }
  return "?";
}

Digest sha256(std::string_view data) {
  Digest out{};
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), out.data(), &n, EVP_sha256(), nullptr);
  return out;
}

std::string to_hex(const Digest& digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (const auto b : digest) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

const ApiKey* KeyRing::find(const Digest& digest) const {
  // Every key is compared, each in constant time, so the time taken says nothing about which
  // key (or how much of one) matched.
  const ApiKey* found = nullptr;
  for (const auto& k : keys)
    if (CRYPTO_memcmp(k.digest.data(), digest.data(), digest.size()) == 0) found = &k;
  return found;
}

namespace {

std::string where(std::string_view source, const YAML::Node& n) {
  std::ostringstream out;
  out << source;
  if (n.Mark().line >= 0) out << ":" << n.Mark().line + 1 << ":" << n.Mark().column + 1;
  return out.str();
}

Error fail(std::string_view source, const YAML::Node& n, const std::string& what) {
  return make_error(where(source, n) + ": " + what);
}

std::optional<Digest> parse_hex(std::string_view hex) {
  if (hex.size() != 64) return std::nullopt;
  Digest d{};
  for (std::size_t i = 0; i < 32; ++i) {
    auto nibble = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    d[i] = static_cast<std::uint8_t>(hi * 16 + lo);
  }
  return d;
}

bool valid_tenant(std::string_view t) {
  return !t.empty() && t.size() <= 64 && std::all_of(t.begin(), t.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

// Reads `limits` (or `defaults`) over `base`.
std::optional<Error> parse_limits(std::string_view source, const YAML::Node& n, KeyLimits& out) {
  if (!n.IsMap()) return fail(source, n, "limits must be a mapping");
  for (const auto& kv : n) {
    if (!kv.first.IsScalar()) return fail(source, kv.first, "a limit's name must be a word");
    const auto field = kv.first.as<std::string>();
    const auto& v = kv.second;
    double x = 0;
    try {
      x = v.as<double>();
    } catch (const YAML::Exception&) {
      return fail(source, v, "limit '" + field + "' must be a number");
    }
    if (!std::isfinite(x) || x < 0) return fail(source, v, "limit '" + field + "' must be >= 0");
    if (field == "rps") {
      out.rps = x;
    } else if (field == "burst") {
      out.burst = x;
    } else if (field == "max_live_runs") {
      if (x != std::floor(x)) return fail(source, v, "max_live_runs must be a whole number");
      out.max_live_runs = static_cast<std::size_t>(x);
    } else if (field == "fill_share") {
      if (x <= 0 || x > 1) return fail(source, v, "fill_share must be in (0, 1]");
      out.fill_share = x;
    } else {
      return fail(source, kv.first,
                  "unknown limit '" + field + "' (rps, burst, max_live_runs, fill_share)");
    }
  }
  return std::nullopt;
}

}  // namespace

Expected<KeyRing> parse_keys(const YAML::Node& root, std::string_view source) {
  KeyRing ring;
  KeyLimits defaults;
  YAML::Node list;
  try {
    if (root.IsSequence()) {
      list = root;
    } else if (root.IsMap()) {
      for (const auto& kv : root) {
        if (!kv.first.IsScalar()) return fail(source, kv.first, "a field name must be a word");
        const auto field = kv.first.as<std::string>();
        if (field != "keys" && field != "defaults")
          return fail(source, kv.first, "unknown field '" + field + "' (keys, defaults)");
      }
      if (root["defaults"])
        if (auto e = parse_limits(source, root["defaults"], defaults)) return *e;
      list = root["keys"];
      if (!list || !list.IsSequence()) return fail(source, root, "'keys' must be a list of keys");
    } else {
      return make_error(std::string(source) +
                        ": a key file is a list of keys, or a mapping with 'keys' and 'defaults'");
    }
    std::set<std::string> names;
    for (const auto& k : list) {
      if (!k.IsMap())
        return fail(source, k,
                    "each key is a mapping {name, key_sha256 | key_env, "
                    "tenant, scopes}");
      ApiKey key;
      key.limits = defaults;
      bool has_digest = false, has_env = false;
      for (const auto& kv : k) {
        // A list or mapping where one value belongs is named here (as<std::string>() would
        // only say "bad conversion").
        if (!kv.first.IsScalar()) return fail(source, kv.first, "a field name must be a word");
        const auto field = kv.first.as<std::string>();
        const auto& v = kv.second;
        if (field != "scopes" && field != "limits" && !v.IsScalar())
          return fail(source, v, field + " must be a single value, not a list or mapping");
        if (field == "name") {
          key.name = v.as<std::string>();
        } else if (field == "key_sha256") {
          const auto d = parse_hex(v.as<std::string>());
          if (!d)
            return fail(source, v,
                        "key_sha256 must be 64 hexadecimal digits (the SHA-256 "
                        "of the key, e.g. from `printf %s KEY | sha256sum`)");
          key.digest = *d;
          has_digest = true;
        } else if (field == "key_env") {
          const auto var = v.as<std::string>();
          const char* value = std::getenv(var.c_str());
          if (!value || !*value)
            return fail(source, v, "key_env: the environment variable " + var + " is not set");
          key.digest = sha256(value);
          has_env = true;
        } else if (field == "tenant") {
          key.tenant = v.as<std::string>();
          if (!valid_tenant(key.tenant))
            return fail(source, v, "tenant must be 1 to 64 characters of [A-Za-z0-9._-]");
        } else if (field == "scopes") {
          if (!v.IsSequence() || v.size() == 0)
            return fail(source, v,
                        "scopes must be a non-empty list of infer, write, metrics, admin");
          for (const auto& s : v) {
            if (!s.IsScalar())
              return fail(source, s, "scopes must be a list of infer, write, metrics, admin");
            const auto name = s.as<std::string>();
            if (name == "infer")
              key.scopes |= kScopeInfer;
            else if (name == "write")
              key.scopes |= kScopeWrite;
            else if (name == "metrics")
              key.scopes |= kScopeMetrics;
            else if (name == "admin")
              key.scopes |= kScopeAdmin;
            else
              return fail(source, s, "unknown scope '" + name + "' (infer, write, metrics, admin)");
          }
        } else if (field == "limits") {
          if (auto e = parse_limits(source, v, key.limits)) return *e;
        } else {
          return fail(
              source, kv.first,
              "unknown field '" + field + "' (name, key_sha256, key_env, tenant, scopes, limits)");
        }
      }
      if (key.name.empty()) return fail(source, k, "a key needs a name");
      if (!names.insert(key.name).second)
        return fail(source, k, "two keys are named '" + key.name + "'");
      if (has_digest == has_env)
        return fail(source, k,
                    "key '" + key.name + "' needs exactly one of key_sha256 and key_env");
      if (key.tenant.empty()) return fail(source, k, "key '" + key.name + "' needs a tenant");
      if (key.scopes == 0) return fail(source, k, "key '" + key.name + "' needs scopes");
      if (ring.find(key.digest))
        return fail(source, k, "key '" + key.name + "' is the same key as another entry");
      ring.keys.push_back(std::move(key));
    }
  } catch (const YAML::Exception& e) {
    std::ostringstream out;
    out << source << ":" << e.mark.line + 1 << ":" << e.mark.column + 1 << ": " << e.msg;
    return make_error(out.str());
  }
  if (ring.keys.empty()) return make_error(std::string(source) + ": no keys");
  return ring;
}

Expected<KeyRing> parse_keys(std::string_view text, std::string_view source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    std::ostringstream out;
    out << source << ":" << e.mark.line + 1 << ":" << e.mark.column + 1 << ": " << e.msg;
    return make_error(out.str());
  }
  return parse_keys(root, source);
}

Expected<KeyRing> load_keys_file(const std::string& path) {
  const auto text = engines::read_bounded(path, kMaxKeyFileBytes, "key file");
  if (!text) return make_error(text.error().message);
  return parse_keys(*text, path);
}

// -- token bucket ------------------------------------------------------------------------------

TokenBucket::TokenBucket(double rate, double capacity, TimePoint now)
    : rate_(rate), capacity_(std::max(1.0, capacity)), tokens_(capacity_), last_(now) {}

void TokenBucket::reconfigure(double rate, double capacity) {
  rate_ = rate;
  capacity_ = std::max(1.0, capacity);
  tokens_ = std::min(tokens_, capacity_);
}

void TokenBucket::refill(TimePoint now) {
  if (now <= last_) return;
  const double seconds = std::chrono::duration<double>(now - last_).count();
  tokens_ = std::min(capacity_, tokens_ + seconds * rate_);
  last_ = now;
}

bool TokenBucket::take(TimePoint now, Duration* wait) {
  refill(now);
  if (tokens_ >= 1.0) {
    tokens_ -= 1.0;
    return true;
  }
  if (wait)
    *wait = rate_ > 0 ? std::chrono::duration_cast<Duration>(
                            std::chrono::duration<double>((1.0 - tokens_) / rate_))
                      : Duration::max();
  return false;
}

// -- authenticator -----------------------------------------------------------------------------

namespace {
double capacity_of(const KeyLimits& l) {
  return l.burst > 0 ? l.burst : std::max(1.0, std::ceil(l.rps));
}
}  // namespace

const Clock& Authenticator::default_clock() {
  static const SteadyClock clock;
  return clock;
}

Authenticator::Authenticator(std::optional<KeyRing> ring, const Clock& clock) : clock_(clock) {
  if (ring) replace(std::move(*ring));
}

bool Authenticator::enabled() const {
  std::lock_guard lock(mutex_);
  return ring_ != nullptr;
}

std::size_t Authenticator::key_count() const {
  std::lock_guard lock(mutex_);
  return ring_ ? ring_->keys.size() : 0;
}

void Authenticator::replace(KeyRing ring) {
  auto next = std::make_shared<const KeyRing>(std::move(ring));
  std::lock_guard lock(mutex_);
  std::unordered_map<std::string, TokenBucket> kept;
  for (const auto& k : next->keys) {
    if (k.limits.rps <= 0) continue;
    auto it = buckets_.find(k.name);
    if (it != buckets_.end()) {
      it->second.reconfigure(k.limits.rps, capacity_of(k.limits));
      kept.emplace(k.name, it->second);
    } else {
      kept.emplace(k.name, TokenBucket(k.limits.rps, capacity_of(k.limits), clock_.now()));
    }
  }
  buckets_ = std::move(kept);
  ring_ = std::move(next);
}

AuthResult Authenticator::check(std::string_view authorization, Scope needed) {
  AuthResult out;
  std::shared_ptr<const KeyRing> ring;
  {
    std::lock_guard lock(mutex_);
    ring = ring_;
  }
  if (!ring) {
    out.admin = true;  // no keys: one tenant, everything allowed
    return out;
  }
  constexpr std::string_view kBearer = "Bearer ";
  std::string_view presented;
  if (authorization.size() > kBearer.size()) {
    std::string scheme(authorization.substr(0, kBearer.size()));
    std::transform(scheme.begin(), scheme.end(), scheme.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (scheme == "bearer ") presented = authorization.substr(kBearer.size());
  }
  while (!presented.empty() && presented.front() == ' ')
    presented.remove_prefix(1);
  while (!presented.empty() && presented.back() == ' ')
    presented.remove_suffix(1);
  if (presented.empty()) {
    out.outcome = AuthResult::Outcome::unauthenticated;
    out.message = authorization.empty() ? "no API key: send one as 'Authorization: Bearer <key>'"
                                        : "the Authorization header is not 'Bearer <key>'";
    return out;
  }
  const ApiKey* key = ring->find(sha256(presented));
  if (!key) {
    out.outcome = AuthResult::Outcome::unauthenticated;
    out.message = "the API key is not valid";
    return out;
  }
  out.key_name = key->name;
  if (!key->allows(needed)) {
    out.outcome = AuthResult::Outcome::forbidden;
    out.message = "the key '" + key->name + "' does not have the '" +
                  std::string(scope_name(needed)) + "' scope this route needs";
    return out;
  }
  if (key->limits.rps > 0) {
    std::lock_guard lock(mutex_);
    const auto it = buckets_.find(key->name);
    Duration wait{};
    if (it != buckets_.end() && !it->second.take(clock_.now(), &wait)) {
      out.outcome = AuthResult::Outcome::rate_limited;
      const auto s = std::chrono::ceil<std::chrono::seconds>(wait).count();
      out.retry_after = std::to_string(std::max<std::int64_t>(1, s));
      std::ostringstream msg;
      msg << "the key '" << key->name << "' is over its limit of " << key->limits.rps
          << " requests per second";
      out.message = msg.str();
      return out;
    }
  }
  out.tenant = key->tenant;
  out.limits = key->limits;
  out.admin = (key->scopes & kScopeAdmin) != 0;
  return out;
}

}  // namespace dynrt::gateway

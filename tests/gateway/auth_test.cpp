// Key files, token buckets and the authenticator's decisions (gateway/auth.hpp), without
// sockets: every refusal of a key file names its position, keys are found only by their hash,
// and a bucket refills at its rate on an injected clock.
#include "gateway/auth.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

namespace dynrt::gateway {
namespace {

TEST(Sha256, IsTheStandardDigest) {
  EXPECT_EQ(to_hex(sha256("test")),
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08");
}

TEST(KeyFile, ReadsKeysTenantsScopesAndLimitsWithDefaults) {
  ::setenv("DYNRT_TEST_OPS_KEY", "sk-ops", 1);
  const auto ring = parse_keys(
      "defaults: {rps: 5, max_live_runs: 10, fill_share: 0.5}\n"
      "keys:\n"
      "  - name: app\n"
      "    key_sha256: " +
          to_hex(sha256("sk-app")) +
          "\n"
          "    tenant: acme\n"
          "    scopes: [infer, write]\n"
          "    limits: {rps: 20, burst: 40}\n"
          "  - {name: ops, key_env: DYNRT_TEST_OPS_KEY, tenant: ops,"
          " scopes: [admin]}\n",
      "keys.yaml");
  ASSERT_TRUE(ring.ok()) << ring.error().message;
  ASSERT_EQ(ring->keys.size(), 2u);
  const ApiKey* app = ring->find(sha256("sk-app"));
  ASSERT_NE(app, nullptr);
  EXPECT_EQ(app->name, "app");
  EXPECT_EQ(app->tenant, "acme");
  EXPECT_TRUE(app->allows(kScopeInfer));
  EXPECT_TRUE(app->allows(kScopeWrite));
  EXPECT_FALSE(app->allows(kScopeMetrics));
  EXPECT_EQ(app->limits.rps, 20);
  EXPECT_EQ(app->limits.burst, 40);
  EXPECT_EQ(app->limits.max_live_runs, 10u) << "the default where the key sets none";
  EXPECT_EQ(app->limits.fill_share, 0.5);
  const ApiKey* ops = ring->find(sha256("sk-ops"));
  ASSERT_NE(ops, nullptr);
  EXPECT_TRUE(ops->allows(kScopeMetrics)) << "admin implies every scope";
  EXPECT_EQ(ring->find(sha256("sk-other")), nullptr);
  // A bare list is a key file too.
  EXPECT_TRUE(parse_keys("- {name: a, key_sha256: " + to_hex(sha256("k")) +
                             ", tenant: t, scopes: [infer]}\n",
                         "list.yaml")
                  .ok());
}

TEST(KeyFile, EveryMistakeIsRefusedWithItsPosition) {
  const std::string h = to_hex(sha256("k"));
  ::unsetenv("DYNRT_TEST_UNSET_KEY");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"keys:\n  - {key_sha256: " + h + ", tenant: t, scopes: [infer]}\n",
       "keys.yaml:2:5: a key needs a name"},
      {"keys:\n  - {name: a, key_sha256: abc, tenant: t, scopes: [infer]}\n",
       "keys.yaml:2:27: key_sha256 must be 64 hexadecimal digits"},
      {"keys:\n  - {name: a, tenant: t, scopes: [infer]}\n",
       "keys.yaml:2:5: key 'a' needs exactly one of key_sha256 and key_env"},
      {"keys:\n  - {name: a, key_env: DYNRT_TEST_UNSET_KEY, tenant: t, scopes: [infer]}\n",
       "keys.yaml:2:24: key_env: the environment variable DYNRT_TEST_UNSET_KEY is not set"},
      {"keys:\n  - {name: a, key_sha256: " + h + ", tenant: 'a b', scopes: [infer]}\n",
       "tenant must be 1 to 64 characters"},
      {"keys:\n  - {name: a, key_sha256: " + h + ", tenant: t, scopes: [read]}\n",
       "unknown scope 'read'"},
      {"keys:\n  - {name: a, key_sha256: " + h + ", tenant: t, scopes: [infer], colour: red}\n",
       "unknown field 'colour'"},
      {"keys:\n  - {name: a, key_sha256: " + h +
           ", tenant: t, scopes: [infer]}\n"
           "  - {name: b, key_sha256: " +
           h + ", tenant: u, scopes: [infer]}\n",
       "keys.yaml:3:5: key 'b' is the same key as another entry"},
      {"keys:\n  - {name: a, key_sha256: " + h +
           ", tenant: t, scopes: [infer],"
           " limits: {fill_share: 2}}\n",
       "fill_share must be in (0, 1]"},
      {"keys:\n  - {name: a, key_sha256: " + h + ", tenant: [t], scopes: [infer]}\n",
       "keys.yaml:2:101: tenant must be a single value, not a list or mapping"},
      {"keys:\n  - {name: {x: 1}, key_sha256: " + h + ", tenant: t, scopes: [infer]}\n",
       "keys.yaml:2:12: name must be a single value"},
      {"keys:\n  - {name: a, key_sha256: " + h + ", tenant: t, scopes: [[infer]]}\n",
       "scopes must be a list of infer, write, metrics, admin"},
      {"keys:\n  - {[1]: a}\n", "keys.yaml:2:6: a field name must be a word"},
      {"keys: []\n", "no keys"},
      {"keys: [\n", "keys.yaml:2:1:"},
  };
  for (const auto& [text, expected] : cases) {
    const auto ring = parse_keys(text, "keys.yaml");
    ASSERT_FALSE(ring.ok()) << text;
    EXPECT_NE(ring.error().message.find(expected), std::string::npos)
        << "got: " << ring.error().message << "\nwanted: " << expected;
    EXPECT_EQ(ring.error().message.find("sk-"), std::string::npos);
  }
}

TEST(TokenBucket, RefillsAtItsRateUpToItsCapacity) {
  const TimePoint t0{};
  TokenBucket b(2.0, 3.0, t0);  // 2 a second, 3 at most
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(b.take(t0));
  Duration wait{};
  EXPECT_FALSE(b.take(t0, &wait));
  EXPECT_EQ(wait, std::chrono::milliseconds(500));
  EXPECT_FALSE(b.take(t0 + std::chrono::milliseconds(499)));
  EXPECT_TRUE(b.take(t0 + std::chrono::milliseconds(500)));
  // A long quiet refills to the capacity, no more.
  const TimePoint later = t0 + std::chrono::seconds(100);
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(b.take(later));
  EXPECT_FALSE(b.take(later));
}

TEST(Authenticator, DecidesKeyThenScopeThenRate) {
  ManualClock clock;
  auto ring = parse_keys("keys:\n  - {name: a, key_sha256: " + to_hex(sha256("sk-a")) +
                             ", tenant: acme, scopes: [infer], limits: {rps: 1, burst: 1}}\n",
                         "k.yaml");
  ASSERT_TRUE(ring.ok());
  Authenticator auth(std::move(*ring), clock);
  EXPECT_TRUE(auth.enabled());
  EXPECT_EQ(auth.check("", kScopeInfer).outcome, AuthResult::Outcome::unauthenticated);
  EXPECT_EQ(auth.check("Bearer sk-b", kScopeInfer).outcome, AuthResult::Outcome::unauthenticated);
  EXPECT_EQ(auth.check("Bearer sk-a", kScopeMetrics).outcome, AuthResult::Outcome::forbidden);
  const auto ok = auth.check("bearer  sk-a", kScopeInfer);  // the scheme is case-insensitive
  ASSERT_EQ(ok.outcome, AuthResult::Outcome::ok);
  EXPECT_EQ(ok.tenant, "acme");
  EXPECT_EQ(ok.key_name, "a");
  EXPECT_FALSE(ok.admin);
  const auto limited = auth.check("Bearer sk-a", kScopeInfer);
  EXPECT_EQ(limited.outcome, AuthResult::Outcome::rate_limited);
  EXPECT_EQ(limited.retry_after, "1");
  // A reload that keeps the key keeps its bucket (still empty)...
  auto again = parse_keys("keys:\n  - {name: a, key_sha256: " + to_hex(sha256("sk-a")) +
                              ", tenant: acme, scopes: [infer], limits: {rps: 1, burst: 1}}\n",
                          "k.yaml");
  auth.replace(std::move(*again));
  EXPECT_EQ(auth.check("Bearer sk-a", kScopeInfer).outcome, AuthResult::Outcome::rate_limited);
  // ... and a second later there is a token again.
  clock.advance(std::chrono::seconds(1));
  EXPECT_EQ(auth.check("Bearer sk-a", kScopeInfer).outcome, AuthResult::Outcome::ok);
  // No keys: everything is allowed, as one tenant.
  Authenticator open;
  EXPECT_FALSE(open.enabled());
  const auto anyone = open.check("", kScopeWrite);
  EXPECT_EQ(anyone.outcome, AuthResult::Outcome::ok);
  EXPECT_TRUE(anyone.admin);
  EXPECT_EQ(anyone.tenant, "");
}

}  // namespace
}  // namespace dynrt::gateway

#include "runtime/hash.hpp"

#include <gtest/gtest.h>

#include <unordered_set>

namespace dynrt {
namespace {

TEST(Hash128, HexRoundTrips) {
  const Hash128 h = xxh3_128("dynrt");
  const std::string hex = h.hex();
  ASSERT_EQ(hex.size(), 32u);
  EXPECT_EQ(Hash128::from_hex(hex), h);
  EXPECT_EQ(Hash128::from_hex("0123456789abcdefFEDCBA9876543210")->hex(),
            "0123456789abcdeffedcba9876543210");
}

TEST(Hash128, FromHexRejectsAnythingElse) {
  EXPECT_FALSE(Hash128::from_hex(""));
  EXPECT_FALSE(Hash128::from_hex("0123"));
  EXPECT_FALSE(Hash128::from_hex("g123456789abcdef0123456789abcdef"));
  EXPECT_FALSE(Hash128::from_hex("0123456789abcdef0123456789abcdef0"));
}

TEST(Hash128, KnownVectorOfTheEmptyInput) {
  // XXH3-128 of no bytes, seed 0 (xxHash's own test vectors).
  EXPECT_EQ(xxh3_128("").hex(), "99aa06d3014798d86001c324468d497f");
}

TEST(Hash128, DistinctInputsGiveDistinctHashes) {
  std::unordered_set<Hash128> seen;
  for (int i = 0; i < 10000; ++i)
    EXPECT_TRUE(seen.insert(xxh3_128(std::to_string(i))).second);
}

TEST(Hasher128, PartBoundariesArePartOfTheHash) {
  Hasher128 a;
  a.add("ab").add("c");
  Hasher128 b;
  b.add("a").add("bc");
  Hasher128 c;
  c.add("abc");
  EXPECT_NE(a.finish(), b.finish());
  EXPECT_NE(a.finish(), c.finish());
  EXPECT_NE(c.finish(), xxh3_128("abc"));  // the length prefix is hashed too
}

TEST(Hasher128, IsDeterministicAndFinishDoesNotConsume) {
  Hasher128 a;
  a.add("x").add(xxh3_128("y"));
  Hasher128 b;
  b.add("x").add(xxh3_128("y"));
  EXPECT_EQ(a.finish(), b.finish());
  EXPECT_EQ(a.finish(), a.finish());
}

}  // namespace
}  // namespace dynrt

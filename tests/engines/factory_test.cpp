// Engines from their description: a URL that cannot name a server is refused with what is wrong
// with it, before anything starts, and never echoes credentials.
#include "engines/factory.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace dynrt::engines {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string refusal(const std::string& url) {
  EngineSpec spec;
  spec.url = url;
  auto e = make_engine(spec, SimSpec{});
  return e ? std::string() : e.error().message;
}

TEST(EngineFactory, ABaseUrlMakesAnEngine) {
  for (const char* url :
       {"http://vllm:8000", "http://vllm:8000/", "http://vllm:8000/v1",
        "https://engine.example.com", "http://[::1]:8000", "sim", "http://a:8000,http://b:8000"})
    EXPECT_EQ(refusal(url), "") << url;
}

TEST(EngineFactory, AUrlThatNamesNoServerIsRefused) {
  EXPECT_THAT(refusal("http://"), HasSubstr("No host part"));
  EXPECT_THAT(refusal("http://:8000"), HasSubstr("No host part"));
  EXPECT_THAT(refusal("https://"), HasSubstr("is not a URL"));
  EXPECT_THAT(refusal("http://vllm:99999"), HasSubstr("Port number"));
  EXPECT_THAT(refusal("http://vllm:http"), HasSubstr("Port number"));
  EXPECT_THAT(refusal("http://vllm:0"), HasSubstr("port 0 cannot be connected to"));
  EXPECT_THAT(refusal("http://vllm:8000/v1?model=x"), HasSubstr("without a query or fragment"));
  EXPECT_THAT(refusal("http://vllm:8000#top"), HasSubstr("without a query or fragment"));
  EXPECT_THAT(refusal("ftp://vllm"), HasSubstr("neither sim nor an http"));
  // In a pool, the replica at fault is named.
  EXPECT_THAT(refusal("http://a:8000,http://:8001"), HasSubstr("\"http://:8001\""));
}

TEST(EngineFactory, CredentialsInTheUrlAreRefusedWithoutBeingEchoed) {
  const auto m = refusal("http://admin:s3cret@vllm:8000/v1");
  EXPECT_THAT(m, HasSubstr("\"http://...@vllm:8000/v1\""));
  EXPECT_THAT(m, HasSubstr("api_key"));
  EXPECT_THAT(m, Not(HasSubstr("s3cret")));
  EXPECT_THAT(m, Not(HasSubstr("admin")));
  EXPECT_THAT(refusal("http://a:p@ss@vllm:8000"), Not(HasSubstr("ss@")));
  const auto pool = refusal("http://a:8000,http://u:pw@b:8000,http://u:pw@b:8000");
  EXPECT_THAT(pool, HasSubstr("http://...@b:8000 is listed twice"));
  EXPECT_THAT(pool, Not(HasSubstr("pw")));
}

}  // namespace
}  // namespace dynrt::engines

// Tool engines: the built-in versioned corpus, and a tool behind a URL.
#include "engines/read_file.hpp"
#include "engines/tools/corpus.hpp"
#include "engines/tools/http_tool.hpp"
#include "faulty_server.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <future>

namespace dynrt::engines {
namespace {

using nlohmann::json;

ToolOutcome call(ToolEngine& tool, const std::string& name, json args) {
  std::promise<ToolOutcome> p;
  auto f = p.get_future();
  tool.call(ToolCall{name, std::move(args)}, [&](ToolOutcome r) { p.set_value(std::move(r)); });
  return f.get();
}

std::shared_ptr<Corpus> corpus() {
  auto c = *Corpus::from_json(json::parse(R"([
    {"key": "corpus:Oslo", "text": "[[Oslo]] is the capital of [[Norway]]."},
    {"key": "corpus:Bergen", "text": "[[Bergen]] is a city in western [[Norway]], rainy."},
    {"key": "kb:history:Oslo", "text": "Oslo was founded around 1040."}
  ])"));
  c->add_tool("retrieve", {Corpus::Kind::lookup, "corpus:{{entity}}"});
  c->add_tool("kb_search", {Corpus::Kind::lookup, "kb:{{collection}}:{{entity}}"});
  c->add_tool("search", {Corpus::Kind::search, "corpus:"});
  c->add_tool("edit", {Corpus::Kind::write, "corpus:{{entity}}"});
  return c;
}

TEST(Corpus, LookupRecordsWhatItRead) {
  auto c = corpus();
  const auto r = call(*c, "retrieve", {{"entity", "Oslo"}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->output["passage"], "[[Oslo]] is the capital of [[Norway]].");
  EXPECT_EQ(r->reads, (std::vector<ToolRead>{{"corpus:Oslo", 1}}));
  const auto kb = call(*c, "kb_search", {{"collection", "history"}, {"entity", "Oslo"}});
  EXPECT_EQ(kb->reads, (std::vector<ToolRead>{{"kb:history:Oslo", 1}}));
  const auto missing = call(*c, "retrieve", {{"entity", "Atlantis"}});
  EXPECT_FALSE(missing->output["found"].get<bool>());
  EXPECT_EQ(missing->reads, (std::vector<ToolRead>{{"corpus:Atlantis", 0}}));  // absence counts
}

TEST(Corpus, WritesBumpVersions) {
  auto c = corpus();
  const auto w = call(*c, "edit", {{"entity", "Oslo"}, {"text", "Oslo, updated."}});
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->writes, (std::vector<std::string>{"corpus:Oslo"}));
  EXPECT_EQ(c->version("corpus:Oslo"), 2u);
  const auto r = call(*c, "retrieve", {{"entity", "Oslo"}});
  EXPECT_EQ(r->output["passage"], "Oslo, updated.");
  EXPECT_EQ(r->reads[0].version, 2u);
}

TEST(Corpus, SearchRanksByQueryWordsAndReadsWhatItReturns) {
  auto c = corpus();
  const auto r = call(*c, "search", {{"query", "rainy city in Norway"}, {"k", 1}});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->output["results"].size(), 1u);
  EXPECT_EQ(r->output["results"][0]["key"], "corpus:Bergen");
  EXPECT_EQ(r->reads, (std::vector<ToolRead>{{"corpus:Bergen", 1}}));
}

// The operator's files are read whole but bounded: a device that never ends is refused at the
// limit, not read until memory runs out; a folder and a missing file are named.
TEST(ReadBounded, ReadsUpToTheLimitAndNamesWhatItRefuses) {
  const std::string dir = ::testing::TempDir() + "read_bounded";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/data";
  std::ofstream(path) << "0123456789";
  EXPECT_EQ(read_bounded(path, 10, "script").value(), "0123456789");
  EXPECT_EQ(read_bounded(path, 9, "script").error().message,
            "the script " + path + " is over 9 bytes");
  EXPECT_EQ(read_bounded(dir, 10, "corpus").error().message,
            "the corpus " + dir + " is a folder, not a file");
  EXPECT_EQ(read_bounded(dir + "/none", 10, "key file").error().message,
            "cannot read the key file " + dir + "/none: No such file or directory");
  EXPECT_EQ(read_bounded("/dev/zero", 1000, "script").error().message,
            "the script /dev/zero is over 1000 bytes");
  std::filesystem::remove_all(dir);
}

TEST(Corpus, BadCallsAreErrors) {
  auto c = corpus();
  const auto bad = call(*c, "retrieve", json::object());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().kind, ErrorKind::rejected) << "a bad call is the caller's fault: a 400";
  EXPECT_EQ(bad.error().status, 400);
  EXPECT_FALSE(call(*c, "nope", json::object()).ok());
  EXPECT_FALSE(call(*c, "retrieve", json::object()).ok());
  EXPECT_FALSE(call(*c, "retrieve", {{"entity", json::array()}}).ok());
  EXPECT_FALSE(call(*c, "search", {{"query", "x"}, {"k", 0}}).ok());
  // A `k` of another type is an error, not an exception out of the tool's thread.
  for (const json& k : {json("3"), json(2.5), json(101), json::array()}) {
    const auto wrong = call(*c, "search", {{"query", "x"}, {"k", k}});
    ASSERT_FALSE(wrong.ok()) << k;
    EXPECT_EQ(wrong.error().message, "search: \"k\" must be an integer from 1 to 100");
  }
  EXPECT_TRUE(call(*c, "search", {{"query", "x"}, {"k", nullptr}}).ok());
  EXPECT_FALSE(call(*c, "edit", {{"entity", "Oslo"}}).ok());
  EXPECT_TRUE(c->has("retrieve"));
  EXPECT_FALSE(c->has("nope"));
  EXPECT_FALSE(Corpus::from_json(json::parse(R"([{"key": 1}])")).ok());
  EXPECT_FALSE(render_key("x:{{a", json::object()).ok());
}

// A tool's key template must start with literal text: "{{url}}" lets an argument name any
// record (secret:admin), "page:{{url}}" keeps the argument inside its prefix.
TEST(Corpus, KeyTemplatesNeedALiteralPrefix) {
  EXPECT_TRUE(scoped_key_template("page:{{url}}"));
  EXPECT_TRUE(scoped_key_template("kb:{{collection}}:{{entity}}"));
  EXPECT_TRUE(scoped_key_template("fixed"));
  EXPECT_FALSE(scoped_key_template("{{url}}"));
  EXPECT_FALSE(scoped_key_template("{{a}}:{{b}}"));
  EXPECT_FALSE(scoped_key_template("  {{url}}"));
  EXPECT_FALSE(scoped_key_template(""));
}

TEST(HttpTool, PostsTheCallAndReadsOutputAndReads) {
  testing::FaultyServer server(
      testing::FaultyServer::Mode::respond,
      R"({"output": {"temp": 12}, "reads": [{"key": "api:weather", "version": 4}]})");
  HttpTool tool(HttpToolOptions{server.base_url() + "/tools", {"weather"}});
  EXPECT_TRUE(tool.has("weather"));
  const auto r = call(tool, "weather", {{"city", "Oslo"}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->output["temp"], 12);
  EXPECT_EQ(r->reads, (std::vector<ToolRead>{{"api:weather", 4}}));
  EXPECT_EQ(server.requests(), 1);
}

TEST(HttpTool, FailuresAreErrors) {
  {
    testing::FaultyServer server(testing::FaultyServer::Mode::status_500);
    HttpTool tool(HttpToolOptions{server.base_url(), {"t"}});
    const auto r = call(tool, "t", json::object());
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("HTTP 500"), std::string::npos);
  }
  {
    testing::FaultyServer server(testing::FaultyServer::Mode::invalid_json);
    HttpTool tool(HttpToolOptions{server.base_url(), {"t"}});
    EXPECT_FALSE(call(tool, "t", json::object()).ok());
  }
  EXPECT_FALSE(parse_tool_response(R"({"output": 1, "reads": [{"key": 1}]})").ok());
  EXPECT_FALSE(parse_tool_response(R"({"output": 1, "writes": [2]})").ok());
  EXPECT_TRUE(parse_tool_response(R"({"output": null})").ok());
}

// A tool server's error reaches the tool's caller as the server said it: a 503 with its
// Retry-After stays a 503 (the tool may be retried), not a 400 (the call is wrong).
TEST(HttpTool, AFailedCallKeepsTheToolsStatusBodyAndRetryAfter) {
  testing::FaultyServer server(testing::FaultyServer::Mode::status_503);
  server.set_retry_after("7");
  HttpTool tool(HttpToolOptions{server.base_url(), {"t"}});
  const auto r = call(tool, "t", json::object());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::http_status);
  EXPECT_EQ(r.error().status, 503);
  EXPECT_EQ(r.error().retry_after, "7");
  EXPECT_EQ(json::parse(r.error().body)["error"]["message"], "overloaded");
  testing::FaultyServer garbled(testing::FaultyServer::Mode::invalid_json);
  HttpTool other(HttpToolOptions{garbled.base_url(), {"t"}});
  const auto bad = call(other, "t", json::object());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().kind, ErrorKind::malformed) << "not the caller's fault: a 502";
  HttpTool nowhere(HttpToolOptions{testing::refused_url(), {"t"}});
  const auto refused = call(nowhere, "t", json::object());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind, ErrorKind::refused);
}

// -- tools declared in the configuration ----------------------------------------------------

TEST(ToolUrl, OnlyListedHostsAndLoopbackOnlyWhenNamed) {
  const std::vector<std::string> allow = {"api.example.com", "127.0.0.1:9100", "[::1]"};
  EXPECT_EQ(check_tool_url("https://api.example.com/v1/x", allow).value(), false);
  EXPECT_EQ(check_tool_url("http://API.example.com:8443/", allow).value(), false);  // any port
  EXPECT_EQ(check_tool_url("http://127.0.0.1:9100/t", allow).value(), true);  // listed: reachable
  EXPECT_EQ(check_tool_url("http://[::1]:80/t", allow).value(), true);
  const auto other_port = check_tool_url("http://127.0.0.1:9101/t", allow);
  ASSERT_FALSE(other_port.ok());
  EXPECT_NE(other_port.error().message.find("loopback"), std::string::npos);
  EXPECT_FALSE(check_tool_url("http://localhost:9100/t", allow).ok());  // not the name listed
  EXPECT_FALSE(check_tool_url("http://evil.example.org/", allow).ok());
  EXPECT_FALSE(check_tool_url("http://169.254.169.254/latest/meta-data", allow).ok());
  EXPECT_FALSE(check_tool_url("ftp://api.example.com/", allow).ok());
  EXPECT_FALSE(check_tool_url("not a url", allow).ok());
  EXPECT_FALSE(check_tool_url("https://api.example.com/", {}).ok());  // nothing is allowed
}

HttpToolSpec spec_for(const std::string& url, bool allow_internal = true) {
  HttpToolSpec t;
  t.name = "t";
  t.url = url;
  t.allow_internal = allow_internal;
  return t;
}

TEST(HttpToolSet, TheArgumentsAreTheBodyAndTheResponseTheOutput) {
  testing::FaultyServer server(testing::FaultyServer::Mode::respond, R"({"temp": 12})");
  auto spec = spec_for(server.base_url() + "/weather");
  spec.headers = {"X-Api-Key: k1"};
  HttpToolSet tools({spec});
  EXPECT_TRUE(tools.has("t"));
  EXPECT_FALSE(tools.has("weather"));
  const auto r = call(tools, "t", {{"city", "Oslo"}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->output, json({{"temp", 12}}));
  EXPECT_TRUE(r->reads.empty());
  ASSERT_EQ(server.recorded().size(), 1u);
  const auto req = server.recorded()[0];
  EXPECT_EQ(req.head.rfind("POST /weather ", 0), 0u) << req.head;
  EXPECT_NE(req.head.find("X-Api-Key: k1"), std::string::npos);
  EXPECT_EQ(json::parse(req.body), json({{"city", "Oslo"}}));
}

TEST(HttpToolSet, GetSendsTheArgumentsAsTheQuery) {
  testing::FaultyServer server(testing::FaultyServer::Mode::respond, R"("plain")");
  auto spec = spec_for(server.base_url() + "/q");
  spec.method = "GET";
  HttpToolSet tools({spec});
  const auto r = call(tools, "t", {{"city", "São Paulo"}, {"days", 3}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->output, "plain");
  ASSERT_EQ(server.recorded().size(), 1u);
  EXPECT_EQ(server.recorded()[0].head.rfind("GET /q?city=S%C3%A3o%20Paulo&days=3 ", 0), 0u)
      << server.recorded()[0].head;
}

TEST(HttpToolSet, ErrorsLimitsAndInternalAddressesAreToolErrors) {
  {
    testing::FaultyServer server(testing::FaultyServer::Mode::status_503);
    server.set_retry_after("3");
    HttpToolSet tools({spec_for(server.base_url())});
    const auto r = call(tools, "t", json::object());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().status, 503);
    EXPECT_EQ(r.error().retry_after, "3");
  }
  {
    testing::FaultyServer server(testing::FaultyServer::Mode::respond,
                                 "\"" + std::string(5000, 'x') + "\"");
    auto spec = spec_for(server.base_url());
    spec.max_response_bytes = 1000;
    HttpToolSet tools({spec});
    const auto r = call(tools, "t", json::object());
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("larger than 1000 bytes"), std::string::npos)
        << r.error().message;
  }
  {
    testing::FaultyServer server(testing::FaultyServer::Mode::no_response);
    auto spec = spec_for(server.base_url());
    spec.timeout = std::chrono::milliseconds(200);
    HttpToolSet tools({spec});
    const auto r = call(tools, "t", json::object());
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("tool call failed"), std::string::npos);
  }
  {
    // A host the allowlist did not name as internal may not land on loopback.
    testing::FaultyServer server(testing::FaultyServer::Mode::respond, "1");
    HttpToolSet tools({spec_for(server.base_url(), false)});
    const auto r = call(tools, "t", json::object());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().kind, ErrorKind::refused);
    EXPECT_NE(r.error().message.find("loopback"), std::string::npos) << r.error().message;
    EXPECT_EQ(server.requests(), 0);
  }
}

// A tool behind an API dynrt does not control may answer JSON nested a million levels deep;
// copying or writing such a value would overflow the stack. It is refused as a malformed answer
// (a 502 to the caller), and JSON at the depth a request body may have is still an answer.
TEST(HttpToolSet, AnAnswerNestedTooDeepIsRefusedNotHandled) {
  const std::string deep = std::string(1 << 20, '[') + std::string(1 << 20, ']');
  {
    testing::FaultyServer server(testing::FaultyServer::Mode::respond, deep);
    auto spec = spec_for(server.base_url());
    spec.max_response_bytes = 4 << 20;
    HttpToolSet tools({spec});
    const auto r = call(tools, "t", json::object());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().kind, ErrorKind::malformed);
    EXPECT_NE(r.error().message.find("deeper than 256 levels"), std::string::npos)
        << r.error().message;
  }
  {
    const std::string fine = std::string(256, '[') + std::string(256, ']');
    testing::FaultyServer server(testing::FaultyServer::Mode::respond, fine);
    HttpToolSet tools({spec_for(server.base_url())});
    const auto r = call(tools, "t", json::object());
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->output.dump(), fine);
  }
  {
    testing::FaultyServer server(testing::FaultyServer::Mode::respond,
                                 R"({"output": )" + deep + "}");
    HttpTool tool(HttpToolOptions{server.base_url(), {"t"}});
    const auto r = call(tool, "t", json::object());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().kind, ErrorKind::malformed);
    EXPECT_NE(r.error().message.find("deeper than 256 levels"), std::string::npos)
        << r.error().message;
  }
}

TEST(ToolEngines, TheFirstThatHasTheToolAnswers) {
  testing::FaultyServer server(testing::FaultyServer::Mode::respond, "2");
  auto http = std::make_shared<HttpToolSet>(std::vector<HttpToolSpec>{spec_for(server.base_url())});
  ToolEngines tools({corpus(), http});
  EXPECT_TRUE(tools.has("retrieve"));
  EXPECT_TRUE(tools.has("t"));
  EXPECT_FALSE(tools.has("nope"));
  EXPECT_EQ(call(tools, "t", json::object())->output, 2);
  EXPECT_TRUE(call(tools, "retrieve", {{"entity", "Oslo"}}).ok());
  EXPECT_EQ(call(tools, "nope", json::object()).error().kind, ErrorKind::rejected);
}

}  // namespace
}  // namespace dynrt::engines

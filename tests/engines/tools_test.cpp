// Tool engines: the built-in versioned corpus, and a tool behind a URL.
#include "engines/tools/corpus.hpp"
#include "engines/tools/http_tool.hpp"
#include "faulty_server.hpp"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace dynrt::engines

// The history checker (bench/history.hpp): its verdicts on hand-made histories (it must catch
// a stale serve and a wrong or misdirected result), and a short seeded randomized run of
// concurrent Sub-Agent, ReAct and Routing workflows with fills, reuse and writes: zero violations.
#include "bench/history.hpp"
#include "tests/support/redis_server.hpp"

#include <gtest/gtest.h>

namespace dynrt::bench::history {
namespace {

using nlohmann::json;

Reply ok(std::string body, Served how = Served::cache) {
  Reply r;
  r.body = std::move(body);
  r.served = how;
  return r;
}

json lookup(const std::string& key, std::uint64_t version, const std::string& text) {
  return {{"key", key}, {"found", true}, {"passage", text}, {"version", version}};
}

TEST(HistoryChecker, MarkersAndToolOutputsGiveTheVersionsReadFrom) {
  const json req = {{"messages", json::array({{{"content", "a " + marked("x", "kb:a:b", 3)}},
                                              {{"content", marked("y", "corpus:e", 12)}}})}};
  EXPECT_EQ(embedded_reads(req), (Reads{{"kb:a:b", 3}, {"corpus:e", 12}}));
  EXPECT_EQ(tool_reads(lookup("k", 4, "t")), (Reads{{"k", 4}}));
  EXPECT_EQ(tool_reads(json{{"results", json::array({lookup("a", 1, ""), lookup("b", 2, "")})}}),
            (Reads{{"a", 1}, {"b", 2}}));
}

TEST(HistoryChecker, CatchesAStaleServeOnlyAfterTheAcknowledgment) {
  Checker c([](const std::string&, const json&) { return std::string("answer"); },
            {{"kb", "kb:{{entity}}"}});
  const std::string v1 = marked("one", "kb:e", 1), v2 = marked("two", "kb:e", 2);
  c.text("kb:e", 1, v1);
  c.text("kb:e", 2, v2);
  const json args = {{"entity", "e"}};
  const auto before = c.now();  // sent before the write was acknowledged: old is fine
  c.acked("kb:e", 2);
  const auto after = c.now();
  c.served("/v1/dynrt/tools/kb", args, ok(lookup("kb:e", 1, v1).dump()), before);
  EXPECT_EQ(c.report().stale, 0u);
  c.served("/v1/dynrt/tools/kb", args, ok(lookup("kb:e", 2, v2).dump()), after);
  EXPECT_EQ(c.report().stale, 0u);
  c.served("/v1/dynrt/tools/kb", args, ok(lookup("kb:e", 1, v1).dump()), after);
  EXPECT_EQ(c.report().stale, 1u);
  // A model result built from a request that embeds the old version, sent after the ack.
  const json model = {{"messages", json::array({{{"content", v1}}})}};
  c.served("/v1/chat/completions", model, ok("answer"), after);
  EXPECT_EQ(c.report().stale, 2u);
  EXPECT_EQ(c.report().unauthorized, 0u);
  EXPECT_EQ(c.report().serves, 4u);
  EXPECT_EQ(c.report().writes, 1u);
}

TEST(HistoryChecker, CatchesBytesTheEngineOrTheToolDoesNotAnswer) {
  Checker c([](const std::string&, const json& body) { return "answer to " + body.dump(); },
            {{"kb", "kb:{{entity}}"}});
  const std::string v1 = marked("one", "kb:e", 1);
  c.text("kb:e", 1, v1);
  const json q = {{"q", 1}};
  // Executed for the default tenant: only the bytes are in question here.
  c.executed("", "/v1/chat/completions", q);
  c.executed("", "/v1/dynrt/tools/kb", {{"entity", "f"}});
  c.executed("", "/v1/dynrt/tools/kb", {{"entity", "e"}});
  c.served("/v1/chat/completions", q, ok("answer to " + q.dump()), c.now());
  EXPECT_EQ(c.report().unauthorized, 0u);
  c.served("/v1/chat/completions", q, ok("answer to {\"q\":2}", Served::fill), c.now());
  EXPECT_EQ(c.report().unauthorized, 1u) << "another request's result";
  c.served("/v1/dynrt/tools/kb", {{"entity", "f"}}, ok(lookup("kb:e", 1, v1).dump()), c.now());
  EXPECT_EQ(c.report().unauthorized, 2u) << "another record's result";
  c.served("/v1/dynrt/tools/kb", {{"entity", "e"}}, ok(lookup("kb:e", 1, "forged").dump()),
           c.now());
  EXPECT_EQ(c.report().unauthorized, 3u) << "a text the record never had";
  EXPECT_EQ(c.report().examples.size(), 3u);
}

// A few seconds at most on 2 cores: three workloads, three drivers each, a writer each.
RunOptions short_run() {
  RunOptions o;
  o.seed = 7;
  o.ops = 3000;
  o.drivers = 3;
  o.runs = 24;
  o.serves_per_write = 6;
  return o;
}

TEST(History, ConcurrentWorkflowsFillsReuseAndWritesShowNoViolation) {
  RunOptions o = short_run();
  const auto r = run_history(o);
  for (const auto& e : r.examples)
    ADD_FAILURE() << e;
  EXPECT_EQ(r.stale, 0u);
  EXPECT_EQ(r.unauthorized, 0u);
  EXPECT_EQ(r.cross_tenant, 0u);
  EXPECT_EQ(r.errors, 0u);
  EXPECT_GE(r.ops(), o.ops);
  EXPECT_GT(r.tenant_checked, 0u) << "runs of three tenants were served from the library";
  // Not vacuous: writes happened, results were reused and promoted, writes invalidated some.
  EXPECT_GT(r.writes, 0u);
  EXPECT_GT(r.served_cache, 0u);
  EXPECT_GT(r.served_fill, 0u);
  EXPECT_GT(r.invalidated + r.stale_inserts, 0u);
  EXPECT_GT(r.reads_checked, 0u);
}

// Two replicas per workload sharing their library through a real redis-server, runs spread over
// both, writes through both in turn: still no stale, unauthorized or cross-tenant serve, and
// the replicas did serve each other's results.
TEST(History, TwoReplicasSharingALibraryThroughRedisShowNoViolation) {
  if (!testing::on_path("redis-server")) GTEST_SKIP() << "redis-server is not installed";
  testing::RedisServer redis;
  std::string why;
  ASSERT_TRUE(redis.start(testing::free_port(), &why)) << why;
  RunOptions o = short_run();
  o.drivers = 4;  // two runs at a time on each replica
  o.replicas = 2;
  o.library = "redis://127.0.0.1:" + std::to_string(redis.port());
  const auto r = run_history(o);
  for (const auto& e : r.examples)
    ADD_FAILURE() << e;
  EXPECT_EQ(r.stale, 0u);
  EXPECT_EQ(r.unauthorized, 0u);
  EXPECT_EQ(r.cross_tenant, 0u);
  EXPECT_EQ(r.errors, 0u);
  EXPECT_EQ(r.writes_not_shared, 0u) << "Redis was up: every write reached it";
  EXPECT_GE(r.ops(), o.ops);
  // Not vacuous: results crossed replicas, and writes through one refused results held by the
  // other (or removed them first).
  EXPECT_GT(r.shared_hits, 0u);
  EXPECT_GT(r.writes, 0u);
  EXPECT_GT(r.served_cache, 0u);
  EXPECT_GT(r.invalidated + r.stale_inserts + r.shared_checks_failed, 0u);
}

// The checker's own verdict on tenants: a result served from the library to a tenant that
// never executed that request is another tenant's work.
TEST(HistoryChecker, CatchesAServeOfAnotherTenantsExecution) {
  const json request = {{"model", "m"},
                        {"messages", json::array({{{"role", "user"}, {"content", "q"}}})}};
  Checker c([](const std::string&, const json&) { return std::string("answer"); }, {});
  Reply r;
  r.body = "answer";
  r.served = Served::cache;
  c.executed("acme", "/v1/chat/completions", request);
  c.served("/v1/chat/completions", request, r, c.now(), "acme");
  EXPECT_EQ(c.report().cross_tenant, 0u);
  c.served("/v1/chat/completions", request, r, c.now(), "beta");
  EXPECT_EQ(c.report().cross_tenant, 1u);
  r.served = Served::engine;  // executed for the call itself: nothing to check
  c.served("/v1/chat/completions", request, r, c.now(), "gamma");
  EXPECT_EQ(c.report().cross_tenant, 1u);
  EXPECT_EQ(c.report().tenant_checked, 2u);
}

// The same run with writes that bypass dynrt: the library keeps serving what the writes made
// stale, and the checker must say so.
TEST(History, FindsStaleServesWhenWritesBypassDynrt) {
  RunOptions o = short_run();
  o.tell_writes = false;
  const auto r = run_history(o);
  EXPECT_GT(r.stale, 0u);
  EXPECT_EQ(r.unauthorized, 0u);
}

}  // namespace
}  // namespace dynrt::bench::history

// The gateway under hostile HTTP: a Gateway on port 0 over an embedded Runtime on the simulated
// engine, spoken to with raw POSIX sockets (a receive timeout turns a hang into a failure).
// Every refused request must leave the runtime's counters untouched. Then engine faults as a
// client sees them: a Runtime over an OpenAI engine on a misbehaving loopback server
// (tests/engines/faulty_server.hpp).
#include "../engines/faulty_server.hpp"
#include "engines/openai/engine.hpp"
#include "engines/sim/engine.hpp"
#include "engines/tools/http_tool.hpp"
#include "gateway/server.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

namespace dynrt::gateway {
namespace {

using nlohmann::json;

// A blocking client connection; every receive gives up after 10 s (or `timeout_s`): a hang
// becomes a failure.
class Conn {
 public:
  explicit Conn(std::uint16_t port, long timeout_s = 10) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    timeval tv{timeout_s, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~Conn() { ::close(fd_); }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  bool connected() const { return connected_; }
  int fd() const { return fd_; }
  bool readable() const {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }
  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      const auto n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }
  // Everything until the server closes (or the timeout: then `timed_out`).
  std::string read_all() {
    std::string out;
    char buf[65536];
    for (;;) {
      const auto n = ::recv(fd_, buf, sizeof buf, 0);
      if (n < 0) timed_out = errno == EAGAIN || errno == EWOULDBLOCK;
      if (n <= 0) return out;
      out.append(buf, static_cast<std::size_t>(n));
    }
  }
  // One response with a Content-Length body; empty when the connection ended first.
  std::string read_response() {
    for (;;) {
      const auto head = pending_.find("\r\n\r\n");
      if (head != std::string::npos) {
        std::size_t length = 0;
        const auto cl = lower(pending_.substr(0, head)).find("content-length:");
        if (cl != std::string::npos) length = std::stoul(pending_.substr(cl + 15));
        if (pending_.size() >= head + 4 + length) {
          std::string r = pending_.substr(0, head + 4 + length);
          pending_.erase(0, head + 4 + length);
          return r;
        }
      }
      char buf[65536];
      const auto n = ::recv(fd_, buf, sizeof buf, 0);
      if (n < 0) timed_out = errno == EAGAIN || errno == EWOULDBLOCK;
      if (n <= 0) return {};
      pending_.append(buf, static_cast<std::size_t>(n));
    }
  }
  // After the responses read so far: does the server close the connection (no more bytes)?
  bool closed_by_server() { return pending_.empty() && read_all().empty() && !timed_out; }

  bool timed_out = false;

 private:
  static std::string lower(std::string s) {
    for (auto& c : s)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }
  int fd_;
  bool connected_ = false;
  std::string pending_;
};

int status_of(const std::string& response) {
  return response.size() > 12 ? std::stoi(response.substr(9, 3)) : 0;
}
std::string body_of(const std::string& response) {
  const auto head = response.find("\r\n\r\n");
  return head == std::string::npos ? std::string() : response.substr(head + 4);
}
bool has_header(const std::string& response, std::string_view line) {
  return response.substr(0, response.find("\r\n\r\n")).find(line) != std::string::npos;
}

std::string post(std::string_view path, std::string_view body, std::string_view extra = "",
                 bool close = true) {
  return std::string("POST ") + std::string(path) + " HTTP/1.1\r\nHost: x\r\n" +
         "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n" + std::string(extra) + (close ? "Connection: close\r\n" : "") + "\r\n" +
         std::string(body);
}

const std::string kChat =
    R"({"model":"sim","max_tokens":4,"messages":[{"role":"user","content":"hi"}]})";

// A Runtime and a Gateway over it, stopped in serve's order; exchange() sends one request on
// its own connection and returns the whole answer.
class GatewayFixture : public ::testing::Test {
 protected:
  void TearDown() override {
    gateway_.reset();
    if (runtime_) runtime_->shutdown();
  }
  // `cfg` (its templates) over the simulated engine at time scale 0, and a gateway over it.
  void start_on_sim(RuntimeConfig cfg, GatewayOptions o) {
    engines::sim::SimEngineOptions so;
    so.time_scale = 0;
    cfg.engines.push_back({"sim",
                           std::make_shared<engines::sim::SimEngine>(engines::sim::SimParams{},
                                                                     engines::sim::Script{}, so),
                           {}});
    auto rt = Runtime::create(cfg);
    ASSERT_TRUE(rt.ok()) << rt.error().message;
    runtime_ = std::move(*rt);
    auto gw = Gateway::create(*runtime_, std::move(o));
    ASSERT_TRUE(gw.ok()) << gw.error().message;
    gateway_ = std::move(*gw);
  }
  std::uint16_t port() const { return gateway_->port(); }
  std::string exchange(std::string_view raw, long timeout_s = 10) {
    Conn c(port(), timeout_s);
    EXPECT_TRUE(c.connected());
    c.send(raw);
    std::string r = c.read_all();
    EXPECT_FALSE(c.timed_out) << "no answer to " << raw.substr(0, 200);
    return r;
  }

  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<Gateway> gateway_;
};

class GatewayTest : public GatewayFixture {
 protected:
  void start(GatewayOptions o = {}) {
    RuntimeConfig cfg;
    cfg.template_paths = {"templates"};
    start_on_sim(std::move(cfg), std::move(o));
  }
  // Nothing reached the runtime.
  void expect_untouched() {
    const RuntimeStats s = runtime_->stats();
    EXPECT_EQ(s.requests, 0u);
    EXPECT_EQ(s.passthrough, 0u);
    EXPECT_EQ(s.served_engine, 0u);
  }
};

// The error shape every refusal has; returns the error object.
json expect_error(const std::string& response, int status) {
  EXPECT_EQ(status_of(response), status) << response.substr(0, 400);
  const json body = json::parse(body_of(response), nullptr, false);
  EXPECT_TRUE(body.is_object() && body.contains("error")) << body_of(response).substr(0, 400);
  if (!body.is_object() || !body.contains("error")) return json::object();
  const json& e = body["error"];
  EXPECT_TRUE(e["message"].is_string());
  EXPECT_TRUE(e["type"].is_string());
  EXPECT_TRUE(e.contains("param"));
  EXPECT_EQ(e["code"], status);
  return e;
}

TEST_F(GatewayTest, AValidCallIsServed) {
  start();
  const std::string r = exchange(post("/v1/chat/completions", kChat));
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_EQ(runtime_->stats().requests, 1u);
}

TEST_F(GatewayTest, HostileBodiesAreRefusedWithTheFieldAtFault) {
  start();
  struct Case {
    std::string path, body, message, param;
  };
  const std::string deep(100'000, '[');
  const std::vector<Case> cases = {
      {"/v1/chat/completions", R"({"model": "sim", "messages": [)", "not valid JSON", ""},
      {"/v1/chat/completions", "", "not valid JSON", ""},
      {"/v1/chat/completions", deep, "deeper than 256 levels", ""},
      {"/v1/chat/completions", R"({"messages": [], "model": "a", "model": "b"})", "appears twice",
       ""},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "\ud800"}]})",
       "surrogate", ""},
      {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\"}]}",
       "UTF-8", ""},
      {"/v1/chat/completions", "[1, 2]", "must be a JSON object", ""},
      {"/v1/chat/completions", R"({"messages": {"role": "user"}})", "`messages` must be an array",
       "messages"},
      {"/v1/chat/completions", R"({"model": 7, "messages": []})", "`model` must be a string",
       "model"},
      {"/v1/chat/completions", R"({"messages": [], "stream": "yes"})", "`stream` must be a boolean",
       "stream"},
      {"/v1/chat/completions", R"({"messages": [], "stream_options": {"include_usage": "x"}})",
       "`stream_options.include_usage` must be a boolean", "stream_options.include_usage"},
      {"/v1/chat/completions", R"({"messages": [], "max_tokens": "10"})", "`max_tokens` must be",
       "max_tokens"},
      {"/v1/chat/completions", R"({"messages": [], "max_tokens": 1.5})", "`max_tokens` must be",
       "max_tokens"},
      {"/v1/chat/completions", R"({"messages": [], "max_tokens": -1})", "`max_tokens` must be",
       "max_tokens"},
      {"/v1/chat/completions", R"({"messages": [], "n": 0})", "`n` must be", "n"},
      {"/v1/chat/completions", R"({"messages": [], "temperature": "hot"})",
       "`temperature` must be a number", "temperature"},
      {"/v1/chat/completions", R"({"messages": [], "stop": [1]})", "`stop` must be", "stop"},
      {"/v1/chat/completions", R"({"messages": [1]})", "`messages[0]` must be an object",
       "messages[0]"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user"}, {"content": "x"}]})",
       "`messages[1].role` must be a string", "messages[1].role"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": 3}]})",
       "`messages[0].content` must be", "messages[0].content"},
      {"/v1/completions", R"({"prompt": 3})", "`prompt` must be", "prompt"},
      {"/v1/completions", R"({"model": "sim"})", "`prompt` must be", "prompt"},
      {"/v1/dynrt/tools/lookup", "[]", "must be a JSON object", ""},
      {"/v1/dynrt/writes", R"({"keys": "k"})", "`keys` must be an array", "keys"},
      {"/v1/dynrt/writes", R"({"keys": ["a", ""]})", "non-empty string", "keys"},
      {"/v1/dynrt/writes", R"({"keys": ["a", ")" + std::string(1025, 'k') + R"("]})",
       "`keys[1]` is 1025 bytes; a record key is at most 1024", "keys[1]"},
      {"/v1/dynrt/writes", R"({"keys": ["a"], "keys": ["b"]})", "appears twice", ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.path + " " + c.body.substr(0, 80));
    const json e = expect_error(exchange(post(c.path, c.body)), 400);
    EXPECT_NE(e.value("message", "").find(c.message), std::string::npos) << e.dump();
    EXPECT_EQ(e["param"], c.param.empty() ? json(nullptr) : json(c.param));
  }
  expect_untouched();
  EXPECT_EQ(runtime_->stats().writes, 0u);
}

TEST_F(GatewayTest, HostileTagsAndPathsAreRefusedCleanly) {
  start();
  json e = expect_error(
      exchange(post("/v1/chat/completions", kChat, "X-DynRT-Stage: \xff\xfe\r\n")), 400);
  EXPECT_EQ(e["param"], "X-DynRT-Stage");
  e = expect_error(exchange(post("/v1/chat/completions", kChat,
                                 "X-DynRT-Workflow: " + std::string(300, 'w') + "\r\n")),
                   400);
  EXPECT_EQ(e["param"], "X-DynRT-Workflow");
  // A path that is not UTF-8 is quoted in the message; the body stays valid JSON.
  e = expect_error(exchange("GET /\xff\xc0 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), 404);
  expect_error(exchange(post("/v1/dynrt/tools/a\x01b", "{}")), 400);
  expect_untouched();
}

TEST_F(GatewayTest, AHundredThousandMessagesAreServed) {
  start();
  json body = {{"model", "sim"}, {"max_tokens", 1}, {"messages", json::array()}};
  for (int i = 0; i < 100'000; ++i)
    body["messages"].push_back({{"role", "user"}, {"content", "m"}});
  const std::string text = body.dump();
  ASSERT_LT(text.size(), GatewayOptions{}.max_body_bytes);
  // 3 MB of messages take seconds to parse and hash under the sanitizers, longer on a loaded
  // 2-core machine: the hang guard here is a minute, not the usual 10 s.
  const std::string r = exchange(post("/v1/chat/completions", text), 60);
  EXPECT_EQ(status_of(r), 200) << r.substr(0, 400);
}

TEST_F(GatewayTest, OversizedBodiesAndHeadsAreRefused) {
  GatewayOptions o;
  o.max_body_bytes = 1000;
  o.max_header_bytes = 1000;
  start(o);
  expect_error(exchange(post("/v1/chat/completions", std::string(2000, ' '))), 413);
  expect_error(
      exchange(post("/v1/chat/completions", kChat, "X-Filler: " + std::string(2000, 'x') + "\r\n")),
      431);
  // Chunked bodies are read within the same limit.
  expect_error(exchange("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                        "chunked\r\nConnection: close\r\n\r\n7d0\r\n" +
                        std::string(2000, ' ') + "\r\n0\r\n\r\n"),
               413);
  expect_untouched();
}

TEST_F(GatewayTest, ChunkedBodiesWithinTheLimitAreAccepted) {
  start();
  char size[16];
  std::snprintf(size, sizeof size, "%zx", kChat.size() - 10);
  const std::string r = exchange(
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
      "Connection: close\r\n\r\n" +
      std::string(size) + "\r\n" + kChat.substr(0, kChat.size() - 10) + "\r\na\r\n" +
      kChat.substr(kChat.size() - 10) + "\r\n0\r\n\r\n");
  EXPECT_EQ(status_of(r), 200) << r;
}

TEST_F(GatewayTest, SmugglingShapesAreRefusedAndTheConnectionClosed) {
  start();
  for (const std::string te : {"chunked", "gzip", "gzip, chunked"}) {
    SCOPED_TRACE(te);
    Conn c(port());
    c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
           std::to_string(kChat.size()) + "\r\nTransfer-Encoding: " + te + "\r\n\r\n" + kChat);
    const std::string r = c.read_response();
    expect_error(r, 400);
    EXPECT_TRUE(has_header(r, "Connection: close")) << r;
    EXPECT_TRUE(c.closed_by_server());
  }
  {  // a transfer coding other than chunked, alone
    Conn c(port());
    c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n" +
           kChat);
    expect_error(c.read_response(), 400);
    EXPECT_TRUE(c.closed_by_server());
  }
  expect_untouched();
}

TEST_F(GatewayTest, ACompressedBodyIsRefusedWith415AndTheConnectionKept) {
  start();
  Conn c(port());
  c.send(post("/v1/chat/completions", kChat, "Content-Encoding: gzip\r\n", false));
  const std::string r = c.read_response();
  expect_error(r, 415);
  EXPECT_NE(r.find("Content-Encoding 'gzip' is not supported"), std::string::npos) << r;
  // The body was framed by its Content-Length: the next request on the connection is served.
  c.send(post("/v1/chat/completions", kChat, "Content-Encoding: identity\r\n", false));
  EXPECT_EQ(status_of(c.read_response()), 200);
  EXPECT_EQ(runtime_->stats().served_engine, 1u);  // the refused one never reached the runtime
}

TEST_F(GatewayTest, BytesBeyondContentLengthAreAMalformedNextRequest) {
  start();
  Conn c(port());
  c.send(post("/v1/chat/completions", kChat, "", false) + "}garbage\r\n\r\n");
  EXPECT_EQ(status_of(c.read_response()), 200);
  expect_error(c.read_response(), 400);
  EXPECT_TRUE(c.closed_by_server());
}

TEST_F(GatewayTest, ABodyShorterThanContentLengthTimesOut) {
  GatewayOptions o;
  o.header_timeout = std::chrono::milliseconds(200);
  start(o);
  Conn c(port());
  const std::string raw = post("/v1/chat/completions", kChat);
  c.send(raw.substr(0, raw.size() - 5));
  expect_error(c.read_response(), 408);
  EXPECT_TRUE(c.closed_by_server());
  expect_untouched();
}

// The deadline covers the whole request: a client trickling bytes does not extend it.
TEST_F(GatewayTest, ATricklingClientGets408) {
  GatewayOptions o;
  o.header_timeout = std::chrono::milliseconds(200);
  start(o);
  Conn c(port());
  const std::string raw = post("/v1/chat/completions", kChat);
  for (const char byte : raw) {  // ~40 ms a byte: the request would take seconds
    if (!c.send(std::string_view(&byte, 1))) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
    if (c.readable()) break;  // the answer came: stop before the close could reset it
  }
  expect_error(c.read_response(), 408);
  expect_untouched();
}

TEST_F(GatewayTest, ConnectionsOverTheCapGet503AndAreClosed) {
  GatewayOptions o;
  o.max_connections = 2;
  start(o);
  Conn a(port()), b(port());
  ASSERT_TRUE(a.connected() && b.connected());
  Conn over(port());
  over.send(post("/v1/chat/completions", kChat));
  const std::string r = over.read_response();
  const json e = expect_error(r, 503);
  EXPECT_NE(e.value("message", "").find("limit of 2 connections"), std::string::npos);
  EXPECT_TRUE(has_header(r, "Retry-After: 1")) << r;
  EXPECT_TRUE(over.closed_by_server());
  expect_untouched();
  // The connections within the cap still work.
  a.send(post("/v1/chat/completions", kChat));
  EXPECT_EQ(status_of(a.read_response()), 200);
}

// Thousands of idle connections: exactly the cap is held, every one beyond it is answered 503
// (without sending a byte), and a held connection still serves.
TEST_F(GatewayTest, ThousandsOfIdleConnectionsMeetTheCap) {
  constexpr std::size_t kCap = 1000, kOpen = 2500;
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  const rlim_t needed = kOpen + kCap + 256;  // both ends of the held ones live in this process
  if (limit.rlim_cur < needed && limit.rlim_max >= needed) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
  if (limit.rlim_cur < needed)
    GTEST_SKIP() << "RLIMIT_NOFILE " << limit.rlim_cur << " cannot hold " << needed << " sockets";
  GatewayOptions o;
  o.max_connections = kCap;
  o.header_timeout = std::chrono::seconds(60);  // the held ones stay open while we look
  start(o);
  std::vector<std::unique_ptr<Conn>> conns;
  for (std::size_t i = 0; i < kOpen; ++i) {
    conns.push_back(std::make_unique<Conn>(port()));
    ASSERT_TRUE(conns.back()->connected()) << "connection " << i;
  }
  // The refused ones are answered at once: wait (up to 30 s, for slow sanitizer builds) until
  // kOpen - kCap have something to read, polling only those that have not answered yet.
  std::vector<bool> answered(kOpen, false);
  std::size_t ready = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (ready < kOpen - kCap && std::chrono::steady_clock::now() < deadline) {
    std::vector<pollfd> fds;
    std::vector<std::size_t> index;
    for (std::size_t i = 0; i < kOpen; ++i)
      if (!answered[i]) {
        fds.push_back({conns[i]->fd(), POLLIN, 0});
        index.push_back(i);
      }
    if (::poll(fds.data(), fds.size(), 100) <= 0) continue;
    for (std::size_t k = 0; k < fds.size(); ++k)
      if ((fds[k].revents & (POLLIN | POLLHUP)) != 0) {
        answered[index[k]] = true;
        ++ready;
      }
  }
  std::size_t refused = 0;
  Conn* held = nullptr;
  for (std::size_t i = 0; i < kOpen; ++i) {
    if (!answered[i]) {
      held = conns[i].get();
      continue;
    }
    const std::string r = conns[i]->read_response();
    EXPECT_EQ(status_of(r), 503) << r;
    refused += status_of(r) == 503;
  }
  EXPECT_EQ(refused, kOpen - kCap);
  ASSERT_NE(held, nullptr);
  held->send(post("/v1/chat/completions", kChat));
  EXPECT_EQ(status_of(held->read_response()), 200);
  EXPECT_EQ(runtime_->stats().requests, 1u) << "only the held connection's call reached dynrt";
}

TEST_F(GatewayTest, IdleKeptAliveConnectionsAreClosed) {
  GatewayOptions o;
  o.idle_timeout = std::chrono::milliseconds(100);
  start(o);
  Conn c(port());
  c.send(post("/v1/chat/completions", kChat, "", false));
  const std::string r = c.read_response();
  EXPECT_EQ(status_of(r), 200);
  EXPECT_FALSE(has_header(r, "Connection: close"));
  EXPECT_TRUE(c.closed_by_server());  // within the 10 s receive timeout
}

TEST_F(GatewayTest, KeptAliveConnectionsServeSeveralRequests) {
  start();
  Conn c(port());
  for (int i = 0; i < 3; ++i) {
    c.send(post("/v1/chat/completions", kChat, "", false));
    EXPECT_EQ(status_of(c.read_response()), 200);
  }
}

// -- keys, scopes and tenants ------------------------------------------------------------------

std::string header_of(const std::string& response, std::string_view name) {
  const std::string head = response.substr(0, response.find("\r\n\r\n"));
  const auto at = head.find("\r\n" + std::string(name) + ": ");
  if (at == std::string::npos) return {};
  const auto from = at + 4 + name.size();
  return head.substr(from, head.find("\r\n", from) - from);
}

std::string hex_sha256(std::string_view key) {
  return to_hex(sha256(key));
}

// One reusable stage that reads a record, and keys of two tenants: acme (infer; write),
// beta (infer, write; a slow rate), ops (admin) and a metrics-only scraper.
const char* kAuthTemplate = R"(version: 1
workflow: tn
stages:
  answer:
    kind: model
    speculable: true
    model: sim
    params: {temperature: 0, max_tokens: 8}
    reads: ["doc:hi"]
    request:
      messages: [{role: user, content: "hi"}]
)";
const std::string kAuthChat =
    R"({"model":"sim","temperature":0,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]})";

class AuthGateway : public GatewayFixture {
 protected:
  void SetUp() override {
    const std::string keys =
        "keys:\n"
        "  - {name: acme-1, key_sha256: " +
        hex_sha256("sk-acme-1") +
        ", tenant: acme, scopes: [infer]}\n"
        "  - {name: acme-2, key_sha256: " +
        hex_sha256("sk-acme-2") +
        ", tenant: acme, scopes: [infer, write]}\n"
        "  - {name: beta-1, key_sha256: " +
        hex_sha256("sk-beta-1") +
        ", tenant: beta, scopes: [infer, write],"
        " limits: {rps: 0.001, burst: 4}}\n"
        "  - {name: ops, key_sha256: " +
        hex_sha256("sk-ops") +
        ", tenant: ops, scopes: [admin]}\n"
        "  - {name: scraper, key_sha256: " +
        hex_sha256("sk-scrape") + ", tenant: ops, scopes: [metrics]}\n";
    auto ring = parse_keys(keys, "keys.yaml");
    ASSERT_TRUE(ring.ok()) << ring.error().message;
    RuntimeConfig cfg;
    cfg.template_texts = {{"tn.yaml", kAuthTemplate}};
    GatewayOptions o;
    o.auth = std::make_shared<Authenticator>(std::move(*ring));
    start_on_sim(std::move(cfg), std::move(o));
  }
  static std::string bearer(std::string_view key) {
    return "Authorization: Bearer " + std::string(key) + "\r\n";
  }
  // A tagged call of stage `answer` in run `run`, with `key`.
  std::string ask(std::string_view key, std::string_view run) {
    return exchange(post("/v1/chat/completions", kAuthChat,
                         bearer(key) + "X-DynRT-Workflow: tn\r\nX-DynRT-Workflow-Id: " +
                             std::string(run) + "\r\nX-DynRT-Stage: answer\r\n"));
  }
  std::string get(std::string_view path, std::string_view extra = "") {
    return exchange("GET " + std::string(path) + " HTTP/1.1\r\nHost: x\r\n" + std::string(extra) +
                    "Connection: close\r\n\r\n");
  }
};

std::string served_of(const std::string& response) {
  const std::string head = response.substr(0, response.find("\r\n\r\n"));
  const auto at = head.find("X-DynRT-Served: ");
  return at == std::string::npos ? std::string()
                                 : head.substr(at + 16, head.find("\r\n", at) - at - 16);
}

TEST_F(AuthGateway, WithoutAValidKeyEveryRouteButHealthIs401AndNothingRuns) {
  const std::vector<std::string> wrong = {std::string(), bearer("sk-wrong"),
                                          "Authorization: Basic eDp5\r\n", bearer("")};
  for (const auto& extra : wrong) {
    const auto r = exchange(post("/v1/chat/completions", kChat, extra));
    const json e = expect_error(r, 401);
    EXPECT_EQ(e["type"], "authentication_error");
    EXPECT_TRUE(has_header(r, "WWW-Authenticate: Bearer"));
    expect_error(exchange(post("/v1/dynrt/writes", R"({"keys":["doc:hi"]})", extra)), 401);
    expect_error(get("/metrics", extra), 401);
    expect_error(get("/v1/models", extra), 401);
  }
  EXPECT_EQ(status_of(get("/healthz")), 200);
  const RuntimeStats s = runtime_->stats();
  EXPECT_EQ(s.requests, 0u) << "a refused request reached the runtime (and the engine's key)";
  EXPECT_EQ(s.writes, 0u);
  // Four wrong keys on four routes; nothing else was refused.
  const std::string metrics = body_of(get("/metrics", bearer("sk-scrape")));
  EXPECT_NE(metrics.find("dynrt_auth_refused_total{reason=\"unauthenticated\"} 16\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("dynrt_auth_refused_total{reason=\"forbidden\"} 0\n"), std::string::npos);
  EXPECT_NE(metrics.find("dynrt_auth_refused_total{reason=\"rate_limited\"} 0\n"),
            std::string::npos);
}

TEST_F(AuthGateway, AnthropicClientsMaySendTheirKeyAsXApiKeyAndAreAnsweredInTheirShape) {
  const std::string msgs =
      R"({"model":"sim","max_tokens":8,"messages":[{"role":"user","content":"hi"}]})";
  const auto ok = exchange(post("/v1/messages", msgs, "x-api-key: sk-acme-1\r\n"));
  ASSERT_EQ(status_of(ok), 200) << ok;
  EXPECT_EQ(json::parse(body_of(ok))["type"], "message");
  const auto bad = exchange(post("/v1/messages", msgs, "x-api-key: sk-wrong\r\n"));
  EXPECT_EQ(status_of(bad), 401);
  const json e = json::parse(body_of(bad), nullptr, false);
  EXPECT_EQ(e["type"], "error") << body_of(bad);
  EXPECT_EQ(e["error"]["type"], "authentication_error");
  // An Authorization header, when sent, is the one that counts.
  EXPECT_EQ(status_of(exchange(
                post("/v1/messages", msgs, bearer("sk-wrong") + "x-api-key: sk-acme-1\r\n"))),
            401);
  // A refused translation is a 400 in Anthropic's shape naming the field.
  const auto refused = exchange(
      post("/v1/messages", R"({"model":"sim","messages":[{"role":"user","content":"hi"}]})",
           "x-api-key: sk-acme-1\r\n"));
  EXPECT_EQ(status_of(refused), 400);
  const json r = json::parse(body_of(refused), nullptr, false);
  EXPECT_EQ(r["error"]["type"], "invalid_request_error") << body_of(refused);
  EXPECT_NE(r["error"]["message"].get<std::string>().find("max_tokens"), std::string::npos);
}

TEST_F(AuthGateway, AKeyWithoutTheRoutesScopeIs403) {
  const json e = expect_error(get("/metrics", bearer("sk-acme-1")), 403);
  EXPECT_EQ(e["type"], "permission_error");
  expect_error(exchange(post("/v1/dynrt/writes", R"({"keys":["doc:hi"]})", bearer("sk-acme-1"))),
               403);
  expect_error(exchange(post("/v1/chat/completions", kChat, bearer("sk-scrape"))), 403);
  EXPECT_EQ(status_of(get("/metrics", bearer("sk-scrape"))), 200);
  EXPECT_EQ(status_of(get("/metrics", bearer("sk-ops"))), 200) << "admin has every scope";
  EXPECT_EQ(status_of(get("/v1/models", bearer("sk-acme-1"))), 200);
  EXPECT_EQ(runtime_->stats().requests, 0u);
  const std::string metrics = body_of(get("/metrics", bearer("sk-scrape")));
  EXPECT_NE(metrics.find("dynrt_auth_refused_total{reason=\"forbidden\"} 3\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("dynrt_auth_refused_total{reason=\"unauthenticated\"} 0\n"),
            std::string::npos);
}

TEST_F(AuthGateway, TenantsAreServedOnlyTheirOwnResults) {
  EXPECT_EQ(served_of(ask("sk-acme-1", "r1")), "engine");
  const auto again = ask("sk-acme-2", "r2");  // same tenant, other key
  EXPECT_EQ(served_of(again), "cache");
  const auto other = ask("sk-beta-1", "r3");
  EXPECT_EQ(served_of(other), "engine") << "beta was served acme's result";
  EXPECT_EQ(body_of(other), body_of(again)) << "the engine's answer either way";
  EXPECT_EQ(served_of(ask("sk-ops", "r4")), "engine");
}

TEST_F(AuthGateway, WritesReachTheWritersTenantOrEverywhereForAdmin) {
  ask("sk-acme-1", "r1");
  ask("sk-beta-1", "r2");
  const auto w = exchange(post("/v1/dynrt/writes", R"({"keys":["doc:hi"]})", bearer("sk-beta-1")));
  EXPECT_EQ(status_of(w), 200) << w;
  EXPECT_EQ(json::parse(body_of(w))["invalidated"], 1);
  EXPECT_EQ(served_of(ask("sk-acme-2", "r3")), "cache") << "beta's write reached acme";
  EXPECT_EQ(served_of(ask("sk-beta-1", "r4")), "engine");
  const auto all = exchange(post("/v1/dynrt/writes", R"({"keys":["doc:hi"]})", bearer("sk-ops")));
  EXPECT_EQ(json::parse(body_of(all))["invalidated"], 2);
  EXPECT_EQ(served_of(ask("sk-acme-1", "r5")), "engine");
}

TEST_F(AuthGateway, AKeyOverItsRateIs429WithRetryAfter) {
  for (int i = 0; i < 4; ++i)  // the burst
    EXPECT_EQ(status_of(get("/v1/models", bearer("sk-beta-1"))), 200);
  const auto r = get("/v1/models", bearer("sk-beta-1"));
  const json e = expect_error(r, 429);
  EXPECT_EQ(e["type"], "rate_limit_exceeded");
  const auto retry = header_of(r, "Retry-After");
  ASSERT_FALSE(retry.empty());
  EXPECT_GE(std::stoi(retry), 1);
  EXPECT_EQ(status_of(get("/v1/models", bearer("sk-acme-1"))), 200) << "limits are per key";
  const std::string metrics = body_of(get("/metrics", bearer("sk-scrape")));
  EXPECT_NE(metrics.find("dynrt_auth_refused_total{reason=\"rate_limited\"} 1\n"),
            std::string::npos)
      << metrics;
  EXPECT_EQ(metrics.find("sk-"), std::string::npos) << "a key in /metrics";
}

// -- engine faults as a client sees them -------------------------------------------------------

using testing::FaultyServer;
using Mode = FaultyServer::Mode;

// One reusable stage on the faulty engine.
const char* kFaultsTemplate = R"(version: 1
workflow: faults
stages:
  answer:
    kind: model
    speculable: true
    model: m
    params: {temperature: 0, max_tokens: 8}
    request:
      messages: [{role: user, content: "hi"}]
)";

const std::string kFaultsChat =
    R"({"model":"m","temperature":0,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]})";
const std::string kFaultsStream = R"({"model":"m","temperature":0,"max_tokens":8,"stream":true,)"
                                  R"("messages":[{"role":"user","content":"hi"}]})";
constexpr std::string_view kTagged =
    "X-DynRT-Workflow: faults\r\nX-DynRT-Workflow-Id: run-1\r\nX-DynRT-Stage: answer\r\n";

// The `data:` payloads of an SSE response, in order (chunk framing never splits an event).
std::vector<std::string> sse_events(const std::string& response) {
  std::vector<std::string> out;
  const std::string body = body_of(response);
  std::size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const auto end = body.find("\n\n", pos);
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end;
  }
  return out;
}

class GatewayFaults : public GatewayFixture {
 protected:
  void start(Mode mode, const std::function<void(engines::OpenAiOptions&)>& tune = {},
             std::shared_ptr<engines::ToolEngine> tools = nullptr) {
    server_ = std::make_unique<FaultyServer>(mode);
    engines::OpenAiOptions o;
    o.base_url = server_->base_url();
    o.scrape_interval = Duration::zero();
    o.first_byte_timeout = std::chrono::seconds(10);  // a safety net: nothing here stalls
    if (tune) tune(o);
    RuntimeConfig cfg;
    cfg.engines.push_back({"faulty", std::make_shared<engines::OpenAiEngine>(o), {"m"}});
    cfg.template_texts = {{"faults.yaml", kFaultsTemplate}};
    cfg.tools = std::move(tools);
    auto rt = Runtime::create(cfg);
    ASSERT_TRUE(rt.ok()) << rt.error().message;
    runtime_ = std::move(*rt);
    auto gw = Gateway::create(*runtime_, GatewayOptions{});
    ASSERT_TRUE(gw.ok()) << gw.error().message;
    gateway_ = std::move(*gw);
  }
  std::string metric(const std::string& name) {
    const std::string text =
        body_of(exchange("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    const auto at = text.find("\n" + name + " ");
    if (at == std::string::npos) return {};
    return text.substr(at + name.size() + 2, text.find('\n', at + 1) - at - name.size() - 2);
  }

  std::unique_ptr<FaultyServer> server_;
};

TEST_F(GatewayFaults, AnErrorEventMidStreamReachesTheClientAsSentThenDone) {
  start(Mode::stream_error_midway);
  const std::string r = exchange(post("/v1/chat/completions", kFaultsStream, kTagged));
  EXPECT_EQ(status_of(r), 200) << "the stream had begun";
  const auto events = sse_events(r);
  ASSERT_EQ(events.size(), 4u) << r;
  EXPECT_NE(events[0].find("\"content\":\"hi\""), std::string::npos);
  EXPECT_NE(events[1].find("\"content\":\"hi\""), std::string::npos);
  EXPECT_EQ(events[2], testing::kErrorEvent) << "the error event exactly as the engine sent it";
  EXPECT_EQ(events[3], "[DONE]");
  EXPECT_EQ(metric("dynrt_errors_total"), "1");
  EXPECT_EQ(metric("dynrt_csl_entries"), "0");
  // The identical request again: the engine, never the library.
  const std::string again = exchange(post("/v1/chat/completions", kFaultsStream, kTagged));
  EXPECT_EQ(header_of(again, "X-DynRT-Served"), "engine");
  EXPECT_EQ(server_->requests(), 2);
}

TEST_F(GatewayFaults, AnErrorMidStreamOfAMessagesCallIsAnErrorEventAndNothingIsStored) {
  start(Mode::stream_error_midway);
  const std::string body = R"({"model":"m","temperature":0,"max_tokens":8,"stream":true,)"
                           R"("messages":[{"role":"user","content":"hi"}]})";
  const std::string r = exchange(post("/v1/messages", body, kTagged));
  EXPECT_EQ(status_of(r), 200) << "the stream had begun";
  const std::string text = body_of(r);
  EXPECT_NE(text.find("event: message_start\n"), std::string::npos) << text;
  EXPECT_NE(text.find("event: content_block_delta\n"), std::string::npos) << text;
  EXPECT_NE(text.find("event: error\ndata: {\"type\":\"error\",\"error\":{"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("message_stop"), std::string::npos) << "a failed stream does not end well";
  EXPECT_EQ(text.find("[DONE]"), std::string::npos) << "Anthropic's streams have no [DONE]";
  EXPECT_EQ(metric("dynrt_errors_total"), "1");
  EXPECT_EQ(metric("dynrt_csl_entries"), "0");
  const std::string again = exchange(post("/v1/messages", body, kTagged));
  EXPECT_EQ(header_of(again, "X-DynRT-Served"), "engine");
  EXPECT_EQ(server_->requests(), 2);
}

TEST_F(GatewayFaults, AnErrorBeforeTheFirstChunkIsAJsonErrorResponse) {
  start(Mode::stream_error_only);
  const std::string r = exchange(post("/v1/chat/completions", kFaultsStream, kTagged));
  EXPECT_EQ(status_of(r), 500);
  EXPECT_EQ(header_of(r, "Content-Type"), "application/json");
  EXPECT_EQ(body_of(r), testing::kErrorEvent);
  EXPECT_EQ(metric("dynrt_errors_total"), "1");
}

TEST_F(GatewayFaults, TheEnginesRetryAfterReachesTheClient) {
  for (const auto mode : {Mode::status_429, Mode::status_503}) {
    start(mode);
    server_->set_retry_after("7");  // beyond the retry cap: the client gets it at once
    for (const std::string_view tags : {std::string_view(), kTagged}) {
      SCOPED_TRACE(tags.empty() ? "pass-through" : "tagged");
      const std::string r = exchange(post("/v1/chat/completions", kFaultsChat, tags));
      EXPECT_EQ(status_of(r), mode == Mode::status_429 ? 429 : 503) << r;
      EXPECT_EQ(header_of(r, "Retry-After"), "7") << r;
      EXPECT_TRUE(json::parse(body_of(r)).contains("error")) << "the engine's body";
    }
    TearDown();
  }
}

TEST_F(GatewayFaults, DynrtsOwn503sCarryRetryAfter) {
  auto clock = std::make_shared<ManualClock>();
  start(Mode::status_500, [&](engines::OpenAiOptions& o) {
    o.breaker.canonical_failures = 1;  // the first failure opens the circuit for 5 s
    o.clock = clock;
  });
  EXPECT_EQ(status_of(exchange(post("/v1/chat/completions", kFaultsChat))), 500);
  const std::string refused = exchange(post("/v1/chat/completions", kFaultsChat));
  EXPECT_EQ(status_of(refused), 503) << refused;
  EXPECT_EQ(header_of(refused, "Retry-After"), "5") << "when the circuit lets a probe through";
  EXPECT_EQ(server_->requests(), 1) << "refused without reaching the engine";
  runtime_->shutdown();
  const std::string stopping = exchange(post("/v1/chat/completions", kFaultsChat));
  EXPECT_EQ(status_of(stopping), 503) << stopping;
  EXPECT_EQ(header_of(stopping, "Retry-After"), "1");
}

TEST_F(GatewayFaults, AToolServersRetryAfterReachesTheToolsCaller) {
  FaultyServer tool_server(Mode::status_503);
  tool_server.set_retry_after("7");
  start(Mode::ok, {},
        std::make_shared<engines::HttpTool>(
            engines::HttpToolOptions{tool_server.base_url(), {"lookup"}}));
  const std::string r = exchange(post("/v1/dynrt/tools/lookup", R"({"q": "x"})"));
  EXPECT_EQ(status_of(r), 503) << "the tool's own status, not a 400: the call was fine";
  EXPECT_EQ(header_of(r, "Retry-After"), "7") << r;
  EXPECT_EQ(json::parse(body_of(r))["error"]["message"], "overloaded") << "the tool's body";
  EXPECT_EQ(metric("dynrt_errors_total"), "1");
}

}  // namespace
}  // namespace dynrt::gateway

// The gateway's cost and its library-hit throughput over HTTP, on loopback, in one process:
//   latency  untagged chat calls paced at 1,000/s, one connection, each answered at once by the
//            simulated engine (time scale 0): straight to the engine's HTTP server, then
//            through `dynrt serve`'s gateway (gateway -> runtime -> openai adapter -> engine)
//   hits     tool calls that the library answers (a confirmed entry), over N keep-alive
//            connections for a few seconds
//   auth     the latency run's calls through the gateway without keys, then through a gateway
//            with 100 API keys (each call hashed and compared with all of them)
// The client is a small blocking HTTP/1.1 keep-alive client (below); it shares the machine's
// cores with the servers. Usage: gateway_benchmark [latency|hits|auth|all] [connections]
// [seconds].
#include "actors/runtime.hpp"
#include "engines/openai/engine.hpp"
#include "engines/sim/engine.hpp"
#include "engines/sim/server.hpp"
#include "engines/tools/corpus.hpp"
#include "gateway/server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace dynrt;
using nlohmann::json;
using Wall = std::chrono::steady_clock;

namespace {

class Client {
 public:
  explicit Client(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) std::exit(2);
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Client() { ::close(fd_); }
  // Returns the status (0 on a broken exchange).
  int post(const std::string& path, const std::string& body, const std::string& headers = "") {
    const std::string req = "POST " + path +
                            " HTTP/1.1\r\nHost: b\r\nContent-Type: "
                            "application/json\r\n" +
                            headers + "Content-Length: " + std::to_string(body.size()) +
                            "\r\n\r\n" + body;
    if (::send(fd_, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size()))
      return 0;
    std::string in;
    char buf[16384];
    std::size_t header_end = std::string::npos, need = 0;
    while (true) {
      const auto n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return 0;
      in.append(buf, static_cast<std::size_t>(n));
      if (header_end == std::string::npos) {
        header_end = in.find("\r\n\r\n");
        if (header_end == std::string::npos) continue;
        const auto cl = in.find("Content-Length: ");
        if (cl == std::string::npos || cl > header_end) return 0;
        need = header_end + 4 + std::stoul(in.substr(cl + 16));
      }
      if (in.size() >= need) break;
    }
    return std::atoi(in.c_str() + 9);
  }

 private:
  int fd_ = -1;
};

double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))];
}

std::vector<double> paced(std::uint16_t port, int n, const std::string& headers) {
  Client c(port);
  std::vector<double> us;
  const auto start = Wall::now();
  for (int i = 0; i < n; ++i) {
    const auto due = start + std::chrono::microseconds(1000) * i;  // 1,000 per second
    while (Wall::now() < due)
      std::this_thread::yield();
    const json body = {
        {"model", "qwen3-32b"},
        {"max_tokens", 8},
        {"messages", json::array({{{"role", "user"}, {"content", "hi " + std::to_string(i)}}})}};
    const auto s = Wall::now();
    if (c.post("/v1/chat/completions", body.dump(), headers) != 200) std::exit(3);
    us.push_back(std::chrono::duration<double, std::micro>(Wall::now() - s).count());
  }
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "all";
  const int connections = argc > 2 ? std::max(1, std::atoi(argv[2])) : 4;
  const int seconds = argc > 3 ? std::max(1, std::atoi(argv[3])) : 5;

  engines::sim::SimEngineOptions so;
  so.time_scale = 0;
  engines::sim::SimEngine sim({}, {}, so);
  engines::sim::SimServerOptions sso;
  sso.threads = 1;
  auto sim_created = engines::sim::SimServer::create(sim, sso);
  if (!sim_created) {
    std::fprintf(stderr, "%s\n", sim_created.error().message.c_str());
    return 1;
  }
  const std::unique_ptr<engines::sim::SimServer> sim_server = std::move(sim_created).value();

  const std::string tmpl = R"(version: 1
workflow: bench
inputs:
  entity: {description: a record}
stages:
  lookup:
    kind: tool
    tool: lookup
    speculable: true
    bind: {entity: /entity}
    arguments: {entity: "{{entity}}"}
    reads: ["doc:{{entity}}"]
)";
  auto corpus = *engines::Corpus::from_json(json::array({{{"key", "doc:a"}, {"text", "Alpha."}}}));
  corpus->add_tool("lookup", {engines::Corpus::Kind::lookup, "doc:{{entity}}"});
  engines::OpenAiOptions oo;
  oo.base_url = "http://127.0.0.1:" + std::to_string(sim_server->port());
  oo.flavor = engines::EngineFlavor::vllm;
  RuntimeConfig cfg;
  cfg.engines.push_back({"sim", std::make_shared<engines::OpenAiEngine>(oo), {}});
  cfg.tools = corpus;
  cfg.template_texts = {{"bench.yaml", tmpl}};
  auto created = Runtime::create(cfg);
  if (!created) {
    std::fprintf(stderr, "%s\n", created.error().message.c_str());
    return 1;
  }
  auto rt = std::move(created.value());
  gateway::GatewayOptions go;
  go.threads = 2;
  auto created_gw = gateway::Gateway::create(*rt, go);
  if (!created_gw) {
    std::fprintf(stderr, "%s\n", created_gw.error().message.c_str());
    return 1;
  }
  const std::unique_ptr<gateway::Gateway> gw = std::move(created_gw).value();

  if (what == "latency" || what == "all") {
    paced(sim_server->port(), 500, "");  // warm-up
    const auto direct = paced(sim_server->port(), 5000, "");
    paced(gw->port(), 500, "");
    const auto through = paced(gw->port(), 5000, "");
    std::printf("paced 1,000/s, 5,000 calls   p50 %.0f us  p99 %.0f us  (engine server directly)\n",
                pct(direct, 0.5), pct(direct, 0.99));
    std::printf("                             p50 %.0f us  p99 %.0f us  (through the gateway)\n",
                pct(through, 0.5), pct(through, 0.99));
    std::printf("added by the gateway         p50 %.0f us  p99 %.0f us\n",
                pct(through, 0.5) - pct(direct, 0.5), pct(through, 0.99) - pct(direct, 0.99));
  }
  if (what == "auth" || what == "all") {
    // 100 keys; the benchmark's is the last one compared (all are compared, in constant time).
    std::string keys = "keys:\n";
    for (int i = 0; i < 100; ++i) {
      const std::string hex = gateway::to_hex(gateway::sha256("sk-bench-" + std::to_string(i)));
      keys += "  - {name: k" + std::to_string(i) + ", key_sha256: " + hex + ", tenant: t" +
              std::to_string(i % 10) + ", scopes: [infer]}\n";
    }
    auto ring = gateway::parse_keys(keys, "bench-keys");
    if (!ring) {
      std::fprintf(stderr, "%s\n", ring.error().message.c_str());
      return 1;
    }
    gateway::GatewayOptions ao = go;
    ao.auth = std::make_shared<gateway::Authenticator>(std::move(*ring));
    auto created_authed = gateway::Gateway::create(*rt, ao);
    if (!created_authed) {
      std::fprintf(stderr, "%s\n", created_authed.error().message.c_str());
      return 1;
    }
    const std::unique_ptr<gateway::Gateway> authed = std::move(created_authed).value();
    const std::string bearer = "Authorization: Bearer sk-bench-99\r\n";
    paced(gw->port(), 500, "");
    const auto open = paced(gw->port(), 5000, "");
    paced(authed->port(), 500, bearer);
    const auto keyed = paced(authed->port(), 5000, bearer);
    std::printf("paced 1,000/s, 5,000 calls   p50 %.0f us  p99 %.0f us  (gateway without keys)\n",
                pct(open, 0.5), pct(open, 0.99));
    std::printf("                             p50 %.0f us  p99 %.0f us  (gateway with 100 keys)\n",
                pct(keyed, 0.5), pct(keyed, 0.99));
    std::printf("added by authentication      p50 %.0f us  p99 %.0f us\n",
                pct(keyed, 0.5) - pct(open, 0.5), pct(keyed, 0.99) - pct(open, 0.99));
    authed->stop();
  }
  if (what == "hits" || what == "all") {
    const std::string body = json{{"entity", "a"}}.dump();
    {
      Client c(gw->port());  // the first call executes and stores the entry
      c.post("/v1/dynrt/tools/lookup", body,
             "X-DynRT-Workflow: bench\r\nX-DynRT-Workflow-Id: warm\r\nX-DynRT-Stage: lookup\r\n");
    }
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> done{0}, failed{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < connections; ++t)
      pool.emplace_back([&, t] {
        Client c(gw->port());
        const std::string h = "X-DynRT-Workflow: bench\r\nX-DynRT-Workflow-Id: c" +
                              std::to_string(t) + "\r\nX-DynRT-Stage: lookup\r\n";
        while (!stop)
          (c.post("/v1/dynrt/tools/lookup", body, h) == 200 ? done : failed)++;
      });
    const auto s = Wall::now();
    std::this_thread::sleep_for(std::chrono::seconds(seconds));  // the measurement window
    stop = true;
    for (auto& t : pool)
      t.join();
    const double secs = std::chrono::duration<double>(Wall::now() - s).count();
    const auto st = rt->stats();
    std::printf(
        "library hits over HTTP, %d connections: %.0f requests/s (%llu in %.1f s, %llu "
        "failed; served from the library: %llu)\n",
        connections, static_cast<double>(done) / secs, static_cast<unsigned long long>(done.load()),
        secs, static_cast<unsigned long long>(failed.load()),
        static_cast<unsigned long long>(st.served_cache));
  }
  gw->stop();
  rt->shutdown();
  return 0;
}

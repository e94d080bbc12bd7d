// The simulated engine as an HTTP server: what `dynrt-sim-engine` runs.
//
// SimServer serves a SimEngine over the OpenAI-compatible API a vLLM server offers:
// POST /v1/chat/completions and /v1/completions (streamed as server-sent events ending in
// `data: [DONE]`, with the usage chunk of stream_options.include_usage, or whole), GET
// /v1/models, GET /health, and GET /metrics in vLLM's Prometheus format
// (vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc and token
// counters). A client that disconnects while its request runs has the request cancelled, which
// frees its slot at once, as vLLM does. Errors come back in the OpenAI shape
// {"error": {"message", "type", "param", "code"}} (engines/openai/error_body.hpp).
//
// HTTP itself is the server core's (engines/http/server_core.hpp): keep-alive, a minute for a
// request to arrive and a minute idle between requests, the body limit, a fixed pool of I/O
// threads; engine callbacks are posted to each connection's strand.
#pragma once

#include "engines/sim/engine.hpp"
#include "runtime/expected.hpp"

#include <cstdint>
#include <memory>
#include <string>

namespace dynrt::engines::sim {

struct SimServerOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: any free port (port() tells which)
  int threads = 2;
  std::string model = "sim";  // what /v1/models lists
  std::size_t max_body_bytes = std::size_t{8} << 20;
};

class SimServer {
 public:
  // Listens at once. The error names the address and why it cannot be listened on: "cannot
  // listen on HOST:PORT: not an IP address", or the OS's reason ("Address already in use").
  static Expected<std::unique_ptr<SimServer>> create(SimEngine& engine, SimServerOptions options);
  ~SimServer();  // stops; neither copied nor moved (it owns its Impl, which its threads use)

  std::uint16_t port() const;
  // Stops accepting, cancels the requests in flight and delivers their callbacks, then joins
  // the I/O threads. Idempotent.
  void stop();

  struct Impl;  // defined in server.cpp; public so its connections can name it

 private:
  SimServer(SimEngine& engine, SimServerOptions options);

  std::unique_ptr<Impl> impl_;
};

}  // namespace dynrt::engines::sim

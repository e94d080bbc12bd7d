// The OpenAI-compatible HTTP gateway in front of dynrt::Runtime: what `dynrt serve` runs.
//
//   POST /v1/chat/completions, /v1/completions   a model call; streamed (SSE) or whole
//   POST /v1/dynrt/tools/{name}                  a tool call; the body is its arguments
//   POST /v1/dynrt/writes                        {"keys": [...]}; answered once in force
//   GET  /v1/models                              the configured models
//   GET  /metrics                                Prometheus text: served, fills, library, gates
//   GET  /healthz                                liveness
//
// With keys configured (GatewayOptions::auth), every route but /healthz needs
// `Authorization: Bearer <key>`: 401 (authentication_error) without a valid key, 403
// (permission_error) without the route's scope, 429 with Retry-After over the key's rate; the
// key's tenant scopes what its calls are served and what its writes reach (docs/operations.md,
// "Security").
//
// Tags come from the X-DynRT-Workflow, X-DynRT-Workflow-Id and X-DynRT-Stage headers; a
// request without them is forwarded unchanged. The X-DynRT-Served response header says how an
// answer was produced (engine, fill or cache); the body never does. A client that disconnects
// while its call runs has the call cancelled. Errors use the OpenAI shape {"error": {"message",
// "type", "param", "code"}}: 400 malformed JSON or fields (gateway/request.hpp says what is
// checked), conflicting Content-Length and Transfer-Encoding or a transfer coding other than
// chunked (then the connection is closed), 404 unknown route, 405 wrong method, 408 request
// deadline, 413 body over the limit (refused before it is buffered), 431 headers too large,
// 503 with Retry-After over the connection cap, and the engine's status or 502/504 for engine
// failures.
//
// With a certificate and key (GatewayOptions::tls_cert, tls_key) it accepts only TLS (1.2 or
// later) and everything above holds over TLS; the handshake must finish within header_timeout.
//
// HTTP itself (keep-alive, deadlines, limits, server-sent events, the connection cap, a fixed
// pool of I/O threads, never a thread per request) is the server core's,
// engines/http/server_core.hpp; Runtime callbacks are posted to each connection's strand. GET
// /metrics is written by gateway/metrics.hpp.
#pragma once

#include "actors/runtime.hpp"
#include "gateway/auth.hpp"
#include "runtime/expected.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dynrt::gateway {

struct GatewayOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: any free port (port() tells which)
  int threads = 2;
  std::size_t max_body_bytes = std::size_t{8} << 20;
  std::size_t max_header_bytes = std::size_t{16} << 10;
  std::chrono::milliseconds header_timeout{10'000};  // to receive a whole request
  std::chrono::milliseconds idle_timeout{60'000};    // a kept-alive connection waiting for more
  std::size_t max_connections = 4096;                // over it: 503 with Retry-After, closed
  std::vector<std::string> models;                   // what /v1/models lists
  // Keys, scopes, tenants and per-key limits (gateway/auth.hpp); null or without keys: every
  // request is allowed, as one tenant. Shared so that a reload can replace its keys.
  std::shared_ptr<Authenticator> auth;
  // PEM files of a certificate chain and its private key (gateway/tls.hpp): both, and the
  // gateway speaks only TLS; neither, and only plain HTTP.
  std::string tls_cert;
  std::string tls_key;
  // `dynrt serve --record`: hears of every tagged call once answered, as one JSON object
  // (workflow, id, stage, endpoint, tenant, request, status, served, response, latency_ms,
  // stream). Keys and headers are never in it. Called on an I/O thread: must not block.
  std::function<void(const nlohmann::json&)> record;
};

class Gateway {
 public:
  // Listens at once. The error says what is wrong: a certificate without its key (or the other
  // way round), the certificate or key file and what is wrong with it (gateway/tls.hpp), or the
  // address it cannot listen on and why ("cannot listen on HOST:PORT: not an IP address", or
  // the OS's reason, "Address already in use").
  static Expected<std::unique_ptr<Gateway>> create(Runtime& runtime, GatewayOptions options);
  ~Gateway();  // stops
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  std::uint16_t port() const;
  bool tls() const;
  // Reads the TLS certificate and key again (after a renewal): connections accepted from now on
  // use them, open ones keep theirs. On an error the previous ones stay in force. Returns what
  // load_tls_context() says of the certificate. Any thread.
  Expected<std::string> reload_tls();
  // Stops accepting; calls in flight may finish within `grace`, then the rest are cancelled
  // and the I/O threads joined. Idempotent.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(0));

  struct Impl;

 private:
  Gateway(Runtime& runtime, GatewayOptions options);

  std::unique_ptr<Impl> impl_;
};

}  // namespace dynrt::gateway

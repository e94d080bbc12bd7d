// HTTP transfers on libcurl's multi interface, driven by one dedicated thread.
//
// CurlLoop owns a curl multi handle and the thread that runs it; start() and cancel() may be
// called from any thread: they queue a command and wake the loop with curl_multi_wakeup, so
// nothing the caller does ever waits on the network. Connections are reused across transfers
// (the multi handle's connection cache). Every transfer has its own deadlines, enforced by the
// loop itself: connect, first byte (of the response headers), idle (between received bytes)
// and total; a zero deadline is none. The handler's callbacks run on the loop thread, one
// transfer's in order, and exactly one on_done() ends every started transfer: on success, on a
// transport error, on a deadline, on cancel(), or when the loop stops. after() runs a task once
// on the loop thread after a delay (a retry's backoff); tasks still waiting when the loop stops
// are dropped, so an owner that schedules them must settle their work itself after stop().
#pragma once

#include "engines/engine.hpp"
#include "runtime/clock.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace dynrt::engines {

struct HttpCall {
  std::string method = "POST";  // POST, PUT or PATCH (with `body`), or GET
  std::string url;
  std::string body;
  std::vector<std::string> headers;  // "Name: value"
  Duration connect_timeout{0};
  Duration first_byte_timeout{0};
  Duration idle_timeout{0};
  Duration total_timeout{0};
  std::size_t max_response_bytes = std::size_t{64} << 20;
  // False: the connection is refused (outcome `refused`) when the address it reaches is
  // loopback, link-local or unspecified (127.0.0.0/8, ::1, 169.254.0.0/16, fe80::/10, 0.0.0.0),
  // checked on the address actually connected to, so a name that resolves there is caught too.
  bool allow_internal = true;
};

// Whether `ip` (as text) is loopback, link-local or unspecified.
bool internal_address(std::string_view ip);

struct HttpOutcome {
  enum class Kind {
    ok,                  ///< the response arrived complete
    refused,             ///< no connection (refused, unreachable, unresolvable)
    connect_timeout,     ///< connecting took longer than the connect deadline
    first_byte_timeout,  ///< no response byte before the first-byte deadline
    idle_timeout,        ///< the response stalled longer than the idle deadline
    total_timeout,       ///< the transfer outlived its total deadline
    transport,           ///< the connection broke mid-transfer (reset, truncated body)
    aborted,             ///< the handler's on_data() returned false
    too_large,           ///< the response exceeded max_response_bytes
    cancelled,           ///< cancel() was called, or the loop stopped
  };
  Kind kind = Kind::ok;
  int status = 0;  // the HTTP status, once the headers arrived
  std::string message;
};

// The engine error kind of a transfer that did not end `ok` (one mapping for every HTTP client).
ErrorKind error_kind(HttpOutcome::Kind kind);

// Whether a header's name is `lower_name` (given in lower case), as HTTP compares names.
bool header_is(std::string_view name, std::string_view lower_name);

class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  // The response headers are complete.
  virtual void on_status(int /*status*/) {}
  // One response header line, split at its colon, value trimmed (Retry-After, say).
  virtual void on_header(std::string_view /*name*/, std::string_view /*value*/) {}
  // A piece of the response body; false aborts the transfer (outcome: aborted).
  virtual bool on_data(std::string_view bytes) = 0;
  virtual void on_done(const HttpOutcome& outcome) = 0;
};

class CurlLoop {
 public:
  using CallId = std::uint64_t;

  explicit CurlLoop(long max_connections = 256);
  // Stops the thread; unfinished transfers end with on_done(cancelled).
  ~CurlLoop();
  CurlLoop(const CurlLoop&) = delete;
  CurlLoop& operator=(const CurlLoop&) = delete;

  CallId start(HttpCall call, std::shared_ptr<HttpHandler> handler);
  void cancel(CallId id);
  // Runs `task` on the loop thread every `period`, first after one period.
  void every(Duration period, std::function<void()> task);
  // Runs `task` once on the loop thread after `delay` (zero: on the loop's next turn).
  void after(Duration delay, std::function<void()> task);
  // Stops the thread (unfinished transfers end with on_done(cancelled)); idempotent. Owners
  // whose periodic tasks use the loop call it before tearing the loop down.
  void stop();
  // Connections opened so far by finished transfers; fewer than transfers means reuse.
  std::uint64_t connections_opened() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dynrt::engines

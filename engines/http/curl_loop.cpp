#include "engines/http/curl_loop.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>

namespace dynrt::engines {

namespace {

using Clock = std::chrono::steady_clock;

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

}  // namespace

bool internal_address(std::string_view ip) {
  std::string a(ip);
  if (a.rfind("::ffff:", 0) == 0 && a.find('.') != std::string::npos) a = a.substr(7);  // v4-mapped
  if (a.find(':') == std::string::npos) {
    unsigned b[4] = {0, 0, 0, 0};
    if (std::sscanf(a.c_str(), "%u.%u.%u.%u", &b[0], &b[1], &b[2], &b[3]) != 4) return true;
    return b[0] == 127 || b[0] == 0 || (b[0] == 169 && b[1] == 254);
  }
  std::string lower;
  for (const char c : a)
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower == "::1" || lower == "::" || lower.rfind("fe8", 0) == 0 ||
         lower.rfind("fe9", 0) == 0 || lower.rfind("fea", 0) == 0 || lower.rfind("feb", 0) == 0;
}

ErrorKind error_kind(HttpOutcome::Kind k) {
  switch (k) {
    case HttpOutcome::Kind::refused:
      return ErrorKind::refused;
    case HttpOutcome::Kind::connect_timeout:
      return ErrorKind::connect_timeout;
    case HttpOutcome::Kind::first_byte_timeout:
      return ErrorKind::first_byte_timeout;
    case HttpOutcome::Kind::idle_timeout:
      return ErrorKind::idle_timeout;
    case HttpOutcome::Kind::total_timeout:
      return ErrorKind::total_timeout;
    case HttpOutcome::Kind::transport:
      return ErrorKind::truncated;
    case HttpOutcome::Kind::aborted:
      return ErrorKind::malformed;
    case HttpOutcome::Kind::too_large:
      return ErrorKind::malformed;
    case HttpOutcome::Kind::cancelled:
      return ErrorKind::cancelled;
    case HttpOutcome::Kind::ok:
      break;
  }
  return ErrorKind::internal;
}

bool header_is(std::string_view name, std::string_view lower_name) {
  return name.size() == lower_name.size() &&
         std::equal(name.begin(), name.end(), lower_name.begin(), [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) == b;
         });
}

struct CurlLoop::Impl {
  std::atomic<std::uint64_t> connections_opened{0};
  struct Transfer {
    CallId id = 0;
    CURL* easy = nullptr;
    curl_slist* headers = nullptr;
    std::shared_ptr<HttpHandler> handler;
    HttpCall call;
    Clock::time_point started;
    Clock::time_point last_byte;
    bool got_byte = false;
    bool headers_done = false;
    bool aborted = false;  // on_data returned false
    bool too_large = false;
    std::string denied;  // the internal address allow_internal refused
    std::size_t received = 0;
    int status = 0;
    char error[CURL_ERROR_SIZE] = {0};
    Impl* loop = nullptr;
  };
  struct Command {
    enum class Type { start, cancel, periodic, timer } type;
    CallId id = 0;
    HttpCall call;
    std::shared_ptr<HttpHandler> handler;
    Duration period{0};
    std::function<void()> task;
  };
  struct Periodic {
    Duration period;
    Clock::time_point next;
    std::function<void()> task;
  };

  CURLM* multi = nullptr;
  std::mutex mutex;
  std::deque<Command> commands;
  bool stop = false;
  std::atomic<CallId> next_id{1};
  std::unordered_map<CallId, std::unique_ptr<Transfer>> transfers;  // loop thread only
  std::vector<Periodic> periodic;                                   // loop thread only
  std::multimap<Clock::time_point, std::function<void()>> timers;   // loop thread only
  std::thread thread;

  void wake() { curl_multi_wakeup(multi); }

  static std::size_t on_header(char* data, std::size_t size, std::size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    const std::size_t len = size * n;
    t->got_byte = true;
    t->last_byte = Clock::now();
    const std::string_view line(data, len);
    if (line.starts_with("HTTP/")) {  // a new status line (after a 100 Continue, say)
      t->headers_done = false;
    } else if (const auto colon = line.find(':'); colon != std::string_view::npos) {
      std::string_view value = line.substr(colon + 1);
      const auto first = value.find_first_not_of(" \t");
      const auto last = value.find_last_not_of(" \t\r\n");
      value = first == std::string_view::npos ? std::string_view{}
                                              : value.substr(first, last - first + 1);
      t->handler->on_header(line.substr(0, colon), value);
    } else if (line == "\r\n" || line == "\n") {
      long code = 0;
      curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &code);
      if (code >= 200 && !t->headers_done) {
        t->headers_done = true;
        t->status = static_cast<int>(code);
        t->handler->on_status(t->status);
      }
    }
    return len;
  }

  // Called once connected, before the request is sent: refuses an internal address.
  static int on_connected(void* user, char* primary_ip, char*, int, int) {
    auto* t = static_cast<Transfer*>(user);
    if (!internal_address(primary_ip)) return CURL_PREREQFUNC_OK;
    t->denied = primary_ip;
    return CURL_PREREQFUNC_ABORT;
  }

  static std::size_t on_write(char* data, std::size_t size, std::size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    const std::size_t len = size * n;
    t->got_byte = true;
    t->last_byte = Clock::now();
    t->received += len;
    if (t->received > t->call.max_response_bytes) {
      t->too_large = true;
      return 0;  // CURLE_WRITE_ERROR ends the transfer
    }
    if (!t->handler->on_data(std::string_view(data, len))) {
      t->aborted = true;
      return 0;
    }
    return len;
  }

  void begin(Command& c) {
    auto t = std::make_unique<Transfer>();
    t->id = c.id;
    t->handler = std::move(c.handler);
    t->call = std::move(c.call);
    t->loop = this;
    t->started = Clock::now();
    t->last_byte = t->started;
    CURL* e = curl_easy_init();
    if (!e) {
      t->handler->on_done(HttpOutcome{HttpOutcome::Kind::transport, 0, "curl_easy_init failed"});
      return;
    }
    t->easy = e;
    curl_easy_setopt(e, CURLOPT_URL, t->call.url.c_str());
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->error);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Impl::on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &Impl::on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, t.get());
    curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
    if (t->call.connect_timeout > Duration::zero()) {
      curl_easy_setopt(
          e, CURLOPT_CONNECTTIMEOUT_MS,
          static_cast<long>(std::max<std::int64_t>(
              1, std::chrono::duration_cast<std::chrono::milliseconds>(t->call.connect_timeout)
                     .count())));
    }
    if (t->call.method == "GET") {
      curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    } else {
      curl_easy_setopt(e, CURLOPT_POST, 1L);
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
                       static_cast<curl_off_t>(t->call.body.size()));
      curl_easy_setopt(e, CURLOPT_POSTFIELDS, t->call.body.data());  // owned by the transfer
      if (t->call.method != "POST")
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, t->call.method.c_str());
    }
    if (!t->call.allow_internal) {
      curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, &Impl::on_connected);
      curl_easy_setopt(e, CURLOPT_PREREQDATA, t.get());
    }
    t->headers = curl_slist_append(t->headers, "Expect:");  // no 100-continue round trip
    for (const std::string& h : t->call.headers)
      t->headers = curl_slist_append(t->headers, h.c_str());
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
    curl_multi_add_handle(multi, e);
    transfers.emplace(t->id, std::move(t));
  }

  void finish(CallId id, HttpOutcome outcome) {
    const auto it = transfers.find(id);
    if (it == transfers.end()) return;
    std::unique_ptr<Transfer> t = std::move(it->second);
    transfers.erase(it);
    curl_multi_remove_handle(multi, t->easy);
    curl_easy_cleanup(t->easy);
    curl_slist_free_all(t->headers);
    if (outcome.status == 0) outcome.status = t->status;
    t->handler->on_done(outcome);
  }

  HttpOutcome outcome_of(const Transfer& t, CURLcode code) const {
    using Kind = HttpOutcome::Kind;
    HttpOutcome o;
    o.status = t.status;
    o.message = t.error[0] ? std::string(t.error) : std::string(curl_easy_strerror(code));
    if (code == CURLE_OK) {
      o.kind = Kind::ok;
      o.message.clear();
    } else if (!t.denied.empty()) {
      o.kind = Kind::refused;
      o.message = "the address " + t.denied +
                  " is loopback, link-local or unspecified, and this call may not reach it";
    } else if (t.too_large) {
      o.kind = Kind::too_large;
      o.message =
          "the response is larger than " + std::to_string(t.call.max_response_bytes) + " bytes";
    } else if (t.aborted) {
      o.kind = Kind::aborted;
    } else if (code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST ||
               code == CURLE_COULDNT_RESOLVE_PROXY) {
      o.kind = Kind::refused;
    } else if (code == CURLE_OPERATION_TIMEDOUT) {
      double connect = 0;
      curl_easy_getinfo(t.easy, CURLINFO_CONNECT_TIME, &connect);
      o.kind = connect <= 0 ? Kind::connect_timeout : Kind::total_timeout;
    } else {
      o.kind = Kind::transport;
    }
    return o;
  }

  // Enforces the per-transfer deadlines; returns the time until the nearest one.
  Duration check_deadlines() {
    using Kind = HttpOutcome::Kind;
    const auto now = Clock::now();
    Duration nearest = std::chrono::seconds(1);
    std::vector<std::pair<CallId, Kind>> expired;
    for (auto& [id, t] : transfers) {
      auto consider = [&](Duration limit, Clock::time_point from, Kind kind, bool applies) {
        if (!applies || limit <= Duration::zero()) return false;
        const auto deadline = from + limit;
        if (now >= deadline) {
          expired.emplace_back(id, kind);
          return true;
        }
        nearest = std::min(nearest, std::chrono::duration_cast<Duration>(deadline - now));
        return false;
      };
      if (consider(t->call.total_timeout, t->started, Kind::total_timeout, true)) continue;
      if (consider(t->call.first_byte_timeout, t->started, Kind::first_byte_timeout,
                   !t->got_byte)) {
        continue;
      }
      consider(t->call.idle_timeout, t->last_byte, Kind::idle_timeout, t->got_byte);
    }
    for (const auto& [id, kind] : expired) {
      HttpOutcome o;
      o.kind = kind;
      o.message = std::string(kind == Kind::total_timeout        ? "total"
                              : kind == Kind::first_byte_timeout ? "first-byte"
                                                                 : "idle") +
                  " deadline exceeded";
      finish(id, std::move(o));
    }
    for (Periodic& p : periodic) {
      if (now >= p.next) {
        p.next = now + p.period;
        p.task();
      }
      nearest = std::min(nearest, std::chrono::duration_cast<Duration>(p.next - now));
    }
    // Due timers leave the map before they run: a task may schedule others (by command).
    std::vector<std::function<void()>> due;
    while (!timers.empty() && timers.begin()->first <= now) {
      due.push_back(std::move(timers.begin()->second));
      timers.erase(timers.begin());
    }
    for (auto& task : due)
      task();
    if (!timers.empty()) {
      nearest =
          std::min(nearest, std::chrono::duration_cast<Duration>(timers.begin()->first - now));
    }
    return nearest;
  }

  void run() {
    while (true) {
      std::deque<Command> batch;
      {
        std::lock_guard lock(mutex);
        if (stop) break;
        batch.swap(commands);
      }
      for (Command& c : batch) {
        switch (c.type) {
          case Command::Type::start:
            begin(c);
            break;
          case Command::Type::cancel:
            finish(c.id, HttpOutcome{HttpOutcome::Kind::cancelled, 0, "cancelled"});
            break;
          case Command::Type::periodic:
            periodic.push_back(Periodic{c.period, Clock::now() + c.period, std::move(c.task)});
            break;
          case Command::Type::timer:
            timers.emplace(Clock::now() + c.period, std::move(c.task));
            break;
        }
      }
      int running = 0;
      curl_multi_perform(multi, &running);
      int left = 0;
      while (CURLMsg* m = curl_multi_info_read(multi, &left)) {
        if (m->msg != CURLMSG_DONE) continue;
        Transfer* t = nullptr;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &t);
        if (!t) continue;
        long opened = 0;  // new connections this transfer made (0: it reused one)
        if (curl_easy_getinfo(m->easy_handle, CURLINFO_NUM_CONNECTS, &opened) == CURLE_OK) {
          connections_opened += static_cast<std::uint64_t>(std::max(opened, 0L));
        }
        finish(t->id, outcome_of(*t, m->data.result));
      }
      const Duration wait = check_deadlines();
      const int wait_ms = static_cast<int>(std::clamp<std::int64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(wait).count() + 1, 1, 1000));
      curl_multi_poll(multi, nullptr, 0, wait_ms, nullptr);
    }
    std::vector<CallId> ids;
    for (const auto& [id, t] : transfers)
      ids.push_back(id);
    for (const CallId id : ids)
      finish(id, HttpOutcome{HttpOutcome::Kind::cancelled, 0, "stopped"});
  }
};

CurlLoop::CurlLoop(long max_connections) : impl_(std::make_unique<Impl>()) {
  global_init();
  impl_->multi = curl_multi_init();
  curl_multi_setopt(impl_->multi, CURLMOPT_MAXCONNECTS, max_connections);
  impl_->thread = std::thread([this] { impl_->run(); });
}

CurlLoop::~CurlLoop() {
  stop();
  curl_multi_cleanup(impl_->multi);
}

void CurlLoop::stop() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stop = true;
  }
  impl_->wake();
  if (impl_->thread.joinable()) impl_->thread.join();
}

CurlLoop::CallId CurlLoop::start(HttpCall call, std::shared_ptr<HttpHandler> handler) {
  const CallId id = impl_->next_id++;
  {
    std::lock_guard lock(impl_->mutex);
    Impl::Command c;
    c.type = Impl::Command::Type::start;
    c.id = id;
    c.call = std::move(call);
    c.handler = std::move(handler);
    impl_->commands.push_back(std::move(c));
  }
  impl_->wake();
  return id;
}

void CurlLoop::cancel(CallId id) {
  {
    std::lock_guard lock(impl_->mutex);
    Impl::Command c;
    c.type = Impl::Command::Type::cancel;
    c.id = id;
    impl_->commands.push_back(std::move(c));
  }
  impl_->wake();
}

void CurlLoop::every(Duration period, std::function<void()> task) {
  {
    std::lock_guard lock(impl_->mutex);
    Impl::Command c;
    c.type = Impl::Command::Type::periodic;
    c.period = period;
    c.task = std::move(task);
    impl_->commands.push_back(std::move(c));
  }
  impl_->wake();
}

void CurlLoop::after(Duration delay, std::function<void()> task) {
  {
    std::lock_guard lock(impl_->mutex);
    Impl::Command c;
    c.type = Impl::Command::Type::timer;
    c.period = std::max(delay, Duration::zero());
    c.task = std::move(task);
    impl_->commands.push_back(std::move(c));
  }
  impl_->wake();
}

std::uint64_t CurlLoop::connections_opened() const {
  return impl_->connections_opened.load();
}

}  // namespace dynrt::engines

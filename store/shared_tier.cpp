// The shared library tier over hiredis' synchronous API, on two threads of its own.
//
// Threads and what they own:
//   - the command thread owns the command connection (ctx_), the deferred record keys
//     (pending_), the epoch-renewal and hello flags and the backoff state: no lock, nothing
//     else touches them. It runs every job's command and every job's callback.
//   - the subscription thread owns its own connection (a local of subscription_loop()).
// Shared state and its guards:
//   - mu_ guards queue_ and stopping_ (jobs_cv_ and stop_cv_ wait on it);
//   - state_mu_ guards fence_ and stats_;
//   - callback_mu_ guards on_invalidation_.
// No lock is held while a user callback runs, and no two of these locks are ever held at once.
//
// The scripts read and write keys not named in KEYS[] (version keys, the entry's epoch): that
// is fine on a standalone Redis, the only deployment supported; Redis Cluster would reject it.
#include "store/shared_tier.hpp"

#include "runtime/json_text.hpp"

#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <random>
#include <set>
#include <string_view>
#include <thread>
#include <utility>

namespace dynrt::store {

namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

// hello: makes the epoch if there is none, then answers {epoch, seq}.
// KEYS: epoch, seq. ARGV: a fresh random epoch (used only if none is set).
constexpr std::string_view kHelloScript = R"lua(
redis.call('SET', KEYS[1], ARGV[1], 'NX')
local epoch = redis.call('GET', KEYS[1])
local seq = redis.call('GET', KEYS[2]) or '0'
return {epoch, seq}
)lua";

// get: the entry if its epoch is current and no key it read was written after its fence; a
// stale one is deleted and answered 'stale'.
// KEYS: entry, epoch. ARGV: version-key prefix.
constexpr std::string_view kGetScript = R"lua(
local h = redis.call('HMGET', KEYS[1], 'e', 'f', 'k', 'm', 'b')
if not h[1] then return false end
if redis.call('GET', KEYS[2]) ~= h[1] then return false end
local f = tonumber(h[2])
if not f or not h[3] then return false end
for _, key in ipairs(cjson.decode(h[3])) do
  local v = tonumber(redis.call('GET', ARGV[1] .. key) or '0')
  if v > f then
    redis.call('DEL', KEYS[1])
    return 'stale'
  end
end
return {h[2], h[3], h[4], h[5], redis.call('PTTL', KEYS[1]), h[1]}
)lua";

// put: stores the entry unless the epoch moved on (-1) or a read key was written after the
// fence (0); 1 when stored.
// KEYS: entry, epoch. ARGV: epoch, fence seq, keys JSON, metadata JSON, bytes, TTL in ms,
// version-key prefix.
constexpr std::string_view kPutScript = R"lua(
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return -1 end
local f = tonumber(ARGV[2])
for _, key in ipairs(cjson.decode(ARGV[3])) do
  local v = tonumber(redis.call('GET', ARGV[7] .. key) or '0')
  if v > f then return 0 end
end
redis.call('HSET', KEYS[1], 'e', ARGV[1], 'f', ARGV[2], 'k', ARGV[3], 'm', ARGV[4], 'b', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return 1
)lua";

// write: one new sequence number for all keys, their versions set to it, the invalidation
// published; -1 when the caller's epoch is not current (it runs hello and retries).
// KEYS: epoch, seq. ARGV: epoch, origin, version-key prefix, channel, version TTL in ms,
// then the record keys.
constexpr std::string_view kWriteScript = R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local s = redis.call('INCR', KEYS[2])
local keys = {}
for i = 6, #ARGV do
  redis.call('SET', ARGV[3] .. ARGV[i], s, 'PX', ARGV[5])
  keys[#keys + 1] = ARGV[i]
end
redis.call('PUBLISH', ARGV[4],
           cjson.encode({seq = s, epoch = ARGV[1], origin = ARGV[2], keys = keys}))
return s
)lua";

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

struct ContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
using ContextPtr = std::unique_ptr<redisContext, ContextDeleter>;

timeval to_timeval(Duration d) {
  // A zero timeval means "no timeout" to setsockopt: never let a configured 0 mean that.
  const auto us = std::max<std::int64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(d).count(), 1000);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(us / 1'000'000);
  tv.tv_usec = static_cast<suseconds_t>(us % 1'000'000);
  return tv;
}

std::string random_hex(int words) {
  static std::mutex mu;
  static std::mt19937_64 rng{[] {
    std::random_device device;
    return (static_cast<std::uint64_t>(device()) << 32) ^ device();
  }()};
  std::string out;
  std::lock_guard lock(mu);
  for (int i = 0; i < words; ++i) {
    char buffer[17];
    std::snprintf(buffer, sizeof buffer, "%016llx", static_cast<unsigned long long>(rng()));
    out += buffer;
  }
  return out;
}

bool parse_u64(std::string_view text, std::uint64_t* out) {
  if (text.empty()) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

bool is_string(const redisReply* r) {
  return r && r->type == REDIS_REPLY_STRING;
}
std::string_view text_of(const redisReply* r) {
  return (r && r->str) ? std::string_view(r->str, r->len) : std::string_view();
}
bool is_integer(const redisReply* r, long long value) {
  return r && r->type == REDIS_REPLY_INTEGER && r->integer == value;
}

// A sequence number from a string or integer reply.
std::optional<std::uint64_t> seq_of(const redisReply* r) {
  std::uint64_t v = 0;
  if (r && r->type == REDIS_REPLY_INTEGER && r->integer >= 0)
    return static_cast<std::uint64_t>(r->integer);
  if (is_string(r) && parse_u64(text_of(r), &v)) return v;
  return std::nullopt;
}

// A sequence number in a JSON message: Lua's cjson writes numbers as doubles (exact below
// 2^53, which a write counter never reaches).
std::optional<std::uint64_t> seq_of(const nlohmann::json& j) {
  if (j.is_number_unsigned()) return j.get<std::uint64_t>();
  if (j.is_number_integer() && j.get<std::int64_t>() >= 0)
    return static_cast<std::uint64_t>(j.get<std::int64_t>());
  if (j.is_number_float() && j.get<double>() >= 0 && j.get<double>() < 9.0e15)
    return static_cast<std::uint64_t>(j.get<double>());
  return std::nullopt;
}

// A JSON array of strings (cjson writes an empty Lua table as {}: also no keys).
std::optional<std::vector<std::string>> strings_of(const nlohmann::json& j) {
  std::vector<std::string> out;
  if (j.is_object() && j.empty()) return out;
  if (!j.is_array()) return std::nullopt;
  for (const auto& item : j) {
    if (!item.is_string()) return std::nullopt;
    out.push_back(item.get<std::string>());
  }
  return out;
}

std::string describe(const redisReply* r) {
  if (!r) return "no reply";
  switch (r->type) {
    case REDIS_REPLY_ERROR:
      return "error reply: " + std::string(text_of(r));
    case REDIS_REPLY_NIL:
      return "nil reply";
    case REDIS_REPLY_INTEGER:
      return "integer reply " + std::to_string(r->integer);
    case REDIS_REPLY_ARRAY:
      return "array reply of " + std::to_string(r->elements);
    default:
      return "reply '" + std::string(text_of(r).substr(0, 64)) + "'";
  }
}

// hiredis writes with write(2): a peer that went away would raise SIGPIPE and kill the
// process. Blocking it on our own threads turns it into EPIPE without touching the process's
// disposition (the signal stays pending on the thread and dies with it).
void block_sigpipe() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

// Runs a user callback; an exception from it must not unwind one of our threads.
template <class F, class... Args>
void call_user(const F& f, Args&&... args) {
  if (!f) return;
  try {
    f(std::forward<Args>(args)...);
  } catch (const std::exception& e) {
    spdlog::error("shared tier: a callback threw: {}", e.what());
  } catch (...) {
    spdlog::error("shared tier: a callback threw a non-standard exception");
  }
}

std::int64_t ms_of(Duration d) {
  return duration_cast<milliseconds>(d).count();
}

}  // namespace

// ----- RedisAddress -------------------------------------------------------------------------

std::optional<RedisAddress> RedisAddress::parse(std::string_view url, std::string* error) {
  const auto fail = [&](std::string message) -> std::optional<RedisAddress> {
    if (error) *error = std::move(message);
    return std::nullopt;
  };
  const std::string quoted = "'" + std::string(url) + "'";
  constexpr std::string_view kScheme = "redis://";
  if (url.starts_with("rediss://"))
    return fail(quoted + ": TLS (rediss://) is not supported; use redis:// on a trusted network");
  if (!url.starts_with(kScheme)) return fail(quoted + ": expected redis://HOST:PORT[/DB]");
  std::string_view rest = url.substr(kScheme.size());
  if (rest.find('@') != std::string_view::npos)
    return fail(quoted + ": a user or password is not supported (no AUTH); give redis://HOST:PORT");
  if (rest.find_first_of("?#") != std::string_view::npos)
    return fail(quoted + ": query strings and fragments are not supported");
  for (const char ch : rest) {
    if (static_cast<unsigned char>(ch) <= ' ' || static_cast<unsigned char>(ch) >= 0x7f)
      return fail(quoted + ": spaces and control or non-ASCII characters are not allowed");
  }

  std::string_view authority = rest;
  std::string_view path;
  bool has_path = false;
  if (const auto slash = rest.find('/'); slash != std::string_view::npos) {
    authority = rest.substr(0, slash);
    path = rest.substr(slash + 1);
    has_path = true;
  }

  RedisAddress out;
  std::string_view host;
  std::string_view port;
  bool has_port = false;
  if (authority.starts_with('[')) {  // [IPv6]:port
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return fail(quoted + ": '[' without ']' in the host");
    host = authority.substr(1, close - 1);
    const auto after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return fail(quoted + ": expected ':PORT' after ']'");
      port = after.substr(1);
      has_port = true;
    }
  } else {
    const auto colon = authority.find(':');
    host = authority.substr(0, colon);
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      has_port = true;
      if (port.find(':') != std::string_view::npos)
        return fail(quoted + ": an IPv6 host must be in brackets, e.g. redis://[::1]:6379");
    }
  }
  if (host.empty()) return fail(quoted + ": no host");
  out.host = std::string(host);

  if (has_port) {
    std::uint64_t p = 0;
    if (!parse_u64(port, &p) || p < 1 || p > 65535)
      return fail(quoted + ": the port must be a number from 1 to 65535");
    out.port = static_cast<int>(p);
  }
  if (has_path && !path.empty()) {
    std::uint64_t db = 0;
    if (path.find('/') != std::string_view::npos || !parse_u64(path, &db) || db > 15)
      return fail(quoted + ": the database must be a number from 0 to 15 (redis://HOST:PORT/DB)");
    out.db = static_cast<int>(db);
  }
  return out;
}

std::string RedisAddress::url() const {
  const bool v6 = host.find(':') != std::string::npos;
  return "redis://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port) + "/" +
         std::to_string(db);
}

// ----- Impl ---------------------------------------------------------------------------------

struct SharedTier::Impl {
  struct Job {
    enum class Kind { get, validate, put, write };
    Kind kind = Kind::get;
    // The command, built on the command thread when it is sent, with the epoch of that
    // moment (a write carries it); empty: answered without a round trip.
    std::function<std::vector<std::string>(const std::string& epoch)> command;
    // Called exactly once, on the command thread: with the reply, or nullptr when the job
    // failed (unreachable, timeout, stopped). `epoch` is the one the command was built with.
    std::function<void(const redisReply*, const std::string& epoch)> answer;
    std::string epoch;
  };

  explicit Impl(TierConfig c) : config(std::move(c)) {
    if (config.replica.empty()) config.replica = random_hex(1);
    if (config.max_batch == 0) config.max_batch = 1;
    if (config.backoff_min <= Duration::zero()) config.backoff_min = milliseconds(1);
    if (config.backoff_max < config.backoff_min) config.backoff_max = config.backoff_min;
    if (config.max_ttl < milliseconds(1)) config.max_ttl = milliseconds(1);
    epoch_key = config.prefix + "epoch";
    seq_key = config.prefix + "seq";
    version_prefix = config.prefix + "v:";
    entry_prefix = config.prefix + "e:";
    channel = config.prefix + "inv";
    backoff_ = config.backoff_min;
  }

  void start() {
    command_thread_ = std::thread([this] { command_loop(); });
    subscription_thread_ = std::thread([this] { subscription_loop(); });
  }

  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    stop_flag_.store(true);
    jobs_cv_.notify_all();
    stop_cv_.notify_all();
    // The subscription first: its callback may still queue jobs for the command thread.
    if (subscription_thread_.joinable()) subscription_thread_.join();
    if (command_thread_.joinable()) command_thread_.join();
    fail_queued();  // only what a callback queued after the command thread's last drain
  }

  void enqueue(Job job) {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(job));
    }
    jobs_cv_.notify_one();
  }

  // ----- state shared with callers (state_mu_) -----

  Fence current_fence() const {
    std::lock_guard lock(state_mu_);
    return fence_;
  }

  // Moves the fence forward to `seq` if `epoch` is the current one.
  void advance(const std::string& epoch, std::uint64_t seq) {
    std::lock_guard lock(state_mu_);
    if (!epoch.empty() && epoch == fence_.epoch && seq > fence_.seq) fence_.seq = seq;
  }

  template <class F>
  void with_stats(F&& f) {
    std::lock_guard lock(state_mu_);
    f(stats_);
  }

  // ----- command thread -----

  void command_loop() {
    block_sigpipe();
    for (;;) {
      std::vector<Job> batch;
      {
        std::unique_lock lock(mu_);
        const auto ready = [&] { return stopping_ || !queue_.empty(); };
        if (ctx_)
          jobs_cv_.wait(lock, ready);
        else
          jobs_cv_.wait_until(lock, retry_at_, ready);
        if (stopping_) break;
        const std::size_t n = std::min(queue_.size(), config.max_batch);
        batch.reserve(n);
        for (std::size_t i = 0; i < n; ++i) {
          batch.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
      }
      if (!ctx_ && std::chrono::steady_clock::now() >= retry_at_) connect();
      if (ctx_ && (hello_needed_ || renew_epoch_ || !pending_.empty())) prepare_session();
      if (!ctx_) {  // down, inside the backoff window: fail at once rather than wait
        for (auto& job : batch)
          job.answer(nullptr, job.epoch);
        continue;
      }
      if (!batch.empty()) run_batch(batch);
    }
    fail_queued();
    if (ctx_) {
      ctx_.reset();
      with_stats([](TierStats& s) { s.connected = false; });
    }
  }

  // Fails every queued job, until a pass finds none (their callbacks may queue more).
  void fail_queued() {
    for (;;) {
      std::deque<Job> left;
      {
        std::lock_guard lock(mu_);
        left.swap(queue_);
      }
      if (left.empty()) return;
      for (auto& job : left)
        job.answer(nullptr, job.epoch);
    }
  }

  // Connects, selects the database, runs hello and sends deferred writes. On failure the
  // context is gone and the next attempt is scheduled (disconnect()).
  void connect() {
    const timeval tv = to_timeval(config.timeout);
    ContextPtr c(redisConnectWithTimeout(config.address.host.c_str(), config.address.port, tv));
    if (!c || c->err) {
      disconnect(c ? c->errstr : "cannot allocate a connection");
      return;
    }
    if (redisSetTimeout(c.get(), tv) != REDIS_OK) {
      disconnect(std::string("setting the socket timeout failed: ") + c->errstr);
      return;
    }
    ctx_ = std::move(c);
    bad_reply_logged_ = false;
    if (config.address.db != 0) {
      auto r = command({"SELECT", std::to_string(config.address.db)});
      if (!r) return;
      if (r->type != REDIS_REPLY_STATUS) {
        disconnect("SELECT " + std::to_string(config.address.db) + " failed: " + describe(r.get()));
        return;
      }
    }
    check_eviction_policy();
    if (!ctx_) return;
    hello_needed_ = true;
    if (!prepare_session()) return;
    with_stats([&](TierStats& s) {
      s.connected = true;
      ++s.reconnects;
    });
    const Fence f = current_fence();
    spdlog::info("shared tier: connected to {} (epoch {}, sequence {})", config.address.url(),
                 f.epoch, f.seq);
    down_logged_ = false;
  }

  // Version keys must outlive the entries they can invalidate: an allkeys-* policy may evict
  // them (and the epoch) first. CONFIG may be renamed or disabled: then nothing is said.
  void check_eviction_policy() {
    auto r = command({"CONFIG", "GET", "maxmemory-policy"});
    if (!r) return;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && is_string(r->element[1])) {
      const auto policy = text_of(r->element[1]);
      if (policy.starts_with("allkeys-"))
        spdlog::warn(
            "shared tier: {} has maxmemory-policy {}: it may evict version keys and so serve "
            "stale entries; use noeviction or a volatile-* policy",
            config.address.url(), policy);
    }
  }

  // Renews the epoch if asked, runs hello if needed, then sends deferred writes: what must
  // happen before any other job. False when the connection was given up.
  bool prepare_session() {
    if ((hello_needed_ || renew_epoch_) && !hello()) return false;
    if (!pending_.empty() && !flush_pending()) return false;
    return true;
  }

  bool hello() {
    if (renew_epoch_) {
      const std::string epoch = random_hex(2);
      auto r = command({"SET", epoch_key, epoch});
      if (!r) return false;
      if (r->type != REDIS_REPLY_STATUS) {
        disconnect("renewing the epoch failed: " + describe(r.get()));
        return false;
      }
      renew_epoch_ = false;
      spdlog::warn(
          "shared tier: renewed the epoch of {} to {}: more writes were missed than "
          "max_pending_writes ({}), so every shared entry is void",
          config.address.url(), epoch, config.max_pending_writes);
    }
    auto r = command({"EVAL", std::string(kHelloScript), "2", epoch_key, seq_key, random_hex(2)});
    if (!r) return false;
    std::optional<std::uint64_t> seq;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && is_string(r->element[0]))
      seq = seq_of(r->element[1]);
    if (!seq || text_of(r->element[0]).empty()) {
      disconnect("unexpected answer to hello: " + describe(r.get()));
      return false;
    }
    const std::string epoch(text_of(r->element[0]));
    std::string previous;
    {
      std::lock_guard lock(state_mu_);
      previous = fence_.epoch;
      if (fence_.epoch != epoch) {
        if (!fence_.epoch.empty()) ++stats_.epoch_changes;
        fence_ = Fence{epoch, *seq};  // a sequence never carries over to another epoch
      } else {
        fence_.seq = std::max(fence_.seq, *seq);
      }
    }
    if (!previous.empty() && previous != epoch)
      spdlog::warn(
          "shared tier: the epoch of {} changed from {} to {} (Redis lost its data or the "
          "epoch was renewed): every entry of the old one is void",
          config.address.url(), previous, epoch);
    hello_needed_ = false;
    return true;
  }

  std::vector<std::string> write_command(const std::string& epoch,
                                         const std::vector<std::string>& keys) const {
    std::vector<std::string> argv{"EVAL",
                                  std::string(kWriteScript),
                                  "2",
                                  epoch_key,
                                  seq_key,
                                  epoch,
                                  config.replica,
                                  version_prefix,
                                  channel,
                                  std::to_string(ms_of(config.max_ttl))};
    argv.insert(argv.end(), keys.begin(), keys.end());
    return argv;
  }

  // Sends the deferred record keys in one write; they are forgotten only once Redis has them.
  bool flush_pending() {
    const std::vector<std::string> keys(pending_.begin(), pending_.end());
    for (int attempt = 0; attempt < 2; ++attempt) {
      const std::string epoch = current_fence().epoch;
      auto r = command(write_command(epoch, keys));
      if (!r) return false;
      if (is_integer(r.get(), -1) && attempt == 0) {
        if (!hello()) return false;
        continue;
      }
      if (r->type != REDIS_REPLY_INTEGER || r->integer < 0) {
        disconnect("sending deferred writes failed: " + describe(r.get()));
        return false;
      }
      advance(epoch, static_cast<std::uint64_t>(r->integer));
      pending_.clear();
      with_stats([](TierStats& s) { s.pending_writes = 0; });
      spdlog::info("shared tier: sent {} deferred record keys to {}", keys.size(),
                   config.address.url());
      return true;
    }
    return false;
  }

  // One command, one reply; nullptr after an I/O error (the connection is then given up).
  ReplyPtr command(const std::vector<std::string>& argv) {
    if (!ctx_) return nullptr;
    std::vector<const char*> data;
    std::vector<std::size_t> lengths;
    for (const auto& a : argv) {
      data.push_back(a.data());
      lengths.push_back(a.size());
    }
    void* raw =
        redisCommandArgv(ctx_.get(), static_cast<int>(argv.size()), data.data(), lengths.data());
    if (!raw) {
      disconnect(ctx_->errstr);
      return nullptr;
    }
    return ReplyPtr(static_cast<redisReply*>(raw));
  }

  void run_batch(std::vector<Job>& batch) {
    std::vector<Job*> jobs;
    jobs.reserve(batch.size());
    for (auto& job : batch)
      jobs.push_back(&job);
    std::vector<Job*> retry;
    const bool clean = execute(jobs, &retry);
    if (!retry.empty()) {
      // The epoch moved under these writes: learn the new one and send them once more.
      if (ctx_ && hello())
        execute(retry, nullptr);
      else
        for (Job* job : retry)
          job->answer(nullptr, job->epoch);
    }
    if (clean && ctx_) backoff_ = config.backoff_min;
  }

  // Pipelines the jobs: every command appended, then every reply read in order. Writes that
  // found another epoch go to `retry` when it is given. False if the connection failed.
  bool execute(const std::vector<Job*>& jobs, std::vector<Job*>* retry) {
    const std::string epoch = current_fence().epoch;
    std::vector<bool> sent(jobs.size(), false);
    bool appended = true;
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      Job& job = *jobs[i];
      job.epoch = epoch;
      const auto argv = job.command ? job.command(epoch) : std::vector<std::string>{};
      if (argv.empty() || !appended) continue;
      std::vector<const char*> data;
      std::vector<std::size_t> lengths;
      for (const auto& a : argv) {
        data.push_back(a.data());
        lengths.push_back(a.size());
      }
      if (redisAppendCommandArgv(ctx_.get(), static_cast<int>(argv.size()), data.data(),
                                 lengths.data()) != REDIS_OK) {
        appended = false;
        continue;
      }
      sent[i] = true;
    }
    if (!appended) disconnect("cannot queue a command: " + std::string(ctx_->errstr));

    bool ok = appended;
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      Job& job = *jobs[i];
      if (!sent[i] || !ctx_) {  // no round trip, or the connection already failed
        job.answer(nullptr, job.epoch);
        continue;
      }
      void* raw = nullptr;
      if (redisGetReply(ctx_.get(), &raw) != REDIS_OK || !raw) {
        disconnect(ctx_->errstr);
        ok = false;
        job.answer(nullptr, job.epoch);
        continue;
      }
      ReplyPtr reply(static_cast<redisReply*>(raw));
      if (job.kind == Job::Kind::write && retry && is_integer(reply.get(), -1)) {
        retry->push_back(&job);
        continue;
      }
      job.answer(reply.get(), job.epoch);
    }
    return ok;
  }

  // Frees the connection, schedules the next attempt and logs the change of state (only the
  // change: a Redis that stays down is reported once).
  void disconnect(const std::string& reason) {
    ctx_.reset();
    hello_needed_ = true;
    retry_at_ = std::chrono::steady_clock::now() + backoff_;
    backoff_ = std::min(backoff_ * 2, config.backoff_max);
    bool was_connected = false;
    with_stats([&](TierStats& s) {
      was_connected = s.connected;
      s.connected = false;
    });
    if (was_connected)
      spdlog::warn("shared tier: lost {}: {}; jobs fail at once until it is back",
                   config.address.url(), reason);
    else if (!down_logged_)
      spdlog::warn("shared tier: cannot reach {}: {}; retrying with backoff", config.address.url(),
                   reason);
    down_logged_ = true;
  }

  // A reply no job expects: counted by the caller, logged once per connection.
  void note_bad_reply(std::string_view what, const redisReply* r) {
    if (bad_reply_logged_) return;
    bad_reply_logged_ = true;
    spdlog::warn("shared tier: unexpected answer to {} from {}: {}", what, config.address.url(),
                 describe(r));
  }

  // A write that did not reach Redis: its keys are kept for later, or the epoch is renewed
  // once more of them are missed than the bound allows.
  void defer(const std::vector<std::string>& keys) {
    if (!renew_epoch_) {
      std::size_t added = 0;
      for (const auto& k : keys)
        added += pending_.count(k) == 0 ? 1 : 0;
      if (pending_.size() + added > config.max_pending_writes) {
        renew_epoch_ = true;
        pending_.clear();
        spdlog::warn(
            "shared tier: more than {} record keys written while {} is unreachable: the epoch "
            "will be renewed when it is back",
            config.max_pending_writes, config.address.url());
      } else {
        pending_.insert(keys.begin(), keys.end());
      }
    }
    const std::size_t pending = pending_.size();
    with_stats([&](TierStats& s) {
      ++s.errors;
      ++s.writes_deferred;
      s.pending_writes = pending;
    });
  }

  // ----- subscription thread -----

  void subscription_loop() {
    block_sigpipe();
    Duration backoff = config.backoff_min;
    bool down_logged = false;
    while (!stop_flag_.load()) {
      std::string reason;
      ContextPtr c = subscribe(&reason);
      if (c) {
        if (down_logged) spdlog::debug("shared tier: invalidation subscription is back");
        down_logged = false;
        backoff = config.backoff_min;
        reason = read_messages(c.get());
        c.reset();
        if (stop_flag_.load()) break;
      }
      if (!down_logged)
        spdlog::debug("shared tier: invalidation subscription to {} down: {}", config.address.url(),
                      reason);
      down_logged = true;
      std::unique_lock lock(mu_);
      stop_cv_.wait_for(lock, backoff, [&] { return stopping_; });
      backoff = std::min(backoff * 2, config.backoff_max);
    }
  }

  // Pub/sub channels are not per database: no SELECT here.
  ContextPtr subscribe(std::string* reason) {
    const timeval tv = to_timeval(config.timeout);
    ContextPtr c(redisConnectWithTimeout(config.address.host.c_str(), config.address.port, tv));
    if (!c || c->err) {
      *reason = c ? c->errstr : "cannot allocate a connection";
      return nullptr;
    }
    redisSetTimeout(c.get(), tv);
    const char* argv[] = {"SUBSCRIBE", channel.c_str()};
    const std::size_t lengths[] = {9, channel.size()};
    ReplyPtr r(static_cast<redisReply*>(redisCommandArgv(c.get(), 2, argv, lengths)));
    if (!r) {
      *reason = c->errstr;
      return nullptr;
    }
    if (r->type != REDIS_REPLY_ARRAY) {
      *reason = "SUBSCRIBE answered " + describe(r.get());
      return nullptr;
    }
    return c;
  }

  // Reads messages until the connection fails (returns why) or the tier stops.
  std::string read_messages(redisContext* c) {
    for (;;) {
      for (;;) {  // everything already buffered first
        void* raw = nullptr;
        if (redisGetReplyFromReader(c, &raw) != REDIS_OK) return c->errstr;
        if (!raw) break;
        ReplyPtr reply(static_cast<redisReply*>(raw));
        on_message(reply.get());
      }
      if (stop_flag_.load()) return "stopping";
      pollfd p{};
      p.fd = c->fd;
      p.events = POLLIN;
      const int n = ::poll(&p, 1, 100);  // wakes up to look at the stop flag
      if (n < 0) {
        if (errno == EINTR) continue;
        return std::string("poll: ") + std::strerror(errno);
      }
      if (n == 0) continue;
      if (redisBufferRead(c) != REDIS_OK) return c->errstr;
    }
  }

  void on_message(const redisReply* r) {
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        text_of(r->element[0]) != "message" || !is_string(r->element[2]))
      return;
    const auto message = parse_json(text_of(r->element[2]));
    if (message.is_discarded() || !message.is_object()) return;
    const auto origin = message.find("origin");
    const auto epoch = message.find("epoch");
    const auto seq_it = message.find("seq");
    const auto keys_it = message.find("keys");
    if (origin == message.end() || epoch == message.end() || seq_it == message.end() ||
        keys_it == message.end() || !origin->is_string() || !epoch->is_string())
      return;
    if (origin->get<std::string>() == config.replica) return;  // our own write
    const auto seq = seq_of(*seq_it);
    auto keys = strings_of(*keys_it);
    if (!seq || !keys) return;
    {
      std::lock_guard lock(state_mu_);
      if (fence_.epoch.empty() || epoch->get<std::string>() != fence_.epoch) return;
      fence_.seq = std::max(fence_.seq, *seq);
      ++stats_.invalidations;
    }
    std::function<void(std::vector<std::string>)> callback;
    {
      std::lock_guard lock(callback_mu_);
      callback = on_invalidation_;
    }
    call_user(callback, std::move(*keys));
  }

  TierConfig config;
  std::string epoch_key, seq_key, version_prefix, entry_prefix, channel;

  // mu_ guards queue_ and stopping_; stop_flag_ mirrors stopping_ for the poll loop.
  std::mutex mu_;
  std::condition_variable jobs_cv_;  // the command thread: a job, or stopping
  std::condition_variable stop_cv_;  // the subscription thread's backoff: stopping
  std::deque<Job> queue_;
  bool stopping_ = false;
  std::atomic<bool> stop_flag_{false};

  // state_mu_ guards fence_ and stats_.
  mutable std::mutex state_mu_;
  Fence fence_;
  TierStats stats_;

  // callback_mu_ guards on_invalidation_.
  std::mutex callback_mu_;
  std::function<void(std::vector<std::string>)> on_invalidation_;

  // The command thread's own (no lock).
  ContextPtr ctx_;
  std::set<std::string> pending_;  // record keys of writes that did not reach Redis
  bool renew_epoch_ = false;       // pending_ overflowed: renew the epoch on reconnect
  bool hello_needed_ = true;       // the epoch must be (re)read before the next job
  bool down_logged_ = false;
  bool bad_reply_logged_ = false;
  Duration backoff_{0};
  std::chrono::steady_clock::time_point retry_at_{};  // first attempt: at once

  std::thread command_thread_;
  std::thread subscription_thread_;
};

// ----- SharedTier ---------------------------------------------------------------------------

SharedTier::SharedTier(TierConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {
  impl_->start();
}

SharedTier::~SharedTier() {
  impl_->stop();
}

Fence SharedTier::fence() const {
  return impl_->current_fence();
}

const TierConfig& SharedTier::config() const {
  return impl_->config;
}

TierStats SharedTier::stats() const {
  std::lock_guard lock(impl_->state_mu_);
  return impl_->stats_;
}

void SharedTier::on_invalidation(std::function<void(std::vector<std::string>)> callback) {
  std::lock_guard lock(impl_->callback_mu_);
  impl_->on_invalidation_ = std::move(callback);
}

void SharedTier::get(const Hash128& name, std::function<void(std::optional<SharedEntry>)> done) {
  Impl* impl = impl_.get();
  Impl::Job job;
  job.kind = Impl::Job::Kind::get;
  job.command = [impl, key = impl->entry_prefix + name.hex()](const std::string&) {
    return std::vector<std::string>{"EVAL", std::string(kGetScript), "2",
                                    key,    impl->epoch_key,         impl->version_prefix};
  };
  job.answer = [impl, done = std::move(done)](const redisReply* r, const std::string&) {
    const auto miss = [&](bool stale) {
      impl->with_stats([&](TierStats& s) {
        ++s.misses;
        if (stale) ++s.stale;
      });
      call_user(done, std::nullopt);
    };
    const auto error = [&] {
      if (r) impl->note_bad_reply("get", r);
      impl->with_stats([](TierStats& s) { ++s.errors; });
      call_user(done, std::nullopt);
    };
    if (!r) return error();
    if (r->type == REDIS_REPLY_NIL) return miss(false);
    if (is_string(r) && text_of(r) == "stale") return miss(true);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 6) return error();
    const redisReply* const* e = r->element;
    SharedEntry entry;
    const auto fence_seq = seq_of(e[0]);
    if (!fence_seq || !is_string(e[1]) || !is_string(e[2]) || !is_string(e[3]) ||
        e[4]->type != REDIS_REPLY_INTEGER || !is_string(e[5]))
      return error();
    auto keys = strings_of(parse_json(text_of(e[1])));
    const auto meta = parse_json(text_of(e[2]));
    if (!keys || !meta.is_object()) return error();
    const auto number = [&](const char* field) -> std::optional<std::uint64_t> {
      const auto it = meta.find(field);
      if (it == meta.end()) return std::nullopt;
      return seq_of(*it);
    };
    const auto prompt = number("prompt_tokens");
    const auto completion = number("completion_tokens");
    const auto cost = number("cost_ns");
    if (!prompt || !completion || !cost || *prompt > UINT32_MAX || *completion > UINT32_MAX)
      return error();
    entry.bytes = std::string(text_of(e[3]));
    entry.keys = std::move(*keys);
    entry.usage.prompt_tokens = static_cast<std::uint32_t>(*prompt);
    entry.usage.completion_tokens = static_cast<std::uint32_t>(*completion);
    entry.cost = Duration(static_cast<Duration::rep>(*cost));
    entry.fence = Fence{std::string(text_of(e[5])), *fence_seq};
    entry.ttl = e[4]->integer > 0 ? Duration(milliseconds(e[4]->integer)) : Duration(0);
    impl->advance(entry.fence.epoch, entry.fence.seq);
    impl->with_stats([](TierStats& s) { ++s.hits; });
    call_user(done, std::optional<SharedEntry>(std::move(entry)));
  };
  impl->enqueue(std::move(job));
}

void SharedTier::validate(std::vector<std::string> keys, Fence fence,
                          std::function<void(bool)> done) {
  Impl* impl = impl_.get();
  const bool no_epoch = fence.epoch.empty();
  Impl::Job job;
  job.kind = Impl::Job::Kind::validate;
  job.command = [impl, keys = std::move(keys), no_epoch](const std::string&) {
    std::vector<std::string> argv;
    if (no_epoch) return argv;  // nothing validates against it: no round trip
    argv.reserve(keys.size() + 2);
    argv.push_back("MGET");
    argv.push_back(impl->epoch_key);
    for (const auto& k : keys)
      argv.push_back(impl->version_prefix + k);
    return argv;
  };
  job.answer = [impl, fence = std::move(fence), done = std::move(done)](
                   const redisReply* r, const std::string& current) {
    if (fence.epoch.empty()) return call_user(done, false);
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
      if (r) impl->note_bad_reply("validate", r);
      impl->with_stats([](TierStats& s) { ++s.errors; });
      return call_user(done, false);
    }
    const auto epoch = text_of(r->element[0]);
    if (epoch != current) impl->hello_needed_ = true;  // Redis lost or renewed the epoch
    if (!is_string(r->element[0]) || epoch != fence.epoch) return call_user(done, false);
    for (std::size_t i = 1; i < r->elements; ++i) {
      const redisReply* v = r->element[i];
      if (v->type == REDIS_REPLY_NIL) continue;  // never written (or long expired): 0
      const auto version = seq_of(v);
      if (!version) {
        impl->note_bad_reply("validate", v);
        impl->with_stats([](TierStats& s) { ++s.errors; });
        return call_user(done, false);
      }
      if (*version > fence.seq) {
        impl->with_stats([](TierStats& s) { ++s.stale; });
        return call_user(done, false);
      }
    }
    impl->with_stats([](TierStats& s) { ++s.validated; });
    call_user(done, true);
  };
  impl->enqueue(std::move(job));
}

void SharedTier::put(const Hash128& name, SharedEntry entry) {
  Impl* impl = impl_.get();
  if (entry.fence.epoch.empty()) {  // computed before the tier reached Redis: not shared
    impl->with_stats([](TierStats& s) { ++s.puts_refused; });
    return;
  }
  std::string keys_json;
  std::string meta_json;
  try {
    keys_json = nlohmann::json(entry.keys).dump();
    meta_json =
        nlohmann::json{
            {"prompt_tokens", entry.usage.prompt_tokens},
            {"completion_tokens", entry.usage.completion_tokens},
            {"cost_ns", static_cast<std::uint64_t>(std::max<Duration::rep>(entry.cost.count(), 0))}}
            .dump();
  } catch (const nlohmann::json::exception&) {  // a record key that is not UTF-8
    impl->with_stats([](TierStats& s) { ++s.errors; });
    return;
  }
  Duration ttl = entry.ttl;
  if (ttl <= Duration::zero() || ttl > impl->config.max_ttl) ttl = impl->config.max_ttl;
  const auto ttl_ms = std::max<std::int64_t>(ms_of(ttl), 1);

  Impl::Job job;
  job.kind = Impl::Job::Kind::put;
  job.command = [impl, key = impl->entry_prefix + name.hex(), epoch = entry.fence.epoch,
                 seq = entry.fence.seq, keys_json = std::move(keys_json),
                 meta_json = std::move(meta_json), bytes = std::move(entry.bytes),
                 ttl_ms](const std::string&) {
    return std::vector<std::string>{"EVAL",
                                    std::string(kPutScript),
                                    "2",
                                    key,
                                    impl->epoch_key,
                                    epoch,
                                    std::to_string(seq),
                                    keys_json,
                                    meta_json,
                                    bytes,
                                    std::to_string(ttl_ms),
                                    impl->version_prefix};
  };
  job.answer = [impl](const redisReply* r, const std::string&) {
    if (is_integer(r, 1)) return impl->with_stats([](TierStats& s) { ++s.puts; });
    if (is_integer(r, 0)) return impl->with_stats([](TierStats& s) { ++s.puts_refused; });
    if (is_integer(r, -1)) {  // its fence is of another epoch: void; maybe ours is too
      impl->hello_needed_ = true;
      return impl->with_stats([](TierStats& s) { ++s.puts_refused; });
    }
    if (r) impl->note_bad_reply("put", r);
    impl->with_stats([](TierStats& s) { ++s.errors; });
  };
  impl->enqueue(std::move(job));
}

void SharedTier::write(std::vector<std::string> keys, std::function<void(bool shared)> done) {
  Impl* impl = impl_.get();
  auto shared_keys = std::make_shared<const std::vector<std::string>>(std::move(keys));
  Impl::Job job;
  job.kind = Impl::Job::Kind::write;
  job.command = [impl, shared_keys](const std::string& epoch) {
    return impl->write_command(epoch, *shared_keys);
  };
  job.answer = [impl, shared_keys, done = std::move(done)](const redisReply* r,
                                                           const std::string& epoch) {
    if (r && r->type == REDIS_REPLY_INTEGER && r->integer >= 0) {
      impl->advance(epoch, static_cast<std::uint64_t>(r->integer));
      impl->with_stats([](TierStats& s) { ++s.writes; });
      return call_user(done, true);
    }
    if (r && !is_integer(r, -1)) impl->note_bad_reply("write", r);
    impl->defer(*shared_keys);
    call_user(done, false);
  };
  impl->enqueue(std::move(job));
}

}  // namespace dynrt::store

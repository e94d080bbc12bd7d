#include "bench/http_cell.hpp"

#include "bench/driver.hpp"
#include "engines/http/curl_loop.hpp"
#include "engines/sim/engine.hpp"
#include "engines/sim/profiles.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

extern char** environ;

namespace dynrt::bench::detail {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A child process that prints "... listening on http://HOST:PORT ..." on its first lines; its
// later output is read and dropped (a full pipe would stop it), its stderr goes to a log file.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const fs::path& log, std::string* error) {
    int out[2];
    if (pipe(out) != 0) {
      *error = "pipe: " + std::string(std::strerror(errno));
      return;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<char*> args;
    for (const auto& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const int rc = posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    if (rc != 0) {
      close(out[0]);
      pid_ = 0;
      *error = "cannot start " + argv[0] + ": " + std::strerror(rc);
      return;
    }
    fd_ = out[0];
    url_ = read_url(std::chrono::seconds(60));
    if (url_.empty()) {
      *error = argv[0] + " did not say where it listens (its log: " + log.string() + ")";
      return;
    }
    drain_ = std::thread([fd = fd_] {
      char buf[4096];
      while (read(fd, buf, sizeof buf) > 0) {
      }
    });
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
    if (drain_.joinable()) drain_.join();  // the pipe closed with the child
    if (fd_ >= 0) close(fd_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  const std::string& url() const { return url_; }

 private:
  // Reads lines until one names the URL; "" when the child ends or `limit` passes first.
  std::string read_url(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::string text;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "";
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return "";
      char buf[1024];
      const auto n = read(fd_, buf, sizeof buf);
      if (n <= 0) return "";
      text.append(buf, static_cast<std::size_t>(n));
      const auto at = text.find("listening on http://");
      if (at == std::string::npos) continue;
      const auto from = at + std::strlen("listening on ");
      const auto end = text.find_first_of(" \n", from);
      if (end == std::string::npos) continue;
      return text.substr(from, end - from);
    }
  }

  pid_t pid_ = 0;
  int fd_ = -1;
  std::string url_;
  std::thread drain_;
};

// Collects one HTTP answer as a Reply: the status, the body and X-DynRT-Served.
class ReplyHandler final : public engines::HttpHandler {
 public:
  explicit ReplyHandler(std::function<void(Reply)> answer) : answer_(std::move(answer)) {}
  void on_status(int status) override { status_ = status; }
  void on_header(std::string_view name, std::string_view value) override {
    if (!engines::header_is(name, "x-dynrt-served")) return;
    if (value == "fill") served_ = Served::fill;
    if (value == "cache") served_ = Served::cache;
  }
  bool on_data(std::string_view bytes) override {
    body_.append(bytes);
    return true;
  }
  void on_done(const engines::HttpOutcome& outcome) override {
    Reply r;
    if (outcome.kind != engines::HttpOutcome::Kind::ok) {
      r.status = 502;
      r.error = "HTTP transfer failed: " + outcome.message;
    } else {
      r.status = status_;
      r.served = served_;
      if (status_ != 200) r.error = body_.substr(0, 300);
      r.body = std::move(body_);
    }
    if (auto a = std::exchange(answer_, nullptr)) a(std::move(r));
  }

 private:
  std::function<void(Reply)> answer_;
  int status_ = 0;
  std::string body_;
  Served served_ = Served::engine;
};

// The sample of a Prometheus counter (the first line named `name`, labels included).
double metric(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) != 0) continue;
    const auto rest = line.substr(name.size());
    if (rest.empty() || (rest[0] != ' ' && rest[0] != '{')) continue;
    const auto space = line.rfind(' ');
    return std::strtod(line.c_str() + space + 1, nullptr);
  }
  return 0;
}

std::string which(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':'))
    if (!dir.empty() && access((fs::path(dir) / name).c_str(), X_OK) == 0)
      return (fs::path(dir) / name).string();
  return "";
}

}  // namespace

bool http_arm(const std::string& arm) {
  return arm == "floor" || arm == "c1-only" || arm == "c2-only" || arm == "full";
}

std::string find_http_binaries(HttpCellOptions& o) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (o.dynrt.empty()) o.dynrt = ec ? which("dynrt") : self.string();
  if (o.sim_engine.empty()) {
    const fs::path sibling = self.parent_path() / "dynrt-sim-engine";
    o.sim_engine =
        !ec && access(sibling.c_str(), X_OK) == 0 ? sibling.string() : which("dynrt-sim-engine");
  }
  if (o.dynrt.empty()) return "the dynrt binary was not found";
  if (o.sim_engine.empty())
    return "dynrt-sim-engine was not found next to dynrt or on PATH (--http runs it)";
  return "";
}

CellResult run_http_cell(const CellContext& cx, const HttpCellOptions& h) {
  const BenchOptions& o = *cx.options;
  const Trace& t = *cx.trace;
  const Workload& w = *t.workload;
  const dsl::TemplateGraph& g = *t.graph;
  const auto wall_start = std::chrono::steady_clock::now();
  CellResult res;
  res.workload = w.workflow;
  res.rate = t.rate;
  res.arm = cx.arm;
  res.requests = w.runs.size();
  auto fail = [&](std::string why) {
    res.first_failure = std::move(why);
    res.failures = res.requests;
    return res;
  };

  // The engine's script and the tools' corpus, as files the two processes read.
  const fs::path dir = fs::path(h.dir) / (w.workflow + "-" + cx.arm);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return fail("cannot create " + dir.string() + ": " + ec.message());
  {
    std::ofstream script(dir / "script.jsonl");
    w.script.write_jsonl(script);
    json tools = json::object();
    for (const auto& [name, key] : w.tools)
      tools[name] = key;
    std::ofstream(dir / "corpus.json") << json{{"documents", w.corpus}, {"tools", tools}}.dump();
    if (!script) return fail("cannot write " + (dir / "script.jsonl").string());
  }
  std::ostringstream scale, interference;
  scale << h.time_scale;
  interference << o.interference_scale;
  // The engine's capacity, in the configuration, as its operator would write it: no engine
  // exports its slots, its compute knee or what a prompt token stalls its steps by
  // (docs/engines.md).
  auto profile = engines::sim::sim_profile(o.profile);
  if (!profile) return fail(profile.error().message);
  engines::sim::SimEngineOptions so;
  so.stepped = true;
  so.workers = profile->workers;
  const auto capacity = engines::sim::SimEngine(profile->params, {}, so).load();
  std::string error;
  Child engine({h.sim_engine, "--port", "0", "--script", (dir / "script.jsonl").string(),
                "--profile", o.profile, "--interference-scale", interference.str(), "--time-scale",
                scale.str(), "--threads", "2"},
               dir / "engine.log", &error);
  if (!error.empty()) return fail(error);
  std::ofstream(dir / "serve.yaml")
      << "engines:\n  - url: " << engine.url() << "\n    max_num_seqs: " << capacity.slots_total
      << "\n    concurrency: " << capacity.concurrency
      << "\n    prefill_ms_per_token: " << capacity.prefill_ms_per_token
      << "\n    lone_token_ms: " << capacity.lone_token_ms << "\n    batches: " << capacity.batches
      << "\n";
  std::vector<std::string> serve = {h.dynrt,
                                    "serve",
                                    o.templates,
                                    "--config",
                                    (dir / "serve.yaml").string(),
                                    "--port",
                                    "0",
                                    "--corpus",
                                    (dir / "corpus.json").string(),
                                    "--threads",
                                    std::to_string(h.serve_threads),
                                    "--io-threads",
                                    std::to_string(h.serve_threads)};
  if (h.record) {
    std::ostringstream name;
    name << "traffic-" << cx.trace->rate << "-" << cx.options->seed << ".jsonl";
    fs::remove(dir / name.str(), ec);  // --record appends
    serve.push_back("--record");
    serve.push_back((dir / name.str()).string());
  }
  if (cx.arm == "floor" || cx.arm == "c2-only") serve.push_back("--no-reuse");
  if (cx.arm == "floor" || cx.arm == "c1-only") serve.push_back("--no-fills");
  Child gateway(serve, dir / "serve.log", &error);
  if (!error.empty()) return fail(error);

  // The harness: one libcurl loop thread; everything below the start runs on it.
  engines::CurlLoop loop(4096);
  const double real_per_sim = h.time_scale / 1000.0;  // real seconds per simulated second
  auto real = [&](double sim_s) {
    return std::chrono::duration_cast<Duration>(
        std::chrono::duration<double>(sim_s * real_per_sim));
  };
  const std::string base = gateway.url();
  Send send = [&loop, base](Step& s, const Tags& tags, const Caller&,
                            std::function<void(std::string_view)>,
                            std::function<void(Reply)> answer) {
    engines::HttpCall call;
    call.url = base + s.endpoint;
    call.body = s.request.dump();
    call.headers = {"Content-Type: application/json", "X-DynRT-Workflow: " + tags.workflow,
                    "X-DynRT-Workflow-Id: " + tags.workflow_id, "X-DynRT-Stage: " + tags.stage};
    call.connect_timeout = std::chrono::seconds(10);
    call.total_timeout = std::chrono::minutes(30);
    loop.start(std::move(call), std::make_shared<ReplyHandler>(std::move(answer)));
  };

  const std::size_t n = w.runs.size();
  std::vector<double> latency(n, -1);
  std::vector<std::string> errors(n);
  Bodies bodies(n);
  std::mutex mutex;
  std::condition_variable all_done;
  std::size_t done = 0;
  const auto start = std::chrono::steady_clock::now();
  auto sim_since = [&](std::chrono::steady_clock::time_point at) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - at).count() /
           real_per_sim;
  };
  for (std::size_t i = 0; i < n; ++i) {
    loop.after(real(t.arrival_s[i]), [&, i] {
      const auto arrived = std::chrono::steady_clock::now();
      auto user_turn = std::make_shared<double>(0);
      AsyncDriveOptions d;
      d.on_user = [&](const Run& r, std::size_t, std::function<void()> resume) {
        loop.after(real(r.think_s), std::move(resume));
      };
      d.after_step = [&, user_turn](const Step& s) {
        if (s.stage == "act")
          *user_turn = std::chrono::duration<double>(s.latency).count() / real_per_sim;
      };
      drive_async(send, g, w.runs[i], std::move(d), [&, i, arrived, user_turn](RunResult rr) {
        std::lock_guard lock(mutex);
        if (rr.ok()) {
          latency[i] = w.workflow == "hci" ? *user_turn : sim_since(arrived);
          for (const auto& s : rr.steps)
            bodies[i].push_back(s.reply.body);
        } else {
          errors[i] = rr.error;
        }
        if (++done == n) all_done.notify_all();
      });
    });
  }
  {
    // Bounded: every run has arrived and had ten minutes (real) to finish since.
    std::unique_lock lock(mutex);
    const auto last = t.arrival_s.empty() ? 0.0 : t.arrival_s.back();
    all_done.wait_until(lock, start + real(last) + std::chrono::minutes(10),
                        [&] { return done == n; });
  }

  // dynrt's own counts, from its /metrics.
  std::string metrics;
  {
    std::mutex m;
    std::condition_variable got;
    bool answered = false;
    engines::HttpCall call;
    call.method = "GET";
    call.url = base + "/metrics";
    call.total_timeout = std::chrono::seconds(30);
    loop.start(std::move(call), std::make_shared<ReplyHandler>([&](Reply r) {
                 std::lock_guard lock(m);
                 metrics = std::move(r.body);
                 answered = true;
                 got.notify_all();
               }));
    std::unique_lock lock(m);
    got.wait_for(lock, std::chrono::seconds(40), [&] { return answered; });
  }
  loop.stop();  // answers still out end as cancelled; nothing below races the loop thread

  tally_runs(cx, latency, errors, bodies, res);
  const double per = n ? 1.0 / static_cast<double>(n) : 0;
  res.fills_issued = metric(metrics, "dynrt_fills_issued_total") * per;
  res.fills_consumed = metric(metrics, "dynrt_fills_consumed_total") * per;
  res.served_fill = metric(metrics, "dynrt_requests_total{served=\"fill\"}") * per;
  res.served_cache = metric(metrics, "dynrt_requests_total{served=\"cache\"}") * per;
  res.interference_fit = metric(metrics, "dynrt_gate_interference_scale");
  res.wasted_engine_s = -1;  // not comparable behind a URL (see the header)
  res.speculative_engine_s = -1;
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return res;
}

}  // namespace dynrt::bench::detail

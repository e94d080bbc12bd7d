// `dynrt serve TEMPLATES... [--engine sim|URL ...] [--port N] [--config FILE]`: the gateway in
// front of the engines. See docs/operations.md for every option and its configuration key.
#include "actors/runtime.hpp"
#include "cli/commands.hpp"
#include "cli/number_checks.hpp"
#include "dsl/lint.hpp"
#include "dsl/report.hpp"
#include "dsl/suggest.hpp"
#include "engines/factory.hpp"
#include "engines/read_file.hpp"
#include "engines/sim/profiles.hpp"
#include "engines/tools/corpus.hpp"
#include "engines/tools/http_tool.hpp"
#include "gateway/server.hpp"
#include "gateway/tls.hpp"

#include "store/shared_tier.hpp"

#include <spdlog/async.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>
#include <boost/asio/ip/address.hpp>

#include <pthread.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <type_traits>

namespace dynrt::cli {

namespace {

// SIGINT and SIGTERM stop the gateway, SIGHUP reloads the keys, the TLS certificate and the
// templates. They are blocked in every thread (the mask is set before any thread starts, and
// threads inherit it) and taken synchronously by the main thread with sigwait(), so no handler
// ever runs on an I/O or actor thread and reloading is ordinary code, not async-signal-safe
// code.
sigset_t control_signals() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  sigaddset(&s, SIGHUP);
  return s;
}

struct ServeOptions {
  std::vector<std::string> templates;
  std::vector<std::string> engine_flags;  // [MODEL,MODEL=]URL|sim
  std::vector<engines::EngineSpec> engines;
  std::string config;
  YAML::Node config_auth;  // its `auth` section as read at start (a pipe can be read once)
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string tls_cert;  // with tls_key: HTTPS only
  std::string tls_key;
  int threads = 2;
  int io_threads = 2;
  double time_scale = 1000;
  int sim_slots = 0;  // 0: the profile's
  std::string sim_profile = "default";
  double interference_scale = 1.0;
  std::string script;
  std::string corpus;
  bool no_reuse = false;
  bool no_fills = false;
  bool no_emission = false;
  std::size_t max_body_bytes = std::size_t{8} << 20;
  std::size_t max_header_bytes = std::size_t{16} << 10;
  int header_timeout_ms = 10'000;
  int idle_timeout_ms = 60'000;
  std::size_t max_connections = 4096;
  int workflow_idle_ms = 60'000;
  std::size_t max_live_runs = 10'000;
  int shutdown_grace_ms = 10'000;
  std::vector<std::string> shared_stages;  // --share-stage
  std::string keys_file;                   // --keys
  bool auth_in_config = false;             // the --config file has an `auth` section
  bool insecure_no_auth = false;
  std::string log_level = "info";                 // debug: a line per near miss
  std::string log_format = "text";                // or json (one object per line)
  std::string record;                             // --record FILE: tagged traffic, JSON lines
  std::string library;                            // --library redis://HOST:PORT[/DB]
  std::vector<engines::HttpToolSpec> http_tools;  // tools.NAME: {url, ...}
  std::map<std::string, run::ToolRecords, std::less<>> tool_records;
  std::size_t explain_runs = 1000;  // ended runs `dynrt explain` can still read
  int explain_keep_s = 600;         // ... and for how long
};

// "qwen3-32b,qwen3-0.6b=http://vllm:8000", "http://vllm:8000" or "sim".
engines::EngineSpec parse_engine_flag(const std::string& flag) {
  engines::EngineSpec e;
  const auto eq = flag.find('=');
  if (eq != std::string::npos && flag.find("://") > eq) {
    std::stringstream models(flag.substr(0, eq));
    for (std::string m; std::getline(models, m, ',');)
      if (!m.empty()) e.models.push_back(m);
    e.url = flag.substr(eq + 1);
  } else {
    e.url = flag;
  }
  return e;
}

// A configuration error at node `at` of the file `path`, positioned as linters do; false.
bool config_error(const std::string& path, const YAML::Node& at, const std::string& what) {
  const auto mark = at.Mark();
  std::cerr << "dynrt serve: " << path << ":" << mark.line + 1 << ":" << mark.column + 1 << ": "
            << what << "\n";
  return false;
}

// A configuration value of the wrong type, at its position: thrown by scalar() and reported by
// load_config as config_error() reports the others.
struct ConfigTypeError {
  YAML::Node at;
  std::string what;
};

template <class T>
constexpr const char* kind_of() {
  if constexpr (std::is_same_v<T, bool>) return "true or false";
  if constexpr (std::is_integral_v<T>) return "a whole number";
  if constexpr (std::is_floating_point_v<T>) return "a number";
  return "a single value";
}

// The scalar at `n` as T, or `fallback` where the key is absent or null. A value that is there
// but does not convert is an error naming `key`: yaml-cpp's as<T>(fallback) would quietly give
// the fallback, reading `concurrency: abc` as 0 and `url: {...}` as the simulated engine.
template <class T>
T scalar(const YAML::Node& n, const std::string& key, T fallback) {
  if (!n || n.IsNull()) return fallback;
  if (n.IsScalar()) {
    try {
      return n.as<T>();
    } catch (const YAML::BadConversion&) {
    }
  }
  throw ConfigTypeError{
      n, key + " must be " + kind_of<T>() + "; got " +
             (n.IsScalar() ? "'" + n.Scalar() + "'" : std::string(n.IsMap() ? "a map" : "a list"))};
}

// The list at `n` of single values (absent: none); a scalar or a map is an error naming `key`.
std::vector<std::string> strings(const YAML::Node& n, const std::string& key) {
  std::vector<std::string> out;
  if (!n || n.IsNull()) return out;
  if (!n.IsSequence()) throw ConfigTypeError{n, key + " must be a list"};
  for (const auto& item : n)
    out.push_back(scalar<std::string>(item, key + "[]", ""));
  return out;
}

// The HTTP tools under `tools:` (every key but `corpus` and `allow_hosts`), each checked
// against `tools.allow_hosts`. Errors name the file, the position and the key.
bool load_http_tools(const std::string& path, const YAML::Node& t, ServeOptions& o) {
  const auto fail = [&](const YAML::Node& at, const std::string& what) {
    return config_error(path, at, what);
  };
  std::vector<std::string> allow;
  if (const auto a = t["allow_hosts"]) {
    if (!a.IsSequence()) return fail(a, "tools.allow_hosts must be a list of hosts");
    allow = strings(a, "tools.allow_hosts");
  }
  if (!t.IsMap()) return fail(t, "tools must be a map");
  for (const auto& entry : t) {
    const auto name = entry.first.as<std::string>();
    if (name == "corpus" || name == "allow_hosts") continue;
    const auto& d = entry.second;
    if (!d.IsMap() || !d["url"])
      return fail(entry.first, "tool " + name + " needs a url (tools.NAME: {url, method, ...})");
    for (const auto& key : d) {
      static const std::set<std::string> known = {"url",         "method",     "headers",
                                                  "headers_env", "timeout_ms", "max_response_bytes",
                                                  "reads",       "writes"};
      if (!known.count(key.first.as<std::string>()))
        return fail(key.first, "tool " + name + ": unknown key '" + key.first.as<std::string>() +
                                   "' (url, method, headers, headers_env, timeout_ms, "
                                   "max_response_bytes, reads, writes)");
    }
    engines::HttpToolSpec spec;
    spec.name = name;
    spec.url = scalar<std::string>(d["url"], "tool " + name + ": url", "");
    const auto internal = engines::check_tool_url(spec.url, allow);
    if (!internal) return fail(d["url"], "tool " + name + ": " + internal.error().message);
    spec.allow_internal = *internal;
    spec.method = scalar<std::string>(d["method"], "tool " + name + ": method", "POST");
    for (auto& c : spec.method)
      c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (spec.method != "POST" && spec.method != "PUT" && spec.method != "PATCH" &&
        spec.method != "GET")
      return fail(d["method"], "tool " + name + ": method must be POST, PUT, PATCH or GET");
    const auto header = [&](const YAML::Node& at, const std::string& k, const std::string& v) {
      const auto bad = [](char c) { return c == '\r' || c == '\n' || c == '\0'; };
      if (k.empty() ||
          std::any_of(k.begin(), k.end(), [](char c) { return c == ':' || c <= ' '; }) ||
          std::any_of(v.begin(), v.end(), bad))
        return fail(at, "tool " + name + ": header '" + k + "' is not a valid header");
      spec.headers.push_back(k + ": " + v);
      return true;
    };
    if (const auto h = d["headers"])
      for (const auto& kv : h)
        if (!header(kv.first, kv.first.as<std::string>(),
                    scalar<std::string>(kv.second, "tool " + name + ": headers", "")))
          return false;
    // Secrets stay out of the file: the header's value is read from the environment.
    if (const auto h = d["headers_env"])
      for (const auto& kv : h) {
        const auto var = scalar<std::string>(kv.second, "tool " + name + ": headers_env", "");
        const char* value = std::getenv(var.c_str());
        if (!value)
          return fail(kv.second, "tool " + name + ": environment variable " + var + " is not set");
        if (!header(kv.first, kv.first.as<std::string>(), value)) return false;
      }
    const int timeout_ms = scalar<int>(d["timeout_ms"], "tool " + name + ": timeout_ms", 10'000);
    if (timeout_ms < 1 || timeout_ms > 600'000)
      return fail(d["timeout_ms"], "tool " + name + ": timeout_ms must be 1 to 600000");
    spec.timeout = std::chrono::milliseconds(timeout_ms);
    spec.connect_timeout = std::min(spec.timeout, Duration(std::chrono::seconds(5)));
    spec.max_response_bytes = scalar<std::size_t>(
        d["max_response_bytes"], "tool " + name + ": max_response_bytes", std::size_t{1} << 20);
    if (spec.max_response_bytes < 1 || spec.max_response_bytes > (std::size_t{64} << 20))
      return fail(d["max_response_bytes"],
                  "tool " + name + ": max_response_bytes must be 1 to 67108864");
    run::ToolRecords records;
    for (const char* which : {"reads", "writes"})
      if (const auto keys = d[which]) {
        if (!keys.IsSequence())
          return fail(keys, "tool " + name + ": " + which + " must be a list of record keys");
        for (auto& k : strings(keys, "tool " + name + ": " + which))
          (std::string(which) == "reads" ? records.reads : records.writes).push_back(std::move(k));
      }
    if (!records.reads.empty() || !records.writes.empty()) o.tool_records[name] = records;
    o.http_tools.push_back(std::move(spec));
  }
  return true;
}

// The configuration's sections and their keys. A key that is not here is a typo, refused at
// its position with the closest known key, not a setting silently left at its default.
// `tools` (its keys are the tools' names, checked by load_http_tools) and `auth` (checked by
// gateway::parse_keys) are free-form here.
bool check_config_keys(const std::string& path, const YAML::Node& root) {
  using Keys = std::vector<std::string>;
  const auto listed = [](const Keys& keys) {
    std::string out;
    for (const auto& k : keys)
      out += (out.empty() ? "" : ", ") + k;
    return out;
  };
  const auto known = [&](const YAML::Node& map, const std::string& where, const Keys& keys) {
    if (!map.IsMap())
      return config_error(
          path, map,
          (where.empty() ? "the configuration" : where) + " must be a map (" + listed(keys) + ")");
    for (const auto& kv : map) {
      const auto key = kv.first.as<std::string>();
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
      std::string what = (where.empty() ? "" : where + ": ") + "unknown key '" + key + "'";
      if (const auto s = dsl::closest(key, keys))
        what += "; did you mean '" + *s + "'?";
      else
        what += " (" + listed(keys) + ")";
      return config_error(path, kv.first, what);
    }
    return true;
  };
  if (!root || root.IsNull()) return true;  // an empty file: every default
  if (!known(root, "",
             {"listen", "engines", "sim", "tools", "switches", "limits", "auth", "shared_stages",
              "record", "library", "log", "explain", "threads", "io_threads"}))
    return false;
  const std::vector<std::pair<const char*, Keys>> sections = {
      {"listen", {"host", "port", "tls_cert", "tls_key"}},
      {"sim", {"time_scale", "slots", "profile", "interference_scale", "script"}},
      {"switches", {"reuse", "fills", "emission"}},
      {"limits",
       {"max_body_bytes", "max_header_bytes", "header_timeout_ms", "idle_timeout_ms",
        "max_connections", "workflow_idle_ms", "max_live_runs", "shutdown_grace_ms"}},
      {"log", {"level", "format"}},
      {"explain", {"runs", "keep_s"}}};
  for (const auto& [name, keys] : sections)
    if (const auto s = root[name]; s && !known(s, name, keys)) return false;
  if (const auto tools = root["tools"]; tools && !tools.IsMap())
    return config_error(path, tools,
                        "tools must be a map (corpus, allow_hosts, and a tool by name)");
  if (const auto shared = root["shared_stages"]; shared && !shared.IsSequence())
    return config_error(path, shared, "shared_stages must be a list of WORKFLOW.STAGE names");
  if (const auto es = root["engines"]) {
    if (!es.IsSequence())
      return config_error(path, es, "engines must be a list of engines, each {url, models, ...}");
    for (const auto& e : es)
      if (!known(e, "engines[]",
                 {"url", "urls", "models", "flavor", "max_num_seqs", "concurrency", "batches",
                  "prefill_ms_per_token", "lone_token_ms", "api_key"}))
        return false;
  }
  return true;
}

// "FILE:LINE:COLUMN: what yaml-cpp found".
std::string yaml_error(const std::string& path, const YAML::Exception& e) {
  const bool deep = dynamic_cast<const YAML::DeepRecursion*>(&e) != nullptr;
  return path + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
         ": " + (deep ? "nested deeper than the YAML reader allows" : e.msg);
}

// Reads the YAML configuration into `o`; flags given on the command line win (they are applied
// after). Errors name the file and the key.
bool load_config(const std::string& path, ServeOptions& o, CLI::App& cmd) {
  // Read once, bounded: `--config <(vault read ...)` works, and its `auth` section is parsed
  // as read here (kept for read_keys) rather than from a second read of a drained pipe.
  const auto text = engines::read_bounded(path, kMaxConfigBytes, "--config file");
  if (!text) {
    std::cerr << "dynrt serve: " << text.error().message << "\n";
    return false;
  }
  YAML::Node root;
  try {
    root = YAML::Load(*text);
  } catch (const YAML::Exception& e) {
    std::cerr << "dynrt serve: " << yaml_error(path, e) << "\n";
    return false;
  }
  auto given = [&](const char* flag) { return cmd.count(flag) > 0; };
  // A value for a flag's option goes through that option, so it is converted and checked (its
  // range, its choices) exactly as the flag would be; a refusal names the key and its position.
  auto set = [&](const YAML::Node& n, const char* key, const char* flag) {
    if (!n || given(flag)) return true;
    if (!n.IsScalar()) return config_error(path, n, std::string(key) + " must be a single value");
    CLI::Option* opt = cmd.get_option(flag);
    try {
      opt->clear();
      opt->add_result(n.Scalar());
      opt->run_callback();
    } catch (const CLI::Error& e) {
      return config_error(path, n, std::string(key) + ": " + e.what());
    }
    return true;
  };
  try {
    if (!check_config_keys(path, root)) return false;
    if (const auto l = root["listen"]) {
      if (!set(l["host"], "listen.host", "--host") || !set(l["port"], "listen.port", "--port") ||
          !set(l["tls_cert"], "listen.tls_cert", "--tls-cert") ||
          !set(l["tls_key"], "listen.tls_key", "--tls-key"))
        return false;
    }
    if (const auto es = root["engines"]; es && !given("--engine")) {
      for (const auto& e : es) {
        engines::EngineSpec spec;
        spec.url = scalar<std::string>(e["url"], "engines: url", "sim");
        if (const auto urls = e["urls"]) {
          // Replicas of one model: a pool (engines/pool.hpp).
          if (!urls.IsSequence() || urls.size() == 0 || e["url"])
            return config_error(path, urls,
                                "engines: urls must be a non-empty list of the replicas' URLs, "
                                "given instead of url");
          spec.url.clear();
          for (const auto& u : strings(urls, "engines: urls"))
            spec.url += (spec.url.empty() ? "" : ",") + u;
        }
        spec.models = strings(e["models"], "engine " + spec.url + ": models");
        spec.flavor =
            scalar<std::string>(e["flavor"], "engine " + spec.url + ": flavor", "automatic");
        spec.max_num_seqs =
            scalar<int>(e["max_num_seqs"], "engine " + spec.url + ": max_num_seqs", 256);
        spec.concurrency = scalar<int>(e["concurrency"], "engine " + spec.url + ": concurrency", 0);
        if (spec.max_num_seqs < 1 || spec.concurrency < 0 || spec.concurrency > spec.max_num_seqs)
          return config_error(path, spec.max_num_seqs < 1 ? e["max_num_seqs"] : e["concurrency"],
                              "engine " + spec.url +
                                  ": max_num_seqs must be at least 1 and concurrency between 0 "
                                  "(unknown) and max_num_seqs; got " +
                                  std::to_string(spec.max_num_seqs) + " and " +
                                  std::to_string(spec.concurrency));
        spec.batches = scalar<int>(e["batches"], "engine " + spec.url + ": batches", 1);
        for (const auto& [key, ms] :
             {std::pair{"prefill_ms_per_token", &engines::EngineSpec::prefill_ms_per_token},
              std::pair{"lone_token_ms", &engines::EngineSpec::lone_token_ms}}) {
          spec.*ms = scalar<double>(e[key], "engine " + spec.url + ": " + key, 0);
          if (!std::isfinite(spec.*ms) || spec.*ms < 0)
            return config_error(path, e[key],
                                "engine " + spec.url + ": " + key +
                                    " must be a number of milliseconds, 0 (unknown) or more; got " +
                                    e[key].as<std::string>());
        }
        if (spec.batches < 1 || spec.batches > spec.max_num_seqs)
          return config_error(path, e["batches"],
                              "engine " + spec.url +
                                  ": batches must be between 1 and max_num_seqs; got " +
                                  std::to_string(spec.batches));
        spec.api_key = scalar<std::string>(e["api_key"], "engine " + spec.url + ": api_key", "");
        o.engines.push_back(spec);
      }
    }
    if (const auto s = root["sim"]) {
      if (!set(s["time_scale"], "sim.time_scale", "--time-scale") ||
          !set(s["slots"], "sim.slots", "--sim-slots") ||
          !set(s["profile"], "sim.profile", "--profile") ||
          !set(s["interference_scale"], "sim.interference_scale", "--interference-scale") ||
          !set(s["script"], "sim.script", "--script"))
        return false;
    }
    if (const auto t = root["tools"]) {
      if (!set(t["corpus"], "tools.corpus", "--corpus")) return false;
      if (!load_http_tools(path, t, o)) return false;
    }
    if (const auto sw = root["switches"]) {
      if (!given("--no-reuse")) o.no_reuse = !scalar(sw["reuse"], "switches.reuse", !o.no_reuse);
      if (!given("--no-fills")) o.no_fills = !scalar(sw["fills"], "switches.fills", !o.no_fills);
      if (!given("--no-emission"))
        o.no_emission = !scalar(sw["emission"], "switches.emission", !o.no_emission);
    }
    if (const auto l = root["limits"]) {
      for (const auto& [key, flag] : {std::pair{"max_body_bytes", "--max-body-bytes"},
                                      std::pair{"max_header_bytes", "--max-header-bytes"},
                                      std::pair{"header_timeout_ms", "--header-timeout-ms"},
                                      std::pair{"idle_timeout_ms", "--idle-timeout-ms"},
                                      std::pair{"max_connections", "--max-connections"},
                                      std::pair{"workflow_idle_ms", "--workflow-idle-ms"},
                                      std::pair{"max_live_runs", "--max-live-runs"},
                                      std::pair{"shutdown_grace_ms", "--shutdown-grace-ms"}})
        if (!set(l[key], ("limits." + std::string(key)).c_str(), flag)) return false;
    }
    if (root["auth"] && !given("--keys")) {
      o.auth_in_config = true;
      o.config_auth = root["auth"];
    }
    if (const auto s = root["shared_stages"]; s && !given("--share-stage"))
      for (auto& n : strings(s, "shared_stages"))
        o.shared_stages.push_back(std::move(n));
    if (!set(root["record"], "record", "--record") || !set(root["library"], "library", "--library"))
      return false;
    if (const auto l = root["log"])
      if (!set(l["level"], "log.level", "--log-level") ||
          !set(l["format"], "log.format", "--log-format"))
        return false;
    if (const auto e = root["explain"])
      if (!set(e["runs"], "explain.runs", "--explain-runs") ||
          !set(e["keep_s"], "explain.keep_s", "--explain-keep-s"))
        return false;
    if (!set(root["threads"], "threads", "--threads") ||
        !set(root["io_threads"], "io_threads", "--io-threads"))
      return false;
  } catch (const YAML::Exception& e) {
    std::cerr << "dynrt serve: " << yaml_error(path, e) << "\n";
    return false;
  } catch (const ConfigTypeError& e) {
    return config_error(path, e.at, e.what);
  }
  return true;
}

// Every connection holds a file descriptor: the soft RLIMIT_NOFILE is raised to the hard limit,
// and a connection cap the limit cannot hold (with room for the engines, templates and
// refused connections) is refused at start rather than found out under load.
bool raise_descriptor_limit(std::size_t max_connections) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return true;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  constexpr rlim_t kReserve = 256;
  if (limit.rlim_cur == RLIM_INFINITY || max_connections + kReserve <= limit.rlim_cur) return true;
  std::cerr << "dynrt serve: --max-connections " << max_connections << " needs "
            << max_connections + kReserve << " file descriptors, but RLIMIT_NOFILE allows "
            << limit.rlim_cur << " (hard limit " << limit.rlim_max
            << "); lower --max-connections or raise the limit (ulimit -n)\n";
  return false;
}

// The keys, from --keys or the --config file's `auth` section; nullopt when neither is given.
// At start the section is the one load_config read; `again` (SIGHUP) reads the file anew.
std::optional<Expected<gateway::KeyRing>> read_keys(const ServeOptions& o, bool again = false) {
  if (!o.keys_file.empty()) return gateway::load_keys_file(o.keys_file);
  if (!o.auth_in_config) return std::nullopt;
  try {
    if (!again) return gateway::parse_keys(o.config_auth, o.config + " (auth)");
    const auto text = engines::read_bounded(o.config, kMaxConfigBytes, "--config file");
    if (!text) return Expected<gateway::KeyRing>(make_error(text.error().message));
    return gateway::parse_keys(YAML::Load(*text)["auth"], o.config + " (auth)");
  } catch (const YAML::Exception& e) {
    return Expected<gateway::KeyRing>(make_error(yaml_error(o.config, e)));
  }
}

// Loopback only: an address in 127.0.0.0/8 or ::1, or the name localhost.
bool loopback(const std::string& host) {
  if (host == "localhost") return true;
  boost::system::error_code ec;
  const auto a = boost::asio::ip::make_address(host, ec);
  return !ec && a.is_loopback();
}

std::string summary(const dsl::TemplateGraph& g) {
  std::size_t speculable = 0;
  for (const auto& s : g.stages)
    speculable += s.speculable;
  std::ostringstream out;
  out << "  " << g.workflow << ": " << g.stages.size() << " stages (" << speculable
      << " speculable)";
  for (const auto& d : g.decisions)
    out << ", decision " << d.name << " (" << dsl::to_string(d.promotion) << ", "
        << dsl::to_string(d.candidates.kind) << " candidates)";
  return out.str();
}

// %* in a log pattern: the message as a JSON string.
class JsonMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const auto text = nlohmann::json(std::string(msg.payload.data(), msg.payload.size()))
                          .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    dest.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

// The serve log: spdlog's asynchronous logger on stderr, so that a line logged from an actor's
// thread never waits on the terminal (a full queue drops the oldest line instead).
Expected<std::shared_ptr<spdlog::logger>> make_logger(const ServeOptions& o) {
  const auto level = spdlog::level::from_str(o.log_level);
  if (o.log_level != "off" && level == spdlog::level::off)
    return make_error("--log-level must be debug, info, warn, error or off");
  if (o.log_format != "text" && o.log_format != "json")
    return make_error("--log-format must be text or json");
  static std::once_flag pool;
  std::call_once(pool, [] { spdlog::init_thread_pool(8192, 1); });
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto logger = std::make_shared<spdlog::async_logger>(
      "dynrt", sink, spdlog::thread_pool(), spdlog::async_overflow_policy::overrun_oldest);
  logger->set_level(level);
  // JSON lines carry their own time and level (log_near_miss); text lines get a prefix.
  if (o.log_format == "json")
    logger->set_pattern("%v");
  else
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %l %v", spdlog::pattern_time_type::utc);
  // Library code (the shared tier) logs through spdlog's default logger: the same sink and
  // level, and in the JSON format one object per line with the message escaped.
  // A sink of its own: a logger's pattern is set on its sinks.
  auto library = std::make_shared<spdlog::async_logger>(
      "dynrt-library", std::make_shared<spdlog::sinks::stderr_sink_mt>(), spdlog::thread_pool(),
      spdlog::async_overflow_policy::overrun_oldest);
  library->set_level(level);
  if (o.log_format == "json") {
    auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    formatter->add_flag<JsonMessageFlag>('*').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","message":%*})");
    library->set_formatter(std::move(formatter));
  } else {
    library->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %l %v", spdlog::pattern_time_type::utc);
  }
  spdlog::set_default_logger(std::move(library));
  return std::shared_ptr<spdlog::logger>(std::move(logger));
}

// A JSON log line (--log-format json): its time, level and message, then `fields`.
std::string json_line(const char* level, const char* msg, const nlohmann::json& fields) {
  const auto now = std::chrono::system_clock::now();
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  nlohmann::json line = {{"ts_ms", ms}, {"level", level}, {"msg", msg}};
  line.update(fields);
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// One line per near miss: what `dynrt explain` says of the call.
void log_near_miss(spdlog::logger& log, const nlohmann::json& miss, bool json_format) {
  if (json_format) return log.debug(json_line("debug", "near miss", miss));
  const auto& call = miss["call"];
  const auto& why = call["why"];
  std::string text = "near miss: " + miss.value("workflow", "") + "/" + miss.value("id", "") +
                     " #" + std::to_string(call.value("seq", 0)) + " " + call.value("stage", "") +
                     ": " + why.value("reason", "") + ": " + why.value("detail", "");
  for (const char* key : {"diff", "template_diff"})
    if (why.contains(key))
      for (const auto& d : why[key]) {
        text += std::string("; ") + d.value("path", "") + " expected " +
                (d.contains("expected") ? d["expected"].dump() : "(absent)") + " sent " +
                (d.contains("sent") ? d["sent"].dump() : "(absent)");
      }
  log.debug(text);
}

// One line per kind of tagged call whose tags named nothing loaded (each kind once; the
// dynrt_tags_ignored_total counter counts every call).
void log_misdirected(spdlog::logger& log, const nlohmann::json& m, bool json_format) {
  if (json_format) return log.warn(json_line("warn", "tags ignored", m));
  log.warn(m.value("detail", "") + " (logged once; dynrt_tags_ignored_total counts each call)");
}

// `o` is the options the command line was parsed into: a --config value is given to its flag's
// option, which converts and checks it into `o` as it would the flag.
int serve(ServeOptions& o, CLI::App& cmd) {
  const sigset_t signals = control_signals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  if (!o.config.empty() && !load_config(o.config, o, cmd)) return kExitUsage;
  for (const auto& f : o.engine_flags) {
    o.engines.push_back(parse_engine_flag(f));
    // "=URL" or ",=URL": a model list was begun and left empty (a shell variable that was
    // not set, say), which would silently make the engine take no model by name.
    if (o.engines.back().models.empty() && f.find('=') < f.find("://")) {
      std::cerr << "dynrt serve: --engine " << f
                << ": no model name before '='; give MODEL[,MODEL...]=URL, or the URL alone\n";
      return kExitUsage;
    }
  }
  if (o.engines.empty()) o.engines.push_back(engines::EngineSpec{});
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    std::cerr << "dynrt serve: TLS needs both a certificate and its key: give --tls-cert and "
                 "--tls-key (or listen.tls_cert and listen.tls_key), or neither for plain HTTP\n";
    return kExitUsage;
  }
  // Checked before anything starts, like the keys: the gateway would refuse them later anyway.
  if (!o.tls_cert.empty()) {
    if (auto tls = gateway::load_tls_context(o.tls_cert, o.tls_key); !tls) {
      std::cerr << "dynrt serve: " << tls.error().message << "\n";
      return kExitUsage;
    }
  }

  // Keys before anything starts: a gateway reachable from other hosts without them would be an
  // open relay for the engines' keys, and would share every caller's results with every other.
  auto auth = std::make_shared<gateway::Authenticator>();
  if (auto keys = read_keys(o)) {
    if (!*keys) {
      std::cerr << "dynrt serve: " << keys->error().message << "\n";
      return kExitUsage;
    }
    auth->replace(std::move(**keys));
  } else if (!loopback(o.host) && !o.insecure_no_auth) {
    std::cerr << "dynrt serve: refusing to listen on " << o.host
              << " without API keys: anyone who can reach it could use the engines and read "
                 "every caller's results. Give --keys FILE (docs/operations.md, \"Security\"), "
                 "listen on 127.0.0.1, or pass --insecure-no-auth if something in front of "
                 "dynrt already authenticates every request.\n";
    return kExitUsage;
  }

  // Templates first: refuse to start on a finding, and print it like `dynrt lint` does.
  const auto report = dsl::lint_paths(o.templates);
  if (!report.usage_errors.empty()) {
    for (const auto& u : report.usage_errors)
      std::cerr << "dynrt serve: " << u << "\n";
    return kExitUsage;
  }
  if (report.count(dsl::Severity::error) > 0) {
    std::cerr << dsl::format_text(report)
              << "dynrt serve: the templates have errors; fix them (dynrt lint) and start again\n";
    return kExitFindings;
  }

  // A shared stage must name a stage of the templates: a typo would silently share nothing.
  const auto graphs = report.graphs();
  for (const auto& name : o.shared_stages) {
    const auto dot = name.find('.');
    const bool known =
        dot != std::string::npos && std::any_of(graphs.begin(), graphs.end(), [&](const auto* g) {
          return g->workflow == name.substr(0, dot) && g->stage(name.substr(dot + 1)) != nullptr;
        });
    if (!known) {
      std::cerr << "dynrt serve: --share-stage " << name
                << " names no stage of the templates (expected WORKFLOW.STAGE)\n";
      return kExitUsage;
    }
  }

  RuntimeConfig config;
  config.template_paths = o.templates;
  config.reuse = !o.no_reuse;
  config.fills = !o.no_fills;
  config.emission = !o.no_emission;
  config.threads = o.threads;
  config.workflow_idle = std::chrono::milliseconds(o.workflow_idle_ms);
  config.max_live_runs = o.max_live_runs;
  config.shared_stages = o.shared_stages;
  store::TierConfig library;
  if (!o.library.empty()) {
    std::string why;
    const auto address = store::RedisAddress::parse(o.library, &why);
    if (!address) {
      std::cerr << "dynrt serve: --library " << o.library << ": " << why << "\n";
      return kExitUsage;
    }
    library.address = *address;
    library.max_ttl = config.csl.max_ttl;
  }
  config.explain_runs = o.explain_runs;
  config.explain_keep = std::chrono::seconds(o.explain_keep_s);
  auto logger = make_logger(o);
  // After the logger, which its lines go through. It connects on its own threads: serving
  // starts at once, with misses until Redis answers.
  if (!logger) return kExitUsage;
  if (!o.library.empty())
    config.shared_library = std::make_shared<store::SharedTier>(std::move(library));
  if ((*logger)->should_log(spdlog::level::debug))
    config.on_near_miss = [logger = *logger,
                           json_format = o.log_format == "json"](const nlohmann::json& miss) {
      log_near_miss(*logger, miss, json_format);
    };
  if ((*logger)->should_log(spdlog::level::warn))
    config.on_misdirected = [logger = *logger,
                             json_format = o.log_format == "json"](const nlohmann::json& m) {
      log_misdirected(*logger, m, json_format);
    };
  std::vector<std::string> models;
  const engines::SimSpec sim{o.sim_slots, o.time_scale, o.script, o.sim_profile,
                             o.interference_scale};
  // Checked whatever the engines are, so that a misspelt profile is never silently unused.
  if (auto p = engines::sim::sim_profile(o.sim_profile); !p) {
    std::cerr << "dynrt serve: " << p.error().message << "\n";
    return kExitUsage;
  }
  for (const auto& e : o.engines) {
    auto engine = engines::make_engine(e, sim);
    if (!engine) {
      std::cerr << "dynrt serve: " << engine.error().message << "\n";
      return kExitUsage;
    }
    config.engines.push_back({e.url, std::move(*engine), e.models});
    models.insert(models.end(), e.models.begin(), e.models.end());
  }
  if (!o.corpus.empty()) {
    auto corpus = engines::load_corpus(o.corpus);
    if (!corpus) {
      std::cerr << "dynrt serve: " << corpus.error().message << "\n";
      return kExitUsage;
    }
    config.tools = std::move(*corpus);
  }
  if (!o.http_tools.empty()) {
    for (const auto& t : o.http_tools)
      if (config.tools && config.tools->has(t.name)) {
        std::cerr << "dynrt serve: tool " << t.name << " is both an HTTP tool and a corpus tool\n";
        return kExitUsage;
      }
    // A fill runs a speculable stage before anyone asks for it, and again if it loses: a tool
    // that writes records must never be called from one.
    for (const auto* g : report.graphs())
      for (const auto& s : g->stages)
        if (s.kind == dsl::StageKind::tool && s.speculable)
          if (const auto r = o.tool_records.find(s.tool);
              r != o.tool_records.end() && !r->second.writes.empty()) {
            std::cerr << "dynrt serve: " << g->source_path << ": stage " << g->workflow << "."
                      << s.name << " is speculable, but tool " << s.tool
                      << " writes records (tools." << s.tool
                      << ".writes): a fill would call it before anyone asked; remove "
                         "`speculable: true` from the stage\n";
            return kExitUsage;
          }
    auto http = std::make_shared<engines::HttpToolSet>(o.http_tools);
    config.tools =
        config.tools
            ? std::make_shared<engines::ToolEngines>(
                  std::vector<std::shared_ptr<engines::ToolEngine>>{config.tools, std::move(http)})
            : std::shared_ptr<engines::ToolEngine>(std::move(http));
  }
  config.tool_records = o.tool_records;

  auto runtime = Runtime::create(config, report);  // linted once, above
  if (!runtime) {
    std::cerr << "dynrt serve: " << runtime.error().message << "\n";
    return kExitFindings;
  }
  gateway::GatewayOptions go;
  go.host = o.host;
  go.port = static_cast<std::uint16_t>(o.port);
  go.threads = o.io_threads;
  go.max_body_bytes = o.max_body_bytes;
  go.max_header_bytes = o.max_header_bytes;
  go.header_timeout = std::chrono::milliseconds(o.header_timeout_ms);
  go.idle_timeout = std::chrono::milliseconds(o.idle_timeout_ms);
  go.max_connections = o.max_connections;
  go.tls_cert = o.tls_cert;
  go.tls_key = o.tls_key;
  if (!raise_descriptor_limit(o.max_connections)) return kExitUsage;
  // /v1/models lists the models the engines were configured with (the embedded engine answers
  // to any name and calls itself "sim").
  go.models = models;
  if (auth->enabled()) go.auth = auth;
  std::shared_ptr<spdlog::logger> recorder;
  if (!o.record.empty()) {
    // Appended by spdlog's background thread: a call waits on the disk only when 8,192 lines
    // are queued unwritten (then it waits rather than lose a line).
    try {
      auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(o.record, false);
      recorder = std::make_shared<spdlog::async_logger>("dynrt-record", sink, spdlog::thread_pool(),
                                                        spdlog::async_overflow_policy::block);
      recorder->set_pattern("%v");
      recorder->flush_on(spdlog::level::info);
    } catch (const spdlog::spdlog_ex& e) {
      std::cerr << "dynrt serve: --record " << o.record << ": " << e.what() << "\n";
      return kExitUsage;
    }
    go.record = [recorder](const nlohmann::json& call) {
      recorder->info(call.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    };
  }
  if (go.models.empty() && o.engines.front().url == "sim") go.models = {"sim"};
  auto created = gateway::Gateway::create(**runtime, go);
  if (!created) {
    std::cerr << "dynrt serve: " << created.error().message << "\n";
    return 1;
  }
  const std::unique_ptr<gateway::Gateway> gw = std::move(*created);
  std::printf("dynrt listening on %s://%s:%u (%s; reuse %s, fills %s; %s)\n",
              gw->tls() ? "https" : "http", o.host.c_str(), static_cast<unsigned>(gw->port()),
              o.engines.front().url.c_str(), o.no_reuse ? "off" : "on", o.no_fills ? "off" : "on",
              auth->enabled() ? (std::to_string(auth->key_count()) + " API keys").c_str()
                              : "no API keys: one tenant");
  for (const auto* g : report.graphs())
    std::printf("%s\n", summary(*g).c_str());
  std::fflush(stdout);
  for (;;) {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0 || sig != SIGHUP) break;
    // The keys first: a bad key file keeps the keys in force (never none).
    if (auth->enabled()) {
      if (auto keys = read_keys(o, /*again=*/true); keys && *keys) {
        auth->replace(std::move(**keys));
        std::fprintf(stderr, "dynrt serve: reloaded %zu API key(s)\n", auth->key_count());
      } else if (keys) {
        std::fprintf(stderr, "dynrt serve: key reload refused, still using the previous keys\n%s\n",
                     keys->error().message.c_str());
      }
    }
    // A renewed certificate: a bad one (or one caught half-written) keeps the previous in force.
    if (gw->tls()) {
      if (auto cert = gw->reload_tls())
        std::fprintf(stderr, "dynrt serve: reloaded the TLS certificate (%s)\n", cert->c_str());
      else
        std::fprintf(stderr,
                     "dynrt serve: TLS reload refused, still using the previous certificate\n%s\n",
                     cert.error().message.c_str());
    }
    // A template being edited may be caught half-written: then it does not lint clean, the
    // old graphs keep serving, and the next SIGHUP tries again.
    auto loaded = (*runtime)->reload();
    if (!loaded) {
      std::fprintf(stderr, "dynrt serve: reload refused, still serving the previous templates\n%s",
                   loaded.error().message.c_str());
      continue;
    }
    std::string names;
    for (const auto& n : *loaded)
      names += (names.empty() ? "" : ", ") + n;
    std::fprintf(stderr, "dynrt serve: reloaded %zu workflow(s): %s\n", loaded->size(),
                 names.c_str());
  }
  std::fprintf(stderr, "dynrt serve: stopping\n");
  gw->stop(std::chrono::milliseconds(o.shutdown_grace_ms));
  (*runtime)->shutdown();
  (*logger)->flush();
  if (recorder) recorder->flush();
  return kExitOk;
}

}  // namespace

void add_serve_command(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "Serve the OpenAI-compatible API in front of the engines, with the templates");
  cmd->footer(
      "Tag requests with X-DynRT-Workflow, X-DynRT-Workflow-Id and X-DynRT-Stage; untagged\n"
      "requests are forwarded unchanged. Every option also has a key in the --config file\n"
      "(docs/operations.md); options given here win over the file.");
  cmd->add_option("templates", o->templates, "Template files or folders")->required();
  cmd->add_option("--engine", o->engine_flags,
                  "An engine: sim (the embedded simulated engine), or [MODEL,...=]URL of an "
                  "OpenAI-compatible server; URL1,URL2,... makes a pool of replicas of the "
                  "model (least-loaded dispatch, failover); repeat for several engines (the "
                  "first takes the models no other names)");
  cmd->add_option("--config", o->config, "YAML configuration file");
  cmd->add_option("--host", o->host,
                  "Address to listen on; other than loopback it needs --keys (or "
                  "--insecure-no-auth)")
      ->capture_default_str();
  cmd->add_option("--keys", o->keys_file,
                  "API key file (YAML: name, key_sha256 or key_env, tenant, scopes, limits); "
                  "every route but /healthz then needs a key, and results are kept apart by "
                  "tenant. SIGHUP reloads it")
      ->check(CLI::ExistingFile);
  cmd->add_option("--share-stage", o->shared_stages,
                  "WORKFLOW.STAGE whose results serve every tenant, as `share: global` in its "
                  "template (public, tenant-independent data only); repeat for several");
  cmd->add_flag("--insecure-no-auth", o->insecure_no_auth,
                "Listen on a non-loopback address without keys (only behind something that "
                "authenticates every request)");
  cmd->add_option("--port", o->port, "Port to listen on; 0 picks a free one")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--tls-cert", o->tls_cert,
                  "PEM certificate chain (the server's first); with --tls-key, serve HTTPS only "
                  "(TLS 1.2 or later). SIGHUP reads both again. A terminating proxy in front is "
                  "recommended where there is one")
      ->type_name("FILE");
  cmd->add_option("--tls-key", o->tls_key, "PEM private key of --tls-cert (not encrypted)")
      ->type_name("FILE");
  cmd->add_option("--threads", o->threads, "Actor scheduler threads")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--io-threads", o->io_threads, "HTTP I/O threads")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--time-scale", o->time_scale,
                  "sim: real milliseconds per simulated second (1000 real time, 0 as fast as "
                  "possible)")
      ->check(cli_checks::non_negative_finite())
      ->capture_default_str();
  cmd->add_option("--sim-slots", o->sim_slots,
                  "sim: decode slots per worker (default: the profile's)")
      ->check(CLI::Range(1, 65536));
  cmd->add_option(
         "--profile", o->sim_profile,
         "sim: engine profile (" + engines::sim::sim_profile_names() + "; docs/engine-profiles.md)")
      ->capture_default_str();
  cmd->add_option("--interference-scale", o->interference_scale,
                  "sim: the engine's true interference as a multiple of the fit the price curves "
                  "use (1: exact)")
      ->check(cli_checks::finite_range(engines::sim::kMinInterferenceScale,
                                       engines::sim::kMaxInterferenceScale))
      ->capture_default_str();
  cmd->add_option("--script", o->script, "sim: response script (JSON lines)");
  cmd->add_option("--corpus", o->corpus,
                  "Built-in retrieval corpus and its lookup tools, as JSON {\"documents\": "
                  "[...], \"tools\": {\"name\": \"key template\"}}");
  cmd->add_flag("--no-reuse", o->no_reuse, "Turn exact reuse across requests (C1) off");
  cmd->add_flag("--no-fills", o->no_fills, "Turn speculative fills (C2) off");
  cmd->add_flag("--no-emission", o->no_emission,
                "Act on a decode-window decision only when its decider's output ends, not as "
                "soon as its selection is emitted in a streamed call");
  cmd->add_option("--max-body-bytes", o->max_body_bytes, "Largest request body (413 above)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 32))
      ->capture_default_str();
  cmd->add_option("--max-header-bytes", o->max_header_bytes, "Largest request head (431 above)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 24))
      ->capture_default_str();
  cmd->add_option("--header-timeout-ms", o->header_timeout_ms,
                  "Time a client has to send a whole request (408 after)")
      ->check(CLI::Range(1, 3'600'000))
      ->capture_default_str();
  cmd->add_option("--idle-timeout-ms", o->idle_timeout_ms,
                  "A kept-alive connection waiting for its next request is closed after this")
      ->check(CLI::Range(1, 86'400'000))
      ->capture_default_str();
  cmd->add_option("--max-connections", o->max_connections,
                  "Open connections at most; more are answered 503 with Retry-After and closed")
      ->check(CLI::Range(1, 10'000'000))
      ->capture_default_str();
  cmd->add_option("--workflow-idle-ms", o->workflow_idle_ms,
                  "A workflow run's state is dropped after this much quiet")
      ->check(CLI::Range(1, 86'400'000))
      ->capture_default_str();
  cmd->add_option("--max-live-runs", o->max_live_runs,
                  "Workflow runs kept at most; a new run beyond it drops the least recently "
                  "active one (which loses its speculation, never a result)")
      ->check(CLI::Range(1, 100'000'000))
      ->capture_default_str();
  cmd->add_option("--log-level", o->log_level,
                  "debug, info, warn, error or off; debug logs a line for each near miss (a call "
                  "a fill or the library might have served, with why it did not: see dynrt "
                  "explain)")
      ->check(CLI::IsMember({"debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  cmd->add_option("--log-format", o->log_format, "text, or json (one object per line)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_option("--record", o->record,
                  "Append every tagged call (request, response, how it was served, latency; never "
                  "keys or headers) to FILE as JSON lines, for `dynrt template draft`");
  cmd->add_option("--library", o->library,
                  "Share the library with every replica pointed at the same Redis "
                  "(redis://HOST:PORT[/DB]): results computed by one serve the others, writes "
                  "through any reach all (docs/scaling.md)");
  cmd->add_option("--explain-runs", o->explain_runs,
                  "Ended workflow runs whose journal `dynrt explain` can still read (0: keep no "
                  "journals)")
      ->check(CLI::Range(0, 1'000'000))
      ->capture_default_str();
  cmd->add_option("--explain-keep-s", o->explain_keep_s,
                  "Seconds an ended run's journal stays readable")
      ->check(CLI::Range(1, 604'800))
      ->capture_default_str();
  cmd->add_option("--shutdown-grace-ms", o->shutdown_grace_ms,
                  "On SIGINT/SIGTERM, how long calls in flight may finish before they are "
                  "cancelled")
      ->check(CLI::Range(0, 3'600'000))
      ->capture_default_str();
  cmd->callback([o, cmd, &run] { run = [o, cmd] { return serve(*o, *cmd); }; });
}

}  // namespace dynrt::cli

// `dynrt explain --url URL RUN_ID`: reads a workflow run's journal from a running
// `dynrt serve` (GET /v1/dynrt/runs/{id}) and prints every call in order with how it was
// served and, for each call no fill or library entry served, why not, down to the JSON paths
// where the request differed from what a fill rendered. A one-shot client: blocking I/O is fine.
#include "cli/commands.hpp"
#include "cli/number_checks.hpp"
#include "runtime/json_text.hpp"

#include <curl/curl.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

namespace dynrt::cli {

namespace {

using nlohmann::json;

struct ExplainOptions {
  std::string url = "http://127.0.0.1:8080";
  std::string key;  // default: $DYNRT_API_KEY
  std::string workflow;
  std::string tenant;
  std::string format = "text";
  std::string id;
  double timeout_s = 10;
};

std::string escape(CURL* curl, const std::string& s) {
  char* e = curl_easy_escape(curl, s.data(), static_cast<int>(s.size()));
  std::string out = e ? e : "";
  curl_free(e);
  return out;
}

std::size_t collect(char* data, std::size_t size, std::size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

std::string value_text(const json& j, const char* side) {
  if (!j.contains(side)) return "(absent)";
  auto s = j[side].dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

void print_diff(std::ostream& out, const json& diff, const char* title) {
  if (!diff.is_array() || diff.empty()) return;
  out << "      " << title << ":\n";
  std::size_t width = 0;
  for (const auto& d : diff)
    width = std::max(width, d.value("path", std::string()).size());
  for (const auto& d : diff)
    out << "        " << std::left << std::setw(static_cast<int>(width)) << d.value("path", "")
        << "  expected " << value_text(d, "expected") << "  sent " << value_text(d, "sent") << "\n";
}

void print_run(std::ostream& out, const json& run) {
  out << "run " << run.value("workflow", "?") << "/" << run.value("id", "?")
      << (run.value("live", false) ? " (live)" : " (ended)") << "\n";
  std::size_t stage_w = 5;
  for (const auto& c : run.value("calls", json::array()))
    stage_w = std::max(stage_w, c.value("stage", std::string()).size());
  for (const auto& c : run.value("calls", json::array())) {
    const auto served = c["served"].is_string() ? c["served"].get<std::string>() : "pending";
    std::ostringstream line;
    line << "  #" << std::left << std::setw(4) << c.value("seq", 0)
         << std::setw(static_cast<int>(stage_w) + 2) << c.value("stage", "") << std::setw(8)
         << served;
    if (c.contains("status")) line << std::setw(5) << c["status"].get<int>();
    if (c.contains("latency_ms"))
      line << std::right << std::setw(9) << std::fixed << std::setprecision(1)
           << c["latency_ms"].get<double>() << " ms";
    out << line.str() << "\n";
    if (!c.contains("why")) continue;
    const auto& why = c["why"];
    out << "      why: " << why.value("reason", "") << ": " << why.value("detail", "") << "\n";
    if (why.contains("compared_with"))
      out << "      compared with " << why["compared_with"].get<std::string>() << "\n";
    print_diff(out, why.value("diff", json::array()), "diff");
    print_diff(out, why.value("template_diff", json::array()), "against what the template renders");
  }
  if (run.contains("calls_dropped"))
    out << "  (" << run["calls_dropped"] << " earlier calls not kept)\n";
  const auto branches = run.value("branches", json::array());
  if (branches.empty()) return;
  out << "  branches:\n";
  for (const auto& b : branches) {
    out << "    " << b.value("decision", "?") << " (branch " << b.value("branch", 0) << "): gate "
        << b.value("gate", "?");
    if (b.contains("gate_reason")) out << " (" << b["gate_reason"].get<std::string>() << ")";
    out << ", " << b.value("outcome", "?");
    if (b.contains("selection")) out << " '" << b["selection"].get<std::string>() << "'";
    out << "\n";
    for (const auto& c : b.value("candidates", json::array())) {
      out << "      " << c.value("value", "");
      if (c.contains("fill"))
        out << ": fill " << c["fill"] << " " << c.value("status", "");
      else
        out << ": not admitted (" << c.value("refused", "") << ")";
      out << "\n";
    }
  }
}

int run_explain(const ExplainOptions& o) {
  if (o.format != "text" && o.format != "json") {
    std::cerr << "dynrt explain: --format must be text or json\n";
    return kExitUsage;
  }
  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) {
    std::cerr << "dynrt explain: could not start an HTTP client\n";
    return kExitInternal;
  }
  std::string url = o.url;
  while (!url.empty() && url.back() == '/')
    url.pop_back();
  url += "/v1/dynrt/runs/" + escape(curl.get(), o.id);
  std::string query;
  if (!o.workflow.empty()) query += "workflow=" + escape(curl.get(), o.workflow);
  if (!o.tenant.empty())
    query += (query.empty() ? "" : "&") + std::string("tenant=") + escape(curl.get(), o.tenant);
  if (!query.empty()) url += "?" + query;
  std::string body;
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, collect);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(o.timeout_s * 1000));
  curl_easy_setopt(curl.get(), CURLOPT_NOSIGNAL, 1L);
  std::string key = o.key;
  if (key.empty())
    if (const char* env = std::getenv("DYNRT_API_KEY")) key = env;
  struct curl_slist* headers = nullptr;
  const std::string auth = "Authorization: Bearer " + key;
  if (!key.empty()) headers = curl_slist_append(headers, auth.c_str());
  std::unique_ptr<curl_slist, void (*)(curl_slist*)> hold(headers, curl_slist_free_all);
  if (headers) curl_easy_setopt(curl.get(), CURLOPT_HTTPHEADER, headers);
  if (const auto rc = curl_easy_perform(curl.get()); rc != CURLE_OK) {
    std::cerr << "dynrt explain: " << o.url << ": " << curl_easy_strerror(rc) << "\n";
    return kExitInternal;
  }
  long status = 0;
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &status);
  const auto doc = parse_json(body);
  if (status != 200) {
    std::string message = body;
    if (!doc.is_discarded() && doc.contains("error") && doc["error"].is_object())
      message = doc["error"].value("message", body);
    std::cerr << "dynrt explain: " << status << ": " << message << "\n";
    return status == 404 ? kExitFindings : kExitInternal;
  }
  if (doc.is_discarded() || !doc.contains("data") || !doc["data"].is_array()) {
    std::cerr << "dynrt explain: the server's answer is not a list of runs\n";
    return kExitInternal;
  }
  if (o.format == "json") {
    std::cout << doc["data"].dump(2) << "\n";
    return kExitOk;
  }
  for (const auto& run : doc["data"])
    print_run(std::cout, run);
  return kExitOk;
}

}  // namespace

void add_explain_command(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<ExplainOptions>();
  auto* cmd = app.add_subcommand(
      "explain",
      "Show how each call of a workflow run was served, and why a call no fill or library "
      "entry served was not (from a running `dynrt serve`)");
  cmd->add_option("run", o->id, "The workflow id (the X-DynRT-Workflow-Id the calls carried)")
      ->required();
  cmd->add_option("--url", o->url, "The dynrt serve to ask")->capture_default_str();
  cmd->add_option("--key", o->key,
                  "API key when the server has keys (default: $DYNRT_API_KEY); a key reads its "
                  "own tenant's runs");
  cmd->add_option("--workflow", o->workflow, "Only the run of this workflow template");
  cmd->add_option("--tenant", o->tenant, "Another tenant's run (admin keys only)");
  cmd->add_option("--format", o->format, "text or json")->capture_default_str();
  // Bounded above 0: curl reads a timeout of 0 as none, and a stalled server would then hold
  // the command for ever.
  cmd->add_option("--timeout", o->timeout_s, "Seconds to wait for the answer (0.001 to 3600)")
      ->check(cli_checks::finite_range(0.001, 3600))
      ->capture_default_str();
  cmd->callback([&run, o] { run = [o] { return run_explain(*o); }; });
}

}  // namespace dynrt::cli

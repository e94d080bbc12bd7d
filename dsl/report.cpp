#include "dsl/report.hpp"

#include <nlohmann/json.hpp>

#include <sstream>

namespace dynrt::dsl {

namespace {

using ordered_json = nlohmann::ordered_json;

constexpr std::string_view kRulesDoc = "docs/lint-rules.md";
constexpr int kSnippetWidth = 160;  // longer lines are shown as a window around the span

// Splits a line into code points (as byte strings).
std::vector<std::string_view> code_points(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    std::size_t n = 1;
    while (i + n < line.size() && (static_cast<unsigned char>(line[i + n]) & 0xC0) == 0x80)
      ++n;
    out.push_back(line.substr(i, n));
    i += n;
  }
  return out;
}

void append_snippet(std::string& out, const SourceFile& file, const Diagnostic& d) {
  if (d.begin.line > file.line_count()) return;
  const std::string printable = printable_utf8(file.line_text(d.begin.line));
  const std::string_view line = printable;
  const std::vector<std::string_view> cps = code_points(line);
  const int total = static_cast<int>(cps.size());
  int first = 0;  // 0-based window [first, last) in code points
  int last = total;
  const int col = std::min(d.begin.column - 1, total);
  if (total > kSnippetWidth) {
    first = std::max(0, col - kSnippetWidth / 3);
    last = std::min(total, first + kSnippetWidth);
  }
  const std::string number = std::to_string(d.begin.line);
  const std::string gutter(number.size(), ' ');
  out += " " + number + " | ";
  if (first > 0) out += "...";
  for (int i = first; i < last; ++i)
    out += cps[static_cast<std::size_t>(i)];
  if (last < total) out += "...";
  out += "\n " + gutter + " | ";
  if (first > 0) out += "   ";
  for (int i = first; i < col; ++i)
    out += cps[static_cast<std::size_t>(i)] == "\t" ? "\t" : " ";
  int width = d.end.line == d.begin.line ? d.end.column - d.begin.column : total - col;
  width = std::clamp(width, 1, std::max(1, last - col));
  out += "^";
  out += std::string(static_cast<std::size_t>(width - 1), '~');
  out += "\n";
}

std::string summary_line(const LintReport& report) {
  auto plural = [](std::size_t n, const char* word) {
    return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
  };
  std::string s = plural(report.count(Severity::error), "error") + ", " +
                  plural(report.count(Severity::warning), "warning");
  if (report.count(Severity::info) > 0) s += ", " + plural(report.count(Severity::info), "note");
  s += " in " + plural(report.files.size(), "file");
  if (report.suppressed > 0) s += " (" + std::to_string(report.suppressed) + " ignored inline)";
  return s;
}

std::string uri_of(const std::string& path) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char ch : path) {
    const auto c = static_cast<unsigned char>(ch);
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '-' || c == '_' || c == '.' || c == '~' || c == '/';
    if (plain) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xF]);
    }
  }
  return out;
}

std::string_view sarif_level(Severity s) {
  switch (s) {
    case Severity::error:
      return "error";
    case Severity::warning:
      return "warning";
    case Severity::info:
      return "note";
  }
  return "error";
}

}  // namespace

std::string format_text(const LintReport& report) {
  std::string out;
  for (const Diagnostic& d : report.diagnostics) {
    out += d.file + ":" + std::to_string(d.begin.line) + ":" + std::to_string(d.begin.column) +
           ": " + std::string(to_string(d.severity)) + ": " + d.message + " [" +
           std::string(d.info().name) + "]\n";
    if (const SourceFile* src = report.source(d.file); src && !src->text().empty()) {
      append_snippet(out, *src, d);
    }
  }
  if (!report.diagnostics.empty()) out += summary_line(report) + "\n";
  return out;
}

std::string format_json(const LintReport& report) {
  ordered_json findings = ordered_json::array();
  for (const Diagnostic& d : report.diagnostics) {
    ordered_json f;
    f["rule"] = d.info().name;
    f["code"] = d.info().code;
    f["severity"] = to_string(d.severity);
    f["file"] = d.file;
    f["line"] = d.begin.line;
    f["column"] = d.begin.column;
    f["end_line"] = d.end.line;
    f["end_column"] = d.end.column;
    f["message"] = d.message;
    f["path"] = d.path;
    f["suggestion"] = d.suggestion.empty() ? ordered_json(nullptr) : ordered_json(d.suggestion);
    findings.push_back(std::move(f));
  }
  ordered_json out;
  out["version"] = 1;
  out["findings"] = std::move(findings);
  out["summary"] = {{"files", report.files.size()},
                    {"errors", report.count(Severity::error)},
                    {"warnings", report.count(Severity::warning)},
                    {"infos", report.count(Severity::info)},
                    {"suppressed", report.suppressed}};
  // A path that could not be read is no finding, but a reader of the document alone must not
  // take it for a clean lint (the exit status is 2 then).
  out["errors"] = report.usage_errors;
  return out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string format_sarif(const LintReport& report, std::string_view tool_version) {
  ordered_json rules = ordered_json::array();
  for (const RuleInfo& r : all_rules()) {
    ordered_json rule;
    rule["id"] = r.code;
    rule["name"] = r.name;
    rule["shortDescription"] = {{"text", r.summary}};
    rule["defaultConfiguration"] = {{"level", sarif_level(r.severity)}};
    rule["help"] = {{"text", "See " + std::string(kRulesDoc) + "#" + std::string(r.name)}};
    rules.push_back(std::move(rule));
  }
  ordered_json results = ordered_json::array();
  for (const Diagnostic& d : report.diagnostics) {
    ordered_json region;
    region["startLine"] = d.begin.line;
    region["startColumn"] = d.begin.column;
    region["endLine"] = d.end.line;
    region["endColumn"] = d.end.column;
    ordered_json location;
    location["physicalLocation"] = {{"artifactLocation", {{"uri", uri_of(d.file)}}},
                                    {"region", std::move(region)}};
    ordered_json result;
    result["ruleId"] = d.info().code;
    result["ruleIndex"] = static_cast<int>(d.rule);
    result["level"] = sarif_level(d.severity);
    result["message"] = {{"text", d.message + " [" + std::string(d.info().name) + "]"}};
    result["locations"] = ordered_json::array({std::move(location)});
    if (!d.path.empty()) result["properties"] = {{"path", d.path}};
    results.push_back(std::move(result));
  }
  ordered_json driver;
  driver["name"] = "dynrt-lint";
  driver["version"] = tool_version;
  driver["rules"] = std::move(rules);
  ordered_json run;
  run["tool"] = {{"driver", std::move(driver)}};
  run["columnKind"] = "unicodeCodePoints";
  run["results"] = std::move(results);
  // SARIF's place for what kept the tool from linting everything it was given.
  ordered_json notifications = ordered_json::array();
  for (const std::string& e : report.usage_errors)
    notifications.push_back({{"level", "error"}, {"message", {{"text", e}}}});
  ordered_json invocation;
  invocation["executionSuccessful"] = report.usage_errors.empty();
  invocation["toolExecutionNotifications"] = std::move(notifications);
  run["invocations"] = ordered_json::array({std::move(invocation)});
  ordered_json out;
  out["$schema"] = "https://json.schemastore.org/sarif-2.1.0.json";
  out["version"] = "2.1.0";
  out["runs"] = ordered_json::array({std::move(run)});
  return out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string format_rule_list() {
  std::ostringstream out;
  for (const RuleInfo& r : all_rules()) {
    std::string name(r.name);
    name.resize(std::max<std::size_t>(name.size(), 28), ' ');
    std::string sev(to_string(r.severity));
    sev.resize(8, ' ');
    out << r.code << "  " << name << sev << r.summary << "\n";
  }
  return out.str();
}

}  // namespace dynrt::dsl

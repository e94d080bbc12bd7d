#include "cli/commands.hpp"
#include "dsl/lint.hpp"
#include "dsl/report.hpp"
#include "dsl/schema.hpp"

#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace dynrt::cli {

namespace {

struct LintArgs {
  std::vector<std::string> paths;
  std::string format = "text";
  std::string fail_on = "error";
  bool no_inline_ignores = false;
  bool list_rules = false;
};

int run_lint(const LintArgs& args) {
  if (args.list_rules) {
    std::cout << dsl::format_rule_list();
    return kExitOk;
  }
  if (args.paths.empty()) {
    std::cerr << "dynrt lint: name at least one template file or folder (for example "
                 "`dynrt lint templates/`)\n";
    return kExitUsage;
  }
  dsl::LintOptions options;
  options.inline_ignores = !args.no_inline_ignores;
  const dsl::LintReport report = dsl::lint_paths(args.paths, options);
  if (args.format == "json") {
    std::cout << dsl::format_json(report);
  } else if (args.format == "sarif") {
    std::cout << dsl::format_sarif(report, DYNRT_VERSION);
  } else {
    std::cout << dsl::format_text(report);
  }
  std::cout.flush();
  for (const std::string& e : report.usage_errors)
    std::cerr << "dynrt lint: " << e << "\n";
  if (!report.usage_errors.empty()) return kExitUsage;
  if (args.fail_on == "never") return kExitOk;
  const dsl::Severity threshold = *dsl::parse_severity(args.fail_on);
  for (const dsl::Diagnostic& d : report.diagnostics) {
    if (d.severity >= threshold) return kExitFindings;
  }
  return kExitOk;
}

}  // namespace

void add_lint_commands(CLI::App& app, std::function<int()>& run) {
  auto args = std::make_shared<LintArgs>();
  CLI::App* lint = app.add_subcommand("lint", "Check workflow templates and report every finding");
  lint->footer(
      "Prints file:line:col: severity: message [rule], the line and a caret under the span.\n"
      "Exit status: 0 clean, 1 findings at or above --fail-on, 2 usage error, 3 internal "
      "error.\nRules: dynrt lint --list-rules, and docs/lint-rules.md. Silence one finding "
      "with a comment on the line above it:\n  # dynrt-lint ignore=RULE -- reason");
  lint->add_option("paths", args->paths,
                   "Template files or folders (folders are searched for *.yaml and *.yml; "
                   "- reads standard input)");
  lint->add_option("-f,--format", args->format, "Output format: text, json or sarif")
      ->check(CLI::IsMember({"text", "json", "sarif"}))
      ->capture_default_str();
  lint->add_option("--fail-on", args->fail_on,
                   "Lowest severity that makes the exit status 1: error, warning, info or never")
      ->check(CLI::IsMember({"error", "warning", "info", "never"}))
      ->capture_default_str();
  lint->add_flag("--no-inline-ignores", args->no_inline_ignores,
                 "Report findings that `# dynrt-lint ignore=` comments would silence");
  lint->add_flag("--list-rules", args->list_rules, "List every rule and exit");
  lint->callback([args, &run] { run = [args] { return run_lint(*args); }; });

  CLI::App* schema = app.add_subcommand("schema", "Print the JSON Schema of workflow templates");
  schema->footer(
      "The same schema as docs/template.schema.json. Point the YAML language server at it for "
      "completion and checks in your editor.");
  schema->callback([&run] {
    run = [] {
      std::cout << dsl::schema::json_schema().dump(2) << "\n";
      return kExitOk;
    };
  });
}

}  // namespace dynrt::cli

// The three shapes of `dynrt lint` output, from one LintReport.
//
// text:  `file:line:col: severity: message [rule-name]`, then the source line and a caret
//        marker under the span (actionlint style), then a one-line summary.
// json:  {"version": 1, "findings": [{rule, code, severity, file, line, column, end_line,
//        end_column, message, path, suggestion}], "summary": {...}}; field names are stable.
// sarif: SARIF 2.1.0 with the rule table, for code-scanning dashboards.
// Lines and columns are 1-based; columns count Unicode code points; end_column is exclusive.
#pragma once

#include "dsl/lint.hpp"

#include <string>
#include <string_view>

namespace dynrt::dsl {

enum class ReportFormat { text, json, sarif };

std::string format_text(const LintReport& report);
std::string format_json(const LintReport& report);
std::string format_sarif(const LintReport& report, std::string_view tool_version);

// One rule per line: code, name, default severity, summary (`dynrt lint --list-rules`).
std::string format_rule_list();

}  // namespace dynrt::dsl

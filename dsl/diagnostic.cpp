#include "dsl/diagnostic.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <tuple>

namespace dynrt::dsl {

namespace {

using enum Rule;
using enum Severity;

constexpr std::array kRules = {
    RuleInfo{invalid_yaml, "invalid-yaml", "DT0001", error, "The file is not well-formed YAML."},
    RuleInfo{invalid_encoding, "invalid-encoding", "DT0002", error,
             "The file is not UTF-8 text, or holds a control character that YAML forbids."},
    RuleInfo{empty_file, "empty-file", "DT0003", error, "The file holds no YAML document."},
    RuleInfo{duplicate_key, "duplicate-key", "DT0004", error,
             "A mapping repeats a key; a YAML parser would silently keep only the last value."},
    RuleInfo{multi_document, "multi-document", "DT0005", error,
             "A template file holds exactly one YAML document."},
    RuleInfo{resource_limit, "resource-limit", "DT0006", error,
             "The file exceeds a parser limit: file size, nesting depth, scalar length or "
             "alias expansion."},
    RuleInfo{alias_cycle, "alias-cycle", "DT0007", error,
             "An alias refers to the collection that contains it."},
    RuleInfo{byte_order_mark, "byte-order-mark", "DT0008", warning,
             "The file starts with a UTF-8 byte-order mark."},
    RuleInfo{unsupported_yaml, "unsupported-yaml", "DT0009", error,
             "A YAML feature templates do not support: merge keys, custom tags, non-scalar "
             "keys."},
    RuleInfo{ambiguous_boolean, "ambiguous-boolean", "DT0010", warning,
             "A plain yes/no/on/off: a boolean to YAML 1.1 tools, a string to YAML 1.2."},
    RuleInfo{io_error, "io-error", "DT0011", error,
             "A file or folder could not be read (permissions, a symlink loop, a special "
             "file)."},
    RuleInfo{unknown_key, "unknown-key", "DT1001", error,
             "A key the template language does not define at that place."},
    RuleInfo{wrong_type, "wrong-type", "DT1002", error, "A value of the wrong YAML type."},
    RuleInfo{missing_key, "missing-key", "DT1003", error, "A required key is absent."},
    RuleInfo{invalid_value, "invalid-value", "DT1004", error,
             "A value of the right type that is not allowed: an enum member, a range, a name, "
             "a regular expression, a JSON pointer or a mustache template."},
    RuleInfo{unsupported_version, "unsupported-version", "DT1005", error,
             "The template's `version` is not one this dynrt understands."},
    RuleInfo{unknown_ref, "unknown-ref", "DT2001", error,
             "A reference to a stage, variable, decision point or loop that nothing defines."},
    RuleInfo{cycle, "cycle", "DT2002", error,
             "Stages depend on each other in a cycle that no declared loop explains."},
    RuleInfo{unreachable_stage, "unreachable-stage", "DT2003", warning,
             "A stage that no path from the entry stages reaches."},
    RuleInfo{undecided_decision, "undecided-decision", "DT2004", error,
             "A decision point that no stage decides."},
    RuleInfo{no_candidate_source, "no-candidate-source", "DT2005", error,
             "A decision point without a candidate source."},
    RuleInfo{conflicting_decider, "conflicting-decider", "DT2006", error,
             "More than one stage decides the same decision point."},
    RuleInfo{missing_dependency, "missing-dependency", "DT2007", error,
             "A stage uses a value produced by a stage it does not run after."},
    RuleInfo{duplicate_name, "duplicate-name", "DT2008", error,
             "One name is defined twice among inputs, outputs, decision points and loops."},
    RuleInfo{unused_variable, "unused-variable", "DT2009", warning,
             "A declared input or output that no stage, decision or record key uses."},
    RuleInfo{duplicate_workflow, "duplicate-workflow", "DT2010", error,
             "Two template files define the same workflow name."},
    RuleInfo{unbound_input, "unbound-input", "DT2011", warning,
             "An input that no stage binds from its incoming request."},
    RuleInfo{ambiguous_match, "ambiguous-match", "DT2012", warning,
             "Two stages' match rules can both hold on one untagged call and neither includes "
             "the other's, so such a call is ambiguous and passes through unrecognized."},
    RuleInfo{nondeterministic_speculable, "nondeterministic-speculable", "DT4001", error,
             "A speculable model stage samples (temperature above 0) without a fixed seed, so "
             "running it twice may give two answers."},
    RuleInfo{speculable_writes, "speculable-writes", "DT4002", error,
             "A speculable stage writes external records; a fill must have no external "
             "effect."},
    RuleInfo{selection_unmatchable, "selection-unmatchable", "DT4003", error,
             "A selection rule that cannot yield any of the decision point's candidates."},
    RuleInfo{no_speculable_downstream, "no-speculable-downstream", "DT4004", warning,
             "A decision point with no speculable stage downstream, so nothing can be filled."},
    RuleInfo{unscoped_record_key, "unscoped-record-key", "DT5001", error,
             "A record key template that starts with a mustache tag instead of a literal "
             "prefix, so the value rendered there can name any record."},
    RuleInfo{shared_stage_reads_records, "shared-stage-reads-records", "DT5002", warning,
             "A stage shared across tenants (`share: global`) reads records, which may hold "
             "one tenant's data."},
    RuleInfo{shared_stage_caller_input, "shared-stage-caller-input", "DT5003", warning,
             "A stage shared across tenants (`share: global`) renders a value that comes from "
             "a caller's request."},
    RuleInfo{ignore_without_reason, "ignore-without-reason", "DT9001", warning,
             "An inline ignore without a `-- reason`."},
    RuleInfo{unused_ignore, "unused-ignore", "DT9002", warning,
             "An inline ignore that suppressed nothing."},
    RuleInfo{invalid_ignore, "invalid-ignore", "DT9003", error,
             "An inline ignore that is malformed or names no known rule."},
    RuleInfo{draft_todo, "draft-todo", "DT9004", warning,
             "A `# dynrt-todo:` comment: something `dynrt template draft` could not infer."},
};

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

std::string_view to_string(Severity s) {
  switch (s) {
    case info:
      return "info";
    case warning:
      return "warning";
    case error:
      return "error";
  }
  return "error";
}

std::optional<Severity> parse_severity(std::string_view text) {
  for (const Severity s : {info, warning, error}) {
    if (iequals(text, to_string(s))) return s;
  }
  return std::nullopt;
}

std::span<const RuleInfo> all_rules() {
  return kRules;
}

const RuleInfo& rule_info(Rule rule) {
  // kRules is declared in enum order; the static_assert below keeps it that way.
  return kRules[static_cast<std::size_t>(rule)];
}

static_assert([] {
  for (std::size_t i = 0; i < kRules.size(); ++i) {
    if (static_cast<std::size_t>(kRules[i].rule) != i) return false;
  }
  return true;
}());

const RuleInfo* find_rule(std::string_view name_or_code) {
  for (const RuleInfo& r : kRules) {
    if (iequals(r.name, name_or_code) || iequals(r.code, name_or_code)) return &r;
  }
  return nullptr;
}

Diagnostic& DiagnosticSink::add(Rule rule, Span span, std::string message, std::string path) {
  Diagnostic d;
  d.rule = rule;
  d.severity = rule_info(rule).severity;
  d.file = file_.path();
  d.span = span;
  d.begin = file_.position(span.begin);
  d.end = file_.position(std::max(span.end, span.begin));
  if (span.end <= span.begin) d.end.column = d.begin.column + 1;  // point spans cover one column
  d.message = std::move(message);
  d.path = std::move(path);
  diagnostics_.push_back(std::move(d));
  return diagnostics_.back();
}

bool DiagnosticSink::has_errors() const {
  return std::any_of(diagnostics_.begin(), diagnostics_.end(),
                     [](const Diagnostic& d) { return d.severity == Severity::error; });
}

void sort_diagnostics(std::vector<Diagnostic>& diagnostics) {
  std::stable_sort(diagnostics.begin(), diagnostics.end(),
                   [](const Diagnostic& a, const Diagnostic& b) {
                     return std::tie(a.file, a.begin.line, a.begin.column, a.rule) <
                            std::tie(b.file, b.begin.line, b.begin.column, b.rule);
                   });
}

}  // namespace dynrt::dsl

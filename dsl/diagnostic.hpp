// Lint findings: the rule registry and the Diagnostic value every checker produces.
//
// A rule has a stable kebab-case name (what `[rule-id]` prints and what inline ignores name)
// and a stable code (DT0xxx YAML and encoding, DT1xxx schema, DT2xxx graph and references,
// DT4xxx speculation safety, DT5xxx isolation between tenants, DT9xxx lint pragmas); either
// is accepted wherever a rule is named. Rules are never renumbered; a retired rule keeps its
// code. docs/lint-rules.md has one section per rule. Pure data; thread-compatible.
#pragma once

#include "dsl/source.hpp"

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dynrt::dsl {

enum class Severity { info, warning, error };

std::string_view to_string(Severity s);
std::optional<Severity> parse_severity(std::string_view text);

enum class Rule {
  // DT0xxx: the file as text and as YAML
  invalid_yaml,       ///< not well-formed YAML (the parser's message and position)
  invalid_encoding,   ///< invalid UTF-8, or a control character YAML forbids
  empty_file,         ///< no YAML document at all
  duplicate_key,      ///< a mapping repeats a key (yaml-cpp would silently keep the last)
  multi_document,     ///< more than one YAML document in one template file
  resource_limit,     ///< file size, nesting depth, scalar length or alias expansion cap hit
  alias_cycle,        ///< an alias refers to the collection that contains it
  byte_order_mark,    ///< a UTF-8 byte-order mark at the start of the file
  unsupported_yaml,   ///< merge keys, custom tags or non-scalar keys
  ambiguous_boolean,  ///< plain yes/no/on/off: a boolean in YAML 1.1, a string in YAML 1.2
  io_error,           ///< a file or folder that could not be read (permissions, symlink loop)
  // DT1xxx: the template schema
  unknown_key,          ///< a key the language does not define at that place
  wrong_type,           ///< a value of the wrong YAML type
  missing_key,          ///< a required key is absent
  invalid_value,        ///< right type, wrong value: enum, range, name, regex, pointer, mustache
  unsupported_version,  ///< `version` other than the one this dynrt understands
  // DT2xxx: names, references and the stage graph
  unknown_ref,          ///< a reference to a stage, variable, decision or loop nobody defines
  cycle,                ///< a dependency cycle that no declared loop explains
  unreachable_stage,    ///< a stage the entry stages never lead to
  undecided_decision,   ///< a decision point that no stage decides
  no_candidate_source,  ///< a decision point without a candidate source
  conflicting_decider,  ///< two stages decide the same decision point
  missing_dependency,   ///< a stage uses a value from a stage it does not run after
  duplicate_name,       ///< one name defined twice (input, output, decision, loop index)
  unused_variable,      ///< a declared input or output that nothing uses
  duplicate_workflow,   ///< two template files define the same workflow name
  unbound_input,        ///< an input that no stage binds from its request
  ambiguous_match,      ///< two stages' match rules may hold on one call, neither more specific
  // DT4xxx: speculation safety
  nondeterministic_speculable,  ///< a speculable model stage that samples without a fixed seed
  speculable_writes,            ///< a speculable stage that writes external records
  selection_unmatchable,        ///< a selection rule that can never yield any candidate
  no_speculable_downstream,     ///< a decision point with nothing downstream that may be filled
  // DT5xxx: isolation between tenants
  unscoped_record_key,         ///< a record key that starts with a tag, so a value picks any key
  shared_stage_reads_records,  ///< a `share: global` stage that reads records
  shared_stage_caller_input,   ///< a `share: global` stage whose request carries caller input
  // DT9xxx: lint pragmas
  ignore_without_reason,  ///< an inline ignore without `-- reason`
  unused_ignore,          ///< an inline ignore that suppressed nothing
  invalid_ignore,         ///< an inline ignore that names no known rule or is malformed
  draft_todo,             ///< a `# dynrt-todo:` left by `dynrt template draft`
};

struct RuleInfo {
  Rule rule;
  std::string_view name;  // kebab-case, stable
  std::string_view code;  // DTnnnn, stable
  Severity severity;      // default severity
  std::string_view summary;
};

std::span<const RuleInfo> all_rules();
const RuleInfo& rule_info(Rule rule);
// Accepts a rule's name or its code, case-insensitively.
const RuleInfo* find_rule(std::string_view name_or_code);

struct Diagnostic {
  Rule rule = Rule::invalid_yaml;
  Severity severity = Severity::error;
  std::string file;
  Span span;       // byte offsets into the file's text
  Position begin;  // 1-based line and column (code points)
  Position end;    // exclusive: the column after the last character
  std::string message;
  std::string path;        // JSON pointer to the node inside the template, when known
  std::string suggestion;  // a replacement for the span ("did you mean"), when one is known

  const RuleInfo& info() const { return rule_info(rule); }
};

// Collects the findings for one source file; positions are computed from its text.
class DiagnosticSink {
 public:
  explicit DiagnosticSink(const SourceFile& file) : file_(file) {}

  Diagnostic& add(Rule rule, Span span, std::string message, std::string path = {});
  const SourceFile& file() const { return file_; }
  std::vector<Diagnostic>& diagnostics() { return diagnostics_; }
  const std::vector<Diagnostic>& diagnostics() const { return diagnostics_; }
  bool has_errors() const;

 private:
  const SourceFile& file_;
  std::vector<Diagnostic> diagnostics_;
};

// Orders findings by file, position, then rule, so output is stable.
void sort_diagnostics(std::vector<Diagnostic>& diagnostics);

}  // namespace dynrt::dsl

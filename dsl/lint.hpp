// `dynrt lint` as a library: finds template files, parses, checks and compiles each one,
// applies inline ignores, and checks what spans files (two templates, one workflow name).
//
// The same entry points load templates for `dynrt serve` and dynrt::Runtime: a template is
// usable only when no error-severity finding remains for its file after inline ignores.
// Reading files is the only I/O; it is bounded (file size, regular files only, symlink loops
// detected), so hostile folders end in findings, never a hang. Thread-compatible.
#pragma once

#include "dsl/diagnostic.hpp"
#include "dsl/source.hpp"
#include "dsl/template_graph.hpp"
#include "dsl/yaml.hpp"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dynrt::dsl {

struct LintOptions {
  yaml::Limits limits;
  bool inline_ignores = true;  // honour `# dynrt-lint ignore=...` pragmas
};

struct LintedFile {
  std::shared_ptr<const SourceFile> source;  // null when the file could not be read
  std::string path;
  std::optional<TemplateGraph> graph;
  bool usable = false;  // a graph, and no error left for this file
};

struct LintReport {
  std::vector<LintedFile> files;
  std::vector<Diagnostic> diagnostics;    // after inline ignores, sorted by file and position
  std::size_t suppressed = 0;             // findings silenced by inline ignores
  std::vector<std::string> usage_errors;  // paths that do not exist

  std::size_t count(Severity severity) const;
  const SourceFile* source(const std::string& path) const;
  std::vector<const TemplateGraph*> graphs() const;  // the usable ones, in file order
};

// Lints files and folders (recursively: *.yaml and *.yml, hidden entries skipped). A path
// that does not exist is a usage error, not a finding. "-" reads standard input.
LintReport lint_paths(const std::vector<std::string>& paths, const LintOptions& options = {});

// Lints one template held in memory; `path` names it in findings.
LintReport lint_text(const std::string& path, std::string text, const LintOptions& options = {});

}  // namespace dynrt::dsl

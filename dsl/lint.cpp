#include "dsl/lint.hpp"

#include "dsl/compile.hpp"
#include "dsl/recognize.hpp"
#include "dsl/schema.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <set>
#include <system_error>

namespace dynrt::dsl {

namespace fs = std::filesystem;

std::size_t LintReport::count(Severity severity) const {
  return static_cast<std::size_t>(
      std::count_if(diagnostics.begin(), diagnostics.end(),
                    [&](const Diagnostic& d) { return d.severity == severity; }));
}

const SourceFile* LintReport::source(const std::string& path) const {
  for (const LintedFile& f : files) {
    if (f.path == path) return f.source.get();
  }
  return nullptr;
}

std::vector<const TemplateGraph*> LintReport::graphs() const {
  std::vector<const TemplateGraph*> out;
  for (const LintedFile& f : files) {
    if (f.usable && f.graph) out.push_back(&*f.graph);
  }
  return out;
}

namespace {

constexpr std::string_view kBom = "\xEF\xBB\xBF";

// -- inline ignores ----------------------------------------------------------------------------

struct Pragma {
  bool whole_file = false;
  int first_line = 0;  // lines the pragma covers (inclusive)
  int last_line = 0;
  struct Target {
    const RuleInfo* rule = nullptr;
    Span span;  // of the rule's name in the comment
    bool used = false;
  };
  std::vector<Target> targets;
};

bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\r';
}

void collect_scalars(const yaml::Node& n, std::vector<Span>& out) {
  if (n.is_scalar() && n.style != yaml::Style::plain) out.push_back(n.span);
  for (const yaml::Node& item : n.items)
    collect_scalars(item, out);
  for (const yaml::MapEntry& e : n.entries) {
    collect_scalars(e.key, out);
    collect_scalars(e.value, out);
  }
}

// Maps a line to the last line of the outermost node that starts on it.
void collect_extents(const SourceFile& file, const yaml::Node& n, std::map<int, int>& out) {
  auto note = [&](Span begin_span, Span end_span) {
    const int first = file.position(begin_span.begin).line;
    const int last = file.position(end_span.end > 0 ? end_span.end - 1 : 0).line;
    int& slot = out[first];
    slot = std::max({slot, first, last});
  };
  for (const yaml::Node& item : n.items) {
    note(item.span, item.span);
    collect_extents(file, item, out);
  }
  for (const yaml::MapEntry& e : n.entries) {
    note(e.key.span, e.value.span.end > e.key.span.end ? e.value.span : e.key.span);
    collect_extents(file, e.value, out);
  }
}

std::vector<Pragma> parse_pragmas(const SourceFile& file, const yaml::Node* root,
                                  DiagnosticSink& sink) {
  std::vector<Pragma> out;
  std::vector<Span> scalars;
  std::map<int, int> extents;
  if (root) {
    collect_scalars(*root, scalars);
    collect_extents(file, *root, extents);
  }
  constexpr std::string_view kMarker = "dynrt-lint";
  constexpr std::string_view kTodo = "dynrt-todo";
  for (int line = 1; line <= file.line_count(); ++line) {
    const std::string_view l = file.line_text(line);
    const std::size_t base = file.line_begin(line);
    std::size_t hash = std::string_view::npos;
    for (std::size_t i = l.find('#'); i != std::string_view::npos; i = l.find('#', i + 1)) {
      if (i > 0 && !is_blank(l[i - 1])) continue;  // YAML comments follow white space
      const std::size_t at = base + i;
      const bool in_scalar = std::any_of(scalars.begin(), scalars.end(),
                                         [&](Span s) { return at > s.begin && at < s.end; });
      if (in_scalar) continue;
      hash = i;
      break;
    }
    if (hash == std::string_view::npos) continue;
    std::size_t p = hash + 1;
    while (p < l.size() && is_blank(l[p]))
      ++p;
    if (l.substr(p, kTodo.size()) == kTodo) {
      // What `dynrt template draft` could not infer: a finding until someone settles it.
      std::string_view what = l.substr(p + kTodo.size());
      while (!what.empty() && (what.front() == ':' || is_blank(what.front())))
        what.remove_prefix(1);
      sink.add(Rule::draft_todo, Span{base + hash, base + l.size()},
               "to do: " + std::string(what.empty() ? "(no text)" : what));
      continue;
    }
    if (l.substr(p, kMarker.size()) != kMarker) continue;
    p += kMarker.size();
    const Span comment{base + hash, base + l.size()};
    while (p < l.size() && is_blank(l[p]))
      ++p;
    Pragma pragma;
    std::string_view rest = l.substr(p);
    if (rest.starts_with("file-ignore=")) {
      pragma.whole_file = true;
      p += 12;
    } else if (rest.starts_with("ignore=")) {
      p += 7;
    } else {
      sink.add(Rule::invalid_ignore, comment,
               "malformed dynrt-lint pragma; write `# dynrt-lint ignore=RULE -- reason` or "
               "`# dynrt-lint file-ignore=RULE -- reason`");
      continue;
    }
    std::size_t list_end = p;
    while (list_end < l.size() && !is_blank(l[list_end]))
      ++list_end;
    const std::string_view list = l.substr(p, list_end - p);
    std::size_t item = 0;
    while (item <= list.size()) {
      std::size_t comma = list.find(',', item);
      if (comma == std::string_view::npos) comma = list.size();
      const std::string_view name = list.substr(item, comma - item);
      const Span span{base + p + item, base + p + comma};
      if (!name.empty()) {
        const RuleInfo* rule = find_rule(name);
        if (!rule) {
          sink.add(Rule::invalid_ignore, span,
                   "\"" + std::string(name) + "\" is not a dynrt-lint rule name or code");
        } else {
          pragma.targets.push_back(Pragma::Target{rule, span});
        }
      }
      item = comma + 1;
    }
    if (list.empty()) {
      sink.add(Rule::invalid_ignore, comment, "dynrt-lint ignore names no rule");
    }
    std::size_t r = list_end;
    while (r < l.size() && is_blank(l[r]))
      ++r;
    std::string_view reason = l.substr(r);
    if (reason.starts_with("--")) {
      reason.remove_prefix(2);
      while (!reason.empty() && is_blank(reason.front()))
        reason.remove_prefix(1);
    } else if (!reason.empty()) {
      sink.add(Rule::invalid_ignore, Span{base + r, base + l.size()},
               "expected `-- reason` after the rule list");
      reason = "x";  // reported once
    }
    if (reason.empty()) {
      sink.add(Rule::ignore_without_reason, comment,
               "say why the finding is ignored: `# dynrt-lint ignore=RULE -- reason`");
    }
    const bool trailing = std::any_of(l.begin(), l.begin() + static_cast<long>(hash),
                                      [](char c) { return !is_blank(c); });
    if (trailing) {
      pragma.first_line = pragma.last_line = line;
    } else {
      // The next line holding YAML, and the whole node that starts there.
      int target = line + 1;
      while (target <= file.line_count()) {
        const std::string_view t = file.line_text(target);
        const auto first = t.find_first_not_of(" \t\r");
        if (first != std::string_view::npos && t[first] != '#') break;
        ++target;
      }
      pragma.first_line = target;
      const auto it = extents.find(target);
      pragma.last_line = it == extents.end() ? target : std::max(target, it->second);
    }
    if (!pragma.targets.empty()) out.push_back(std::move(pragma));
  }
  return out;
}

void apply_pragmas(std::vector<Pragma>& pragmas, std::vector<Diagnostic>& diags,
                   std::size_t& suppressed, DiagnosticSink& sink) {
  std::vector<Diagnostic> kept;
  for (Diagnostic& d : diags) {
    bool silenced = false;
    if (d.info().code.substr(0, 3) != "DT9") {
      for (Pragma& p : pragmas) {
        if (!p.whole_file && (d.begin.line < p.first_line || d.begin.line > p.last_line)) continue;
        for (Pragma::Target& t : p.targets) {
          if (t.rule->rule == d.rule) {
            t.used = true;
            silenced = true;
          }
        }
      }
    }
    if (silenced) {
      ++suppressed;
    } else {
      kept.push_back(std::move(d));
    }
  }
  diags = std::move(kept);
  for (const Pragma& p : pragmas) {
    for (const Pragma::Target& t : p.targets) {
      if (t.used) continue;
      sink.add(Rule::unused_ignore, t.span,
               "this ignore of " + std::string(t.rule->name) + " suppresses nothing" +
                   (p.whole_file ? " in this file" : " on the node below it") + "; remove it");
    }
  }
}

void flag_yaml11_booleans(const yaml::Node& n, DiagnosticSink& sink) {
  if (yaml::is_yaml11_boolean(n)) {
    sink.add(Rule::ambiguous_boolean, n.span,
             "plain \"" + n.value + "\" is the string \"" + n.value +
                 "\" in YAML 1.2 but a boolean to YAML 1.1 tools; quote it, or write true/false");
  }
  for (const yaml::Node& item : n.items)
    flag_yaml11_booleans(item, sink);
  for (const yaml::MapEntry& e : n.entries)
    flag_yaml11_booleans(e.value, sink);
}

// -- one file ----------------------------------------------------------------------------------

struct FileResult {
  LintedFile file;
  std::vector<Diagnostic> diagnostics;
  std::optional<yaml::Node> root;
  std::size_t suppressed = 0;
};

FileResult lint_source(std::shared_ptr<const SourceFile> source, bool had_bom,
                       const LintOptions& options) {
  FileResult out;
  out.file.path = source->path();
  out.file.source = source;
  DiagnosticSink sink(*source);
  if (had_bom) {
    sink.add(Rule::byte_order_mark, Span{0, 0},
             "the file starts with a UTF-8 byte-order mark; save it as UTF-8 without BOM");
  }
  if (auto bad = yaml::check_encoding(source->text())) {
    sink.add(Rule::invalid_encoding, Span{bad->offset, bad->offset + 1}, bad->message);
    out.diagnostics = std::move(sink.diagnostics());
    return out;
  }
  out.root = yaml::parse_yaml(*source, options.limits, sink);
  if (out.root) {
    flag_yaml11_booleans(*out.root, sink);
    out.file.graph = compile_template(*source, *out.root, sink);
  }
  // A wrong-type finding on the same value says it better than ambiguous-boolean.
  auto& diags = sink.diagnostics();
  std::set<std::size_t> typed;
  for (const Diagnostic& d : diags) {
    if (d.rule == Rule::wrong_type) typed.insert(d.span.begin);
  }
  std::erase_if(diags, [&](const Diagnostic& d) {
    return d.rule == Rule::ambiguous_boolean && typed.count(d.span.begin) > 0;
  });
  if (options.inline_ignores) {
    DiagnosticSink pragma_sink(*source);
    auto pragmas = parse_pragmas(*source, out.root ? &*out.root : nullptr, pragma_sink);
    apply_pragmas(pragmas, diags, out.suppressed, pragma_sink);
    for (auto& d : pragma_sink.diagnostics())
      diags.push_back(std::move(d));
  }
  out.diagnostics = std::move(diags);
  return out;
}

FileResult file_finding(const std::string& path, Rule rule, std::string message);

FileResult lint_bytes(const std::string& path, std::string text, const LintOptions& options) {
  if (text.size() > options.limits.max_file_bytes) {
    return file_finding(path, Rule::resource_limit,
                        "the template is " + std::to_string(text.size()) +
                            " bytes, over the limit of " +
                            std::to_string(options.limits.max_file_bytes) + " bytes");
  }
  bool bom = false;
  if (std::string_view(text).starts_with(kBom)) {
    text.erase(0, kBom.size());
    bom = true;
  }
  return lint_source(std::make_shared<const SourceFile>(path, std::move(text)), bom, options);
}

FileResult file_finding(const std::string& path, Rule rule, std::string message) {
  FileResult out;
  out.file.path = path;
  auto source = std::make_shared<const SourceFile>(path, std::string());
  DiagnosticSink sink(*source);
  sink.add(rule, Span{0, 0}, std::move(message));
  out.file.source = source;
  out.diagnostics = std::move(sink.diagnostics());
  return out;
}

FileResult lint_file(const std::string& path, const LintOptions& options) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec) {
    return file_finding(path, Rule::io_error,
                        ec == std::errc::too_many_symbolic_link_levels
                            ? "cannot read the file: symlink loop"
                            : "cannot read the file: " + ec.message());
  }
  if (!fs::is_regular_file(st)) {
    return file_finding(path, Rule::io_error, "not a regular file; templates are plain files");
  }
  const auto size = fs::file_size(path, ec);
  if (!ec && size > options.limits.max_file_bytes) {
    return file_finding(path, Rule::resource_limit,
                        "the file is " + std::to_string(size) + " bytes, over the limit of " +
                            std::to_string(options.limits.max_file_bytes) +
                            " bytes for a template");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return file_finding(path, Rule::io_error, "cannot open the file for reading");
  // Read to the end or one byte past the limit, with room for the size the file has now (not for
  // the limit, 4 MiB, which every template's text would otherwise keep as its capacity).
  const std::size_t limit = options.limits.max_file_bytes;
  std::string text;
  text.reserve(static_cast<std::size_t>(std::min<std::uintmax_t>(ec ? 0 : size, limit)) + 1);
  char buffer[64 << 10];
  while (text.size() <= limit && in.read(buffer, sizeof buffer).gcount() > 0)
    text.append(buffer, static_cast<std::size_t>(in.gcount()));
  if (text.size() > options.limits.max_file_bytes) {  // grew while we looked
    return file_finding(path, Rule::resource_limit, "the file is over the template size limit");
  }
  return lint_bytes(path, std::move(text), options);
}

FileResult lint_stdin(const LintOptions& options) {
  std::string text;
  char buf[65536];
  while (std::cin.read(buf, sizeof buf) || std::cin.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(std::cin.gcount()));
    if (text.size() > options.limits.max_file_bytes) {
      return file_finding("<stdin>", Rule::resource_limit,
                          "standard input is over the limit of " +
                              std::to_string(options.limits.max_file_bytes) + " bytes");
    }
  }
  return lint_bytes("<stdin>", std::move(text), options);
}

// -- finding files -----------------------------------------------------------------------------

bool is_template_name(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".yaml" || ext == ".yml";
}

bool hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return name.size() > 1 && name[0] == '.' && name != "..";
}

struct Walk {
  std::vector<std::string> files;
  std::vector<FileResult> problems;
};

// `visited` maps each folder already walked (by canonical path) to the path it was reached by.
void walk_dir(const fs::path& dir, std::map<fs::path, std::string>& visited, Walk& walk) {
  std::error_code ec;
  const fs::path canonical = fs::canonical(dir, ec);
  if (ec) {
    walk.problems.push_back(
        file_finding(dir.string(), Rule::io_error, "cannot read the folder: " + ec.message()));
    return;
  }
  const auto [seen, inserted] = visited.emplace(canonical, dir.string());
  if (!inserted) {
    auto r = file_finding(dir.string(), Rule::io_error,
                          "symlink loop: this folder is " + seen->second +
                              ", which is already being linted; it is skipped");
    r.diagnostics.front().severity = Severity::warning;
    walk.problems.push_back(std::move(r));
    return;
  }
  std::vector<fs::path> entries;
  fs::directory_iterator it(dir, ec), end;
  if (ec) {
    walk.problems.push_back(
        file_finding(dir.string(), Rule::io_error, "cannot read the folder: " + ec.message()));
    return;
  }
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    entries.push_back(it->path());
  }
  std::sort(entries.begin(), entries.end());
  for (const fs::path& p : entries) {
    if (hidden(p)) continue;
    std::error_code sec;
    const fs::file_status st = fs::status(p, sec);
    if (sec) {
      std::error_code lec;
      const bool link = fs::is_symlink(fs::symlink_status(p, lec));
      if (is_template_name(p) || link) {
        std::string why = "cannot read: " + sec.message();
        if (sec == std::errc::too_many_symbolic_link_levels) {
          why = "cannot read: symlink loop";
        } else if (link && sec == std::errc::no_such_file_or_directory) {
          why = "dangling symlink: its target does not exist";
        }
        walk.problems.push_back(file_finding(p.string(), Rule::io_error, why));
      }
      continue;
    }
    if (fs::is_directory(st)) {
      walk_dir(p, visited, walk);
    } else if (is_template_name(p)) {
      walk.files.push_back(p.string());
    }
  }
}

const yaml::Node* workflow_node(const std::optional<yaml::Node>& root) {
  return root && root->is_mapping() ? root->get("workflow") : nullptr;
}

// Two stages, of one template or two, whose match rules may both hold on one untagged call
// while neither is more specific (dsl/recognize.hpp): such a call is ambiguous. Reported at
// the later stage's `match`, naming where the other stage's rules are.
void ambiguous_matches(std::vector<FileResult>& results) {
  struct Claim {
    FileResult* file;
    const Stage* stage;
    std::string route;
    Span span;  // its `match` key
  };
  std::vector<Claim> claims;
  for (FileResult& r : results) {
    if (!r.file.graph || !r.file.source || !r.root || !r.root->is_mapping()) continue;
    if (r.file.graph->recognize.run == Recognize::Run::none) continue;
    const yaml::Node* stages = r.root->get("stages");
    for (const Stage& s : r.file.graph->stages) {
      if (s.match.empty() || !stages) continue;
      const yaml::Node* def = stages->get(s.name);
      const yaml::MapEntry* m = def && def->is_mapping() ? def->find("match") : nullptr;
      claims.push_back({&r, &s, s.route(), m ? m->key.span : Span{0, 0}});
    }
  }
  auto name = [](const Claim& c) {
    return "\"" + c.file->file.graph->workflow + "." + c.stage->name + "\"";
  };
  auto where = [](const Claim& c) {
    const Position p = c.file->file.source->position(c.span.begin);
    return c.file->file.path + ":" + std::to_string(p.line) + ":" + std::to_string(p.column);
  };
  for (std::size_t j = 0; j < claims.size(); ++j) {
    for (std::size_t i = 0; i < j; ++i) {
      const Claim& other = claims[i];
      const Claim& self = claims[j];
      if (self.route != other.route) continue;
      const auto& a = other.stage->match;
      const auto& b = self.stage->match;
      const bool a_wider = rules_cover(a, b), b_wider = rules_cover(b, a);
      // One more specific than the other (it wins), or provably never both: not ambiguous.
      if (a_wider != b_wider || rules_exclude(a, b)) continue;
      std::string message =
          a_wider ? "stages " + name(self) + " and " + name(other) + " (" + where(other) +
                        ") have the same match rules on " + self.route +
                        ": no call tells them apart, so neither is ever recognized"
                  : "stage " + name(self) + "'s match rules and stage " + name(other) + "'s (" +
                        where(other) + ") can both hold on one call on " + self.route +
                        ", and neither includes the other's: such a call is ambiguous and "
                        "passes through unrecognized";
      message +=
          "; give one of them a literal rule the other's calls fail, or give one every rule of "
          "the other (the more specific stage wins)";
      DiagnosticSink sink(*self.file->file.source);
      sink.add(Rule::ambiguous_match, self.span, std::move(message),
               "/stages/" + schema::pointer_token(self.stage->name) + "/match");
      for (auto& d : sink.diagnostics())
        self.file->diagnostics.push_back(std::move(d));
    }
  }
}

LintReport finish(std::vector<FileResult> results) {
  LintReport report;
  // Two templates naming the same workflow cannot both serve it.
  std::map<std::string, std::string> owners;
  for (FileResult& r : results) {
    if (!r.file.graph || r.file.graph->workflow.empty() || !r.file.source) continue;
    const auto [it, inserted] = owners.emplace(r.file.graph->workflow, r.file.path);
    if (inserted) continue;
    DiagnosticSink sink(*r.file.source);
    const yaml::Node* w = workflow_node(r.root);
    sink.add(Rule::duplicate_workflow, w ? w->span : Span{0, 0},
             "workflow \"" + r.file.graph->workflow + "\" is already defined in " + it->second,
             "/workflow");
    for (auto& d : sink.diagnostics())
      r.diagnostics.push_back(std::move(d));
  }
  ambiguous_matches(results);
  for (FileResult& r : results) {
    const bool errors =
        std::any_of(r.diagnostics.begin(), r.diagnostics.end(),
                    [](const Diagnostic& d) { return d.severity == Severity::error; });
    r.file.usable = r.file.graph.has_value() && !errors;
    report.suppressed += r.suppressed;
    for (auto& d : r.diagnostics)
      report.diagnostics.push_back(std::move(d));
    report.files.push_back(std::move(r.file));
  }
  sort_diagnostics(report.diagnostics);
  return report;
}

}  // namespace

LintReport lint_text(const std::string& path, std::string text, const LintOptions& options) {
  std::vector<FileResult> results;
  results.push_back(lint_bytes(path, std::move(text), options));
  return finish(std::move(results));
}

LintReport lint_paths(const std::vector<std::string>& paths, const LintOptions& options) {
  std::vector<FileResult> results;
  std::vector<std::string> usage_errors;
  std::set<std::string> seen_files;
  for (const std::string& path : paths) {
    if (path == "-") {
      results.push_back(lint_stdin(options));
      continue;
    }
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (ec && ec != std::errc::too_many_symbolic_link_levels) {
      usage_errors.push_back(path + ": " +
                             (ec == std::errc::no_such_file_or_directory
                                  ? std::string("no such file or folder")
                                  : ec.message()));
      continue;
    }
    if (!ec && fs::is_directory(st)) {
      Walk walk;
      std::map<fs::path, std::string> visited;
      walk_dir(path, visited, walk);
      for (auto& p : walk.problems)
        results.push_back(std::move(p));
      for (const std::string& f : walk.files) {
        if (seen_files.insert(fs::weakly_canonical(f, ec).string()).second) {
          results.push_back(lint_file(f, options));
        }
      }
    } else if (seen_files.insert(fs::weakly_canonical(path, ec).string()).second) {
      results.push_back(lint_file(path, options));
    }
  }
  LintReport report = finish(std::move(results));
  report.usage_errors = std::move(usage_errors);
  return report;
}

}  // namespace dynrt::dsl

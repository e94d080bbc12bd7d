// `dynrt template draft`: a template proposed from recorded traffic (dsl/draft.hpp).
#include "cli/commands.hpp"
#include "dsl/draft.hpp"
#include "dsl/lint.hpp"
#include "dsl/report.hpp"
#include "engines/read_file.hpp"
#include "engines/tools/corpus.hpp"
#include "runtime/json_text.hpp"

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace dynrt::cli {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct DraftArgs {
  std::vector<std::string> recordings;
  std::string out;
  std::string corpus;
  std::string config;
  std::size_t max_candidates = 3;
};

constexpr std::size_t kMaxLineBytes = 64u << 20;

// The next line of `in` into `line`, without its newline; false at the end. A line longer than
// kMaxLineBytes sets `over` and stops there, so a file that never ends a line (/dev/zero) costs
// neither unbounded memory nor an endless read.
bool read_line(std::istream& in, std::string& line, bool& over) {
  line.clear();
  over = false;
  std::streambuf* buf = in.rdbuf();
  bool any = false;
  for (int c = buf->sbumpc(); c != std::char_traits<char>::eof(); c = buf->sbumpc()) {
    any = true;
    if (c == '\n') return true;
    if (line.size() == kMaxLineBytes) {
      over = true;
      return true;
    }
    line.push_back(static_cast<char>(c));
  }
  return any;
}

// Tools `dynrt serve` runs read-only: the corpus tools (their record key templates), and the
// config's HTTP tools that list `reads` and no `writes`.
bool read_tools(const DraftArgs& a, dsl::DraftOptions& o) {
  if (!a.corpus.empty()) {
    const auto text = engines::read_bounded(a.corpus, engines::kMaxCorpusBytes, "corpus");
    if (!text) {
      std::cerr << "dynrt template draft: --corpus: " << text.error().message << "\n";
      return false;
    }
    const json corpus = parse_json(*text);
    if (corpus.is_discarded() || !corpus.is_object()) {
      std::cerr << "dynrt template draft: --corpus " << a.corpus
                << ": not a readable JSON corpus\n";
      return false;
    }
    if (corpus.contains("tools") && corpus["tools"].is_object())
      for (const auto& [name, key] : corpus["tools"].items())
        if (key.is_string()) o.read_only_tools[name].reads = {key.get<std::string>()};
  }
  if (!a.config.empty()) {
    const auto text = engines::read_bounded(a.config, kMaxConfigBytes, "--config file");
    if (!text) {
      std::cerr << "dynrt template draft: " << text.error().message << "\n";
      return false;
    }
    try {
      const YAML::Node root = YAML::Load(*text);
      if (const YAML::Node tools = root["tools"]; tools && tools.IsMap())
        for (const auto& t : tools) {
          const std::string name = t.first.as<std::string>();
          if (name == "allow_hosts" || !t.second.IsMap() || t.second["writes"]) continue;
          dsl::DraftTool tool;
          if (const YAML::Node reads = t.second["reads"]; reads && reads.IsSequence())
            for (const auto& k : reads)
              tool.reads.push_back(k.as<std::string>());
          if (!tool.reads.empty()) o.read_only_tools[name] = tool;
        }
    } catch (const std::exception& e) {
      std::cerr << "dynrt template draft: --config " << a.config << ": " << e.what() << "\n";
      return false;
    }
  }
  return true;
}

int run_draft(const DraftArgs& a) {
  dsl::DraftOptions options;
  options.max_candidates = a.max_candidates;
  if (!read_tools(a, options)) return kExitUsage;
  std::vector<json> records;
  std::size_t skipped = 0;
  for (const std::string& path : a.recordings) {
    std::ifstream in(path);
    if (!in) {
      std::cerr << "dynrt template draft: cannot read " << path << "\n";
      return kExitUsage;
    }
    std::string line;
    std::size_t n = 0;
    bool over = false;
    while (read_line(in, line, over)) {
      ++n;
      if (over) {
        std::cerr << "dynrt template draft: " << path << ":" << n << ": a line over "
                  << kMaxLineBytes << " bytes; is it a recording from dynrt serve --record?\n";
        return kExitUsage;
      }
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      json r = parse_json(line);
      if (r.is_discarded() || !r.is_object() || !r.contains("workflow") || !r.contains("request")) {
        if (skipped++ < 5)
          std::cerr << path << ":" << n << ": not a recorded call (a JSON line of dynrt serve "
                    << "--record); skipped\n";
        continue;
      }
      records.push_back(std::move(r));
    }
  }
  if (skipped > 5) std::cerr << "dynrt template draft: " << skipped << " lines skipped in all\n";
  const auto drafts = dsl::draft_templates(records, options);
  if (drafts.empty()) {
    std::cerr << "dynrt template draft: the recording holds no tagged call that was answered "
                 "(200); record with `dynrt serve --record FILE` and tag each call\n";
    return kExitFindings;
  }
  if (a.out.empty() && drafts.size() > 1) {
    std::cerr << "dynrt template draft: the recording holds " << drafts.size()
              << " workflows; write them to a folder with --out DIR\n";
    return kExitUsage;
  }
  if (!a.out.empty()) {
    std::error_code ec;
    fs::create_directories(a.out, ec);
    if (ec) {
      std::cerr << "dynrt template draft: cannot create " << a.out << ": " << ec.message() << "\n";
      return kExitUsage;
    }
  }
  int status = kExitOk;
  for (const dsl::Draft& d : drafts) {
    const std::string path =
        a.out.empty() ? "-" : (fs::path(a.out) / (d.workflow + ".yaml")).string();
    const dsl::LintReport report =
        dsl::lint_text(path == "-" ? d.workflow + ".yaml" : path, d.yaml);
    if (path == "-") {
      std::cout << d.yaml;
    } else {
      std::ofstream(path) << d.yaml;
      std::cerr << "wrote " << path << ": " << d.runs << " runs, " << d.calls << " calls\n";
    }
    // The draft's own findings: its to-dos, positioned, and anything else lint says.
    std::cerr << dsl::format_text(report);
    if (report.count(dsl::Severity::error) > 0) status = kExitFindings;
  }
  return status;
}

}  // namespace

void add_template_commands(CLI::App& app, std::function<int()>& run) {
  CLI::App* tmpl = app.add_subcommand("template", "Work with workflow templates");
  tmpl->require_subcommand(1);
  auto a = std::make_shared<DraftArgs>();
  CLI::App* draft = tmpl->add_subcommand(
      "draft", "Propose a template from traffic recorded by `dynrt serve --record FILE`");
  draft->footer(
      "For each workflow in the recording, the draft lists its stages in the order runs call\n"
      "them (a stage that repeats within a run makes a loop), the model and parameters sent,\n"
      "and each request with the values that vary across runs replaced by variables bound\n"
      "from where they came from: the first request that carried them (an input), an earlier\n"
      "answer (an output), a value a model named (a decision, with the values seen), an\n"
      "item a person picked from an offered list, or one of a few values a later request\n"
      "names again and again (a user decision). What it could not infer\n"
      "is marked `# dynrt-todo:`, which `dynrt lint` reports with its position.\n"
      "A tool stage is speculable only when --corpus or --config says the tool is read-only.\n"
      "Without --out the one drafted template goes to standard output; findings go to\n"
      "standard error. Exit status: 0 drafted (to-dos are warnings), 1 nothing to draft or a\n"
      "draft that does not lint, 2 usage.");
  draft->add_option("RECORDING", a->recordings, "JSON lines from dynrt serve --record")
      ->required()
      ->check(CLI::ExistingFile);
  draft->add_option("--out", a->out, "Folder to write WORKFLOW.yaml drafts into");
  draft->add_option("--corpus", a->corpus,
                    "The corpus file dynrt serve ran with: its tools are read-only lookups");
  draft->add_option("--config", a->config,
                    "The serve config: its HTTP tools with `reads` and no `writes` are read-only");
  draft->add_option("--max-candidates", a->max_candidates, "Each decision's `max`")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  draft->callback([a, &run] { run = [a] { return run_draft(*a); }; });
}

}  // namespace dynrt::cli

// Internal to dsl/: the template compiler behind compile_template() (dsl/compile.hpp). One
// Compiler reads one parsed template: its passes (run() lists them in order) decode the
// YAML into the TemplateGraph it builds and report what is wrong to the sink, each pass
// using what the ones before it decoded. The passes live in the files named below, one job
// to a file. Pure and single-threaded; a Compiler is used once.
#pragma once

#include "dsl/diagnostic.hpp"
#include "dsl/mustache.hpp"
#include "dsl/source.hpp"
#include "dsl/template_graph.hpp"
#include "dsl/yaml.hpp"

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dynrt::dsl::detail {

using yaml::Kind;
using yaml::MapEntry;
using yaml::Node;
using yaml::ScalarType;

constexpr int kMaxCount = 1'000'000;  // counts the schema leaves open (loop max, candidates)
constexpr double kMaxTtl = 7 * 24 * 3600.0;

// "name" in double quotes, as findings name things.
std::string qt(std::string_view s);
// "a", "b" and "c"
std::string join_names(const std::vector<std::string>& names);

class Compiler {
 public:
  Compiler(const SourceFile& file, const Node& root, DiagnosticSink& sink)
      : file_(file), root_(root), sink_(sink) {}

  std::optional<TemplateGraph> run();

 private:
  enum class VarKind { input, decision, output, loop };
  struct Var {
    VarKind kind = VarKind::input;
    Span span;                 // its definition
    StageId producer = kNoId;  // output: its stage; decision: its decider
    LoopId loop = kNoId;
    bool used = false;
    bool bound = false;
  };
  struct Use {
    std::string var;
    Span span;
    StageId stage = kNoId;
  };
  struct StageSrc {
    const MapEntry* entry = nullptr;  // name -> definition
    const Node* def() const { return &entry->value; }
  };

  // Where a caller-derived variable's value comes from: the stage that binds it from its
  // incoming request (`via` empty), or the stage whose request carried `via` into the output
  // or decision it produces.
  struct CallerOrigin {
    StageId stage = kNoId;
    std::string via;
  };

  // compile.cpp: the passes in order, and the findings and names they share
  static std::string_view kind_name(VarKind k);
  Diagnostic& add(Rule rule, Span span, std::string msg, std::string path = {});
  std::vector<std::string> var_names() const;
  std::vector<std::string> stage_names() const;
  void unknown(Span span, std::string message, const std::string& name,
               const std::vector<std::string>& known, const std::string& path);
  Span locate(const Node& scalar, std::size_t value_offset, std::size_t length) const;
  std::string stage_path(StageId id) const;

  // compile_stages.cpp: decoding the header, the declarations, the stages and the loops
  void header();
  SpeculationLimits read_limits(const Node* n, SpeculationLimits base);
  void declare_stages();
  void define(const std::string& name, Var var, const std::string& path);
  void declare_variables();
  Extractor extractor(const Node& n, std::string default_pointer, const std::string& path);
  std::string default_output_pointer(const Stage& s) const;
  void decode_stage(StageId id);
  void check_request(StageId id, const Node& request, const std::string& path);
  void check_bind_target(StageId id, const MapEntry& e, const std::string& path);
  void decode_loops();

  // compile_recognition.cpp: recognition without tags: `recognize:` and stages' `match:`
  void decode_recognition();

  // compile_decisions.cpp: decoding the decision points: deciders, candidates, selection
  void decode_decisions();
  void decode_decision(Decision& dec, const Node& def, const std::string& path);
  void decode_candidates(Decision& dec, const Node& c, const std::string& path);
  void check_selection(const Decision& dec, const Node& def, const std::string& path);

  // compile_references.cpp: the variables the templates reference, and those nobody uses
  void use(StageId stage, const std::string& name, Span span, const std::string& path,
           bool in_section);
  void scan_string(StageId stage, const Node& scalar, const std::string& path);
  void scan_tree(StageId stage, const Node& n, const std::string& path);
  void scan_templates();
  void check_unused();

  // compile_graph.cpp: the stage graph: edges, cycles, order, reachability, dependencies
  std::size_t loop_position(const Stage& s) const;
  void classify_edges();
  void build_graph();
  void entry_and_reachability();
  void ancestors();
  void check_dependencies();
  void compute_downstream();

  // compile_speculation.cpp: speculation safety
  void check_speculation();

  // compile_isolation.cpp: isolation between tenants: record keys and shared stages
  static bool scoped_key(const MustacheScan& scan);
  void check_record_keys();
  std::map<std::string, CallerOrigin> caller_derived() const;
  std::string caller_chain(const std::map<std::string, CallerOrigin>& origins,
                           const std::string& var) const;
  void check_sharing();

  // compile_fingerprint.cpp: identities: stage fingerprints, coordinates, the template's
  void fingerprints();

  const SourceFile& file_;
  const Node& root_;
  DiagnosticSink& sink_;
  TemplateGraph g_;
  std::vector<StageSrc> src_;
  std::map<std::string, StageId> stage_ids_;
  std::map<std::string, Var> vars_;
  std::vector<Use> uses_;
  std::map<std::pair<StageId, StageId>, Span> after_src_;
  std::vector<std::vector<bool>> ancestors_;
};

}  // namespace dynrt::dsl::detail

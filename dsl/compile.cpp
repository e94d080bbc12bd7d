#include "dsl/compile.hpp"

#include "dsl/mustache.hpp"
#include "dsl/render.hpp"
#include "dsl/schema.hpp"
#include "dsl/suggest.hpp"
#include "runtime/canonical_json.hpp"

#include <re2/re2.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <queue>
#include <set>

namespace dynrt::dsl {

using nlohmann::json;
using yaml::Kind;
using yaml::MapEntry;
using yaml::Node;
using yaml::ScalarType;

json to_json(const Node& node) {
  switch (node.kind) {
    case Kind::null:
      return nullptr;
    case Kind::sequence: {
      json out = json::array();
      for (const Node& item : node.items)
        out.push_back(to_json(item));
      return out;
    }
    case Kind::mapping: {
      json out = json::object();
      for (const MapEntry& e : node.entries)
        out[e.key.value] = to_json(e.value);
      return out;
    }
    case Kind::scalar:
      break;
  }
  const std::string& v = node.value;
  switch (yaml::resolve(node)) {
    case ScalarType::null:
      return nullptr;
    case ScalarType::boolean:
      return v == "true" || v == "True" || v == "TRUE";
    case ScalarType::integer:
      try {
        if (v.starts_with("0x")) return std::stoll(v.substr(2), nullptr, 16);
        if (v.starts_with("0o")) return std::stoll(v.substr(2), nullptr, 8);
        return std::stoll(v);
      } catch (const std::exception&) {
        return std::strtod(v.c_str(), nullptr);  // beyond int64: keep the magnitude
      }
    case ScalarType::floating: {
      std::string s = v;
      if (s.find("inf") != std::string::npos || s.find("Inf") != std::string::npos ||
          s.find("INF") != std::string::npos || s.find("nan") != std::string::npos ||
          s.find("NaN") != std::string::npos || s.find("NAN") != std::string::npos) {
        return nullptr;  // JSON has no infinities or NaN
      }
      return std::strtod(s.c_str(), nullptr);
    }
    case ScalarType::string:
      break;
  }
  return v;
}

namespace {

constexpr int kMaxCount = 1'000'000;  // counts the schema leaves open (loop max, candidates)
constexpr double kMaxTtl = 7 * 24 * 3600.0;
constexpr std::string_view kChatContent = "/choices/0/message/content";
constexpr std::string_view kCompletionText = "/choices/0/text";

const MapEntry* entry_of(const Node* obj, std::string_view key) {
  return obj && obj->is_mapping() ? obj->find(key) : nullptr;
}

bool is_string(const Node* n) {
  return n && n->is_scalar() && yaml::resolve(*n) != ScalarType::null &&
         yaml::resolve(*n) != ScalarType::boolean;
}

std::optional<std::string> string_of(const Node* n) {
  if (!is_string(n)) return std::nullopt;
  return n->value;
}

std::optional<double> number_of(const Node* n) {
  if (!n) return std::nullopt;
  const auto v = yaml::number_value(*n);
  return v && std::isfinite(*v) ? v : std::nullopt;
}

// An integer setting within [lo, hi]; out-of-range values were reported by the schema and
// must not reach a narrowing conversion (3e31 does not fit an int).
std::optional<int> int_of(const Node* n, int lo, int hi) {
  const auto v = number_of(n);
  if (!v || std::trunc(*v) != *v || *v < lo || *v > hi) return std::nullopt;
  return static_cast<int>(*v);
}

std::optional<bool> bool_of(const Node* n) {
  if (!n || !n->is_scalar() || yaml::resolve(*n) != ScalarType::boolean) return std::nullopt;
  return to_json(*n).get<bool>();
}

std::vector<const Node*> string_list(const Node* n) {
  std::vector<const Node*> out;
  if (!n) return out;
  if (n->is_scalar()) {
    if (is_string(n)) out.push_back(n);
    return out;
  }
  if (n->is_sequence()) {
    for (const Node& item : n->items) {
      if (is_string(&item)) out.push_back(&item);
    }
  }
  return out;
}

std::string qt(std::string_view s) {
  return "\"" + std::string(s) + "\"";
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " and " : ", ";
    out += qt(names[i]);
  }
  return out;
}

// The text of the first capturing group of an RE2 pattern (with any leading flag group), so
// that candidates can be tested against what the group can capture. nullopt if unsure.
std::optional<std::string> first_group_pattern(const std::string& re) {
  std::string flags;
  std::size_t i = 0;
  if (re.starts_with("(?") && re.size() > 2 && re[2] != ':' && re[2] != 'P' && re[2] != '<') {
    const auto close = re.find(')');
    if (close != std::string::npos) {
      flags = re.substr(0, close + 1);
      i = close + 1;
    }
  }
  bool in_class = false;
  for (; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\') {
      ++i;
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
      continue;
    }
    if (c == '[') {
      in_class = true;
      continue;
    }
    if (c != '(') continue;
    std::size_t body = i + 1;
    if (re.compare(body, 1, "?") == 0) {
      if (re.compare(body, 3, "?P<") == 0 || re.compare(body, 2, "?<") == 0) {
        body = re.find('>', body);
        if (body == std::string::npos) return std::nullopt;
        ++body;
      } else {
        continue;  // non-capturing or flags
      }
    }
    int depth = 1;
    bool cls = false;
    for (std::size_t j = body; j < re.size(); ++j) {
      const char d = re[j];
      if (d == '\\') {
        ++j;
        continue;
      }
      if (cls) {
        if (d == ']') cls = false;
        continue;
      }
      if (d == '[') cls = true;
      if (d == '(') ++depth;
      if (d == ')' && --depth == 0) return flags + "(?:" + re.substr(body, j - body) + ")";
    }
    return std::nullopt;
  }
  return flags + "(?:" + re.substr(flags.size()) + ")";  // no group: the whole match
}

class Compiler {
 public:
  Compiler(const SourceFile& file, const Node& root, DiagnosticSink& sink)
      : file_(file), root_(root), sink_(sink) {}

  std::optional<TemplateGraph> run() {
    schema::validate(root_, schema::template_schema(), sink_);
    if (!root_.is_mapping()) return std::nullopt;
    g_.source_path = file_.path();
    header();
    declare_stages();
    declare_variables();
    for (StageId id = 0; id < g_.stages.size(); ++id)
      decode_stage(id);
    decode_loops();
    classify_edges();
    decode_decisions();
    scan_templates();
    build_graph();
    check_dependencies();
    compute_downstream();
    check_speculation();
    check_record_keys();
    check_sharing();
    check_unused();
    fingerprints();
    return std::move(g_);
  }

 private:
  // -- variables ---------------------------------------------------------------------------

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

  static std::string_view kind_name(VarKind k) {
    switch (k) {
      case VarKind::input:
        return "an input";
      case VarKind::decision:
        return "a decision point";
      case VarKind::output:
        return "an output";
      case VarKind::loop:
        return "a loop index";
    }
    return "a variable";
  }

  Diagnostic& add(Rule rule, Span span, std::string msg, std::string path = {}) {
    return sink_.add(rule, span, std::move(msg), std::move(path));
  }

  std::vector<std::string> var_names() const {
    std::vector<std::string> out;
    for (const auto& [name, v] : vars_)
      out.push_back(name);
    return out;
  }
  std::vector<std::string> stage_names() const {
    std::vector<std::string> out;
    for (const Stage& s : g_.stages)
      out.push_back(s.name);
    return out;
  }

  // An unknown-ref finding; `message` names the reference, a suggestion is added if close.
  void unknown(Span span, std::string message, const std::string& name,
               const std::vector<std::string>& known, const std::string& path) {
    auto& d = add(Rule::unknown_ref, span, std::move(message), path);
    if (auto s = closest(name, known)) {
      d.message += "; did you mean " + qt(*s) + "?";
      d.suggestion = *s;
    }
  }

  // The span of `needle` inside a scalar, found in the source text (falls back to the scalar).
  Span locate(const Node& scalar, std::size_t value_offset, std::size_t length) const {
    const std::string& v = scalar.value;
    const std::string needle = v.substr(value_offset, length);
    if (needle.empty()) return scalar.span;
    int nth = 0;
    for (std::size_t p = v.find(needle); p != std::string::npos && p < value_offset;
         p = v.find(needle, p + needle.size())) {
      ++nth;
    }
    const std::string& text = file_.text();
    const std::size_t limit = scalar.span.end > scalar.span.begin ? scalar.span.end : text.size();
    std::size_t p = text.find(needle, scalar.span.begin);
    for (int k = 0; p != std::string::npos && k < nth; ++k) {
      p = text.find(needle, p + needle.size());
    }
    if (p == std::string::npos || p + needle.size() > limit) return scalar.span;
    return Span{p, p + needle.size()};
  }

  // -- header -------------------------------------------------------------------------------

  void header() {
    if (const MapEntry* e = root_.find("version")) {
      const auto v = number_of(&e->value);
      if (v && *v != 1 && *v >= 1) {
        add(Rule::unsupported_version, e->value.span,
            "template language version " + e->value.value +
                " is not supported; this dynrt reads version 1",
            "/version");
      }
    }
    if (auto w = string_of(root_.get("workflow"))) g_.workflow = *w;
    if (auto d = string_of(root_.get("description"))) g_.description = *d;
    g_.limits = read_limits(root_.get("limits"), SpeculationLimits{});
  }

  SpeculationLimits read_limits(const Node* n, SpeculationLimits base) {
    if (!n || !n->is_mapping()) return base;
    if (auto v = int_of(n->get("max_fills"), 0, 64)) base.max_fills = *v;
    if (auto v = int_of(n->get("wait_ms"), 0, 600'000)) base.wait_ms = *v;
    if (auto v = number_of(n->get("ttl_s")); v && *v > 0 && *v <= kMaxTtl) base.ttl_s = *v;
    if (auto v = int_of(n->get("max_chain"), 1, 16)) base.max_chain = *v;
    return base;
  }

  // -- declarations -------------------------------------------------------------------------

  void declare_stages() {
    const Node* stages = root_.get("stages");
    if (!stages || !stages->is_mapping()) return;
    for (const MapEntry& e : stages->entries) {
      if (!e.key.is_scalar()) continue;
      Stage s;
      s.id = static_cast<StageId>(g_.stages.size());
      s.name = e.key.value;
      stage_ids_.emplace(s.name, s.id);
      g_.stages.push_back(std::move(s));
      src_.push_back(StageSrc{&e});
    }
  }

  void define(const std::string& name, Var var, const std::string& path) {
    const auto [it, inserted] = vars_.emplace(name, var);
    if (inserted) return;
    const Position first = file_.position(it->second.span.begin);
    add(Rule::duplicate_name, var.span,
        qt(name) + " is already defined as " + std::string(kind_name(it->second.kind)) +
            " at line " + std::to_string(first.line) + "; " + std::string(kind_name(var.kind)) +
            " needs a name of its own",
        path);
  }

  void declare_variables() {
    if (const Node* inputs = root_.get("inputs"); inputs && inputs->is_mapping()) {
      for (const MapEntry& e : inputs->entries) {
        Input in;
        in.name = e.key.value;
        if (auto d = string_of(e.value.is_mapping() ? e.value.get("description") : nullptr)) {
          in.description = *d;
        }
        g_.inputs.push_back(in);
        define(in.name, Var{VarKind::input, e.key.span},
               "/inputs/" + schema::pointer_token(in.name));
      }
    }
    if (const Node* decisions = root_.get("decisions"); decisions && decisions->is_mapping()) {
      for (const MapEntry& e : decisions->entries) {
        define(e.key.value, Var{VarKind::decision, e.key.span},
               "/decisions/" + schema::pointer_token(e.key.value));
      }
    }
    if (const Node* loops = root_.get("loops"); loops && loops->is_mapping()) {
      for (const MapEntry& e : loops->entries) {
        Var v{VarKind::loop, e.key.span};
        v.loop = static_cast<LoopId>(g_.loops.size());
        Loop l;
        l.id = v.loop;
        l.name = e.key.value;
        g_.loops.push_back(l);
        define(e.key.value, v, "/loops/" + schema::pointer_token(e.key.value));
      }
    }
    for (StageId id = 0; id < g_.stages.size(); ++id) {
      const Node* outputs = src_[id].def()->is_mapping() ? src_[id].def()->get("outputs") : nullptr;
      if (!outputs || !outputs->is_mapping()) continue;
      for (const MapEntry& e : outputs->entries) {
        Var v{VarKind::output, e.key.span};
        v.producer = id;
        define(e.key.value, v, stage_path(id) + "/outputs/" + schema::pointer_token(e.key.value));
      }
    }
  }

  std::string stage_path(StageId id) const {
    return "/stages/" + schema::pointer_token(g_.stages[id].name);
  }

  // -- stages -------------------------------------------------------------------------------

  Extractor extractor(const Node& n, std::string default_pointer, const std::string& path) {
    Extractor ex;
    ex.pointer = std::move(default_pointer);
    const Node* pointer = n.is_scalar() ? &n : n.get("pointer");
    const Node* json_ptr = n.is_mapping() ? n.get("json") : nullptr;
    const Node* regex = n.is_mapping() ? n.get("regex") : nullptr;
    if (auto p = string_of(pointer)) {
      if (!valid_pointer(*p)) {
        add(Rule::invalid_value, pointer->span,
            qt(*p) +
                " is not a JSON pointer; write \"\" for the whole document or "
                "\"/key/0\" (RFC 6901)",
            path);
      }
      ex.pointer = *p;
    }
    if (auto p = string_of(json_ptr)) {
      if (!valid_pointer(*p)) {
        add(Rule::invalid_value, json_ptr->span, qt(*p) + " is not a JSON pointer (RFC 6901)",
            path + "/json");
      }
      ex.json_pointer = *p;
    }
    if (auto r = string_of(regex)) {
      ex.regex_source = *r;
      auto re = std::make_shared<re2::RE2>(*r, re2::RE2::Quiet);
      if (!re->ok()) {
        add(Rule::invalid_value, regex->span, "invalid regular expression: " + re->error(),
            path + "/regex");
      } else {
        ex.regex = std::move(re);
      }
    }
    return ex;
  }

  std::string default_output_pointer(const Stage& s) const {
    if (s.kind == StageKind::tool) return "";
    return std::string(s.api == ModelApi::chat ? kChatContent : kCompletionText);
  }

  void decode_stage(StageId id) {
    Stage& s = g_.stages[id];
    const Node* def = src_[id].def();
    const std::string path = stage_path(id);
    if (!def->is_mapping()) return;
    if (auto k = string_of(def->get("kind"))) {
      if (*k == "tool") s.kind = StageKind::tool;
      if (*k == "user") s.kind = StageKind::user;
    }
    if (auto d = string_of(def->get("description"))) s.description = *d;
    if (auto a = string_of(def->get("api")); a && *a == "completions")
      s.api = ModelApi::completions;
    if (auto m = string_of(def->get("model"))) s.model = *m;
    if (auto t = string_of(def->get("tool"))) s.tool = *t;
    if (auto b = bool_of(def->get("speculable"))) s.speculable = *b;
    if (auto sh = string_of(def->get("share")); sh && *sh == "global" && s.kind != StageKind::user)
      s.share = Share::global;
    if (auto t = number_of(def->get("ttl_s")); t && *t > 0 && *t <= kMaxTtl) s.ttl_s = *t;
    if (const Node* p = def->get("params"); p && p->is_mapping()) s.params = to_json(*p);
    if (const Node* r = def->get("request")) {
      s.request = to_json(*r);
      if (s.kind == StageKind::model) check_request(id, *r, path + "/request");
    } else if (s.kind == StageKind::model && s.speculable) {
      add(Rule::missing_key, src_[id].entry->key.span,
          "speculable stage " + qt(s.name) +
              " needs a `request`: a fill renders it to run the stage before the harness asks",
          path);
    }
    if (const Node* a = def->get("arguments")) s.arguments = to_json(*a);
    for (const Node* r : string_list(def->get("reads")))
      s.reads.push_back(r->value);
    for (const Node* w : string_list(def->get("writes")))
      s.writes.push_back(w->value);
    for (const Node* a : string_list(def->get("after"))) {
      const auto it = stage_ids_.find(a->value);
      if (it == stage_ids_.end()) {
        unknown(a->span,
                "stage " + qt(s.name) + " runs after " + qt(a->value) + ", which is not a stage",
                a->value, stage_names(), path + "/after");
        continue;
      }
      after_src_[{id, it->second}] = a->span;
      s.after.push_back(it->second);
    }
    if (const Node* b = def->get("bind"); b && b->is_mapping()) {
      for (const MapEntry& e : b->entries) {
        s.bind.emplace_back(e.key.value, extractor(e.value, "", path + "/bind/" + e.key.value));
        check_bind_target(id, e, path + "/bind/" + schema::pointer_token(e.key.value));
      }
    }
    if (const Node* o = def->get("outputs"); o && o->is_mapping()) {
      for (const MapEntry& e : o->entries) {
        s.outputs.emplace_back(e.key.value, extractor(e.value, default_output_pointer(s),
                                                      path + "/outputs/" + e.key.value));
      }
    }
  }

  void check_request(StageId id, const Node& request, const std::string& path) {
    const Stage& s = g_.stages[id];
    if (!request.is_mapping()) {
      add(Rule::wrong_type, request.span,
          "expected a mapping (the request body), found " + std::string(yaml::describe(request)),
          path);
      return;
    }
    const char* needed = s.api == ModelApi::chat ? "messages" : "prompt";
    if (!request.find(needed)) {
      add(Rule::missing_key, Span{request.span.begin, request.span.begin},
          std::string("a ") + (s.api == ModelApi::chat ? "chat" : "completions") +
              " request needs " + qt(needed),
          path);
    }
    for (const MapEntry& e : request.entries) {
      if (e.key.value == "model") {
        add(Rule::invalid_value, e.key.span,
            "set the model with the stage's `model:` key, not inside the request", path + "/model");
      } else if (s.params.contains(e.key.value)) {
        add(Rule::invalid_value, e.key.span,
            qt(e.key.value) + " is set both in `params` and in the request; keep one",
            path + "/" + schema::pointer_token(e.key.value));
      }
    }
  }

  void check_bind_target(StageId id, const MapEntry& e, const std::string& path) {
    const auto it = vars_.find(e.key.value);
    if (it == vars_.end()) {
      unknown(e.key.span,
              "stage " + qt(g_.stages[id].name) + " binds " + qt(e.key.value) +
                  ", which is not a declared input or decision point",
              e.key.value, var_names(), path);
      return;
    }
    if (it->second.kind == VarKind::input || it->second.kind == VarKind::decision) {
      it->second.bound = true;
      return;
    }
    add(Rule::invalid_value, e.key.span,
        qt(e.key.value) + " is " + std::string(kind_name(it->second.kind)) +
            "; `bind` defines inputs and decision selections from the request",
        path);
  }

  // -- loops --------------------------------------------------------------------------------

  void decode_loops() {
    const Node* loops = root_.get("loops");
    if (!loops || !loops->is_mapping()) return;
    for (LoopId lid = 0; lid < g_.loops.size(); ++lid) {
      const MapEntry& e = loops->entries[lid];
      Loop& l = g_.loops[lid];
      const std::string path = "/loops/" + schema::pointer_token(l.name);
      if (!e.value.is_mapping()) continue;
      if (auto m = int_of(e.value.get("max"), 1, kMaxCount)) l.max = *m;
      for (const Node* n : string_list(e.value.get("stages"))) {
        const auto it = stage_ids_.find(n->value);
        if (it == stage_ids_.end()) {
          unknown(n->span,
                  "loop " + qt(l.name) + " lists " + qt(n->value) + ", which is not a stage",
                  n->value, stage_names(), path + "/stages");
          continue;
        }
        Stage& s = g_.stages[it->second];
        if (s.loop != kNoId && s.loop != lid) {
          add(Rule::invalid_value, n->span,
              "stage " + qt(s.name) + " is already in loop " + qt(g_.loops[s.loop].name) +
                  "; a stage repeats in at most one loop",
              path + "/stages");
          continue;
        }
        if (s.loop == lid) continue;  // listed twice; the schema reported it
        s.loop = lid;
        l.stages.push_back(s.id);
      }
    }
  }

  std::size_t loop_position(const Stage& s) const {
    const auto& order = g_.loops[s.loop].stages;
    return static_cast<std::size_t>(std::find(order.begin(), order.end(), s.id) - order.begin());
  }

  // An `after` naming a stage of the same loop that comes at or after this one in the loop's
  // order means that stage's previous repetition: the loop's back edge.
  void classify_edges() {
    for (Stage& s : g_.stages) {
      std::vector<StageId> same;
      for (const StageId p : s.after) {
        const Stage& pred = g_.stages[p];
        if (s.loop != kNoId && pred.loop == s.loop && loop_position(pred) >= loop_position(s)) {
          s.after_previous.push_back(p);
        } else {
          same.push_back(p);
        }
      }
      s.after = std::move(same);
    }
  }

  // -- decisions ----------------------------------------------------------------------------

  void decode_decisions() {
    const Node* decisions = root_.get("decisions");
    // Who decides what, from the stages' `decides`.
    std::map<std::string, std::vector<std::pair<StageId, Span>>> deciders;
    for (StageId id = 0; id < g_.stages.size(); ++id) {
      const Node* def = src_[id].def();
      const Node* d = def->is_mapping() ? def->get("decides") : nullptr;
      if (!is_string(d)) continue;
      const auto it = vars_.find(d->value);
      if (it == vars_.end() || it->second.kind != VarKind::decision) {
        std::vector<std::string> known;
        for (const auto& [name, v] : vars_) {
          if (v.kind == VarKind::decision) known.push_back(name);
        }
        unknown(d->span,
                "stage " + qt(g_.stages[id].name) + " decides " + qt(d->value) +
                    ", which is not a declared decision point",
                d->value, known, stage_path(id) + "/decides");
        continue;
      }
      deciders[d->value].emplace_back(id, d->span);
    }
    if (!decisions || !decisions->is_mapping()) return;
    for (const MapEntry& e : decisions->entries) {
      Decision dec;
      dec.id = static_cast<DecisionId>(g_.decisions.size());
      dec.name = e.key.value;
      dec.limits = g_.limits;
      const std::string path = "/decisions/" + schema::pointer_token(dec.name);
      const auto& who = deciders[dec.name];
      if (who.empty()) {
        add(Rule::undecided_decision, e.key.span,
            "no stage decides decision point " + qt(dec.name) + "; add `decides: " + dec.name +
                "` to the stage whose output resolves it",
            path);
      } else {
        dec.decided_by = who.front().first;
        g_.stages[dec.decided_by].decides = dec.id;
        vars_[dec.name].producer = dec.decided_by;
        for (std::size_t i = 1; i < who.size(); ++i) {
          add(Rule::conflicting_decider, who[i].second,
              "decision point " + qt(dec.name) + " is already decided by stage " +
                  qt(g_.stages[dec.decided_by].name) + "; one stage decides each decision",
              stage_path(who[i].first) + "/decides");
        }
      }
      if (e.value.is_mapping()) decode_decision(dec, e.value, path);
      g_.decisions.push_back(std::move(dec));
    }
  }

  void decode_decision(Decision& dec, const Node& def, const std::string& path) {
    const Stage* decider = dec.decided_by == kNoId ? nullptr : &g_.stages[dec.decided_by];
    if (auto d = string_of(def.get("description"))) dec.description = *d;
    if (decider && decider->kind == StageKind::user) dec.window = Window::user;
    if (const Node* w = def.get("window");
        is_string(w) && (w->value == "decode" || w->value == "user")) {
      const Window explicit_window = w->value == "user" ? Window::user : Window::decode;
      if (decider && explicit_window != dec.window) {
        add(Rule::invalid_value, w->span,
            "window " + qt(w->value) + " does not fit the deciding stage " + qt(decider->name) +
                ", a " + std::string(to_string(decider->kind)) + " stage; " +
                (dec.window == Window::user ? "a user stage resolves in a user window"
                                            : "model and tool stages resolve in a decode window"),
            path + "/window");
      }
      dec.window = explicit_window;
    }
    if (auto p = string_of(def.get("promotion")); p && *p == "independent") {
      dec.promotion = Promotion::independent;
    }
    dec.limits = read_limits(def.get("limits"), g_.limits);
    if (const Node* c = def.get("candidates"); c && c->is_mapping()) {
      decode_candidates(dec, *c, path + "/candidates");
    }
    const Node* sel = def.get("selection");
    const std::string default_pointer = decider ? default_output_pointer(*decider) : "";
    if (sel && sel->is_mapping()) {
      dec.selection.extract = extractor(*sel, default_pointer, path + "/selection");
      if (const Node* m = sel->get("map"); m && m->is_mapping()) {
        for (const MapEntry& me : m->entries) {
          if (auto v = string_of(&me.value)) dec.selection.map[me.key.value] = *v;
        }
      }
      if (decider && decider->kind == StageKind::user) {
        auto& d = add(Rule::invalid_value, Span{sel->span.begin, sel->span.begin},
                      "`selection` is ignored for a decision a user stage decides: the demand "
                      "that follows names the pick through its `bind`",
                      path + "/selection");
        d.severity = Severity::warning;
      }
    } else {
      dec.selection.extract.pointer = default_pointer;
    }
    check_selection(dec, def, path);
  }

  void decode_candidates(Decision& dec, const Node& c, const std::string& path) {
    CandidateSource& src = dec.candidates;
    const auto source = string_of(c.get("source"));
    if (!source) return;
    if (*source == "learned") src.kind = CandidateSourceKind::learned;
    if (*source == "extract") src.kind = CandidateSourceKind::extract;
    if (*source == "drafter") src.kind = CandidateSourceKind::drafter;
    if (auto m = int_of(c.get("max"), 1, kMaxCount)) src.max = *m;
    for (const Node* v : string_list(c.get("values")))
      src.values.push_back(v->value);
    if (src.kind == CandidateSourceKind::static_list && !c.get("max")) {
      src.max = std::max<int>(1, static_cast<int>(src.values.size()));
    }
    if (src.kind == CandidateSourceKind::extract) {
      if (const Node* st = c.get("stage"); is_string(st)) {
        const auto it = stage_ids_.find(st->value);
        if (it == stage_ids_.end()) {
          unknown(st->span,
                  "the candidates of " + qt(dec.name) + " are read from " + qt(st->value) +
                      ", which is not a stage",
                  st->value, stage_names(), path + "/stage");
        } else {
          src.stage = it->second;
        }
      }
      const std::string dp = src.stage == kNoId ? "" : default_output_pointer(g_.stages[src.stage]);
      src.extract = extractor(c, dp, path);
    }
    if (src.kind == CandidateSourceKind::drafter) {
      if (auto m = string_of(c.get("model"))) src.model = *m;
      if (const Node* r = c.get("request")) src.request = to_json(*r);
      if (const Node* p = c.get("params"); p && p->is_mapping()) src.params = to_json(*p);
      if (auto s = int_of(c.get("samples"), 1, 64)) src.samples = *s;
      if (auto t = int_of(c.get("timeout_ms"), 1, 600'000)) src.timeout_ms = *t;
    }
  }

  // A selection that can never produce a listed candidate would leave every fill unused.
  void check_selection(const Decision& dec, const Node& def, const std::string& path) {
    const CandidateSource& src = dec.candidates;
    if (src.values.empty() || (src.kind != CandidateSourceKind::static_list &&
                               src.kind != CandidateSourceKind::learned)) {
      return;
    }
    const Node* sel = def.get("selection");
    if (!sel || !sel->is_mapping()) return;
    const std::set<std::string> candidates(src.values.begin(), src.values.end());
    if (const Node* m = sel->get("map"); m && m->is_mapping()) {
      for (const MapEntry& me : m->entries) {
        if (is_string(&me.value) && !candidates.count(me.value.value)) {
          add(Rule::selection_unmatchable, me.value.span,
              "the selection map yields " + qt(me.value.value) + ", which is not a candidate of " +
                  qt(dec.name),
              path + "/selection/map/" + schema::pointer_token(me.key.value));
        }
      }
      return;
    }
    if (!dec.selection.extract.regex) return;
    const auto group = first_group_pattern(*dec.selection.extract.regex_source);
    if (!group) return;
    const re2::RE2 sub(*group, re2::RE2::Quiet);
    if (!sub.ok()) return;
    for (const std::string& c : src.values) {
      if (re2::RE2::FullMatch(c, sub)) return;
    }
    const Node* regex = sel->get("regex");
    add(Rule::selection_unmatchable, regex ? regex->span : sel->span,
        "the selection regex can capture none of the candidates of " + qt(dec.name) + " (" +
            join_names(src.values) + ")",
        path + "/selection/regex");
  }

  // -- templates ----------------------------------------------------------------------------

  void use(StageId stage, const std::string& name, Span span, const std::string& path,
           bool in_section) {
    const auto it = vars_.find(name);
    if (it == vars_.end()) {
      if (in_section) return;  // may be a field of the section's current item
      unknown(span,
              (stage == kNoId ? std::string("the drafter request")
                              : "stage " + qt(g_.stages[stage].name)) +
                  " uses variable " + qt(name) + ", which is not defined",
              name, var_names(), path);
      return;
    }
    it->second.used = true;
    if (stage == kNoId) return;
    uses_.push_back(Use{name, span, stage});
    auto& u = g_.stages[stage].uses;
    if (std::find(u.begin(), u.end(), name) == u.end()) u.push_back(name);
  }

  void scan_string(StageId stage, const Node& scalar, const std::string& path) {
    const MustacheScan scan = scan_mustache(scalar.value);
    if (scan.error) {
      add(Rule::invalid_value, locate(scalar, scan.error->offset, scan.error->length),
          scan.error->message, path);
      return;
    }
    for (const MustacheTag& tag : scan.tags) {
      if (tag.type == MustacheTag::Type::comment || tag.type == MustacheTag::Type::end ||
          tag.name == ".") {
        continue;
      }
      const bool opens =
          tag.type == MustacheTag::Type::section || tag.type == MustacheTag::Type::inverted;
      use(stage, std::string(root_name(tag.name)), locate(scalar, tag.offset, tag.length), path,
          tag.section_depth > 0 && !opens);
    }
  }

  void scan_tree(StageId stage, const Node& n, const std::string& path) {
    switch (n.kind) {
      case Kind::scalar:
        if (yaml::resolve(n) == ScalarType::string) scan_string(stage, n, path);
        return;
      case Kind::sequence:
        for (std::size_t i = 0; i < n.items.size(); ++i) {
          scan_tree(stage, n.items[i], path + "/" + std::to_string(i));
        }
        return;
      case Kind::mapping:
        for (const MapEntry& e : n.entries) {
          scan_tree(stage, e.value, path + "/" + schema::pointer_token(e.key.value));
        }
        return;
      case Kind::null:
        return;
    }
  }

  void scan_templates() {
    for (StageId id = 0; id < g_.stages.size(); ++id) {
      const Node* def = src_[id].def();
      if (!def->is_mapping()) continue;
      const std::string path = stage_path(id);
      for (const char* key : {"request", "arguments", "reads", "writes"}) {
        if (const Node* n = def->get(key)) scan_tree(id, *n, path + "/" + key);
      }
    }
    const Node* decisions = root_.get("decisions");
    if (!decisions || !decisions->is_mapping()) return;
    for (const MapEntry& e : decisions->entries) {
      const Node* c = e.value.is_mapping() ? e.value.get("candidates") : nullptr;
      const Node* r = c && c->is_mapping() ? c->get("request") : nullptr;
      if (r)
        scan_tree(kNoId, *r,
                  "/decisions/" + schema::pointer_token(e.key.value) + "/candidates/request");
    }
  }

  // -- the stage graph ----------------------------------------------------------------------

  void build_graph() {
    const std::size_t n = g_.stages.size();
    // Same-repetition edges must be acyclic: find strongly connected components (Tarjan).
    std::vector<int> index(n, -1), low(n, 0), comp(n, -1);
    std::vector<bool> on_stack(n, false);
    std::vector<StageId> stack;
    std::vector<std::vector<StageId>> components;
    int counter = 0;
    std::function<void(StageId)> strong = [&](StageId v) {
      index[v] = low[v] = counter++;
      stack.push_back(v);
      on_stack[v] = true;
      for (const StageId w : g_.stages[v].after) {
        if (index[w] < 0) {
          strong(w);
          low[v] = std::min(low[v], low[w]);
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], index[w]);
        }
      }
      if (low[v] == index[v]) {
        std::vector<StageId> c;
        StageId w;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack[w] = false;
          comp[w] = static_cast<int>(components.size());
          c.push_back(w);
        } while (w != v);
        components.push_back(std::move(c));
      }
    };
    for (StageId v = 0; v < n; ++v) {
      if (index[v] < 0) strong(v);
    }
    std::set<std::pair<StageId, StageId>> cyclic_edges;
    for (auto& c : components) {
      const StageId only = c.front();
      const bool self = c.size() == 1 && std::count(g_.stages[only].after.begin(),
                                                    g_.stages[only].after.end(), only) > 0;
      if (c.size() < 2 && !self) continue;
      std::sort(c.begin(), c.end());
      std::vector<std::string> names;
      for (const StageId id : c)
        names.push_back(g_.stages[id].name);
      // Report at the `after` reference of the last-declared member that stays in the cycle.
      const StageId last = c.back();
      Span at = src_[last].entry->key.span;
      for (const StageId p : g_.stages[last].after) {
        if (comp[p] == comp[last]) {
          at = after_src_[{last, p}];
          break;
        }
      }
      add(Rule::cycle, at,
          self ? "stage " + qt(names[0]) + " runs after itself"
               : "stages " + join_names(names) +
                     " depend on each other in a cycle; if they repeat, declare them as a loop "
                     "(`loops:`) in the order one repetition runs them",
          stage_path(last) + "/after");
      for (const StageId a : c) {
        for (const StageId p : g_.stages[a].after) {
          if (comp[p] == comp[a]) cyclic_edges.insert({p, a});
        }
      }
    }
    // Topological order (Kahn) over acyclic edges; ties go to declaration order.
    std::vector<int> indegree(n, 0);
    std::vector<std::vector<StageId>> next(n);
    for (const Stage& s : g_.stages) {
      for (const StageId p : s.after) {
        if (cyclic_edges.count({p, s.id})) continue;
        next[p].push_back(s.id);
        ++indegree[s.id];
      }
    }
    std::priority_queue<StageId, std::vector<StageId>, std::greater<>> ready;
    for (StageId v = 0; v < n; ++v) {
      if (indegree[v] == 0) ready.push(v);
    }
    while (!ready.empty()) {
      const StageId v = ready.top();
      ready.pop();
      g_.topological_order.push_back(v);
      for (const StageId w : next[v]) {
        if (--indegree[w] == 0) ready.push(w);
      }
    }
    std::vector<std::size_t> position(n, 0);
    for (std::size_t i = 0; i < g_.topological_order.size(); ++i) {
      position[g_.topological_order[i]] = i;
    }
    for (const Stage& s : g_.stages) {
      for (const StageId p : s.after)
        g_.edges.push_back(Edge{p, s.id, false});
      for (const StageId p : s.after_previous)
        g_.edges.push_back(Edge{p, s.id, true});
    }
    std::sort(g_.edges.begin(), g_.edges.end(), [&](const Edge& a, const Edge& b) {
      return std::tuple(position[a.from], position[a.to], a.loop_carried) <
             std::tuple(position[b.from], position[b.to], b.loop_carried);
    });
    entry_and_reachability();
    ancestors();
  }

  void entry_and_reachability() {
    if (g_.stages.empty()) return;
    const Node* entry = root_.get("entry");
    for (const Node* e : string_list(entry)) {
      const auto it = stage_ids_.find(e->value);
      if (it == stage_ids_.end()) {
        unknown(e->span, "entry " + qt(e->value) + " is not a stage", e->value, stage_names(),
                "/entry");
        continue;
      }
      g_.entry.push_back(it->second);
    }
    if (!entry) g_.entry.push_back(0);
    std::vector<std::vector<StageId>> next(g_.stages.size());
    for (const Edge& e : g_.edges)
      next[e.from].push_back(e.to);
    std::vector<bool> seen(g_.stages.size(), false);
    std::vector<StageId> work(g_.entry.begin(), g_.entry.end());
    for (const StageId s : work)
      seen[s] = true;
    while (!work.empty()) {
      const StageId v = work.back();
      work.pop_back();
      for (const StageId w : next[v]) {
        if (!seen[w]) {
          seen[w] = true;
          work.push_back(w);
        }
      }
    }
    for (const Stage& s : g_.stages) {
      if (seen[s.id]) continue;
      add(Rule::unreachable_stage, src_[s.id].entry->key.span,
          "stage " + qt(s.name) + " is not reachable from the entry stage" +
              (g_.entry.size() > 1 ? "s" : "") + "; give it an `after`, or list it in `entry`",
          stage_path(s.id));
    }
  }

  // ancestors_[s] holds every stage s runs after, directly or not, across repetitions.
  void ancestors() {
    const std::size_t n = g_.stages.size();
    ancestors_.assign(n, std::vector<bool>(n, false));
    for (StageId s = 0; s < n; ++s) {
      std::vector<StageId> work;
      auto push_preds = [&](StageId v) {
        for (const StageId p : g_.stages[v].after)
          work.push_back(p);
        for (const StageId p : g_.stages[v].after_previous)
          work.push_back(p);
      };
      push_preds(s);
      while (!work.empty()) {
        const StageId v = work.back();
        work.pop_back();
        if (ancestors_[s][v]) continue;
        ancestors_[s][v] = true;
        push_preds(v);
      }
    }
  }

  void check_dependencies() {
    std::set<std::pair<StageId, std::string>> reported;
    for (const Use& u : uses_) {
      const Var& v = vars_.at(u.var);
      const Stage& s = g_.stages[u.stage];
      if (v.kind == VarKind::loop) {
        if (s.loop != v.loop && reported.insert({u.stage, u.var}).second) {
          add(Rule::missing_dependency, u.span,
              "stage " + qt(s.name) + " uses loop index " + qt(u.var) +
                  ", but it is not a stage of that loop",
              stage_path(u.stage));
        }
        continue;
      }
      if (v.producer == kNoId) continue;  // inputs; undecided decisions are reported elsewhere
      if (v.producer == u.stage) {
        if (reported.insert({u.stage, u.var}).second) {
          add(Rule::missing_dependency, u.span,
              "stage " + qt(s.name) + " uses " + qt(u.var) + ", which it produces itself",
              stage_path(u.stage));
        }
        continue;
      }
      if (ancestors_[u.stage][v.producer] || !reported.insert({u.stage, u.var}).second) continue;
      const std::string& producer = g_.stages[v.producer].name;
      auto& d = add(Rule::missing_dependency, u.span,
                    "stage " + qt(s.name) + " uses " + qt(u.var) + ", which stage " + qt(producer) +
                        " " + (v.kind == VarKind::decision ? "decides" : "produces") +
                        ", but does not run after it; add \"" + producer + "\" to its `after`",
                    stage_path(u.stage));
      d.suggestion = producer;
    }
  }

  // The stages whose input depends on a decision's selection, directly or through outputs.
  void compute_downstream() {
    for (Decision& dec : g_.decisions) {
      if (dec.decided_by == kNoId) continue;
      std::set<std::string> tainted{dec.name};
      std::vector<StageId> down;
      for (const StageId id : g_.topological_order) {
        const Stage& s = g_.stages[id];
        if (id == dec.decided_by || !ancestors_[id][dec.decided_by]) continue;
        const bool depends = std::any_of(s.uses.begin(), s.uses.end(), [&](const std::string& u) {
          return tainted.count(u) > 0;
        });
        if (!depends) continue;
        down.push_back(id);
        for (const auto& [name, ex] : s.outputs)
          tainted.insert(name);
      }
      dec.downstream = std::move(down);
    }
  }

  // -- speculation safety -------------------------------------------------------------------

  void check_speculation() {
    for (Stage& s : g_.stages) {
      const Node* def = src_[s.id].def();
      if (!def->is_mapping() || !s.speculable) continue;
      const std::string path = stage_path(s.id);
      const MapEntry* spec = def->find("speculable");
      if (!s.writes.empty()) {
        const Node* w = def->get("writes");
        add(Rule::speculable_writes, w->span,
            "stage " + qt(s.name) +
                " is speculable but writes external records; a fill must have no external "
                "effect (drop `speculable`, or move the write to a stage of its own)",
            path + "/writes");
      }
      if (s.kind != StageKind::model) continue;
      const bool seeded = s.params.contains("seed") && s.params["seed"].is_number();
      const json* t = s.params.contains("temperature") ? &s.params["temperature"] : nullptr;
      if (seeded || (t && t->is_number() && t->get<double>() == 0.0)) continue;
      const Node* params = def->get("params");
      const MapEntry* temp = entry_of(params, "temperature");
      add(Rule::nondeterministic_speculable, temp ? temp->value.span : spec->key.span,
          t ? "speculable stage " + qt(s.name) + " samples at temperature " + temp->value.value +
                  " without a fixed seed, so a fill may differ from the canonical answer; set "
                  "`temperature: 0` or a `seed`"
            : "speculable stage " + qt(s.name) +
                  " sets no temperature (engines default to 1.0) and no seed, so a fill may "
                  "differ from the canonical answer; set `temperature: 0` or a `seed`",
          path + (temp ? "/params/temperature" : "/speculable"));
    }
    const Node* decisions = root_.get("decisions");
    for (const Decision& dec : g_.decisions) {
      if (dec.decided_by == kNoId) continue;
      const bool any = std::any_of(dec.downstream.begin(), dec.downstream.end(),
                                   [&](StageId id) { return g_.stages[id].speculable; });
      if (any) continue;
      add(Rule::no_speculable_downstream, decisions->entries[dec.id].key.span,
          dec.downstream.empty()
              ? "no stage after " + qt(g_.stages[dec.decided_by].name) + " uses " + qt(dec.name) +
                    ", so nothing can be filled for it"
              : "no stage downstream of " + qt(dec.name) +
                    " is speculable, so nothing can be filled for it; mark the stages that are "
                    "safe to run twice `speculable: true`",
          "/decisions/" + schema::pointer_token(dec.name));
    }
  }

  // -- isolation between tenants -----------------------------------------------------------

  // A key template must start with literal text (comments render nothing, so they do not
  // count): otherwise whatever value is rendered first, a caller's or a model's, can name any
  // record ("secret:admin"), reading it into a result or invalidating it.
  static bool scoped_key(const MustacheScan& scan) {
    std::size_t literal_from = 0;
    for (const MustacheTag& tag : scan.tags) {
      if (tag.offset > literal_from) return true;
      if (tag.type != MustacheTag::Type::comment) return false;
      literal_from = tag.offset + tag.length;
    }
    return true;  // no value is rendered before the end: a fixed key (or none)
  }

  void check_record_keys() {
    for (StageId id = 0; id < g_.stages.size(); ++id) {
      const Node* def = src_[id].def();
      if (!def->is_mapping()) continue;
      for (const char* key : {"reads", "writes"}) {
        const Node* list = def->get(key);
        if (!list || !list->is_sequence()) continue;
        for (std::size_t i = 0; i < list->items.size(); ++i) {
          const Node& item = list->items[i];
          if (!is_string(&item)) continue;
          const MustacheScan scan = scan_mustache(item.value);
          if (scan.error || scoped_key(scan)) continue;  // bad tags: reported
          add(Rule::unscoped_record_key, item.span,
              "record key " + qt(item.value) +
                  " starts with a mustache tag, so the value rendered there can name any "
                  "record (\"secret:admin\", say); begin it with a literal prefix that names "
                  "the kind of record, such as " +
                  qt("page:" + item.value),
              stage_path(id) + "/" + key + "/" + std::to_string(i));
        }
      }
    }
  }

  // Where a caller-derived variable's value comes from: the stage that binds it from its
  // incoming request (`via` empty), or the stage whose request carried `via` into the output
  // or decision it produces.
  struct CallerOrigin {
    StageId stage = kNoId;
    std::string via;
  };

  // Variables whose value a caller chooses: those bound from an incoming request, and,
  // transitively, the outputs and decisions of stages whose request carries one of them.
  std::map<std::string, CallerOrigin> caller_derived() const {
    std::map<std::string, CallerOrigin> out;
    for (const Stage& s : g_.stages) {
      for (const auto& [name, ex] : s.bind) {
        const auto v = vars_.find(name);
        if (v != vars_.end() &&
            (v->second.kind == VarKind::input || v->second.kind == VarKind::decision)) {
          out.emplace(name, CallerOrigin{s.id, ""});
        }
      }
    }
    // A fixpoint: loop-carried values may flow against the declaration order.
    for (bool changed = true; changed;) {
      changed = false;
      for (const StageId id : g_.topological_order) {
        const Stage& s = g_.stages[id];
        const std::string* carried = nullptr;
        for (const auto& [name, ex] : s.bind) {
          if (!carried && out.count(name)) carried = &name;
        }
        for (const std::string& u : s.uses) {
          if (!carried && out.count(u)) carried = &u;
        }
        if (!carried) continue;
        std::vector<std::string> produced;
        for (const auto& [name, ex] : s.outputs)
          produced.push_back(name);
        if (s.decides != kNoId) produced.push_back(g_.decisions[s.decides].name);
        for (const std::string& p : produced) {
          if (out.emplace(p, CallerOrigin{id, *carried}).second) changed = true;
        }
      }
    }
    return out;
  }

  // "query", which stage "router" binds from a caller's request
  std::string caller_chain(const std::map<std::string, CallerOrigin>& origins,
                           const std::string& var) const {
    const CallerOrigin& o = origins.at(var);
    const std::string& stage = g_.stages[o.stage].name;
    if (o.via.empty())
      return qt(var) + ", which stage " + qt(stage) + " binds from a caller's request";
    const bool decided = vars_.at(var).kind == VarKind::decision;
    return qt(var) + ", which stage " + qt(stage) + (decided ? " decides" : " produces") +
           " from " + caller_chain(origins, o.via);
  }

  void check_sharing() {
    const std::string why =
        "; a result shared across tenants that was computed from one tenant's data can be "
        "served to another tenant that sends the same request";
    const std::string keep = why +
                             "; keep `share: tenant` unless that value is the same for "
                             "every tenant";
    const auto origins = caller_derived();
    for (const Stage& s : g_.stages) {
      if (s.share != Share::global) continue;
      const Node* def = src_[s.id].def();
      const std::string path = stage_path(s.id);
      const std::string shared =
          "stage " + qt(s.name) + " is shared across tenants (share: global)";
      if (!s.reads.empty()) {
        add(Rule::shared_stage_reads_records, def->get("share")->span,
            shared + " but reads records (" + join_names(s.reads) +
                "), which belong to one tenant" + why +
                ", and a write by one tenant invalidates results only within its own tenant and "
                "the shared scope; keep `share: tenant` unless every tenant reads the same "
                "records",
            path + "/share");
      }
      std::set<std::string> reported;
      for (const Use& u : uses_) {
        if (u.stage != s.id || !origins.count(u.var) || !reported.insert(u.var).second) continue;
        add(Rule::shared_stage_caller_input, u.span,
            shared + " but renders " + caller_chain(origins, u.var) + keep, path);
      }
      const Node* bind = def->get("bind");
      for (const auto& [name, ex] : s.bind) {
        if (!origins.count(name) || !reported.insert(name).second) continue;
        add(Rule::shared_stage_caller_input, bind->find(name)->key.span,
            shared + " but its request carries " + qt(name) +
                ", which it binds from a caller's request" + keep,
            path + "/bind/" + schema::pointer_token(name));
      }
    }
  }

  void check_unused() {
    for (const auto& [name, v] : vars_) {
      if (v.used) continue;
      if (v.kind == VarKind::input) {
        if (!v.bound) {
          add(Rule::unbound_input, v.span,
              "input " + qt(name) + " is never bound; add it to a stage's `bind`",
              "/inputs/" + schema::pointer_token(name));
        } else {
          add(Rule::unused_variable, v.span,
              "input " + qt(name) + " is bound but no template uses it",
              "/inputs/" + schema::pointer_token(name));
        }
      } else if (v.kind == VarKind::output) {
        add(Rule::unused_variable, v.span,
            "output " + qt(name) + " of stage " + qt(g_.stages[v.producer].name) + " is never used",
            stage_path(v.producer) + "/outputs/" + schema::pointer_token(name));
      }
    }
  }

  // -- identities ---------------------------------------------------------------------------

  void fingerprints() {
    for (Stage& s : g_.stages) {
      json def = {{"kind", to_string(s.kind)}, {"reads", s.reads}};
      if (s.kind == StageKind::model) {
        def["api"] = to_string(s.api);
        def["model"] = s.model;
        def["params"] = s.params;
        def["request"] = s.request;
      } else if (s.kind == StageKind::tool) {
        def["tool"] = s.tool;
        def["arguments"] = s.arguments;
      }
      // Only when global, so that every stage written before `share` keeps its fingerprint
      // (and its stored results) while a tenant's result is never served as a shared one.
      if (s.share == Share::global) def["share"] = to_string(s.share);
      s.fingerprint = xxh3_128("dynrt.stage.v1\n" + canonical_json(def));
      std::sort(s.uses.begin(), s.uses.end());
    }
    for (Decision& d : g_.decisions) {
      Hasher128 h;
      h.add("dynrt.coordinate.v1").add(g_.workflow).add(d.name);
      d.coordinate = h.finish();
    }
    g_.fingerprint = xxh3_128("dynrt.template.v1\n" + canonical_json(to_json(root_)));
  }

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

}  // namespace

std::optional<TemplateGraph> compile_template(const SourceFile& file, const yaml::Node& root,
                                              DiagnosticSink& sink) {
  return Compiler(file, root, sink).run();
}

}  // namespace dynrt::dsl

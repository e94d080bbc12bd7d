#include "dsl/schema.hpp"

#include "dsl/suggest.hpp"

#include <algorithm>
#include <cmath>
#include <set>

namespace dynrt::dsl::schema {

namespace {

// ---------------------------------------------------------------------------------------------
// The language, v1. Each Type is built once; later Types point at earlier ones.

Type scalar(TypeKind kind, std::string_view doc = {}) {
  Type t;
  t.kind = kind;
  t.doc = doc;
  return t;
}

Type ranged(TypeKind kind, std::optional<double> min, std::optional<double> max,
            bool exclusive_min = false) {
  Type t = scalar(kind);
  t.minimum = min;
  t.maximum = max;
  t.exclusive_minimum = exclusive_min;
  return t;
}

Type list_of(const Type* item, bool non_empty = false, bool unique = false) {
  Type t;
  t.kind = TypeKind::list;
  t.item = item;
  t.non_empty = non_empty;
  t.unique = unique;
  return t;
}

Type map_of(NameKind keys, const Type* item) {
  Type t;
  t.kind = TypeKind::map;
  t.key_name = keys;
  t.item = item;
  return t;
}

Type enum_of(std::vector<std::string_view> values) {
  Type t;
  t.kind = TypeKind::string;
  t.enum_values = std::move(values);
  return t;
}

Type name_of(NameKind kind) {
  Type t;
  t.kind = TypeKind::string;
  t.value_name = kind;
  return t;
}

Type either(std::vector<const Type*> alternatives) {
  Type t;
  t.kind = TypeKind::either;
  t.alternatives = std::move(alternatives);
  return t;
}

Type object(std::string_view name, std::string_view doc, std::vector<Field> fields) {
  Type t;
  t.kind = TypeKind::object;
  t.name = name;
  t.doc = doc;
  t.fields = std::move(fields);
  return t;
}

std::vector<Field> concat(std::vector<Field> a, const std::vector<Field>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct Language {
  Type any = scalar(TypeKind::any);
  Type string = scalar(TypeKind::string);
  Type boolean = scalar(TypeKind::boolean);
  Type version = ranged(TypeKind::integer, 1, std::nullopt);
  Type positive_int = ranged(TypeKind::integer, 1, std::nullopt);
  Type count = ranged(TypeKind::integer, 1, 1'000'000);
  Type non_negative_int = ranged(TypeKind::integer, 0, std::nullopt);
  Type non_negative_number = ranged(TypeKind::number, 0, std::nullopt);
  Type number = scalar(TypeKind::number);
  Type integer = scalar(TypeKind::integer);
  Type probability = ranged(TypeKind::number, 0, 1);
  Type seconds = ranged(TypeKind::number, 0, 7 * 24 * 3600.0, /*exclusive_min=*/true);
  Type max_fills = ranged(TypeKind::integer, 0, 64);
  Type wait_ms = ranged(TypeKind::integer, 0, 600'000);
  Type max_chain = ranged(TypeKind::integer, 1, 16);
  Type samples = ranged(TypeKind::integer, 1, 64);
  Type timeout_ms = ranged(TypeKind::integer, 1, 600'000);
  Type workflow_name = name_of(NameKind::workflow);
  Type stage_name = name_of(NameKind::stage);
  Type identifier = name_of(NameKind::identifier);
  Type string_list = list_of(&string);
  Type unique_strings = list_of(&string, /*non_empty=*/true, /*unique=*/true);
  Type stage_list = list_of(&stage_name, /*non_empty=*/true, /*unique=*/true);
  Type stage_refs = either({&stage_name, &stage_list});
  Type stop = either({&string, &string_list});
  Type api = enum_of({"chat", "completions", "messages", "responses"});
  Type window = enum_of({"decode", "user"});
  Type promotion = enum_of({"exclusive", "independent"});
  Type share = enum_of({"tenant", "global"});
  Type request = [] {
    Type t = scalar(TypeKind::any);
    t.doc =
        "The request body the harness sends for this stage, without `model` and `params`. "
        "Strings are mustache templates over the workflow's variables.";
    return t;
  }();
  Type arguments = [] {
    Type t = scalar(TypeKind::any);
    t.doc = "The JSON arguments the harness sends to the tool. Strings are mustache templates.";
    return t;
  }();

  Type input = [this] {
    Type t = object("Input", "A workflow input: a value a stage binds from its incoming request.",
                    {{"description", &string, false, "What the input holds."}});
    t.nullable = true;
    return t;
  }();

  Type extract =
      object("Extract",
             "Where a value comes from in a JSON document: a JSON pointer, then optionally the "
             "string there parsed as JSON and a second pointer into it, then optionally the first "
             "capture group of a regular expression (RE2 syntax; the whole match without a group).",
             {{"pointer", &string, false,
               "JSON pointer into the document (RFC 6901). Defaults to the message content for "
               "model stages and to the whole document for tool stages."},
              {"json", &string, false,
               "Parse the string found so far as JSON and apply this JSON pointer to it."},
              {"regex", &string, false,
               "RE2 regular expression searched in the string found so far; its first capture "
               "group (or the whole match) is the value."}});
  Type extract_ref = either({&string, &extract});
  Type bindings = map_of(NameKind::identifier, &extract_ref);

  Type params = [this] {
    Type t =
        object("Params",
               "Result-determining request parameters, merged into the rendered request body. "
               "Parameters not listed here are passed through as written.",
               {{"temperature", &non_negative_number, false, "Sampling temperature; 0 is greedy."},
                {"top_p", &probability, false, "Nucleus sampling mass."},
                {"top_k", &integer, false, "Top-k sampling (engine extension)."},
                {"min_p", &probability, false, "Min-p sampling (engine extension)."},
                {"seed", &integer, false, "Sampling seed; fixes the output of a sampling stage."},
                {"max_tokens", &positive_int, false, "Upper bound on generated tokens."},
                {"max_completion_tokens", &positive_int, false, "Upper bound on generated tokens."},
                {"stop", &stop, false, "Stop sequence or sequences."},
                {"n", &positive_int, false, "Number of choices."},
                {"presence_penalty", &number, false, "Presence penalty."},
                {"frequency_penalty", &number, false, "Frequency penalty."},
                {"repetition_penalty", &number, false, "Repetition penalty (engine extension)."},
                {"logprobs", &boolean, false, "Return log probabilities."},
                {"top_logprobs", &non_negative_int, false, "Alternatives per token with logprobs."},
                {"logit_bias", &any, false, "Token biases."},
                {"response_format", &any, false, "Structured output format."},
                {"tools", &any, false, "Tool definitions offered to the model."},
                {"tool_choice", &any, false, "Tool choice."},
                {"reasoning_effort", &string, false, "Reasoning effort (reasoning models)."}});
    t.open = true;
    return t;
  }();

  Type match_rule = object(
      "MatchRule",
      "One condition on an untagged call: the value at a JSON pointer in the request as the "
      "harness sent it equals a literal, or holds a match of a regular expression. A value that "
      "is not a string is matched as its compact JSON text.",
      {{"pointer", &string, true,
        "JSON pointer into the request body (RFC 6901); a token -N counts from the end of a "
        "list (-1 is its last element), e.g. /messages/-1/content/0/type."},
       {"literal", &string, false, "The exact text the value must be."},
       {"regex", &string, false,
        "RE2 regular expression that must match somewhere in the value (anchor it with ^ and $ "
        "to match the whole)."}});
  Type match_rules = list_of(&match_rule, /*non_empty=*/true);
  Type run_conversation = enum_of({"conversation"});
  Type run_header = object("RunHeader", "A run is identified by a header the client sends.",
                           {{"header", &string, true,
                             "The header's name (case-insensitive), e.g. a session id the "
                             "agent sends with every call."}});
  Type run_identity = either({&run_conversation, &run_header});
  Type recognize = object(
      "Recognize",
      "How calls that carry no X-DynRT-* headers are recognized as this workflow's: each stage "
      "with `match` rules claims the calls they fit, and `run` says which run a call belongs to.",
      {{"run", &run_identity, true,
        "conversation (a hash of the conversation up to its first assistant turn, so every "
        "call of one session lands in one run) or {header: NAME} (the value of a header the "
        "client sends, such as a session id)."}});

  Type kind_model = enum_of({"model"});
  Type kind_tool = enum_of({"tool"});
  Type kind_user = enum_of({"user"});

  std::vector<Field> stage_common(const Type* kind) const {
    return {
        {"kind", kind, true, "model, tool or user."},
        {"description", &string, false, "What the stage does."},
        {"after", &stage_refs, false,
         "The stages this one runs after (one name or a list). Inside a declared loop, naming "
         "a later stage of the same loop means its previous repetition."},
        {"bind", &bindings, false,
         "Variables this stage's incoming request defines: variable name -> where it is in "
         "the request body (a JSON pointer, or an Extract)."},
        {"decides", &identifier, false, "The decision point this stage's output resolves."},
    };
  }
  std::vector<Field> stage_runs() const {
    return {
        {"speculable", &boolean, false,
         "Safe to run twice: deterministic and free of external effects. Only speculable "
         "stages run as fills before their branch resolves."},
        {"share", &share, false,
         "Whose calls its results may serve: tenant (the default: only the tenant whose call "
         "caused them) or global (every tenant; for results that hold no tenant's data)."},
        {"reads", &string_list, false,
         "External records the stage reads (mustache templates of record keys, each starting "
         "with a literal prefix such as `doc:`); a write to one invalidates results built "
         "from it."},
        {"writes", &string_list, false,
         "External records the stage writes (record key templates, as in `reads`); a write "
         "invalidates what read them."},
        {"outputs", &bindings, false,
         "Variables this stage's result defines: variable name -> where it is in the "
         "response (a JSON pointer, or an Extract)."},
        {"ttl_s", &seconds, false, "How long a result of this stage may be reused, in seconds."},
        {"match", &match_rules, false,
         "Recognition without tags: conditions that all hold on a call of this stage (on the "
         "route of its `api` or tool). A call with no X-DynRT-* headers that fits exactly one "
         "stage's rules is that stage's, in the run the template's `recognize` names."},
    };
  }

  Type model_stage =
      object("ModelStage", "A call to a model through the OpenAI API.",
             concat(concat(stage_common(&kind_model), stage_runs()),
                    {{"model", &string, true, "The model name the request carries."},
                     {"api", &api, false,
                      "The protocol the stage's calls speak: chat (/v1/chat/completions, the "
                      "default), completions (/v1/completions), messages (Anthropic, "
                      "/v1/messages) or responses (OpenAI, /v1/responses). The request, `bind` "
                      "and `outputs` are written in that protocol's form."},
                     {"params", &params, false, "Result-determining parameters."},
                     {"request", &request, false,
                      "The request body template; required when the stage is speculable, since "
                      "fills render it."}}));
  Type tool_stage = object("ToolStage", "A call to a tool through dynrt's tool endpoint.",
                           concat(concat(stage_common(&kind_tool), stage_runs()),
                                  {{"tool", &string, true, "The tool's name."},
                                   {"arguments", &arguments, false, "The arguments template."}}));
  Type user_stage = object("UserStage", "A point where the workflow waits for a person.",
                           stage_common(&kind_user));

  Type stage = [this] {
    Type t;
    t.kind = TypeKind::variant;
    t.name = "Stage";
    t.doc = "One model call, tool call or user wait of the workflow.";
    t.discriminator = "kind";
    t.variants = {{"model", &model_stage}, {"tool", &tool_stage}, {"user", &user_stage}};
    return t;
  }();

  Type limits =
      object("Limits", "Bounds on speculation, for the whole template or one decision point.",
             {{"max_fills", &max_fills, false,
               "Most fills admitted per branch (0 disables filling). Default 3."},
              {"wait_ms", &wait_ms, false,
               "Longest a demand waits for an in-flight fill of its exact request before it runs "
               "normally, in milliseconds. Default 2000."},
              {"ttl_s", &seconds, false,
               "How long shadows and reusable results live, in seconds. Default 600."},
              {"max_chain", &max_chain, false,
               "Most speculable stages one fill runs down a chain. Default 4."}});

  Type source_static = enum_of({"static"});
  Type source_learned = enum_of({"learned"});
  Type source_extract = enum_of({"extract"});
  Type source_drafter = enum_of({"drafter"});

  std::vector<Field> candidates_common(const Type* source) const {
    return {
        {"source", source, true, "static, learned, extract or drafter."},
        {"max", &count, false, "Most candidates proposed per branch."},
    };
  }
  Type static_candidates =
      object("StaticCandidates", "A fixed list of candidates, in rank order.",
             concat(candidates_common(&source_static),
                    {{"values", &unique_strings, true, "The candidates, most likely first."}}));
  Type learned_candidates =
      object("LearnedCandidates",
             "Candidates ranked by how often each was selected at this decision point before.",
             concat(candidates_common(&source_learned),
                    {{"values", &unique_strings, false,
                      "A seed vocabulary, ranked in this order until selections are observed."}}));
  Type extract_candidates = object(
      "ExtractCandidates",
      "Candidates read from the most recent output of an earlier stage, in order of "
      "appearance (for example the entities named in the previous passage).",
      concat(candidates_common(&source_extract),
             {{"stage", &stage_name, true, "The stage whose latest output is read."},
              {"pointer", &string, false, "JSON pointer into that output."},
              {"json", &string, false, "Parse as JSON and apply this pointer."},
              {"regex", &string, false,
               "RE2 regular expression; every match's first capture group is a candidate."}}));
  Type drafter_candidates = object(
      "DrafterCandidates",
      "Candidates sampled from a small draft model and ranked by how often each is named.",
      concat(candidates_common(&source_drafter),
             {{"model", &string, true, "The drafter model."},
              {"request", &request, true, "The drafter's request body template."},
              {"params", &params, false, "The drafter's sampling parameters."},
              {"samples", &samples, false, "Drafts sampled per branch. Default 8."},
              {"timeout_ms", &timeout_ms, false,
               "Time box for drafting; an unfinished draft proposes nothing. Default 1000."}}));
  Type candidates = [this] {
    Type t;
    t.kind = TypeKind::variant;
    t.name = "Candidates";
    t.doc = "Where a decision point's candidates come from.";
    t.discriminator = "source";
    t.variants = {{"static", &static_candidates},
                  {"learned", &learned_candidates},
                  {"extract", &extract_candidates},
                  {"drafter", &drafter_candidates}};
    return t;
  }();

  Type selection_map = map_of(NameKind::none, &string);
  Type selection = object(
      "Selection",
      "How the resolved selection is read from the deciding stage's output: an Extract, then "
      "optionally a map from the text found to a candidate.",
      {{"pointer", &string, false, "JSON pointer into the output (default: message content)."},
       {"json", &string, false, "Parse as JSON and apply this pointer."},
       {"regex", &string, false, "RE2 regular expression; its first capture group."},
       {"map", &selection_map, false, "Text found -> candidate it selects."}});

  Type decision = object(
      "Decision",
      "A decision point (a coordinate): the branch a deciding stage resolves at run time.",
      {{"description", &string, false, "What is being decided."},
       {"window", &window, false,
        "What resolves the branch: decode (a model's output; the default for model and tool "
        "deciders) or user (a person's pick; the default for user deciders)."},
       {"promotion", &promotion, true,
        "exclusive: one candidate wins and the losers are cancelled; independent: every "
        "completed candidate stays eligible until it expires."},
       {"candidates", &candidates, true, "Where candidates come from.", Rule::no_candidate_source},
       {"selection", &selection, false,
        "How the selection is read from the deciding stage's output. Not used for user "
        "decisions: the demand that follows names the pick."},
       {"limits", &limits, false, "Overrides of the template's limits."}});

  Type loop = object("Loop",
                     "Stages that repeat together (one hop of a ReAct agent). The loop's name "
                     "is a variable holding the repetition index, from 0.",
                     {{"description", &string, false, "What one repetition does."},
                      {"stages", &stage_list, true, "The stages of one repetition, in order."},
                      {"max", &count, true, "Most repetitions in one workflow run."}});

  Type inputs = map_of(NameKind::identifier, &input);
  Type stages = [this] {
    Type t = map_of(NameKind::stage, &stage);
    t.non_empty = true;
    return t;
  }();
  Type decisions = map_of(NameKind::identifier, &decision);
  Type loops = map_of(NameKind::identifier, &loop);

  Type root =
      object("Template", "A dynrt workflow template: one workflow type.",
             {{"version", &version, true, "Template language version; this dynrt reads 1."},
              {"workflow", &workflow_name, true,
               "The workflow's name: what the X-DynRT-Workflow header carries."},
              {"description", &string, false, "What the workflow does."},
              {"entry", &stage_refs, false,
               "The stage or stages a run starts with. Default: the first stage."},
              {"inputs", &inputs, false, "Workflow inputs, bound by stages from their requests."},
              {"stages", &stages, true, "The workflow's stages, by name."},
              {"decisions", &decisions, false, "Decision points (coordinates), by variable name."},
              {"loops", &loops, false, "Repeating groups of stages, by index variable name."},
              {"limits", &limits, false, "Default bounds for every decision point."},
              {"recognize", &recognize, false,
               "How calls without X-DynRT-* headers are recognized (with stages' `match`)."}});

  Language() = default;
  Language(const Language&) = delete;
  Language& operator=(const Language&) = delete;
};

const Language& language() {
  static const Language lang;
  return lang;
}

// ---------------------------------------------------------------------------------------------
// Validation

using yaml::Kind;
using yaml::Node;
using yaml::ScalarType;

std::string join_quoted(const std::vector<std::string_view>& values) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += i + 1 == values.size() ? " or " : ", ";
    out += "\"" + std::string(values[i]) + "\"";
  }
  return out;
}

std::string format_number(double v) {
  if (std::trunc(v) == v && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
  std::string s = std::to_string(v);
  while (!s.empty() && s.back() == '0')
    s.pop_back();
  return s;
}

std::string_view expected_text(const Type& type) {
  switch (type.kind) {
    case TypeKind::string:
      return "a string";
    case TypeKind::integer:
      return "an integer";
    case TypeKind::number:
      return "a number";
    case TypeKind::boolean:
      return "a boolean (true or false)";
    case TypeKind::object:
    case TypeKind::variant:
    case TypeKind::map:
      return "a mapping";
    case TypeKind::list:
      return "a list";
    case TypeKind::either:
    case TypeKind::any:
      return "a value";
  }
  return "a value";
}

class Validator {
 public:
  explicit Validator(DiagnosticSink& sink) : sink_(sink) {}

  // `key` is the mapping key that owns `node`, if any: findings about the node as a whole
  // (a missing key) point there rather than at the node's first child.
  void check(const Node& node, const Type& type, const std::string& path,
             const Node* key = nullptr) {
    key_ = key;
    switch (type.kind) {
      case TypeKind::any:
        return;
      case TypeKind::string:
        return check_string(node, type, path);
      case TypeKind::integer:
      case TypeKind::number:
        return check_number(node, type, path);
      case TypeKind::boolean:
        return check_boolean(node, path);
      case TypeKind::object:
        return check_object(node, type, path);
      case TypeKind::variant:
        return check_variant(node, type, path);
      case TypeKind::map:
        return check_map(node, type, path);
      case TypeKind::list:
        return check_list(node, type, path);
      case TypeKind::either:
        return check_either(node, type, path);
    }
  }

 private:
  void wrong_type(const Node& node, const Type& type, const std::string& path,
                  std::string hint = {}) {
    std::string msg = "expected " + std::string(expected_text(type)) + ", found " +
                      std::string(yaml::describe(node));
    if (!hint.empty()) msg += "; " + hint;
    sink_.add(Rule::wrong_type, node.span, std::move(msg), path);
  }

  void check_string(const Node& node, const Type& type, const std::string& path) {
    if (node.kind != Kind::scalar) return wrong_type(node, type, path);
    const ScalarType st = yaml::resolve(node);
    if (st == ScalarType::null || st == ScalarType::boolean) {
      return wrong_type(node, type, path, "quote it if you mean the text \"" + node.value + "\"");
    }
    if (!type.enum_values.empty()) {
      if (std::find(type.enum_values.begin(), type.enum_values.end(), node.value) ==
          type.enum_values.end()) {
        std::vector<std::string> options(type.enum_values.begin(), type.enum_values.end());
        auto& d = sink_.add(Rule::invalid_value, node.span,
                            "\"" + node.value + "\" is not one of " + join_quoted(type.enum_values),
                            path);
        if (auto s = closest(node.value, options)) {
          d.message += "; did you mean \"" + *s + "\"?";
          d.suggestion = *s;
        }
      }
      return;
    }
    if (type.value_name != NameKind::none && !valid_name(type.value_name, node.value)) {
      sink_.add(Rule::invalid_value, node.span,
                "\"" + node.value +
                    "\" is not a valid name: " + std::string(name_rule_text(type.value_name)),
                path);
    }
  }

  void check_number(const Node& node, const Type& type, const std::string& path) {
    const ScalarType st = node.kind == Kind::scalar ? yaml::resolve(node) : ScalarType::null;
    const std::optional<double> v = st == ScalarType::integer || st == ScalarType::floating
                                        ? yaml::number_value(node)
                                        : std::nullopt;
    // As in JSON Schema, 64.0 is an integer: the value counts, not its spelling.
    const bool fits = v && (type.kind == TypeKind::number || std::trunc(*v) == *v);
    if (!fits) {
      std::string hint;
      if (node.kind == Kind::scalar && node.style != yaml::Style::plain) hint = "remove the quotes";
      return wrong_type(node, type, path, hint);
    }
    if (!std::isfinite(*v)) {
      sink_.add(Rule::invalid_value, node.span, "expected a finite number", path);
      return;
    }
    const bool below =
        type.minimum && (type.exclusive_minimum ? *v <= *type.minimum : *v < *type.minimum);
    const bool above = type.maximum && *v > *type.maximum;
    if (!below && !above) return;
    std::string range;
    if (type.minimum && type.maximum) {
      range = std::string(type.exclusive_minimum ? "above " : "from ") +
              format_number(*type.minimum) + (type.exclusive_minimum ? " up to " : " to ") +
              format_number(*type.maximum);
    } else if (type.minimum) {
      range = std::string(type.exclusive_minimum ? "above " : "at least ") +
              format_number(*type.minimum);
    } else {
      range = "at most " + format_number(*type.maximum);
    }
    sink_.add(Rule::invalid_value, node.span, node.value + " is out of range: expected " + range,
              path);
  }

  void check_boolean(const Node& node, const std::string& path) {
    if (node.kind == Kind::scalar && yaml::resolve(node) == ScalarType::boolean) return;
    std::string hint;
    if (yaml::is_yaml11_boolean(node)) hint = "YAML 1.2 booleans are spelled true and false";
    static const Type kBool = scalar(TypeKind::boolean);
    wrong_type(node, kBool, path, hint);
  }

  bool expect_mapping(const Node& node, const Type& type, const std::string& path) {
    if (node.kind == Kind::mapping) return true;
    if (node.kind == Kind::null && type.nullable) return false;
    wrong_type(node, type, path);
    return false;
  }

  void check_fields(const Node& node, const Type& type, const std::string& path,
                    const Type* variant_owner) {
    const Span anchor = key_ ? key_->span : Span{node.span.begin, node.span.begin};
    for (const auto& entry : node.entries) {
      if (entry.key.kind != Kind::scalar) continue;  // reported by the YAML layer
      const std::string child = path + "/" + pointer_token(entry.key.value);
      const auto field = std::find_if(type.fields.begin(), type.fields.end(),
                                      [&](const Field& f) { return f.name == entry.key.value; });
      if (field != type.fields.end()) {
        if (field->type) check(entry.value, *field->type, child, &entry.key);
        continue;
      }
      unknown_key(entry.key, type, child, variant_owner);
    }
    for (const Field& f : type.fields) {
      if (!f.required || node.find(f.name)) continue;
      const Span at = anchor;
      std::string what = type.name.empty() ? "" : " " + std::string(type.name);
      sink_.add(f.missing_rule, at,
                f.missing_rule == Rule::no_candidate_source
                    ? "decision point has no candidate source; add `candidates:` with a "
                      "`source` of static, learned, extract or drafter"
                    : "missing required key \"" + std::string(f.name) + "\"" +
                          (what.empty() ? "" : " in" + what) + " (" + std::string(f.doc) + ")",
                path);
    }
  }

  void unknown_key(const Node& key, const Type& type, const std::string& path,
                   const Type* variant_owner) {
    if (type.open) {
      // Open objects (params) take any key; flag only near-misses of the known ones.
      std::vector<std::string> names;
      for (const Field& f : type.fields)
        names.emplace_back(f.name);
      if (auto s = closest(key.value, names)) {
        auto& d = sink_.add(Rule::unknown_key, key.span,
                            "unknown parameter \"" + key.value +
                                "\" is passed through as "
                                "written; did you mean \"" +
                                *s + "\"?",
                            path);
        d.severity = Severity::warning;
        d.suggestion = *s;
      }
      return;
    }
    std::vector<std::string> names;
    for (const Field& f : type.fields)
      names.emplace_back(f.name);
    std::string where = type.name.empty() ? "here" : "in " + std::string(type.name);
    std::string msg = "unknown key \"" + key.value + "\" " + where;
    // A key that belongs to a sibling variant ("tool" on a model stage) says so.
    if (variant_owner) {
      for (const auto& [value, variant] : variant_owner->variants) {
        if (variant == &type) continue;
        const bool has = std::any_of(variant->fields.begin(), variant->fields.end(),
                                     [&](const Field& f) { return f.name == key.value; });
        if (has) {
          sink_.add(Rule::unknown_key, key.span,
                    msg + "; \"" + key.value + "\" is only valid where " +
                        std::string(variant_owner->discriminator) + " is \"" + std::string(value) +
                        "\"",
                    path);
          return;
        }
      }
    }
    auto& d = sink_.add(Rule::unknown_key, key.span, msg, path);
    if (auto s = closest(key.value, names)) {
      d.message += "; did you mean \"" + *s + "\"?";
      d.suggestion = *s;
    } else {
      std::vector<std::string_view> views(type.fields.size());
      std::transform(type.fields.begin(), type.fields.end(), views.begin(),
                     [](const Field& f) { return f.name; });
      d.message += "; expected one of " + join_quoted(views);
    }
  }

  void check_object(const Node& node, const Type& type, const std::string& path) {
    if (!expect_mapping(node, type, path)) return;
    check_fields(node, type, path, nullptr);
  }

  void check_variant(const Node& node, const Type& type, const std::string& path) {
    if (!expect_mapping(node, type, path)) return;
    const Node* disc = node.get(type.discriminator);
    std::vector<std::string_view> values;
    for (const auto& v : type.variants)
      values.push_back(v.first);
    if (!disc) {
      sink_.add(Rule::missing_key, key_ ? key_->span : Span{node.span.begin, node.span.begin},
                "missing required key \"" + std::string(type.discriminator) + "\" (" +
                    join_quoted(values) + ")",
                path);
      return;
    }
    const std::string disc_path = path + "/" + std::string(type.discriminator);
    if (disc->kind != Kind::scalar) {
      static const Type kString = scalar(TypeKind::string);
      return wrong_type(*disc, kString, disc_path);
    }
    for (const auto& [value, variant] : type.variants) {
      if (disc->value == value) return check_fields(node, *variant, path, &type);
    }
    std::vector<std::string> options(values.begin(), values.end());
    auto& d = sink_.add(Rule::invalid_value, disc->span,
                        "\"" + disc->value + "\" is not one of " + join_quoted(values), disc_path);
    if (auto s = closest(disc->value, options)) {
      d.message += "; did you mean \"" + *s + "\"?";
      d.suggestion = *s;
    }
  }

  void check_map(const Node& node, const Type& type, const std::string& path) {
    if (node.kind == Kind::null && !type.non_empty) return;  // `inputs:` with nothing under it
    if (!expect_mapping(node, type, path)) return;
    if (type.non_empty && node.entries.empty()) {
      sink_.add(Rule::invalid_value, node.span, "expected at least one entry", path);
    }
    for (const auto& entry : node.entries) {
      if (entry.key.kind != Kind::scalar) continue;
      const std::string child = path + "/" + pointer_token(entry.key.value);
      if (type.key_name != NameKind::none && !valid_name(type.key_name, entry.key.value)) {
        sink_.add(Rule::invalid_value, entry.key.span,
                  "\"" + entry.key.value +
                      "\" is not a valid name: " + std::string(name_rule_text(type.key_name)),
                  child);
      }
      check(entry.value, *type.item, child, &entry.key);
    }
  }

  void check_list(const Node& node, const Type& type, const std::string& path) {
    if (node.kind != Kind::sequence) return wrong_type(node, type, path);
    if (type.non_empty && node.items.empty()) {
      sink_.add(Rule::invalid_value, node.span, "expected a non-empty list", path);
    }
    std::set<std::string> seen;
    for (std::size_t i = 0; i < node.items.size(); ++i) {
      const Node& item = node.items[i];
      const std::string child = path + "/" + std::to_string(i);
      check(item, *type.item, child);
      if (type.unique && item.kind == Kind::scalar && !seen.insert(item.value).second) {
        sink_.add(Rule::invalid_value, item.span,
                  "\"" + item.value + "\" appears more than once in this list", child);
      }
    }
  }

  void check_either(const Node& node, const Type& type, const std::string& path) {
    for (const Type* alt : type.alternatives) {
      const bool fits = (node.kind == Kind::sequence && alt->kind == TypeKind::list) ||
                        (node.kind == Kind::mapping &&
                         (alt->kind == TypeKind::object || alt->kind == TypeKind::map ||
                          alt->kind == TypeKind::variant)) ||
                        (node.kind == Kind::scalar &&
                         (alt->kind == TypeKind::string || alt->kind == TypeKind::integer ||
                          alt->kind == TypeKind::number || alt->kind == TypeKind::boolean));
      if (fits) return check(node, *alt, path, key_);
    }
    std::string kinds;
    for (std::size_t i = 0; i < type.alternatives.size(); ++i) {
      if (i > 0) kinds += " or ";
      kinds += expected_text(*type.alternatives[i]);
    }
    sink_.add(Rule::wrong_type, node.span,
              "expected " + kinds + ", found " + std::string(yaml::describe(node)), path);
  }

  DiagnosticSink& sink_;
  const Node* key_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// JSON Schema

class SchemaWriter {
 public:
  nlohmann::json write(const Type& root) {
    nlohmann::json out = body(root);
    nlohmann::json doc;
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema";
    doc["$id"] = "https://dynrt.dev/schemas/template.schema.json";
    doc["title"] = "dynrt workflow template";
    for (auto& [k, v] : out.items())
      doc[k] = v;
    doc["$defs"] = defs_;
    return doc;
  }

 private:
  nlohmann::json ref(const Type& t) {
    if (t.name.empty()) return body(t);
    const std::string name(t.name);
    if (!defs_.contains(name)) {
      defs_[name] = nlohmann::json::object();  // reserve first: types may refer to themselves
      defs_[name] = body(t);
    }
    return {{"$ref", "#/$defs/" + name}};
  }

  nlohmann::json body(const Type& t) {
    nlohmann::json j = nlohmann::json::object();
    if (!t.doc.empty()) j["description"] = std::string(t.doc);
    switch (t.kind) {
      case TypeKind::any:
        break;
      case TypeKind::string:
        j["type"] = "string";
        if (!t.enum_values.empty()) {
          if (t.enum_values.size() == 1) {
            j["const"] = std::string(t.enum_values[0]);
          } else {
            j["enum"] = nlohmann::json::array();
            for (auto v : t.enum_values)
              j["enum"].push_back(std::string(v));
          }
        }
        if (t.value_name != NameKind::none) j["pattern"] = std::string(name_pattern(t.value_name));
        break;
      case TypeKind::integer:
      case TypeKind::number:
        j["type"] = t.kind == TypeKind::integer ? "integer" : "number";
        if (t.minimum) j[t.exclusive_minimum ? "exclusiveMinimum" : "minimum"] = *t.minimum;
        if (t.maximum) j["maximum"] = *t.maximum;
        break;
      case TypeKind::boolean:
        j["type"] = "boolean";
        break;
      case TypeKind::object:
        object_body(j, t);
        break;
      case TypeKind::map:
        j["type"] = t.non_empty ? nlohmann::json("object") : nlohmann::json({"object", "null"});
        if (t.key_name != NameKind::none) {
          j["propertyNames"] = {{"pattern", std::string(name_pattern(t.key_name))}};
        }
        j["additionalProperties"] = ref(*t.item);
        if (t.non_empty) j["minProperties"] = 1;
        break;
      case TypeKind::list:
        j["type"] = "array";
        j["items"] = ref(*t.item);
        if (t.non_empty) j["minItems"] = 1;
        if (t.unique) j["uniqueItems"] = true;
        break;
      case TypeKind::variant: {
        j["type"] = "object";
        j["required"] = {std::string(t.discriminator)};
        j["oneOf"] = nlohmann::json::array();
        for (const auto& v : t.variants)
          j["oneOf"].push_back(ref(*v.second));
        break;
      }
      case TypeKind::either: {
        j["anyOf"] = nlohmann::json::array();
        for (const Type* alt : t.alternatives)
          j["anyOf"].push_back(ref(*alt));
        break;
      }
    }
    return j;
  }

  void object_body(nlohmann::json& j, const Type& t) {
    j["type"] = t.nullable ? nlohmann::json({"object", "null"}) : nlohmann::json("object");
    j["properties"] = nlohmann::json::object();
    nlohmann::json required = nlohmann::json::array();
    for (const Field& f : t.fields) {
      nlohmann::json p = f.type ? ref(*f.type) : nlohmann::json::object();
      if (!f.doc.empty()) {
        if (p.contains("$ref")) {
          p = {{"$ref", p["$ref"]}, {"description", std::string(f.doc)}};
        } else {
          p["description"] = std::string(f.doc);
        }
      }
      j["properties"][std::string(f.name)] = p;
      if (f.required) required.push_back(std::string(f.name));
    }
    if (!required.empty()) j["required"] = required;
    j["additionalProperties"] = t.open;
  }

  nlohmann::json defs_ = nlohmann::json::object();
};

}  // namespace

const Type& template_schema() {
  return language().root;
}

nlohmann::json json_schema() {
  return SchemaWriter{}.write(template_schema());
}

bool valid_name(NameKind kind, std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  switch (kind) {
    case NameKind::none:
      return true;
    case NameKind::identifier:
      return alpha(name[0]) &&
             std::all_of(name.begin(), name.end(), [&](char c) { return alpha(c) || digit(c); });
    case NameKind::stage:
      return alpha(name[0]) && std::all_of(name.begin(), name.end(), [&](char c) {
               return alpha(c) || digit(c) || c == '-';
             });
    case NameKind::workflow:
      return (alpha(name[0]) || digit(name[0])) &&
             std::all_of(name.begin(), name.end(),
                         [&](char c) { return alpha(c) || digit(c) || c == '-' || c == '.'; });
  }
  return false;
}

std::string_view name_pattern(NameKind kind) {
  switch (kind) {
    case NameKind::identifier:
      return "^[A-Za-z_][A-Za-z0-9_]{0,127}$";
    case NameKind::stage:
      return "^[A-Za-z_][A-Za-z0-9_-]{0,127}$";
    case NameKind::workflow:
      return "^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$";
    case NameKind::none:
      break;
  }
  return ".*";
}

std::string_view name_rule_text(NameKind kind) {
  switch (kind) {
    case NameKind::identifier:
      return "use letters, digits and _, not starting with a digit (it is a mustache variable)";
    case NameKind::stage:
      return "use letters, digits, _ and -, starting with a letter or _";
    case NameKind::workflow:
      return "use letters, digits, _, - and .";
    case NameKind::none:
      break;
  }
  return "";
}

void validate(const yaml::Node& node, const Type& type, DiagnosticSink& sink,
              const std::string& path) {
  Validator(sink).check(node, type, path);
}

std::string pointer_token(std::string_view key) {
  std::string out;
  for (const char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace dynrt::dsl::schema

#include "dsl/compiler.hpp"

#include "dsl/node_values.hpp"
#include "dsl/render.hpp"
#include "dsl/schema.hpp"
#include "dsl/yaml_json.hpp"

#include <re2/re2.h>

#include <memory>

namespace dynrt::dsl::detail {

namespace {

constexpr std::string_view kChatContent = "/choices/0/message/content";
constexpr std::string_view kCompletionText = "/choices/0/text";
constexpr std::string_view kMessagesText = "/content/0/text";
constexpr std::string_view kResponsesText = "/output/0/content/0/text";

}  // namespace

void Compiler::header() {
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

SpeculationLimits Compiler::read_limits(const Node* n, SpeculationLimits base) {
  if (!n || !n->is_mapping()) return base;
  if (auto v = int_of(n->get("max_fills"), 0, 64)) base.max_fills = *v;
  if (auto v = int_of(n->get("wait_ms"), 0, 600'000)) base.wait_ms = *v;
  if (auto v = number_of(n->get("ttl_s")); v && *v > 0 && *v <= kMaxTtl) base.ttl_s = *v;
  if (auto v = int_of(n->get("max_chain"), 1, 16)) base.max_chain = *v;
  return base;
}

void Compiler::declare_stages() {
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

void Compiler::define(const std::string& name, Var var, const std::string& path) {
  const auto [it, inserted] = vars_.emplace(name, var);
  if (inserted) return;
  const Position first = file_.position(it->second.span.begin);
  add(Rule::duplicate_name, var.span,
      qt(name) + " is already defined as " + std::string(kind_name(it->second.kind)) + " at line " +
          std::to_string(first.line) + "; " + std::string(kind_name(var.kind)) +
          " needs a name of its own",
      path);
}

void Compiler::declare_variables() {
  if (const Node* inputs = root_.get("inputs"); inputs && inputs->is_mapping()) {
    for (const MapEntry& e : inputs->entries) {
      Input in;
      in.name = e.key.value;
      if (auto d = string_of(e.value.is_mapping() ? e.value.get("description") : nullptr)) {
        in.description = *d;
      }
      g_.inputs.push_back(in);
      define(in.name, Var{VarKind::input, e.key.span}, "/inputs/" + schema::pointer_token(in.name));
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

Extractor Compiler::extractor(const Node& n, std::string default_pointer, const std::string& path) {
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

std::string Compiler::default_output_pointer(const Stage& s) const {
  if (s.kind == StageKind::tool) return "";
  switch (s.api) {
    case ModelApi::chat:
      return std::string(kChatContent);
    case ModelApi::completions:
      return std::string(kCompletionText);
    case ModelApi::messages:
      return std::string(kMessagesText);
    case ModelApi::responses:
      return std::string(kResponsesText);
  }
  return std::string(kChatContent);
}

void Compiler::decode_stage(StageId id) {
  Stage& s = g_.stages[id];
  const Node* def = src_[id].def();
  const std::string path = stage_path(id);
  if (!def->is_mapping()) return;
  if (auto k = string_of(def->get("kind"))) {
    if (*k == "tool") s.kind = StageKind::tool;
    if (*k == "user") s.kind = StageKind::user;
  }
  if (auto d = string_of(def->get("description"))) s.description = *d;
  if (auto a = string_of(def->get("api"))) {
    if (*a == "completions") s.api = ModelApi::completions;
    if (*a == "messages") s.api = ModelApi::messages;
    if (*a == "responses") s.api = ModelApi::responses;
  }
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

void Compiler::check_request(StageId id, const Node& request, const std::string& path) {
  const Stage& s = g_.stages[id];
  if (!request.is_mapping()) {
    add(Rule::wrong_type, request.span,
        "expected a mapping (the request body), found " + std::string(yaml::describe(request)),
        path);
    return;
  }
  const char* needed = s.api == ModelApi::completions ? "prompt"
                       : s.api == ModelApi::responses ? "input"
                                                      : "messages";
  if (!request.find(needed)) {
    add(Rule::missing_key, Span{request.span.begin, request.span.begin},
        std::string("a ") + std::string(to_string(s.api)) + " request needs " + qt(needed), path);
  }
  if (s.api == ModelApi::messages && !request.find("max_tokens") &&
      !s.params.contains("max_tokens"))
    add(Rule::missing_key, Span{request.span.begin, request.span.begin},
        "a messages request needs " + qt("max_tokens") +
            " (in the stage's `params`): Anthropic's API requires it",
        path);
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

void Compiler::check_bind_target(StageId id, const MapEntry& e, const std::string& path) {
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

void Compiler::decode_loops() {
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
        unknown(n->span, "loop " + qt(l.name) + " lists " + qt(n->value) + ", which is not a stage",
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

}  // namespace dynrt::dsl::detail

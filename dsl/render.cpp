#include "dsl/render.hpp"

#include "dsl/mustache.hpp"
#include "protocols/protocols.hpp"
#include "runtime/json_text.hpp"

#include <re2/re2.h>
#include <kainjow/mustache.hpp>

#include <algorithm>
#include <set>

namespace dynrt::dsl {

namespace mustache = kainjow::mustache;
using nlohmann::json;

namespace {

// The protocol a translated stage speaks, as protocols/ names it.
protocols::Api protocol_of(ModelApi api) {
  return api == ModelApi::messages ? protocols::Api::messages : protocols::Api::responses;
}

}  // namespace

namespace {

// The text a non-string value renders as inside a larger string.
std::string text_of(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

mustache::data to_data(const json& v) {
  switch (v.type()) {
    case json::value_t::object: {
      mustache::data obj{mustache::data::type::object};
      for (const auto& [k, item] : v.items())
        obj.set(k, to_data(item));
      return obj;
    }
    case json::value_t::array: {
      mustache::data list{mustache::data::type::list};
      for (const auto& item : v)
        list.push_back(to_data(item));
      return list;
    }
    case json::value_t::boolean:
      // Booleans drive sections; as text they render as true/false (see render_text).
      return mustache::data{v.get<bool>() ? mustache::data::type::bool_true
                                          : mustache::data::type::bool_false};
    default:
      return mustache::data{text_of(v)};
  }
}

// Resolves a dotted variable name against the bindings.
const json* lookup(const Bindings& vars, std::string_view name) {
  const std::string_view root = root_name(name);
  const auto it = vars.find(root);
  if (it == vars.end()) return nullptr;
  const json* cur = &it->second;
  std::string_view rest = name.size() > root.size() ? name.substr(root.size() + 1) : "";
  while (!rest.empty()) {
    const auto dot = rest.find('.');
    const std::string key(rest.substr(0, dot));
    if (!cur->is_object()) return nullptr;
    const auto f = cur->find(key);
    if (f == cur->end()) return nullptr;
    cur = &*f;
    rest = dot == std::string_view::npos ? "" : rest.substr(dot + 1);
  }
  return cur;
}

constexpr const char* kSplice = "$splice";

Expected<json> render_tree(const json& tmpl, const Bindings& vars) {
  switch (tmpl.type()) {
    case json::value_t::string:
      return render_text(tmpl.get_ref<const std::string&>(), vars);
    case json::value_t::array: {
      json out = json::array();
      for (const auto& item : tmpl) {
        // {$splice: "{{history}}"}: the list's elements, in place (a conversation so far,
        // followed by the turns the template adds).
        if (item.is_object() && item.size() == 1 && item.contains(kSplice)) {
          auto r = render_tree(item[kSplice], vars);
          if (!r) return r.error();
          if (!r->is_array()) return make_error(std::string(kSplice) + " needs a list");
          for (auto& x : *r)
            out.push_back(std::move(x));
          continue;
        }
        auto r = render_tree(item, vars);
        if (!r) return r.error();
        out.push_back(std::move(*r));
      }
      return out;
    }
    case json::value_t::object: {
      json out = json::object();
      for (const auto& [k, item] : tmpl.items()) {
        auto r = render_tree(item, vars);
        if (!r) return r.error();
        out[k] = std::move(*r);
      }
      return out;
    }
    default:
      return tmpl;
  }
}

std::string trim(std::string s) {
  const auto not_space = [](unsigned char c) { return !std::isspace(c); };
  s.erase(s.begin(), std::find_if(s.begin(), s.end(), not_space));
  s.erase(std::find_if(s.rbegin(), s.rend(), not_space).base(), s.end());
  return s;
}

// Every regex match in `text` (first capture group, or the whole match), in order.
std::vector<std::string> all_matches(const re2::RE2& re, const std::string& text) {
  std::vector<std::string> out;
  const int group = re.NumberOfCapturingGroups() > 0 ? 1 : 0;
  re2::StringPiece input(text);
  re2::StringPiece sub[2];
  std::size_t pos = 0;
  while (pos <= text.size() &&
         re.Match(input, pos, text.size(), re2::RE2::UNANCHORED, sub, group + 1)) {
    out.emplace_back(sub[group].data(), sub[group].size());
    const std::size_t match_end =
        static_cast<std::size_t>(sub[0].data() - text.data()) + sub[0].size();
    pos = sub[0].empty() ? match_end + 1 : match_end;  // never loop on an empty match
  }
  return out;
}

// Pointer, then JSON-in-a-string: the part of extraction before any regex.
Expected<json> locate(const Extractor& ex, const json& doc) {
  const json* v = resolve_pointer(doc, ex.pointer);
  if (!v) return make_error("JSON pointer \"" + ex.pointer + "\" does not resolve");
  if (!ex.json_pointer) return *v;
  if (!v->is_string()) {
    return make_error("the value at \"" + ex.pointer + "\" is not a string holding JSON");
  }
  const auto& text = v->get_ref<const std::string&>();
  json inner = parse_json(text);
  if (inner.is_discarded()) {
    const std::string where = "the text at \"" + ex.pointer + "\"";
    return make_error(json_nests_deeper(text) ? json_too_deep(where)
                                              : where + " is not valid JSON");
  }
  const json* w = resolve_pointer(inner, *ex.json_pointer);
  if (!w) return make_error("JSON pointer \"" + *ex.json_pointer + "\" does not resolve");
  return *w;
}

}  // namespace

bool valid_pointer(std::string_view pointer) {
  if (pointer.empty()) return true;
  if (pointer.front() != '/') return false;
  for (std::size_t i = 0; i < pointer.size(); ++i) {
    if (pointer[i] == '~' &&
        (i + 1 >= pointer.size() || (pointer[i + 1] != '0' && pointer[i + 1] != '1'))) {
      return false;
    }
  }
  return true;
}

const json* resolve_pointer(const json& doc, std::string_view pointer) {
  if (!valid_pointer(pointer)) return nullptr;
  const json* cur = &doc;
  std::size_t pos = 0;
  while (pos < pointer.size()) {
    const std::size_t next = pointer.find('/', pos + 1);
    const std::string_view raw = pointer.substr(
        pos + 1, next == std::string_view::npos ? std::string_view::npos : next - pos - 1);
    std::string token;
    for (std::size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '~') {
        token.push_back(raw[i + 1] == '0' ? '~' : '/');
        ++i;
      } else {
        token.push_back(raw[i]);
      }
    }
    if (cur->is_object()) {
      const auto it = cur->find(token);
      if (it == cur->end()) return nullptr;
      cur = &*it;
    } else if (cur->is_array()) {
      // "-1" is the last element (the latest message, say), "-2" the one before it.
      const bool from_end = token.size() > 1 && token[0] == '-';
      if (from_end) token.erase(0, 1);
      if (token.empty() || token.size() > 9 || (token.size() > 1 && token[0] == '0') ||
          !std::all_of(token.begin(), token.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return nullptr;
      }
      const std::size_t n = std::stoul(token);
      if (from_end ? n == 0 || n > cur->size() : n >= cur->size()) return nullptr;
      cur = &(*cur)[from_end ? cur->size() - n : n];
    } else {
      return nullptr;
    }
    if (next == std::string_view::npos) break;
    pos = next;
  }
  return cur;
}

Expected<json> render_text(std::string_view text, const Bindings& vars) {
  const MustacheScan scan = scan_mustache(text);
  if (scan.error) return make_error("malformed template: " + scan.error->message);
  if (scan.tags.empty()) return json(std::string(text));
  if (scan.whole_variable) {
    const json* v = lookup(vars, scan.tags[0].name);
    if (!v) return make_error("variable \"" + scan.tags[0].name + "\" is not bound");
    return *v;
  }
  mustache::data data{mustache::data::type::object};
  std::set<std::string, std::less<>> added;
  for (const MustacheTag& tag : scan.tags) {
    if (tag.type == MustacheTag::Type::comment || tag.type == MustacheTag::Type::end) continue;
    if (tag.name == ".") continue;
    const std::string root(root_name(tag.name));
    const auto it = vars.find(root);
    if (it == vars.end()) {
      // Inside a section a name may be a field of the current item; kainjow resolves it.
      if (tag.section_depth > 0) continue;
      return make_error("variable \"" + root + "\" is not bound");
    }
    if (!added.insert(root).second) continue;
    // Booleans as text are "true"/"false", as sections truthy/falsy: keep them booleans only
    // where they open a section.
    const bool opens_section =
        tag.type == MustacheTag::Type::section || tag.type == MustacheTag::Type::inverted;
    if (it->second.is_boolean() && !opens_section) {
      data.set(root, mustache::data{text_of(it->second)});
    } else {
      data.set(root, to_data(it->second));
    }
  }
  mustache::mustache tmpl{std::string(text)};
  if (!tmpl.is_valid()) return make_error("malformed template: " + tmpl.error_message());
  tmpl.set_custom_escape([](const std::string& s) { return s; });  // prompts are not HTML
  return json(tmpl.render(data));
}

Expected<RenderedRequest> render_stage(const Stage& stage, const Bindings& vars) {
  RenderedRequest out;
  out.endpoint = stage.endpoint();
  switch (stage.kind) {
    case StageKind::user:
      return make_error("stage \"" + stage.name + "\" waits for a user; it has no request");
    case StageKind::model: {
      auto body = render_tree(stage.request, vars);
      if (!body) return make_error("stage \"" + stage.name + "\": " + body.error().message);
      out.body = std::move(*body);
      if (!out.body.is_object()) {
        return make_error("stage \"" + stage.name + "\": the request body is not an object");
      }
      out.body["model"] = stage.model;
      for (const auto& [k, v] : stage.params.items())
        out.body[k] = v;
      if (translated(stage.api)) {
        // Rendered in its protocol, run as the chat completion that translates to: the very
        // request a call of that protocol becomes at the gateway.
        out.wire = out.body;
        auto chat = protocols::to_chat(protocol_of(stage.api), out.wire);
        if (!chat.ok())
          return make_error("stage \"" + stage.name + "\": the " +
                            std::string(to_string(stage.api)) +
                            " request cannot be translated: " + chat.refused.message);
        out.body = std::move(chat.chat);
      }
      break;
    }
    case StageKind::tool: {
      auto args = render_tree(stage.arguments, vars);
      if (!args) return make_error("stage \"" + stage.name + "\": " + args.error().message);
      out.body = std::move(*args);
      break;
    }
  }
  for (const auto* keys : {&stage.reads, &stage.writes}) {
    for (const std::string& key : *keys) {
      auto r = render_text(key, vars);
      if (!r) return make_error("stage \"" + stage.name + "\": record key: " + r.error().message);
      (keys == &stage.reads ? out.reads : out.writes).push_back(text_of(*r));
    }
  }
  return out;
}

Expected<json> extract(const Extractor& ex, const json& doc) {
  auto located = locate(ex, doc);
  if (!located || !ex.regex) return located;
  if (!ex.regex->ok()) return make_error("invalid regular expression");
  const std::string text = text_of(*located);
  auto matches = all_matches(*ex.regex, text);
  if (matches.empty()) {
    return make_error("regular expression \"" + ex.regex_source.value_or("") + "\" does not match");
  }
  return json(std::move(matches.front()));
}

namespace {

Expected<Bindings> apply_all(const Stage& stage,
                             const std::vector<std::pair<std::string, Extractor>>& rules,
                             const json& doc, const char* what) {
  Bindings out;
  for (const auto& [name, ex] : rules) {
    auto v = extract(ex, doc);
    if (!v) {
      return make_error("stage \"" + stage.name + "\": " + what + " \"" + name +
                        "\": " + v.error().message);
    }
    out.emplace(name, std::move(*v));
  }
  return out;
}

}  // namespace

Expected<Bindings> bind_request(const Stage& stage, const json& request_body) {
  return apply_all(stage, stage.bind, request_body, "binding");
}

Expected<Bindings> read_outputs(const Stage& stage, const json& response) {
  if (!translated(stage.api)) return apply_all(stage, stage.outputs, response, "output");
  auto in_protocol = answer_in(stage.api, response);
  if (!in_protocol)
    return make_error("stage \"" + stage.name + "\": the answer is not a chat completion");
  return apply_all(stage, stage.outputs, *in_protocol, "output");
}

std::optional<json> answer_in(ModelApi api, const json& response) {
  if (!translated(api)) return response;
  return protocols::answer_of(protocol_of(api), json::object(), response);
}

namespace {

// The selected text, trimmed and mapped: what read_selection and emitted_selection share.
SelectionResult finish_selection(const Decision& decision, std::string text) {
  SelectionResult out;
  text = trim(std::move(text));
  if (!decision.selection.map.empty()) {
    const auto it = decision.selection.map.find(text);
    if (it == decision.selection.map.end()) {
      out.reason = "\"" + text + "\" is not in the selection map";
      return out;
    }
    text = it->second;
  }
  if (text.empty()) {
    out.reason = "the selection is empty";
    return out;
  }
  out.status = SelectionResult::Status::selected;
  out.value = std::move(text);
  return out;
}

// The JSON pointer of a path of keys and indices (keys escaped as RFC 6901 has it).
std::string pointer_of(const std::vector<std::string>& path) {
  std::string out;
  for (const auto& token : path) {
    out.push_back('/');
    for (const char c : token) {
      if (c == '~')
        out += "~0";
      else if (c == '/')
        out += "~1";
      else
        out.push_back(c);
    }
  }
  return out;
}

// Reads a JSON text that may stop anywhere and finds the first string at `target` whose
// closing quote is in it: nothing decoded later can change that string. (Numbers and literals
// are left out: "12" may still become "123".)
class CompleteStringAt : public nlohmann::json_sax<json> {
 public:
  explicit CompleteStringAt(std::string target) : target_(std::move(target)) {}
  std::optional<std::string> found;

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool string(string_t& s) override {
    if (pointer_of(path_) == target_) {
      found = s;
      return false;  // done: stop reading
    }
    return value();
  }
  bool start_object(std::size_t) override {
    if (frames_.size() >= kMaxJsonDepth) return false;  // no selection sits that deep
    frames_.push_back(Frame{true, 0});
    path_.emplace_back();  // the key comes next
    return true;
  }
  bool key(string_t& k) override {
    path_.back() = k;
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override {
    if (frames_.size() >= kMaxJsonDepth) return false;
    frames_.push_back(Frame{false, 0});
    path_.push_back("0");
    return true;
  }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;  // the text stops here (or is not JSON): what was found stands
  }

 private:
  struct Frame {
    bool object = false;
    std::size_t index = 0;
  };
  // A value ended: the next element of an array has the next index.
  bool value() {
    if (!frames_.empty() && !frames_.back().object)
      path_.back() = std::to_string(++frames_.back().index);
    return true;
  }
  bool close() {
    frames_.pop_back();
    path_.pop_back();
    return value();  // the container itself was a value of its parent
  }

  std::string target_;
  std::vector<Frame> frames_;
  std::vector<std::string> path_;
};

// The value every match of `re` in `text` captures; nullopt when none matches or two differ.
std::optional<std::string> sole_match(const re2::RE2& re, const std::string& text) {
  const auto matches = all_matches(re, text);
  if (matches.empty() || std::set<std::string>(matches.begin(), matches.end()).size() > 1)
    return std::nullopt;
  return matches.front();
}

}  // namespace

SelectionResult read_selection(const Decision& decision, const json& chat_output) {
  using Status = SelectionResult::Status;
  SelectionResult out;
  std::optional<json> in_protocol;
  if (translated(decision.selection.api)) {
    in_protocol = answer_in(decision.selection.api, chat_output);
    if (!in_protocol) {
      out.reason = "the deciding stage's answer is not a chat completion";
      return out;
    }
  }
  const json& decider_output = in_protocol ? *in_protocol : chat_output;
  const Extractor& ex = decision.selection.extract;
  auto located = locate(ex, decider_output);
  if (!located) {
    out.reason = located.error().message;
    return out;
  }
  std::string text;
  if (ex.regex) {
    const auto matches = all_matches(*ex.regex, text_of(*located));
    if (matches.empty()) {
      out.reason = "the selection regex does not match";
      return out;
    }
    const std::set<std::string> distinct(matches.begin(), matches.end());
    if (distinct.size() > 1) {
      out.status = Status::ambiguous;
      out.reason =
          "the selection regex matches " + std::to_string(distinct.size()) + " different values";
      return out;
    }
    text = matches.front();
  } else {
    text = text_of(*located);
  }
  return finish_selection(decision, std::move(text));
}

std::optional<std::string> emitted_selection(const Decision& decision, const json& partial_output) {
  const Extractor& ex = decision.selection.extract;
  const json* v = resolve_pointer(partial_output, ex.pointer);
  if (!v || !v->is_string()) return std::nullopt;
  const auto& decoded = v->get_ref<const std::string&>();
  std::string text;
  if (ex.json_pointer) {
    CompleteStringAt reader(*ex.json_pointer);
    json::sax_parse(decoded, &reader, json::input_format_t::json, /*strict=*/false);
    if (!reader.found) return std::nullopt;
    text = std::move(*reader.found);
    if (ex.regex) {
      auto one = sole_match(*ex.regex, text);
      if (!one) return std::nullopt;
      text = std::move(*one);
    }
  } else if (ex.regex) {
    // Complete lines only: a match the next token could still extend or join is not read.
    const auto end = decoded.rfind('\n');
    if (end == std::string::npos) return std::nullopt;
    auto one = sole_match(*ex.regex, decoded.substr(0, end + 1));
    if (!one) return std::nullopt;
    text = std::move(*one);
  } else if (ex.pointer.ends_with("/function/name")) {
    text = decoded;  // a tool call's name comes whole, in the call's first delta
  } else {
    return std::nullopt;  // the whole text: only the end of the decode says it is complete
  }
  auto sel = finish_selection(decision, std::move(text));
  if (sel.status != SelectionResult::Status::selected) return std::nullopt;
  return std::move(sel.value);
}

std::vector<std::string> extract_candidates(const CandidateSource& source, const json& output) {
  std::vector<std::string> found;
  auto located = locate(source.extract, output);
  if (!located) return found;
  std::vector<std::string> texts;
  if (located->is_array()) {
    for (const auto& item : *located)
      texts.push_back(text_of(item));
  } else {
    texts.push_back(text_of(*located));
  }
  for (const std::string& t : texts) {
    if (source.extract.regex) {
      for (auto& m : all_matches(*source.extract.regex, t))
        found.push_back(trim(std::move(m)));
    } else {
      found.push_back(trim(t));
    }
  }
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (auto& c : found) {
    if (c.empty() || !seen.insert(c).second) continue;
    out.push_back(std::move(c));
    if (static_cast<int>(out.size()) >= source.max) break;
  }
  return out;
}

Expected<RenderedRequest> render_draft(const CandidateSource& source, const Bindings& vars,
                                       int index) {
  Stage stage;
  stage.kind = StageKind::model;
  stage.model = source.model;
  stage.params = source.params;
  stage.request = source.request;
  auto rendered = render_stage(stage, vars);
  if (!rendered) return rendered;
  return draft_sample(std::move(*rendered), index);
}

RenderedRequest draft_sample(RenderedRequest first, int index) {
  if (!first.body.is_object()) return first;
  const auto given = first.body.find("seed");
  const std::int64_t seed0 =
      given != first.body.end() && given->is_number_integer() ? given->get<std::int64_t>() : 0;
  first.body["seed"] = seed0 + index;
  return first;
}

}  // namespace dynrt::dsl

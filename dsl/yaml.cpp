#include "dsl/yaml.hpp"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace dynrt::dsl::yaml {

const MapEntry* Node::find(std::string_view key) const {
  for (const MapEntry& e : entries) {
    if (e.key.is_scalar() && e.key.value == key) return &e;
  }
  return nullptr;
}

const Node* Node::get(std::string_view key) const {
  const MapEntry* e = find(key);
  return e ? &e->value : nullptr;
}

// ---------------------------------------------------------------------------------------------
// Encoding

namespace {

std::string hex_byte(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", b);
  return buf;
}

std::string code_point_name(std::uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", cp);
  return buf;
}

// YAML 1.2 c-printable, minus what check_encoding reports separately.
bool is_printable(std::uint32_t cp) {
  if (cp == 0x09 || cp == 0x0A || cp == 0x0D) return true;
  if (cp >= 0x20 && cp <= 0x7E) return true;
  if (cp == 0x85) return true;
  if (cp >= 0xA0 && cp <= 0xD7FF) return true;
  if (cp >= 0xE000 && cp <= 0xFFFD) return true;
  return cp >= 0x10000 && cp <= 0x10FFFF;
}

}  // namespace

std::optional<EncodingProblem> check_encoding(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char b = s[i];
    std::uint32_t cp = 0;
    std::size_t len = 0;
    if (b < 0x80) {
      cp = b;
      len = 1;
    } else if (b >= 0xC2 && b <= 0xDF) {
      cp = b & 0x1Fu;
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      cp = b & 0x0Fu;
      len = 3;
    } else if (b >= 0xF0 && b <= 0xF4) {
      cp = b & 0x07u;
      len = 4;
    } else {
      return EncodingProblem{i, "invalid UTF-8: byte " + hex_byte(b) +
                                    " cannot start a character (is the file Latin-1? save it "
                                    "as UTF-8)"};
    }
    if (i + len > n) {
      return EncodingProblem{i, "invalid UTF-8: the file ends inside a multi-byte character"};
    }
    for (std::size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) {
        return EncodingProblem{i, "invalid UTF-8: byte " + hex_byte(b) +
                                      " starts a character that the next byte does not "
                                      "complete (is the file Latin-1? save it as UTF-8)"};
      }
      cp = (cp << 6) | (s[i + k] & 0x3Fu);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
      return EncodingProblem{i, "invalid UTF-8: overlong or out-of-range encoding"};
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) {
      return EncodingProblem{i, "invalid UTF-8: encoded surrogate " + code_point_name(cp)};
    }
    if (!is_printable(cp)) {
      return EncodingProblem{i, "control character " + code_point_name(cp) +
                                    " is not allowed in YAML; escape it in a double-quoted "
                                    "string"};
    }
    i += len;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Scalars

namespace {

constexpr std::string_view kTagPrefix = "tag:yaml.org,2002:";

bool all_of(std::string_view s, bool (*pred)(char)) {
  return !s.empty() && std::all_of(s.begin(), s.end(), pred);
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_octal(char c) {
  return c >= '0' && c <= '7';
}
bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

bool is_core_int(std::string_view s) {
  if (s.starts_with("0o")) return all_of(s.substr(2), is_octal);
  if (s.starts_with("0x")) return all_of(s.substr(2), is_hex);
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  return all_of(s, is_digit);
}

bool is_core_float(std::string_view s) {
  if (s == ".nan" || s == ".NaN" || s == ".NAN") return true;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  if (s == ".inf" || s == ".Inf" || s == ".INF") return true;
  // [0-9]+ (\. [0-9]*)? | \. [0-9]+ , then an optional exponent
  std::size_t i = 0;
  const std::size_t int_digits = [&] {
    std::size_t k = 0;
    while (i < s.size() && is_digit(s[i]))
      ++i, ++k;
    return k;
  }();
  std::size_t frac_digits = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && is_digit(s[i]))
      ++i, ++frac_digits;
  }
  if (int_digits == 0 && frac_digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    std::size_t exp_digits = 0;
    while (i < s.size() && is_digit(s[i]))
      ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == s.size();
}

}  // namespace

ScalarType resolve(const Node& node) {
  if (node.kind == Kind::null) return ScalarType::null;
  if (!node.tag.empty()) {
    const std::string_view t = std::string_view(node.tag).substr(kTagPrefix.size());
    if (t == "null") return ScalarType::null;
    if (t == "bool") return ScalarType::boolean;
    if (t == "int") return ScalarType::integer;
    if (t == "float") return ScalarType::floating;
    return ScalarType::string;
  }
  if (node.style != Style::plain) return ScalarType::string;
  const std::string_view v = node.value;
  if (v.empty() || v == "~" || v == "null" || v == "Null" || v == "NULL") return ScalarType::null;
  if (v == "true" || v == "True" || v == "TRUE" || v == "false" || v == "False" || v == "FALSE") {
    return ScalarType::boolean;
  }
  if (is_core_int(v)) return ScalarType::integer;
  if (is_core_float(v)) return ScalarType::floating;
  return ScalarType::string;
}

std::optional<double> number_value(const Node& node) {
  const ScalarType t = resolve(node);
  if (node.kind != Kind::scalar || (t != ScalarType::integer && t != ScalarType::floating)) {
    return std::nullopt;
  }
  const std::string& v = node.value;
  if (t == ScalarType::integer && (v.starts_with("0x") || v.starts_with("0o"))) {
    const int base = v[1] == 'x' ? 16 : 8;
    return static_cast<double>(std::strtoull(v.c_str() + 2, nullptr, base));
  }
  std::string s = v;
  const auto dot_inf = s.find(".inf");
  if (dot_inf != std::string::npos || s.find(".Inf") != std::string::npos ||
      s.find(".INF") != std::string::npos) {
    return s[0] == '-' ? -HUGE_VAL : HUGE_VAL;
  }
  if (s.find(".nan") != std::string::npos || s.find(".NaN") != std::string::npos ||
      s.find(".NAN") != std::string::npos) {
    return std::nan("");
  }
  return std::strtod(s.c_str(), nullptr);
}

std::string_view describe(const Node& node) {
  switch (node.kind) {
    case Kind::null:
      return "an empty value";
    case Kind::sequence:
      return "a list";
    case Kind::mapping:
      return "a mapping";
    case Kind::scalar:
      break;
  }
  switch (resolve(node)) {
    case ScalarType::null:
      return "null";
    case ScalarType::boolean:
      return "a boolean";
    case ScalarType::integer:
      return "an integer";
    case ScalarType::floating:
      return "a number";
    case ScalarType::string:
      break;
  }
  return node.style == Style::plain ? "a string" : "a quoted string";
}

bool is_yaml11_boolean(const Node& node) {
  if (node.kind != Kind::scalar || node.style != Style::plain || !node.tag.empty()) return false;
  std::string lower = node.value;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower == "yes" || lower == "no" || lower == "on" || lower == "off" || lower == "y" ||
         lower == "n";
}

// ---------------------------------------------------------------------------------------------
// The event-driven tree builder

namespace {

struct Abort {};  // thrown from the handler to stop yaml-cpp once a fatal finding is recorded

bool is_space(char c) {
  return c == ' ' || c == '\t';
}
bool is_break(char c) {
  return c == '\n' || c == '\r';
}

class Builder final : public YAML::EventHandler {
 public:
  Builder(const SourceFile& file, const Limits& limits, DiagnosticSink& sink)
      : file_(file), text_(file.text()), limits_(limits), sink_(sink) {}

  std::optional<Node>& root() { return root_; }
  int documents() const { return documents_; }

  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents_ > 1) {
      sink_.add(Rule::multi_document, point(mark),
                "a second YAML document starts here; a template file holds exactly one "
                "document (split it into two files)");
      throw Abort{};
    }
  }
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    Node n;
    n.kind = Kind::null;
    n.span = point(mark);
    complete(std::move(n), anchor);
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    const std::size_t at = offset(mark);
    Span span{at, alias_end(at)};
    if (open_.count(anchor) != 0) {
      sink_.add(Rule::alias_cycle, span,
                "alias " + std::string(token(span)) +
                    " refers to the collection that contains it, which would be infinite");
      throw Abort{};
    }
    const auto it = anchors_.find(anchor);
    if (it == anchors_.end()) {  // yaml-cpp reports undefined anchors itself; be safe anyway
      sink_.add(Rule::invalid_yaml, span, "alias refers to an undefined anchor");
      throw Abort{};
    }
    charge(it->second.size, span, "alias expansion");
    Node copy = it->second.node;
    copy.span =
        span;  // findings about the whole value point at the alias; inner ones at the anchor
    complete(std::move(copy), 0, /*counted=*/true);
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    const std::size_t at = offset(mark);
    if (value.size() > limits_.max_scalar_bytes) {
      sink_.add(Rule::resource_limit, Span{at, at + 1},
                "scalar of " + std::to_string(value.size()) + " bytes exceeds the limit of " +
                    std::to_string(limits_.max_scalar_bytes) + " bytes");
      throw Abort{};
    }
    Node n;
    n.kind = Kind::scalar;
    n.value = value;
    const std::size_t content = skip_properties(at);
    n.style = scalar_style(tag, content);
    n.tag = standard_tag(tag, Span{at, content});
    n.span = Span{at, scalar_end(n, content)};
    complete(std::move(n), anchor);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value style) override {
    start_collection(mark, tag, anchor, style, Kind::sequence);
  }
  void OnSequenceEnd() override { end_collection(); }

  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value style) override {
    start_collection(mark, tag, anchor, style, Kind::mapping);
  }
  void OnMapEnd() override { end_collection(); }

 private:
  struct Frame {
    Node node;
    YAML::anchor_t anchor = 0;
    std::optional<Node> pending_key;
    std::unordered_map<std::string, std::size_t> keys;  // key -> offset of its first definition
  };
  struct Anchored {
    Node node;
    std::size_t size = 0;
  };

  std::size_t offset(const YAML::Mark& mark) const {
    if (mark.is_null() || mark.pos < 0) return 0;
    return std::min(static_cast<std::size_t>(mark.pos), text_.size());
  }
  Span point(const YAML::Mark& mark) const {
    const std::size_t at = offset(mark);
    return Span{at, at};
  }
  std::string_view token(Span s) const {
    return std::string_view(text_).substr(s.begin, s.end - s.begin);
  }

  std::size_t alias_end(std::size_t at) const {
    std::size_t i = at + 1;
    while (i < text_.size() && !is_space(text_[i]) && !is_break(text_[i]) && text_[i] != ',' &&
           text_[i] != ']' && text_[i] != '}') {
      ++i;
    }
    return i;
  }

  // Skips `&anchor` and `!tag` properties that precede a node's content.
  std::size_t skip_properties(std::size_t at) const {
    while (at < text_.size() && (text_[at] == '&' || text_[at] == '!')) {
      while (at < text_.size() && !is_space(text_[at]) && !is_break(text_[at]))
        ++at;
      while (at < text_.size() && is_space(text_[at]))
        ++at;
    }
    return at;
  }

  Style scalar_style(const std::string& tag, std::size_t content) const {
    const char c = content < text_.size() ? text_[content] : '\0';
    if (tag == "?") return Style::plain;
    switch (c) {
      case '"':
        return Style::double_quoted;
      case '\'':
        return Style::single_quoted;
      case '|':
        return Style::literal;
      case '>':
        return Style::folded;
      default:
        return Style::plain;  // an explicitly tagged plain scalar
    }
  }

  std::string standard_tag(const std::string& tag, Span where) {
    if (tag.empty() || tag == "?" || tag == "!") return {};
    if (tag.starts_with(kTagPrefix)) {
      const std::string_view name = std::string_view(tag).substr(kTagPrefix.size());
      if (name == "str" || name == "int" || name == "float" || name == "bool" || name == "null" ||
          name == "seq" || name == "map") {
        return tag;
      }
    }
    sink_.add(Rule::unsupported_yaml, where,
              "tag \"" + tag +
                  "\" is not supported; templates use plain YAML values and the standard "
                  "!!str, !!int, !!float, !!bool and !!null tags");
    return {};
  }

  std::size_t scalar_end(const Node& n, std::size_t content) const {
    const std::size_t size = text_.size();
    switch (n.style) {
      case Style::double_quoted:
      case Style::single_quoted: {
        const char q = text_[content];
        std::size_t i = content + 1;
        while (i < size) {
          if (q == '"' && text_[i] == '\\') {
            i += 2;
            continue;
          }
          if (text_[i] == q) {
            if (q == '\'' && i + 1 < size && text_[i + 1] == '\'') {
              i += 2;
              continue;
            }
            return i + 1;
          }
          ++i;
        }
        return size;
      }
      case Style::literal:
      case Style::folded:
        return block_scalar_end(content);
      default:
        break;
    }
    if (text_.compare(content, n.value.size(), n.value) == 0) return content + n.value.size();
    // A plain scalar folded over several lines: cover the rest of its first line.
    std::size_t end = content;
    while (end < size && !is_break(text_[end])) {
      if (text_[end] == '#' && end > content && is_space(text_[end - 1])) break;
      ++end;
    }
    while (end > content && is_space(text_[end - 1]))
      --end;
    return end;
  }

  // A block scalar's content is every following line indented at least as deep as its first
  // non-blank line (YAML 1.2 section 8.1.1.1, auto-detected indentation).
  std::size_t block_scalar_end(std::size_t indicator) const {
    const std::size_t size = text_.size();
    std::size_t line = text_.find('\n', indicator);
    std::size_t end = line == std::string::npos ? size : line;
    if (line == std::string::npos) return end;
    std::size_t indent = 0;
    for (std::size_t pos = line + 1; pos < size;) {
      std::size_t next = text_.find('\n', pos);
      if (next == std::string::npos) next = size;
      std::size_t spaces = 0;
      while (pos + spaces < next && text_[pos + spaces] == ' ')
        ++spaces;
      const bool blank =
          pos + spaces == next || (pos + spaces + 1 == next && text_[next - 1] == '\r');
      if (!blank) {
        if (indent == 0) indent = spaces;
        if (spaces < indent || indent == 0) break;
        end = next;
        if (end > pos && text_[end - 1] == '\r') --end;
      }
      pos = next + 1;
    }
    return end;
  }

  void charge(std::size_t nodes, Span where, const char* what) {
    nodes_ += nodes;
    if (nodes_ > limits_.max_nodes) {
      sink_.add(Rule::resource_limit, where,
                std::string(what) + " exceeds the limit of " + std::to_string(limits_.max_nodes) +
                    " YAML nodes (an alias bomb?)");
      throw Abort{};
    }
  }

  static std::size_t count(const Node& n) {
    std::size_t c = 1;
    for (const Node& item : n.items)
      c += count(item);
    for (const MapEntry& e : n.entries)
      c += count(e.key) + count(e.value);
    return c;
  }

  void start_collection(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                        YAML::EmitterStyle::value style, Kind kind) {
    const std::size_t at = offset(mark);
    if (stack_.size() >= limits_.max_depth) {
      sink_.add(Rule::resource_limit, Span{at, at + 1},
                "collections nest deeper than the limit of " + std::to_string(limits_.max_depth) +
                    " levels");
      throw Abort{};
    }
    Frame f;
    f.node.kind = kind;
    f.node.style = style == YAML::EmitterStyle::Flow ? Style::flow : Style::block;
    f.node.tag = standard_tag(tag, Span{at, skip_properties(at)});
    f.node.span = Span{at, at + 1};
    f.anchor = anchor;
    if (anchor != 0) open_.insert(anchor);
    stack_.push_back(std::move(f));
  }

  void end_collection() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    Node& n = f.node;
    std::size_t end = n.span.end;
    for (const Node& item : n.items)
      end = std::max(end, item.span.end);
    for (const MapEntry& e : n.entries)
      end = std::max(end, e.value.span.end);
    if (n.style == Style::flow) {  // include the closing bracket
      const char close = n.kind == Kind::sequence ? ']' : '}';
      const std::size_t pos = text_.find(close, end);
      if (pos != std::string::npos) end = pos + 1;
    }
    n.span.end = end;
    if (f.anchor != 0) open_.erase(f.anchor);
    complete(std::move(n), f.anchor);
  }

  void complete(Node n, YAML::anchor_t anchor, bool counted = false) {
    if (!counted) charge(1, n.span, "the document");
    if (anchor != 0) {
      const std::size_t size = count(n);
      charge(size, n.span, "anchored node");
      anchors_[anchor] = Anchored{n, size};
    }
    if (stack_.empty()) {
      root_ = std::move(n);
      return;
    }
    Frame& parent = stack_.back();
    if (parent.node.kind == Kind::sequence) {
      parent.node.items.push_back(std::move(n));
      return;
    }
    if (!parent.pending_key) {
      check_key(n);
      parent.pending_key = std::move(n);
      return;
    }
    Node key = std::move(*parent.pending_key);
    parent.pending_key.reset();
    if (n.kind == Kind::null && n.span.begin > key.span.end) {
      n.span = Span{key.span.end, key.span.end};  // yaml-cpp marks an empty value at the next token
    }
    if (key.kind == Kind::scalar) {
      const auto [it, inserted] = parent.keys.emplace(key.value, key.span.begin);
      if (!inserted) {
        const Position first = file_.position(it->second);
        sink_.add(Rule::duplicate_key, key.span,
                  "duplicate key \"" + key.value + "\"; it is first defined at line " +
                      std::to_string(first.line) + ", column " + std::to_string(first.column) +
                      ", and YAML parsers silently keep only one of them");
        return;  // keep the first definition
      }
    }
    parent.node.entries.push_back(MapEntry{std::move(key), std::move(n)});
  }

  void check_key(const Node& key) {
    // `content: {{query}}` unquoted: YAML reads a flow mapping whose key is the mapping
    // {query: null}. Say what was meant, since "a mapping key" is not what the author wrote.
    const std::size_t b = key.span.begin;
    if (key.kind == Kind::mapping && b > 0 && b < text_.size() && text_[b - 1] == '{' &&
        text_[b] == '{') {
      const std::size_t close = text_.find("}}", b);
      if (close != std::string::npos && close < text_.find('\n', b) &&
          text_.find_first_of(":,{}", b + 1) == close) {  // a tag's name, not YAML of its own
        const std::string tag = text_.substr(b - 1, close + 3 - b);
        sink_.add(Rule::unsupported_yaml, Span{b - 1, close + 2},
                  "YAML reads an unquoted " + tag + " as a mapping, not as text; quote it: \"" +
                      tag + "\"");
        return;
      }
    }
    if (key.kind == Kind::sequence || key.kind == Kind::mapping) {
      sink_.add(Rule::unsupported_yaml, key.span,
                "mapping keys must be plain scalars, not " + std::string(describe(key)));
    } else if (key.kind == Kind::scalar && key.style == Style::plain && key.value == "<<") {
      sink_.add(Rule::unsupported_yaml, key.span,
                "merge keys (<<) are not supported; write the keys out, or alias a whole value");
    }
  }

  const SourceFile& file_;
  const std::string& text_;
  const Limits& limits_;
  DiagnosticSink& sink_;
  std::vector<Frame> stack_;
  std::optional<Node> root_;
  std::unordered_map<YAML::anchor_t, Anchored> anchors_;
  std::unordered_set<YAML::anchor_t> open_;
  std::size_t nodes_ = 0;
  int documents_ = 0;
};

// yaml-cpp's messages are terse; say what usually causes them.
std::string explain_parser_message(const std::string& msg) {
  if (msg == "illegal map value") {
    return "unexpected ':' here; quote a value that contains \": \" or fix the indentation";
  }
  if (msg == "end of map not found" || msg == "end of sequence not found") {
    return msg + "; check the indentation of the lines above";
  }
  if (msg == "illegal block entry") return "unexpected '-' list item here; check the indentation";
  if (msg == "bad file") return "the parser gave up on this input (nesting too deep?)";
  return msg;
}

}  // namespace

std::optional<Node> parse_yaml(const SourceFile& file, const Limits& limits, DiagnosticSink& sink) {
  Builder builder(file, limits, sink);
  std::istringstream in(file.text());
  try {
    YAML::Parser parser(in);
    if (!parser.HandleNextDocument(builder)) {
      sink.add(Rule::empty_file, Span{0, 0},
               "the file holds no YAML document; a template starts with `version: 1`");
      return std::nullopt;
    }
    parser.HandleNextDocument(builder);  // a second document is reported by the builder
  } catch (const Abort&) {
    // The finding is already recorded. A second document still leaves the first usable.
    if (builder.documents() > 1) return std::move(builder.root());
    return std::nullopt;
  } catch (const YAML::Exception& e) {
    std::size_t at = e.mark.is_null() || e.mark.pos < 0 ? 0 : static_cast<std::size_t>(e.mark.pos);
    at = std::min(at, file.text().size());
    sink.add(Rule::invalid_yaml, Span{at, at}, explain_parser_message(e.msg));
    return std::nullopt;
  } catch (const std::exception& e) {
    sink.add(Rule::invalid_yaml, Span{0, 0}, std::string("the YAML parser failed: ") + e.what());
    return std::nullopt;
  }
  return std::move(builder.root());
}

}  // namespace dynrt::dsl::yaml

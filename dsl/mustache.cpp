#include "dsl/mustache.hpp"

namespace dynrt::dsl {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

bool valid_tag_name(std::string_view name) {
  if (name == ".") return true;
  if (name.empty() || name.front() == '.' || name.back() == '.') return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return name.find("..") == std::string_view::npos;
}

}  // namespace

std::string_view root_name(std::string_view name) {
  if (name == ".") return name;
  const auto dot = name.find('.');
  return dot == std::string_view::npos ? name : name.substr(0, dot);
}

MustacheScan scan_mustache(std::string_view text) {
  MustacheScan out;
  std::vector<std::size_t> open;  // indices into out.tags of unclosed sections
  std::size_t pos = 0;
  auto fail = [&](std::size_t offset, std::size_t length, std::string message) {
    out.error = MustacheError{offset, length, std::move(message)};
    return out;
  };
  while (true) {
    const std::size_t start = text.find("{{", pos);
    if (start == std::string_view::npos) break;
    const bool triple = text.compare(start, 3, "{{{") == 0;
    const std::string_view close = triple ? "}}}" : "}}";
    const std::size_t body_begin = start + (triple ? 3 : 2);
    const std::size_t end = text.find(close, body_begin);
    if (end == std::string_view::npos) {
      return fail(start, text.size() - start,
                  "unclosed mustache tag; expected \"" + std::string(close) + "\"");
    }
    std::string_view body = text.substr(body_begin, end - body_begin);
    MustacheTag tag;
    tag.offset = start;
    tag.length = end + close.size() - start;
    tag.section_depth = static_cast<int>(open.size());
    if (triple) {
      tag.type = MustacheTag::Type::unescaped;
    } else if (!body.empty()) {
      switch (body.front()) {
        case '#':
          tag.type = MustacheTag::Type::section;
          body.remove_prefix(1);
          break;
        case '^':
          tag.type = MustacheTag::Type::inverted;
          body.remove_prefix(1);
          break;
        case '/':
          tag.type = MustacheTag::Type::end;
          body.remove_prefix(1);
          break;
        case '&':
          tag.type = MustacheTag::Type::unescaped;
          body.remove_prefix(1);
          break;
        case '!':
          tag.type = MustacheTag::Type::comment;
          break;
        case '>':
          return fail(start, tag.length,
                      "mustache partials ({{> name}}) are not supported in templates");
        case '=':
          return fail(start, tag.length,
                      "mustache delimiter changes ({{=...=}}) are not supported in templates");
        default:
          break;
      }
    }
    if (tag.type != MustacheTag::Type::comment) {
      const std::string_view name = trim(body);
      if (!valid_tag_name(name)) {
        return fail(start, tag.length,
                    name.empty() ? "empty mustache tag"
                                 : "\"" + std::string(name) + "\" is not a valid variable name");
      }
      tag.name = std::string(name);
    }
    if (tag.type == MustacheTag::Type::section || tag.type == MustacheTag::Type::inverted) {
      open.push_back(out.tags.size());
    } else if (tag.type == MustacheTag::Type::end) {
      if (open.empty()) {
        return fail(start, tag.length, "{{/" + tag.name + "}} closes no open section");
      }
      const MustacheTag& opener = out.tags[open.back()];
      if (opener.name != tag.name) {
        return fail(start, tag.length,
                    "{{/" + tag.name + "}} closes section \"" + opener.name + "\"; expected {{/" +
                        opener.name + "}}");
      }
      open.pop_back();
      tag.section_depth = static_cast<int>(open.size());
    }
    out.tags.push_back(std::move(tag));
    pos = end + close.size();
  }
  if (!open.empty()) {
    const MustacheTag& t = out.tags[open.back()];
    return fail(t.offset, t.length, "section \"" + t.name + "\" is never closed");
  }
  out.whole_variable = out.tags.size() == 1 &&
                       (out.tags[0].type == MustacheTag::Type::variable ||
                        out.tags[0].type == MustacheTag::Type::unescaped) &&
                       out.tags[0].offset == 0 && out.tags[0].length == text.size();
  return out;
}

}  // namespace dynrt::dsl

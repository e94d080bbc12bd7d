// A scanner for the mustache tags in a template string, so the linter can check every
// variable reference (with its offset) before kainjow mustache ever renders it.
//
// Supported: {{name}}, {{{name}}}, {{&name}}, sections {{#name}}..{{/name}}, inverted
// sections {{^name}}..{{/name}}, comments {{! ...}}. Not supported in templates (they would
// make a rendered request depend on something other than its variables): partials {{> x}}
// and delimiter changes {{=<% %>=}}. Pure.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dynrt::dsl {

struct MustacheTag {
  enum class Type { variable, unescaped, section, inverted, end, comment };
  Type type = Type::variable;
  std::string name;        // trimmed; dotted names keep their dots
  std::size_t offset = 0;  // of "{{" in the scanned text
  std::size_t length = 0;  // through the closing braces
  int section_depth = 0;   // sections enclosing this tag
};

struct MustacheError {
  std::size_t offset = 0;
  std::size_t length = 0;
  std::string message;
};

struct MustacheScan {
  std::vector<MustacheTag> tags;
  std::optional<MustacheError> error;
  // True when the whole text is exactly one variable tag ("{{x}}"): rendering then inserts
  // the variable's JSON value itself rather than its text.
  bool whole_variable = false;
};

MustacheScan scan_mustache(std::string_view text);

// The first component of a dotted name ("a" for "a.b"); "." stays ".".
std::string_view root_name(std::string_view name);

}  // namespace dynrt::dsl

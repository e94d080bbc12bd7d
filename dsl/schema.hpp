// The shape of a workflow template, declared once.
//
// template_schema() describes every object of the language: its keys, their types, which are
// required, their ranges, enums and name patterns, and a sentence of documentation each.
// validate() checks a parsed YAML tree against it and reports unknown keys (with "did you
// mean"), wrong types, missing keys and invalid values with positions. json_schema() renders
// the same description as a JSON Schema (docs/template.schema.json is its output, and a test
// keeps the two identical), so editors, the linter and the docs cannot drift apart.
#pragma once

#include "dsl/diagnostic.hpp"
#include "dsl/yaml.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dynrt::dsl::schema {

enum class TypeKind {
  string,
  integer,
  number,
  boolean,
  object,   // fixed keys (`fields`); `open` lets other keys through
  map,      // user-chosen keys (`key_name`), values of type `item`
  list,     // values of type `item`
  variant,  // an object whose `discriminator` key selects one of `variants`
  either,   // one of `alternatives`, chosen by the YAML kind of the value
  any,      // any YAML value; a request body or a tool's arguments
};

// Name syntaxes, checked on map keys and on string values that name something.
enum class NameKind { none, identifier, stage, workflow };

struct Type;

struct Field {
  std::string_view name;
  const Type* type = nullptr;
  bool required = false;
  std::string_view doc;
  Rule missing_rule = Rule::missing_key;  // the finding a missing required key produces
};

struct Type {
  TypeKind kind = TypeKind::any;
  std::string_view name;  // a $defs entry in the JSON Schema when set
  std::string_view doc;
  std::vector<Field> fields;
  bool open = false;
  bool nullable = false;  // an empty value stands for an empty object
  const Type* item = nullptr;
  NameKind key_name = NameKind::none;
  NameKind value_name = NameKind::none;
  std::vector<std::string_view> enum_values;
  std::optional<double> minimum;
  std::optional<double> maximum;
  bool exclusive_minimum = false;
  bool non_empty = false;
  bool unique = false;
  std::string_view discriminator;
  std::vector<std::pair<std::string_view, const Type*>> variants;
  std::vector<const Type*> alternatives;
};

const Type& template_schema();

// The JSON Schema (draft 2020-12) of template_schema().
nlohmann::json json_schema();

bool valid_name(NameKind kind, std::string_view name);
std::string_view name_pattern(NameKind kind);    // as an ECMAScript regex
std::string_view name_rule_text(NameKind kind);  // for messages

// Checks `node` against `type`; `path` is the node's JSON pointer.
void validate(const yaml::Node& node, const Type& type, DiagnosticSink& sink,
              const std::string& path = "");

// JSON-pointer escaping of one reference token.
std::string pointer_token(std::string_view key);

}  // namespace dynrt::dsl::schema

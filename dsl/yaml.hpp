// YAML with source positions, hardened against hostile input.
//
// parse_yaml() drives yaml-cpp's event parser and builds its own tree, because yaml-cpp's
// YAML::Node keeps no end positions, silently keeps the last of duplicate keys and shares
// aliased nodes (so walking an alias bomb is exponential). Every node here carries its span;
// aliases are expanded as copies under a node budget; nesting depth, scalar length and file
// size are capped. Whatever goes wrong ends in a positioned finding in the sink, never an
// exception or a crash. Pure; thread-compatible.
#pragma once

#include "dsl/diagnostic.hpp"
#include "dsl/source.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dynrt::dsl::yaml {

enum class Kind { null, scalar, sequence, mapping };

// How a scalar was written; only plain scalars are resolved to numbers, booleans and null.
enum class Style { plain, single_quoted, double_quoted, literal, folded, flow, block };

// What a scalar means under the YAML 1.2 core schema (or an explicit !!tag).
enum class ScalarType { null, boolean, integer, floating, string };

struct MapEntry;

struct Node {
  Kind kind = Kind::null;
  Style style = Style::plain;
  Span span;                      // from the first character of the node to just past its end
  std::string value;              // scalars only
  std::string tag;                // an explicit standard tag ("tag:yaml.org,2002:str"), else empty
  std::vector<Node> items;        // sequences
  std::vector<MapEntry> entries;  // mappings, in document order

  bool is_null() const { return kind == Kind::null; }
  bool is_scalar() const { return kind == Kind::scalar; }
  bool is_sequence() const { return kind == Kind::sequence; }
  bool is_mapping() const { return kind == Kind::mapping; }
  // The entry for `key`, or nullptr.
  const MapEntry* find(std::string_view key) const;
  const Node* get(std::string_view key) const;
};

struct MapEntry {
  Node key;
  Node value;
};

struct Limits {
  std::size_t max_file_bytes = 4u << 20;  // templates are small; a 10 MB file is hostile
  std::size_t max_scalar_bytes = 1u << 20;
  std::size_t max_depth = 64;       // collections nested deeper than this are refused
  std::size_t max_nodes = 100'000;  // materialized nodes, alias copies included
};

// Parses the one YAML document in `file` (whose text must already be checked by
// check_encoding). Returns nullopt when nothing usable was parsed; findings go to `sink`.
std::optional<Node> parse_yaml(const SourceFile& file, const Limits& limits, DiagnosticSink& sink);

struct EncodingProblem {
  std::size_t offset;
  std::string message;
};

// The first invalid UTF-8 sequence or forbidden control character in `text`, if any.
std::optional<EncodingProblem> check_encoding(std::string_view text);

// YAML 1.2 core-schema resolution of a scalar (explicit standard tags win).
ScalarType resolve(const Node& scalar);
std::string_view describe(const Node& node);  // "a string", "a mapping", "an integer", ...

// The value of an integer or floating scalar (hex and octal included); nullopt for anything
// else. Integers beyond 64 bits keep their magnitude as a double.
std::optional<double> number_value(const Node& scalar);

// True for plain yes/no/on/off/y/n in any case: YAML 1.1 booleans, YAML 1.2 strings.
bool is_yaml11_boolean(const Node& scalar);

}  // namespace dynrt::dsl::yaml

#include "dsl/node_values.hpp"

#include "dsl/yaml_json.hpp"

#include <cmath>

namespace dynrt::dsl::detail {

using yaml::MapEntry;
using yaml::Node;
using yaml::ScalarType;

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

}  // namespace dynrt::dsl::detail

#include "dsl/yaml_json.hpp"

#include <cstdlib>
#include <exception>
#include <string>

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

}  // namespace dynrt::dsl

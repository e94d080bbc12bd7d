#include "dsl/compiler.hpp"

#include "dsl/yaml_json.hpp"
#include "runtime/canonical_json.hpp"

#include <algorithm>

namespace dynrt::dsl::detail {

using nlohmann::json;

void Compiler::fingerprints() {
  for (Stage& s : g_.stages) {
    json def = {{"kind", to_string(s.kind)}, {"reads", s.reads}};
    if (s.kind == StageKind::model) {
      def["api"] = to_string(s.api);
      def["model"] = s.model;
      def["params"] = s.params;
      def["request"] = s.request;
    } else if (s.kind == StageKind::tool) {
      def["tool"] = s.tool;
      def["arguments"] = s.arguments;
    }
    // Only when global, so that every stage written before `share` keeps its fingerprint
    // (and its stored results) while a tenant's result is never served as a shared one.
    if (s.share == Share::global) def["share"] = to_string(s.share);
    s.fingerprint = xxh3_128("dynrt.stage.v1\n" + canonical_json(def));
    std::sort(s.uses.begin(), s.uses.end());
  }
  for (Decision& d : g_.decisions) {
    Hasher128 h;
    h.add("dynrt.coordinate.v1").add(g_.workflow).add(d.name);
    d.coordinate = h.finish();
  }
  g_.fingerprint = xxh3_128("dynrt.template.v1\n" + canonical_json(to_json(root_)));
}

}  // namespace dynrt::dsl::detail

#include "engines/router.hpp"

namespace dynrt::engines {

void Router::add(std::shared_ptr<Engine> engine, const std::vector<std::string>& models) {
  const std::size_t index = engines_.size();
  engines_.push_back(std::move(engine));
  for (const auto& m : models)
    by_model_.emplace(m, index);  // the first engine to name a model keeps it
}

Router::Route Router::route(std::string_view endpoint, const nlohmann::json& body) const {
  if (is_tool_endpoint(endpoint)) return {tools_ ? Route::Kind::tool : Route::Kind::none, 0};
  if (engines_.empty()) return {};
  if (body.is_object())
    if (const auto it = body.find("model"); it != body.end() && it->is_string())
      if (const auto m = by_model_.find(it->get_ref<const std::string&>()); m != by_model_.end())
        return {Route::Kind::engine, m->second};
  return {Route::Kind::engine, 0};
}

EngineResult tool_result(const ToolResult& r, Duration took) {
  EngineResult out;
  out.body = r.output.dump();
  out.finish_reason = "stop";
  out.engine_time = took;
  return out;
}

}  // namespace dynrt::engines

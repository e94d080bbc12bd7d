// Which engine runs a call: the model a request names picks the engine that serves it (the
// first engine added also takes every model no engine names); a tool endpoint goes to the tool
// engine. The one model -> engine map of the process: the pass-through path and the actors
// both route through it. Built once, then read-only (thread-safe to read).
#pragma once

#include "engines/engine.hpp"
#include "engines/tools/tool.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dynrt::engines {

class Router {
 public:
  struct Route {
    enum class Kind { engine, tool, none };
    Kind kind = Kind::none;
    std::size_t engine = 0;  // kind == engine: the index of engines()
  };

  // Adds an engine for `models`; the first one added is the default.
  void add(std::shared_ptr<Engine> engine, const std::vector<std::string>& models);
  void set_tools(std::shared_ptr<ToolEngine> tools) { tools_ = std::move(tools); }

  Route route(std::string_view endpoint, const nlohmann::json& body) const;
  const std::vector<std::shared_ptr<Engine>>& engines() const { return engines_; }
  const std::shared_ptr<ToolEngine>& tools() const { return tools_; }

 private:
  std::vector<std::shared_ptr<Engine>> engines_;
  std::map<std::string, std::size_t, std::less<>> by_model_;
  std::shared_ptr<ToolEngine> tools_;
};

}  // namespace dynrt::engines

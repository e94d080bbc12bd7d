// What the run/ state machine tests share: engine answers, a caller, and looking into a list
// of effects (DemandEffects, FillEffects) by kind.
#pragma once

#include "run/results.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <string>
#include <variant>
#include <vector>

namespace dynrt::run::testing {

inline Caller acme() {
  Caller c;
  c.tenant = "acme";
  return c;
}

// A normal chat.completion whose message content is `content`.
inline std::string chat(const std::string& content) {
  return nlohmann::json{{"choices",
                         {{{"index", 0},
                           {"message", {{"role", "assistant"}, {"content", content}}},
                           {"finish_reason", "stop"}}}}}
      .dump();
}

inline ExecResult engine_ok(std::string body, Duration took = std::chrono::milliseconds(40)) {
  ExecResult r;
  r.ok = true;
  r.result.body = std::move(body);
  r.result.finish_reason = "stop";
  r.result.engine_time = took;
  r.result.usage = {10, 5};
  return r;
}

// Every effect of kind E, in order.
template <class E, class Effects>
std::vector<E> all_of(const Effects& fx) {
  std::vector<E> out;
  for (const auto& e : fx)
    if (const auto* p = std::get_if<E>(&e)) out.push_back(*p);
  return out;
}

// The one effect of kind E (a failure if there is not exactly one).
template <class E, class Effects>
E only(const Effects& fx) {
  const auto all = all_of<E>(fx);
  EXPECT_EQ(all.size(), 1u) << "effects of that kind";
  return all.empty() ? E{} : all.front();
}

template <class E, class Effects>
bool has(const Effects& fx) {
  return !all_of<E>(fx).empty();
}

// The index of the first effect of kind E (fx.size() if none).
template <class E, class Effects>
std::size_t position(const Effects& fx) {
  for (std::size_t i = 0; i < fx.size(); ++i)
    if (std::holds_alternative<E>(fx[i])) return i;
  return fx.size();
}

}  // namespace dynrt::run::testing

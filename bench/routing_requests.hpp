// The Routing template's requests as a harness sends them, for the load clients (serve_load,
// soak): the texts templates/routing.yaml renders (folded scalars joined) and a pool of
// queries whose handler the simulated engine's script reads from a tag in the query.
#pragma once

#include <array>
#include <cstddef>
#include <string>

namespace dynrt::bench::routing {

inline constexpr const char* kRouterSystem =
    "You route requests to handlers. Think step by step, then end with one line `HANDLER: "
    "<name>`, where <name> is weather, calendar or email.";
inline constexpr std::array<const char*, 3> kHandlers = {"weather", "calendar", "email"};
inline constexpr std::array<const char*, 8> kTopics = {
    "Lisbon", "the quarterly review", "my dentist", "Oslo", "the team offsite", "a refund",
    "Kyoto",  "the board meeting"};

inline std::string handler_system(const std::string& h) {
  return "You are the " + h +
         " handler. Reply with exactly one JSON object {\"function\": ..., \"arguments\": "
         "{...}} that calls the " +
         h + " API.";
}

// Query k always routes to kHandlers[k % 3]: the engine's script answers by the tag.
inline std::string query(int k) {
  return "Request " + std::to_string(k) + " about " + kTopics[static_cast<std::size_t>(k) % 8] +
         " [route " + kHandlers[static_cast<std::size_t>(k) % 3] + "]";
}

}  // namespace dynrt::bench::routing

// Reuse names: the exact identity under which a stage result may be reused (paper section
// 3.2, Lemma A.1).
//
// A reuse name is XXH3-128 over a canonical encoding of (stage fingerprint, endpoint, the
// complete request body). The body is written as canonical JSON (runtime/canonical_json.hpp):
// key order, whitespace and number spelling do not change the name; any other difference in
// content does, because every field is kept except the few that cannot change the output
// (output_neutral_fields()). Everything that determines the output is therefore covered:
// model, messages or prompt, tools and tool choice, response format, every sampling and
// decoding parameter, including ones dynrt has never heard of. Leaving a field out is the
// dangerous direction (users of other caches were bitten by keys without `n`, `top_logprobs`
// or the model), so the exclusion list is short and explicit.
//
// reuse_encoding() returns the exact bytes the name hashes, for `dynrt explain`; reuse_name()
// hashes the same bytes without building them. Pure; thread-safe.
#pragma once

#include "runtime/hash.hpp"

#include <nlohmann/json.hpp>

#include <span>
#include <string>
#include <string_view>

namespace dynrt {

// Top-level body fields left out of the name: how the answer is delivered (stream,
// stream_options) and who asked (user, request_id), never what it says.
std::span<const std::string_view> output_neutral_fields();
bool is_output_neutral(std::string_view field);

// "dynrt.reuse.v1\nstage:<fingerprint hex>\nendpoint:<endpoint>\n<canonical body>"
std::string reuse_encoding(const Hash128& stage_fingerprint, std::string_view endpoint,
                           const nlohmann::json& body);

// XXH3-128 of reuse_encoding(...), computed without materializing it.
Hash128 reuse_name(const Hash128& stage_fingerprint, std::string_view endpoint,
                   const nlohmann::json& body);

}  // namespace dynrt

// `dynrt template draft`: proposes a workflow template from recorded traffic (the JSON lines
// `dynrt serve --record` writes). For each workflow in the recording it infers
//   - the stages (one per X-DynRT-Stage name), their kind, order and loop (a stage that
//     repeats within a run), the model and the parameters sent with every call;
//   - each request, with what varies across runs replaced by a variable bound from where the
//     value came from: the incoming request of the first stage that carried it (an input), an
//     earlier response (an output), a value a model named in its answer (a decision, with its
//     selection rule and candidate values), an item a person picked from a list an earlier
//     answer offered (a user decision), or the loop's repetition index;
//   - what it could not infer, as `# dynrt-todo:` comments that `dynrt lint` reports with
//     their position (rule draft-todo).
// A tool stage is marked speculable only when the caller says the tool is read-only (the
// corpus or config `dynrt serve` runs with); a model stage only when it is greedy or seeded.
// Pure and single-threaded: records in, YAML text out.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace dynrt::dsl {

// A tool known to be read-only, with the record keys it reads as templates over its
// argument names (the corpus tools' `"api:{{api}}"`).
struct DraftTool {
  std::vector<std::string> reads;
};

struct DraftOptions {
  std::map<std::string, DraftTool, std::less<>> read_only_tools;
  std::size_t max_candidates = 3;  // a decision's `max`
  std::size_t max_values = 8;      // most values a learned decision lists
};

struct Draft {
  std::string workflow;
  std::string yaml;  // the template, with `# dynrt-todo:` comments where inference stopped
  std::size_t runs = 0;
  std::size_t calls = 0;  // calls the draft was inferred from (answered 200)
  std::vector<std::string> todos;
};

// `records` are the parsed lines of a recording; a line that is not a recorded call
// (no workflow, id, stage, endpoint and request) is skipped.
std::vector<Draft> draft_templates(const std::vector<nlohmann::json>& records,
                                   const DraftOptions& options = {});

}  // namespace dynrt::dsl

#include "dsl/draft.hpp"

#include "dsl/render.hpp"
#include "protocols/protocols.hpp"
#include "runtime/json_text.hpp"

#include <re2/re2.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>

namespace dynrt::dsl {
namespace {

using json = nlohmann::json;

constexpr std::string_view kToolsPrefix = "/v1/dynrt/tools/";
constexpr std::string_view kContent = "/choices/0/message/content";

// -- the recording ----------------------------------------------------------------------------

// Members of a recorded line read leniently, as the recording is a file anyone can edit: the
// fallback unless the member has the expected type (value() would throw on a mismatch).
std::string string_or(const json& o, const char* key, std::string fallback = "") {
  const auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : fallback;
}

double number_or(const json& o, const char* key, double fallback) {
  const auto it = o.find(key);
  return it != o.end() && it->is_number() ? it->get<double>() : fallback;
}

struct Call {
  std::string stage;
  std::string endpoint;
  const json* request = nullptr;
  const json* response = nullptr;
  double start_ms = 0;
  double latency_ms = 0;
  std::size_t line = 0;  // its place in the recording (the order calls were answered)
  std::size_t rep = 0;   // how many calls of the same stage came before it in its run
};

struct RunCalls {
  std::string id;
  std::vector<Call> calls;  // in the order they started
};

// One instance of a stage: its run and its index there.
struct Instance {
  const RunCalls* run = nullptr;
  std::size_t index = 0;
  const Call& call() const { return run->calls[index]; }
};

// -- text -------------------------------------------------------------------------------------

bool word_char(unsigned char c) {
  return std::isalnum(c) || c == '_' || c >= 0x80;
}

// The next occurrence of `v` in `s` from `from` that is not part of a longer word: "Entity1"
// is not in "Entity13".
std::size_t find_word(std::string_view s, std::string_view v, std::size_t from = 0) {
  if (v.empty()) return std::string_view::npos;
  const bool word_front = word_char(static_cast<unsigned char>(v.front()));
  const bool word_back = word_char(static_cast<unsigned char>(v.back()));
  for (std::size_t x = s.find(v, from); x != std::string_view::npos; x = s.find(v, x + 1)) {
    if (word_front && x > 0 && word_char(static_cast<unsigned char>(s[x - 1]))) continue;
    const std::size_t end = x + v.size();
    if (word_back && end < s.size() && word_char(static_cast<unsigned char>(s[end]))) continue;
    return x;
  }
  return std::string_view::npos;
}

std::string regex_escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '\t') {
      out += "\\t";
      continue;
    }
    if (std::strchr("\\.^$|?*+()[]{}", c) != nullptr) out += '\\';
    out += c;
  }
  return out;
}

// A variable name from a hint ("HANDLER: " -> "handler"): its last word, lower case.
std::string name_from(std::string_view hint) {
  std::size_t end = hint.size();
  while (end > 0 && !std::isalnum(static_cast<unsigned char>(hint[end - 1])))
    --end;
  std::size_t begin = end;
  while (begin > 0 &&
         (std::isalnum(static_cast<unsigned char>(hint[begin - 1])) || hint[begin - 1] == '_'))
    --begin;
  std::string out;
  for (std::size_t i = begin; i < end; ++i)
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(hint[i])));
  while (!out.empty() && std::isdigit(static_cast<unsigned char>(out.front())))
    out.erase(0, 1);
  if (out.size() > 32) out.resize(32);
  return out;
}

// The last token of a JSON pointer, as a name, unless it says nothing (an index, "content").
std::string name_from_pointer(std::string_view pointer) {
  const std::string last = name_from(pointer.substr(pointer.rfind('/') + 1));
  if (last.empty() || last == "content" || last == "text" || last == "arguments") return {};
  return last;
}

// Every string leaf of `j`, with its pointer.
void string_leaves(const json& j, const std::string& at,
                   const std::function<void(const std::string&, const std::string&)>& f) {
  if (j.is_string()) {
    f(at, j.get_ref<const std::string&>());
  } else if (j.is_object()) {
    for (const auto& [k, v] : j.items())
      string_leaves(v, at + (json::json_pointer() / k).to_string(), f);
  } else if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i)
      string_leaves(j[i], at + "/" + std::to_string(i), f);
  }
}

// The JSON inside a string, when the string is a JSON object or array (a model's JSON answer).
std::optional<json> inner_json(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i])))
    ++i;
  if (i == s.size() || (s[i] != '{' && s[i] != '[')) return std::nullopt;
  json j = parse_json(s);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// A JSON pointer's target, with dynrt's extension: in a list, "-N" counts from the end ("-1" is
// the latest message), as templates read it.
const json* at_pointer(const json& doc, const std::string& pointer) {
  return resolve_pointer(doc, pointer);
}

// Where a value sits: `pointer`, then (optionally) the JSON inside that string and `inner`,
// then (optionally) the first capture of `regex`. The same reading as dsl::Extractor.
struct Where {
  std::string pointer;
  std::string inner;
  std::string regex;
};

std::optional<std::string> read(const json& doc, const Where& w) {
  const json* v = at_pointer(doc, w.pointer);
  if (!v) return std::nullopt;
  std::string text;
  if (!w.inner.empty()) {
    if (!v->is_string()) return std::nullopt;
    const auto parsed = inner_json(v->get_ref<const std::string&>());
    if (!parsed) return std::nullopt;
    const json* in = at_pointer(*parsed, w.inner);
    if (!in || !in->is_string()) return std::nullopt;
    text = in->get<std::string>();
  } else if (v->is_string()) {
    text = v->get<std::string>();
  } else {
    return std::nullopt;
  }
  if (w.regex.empty()) return text;
  const RE2 re(w.regex);
  std::string capture;
  if (!re.ok() || re.NumberOfCapturingGroups() < 1 || !RE2::PartialMatch(text, re, &capture))
    return std::nullopt;
  return capture;
}

// Every capture of `regex` in `text`, in order.
std::vector<std::string> all_captures(const std::string& regex, const std::string& text) {
  std::vector<std::string> out;
  const RE2 re(regex);
  if (!re.ok() || re.NumberOfCapturingGroups() < 1) return out;
  re2::StringPiece input(text);
  std::string capture;
  while (RE2::FindAndConsume(&input, re, &capture)) {
    out.push_back(capture);
    if (out.size() > 64) break;
  }
  return out;
}

std::size_t common_prefix(const std::vector<std::string_view>& v) {
  std::size_t n = v.empty() ? 0 : v[0].size();
  for (const auto& s : v) {
    std::size_t i = 0;
    while (i < n && i < s.size() && s[i] == v[0][i])
      ++i;
    n = i;
  }
  return n;
}

std::size_t common_suffix(const std::vector<std::string_view>& v, std::size_t cap) {
  std::size_t n = cap;
  for (const auto& s : v) {
    std::size_t i = 0;
    while (i < n && i < s.size() && s[s.size() - 1 - i] == v[0][v[0].size() - 1 - i])
      ++i;
    n = i;
  }
  return n;
}

// The literal context around one value in several texts: the longest suffix of the text
// before it and prefix of the text after it that every instance shares, kept to one line.
struct Context {
  std::string left, right;
  bool whole_left = false;   // the left context is all of the text before the value
  bool whole_right = false;  // the right context is all of the text after it
};

Context context_of(const std::vector<std::string_view>& before,
                   const std::vector<std::string_view>& after) {
  Context c;
  std::size_t min_before = SIZE_MAX, min_after = SIZE_MAX;
  for (const auto& b : before)
    min_before = std::min(min_before, b.size());
  for (const auto& a : after)
    min_after = std::min(min_after, a.size());
  std::size_t l = common_suffix(before, min_before);
  std::size_t r = common_prefix(after);
  const std::string_view b0 = before[0], a0 = after[0];
  c.whole_left = std::all_of(before.begin(), before.end(), [&](auto b) { return b.size() == l; });
  c.whole_right = std::all_of(after.begin(), after.end(), [&](auto a) { return a.size() == r; });
  c.left = std::string(b0.substr(b0.size() - l));
  c.right = std::string(a0.substr(0, r));
  if (!c.whole_left) {  // one line of context, at most 40 bytes of it
    if (const auto nl = c.left.rfind('\n'); nl != std::string::npos) c.left.erase(0, nl + 1);
    if (c.left.size() > 40) c.left.erase(0, c.left.size() - 40);
  }
  if (!c.whole_right) {
    if (const auto nl = c.right.find('\n'); nl != std::string::npos) c.right.resize(nl);
    if (c.right.size() > 8) c.right.resize(8);
  }
  return c;
}

// A regex whose first capture is the value between a context's left and right.
std::string capture_regex(const Context& c, const std::vector<std::string>& values, bool anchored) {
  const bool spaces = std::any_of(values.begin(), values.end(), [](const std::string& v) {
    return v.find_first_of(" \t") != std::string::npos;
  });
  const bool lines = std::any_of(values.begin(), values.end(), [](const std::string& v) {
    return v.find('\n') != std::string::npos;
  });
  if (anchored)
    return std::string(lines ? "(?s)" : "") + "^" + regex_escape(c.left) + "(.*)" +
           regex_escape(c.right) + "$";
  std::string excluded = spaces ? "\\n" : "\\s";
  if (!c.right.empty() && !std::isspace(static_cast<unsigned char>(c.right[0])))
    excluded += regex_escape(c.right.substr(0, 1));
  return regex_escape(c.left) + "([^" + excluded + "]+)" + regex_escape(c.right);
}

// -- variables --------------------------------------------------------------------------------

enum class VarKind { input, output, decision, user_decision, loop };

struct Var {
  std::string name;
  VarKind kind = VarKind::input;
  std::string stage;  // input, user_decision: the binding stage; output, decision: the answering
  Where where;        // in the binding stage's request, or the answering stage's response
};

// Where each value of a stage's request came from; what the draft declares.
struct StageDraft {
  std::string name;
  bool tool = false;
  std::string api = "chat";  // the protocol, by endpoint: chat, completions, messages, responses
  std::string tool_name;
  std::string model;
  json params = json::object();
  json body = json::object();  // request (model) or arguments (tool), strings as templates
  std::vector<std::string> after;
  std::vector<std::string> todos;
  std::vector<std::string> notes;  // comments for the reader
  std::vector<Instance> instances;
  bool greedy = false;
  double p90_latency_ms = 0;
  bool user = false;        // a user stage the draft adds (a person's pick)
  std::string description;  // a user stage's
  std::string decides;
  std::string history;  // the variable its resent conversation is bound to, if it resends one
};

struct Decision {
  std::string name;
  std::string stage;  // the deciding stage
  bool user = false;
  json selection;   // decode: where the pick is read from the deciding stage's response
  json candidates;  // the candidate source
  std::size_t instances = 0;
};

class Drafter {
 public:
  Drafter(std::string workflow, std::vector<RunCalls> runs, const DraftOptions& o)
      : workflow_(std::move(workflow)), runs_(std::move(runs)), o_(o) {}

  Draft draft();

 private:
  // -- the shape of the workflow --
  void find_stages();
  void find_loop();
  void find_order();
  // -- the requests --
  void infer_stage(StageDraft& s);
  std::optional<std::string> infer_leaf(const std::string& stage, const std::string& pointer,
                                        const std::vector<std::string>& values);
  std::optional<std::string> value_of(const Var& v, const Instance& in) const;
  const Call* latest(const Instance& in, const std::string& stage, bool inclusive) const;
  bool classify(const std::string& stage, const std::string& pointer,
                const std::vector<std::string>& leaf, const std::vector<std::size_t>& idx,
                const std::vector<std::pair<std::size_t, std::size_t>>& span,
                const std::vector<std::pair<std::size_t, std::size_t>>& residual);
  std::string unique_name(std::string hint, const std::string& fallback);
  bool in_loop(const std::string& stage) const {
    return std::find(loop_.begin(), loop_.end(), stage) != loop_.end();
  }
  json learned_candidates(const std::vector<std::string>& values) const;
  json decode_candidates(const std::string& decider, const std::vector<Instance>& at,
                         const std::vector<std::string>& values);
  // Stage `decider` decides `v`, read from its answer; `at`: the calls that used it.
  void add_decision(StageDraft& decider, const Var& v, const std::vector<Instance>& at,
                    const std::vector<std::string>& values);
  // A user stage that decides `v` (bound by `consumer`'s request), between `after` and
  // `consumer`; stages_ is reallocated, so references into it are invalid afterwards.
  void add_pick(const std::string& consumer, Var v, std::vector<std::string> after,
                std::string description, nlohmann::json candidates, std::size_t instances);
  // -- the template --
  std::string yaml() const;

  std::string workflow_;
  std::vector<RunCalls> runs_;
  const DraftOptions& o_;
  std::vector<StageDraft> stages_;  // in the order a run calls them
  std::vector<std::string> loop_;   // the stages that repeat, in order
  std::string loop_name_;
  std::size_t loop_max_ = 0;
  std::vector<Var> vars_;
  std::vector<Decision> decisions_;
  std::vector<std::string> todos_;  // the workflow's own
  std::set<std::string> names_;
  double span_s_ = 0;
  // Why the last text infer_leaf could not explain was left: the origin most of its calls
  // share, when one does ("in 32 of 40 calls it is named in the answer of stage ..."), or "".
  std::string near_miss_;
};

// A model stage's `api`, from the endpoint its calls went to.
std::string api_of(std::string_view endpoint) {
  return std::string(
      protocols::to_string(protocols::api_of_path(endpoint).value_or(protocols::Api::chat)));
}

// A JSON pointer token that indexes a list ("0", "12").
bool is_index(std::string_view token) {
  return !token.empty() && std::all_of(token.begin(), token.end(), [](char ch) {
    return std::isdigit(static_cast<unsigned char>(ch));
  });
}

StageDraft* find(std::vector<StageDraft>& v, const std::string& name) {
  for (auto& s : v)
    if (s.name == name) return &s;
  return nullptr;
}

std::string Drafter::unique_name(std::string hint, const std::string& fallback) {
  // A hint already taken (a stage's name, say) yields to a fallback that is free.
  if (hint.empty() || (names_.count(hint) > 0 && names_.count(fallback) == 0)) hint = fallback;
  std::string name = hint;
  for (int i = 2; names_.count(name) > 0; ++i)
    name = hint + "_" + std::to_string(i);
  names_.insert(name);
  return name;
}

void Drafter::find_stages() {
  for (const RunCalls& run : runs_) {
    for (std::size_t i = 0; i < run.calls.size(); ++i) {
      const Call& c = run.calls[i];
      StageDraft* s = find(stages_, c.stage);
      if (!s) {
        stages_.push_back({});
        s = &stages_.back();
        s->name = c.stage;
        s->tool = c.endpoint.starts_with(kToolsPrefix);
        if (s->tool) s->tool_name = c.endpoint.substr(kToolsPrefix.size());
        s->api = api_of(c.endpoint);
      } else if (c.endpoint != s->instances.front().call().endpoint && s->todos.empty()) {
        s->todos.push_back("calls of this stage go to more than one endpoint (" +
                           s->instances.front().call().endpoint + ", " + c.endpoint + ")");
      }
      s->instances.push_back({&run, i});
    }
  }
  for (auto& s : stages_)
    names_.insert(s.name);
  // Stages in the order runs call them: by their mean position in the run's first repetition.
  std::map<std::string, double> position;
  for (auto& s : stages_) {
    double sum = 0;
    std::size_t n = 0;
    for (const Instance& in : s.instances)
      if (in.call().rep == 0) {
        sum += static_cast<double>(in.index);
        ++n;
      }
    position[s.name] = n ? sum / static_cast<double>(n) : 1e9;
  }
  std::stable_sort(stages_.begin(), stages_.end(), [&](const auto& a, const auto& b) {
    return position[a.name] < position[b.name];
  });
}

void Drafter::find_loop() {
  std::map<std::string, std::size_t> most;
  for (const RunCalls& run : runs_)
    for (const Call& c : run.calls)
      most[c.stage] = std::max(most[c.stage], c.rep + 1);
  for (const auto& s : stages_)
    if (most[s.name] > 1) {
      loop_.push_back(s.name);
      loop_max_ = std::max(loop_max_, most[s.name]);
    }
  if (loop_.empty()) return;
  loop_name_ = unique_name("turn", "turn");
  // One loop, over consecutive stages: a stage between two repeating ones repeats with them.
  std::size_t first = stages_.size(), last = 0;
  for (std::size_t i = 0; i < stages_.size(); ++i)
    if (in_loop(stages_[i].name)) {
      first = std::min(first, i);
      last = i;
    }
  for (std::size_t i = first; i <= last; ++i)
    if (!in_loop(stages_[i].name)) {
      todos_.push_back("stage " + stages_[i].name +
                       " runs once per run between stages that repeat; the draft puts it in the "
                       "loop " +
                       loop_name_ + ": check that order");
      loop_.insert(loop_.begin() + static_cast<std::ptrdiff_t>(i - first), stages_[i].name);
    }
}

void Drafter::find_order() {
  for (std::size_t i = 0; i < stages_.size(); ++i) {
    StageDraft& s = stages_[i];
    // The stage each of its first-repetition calls came right after, most often.
    std::map<std::string, std::size_t> before;
    const bool head = !loop_.empty() && s.name == loop_.front();
    for (const Instance& in : s.instances)
      if (in.call().rep == 0 && in.index > 0) {
        const std::string& prev_stage = in.run->calls[in.index - 1].stage;
        if (!head || !in_loop(prev_stage)) ++before[prev_stage];  // the back edge comes below
      }
    // Only a stage earlier in the order: `after` never makes a cycle a loop does not declare.
    std::set<std::string> earlier;
    for (std::size_t j = 0; j < i; ++j)
      earlier.insert(stages_[j].name);
    std::string prev;
    std::size_t best = 0;
    for (const auto& [name, n] : before)
      if (n > best && earlier.count(name)) {
        best = n;
        prev = name;
      }
    if (!prev.empty()) s.after.push_back(prev);
    // The loop's first stage also runs after the previous repetition's last.
    if (!loop_.empty() && s.name == loop_.front() && loop_.back() != s.name &&
        std::find(s.after.begin(), s.after.end(), loop_.back()) == s.after.end())
      s.after.push_back(loop_.back());
  }
}

const Call* Drafter::latest(const Instance& in, const std::string& stage, bool inclusive) const {
  for (std::size_t i = in.index + (inclusive ? 1 : 0); i-- > 0;)
    if (in.run->calls[i].stage == stage) return &in.run->calls[i];
  return nullptr;
}

std::optional<std::string> Drafter::value_of(const Var& v, const Instance& in) const {
  switch (v.kind) {
    case VarKind::loop:
      if (!in_loop(in.call().stage)) return std::nullopt;
      return std::to_string(in.call().rep);
    case VarKind::input:
    case VarKind::user_decision: {
      const Call* c = latest(in, v.stage, true);
      return c ? read(*c->request, v.where) : std::nullopt;
    }
    case VarKind::output:
    case VarKind::decision: {
      const Call* c = latest(in, v.stage, false);
      return c && c->response ? read(*c->response, v.where) : std::nullopt;
    }
  }
  return std::nullopt;
}

// -- explaining a varying string as literal text and variables ---------------------------------

// A value a part of a string may be: a declared variable, or a value an earlier call of the
// run carried (declared if the draft uses it).
struct Cand {
  std::vector<std::optional<std::string>> values;  // per instance
  int var = -1;             // index into vars_; -2: the loop index; -1: not declared yet
  std::optional<Var> make;  // for a candidate not declared yet
};

struct Explained {
  bool ok = false;
  std::string text;              // literal text and \x01<cand>\x02 placeholders
  std::vector<std::size_t> idx;  // failure: the instances the residual covers
  std::vector<std::pair<std::size_t, std::size_t>> residual;  // per idx: unexplained [a, b)
  std::size_t dropped = 0;  // success: instances left out because they did not fit
};

// How many instances a value must fit: all but a few, since recordings hold odd calls (a
// harness that fell back to a default, a retried call). Those few are left to the engine.
bool enough(std::size_t fit, std::size_t n) {
  return fit > 0 && fit * 100 >= n * 95;
}

std::string placeholder(std::size_t cand) {
  return "\x01" + std::to_string(cand) + "\x02";
}

// Explains the strings `s` (of the instances `idx`; `base`: where each starts in its leaf) as
// literal text and candidates' values, the longest values first.
Explained explain(const std::vector<std::string_view>& s, const std::vector<std::size_t>& base,
                  const std::vector<std::size_t>& idx, const std::vector<Cand>& cands,
                  std::set<std::size_t>& used, int depth) {
  Explained out;
  if (std::all_of(s.begin(), s.end(), [&](auto x) { return x == s[0]; })) {
    out.ok = true;
    out.text = std::string(s[0]);
    return out;
  }
  const std::size_t n = s.size();
  auto value = [&](std::size_t j, std::size_t i) -> const std::string* {
    const auto& v = cands[j].values[idx[i]];
    return v && !v->empty() ? &*v : nullptr;
  };
  // One value that is all of `parts` in (nearly) every instance, between `pre` and `post`.
  auto one_value = [&](const std::vector<std::string_view>& parts, const std::string& pre,
                       const std::string& post) {
    for (std::size_t j = 0; j < cands.size(); ++j) {
      std::size_t fit = 0;
      for (std::size_t i = 0; i < n; ++i)
        if (const auto* v = value(j, i); v && *v == parts[i]) ++fit;
      if (enough(fit, n)) {
        used.insert(j);
        out.ok = true;
        out.text = pre + placeholder(j) + post;
        out.dropped = n - fit;
        return true;
      }
    }
    return false;
  };
  if (one_value(s, "", "")) return out;
  std::size_t min_len = SIZE_MAX;
  for (const auto& x : s)
    min_len = std::min(min_len, x.size());
  std::size_t p = common_prefix(s);
  // Never cut a word: "weather" and "whatever" differ from their first letter.
  auto inside_word = [&](std::size_t at) {
    return at > 0 && word_char(static_cast<unsigned char>(s[0][at - 1])) &&
           std::any_of(s.begin(), s.end(), [&](auto x) {
             return at < x.size() && word_char(static_cast<unsigned char>(x[at]));
           });
  };
  while (p > 0 && inside_word(p))
    --p;
  std::size_t q = common_suffix(s, min_len - p);
  auto inside_word_end = [&](std::size_t k) {  // the suffix of length k starts inside a word
    return k > 0 && word_char(static_cast<unsigned char>(s[0][s[0].size() - k])) &&
           std::any_of(s.begin(), s.end(), [&](auto x) {
             return x.size() > k && word_char(static_cast<unsigned char>(x[x.size() - k - 1]));
           });
  };
  while (q > 0 && inside_word_end(q))
    --q;
  std::vector<std::string_view> mid;
  for (const auto& x : s)
    mid.push_back(x.substr(p, x.size() - p - q));
  const std::string pre(s[0].substr(0, p)), post(s[0].substr(s[0].size() - q));
  auto fail = [&] {
    out.ok = false;
    out.idx = idx;
    for (std::size_t i = 0; i < n; ++i)
      out.residual.push_back({base[i] + p, base[i] + s[i].size() - q});
    return out;
  };
  if (depth > 24) return fail();
  if (one_value(mid, pre, post)) return out;  // the whole varying part
  // A value where the strings differ (it may reach into the text they share: a passage that
  // ends in the same "]]." everywhere): the longest one, then the text either side of it.
  auto overlapping = [&](std::string_view str, const std::string& v, std::size_t lo,
                         std::size_t hi) {
    hi = std::max(hi, lo + 1);
    for (std::size_t x = find_word(str, v); x != std::string_view::npos;
         x = find_word(str, v, x + 1))
      if (x < hi && x + v.size() > lo) return x;
    return std::string_view::npos;
  };
  std::size_t best = SIZE_MAX, best_len = 0;
  for (std::size_t j = 0; j < cands.size(); ++j) {
    std::size_t total = 0, fit = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto* v = value(j, i);
      if (v && (cands[j].var != -1 || v->size() >= 3) &&
          overlapping(s[i], *v, p, s[i].size() - q) != std::string_view::npos) {
        ++fit;
        total += v->size();
      }
    }
    if (enough(fit, n) && total > best_len) {
      best = j;
      best_len = total;
    }
  }
  if (best == SIZE_MAX) return fail();
  std::vector<std::string_view> left, right;
  std::vector<std::size_t> left_base, right_base, kept;
  for (std::size_t i = 0; i < n; ++i) {
    const auto* v = value(best, i);
    const std::size_t at = v ? overlapping(s[i], *v, p, s[i].size() - q) : std::string_view::npos;
    if (at == std::string_view::npos) continue;
    kept.push_back(idx[i]);
    left.push_back(s[i].substr(0, at));
    right.push_back(s[i].substr(at + v->size()));
    left_base.push_back(base[i]);
    right_base.push_back(base[i] + at + v->size());
  }
  std::set<std::size_t> inner_used = used;
  inner_used.insert(best);
  Explained l = explain(left, left_base, kept, cands, inner_used, depth + 1);
  if (!l.ok) return l;
  Explained r = explain(right, right_base, kept, cands, inner_used, depth + 1);
  if (!r.ok) return r;
  used = std::move(inner_used);
  out.ok = true;
  out.text = l.text + placeholder(best) + r.text;
  out.dropped = n - kept.size() + l.dropped + r.dropped;
  return out;
}

// The first part of the residual that differs across instances, by token alignment: the
// residual may hold several values with constant text between them ("the weather handler
// ... the weather API").
std::vector<std::pair<std::size_t, std::size_t>> first_span(
    const std::vector<std::string>& leaf,
    const std::vector<std::pair<std::size_t, std::size_t>>& residual) {
  auto tokens = [](std::string_view s) {
    std::vector<std::pair<std::size_t, std::size_t>> t;  // [begin, end)
    for (std::size_t i = 0; i < s.size();) {
      std::size_t j = i + 1;
      if (word_char(static_cast<unsigned char>(s[i])))
        while (j < s.size() && word_char(static_cast<unsigned char>(s[j])))
          ++j;
      t.push_back({i, j});
      i = j;
    }
    return t;
  };
  const std::string_view r0 =
      std::string_view(leaf[0]).substr(residual[0].first, residual[0].second - residual[0].first);
  const auto t0 = tokens(r0);
  if (t0.size() > 4000) return residual;
  // Alignment costs tokens x tokens per instance: past a budget (long texts that differ in
  // many calls) the whole residual stands as one part, which bounds the time a recording of
  // hostile size can take.
  constexpr std::size_t kMaxCells = std::size_t{1} << 26;
  std::size_t cells = 0;
  std::vector<std::size_t> common(t0.size(), 0);  // instances aligning each token of r0
  std::vector<std::vector<std::size_t>> where(leaf.size(),
                                              std::vector<std::size_t>(t0.size(), SIZE_MAX));
  for (std::size_t i = 0; i < leaf.size(); ++i) {
    const std::string_view ri =
        std::string_view(leaf[i]).substr(residual[i].first, residual[i].second - residual[i].first);
    const auto ti = tokens(ri);
    if (ti.size() > 4000) return residual;
    const std::size_t n = t0.size(), m = ti.size();
    cells += (n + 1) * (m + 1);
    if (cells > kMaxCells) return residual;
    std::vector<std::vector<std::uint16_t>> lcs(n + 1, std::vector<std::uint16_t>(m + 1, 0));
    auto tok = [](std::string_view s, std::pair<std::size_t, std::size_t> t) {
      return s.substr(t.first, t.second - t.first);
    };
    for (std::size_t a = n; a-- > 0;)
      for (std::size_t b = m; b-- > 0;)
        lcs[a][b] = tok(r0, t0[a]) == tok(ri, ti[b])
                        ? static_cast<std::uint16_t>(lcs[a + 1][b + 1] + 1)
                        : std::max(lcs[a + 1][b], lcs[a][b + 1]);
    for (std::size_t a = 0, b = 0; a < n && b < m;) {
      if (tok(r0, t0[a]) == tok(ri, ti[b])) {
        ++common[a];
        where[i][a] = ti[b].first;
        ++a;
        ++b;
      } else if (lcs[a + 1][b] >= lcs[a][b + 1]) {
        ++a;
      } else {
        ++b;
      }
    }
  }
  // The span ends at the first word token of r0 that every instance aligns.
  for (std::size_t a = 0; a < t0.size(); ++a) {
    if (!enough(common[a], leaf.size())) continue;
    if (!word_char(static_cast<unsigned char>(r0[t0[a].first]))) continue;
    // Back over the separators that the instances also align.
    std::size_t end_token = a;
    while (end_token > 0 && enough(common[end_token - 1], leaf.size()))
      --end_token;
    if (end_token == 0) continue;
    std::vector<std::pair<std::size_t, std::size_t>> out;
    for (std::size_t i = 0; i < leaf.size(); ++i) {
      const std::size_t end = where[i][end_token];
      out.push_back(end == SIZE_MAX ? residual[i]
                                    : std::pair{residual[i].first, residual[i].first + end});
    }
    return out;
  }
  return residual;
}

json extractor_json(const Where& w) {
  json j = json::object();
  j["pointer"] = w.pointer;
  if (!w.inner.empty()) j["json"] = w.inner;
  if (!w.regex.empty()) j["regex"] = w.regex;
  return j;
}

// The literal text around a value where the texts name it (the "Search[" and "]" of
// "Search[Paris]"), as the regex that scores best: `score` counts the texts a regex serves.
// Contexts come from the first texts' occurrences of their value, cut at word boundaries
// (one line, at most 40 bytes before and 8 after), so a short one ("[[") that fits every
// occurrence competes with a long one that fits only where it was taken from.
struct Scored {
  std::string regex;
  Context context;
  std::size_t score = 0;
};

Scored best_regex(const std::vector<std::string>& texts, const std::vector<std::string>& values,
                  const std::function<std::size_t(const std::string&)>& score, bool shortest) {
  auto cls = [](char ch) {  // word, white space, other
    const auto u = static_cast<unsigned char>(ch);
    return word_char(u) ? 0 : std::isspace(u) ? 1 : 2;
  };
  auto cuts_back = [&](std::string_view left) {  // suffixes starting at a class change
    std::vector<std::string> out;
    if (left.empty()) return out;
    out.emplace_back(left);
    for (std::size_t i = left.size() - 1; i > 0 && out.size() < 6; --i)
      if (cls(left[i]) != cls(left[i - 1])) out.emplace_back(left.substr(i));
    return out;
  };
  auto cuts_front = [&](std::string_view right) {  // prefixes ending at a class change
    std::vector<std::string> out = {""};
    for (std::size_t i = 1; i <= right.size() && out.size() < 5; ++i)
      if (i == right.size() || cls(right[i]) != cls(right[i - 1]))
        out.emplace_back(right.substr(0, i));
    return out;
  };
  std::set<std::pair<std::string, std::string>> tried;
  Scored best;
  for (std::size_t r = 0; r < std::min<std::size_t>(texts.size(), 16); ++r) {
    std::size_t tries = 0;
    for (std::size_t p0 = find_word(texts[r], values[r]); p0 != std::string::npos && tries < 4;
         p0 = find_word(texts[r], values[r], p0 + 1), ++tries) {
      std::string_view left = std::string_view(texts[r]).substr(0, p0);
      if (const auto nl = left.rfind('\n'); nl != std::string_view::npos)
        left.remove_prefix(nl + 1);
      if (left.size() > 40) left.remove_prefix(left.size() - 40);
      std::string_view right = std::string_view(texts[r]).substr(p0 + values[r].size());
      if (const auto nl = right.find('\n'); nl != std::string_view::npos)
        right = right.substr(0, nl);
      if (right.size() > 8) right = right.substr(0, 8);
      for (const auto& l : cuts_back(left))
        for (const auto& rr : cuts_front(right)) {
          if (!tried.insert({l, rr}).second) continue;
          Context c;
          c.left = l;
          c.right = rr;
          const std::string regex = capture_regex(c, values, false);
          const std::size_t sc = score(regex);
          const std::size_t len = l.size() + rr.size();
          const std::size_t best_len = best.context.left.size() + best.context.right.size();
          if (sc > best.score ||
              (sc == best.score && sc > 0 && (shortest ? len < best_len : len > best_len))) {
            best = {regex, c, sc};
          }
        }
    }
  }
  return best;
}

// How many texts have every match of `regex` capture their value (an unambiguous selection).
std::size_t selects(const std::string& regex, const std::vector<std::string>& texts,
                    const std::vector<std::string>& values) {
  std::size_t fit = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const auto caps = all_captures(regex, texts[i]);
    const bool all = !caps.empty() && std::all_of(caps.begin(), caps.end(), [&](std::string c) {
      while (!c.empty() && std::isspace(static_cast<unsigned char>(c.back())))
        c.pop_back();
      while (!c.empty() && std::isspace(static_cast<unsigned char>(c.front())))
        c.erase(0, 1);
      return c == values[i];
    });
    if (all) ++fit;
  }
  return fit;
}

// How many texts have `regex`'s first match capture their value.
std::size_t firsts(const std::string& regex, const std::vector<std::string>& texts,
                   const std::vector<std::string>& values) {
  std::size_t fit = 0;
  for (std::size_t i = 0; i < texts.size(); ++i)
    if (read(json(texts[i]), {"", "", regex}) == values[i]) ++fit;
  return fit;
}

json Drafter::decode_candidates(const std::string& decider, const std::vector<Instance>& at,
                                const std::vector<std::string>& values) {
  // Named in an earlier answer (a passage's links): an `extract` source.
  std::map<std::string, std::vector<std::size_t>> found;  // stage|pointer -> instances
  for (std::size_t i = 0; i < at.size(); ++i) {
    const Call* d = latest(at[i], decider, false);  // the deciding call
    if (!d) continue;
    const std::size_t d_index = static_cast<std::size_t>(d - at[i].run->calls.data());
    std::set<std::string> seen;
    for (std::size_t k = d_index; k-- > 0;) {
      const Call& e = at[i].run->calls[k];
      if (e.stage == decider || !e.response || !seen.insert(e.stage).second) continue;
      string_leaves(*e.response, "", [&](const std::string& p, const std::string& v) {
        if (v.size() > values[i].size() && find_word(v, values[i]) != std::string::npos)
          found[e.stage + "\n" + p].push_back(i);
      });
    }
  }
  // Only for an open vocabulary: a few values are ranked better by how often each won.
  const std::set<std::string> distinct(values.begin(), values.end());
  for (const auto& [key, where] : found) {
    if (distinct.size() <= o_.max_values) break;
    if (where.size() * 4 < at.size()) continue;  // named before in at least a quarter
    const std::string stage = key.substr(0, key.find('\n'));
    const std::string pointer = key.substr(key.find('\n') + 1);
    std::vector<std::string> texts, vals;
    for (const std::size_t i : where) {
      const Call* d = latest(at[i], decider, false);
      const std::size_t d_index = static_cast<std::size_t>(d - at[i].run->calls.data());
      Instance before{at[i].run, d_index};
      const Call* e = latest(before, stage, false);
      if (!e) continue;
      if (const auto t = read(*e->response, {pointer, "", ""})) {
        texts.push_back(*t);
        vals.push_back(values[i]);
      }
    }
    if (texts.empty()) continue;
    const Scored best = best_regex(
        texts, vals,
        [&](const std::string& regex) {
          std::size_t hits = 0;
          for (std::size_t i = 0; i < texts.size(); ++i) {
            const auto caps = all_captures(regex, texts[i]);
            if (std::find(caps.begin(), caps.end(), vals[i]) != caps.end()) ++hits;
          }
          return hits;
        },
        /*shortest=*/true);  // of equal hits, the one that yields the most candidates
    // A candidate source ranks candidates: it need not name every pick, a quarter will do.
    if (best.score * 4 < at.size()) continue;
    const std::string& regex = best.regex;
    return json{{"source", "extract"},
                {"stage", stage},
                {"pointer", pointer},
                {"regex", regex},
                {"max", o_.max_candidates}};
  }
  return learned_candidates(values);
}

// The values seen, most frequent first: a `learned` source they seed.
json Drafter::learned_candidates(const std::vector<std::string>& values) const {
  std::map<std::string, std::size_t> count;
  for (const auto& v : values)
    ++count[v];
  std::vector<std::pair<std::string, std::size_t>> ranked(count.begin(), count.end());
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  json list = json::array();
  for (std::size_t i = 0; i < ranked.size() && i < o_.max_values; ++i)
    list.push_back(ranked[i].first);
  return json{{"source", "learned"}, {"values", list}, {"max", o_.max_candidates}};
}

void Drafter::add_decision(StageDraft& decider, const Var& v, const std::vector<Instance>& at,
                           const std::vector<std::string>& values) {
  decider.decides = v.name;
  Decision dec;
  dec.name = v.name;
  dec.stage = decider.name;
  dec.selection = extractor_json(v.where);
  dec.candidates = decode_candidates(decider.name, at, values);
  dec.instances = at.size();
  decisions_.push_back(std::move(dec));
}

void Drafter::add_pick(const std::string& consumer, Var v, std::vector<std::string> after,
                       std::string description, json candidates, std::size_t instances) {
  StageDraft user;
  user.name = unique_name("pick", "pick");
  user.user = true;
  user.description = std::move(description);
  user.after = std::move(after);
  user.decides = v.name;
  find(stages_, consumer)->after = {user.name};
  Decision dec;
  dec.name = v.name;
  dec.stage = user.name;
  dec.user = true;
  dec.candidates = std::move(candidates);
  dec.instances = instances;
  decisions_.push_back(std::move(dec));
  vars_.push_back(std::move(v));
  const auto at = std::find_if(stages_.begin(), stages_.end(),
                               [&](const StageDraft& x) { return x.name == consumer; });
  stages_.insert(at, std::move(user));
}

// A part of a request that no known value explains becomes a new variable: a value an earlier
// answer holds (an output), names (a decision) or offers in a list (a person's pick), a value
// an earlier request carried (bound there), or an input of this stage. `idx`: the instances,
// `span`: the first differing part of each, `residual`: all of its unexplained part.
bool Drafter::classify(const std::string& stage, const std::string& pointer,
                       const std::vector<std::string>& leaf, const std::vector<std::size_t>& idx,
                       const std::vector<std::pair<std::size_t, std::size_t>>& span,
                       const std::vector<std::pair<std::size_t, std::size_t>>& residual) {
  StageDraft& s = *find(stages_, stage);
  const std::size_t n = idx.size();
  // The part to place: the first differing span, else all of the unexplained part, else all
  // that differs in the whole text (a value that holds a value placed already: the action
  // "book a flight 1.0" holds the dialog's "1.0").
  std::vector<std::pair<std::size_t, std::size_t>> middle;
  {
    std::vector<std::string_view> whole;
    for (const std::size_t i : idx)
      whole.push_back(leaf[i]);
    std::size_t p = common_prefix(whole), min_len = SIZE_MAX;
    for (const auto& w : whole)
      min_len = std::min(min_len, w.size());
    while (p > 0 && word_char(static_cast<unsigned char>(whole[0][p - 1])) &&
           std::any_of(whole.begin(), whole.end(), [&](auto w) {
             return p < w.size() && word_char(static_cast<unsigned char>(w[p]));
           }))
      --p;
    const std::size_t q = common_suffix(whole, min_len - p);
    for (const auto& w : whole)
      middle.push_back({p, w.size() - q});
  }
  std::vector<std::string> value(n);
  std::vector<std::pair<std::size_t, std::size_t>> pos;  // of the part chosen, per instance
  std::vector<Instance> at;
  for (const std::size_t i : idx)
    at.push_back(s.instances[i]);

  // Earlier answers and requests, the latest call of each stage before this one.
  struct Hit {
    std::string stage, pointer, inner;
    bool response = false, exact = false, list_item = false, model = false;
  };
  std::map<std::string, std::vector<std::size_t>> hit_in;  // key -> instances (k)
  std::map<std::string, Hit> hits;
  // The best origin nearly every instance shares: a JSON field of an answer, a whole answer,
  // an offered list, a text an answer names it in, then the same in requests.
  auto rank = [](const Hit& h) {
    if (h.response && h.exact && !h.inner.empty() && !h.list_item) return 0;
    if (h.response && h.exact && h.inner.empty() && !h.list_item) return 1;
    if (h.response && h.list_item) return 2;
    if (h.response && !h.exact) return 3;
    if (!h.response && h.exact) return 4;
    return 5;
  };
  std::optional<Hit> chosen;
  std::size_t near_fit = 0;
  std::string near;
  std::vector<std::size_t> chosen_in;
  std::vector<std::string> chosen_value;
  std::vector<std::pair<std::size_t, std::size_t>> chosen_pos;
  for (const std::vector<std::pair<std::size_t, std::size_t>>* variant :
       {&span, &residual, static_cast<const decltype(middle)*>(&middle)}) {
    bool empty = false;
    for (std::size_t k = 0; k < n; ++k) {
      value[k] =
          leaf[idx[k]].substr((*variant)[k].first, (*variant)[k].second - (*variant)[k].first);
      empty = empty || value[k].empty();
    }
    pos = *variant;
    hit_in.clear();
    hits.clear();
    std::map<std::string, std::size_t> ran_before;  // stage -> instances it came before
    if (empty) continue;
    for (std::size_t k = 0; k < n; ++k) {
      const Instance& in = at[k];
      std::set<std::string> keys;
      std::set<std::string> stages_seen;
      for (std::size_t c = in.index; c-- > 0;) {
        const Call& e = in.run->calls[c];
        if (!stages_seen.insert(e.stage).second) continue;
        const StageDraft* es = find(stages_, e.stage);
        const bool model = es && !es->tool;
        auto note = [&](Hit h) {
          const std::string key = std::string(h.response ? "out" : "in") + "\n" + h.stage + "\n" +
                                  h.pointer + "\n" + h.inner + (h.exact ? "\n=" : "\n~");
          if (keys.insert(key).second) {
            hit_in[key].push_back(k);
            hits.emplace(key, h);
          }
        };
        if (e.response)
          string_leaves(*e.response, "", [&](const std::string& p, const std::string& v) {
            if (v == value[k]) {
              note({e.stage, p, "", true, true, false, model});
              // An item of a list the answer holds as JSON (an Anthropic tool call's
              // `input.options`), as of a list inside its text below.
              const auto slash = p.rfind('/');
              if (slash != std::string::npos && slash > 0 && is_index(p.substr(slash + 1)))
                note({e.stage, p.substr(0, slash), "", true, true, true, model});
            } else if (find_word(v, value[k]) != std::string::npos) {
              note({e.stage, p, "", true, false, false, model});
            }
            if (const auto j = inner_json(v))
              string_leaves(*j, "", [&](const std::string& ip, const std::string& iv) {
                if (iv != value[k]) return;
                const auto slash = ip.rfind('/');
                const bool item = is_index(ip.substr(slash + 1));
                note({e.stage, p, item ? ip.substr(0, slash) : ip, true, true, item, model});
              });
          });
        string_leaves(*e.request, "", [&](const std::string& p, const std::string& v) {
          if (v == value[k])
            note({e.stage, p, "", false, true, false, model});
          else if (find_word(v, value[k]) != std::string::npos)
            note({e.stage, p, "", false, false, false, model});
        });
      }
      for (const std::string& earlier : stages_seen)
        ++ran_before[earlier];
    }
    const Hit* best = nullptr;
    std::string best_key;
    for (const auto& [key, h] : hits) {
      const std::size_t fit = hit_in[key].size();
      // An origin most calls share, but too few for the draft to rely on: named in the to-do,
      // since the others are often a harness's fallback the author can tell at a glance.
      // Only another stage's answer, one that came before nearly every call: a value a
      // request carried half the time, or an answer that only some calls had before them (a
      // stage's second turn), says little.
      if (!enough(fit, n) && h.response && h.stage != stage && enough(ran_before[h.stage], n) &&
          fit * 2 >= n && fit > near_fit) {
        near_fit = fit;
        const auto& in = hit_in[key];
        std::size_t odd = 0;  // the first instance it does not fit (`in` is ascending)
        while (odd < in.size() && in[odd] == odd)
          ++odd;
        near = "in " + std::to_string(fit) + " of " + std::to_string(n) + " calls it is " +
               (h.exact ? "the answer of stage " : "named in the answer of stage ") + h.stage +
               " at " + h.pointer + (h.inner.empty() ? "" : " (JSON " + h.inner + ")") + " (run " +
               at[odd].run->id + " is one it does not fit)";
      }
      if (!enough(fit, n)) continue;
      if (!best || rank(h) < rank(*best) ||
          (rank(h) == rank(*best) && fit > hit_in[best_key].size())) {
        best = &h;
        best_key = key;
      }
    }
    // An earlier variant wins ties: the narrower part.
    if (best && (!chosen || rank(*best) < rank(*chosen))) {
      chosen = *best;
      chosen_in = hit_in[best_key];
      chosen_value = value;
      chosen_pos = pos;
    }
  }
  const Hit* best = chosen ? &*chosen : nullptr;
  near_miss_ = near;  // read only if the text is left unexplained
  if (chosen) {
    value = chosen_value;
    pos = chosen_pos;
  }
  const std::string leaf_name = name_from_pointer(pointer);
  std::vector<std::size_t> ks;  // the instances (k) the origin holds for
  std::vector<std::string> vals;
  std::vector<Instance> ins;
  if (best)
    for (const std::size_t k : chosen_in) {
      ks.push_back(k);
      vals.push_back(value[k]);
      ins.push_back(at[k]);
    }

  if (best && best->response && best->exact && !best->list_item) {
    // A whole answer, or a field of a JSON answer.
    Var v;
    v.stage = best->stage;
    v.where = {best->pointer, best->inner, ""};
    StageDraft* d = find(stages_, best->stage);
    const bool decide = best->model && !best->inner.empty() && d && d->decides.empty();
    v.kind = decide ? VarKind::decision : VarKind::output;
    v.name = unique_name(name_from_pointer(best->inner.empty() ? best->pointer : best->inner),
                         leaf_name.empty() ? best->stage + "_output" : leaf_name);
    if (decide) add_decision(*d, v, ins, vals);
    vars_.push_back(std::move(v));
    return true;
  }
  if (best && best->list_item) {
    // One item of a list an earlier answer offered: a person picked it. The draft adds a user
    // stage that decides it; this stage's request names the pick, so it binds it.
    std::vector<std::string_view> before, after;
    for (const std::size_t k : ks) {
      before.push_back(std::string_view(leaf[idx[k]]).substr(0, pos[k].first));
      after.push_back(std::string_view(leaf[idx[k]]).substr(pos[k].second));
    }
    const Context c = context_of(before, after);
    const bool whole = c.whole_left && c.whole_right;
    Var v;
    v.kind = VarKind::user_decision;
    v.stage = s.name;
    const std::string& list = best->inner.empty() ? best->pointer : best->inner;
    std::string hint = name_from(list.substr(list.rfind('/') + 1));
    if (hint.size() > 3 && hint.back() == 's') hint.pop_back();  // "actions": one action
    v.name = unique_name(hint, "pick");
    v.where = {pointer, "",
               whole && c.left.empty() && c.right.empty() ? "" : capture_regex(c, vals, whole)};
    json candidates = {{"source", "extract"},
                       {"stage", best->stage},
                       {"pointer", best->pointer},
                       {"max", o_.max_candidates}};
    if (!best->inner.empty()) candidates["json"] = best->inner;
    add_pick(stage, std::move(v), {best->stage},
             "A person picks from what the stage before offered.", std::move(candidates),
             ks.size());  // `s` and `best` are invalid from here
    return true;
  }
  if (best) {
    // Named inside a longer text: an answer's text names it (a decision, read by a regex),
    // or a request carries it inside a longer value (bound there, by a regex).
    std::vector<std::string> texts;
    for (const Instance& in : ins) {
      const Call* e = latest(in, best->stage, false);
      const json* doc = best->response ? e->response : e->request;
      texts.push_back(read(*doc, {best->pointer, "", ""}).value_or(""));
    }
    // An answer's selection must be unambiguous; a request's value need only come first.
    const bool response = best->response;
    const Scored found = best_regex(
        texts, vals,
        [&](const std::string& regex) {
          return response ? selects(regex, texts, vals) : firsts(regex, texts, vals);
        },
        /*shortest=*/false);  // of equal fits, the most specific
    if (!enough(found.score, n)) return false;
    const Context& c = found.context;
    const std::string& regex = found.regex;
    Var v;
    v.stage = best->stage;
    v.where = {best->pointer, "", regex};
    StageDraft* d = find(stages_, best->stage);
    const bool decide = best->response && best->model && d && d->decides.empty();
    v.kind = best->response ? (decide ? VarKind::decision : VarKind::output) : VarKind::input;
    v.name = unique_name(leaf_name.empty() ? name_from(c.left) : leaf_name, best->stage + "_value");
    if (decide) add_decision(*d, v, ins, vals);
    vars_.push_back(std::move(v));
    return true;
  }
  // Nothing earlier holds it: the caller sent it, an input this stage binds (all of the part
  // that differs, which may hold several values the caller put together).
  std::vector<std::string_view> before, after;
  std::vector<std::string> whole_values;
  for (std::size_t k = 0; k < n; ++k) {
    const std::string& l = leaf[idx[k]];
    before.push_back(std::string_view(l).substr(0, residual[k].first));
    after.push_back(std::string_view(l).substr(residual[k].second));
    whole_values.push_back(l.substr(residual[k].first, residual[k].second - residual[k].first));
  }
  const Context c = context_of(before, after);
  const bool whole = c.whole_left && c.whole_right;
  Var v;
  v.kind = VarKind::input;
  v.stage = s.name;
  if (whole) {  // constant text around it: `^before(.*)after$`
    v.where = {pointer, "",
               c.left.empty() && c.right.empty() ? "" : capture_regex(c, whole_values, true)};
  } else {  // other values around it too: the whole text is the input
    v.where = {pointer, "", ""};
    for (std::size_t k = 0; k < n; ++k)
      whole_values[k] = leaf[idx[k]];
  }
  std::size_t fit = 0;
  for (std::size_t k = 0; k < n; ++k)
    if (read(*at[k].call().request, v.where) == whole_values[k]) ++fit;
  if (!enough(fit, n)) return false;
  const bool first = !stages_.empty() && stages_.front().name == s.name;
  const std::string hint = whole ? name_from(c.left) : std::string();
  // A later stage's own input that takes a few values, each again and again ("send" or
  // "escalate"): a person's pick among fixed options, or a setting of the harness. Either way
  // the workflow waits for it after the stages before, so the draft makes it a user decision
  // whose candidates are the values seen, and fills each while it waits. Not where most calls
  // had it named by an earlier answer: that answer more likely decides it (the to-do below).
  std::map<std::string, std::size_t> seen;
  for (std::size_t k = 0; k < n; ++k)
    ++seen[whole_values[k]];
  const bool few =
      seen.size() >= 2 && seen.size() <= o_.max_values && n >= 4 * seen.size() &&
      std::all_of(seen.begin(), seen.end(), [](const auto& e) { return e.second >= 2; });
  const bool after_user = std::any_of(s.after.begin(), s.after.end(), [&](const std::string& a) {
    const StageDraft* b = find(stages_, a);
    return b && b->user;
  });
  if (few && near.empty() && !first && !in_loop(s.name) && !s.after.empty() && !after_user) {
    v.kind = VarKind::user_decision;
    v.name = unique_name(hint.empty() ? leaf_name : hint, "choice");
    s.notes.push_back("the request names one of " + std::to_string(seen.size()) + " values at " +
                      pointer +
                      ", each in several runs: drafted as a person's pick that fills each value "
                      "while the workflow waits; make it an input if it is known before the "
                      "stages ahead of it run");
    add_pick(stage, std::move(v), s.after,
             "A person picks one of the values the next stage's calls named.",
             learned_candidates(whole_values), n);  // `s` is invalid from here
    return true;
  }
  if (!near.empty())  // most calls say it came from earlier: a fallback may hide a decision
    s.todos.push_back("the text at " + pointer +
                      " is drafted as this stage's own input, so no fill can render it before "
                      "the call, but " +
                      near + ": if the other calls are a fallback of the harness, bind it from " +
                      "there, or draft again from a recording without them");
  v.name = unique_name(hint.empty() ? (first ? "input" : leaf_name) : hint, s.name + "_input");
  vars_.push_back(std::move(v));
  return true;
}

std::optional<std::string> Drafter::infer_leaf(const std::string& stage, const std::string& pointer,
                                               const std::vector<std::string>& values) {
  near_miss_.clear();
  for (int attempt = 0; attempt < 8; ++attempt) {
    const StageDraft& st = *find(stages_, stage);
    std::vector<Cand> cands;
    for (std::size_t k = 0; k < vars_.size(); ++k) {
      Cand c;
      c.var = static_cast<int>(k);
      for (const Instance& in : st.instances)
        c.values.push_back(value_of(vars_[k], in));
      cands.push_back(std::move(c));
    }
    if (!loop_.empty() && in_loop(stage)) {
      Cand c;
      for (const Instance& in : st.instances)
        c.values.push_back(std::to_string(in.call().rep));
      c.var = -2;  // the loop index
      cands.push_back(std::move(c));
    }
    // Whole values of earlier answers: outputs, declared when used.
    std::map<std::string, std::size_t> index;
    for (std::size_t i = 0; i < st.instances.size(); ++i) {
      const Instance& in = st.instances[i];
      std::set<std::string> seen;
      for (std::size_t k = in.index; k-- > 0;) {
        const Call& e = in.run->calls[k];
        if (!seen.insert(e.stage).second || !e.response) continue;
        string_leaves(*e.response, "", [&](const std::string& p, const std::string& v) {
          if (v.size() < 3) return;
          const std::string key = e.stage + "\n" + p;
          auto [it, fresh] = index.emplace(key, cands.size());
          if (fresh) {
            Cand c;
            c.values.assign(st.instances.size(), std::nullopt);
            c.make = Var{"", VarKind::output, e.stage, {p, "", ""}};
            cands.push_back(std::move(c));
          }
          cands[it->second].values[i] = v;
        });
      }
    }
    std::vector<std::string_view> views;
    std::vector<std::size_t> base(values.size(), 0), all(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      views.push_back(values[i]);
      all[i] = i;
    }
    std::set<std::size_t> used;
    const Explained e = explain(views, base, all, cands, used, 0);
    if (e.ok) {
      std::map<std::size_t, std::string> names;
      for (const std::size_t j : used) {
        if (cands[j].var >= 0) {
          names[j] = vars_[static_cast<std::size_t>(cands[j].var)].name;
        } else if (cands[j].var == -2) {
          names[j] = loop_name_;
        } else {
          Var v = *cands[j].make;
          const std::string hint = name_from_pointer(v.where.pointer);
          v.name =
              unique_name(hint.empty() ? name_from_pointer(pointer) : hint, v.stage + "_output");
          names[j] = v.name;
          vars_.push_back(std::move(v));
        }
      }
      std::string out;
      for (std::size_t i = 0; i < e.text.size(); ++i) {
        if (e.text[i] != '\x01') {
          out += e.text[i];
          continue;
        }
        const std::size_t close = e.text.find('\x02', i);
        out += "{{" + names[std::stoul(e.text.substr(i + 1, close - i - 1))] + "}}";
        i = close;
      }
      if (e.dropped > 0)
        find(stages_, stage)
            ->notes.push_back(std::to_string(e.dropped) + " of " + std::to_string(values.size()) +
                              " recorded calls do not fit the text at " + pointer +
                              "; those would go to the engine");
      return out;
    }
    std::vector<std::string> sub;
    for (const std::size_t i : e.idx)
      sub.push_back(values[i]);
    const auto span = first_span(sub, e.residual);
    if (!classify(stage, pointer, values, e.idx, span, e.residual)) break;
  }
  return std::nullopt;
}

// The same JSON with every string emptied: the shape two requests must share.
json shape(const json& j) {
  if (j.is_string()) return "";
  if (j.is_object()) {
    json out = json::object();
    for (const auto& [k, v] : j.items())
      out[k] = shape(v);
    return out;
  }
  if (j.is_array()) {
    json out = json::array();
    for (const auto& v : j)
      out.push_back(shape(v));
    return out;
  }
  return j;
}

// A harness that resends its conversation: every call of a chat stage carries the run's
// messages so far, so the list grows along a run (the last message may be a new one each time)
// while its first messages stay put. Returns how many leading messages every run's calls share,
// or nothing when the calls do not follow that pattern (or all have one length).
std::optional<std::size_t> resent_history(const std::vector<Instance>& instances,
                                          const std::string& list) {
  std::map<const RunCalls*, std::vector<const json*>> by_run;  // instances are in run order
  std::set<std::size_t> lengths;
  for (const Instance& in : instances) {
    const json* m = at_pointer(*in.call().request, "/" + list);
    if (!m || !m->is_array() || m->empty()) return std::nullopt;
    by_run[in.run].push_back(m);
    lengths.insert(m->size());
  }
  if (lengths.size() < 2) return std::nullopt;
  std::size_t head = *lengths.begin();
  bool grows = false;
  for (const auto& [run, lists] : by_run)
    for (std::size_t i = 1; i < lists.size(); ++i) {
      const json& a = *lists[i - 1];
      const json& b = *lists[i];
      if (b.size() < a.size()) return std::nullopt;  // a list that shrinks is not a history
      grows = grows || b.size() > a.size();
      std::size_t same = 0;
      while (same < a.size() && a[same] == b[same])
        ++same;
      head = std::min(head, same);
    }
  if (!grows || head == 0) return std::nullopt;
  return head;
}

// The fields of a model request that carry its text (the others are parameters): the chat
// and Anthropic messages, a completion's prompt, a response's input, and the system prompt or
// instructions those two protocols send beside them.
constexpr const char* kTextFields[] = {"messages", "prompt", "input", "system", "instructions"};

bool is_text_field(std::string_view key) {
  return std::any_of(std::begin(kTextFields), std::end(kTextFields),
                     [&](const char* k) { return key == k; });
}

bool is_param(const std::string& key) {
  return !is_text_field(key) && key != "model" && key != "stream" && key != "stream_options";
}

void Drafter::infer_stage(StageDraft& s0) {
  const std::string stage = s0.name;
  auto self = [&]() -> StageDraft& { return *find(stages_, stage); };
  const Instance& first = s0.instances.front();
  const json& req0 = *first.call().request;
  // Latency, for wait_ms.
  {
    std::vector<double> lat;
    for (const Instance& in : s0.instances)
      lat.push_back(in.call().latency_ms);
    std::sort(lat.begin(), lat.end());
    s0.p90_latency_ms = lat[std::min(lat.size() - 1, lat.size() * 9 / 10)];
  }
  json body = json::object();
  if (s0.tool) {
    body = req0;
  } else {
    s0.model = string_or(req0, "model");
    for (const Instance& in : s0.instances)
      if (string_or(*in.call().request, "model") != s0.model) {
        s0.todos.push_back("the model differs between calls (" + s0.model + ", " +
                           string_or(*in.call().request, "model") +
                           "): bind it or split the stage");
        break;
      }
    for (const auto& [k, v] : req0.items()) {
      if (!is_param(k)) {
        if (is_text_field(k)) body[k] = v;
        continue;
      }
      bool same = true;
      for (const Instance& in : s0.instances)
        same = same && in.call().request->contains(k) && in.call().request->at(k) == v;
      if (same) {
        s0.params[k] = v;
      } else {
        s0.todos.push_back("params." + k +
                           " differs between calls; the draft keeps the first value");
        s0.params[k] = v;
      }
    }
    const double t = number_or(s0.params, "temperature", 1.0);
    s0.greedy = t == 0 || s0.params.contains("seed");
  }
  // Each call's text at `at` (its request, read as the template will).
  auto values_at = [&](const std::string& at) {
    std::vector<std::string> values;
    for (const Instance& in : self().instances)
      values.push_back(read(*in.call().request, {at, "", ""}).value_or(""));
    return values;
  };
  auto same = [](const std::vector<std::string>& v) {
    return std::all_of(v.begin(), v.end(), [&](const std::string& x) { return x == v[0]; });
  };
  // The text at `at` explained as literal text and variables into `slot`, or a to-do.
  auto explain = [&](const std::string& at, json& slot) {
    const std::vector<std::string> values = values_at(at);
    if (same(values)) {
      if (values[0].find("{{") != std::string::npos)
        self().todos.push_back("the text at " + at + " holds `{{`, which templates read as a tag");
      return;
    }
    if (const auto text = infer_leaf(stage, at, values)) {
      slot = *text;
    } else {
      const std::string why =
          near_miss_.empty()
              ? std::string(" and the draft found no source for it: bind it")
              : " and the draft found no source that nearly every call shares, but " + near_miss_ +
                    ": if the other calls are a fallback of the harness, bind it from there, or "
                    "draft again from a recording without them";
      self().todos.push_back(
          "the text at " + at + " varies across runs (" +
          std::to_string(std::set<std::string>(values.begin(), values.end()).size()) + " values)" +
          why + "; the draft keeps the first call's text, which only that call matches");
    }
  };
  // A stage that carries on an earlier stage's resent conversation: its list is that stage's
  // latest list and a few messages more (the earlier answer, a tool's result, a person's pick).
  // The request splices the earlier list in (as templates/coding-agent.yaml's `answer` does) and
  // explains the messages after it, read from the list's end ("/messages/-1/content").
  // Tried first: a stage that also grows along a run (a pick in every few turns) is better
  // described as carrying the conversation on, which a fill can render, than as resending it.
  const std::string list = self().api == "responses" ? "input" : "messages";
  std::string spliced;
  if (!self().tool && body.contains(list) && body[list].is_array()) {
    for (std::size_t k = 0; k < stages_.size() && stages_[k].name != stage; ++k) {
      if (stages_[k].history.empty() || stages_[k].api != self().api) continue;
      // Copied: explaining a message below may add a stage (a person's pick) to stages_.
      const std::string earlier = stages_[k].name, history = stages_[k].history;
      std::optional<std::size_t> more;
      bool fits = true;
      for (const Instance& in : self().instances) {
        const Call* c = latest(in, earlier, false);
        const json* before = c ? at_pointer(*c->request, "/" + list) : nullptr;
        const json* now = at_pointer(*in.call().request, "/" + list);
        fits = before && now && before->is_array() && now->is_array() &&
               now->size() > before->size() &&
               std::equal(before->begin(), before->end(), now->begin()) &&
               (!more || *more == now->size() - before->size());
        if (!fits) break;
        more = now->size() - before->size();
      }
      if (!fits || !more) continue;
      spliced = history;
      const json& now0 = req0.at(list);
      json items = json::array({json{{"$splice", "{{" + spliced + "}}"}}});
      for (std::size_t j = now0.size() - *more; j < now0.size(); ++j)
        items.push_back(now0[j]);
      for (std::size_t j = 0; j < *more; ++j) {
        std::vector<std::string> subs;
        string_leaves(items[1 + j], "",
                      [&](const std::string& sub, const std::string&) { subs.push_back(sub); });
        for (const std::string& sub : subs)
          explain("/" + list + "/-" + std::to_string(*more - j) + sub,
                  items[1 + j].at(json::json_pointer(sub)));
      }
      body[list] = items;
      self().notes.push_back("its calls carry on " + earlier + "'s conversation: its " + list +
                             " splice in " + spliced + " and add " + std::to_string(*more) +
                             " more");
      break;
    }
  }
  // A stage whose calls resend the conversation so far: the request is that list, bound whole
  // (as templates/coding-agent.yaml binds it). Its leading messages, which every call repeats,
  // may still carry values later stages need (the question a run asks): those are inferred as
  // usual, and whatever explains them is bound here too.
  bool list_explained = !spliced.empty();  // the list's leaves need no explaining below
  if (!self().tool && !list_explained && body.contains(list) && body[list].is_array()) {
    if (const auto head = resent_history(self().instances, list)) {
      std::size_t shortest = static_cast<std::size_t>(-1), longest = 0;
      for (const Instance& in : self().instances) {
        const std::size_t n = in.call().request->at(list).size();
        shortest = std::min(shortest, n);
        longest = std::max(longest, n);
      }
      const std::string history = unique_name("history", stage + "_history");
      vars_.push_back(Var{history, VarKind::input, stage, {"/" + list, "", ""}});
      std::vector<std::string> pointers;
      for (std::size_t i = 0; i < *head; ++i)
        string_leaves(req0.at(list).at(i), "/" + list + "/" + std::to_string(i),
                      [&](const std::string& p, const std::string&) { pointers.push_back(p); });
      const std::size_t notes = self().notes.size();
      for (const std::string& p : pointers)
        if (const auto values = values_at(p); !same(values))
          infer_leaf(stage, p, values);  // binds what it finds; the text itself stays in the list
      self().notes.resize(notes);        // calls a leaf's text does not fit still match the list
      body[list] = "{{" + history + "}}";
      self().notes.push_back("its calls resend the conversation so far (" +
                             std::to_string(shortest) + " to " + std::to_string(longest) +
                             " messages): the request is that list, bound whole as " + history);
      self().history = history;
      list_explained = true;
    }
  }
  // Every call must have the first one's shape.
  auto body_of = [&](const json& request) {
    if (self().tool) return request;
    json only = json::object();
    for (const char* k : kTextFields)
      if (request.contains(k) && !(list_explained && list == k)) only[k] = request[k];
    return only;
  };
  const json want = shape(body_of(req0));
  std::vector<const Instance*> same_shape;
  for (const Instance& in : self().instances)
    if (shape(body_of(*in.call().request)) == want) same_shape.push_back(&in);
  const std::size_t other = self().instances.size() - same_shape.size();
  if (other > 0)
    self().todos.push_back(std::to_string(other) + " of " +
                           std::to_string(self().instances.size()) +
                           " calls have a different request shape (more or fewer messages or "
                           "fields); the draft follows the first call's");
  // Only calls of the first shape are explained; keep them as the stage's instances.
  {
    std::vector<Instance> kept;
    for (const Instance* in : same_shape)
      kept.push_back(*in);
    self().instances = std::move(kept);
  }
  std::vector<std::string> pointers;
  string_leaves(body, "", [&](const std::string& p, const std::string&) {
    // A resent or spliced list is explained above.
    if (list_explained && (p == "/" + list || p.starts_with("/" + list + "/"))) return;
    pointers.push_back(p);
  });
  for (const std::string& p : pointers)
    explain(p, body.at(json::json_pointer(p)));
  // Varying numbers and booleans stay literal.
  self().body = body;
}

Draft Drafter::draft() {
  Draft out;
  out.workflow = workflow_;
  out.runs = runs_.size();
  double first = 1e300, last = -1e300;
  for (const RunCalls& r : runs_)
    for (const Call& c : r.calls) {
      ++out.calls;
      first = std::min(first, c.start_ms);
      last = std::max(last, c.start_ms + c.latency_ms);
    }
  span_s_ = out.calls ? (last - first) / 1000.0 : 0;
  find_stages();
  find_loop();
  find_order();
  // Names of stages and of their tools, then each request in run order.
  std::vector<std::string> order;
  for (const auto& s : stages_)
    order.push_back(s.name);
  for (const std::string& name : order)
    infer_stage(*find(stages_, name));
  for (StageDraft& s : stages_)
    if (s.tool && !o_.read_only_tools.count(s.tool_name))
      s.todos.push_back("is tool " + s.tool_name +
                        " read-only? If it is, add `speculable: true` and the record keys it reads "
                        "(`reads:`); if it writes records, list them under `writes:`");
  out.yaml = yaml();
  for (const auto& t : todos_)
    out.todos.push_back(t);
  for (const auto& s : stages_)
    for (const auto& t : s.todos)
      out.todos.push_back(s.name + ": " + t);
  return out;
}

// -- the template as YAML -----------------------------------------------------------------------

bool reserved(std::string_view s) {
  static const char* words[] = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"};
  std::string lower;
  for (const char c : s)
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return std::any_of(std::begin(words), std::end(words), [&](const char* w) { return lower == w; });
}

std::string scalar(const json& v) {
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    const bool plain = !s.empty() &&
                       (std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '/') &&
                       std::all_of(s.begin(), s.end(),
                                   [](char c) {
                                     return std::isalnum(static_cast<unsigned char>(c)) ||
                                            c == '_' || c == '.' || c == '/' || c == '-';
                                   }) &&
                       !reserved(s);
    return plain ? s : v.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  if (v.is_object()) return "{}";
  if (v.is_array()) return "[]";
  return v.dump();
}

void put(std::ostream& out, int indent, const std::string& key, const json& v);

void item(std::ostream& out, int indent, const json& v) {
  if (v.is_object() && !v.empty()) {
    std::ostringstream inner;
    for (const auto& [k, x] : v.items())
      put(inner, indent + 2, scalar(json(k)), x);
    std::string text = inner.str();
    text.replace(static_cast<std::size_t>(indent), 2, "- ");
    out << text;
  } else {
    out << std::string(static_cast<std::size_t>(indent), ' ') << "- " << scalar(v) << "\n";
  }
}

void put(std::ostream& out, int indent, const std::string& key, const json& v) {
  out << std::string(static_cast<std::size_t>(indent), ' ') << key << ":";
  if (v.is_object() && !v.empty()) {
    out << "\n";
    for (const auto& [k, x] : v.items())
      put(out, indent + 2, scalar(json(k)), x);
  } else if (v.is_array() && !v.empty()) {
    if (std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_primitive(); })) {
      out << " [";
      for (std::size_t i = 0; i < v.size(); ++i)
        out << (i ? ", " : "") << scalar(v[i]);
      out << "]\n";
    } else {
      out << "\n";
      for (const auto& x : v)
        item(out, indent + 2, x);
    }
  } else {
    out << " " << scalar(v) << "\n";
  }
}

void todo(std::ostream& out, int indent, const std::string& text) {
  std::string line = text;
  std::replace(line.begin(), line.end(), '\n', ' ');
  out << std::string(static_cast<std::size_t>(indent), ' ') << "# dynrt-todo: " << line << "\n";
}

// The record keys a read-only tool reads, its argument names replaced by what they render.
std::optional<std::string> render_key(const std::string& key, const json& arguments) {
  std::string out;
  for (std::size_t i = 0; i < key.size();) {
    const std::size_t open = key.find("{{", i);
    if (open == std::string::npos) {
      out += key.substr(i);
      break;
    }
    out += key.substr(i, open - i);
    const std::size_t close = key.find("}}", open);
    if (close == std::string::npos) return std::nullopt;
    std::string name = key.substr(open + 2, close - open - 2);
    name.erase(0, name.find_first_not_of(' '));
    name.erase(name.find_last_not_of(' ') + 1);
    if (!arguments.is_object() || !arguments.contains(name) || !arguments[name].is_string())
      return std::nullopt;
    out += arguments[name].get<std::string>();
    i = close + 2;
  }
  return out;
}

bool mentions(const json& j, const std::string& tag) {
  bool found = false;
  string_leaves(j, "", [&](const std::string&, const std::string& v) {
    found = found || v.find(tag) != std::string::npos;
  });
  return found;
}

std::string Drafter::yaml() const {
  // Which variables the requests (and record keys) use; only those are declared.
  std::map<std::string, json> reads;  // stage -> keys
  std::map<std::string, std::string> tool_todo;
  for (const StageDraft& s : stages_) {
    if (!s.tool) continue;
    const auto t = o_.read_only_tools.find(s.tool_name);
    if (t == o_.read_only_tools.end()) continue;
    json keys = json::array();
    for (const std::string& k : t->second.reads) {
      if (const auto r = render_key(k, s.body))
        keys.push_back(*r);
      else
        tool_todo[s.name] =
            "the tool's record key " + k + " names an argument the calls do not send";
    }
    reads[s.name] = keys;
  }
  auto used = [&](const std::string& name) {
    const std::string tag = "{{" + name + "}}";
    for (const StageDraft& s : stages_)
      if (mentions(s.body, tag)) return true;
    for (const auto& [stage, keys] : reads)
      if (mentions(keys, tag)) return true;
    return false;
  };
  std::ostringstream out;
  out << "# Drafted by `dynrt template draft` from " << runs_.size() << " recorded runs.\n"
      << "# Review it before serving it: every `dynrt-todo` below (dynrt lint lists them), the\n"
      << "# descriptions, and which stages are speculable (safe to run twice).\n"
      << "version: 1\n"
      << "workflow: " << scalar(json(workflow_)) << "\n"
      << "description: "
      << scalar(json("Drafted from " + std::to_string(runs_.size()) + " recorded runs of " +
                     workflow_ + "."))
      << "\n";
  for (const auto& t : todos_)
    todo(out, 0, t);
  // inputs
  std::vector<const Var*> inputs;
  for (const Var& v : vars_)
    if (v.kind == VarKind::input && used(v.name)) inputs.push_back(&v);
  if (!inputs.empty()) {
    out << "\ninputs:\n";
    for (const Var* v : inputs) {
      out << "  " << v->name << ":\n";
      out << "    description: "
          << scalar(json("Sent in the request of stage " + v->stage + ", at " + v->where.pointer +
                         "."))
          << "\n";
    }
  }
  std::set<std::string> live_decisions;
  for (const Decision& d : decisions_)
    if (used(d.name)) live_decisions.insert(d.name);
  double wait_ms = 30000;
  out << "\nstages:\n";
  for (const StageDraft& s : stages_) {
    out << "  " << s.name << ":\n";
    for (const auto& t : s.todos)
      todo(out, 4, t);
    for (const auto& note : s.notes)
      out << "    # " << note << "\n";
    if (const auto t = tool_todo.find(s.name); t != tool_todo.end()) todo(out, 4, t->second);
    out << "    kind: " << (s.user ? "user" : s.tool ? "tool" : "model") << "\n";
    out << "    description: "
        << scalar(json(s.user ? s.description
                              : "Seen in " + std::to_string(s.instances.size()) + " calls."))
        << "\n";
    if (s.after.size() == 1) out << "    after: " << s.after[0] << "\n";
    if (s.after.size() > 1) put(out, 4, "after", json(s.after));
    if (!s.decides.empty() && live_decisions.count(s.decides))
      out << "    decides: " << s.decides << "\n";
    if (s.user) continue;
    json bind = json::object();
    json outputs = json::object();
    for (const Var& v : vars_) {
      if (v.stage != s.name || !used(v.name)) continue;
      const json where = v.where.inner.empty() && v.where.regex.empty() ? json(v.where.pointer)
                                                                        : extractor_json(v.where);
      if (v.kind == VarKind::input ||
          (v.kind == VarKind::user_decision && live_decisions.count(v.name)))
        bind[v.name] = where;
      if (v.kind == VarKind::output) outputs[v.name] = where;
    }
    bool speculable = false;
    if (s.tool) {
      speculable = reads.count(s.name) > 0;
      out << "    tool: " << scalar(json(s.tool_name)) << "\n";
    } else {
      speculable = s.greedy;
      if (s.api != "chat") out << "    api: " << s.api << "\n";
      out << "    model: " << scalar(json(s.model)) << "\n";
      if (!s.params.empty()) put(out, 4, "params", s.params);
      if (!speculable)
        out << "    # not speculable: it samples (temperature above 0, no seed), so a second run "
               "could answer differently\n";
    }
    if (!bind.empty()) put(out, 4, "bind", bind);
    if (speculable) {
      out << "    speculable: true\n";
      wait_ms = std::max(wait_ms, s.p90_latency_ms * 2);
    }
    if (s.tool && reads.count(s.name) && !reads.at(s.name).empty())
      put(out, 4, "reads", reads.at(s.name));
    put(out, 4, s.tool ? "arguments" : "request", s.body);
    if (!outputs.empty()) put(out, 4, "outputs", outputs);
  }
  if (!live_decisions.empty()) {
    out << "\ndecisions:\n";
    for (const Decision& d : decisions_) {
      if (!live_decisions.count(d.name)) continue;
      out << "  " << d.name << ":\n";
      out << "    description: "
          << scalar(json(std::string(d.user ? "Picked by a person" : "Named by stage " + d.stage) +
                         " in " + std::to_string(d.instances) + " recorded calls."))
          << "\n";
      if (d.user) out << "    window: user\n";
      out << "    promotion: " << (d.user ? "independent" : "exclusive") << "\n";
      put(out, 4, "candidates", d.candidates);
      if (!d.user) put(out, 4, "selection", d.selection);
    }
  }
  if (!loop_.empty()) {
    out << "\nloops:\n  " << loop_name_ << ":\n"
        << "    description: " << scalar(json("Stages that repeat within a run.")) << "\n";
    put(out, 4, "stages", json(loop_));
    out << "    max: " << loop_max_ << "   # the most repetitions seen in one run\n";
  }
  const double wait = std::min(300000.0, std::ceil(wait_ms / 1000.0) * 1000.0);
  const double ttl = std::min(86400.0, std::max(600.0, std::ceil(span_s_ * 2 / 60.0) * 60.0));
  out << "\nlimits:\n"
      << "  max_fills: " << o_.max_candidates << "\n"
      << "  wait_ms: " << static_cast<long>(wait)
      << "   # how long a call waits for its running fill: 30 s, or twice the slowest speculable "
         "stage's 90th-percentile latency\n"
      << "  ttl_s: " << static_cast<long>(ttl) << "   # twice the recording's span, at least 600\n";
  return out.str();
}

}  // namespace

std::vector<Draft> draft_templates(const std::vector<json>& records, const DraftOptions& options) {
  std::map<std::string, std::map<std::string, RunCalls>> by_workflow;
  std::size_t line = 0;
  for (const json& r : records) {
    if (!r.is_object()) continue;
    auto text = [&](const char* k) {
      return r.contains(k) && r[k].is_string() ? r[k].get<std::string>() : std::string();
    };
    const std::string workflow = text("workflow"), id = text("id"), stage = text("stage"),
                      endpoint = text("endpoint");
    if (workflow.empty() || id.empty() || stage.empty() || endpoint.empty() ||
        !r.contains("request") || !r["request"].is_object())
      continue;
    // A failed call says nothing of the workflow, nor does one whose status is not a number.
    if (const auto st = r.find("status"); st != r.end() && !(st->is_number() && *st == 200))
      continue;
    Call c;
    c.stage = stage;
    c.endpoint = endpoint;
    c.request = &r["request"];
    c.response = r.contains("response") && r["response"].is_object() ? &r["response"] : nullptr;
    c.latency_ms = number_or(r, "latency_ms", 0.0);
    // When the call started; recordings without `start_ms` give it to the millisecond only.
    c.start_ms = r.contains("start_ms") && r["start_ms"].is_number()
                     ? r["start_ms"].get<double>()
                     : number_or(r, "ts_ms", 0.0) - c.latency_ms;
    c.line = line++;
    RunCalls& run = by_workflow[workflow][text("tenant") + "\n" + id];
    run.id = id;
    run.calls.push_back(c);
  }
  std::vector<Draft> out;
  for (auto& [workflow, by_id] : by_workflow) {
    std::vector<RunCalls> runs;
    for (auto& [key, run] : by_id) {
      // In the order they started; of two that started together, the one answered first.
      std::stable_sort(run.calls.begin(), run.calls.end(), [](const Call& a, const Call& b) {
        return a.start_ms != b.start_ms ? a.start_ms < b.start_ms : a.line < b.line;
      });
      std::map<std::string, std::size_t> seen;
      for (Call& c : run.calls)
        c.rep = seen[c.stage]++;
      runs.push_back(std::move(run));
    }
    std::stable_sort(runs.begin(), runs.end(), [](const RunCalls& a, const RunCalls& b) {
      return a.calls.front().start_ms < b.calls.front().start_ms;
    });
    out.push_back(Drafter(workflow, std::move(runs), options).draft());
  }
  return out;
}

}  // namespace dynrt::dsl

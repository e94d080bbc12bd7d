#include "engines/tools/corpus.hpp"

#include "engines/read_file.hpp"
#include "runtime/json_text.hpp"

#include <algorithm>
#include <cctype>
#include <set>

namespace dynrt::engines {

using nlohmann::json;

bool scoped_key_template(std::string_view tmpl) {
  const auto open = tmpl.find("{{");
  if (open == std::string_view::npos) return !tmpl.empty();
  const auto prefix = tmpl.substr(0, open);
  return prefix.find_first_not_of(" \t") != std::string_view::npos;
}

Expected<std::string> render_key(std::string_view tmpl, const json& arguments) {
  std::string out;
  std::size_t pos = 0;
  while (true) {
    const std::size_t open = tmpl.find("{{", pos);
    if (open == std::string_view::npos) {
      out.append(tmpl.substr(pos));
      return out;
    }
    const std::size_t close = tmpl.find("}}", open + 2);
    if (close == std::string_view::npos) return make_error("unclosed {{ in key template");
    out.append(tmpl.substr(pos, open - pos));
    std::string name(tmpl.substr(open + 2, close - open - 2));
    name.erase(0, name.find_first_not_of(' '));
    name.erase(name.find_last_not_of(' ') + 1);
    if (!arguments.is_object() || !arguments.contains(name)) {
      return make_error("missing argument \"" + name + "\"");
    }
    const json& v = arguments[name];
    if (v.is_string()) {
      out += v.get<std::string>();
    } else if (v.is_number()) {
      out += v.dump();
    } else {
      return make_error("argument \"" + name + "\" must be a string or a number");
    }
    pos = close + 2;
  }
}

Expected<std::shared_ptr<Corpus>> Corpus::from_json(const json& documents) {
  if (!documents.is_array()) return make_error("the corpus must be a JSON array of documents");
  auto c = std::make_shared<Corpus>();
  for (const json& d : documents) {
    if (!d.is_object() || !d.contains("key") || !d["key"].is_string() || !d.contains("text") ||
        !d["text"].is_string()) {
      return make_error("every corpus document needs a string \"key\" and \"text\"");
    }
    c->put(d["key"].get<std::string>(), d["text"].get<std::string>());
  }
  return c;
}

void Corpus::add_tool(std::string name, ToolSpec spec) {
  std::lock_guard lock(mutex_);
  tools_[std::move(name)] = std::move(spec);
}

void Corpus::put(std::string key, std::string text) {
  std::lock_guard lock(mutex_);
  Document& d = documents_[std::move(key)];
  d.text = std::move(text);
  ++d.version;
}

std::uint64_t Corpus::version(const std::string& key) const {
  std::lock_guard lock(mutex_);
  const auto it = documents_.find(key);
  return it == documents_.end() ? 0 : it->second.version;
}

std::size_t Corpus::size() const {
  std::lock_guard lock(mutex_);
  return documents_.size();
}

bool Corpus::has(std::string_view tool) const {
  std::lock_guard lock(mutex_);
  return tools_.find(tool) != tools_.end();
}

void Corpus::call(ToolCall call, ToolCallback done) {
  auto r = run(call);
  if (!r) return done(ToolError{ErrorKind::rejected, 400, {}, r.error().message});
  done(std::move(*r));
}

namespace {

std::set<std::string> words(std::string_view text) {
  std::set<std::string> out;
  std::string w;
  for (const char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      w.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    } else if (!w.empty()) {
      out.insert(std::move(w));
      w.clear();
    }
  }
  if (!w.empty()) out.insert(std::move(w));
  return out;
}

}  // namespace

Expected<ToolResult> Corpus::run(const ToolCall& call) {
  std::lock_guard lock(mutex_);
  const auto tool = tools_.find(call.tool);
  if (tool == tools_.end()) return make_error("unknown tool \"" + call.tool + "\"");
  const ToolSpec& spec = tool->second;
  ToolResult r;
  switch (spec.kind) {
    case Kind::lookup: {
      auto key = render_key(spec.key_template, call.arguments);
      if (!key) return make_error(call.tool + ": " + key.error().message);
      const auto it = documents_.find(*key);
      const bool found = it != documents_.end();
      r.output = {{"key", *key},
                  {"found", found},
                  {"passage", found ? it->second.text : std::string()},
                  {"version", found ? it->second.version : 0}};
      r.reads.push_back(ToolRead{*key, found ? it->second.version : 0});
      return r;
    }
    case Kind::search: {
      if (!call.arguments.is_object() || !call.arguments.contains("query") ||
          !call.arguments["query"].is_string()) {
        return make_error(call.tool + ": needs a string \"query\"");
      }
      const auto given = call.arguments.find("k");
      const bool has_k = given != call.arguments.end() && !given->is_null();
      if (has_k && !(given->is_number_integer() && given->get<std::int64_t>() >= 1 &&
                     given->get<std::int64_t>() <= 100))
        return make_error(call.tool + ": \"k\" must be an integer from 1 to 100");
      const int k = has_k ? given->get<int>() : 3;
      const std::set<std::string> query = words(call.arguments["query"].get<std::string>());
      std::vector<std::pair<int, const std::pair<const std::string, Document>*>> scored;
      for (const auto& doc : documents_) {
        if (!doc.first.starts_with(spec.key_template)) continue;
        int score = 0;
        for (const std::string& w : words(doc.first + " " + doc.second.text)) {
          score += query.count(w) ? 1 : 0;
        }
        if (score > 0) scored.emplace_back(score, &doc);
      }
      std::stable_sort(scored.begin(), scored.end(),
                       [](const auto& a, const auto& b) { return a.first > b.first; });
      json results = json::array();
      for (int i = 0; i < k && i < static_cast<int>(scored.size()); ++i) {
        const auto& [key, doc] = *scored[static_cast<std::size_t>(i)].second;
        results.push_back({{"key", key}, {"passage", doc.text}, {"version", doc.version}});
        r.reads.push_back(ToolRead{key, doc.version});
      }
      r.output = {{"results", std::move(results)}};
      return r;
    }
    case Kind::write: {
      auto key = render_key(spec.key_template, call.arguments);
      if (!key) return make_error(call.tool + ": " + key.error().message);
      if (!call.arguments.contains("text") || !call.arguments["text"].is_string()) {
        return make_error(call.tool + ": needs a string \"text\"");
      }
      Document& d = documents_[*key];
      d.text = call.arguments["text"].get<std::string>();
      ++d.version;
      r.output = {{"key", *key}, {"version", d.version}};
      r.writes.push_back(*key);
      return r;
    }
  }
  return make_error("unknown tool kind");
}

Expected<std::shared_ptr<Corpus>> load_corpus(const std::string& path) {
  const auto text = read_bounded(path, kMaxCorpusBytes, "corpus");
  if (!text) return make_error(text.error().message);
  const auto doc = parse_json(*text);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("documents") ||
      !doc.contains("tools") || !doc["tools"].is_object()) {
    return make_error(path +
                      ": expected {\"documents\": [{\"key\", \"text\"}...], \"tools\": "
                      "{\"name\": \"key template\"}}");
  }
  auto corpus = Corpus::from_json(doc["documents"]);
  if (!corpus) return make_error(path + ": " + corpus.error().message);
  for (const auto& [name, key] : doc["tools"].items()) {
    if (!key.is_string()) return make_error(path + ": tool " + name + " needs a key template");
    if (!scoped_key_template(key.get<std::string>())) {
      return make_error(path + ": tool " + name +
                        ": error[unscoped-record-key]: " + "the key template " + key.dump() +
                        " starts with a placeholder, so a caller's argument could name any "
                        "record; begin it with a literal prefix such as \"page:\"");
    }
    (*corpus)->add_tool(name, {Corpus::Kind::lookup, key.get<std::string>()});
  }
  return corpus;
}

}  // namespace dynrt::engines

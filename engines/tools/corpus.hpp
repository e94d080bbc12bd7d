// A built-in, versioned retrieval corpus: documents under record keys, each with a version that
// every write bumps. Tools over it record exactly what they read:
//   lookup  renders a record key from its arguments ("corpus:{{entity}}") and returns that
//           document's text (`passage`), whether it exists, and its version; reads: that key.
//   search  ranks documents whose key starts with a prefix by how many query words their text
//           holds, returns the best `k`; reads: every returned key.
//   write   renders a key, replaces (or creates) the document's text, bumps its version;
//           writes: that key.
// Keys render from `{{name}}` placeholders filled with string arguments; a missing argument is
// an error. Thread-safe (a mutex); callbacks run inline.
#pragma once

#include "engines/tools/tool.hpp"

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace dynrt::engines {

class Corpus final : public ToolEngine {
 public:
  enum class Kind { lookup, search, write };
  struct ToolSpec {
    Kind kind = Kind::lookup;
    std::string key_template;  // lookup, write: "corpus:{{entity}}"; search: the key prefix
  };

  // Documents: {"key": "...", "text": "..."} objects, as a JSON array (versions start at 1).
  static Expected<std::shared_ptr<Corpus>> from_json(const nlohmann::json& documents);

  void add_tool(std::string name, ToolSpec spec);
  void put(std::string key, std::string text);          // creates at version 1 or bumps the version
  std::uint64_t version(const std::string& key) const;  // 0: no such document
  std::size_t size() const;

  bool has(std::string_view tool) const override;
  void call(ToolCall call, ToolCallback done) override;

 private:
  struct Document {
    std::string text;
    std::uint64_t version = 0;
  };
  Expected<ToolResult> run(const ToolCall& call);

  mutable std::mutex mutex_;
  std::map<std::string, Document> documents_;
  std::map<std::string, ToolSpec, std::less<>> tools_;
};

// Whether a key template begins with literal text before its first placeholder ("doc:{{id}}"):
// otherwise an argument alone chooses the record key, any record at all (the same rule as the
// linter's unscoped-record-key for templates' reads and writes).
bool scoped_key_template(std::string_view key_template);

// Reads a corpus file, {"documents": [{"key", "text"}...], "tools": {"name": "key template"}}:
// the documents, and a lookup tool per entry of `tools` (each key template must be scoped).
// Errors name the file. At most kMaxCorpusBytes are read (a pipe works; a device that never
// ends is refused).
inline constexpr std::size_t kMaxCorpusBytes = std::size_t{256} << 20;
Expected<std::shared_ptr<Corpus>> load_corpus(const std::string& path);

// Renders "{{name}}" placeholders from string (or number) arguments; errors name the missing one.
Expected<std::string> render_key(std::string_view key_template, const nlohmann::json& arguments);

}  // namespace dynrt::engines

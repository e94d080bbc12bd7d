// A template file's text and the mapping from byte offsets to what a person sees.
//
// Positions are 1-based; a column counts Unicode code points from the start of the line, as
// editors do (a byte-order mark, if any, has already been stripped by the caller). A Span is
// a half-open range of byte offsets [begin, end) into text(). Immutable after construction.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace dynrt::dsl {

struct Position {
  int line = 1;
  int column = 1;
  friend bool operator==(const Position&, const Position&) = default;
};

struct Span {
  std::size_t begin = 0;
  std::size_t end = 0;
  bool empty() const { return end <= begin; }
  friend bool operator==(const Span&, const Span&) = default;
};

class SourceFile {
 public:
  SourceFile(std::string path, std::string text);

  const std::string& path() const { return path_; }
  const std::string& text() const { return text_; }

  Position position(std::size_t offset) const;
  // The offset of the first byte of `line` (1-based); text().size() past the last line.
  std::size_t line_begin(int line) const;
  // The text of `line` without its line break; empty past the last line.
  std::string_view line_text(int line) const;
  int line_count() const { return static_cast<int>(line_starts_.size()); }

 private:
  std::string path_;
  std::string text_;
  std::vector<std::size_t> line_starts_;
};

// Number of code points in a UTF-8 byte range (continuation bytes are not counted).
int count_code_points(std::string_view bytes);

// `bytes` with every invalid UTF-8 sequence and every control character other than tab
// replaced by U+FFFD, safe to print to a terminal.
std::string printable_utf8(std::string_view bytes);

}  // namespace dynrt::dsl

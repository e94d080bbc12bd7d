#include "dsl/source.hpp"

#include <algorithm>

namespace dynrt::dsl {

int count_code_points(std::string_view bytes) {
  int n = 0;
  for (const char c : bytes) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  }
  return n;
}

std::string printable_utf8(std::string_view bytes) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(bytes.size());
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char b = s[i];
    std::size_t len = b < 0x80                 ? 1
                      : b >= 0xC2 && b <= 0xDF ? 2
                      : b >= 0xE0 && b <= 0xEF ? 3
                      : b >= 0xF0 && b <= 0xF4 ? 4
                                               : 0;
    bool ok = len > 0 && i + len <= n;
    for (std::size_t k = 1; ok && k < len; ++k)
      ok = (s[i + k] & 0xC0) == 0x80;
    if (ok && len == 1 && (b < 0x20 || b == 0x7F) && b != '\t') ok = false;
    if (!ok) {
      out += kReplacement;
      ++i;
      continue;
    }
    out.append(bytes.substr(i, len));
    i += len;
  }
  return out;
}

SourceFile::SourceFile(std::string path, std::string text)
    : path_(std::move(path)), text_(std::move(text)) {
  line_starts_.push_back(0);
  for (std::size_t i = 0; i < text_.size(); ++i) {
    if (text_[i] == '\n') line_starts_.push_back(i + 1);
  }
}

Position SourceFile::position(std::size_t offset) const {
  offset = std::min(offset, text_.size());
  const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
  const auto line_index = static_cast<std::size_t>(it - line_starts_.begin()) - 1;
  const std::size_t begin = line_starts_[line_index];
  const std::string_view prefix(text_.data() + begin, offset - begin);
  return Position{static_cast<int>(line_index) + 1, count_code_points(prefix) + 1};
}

std::size_t SourceFile::line_begin(int line) const {
  if (line < 1) return 0;
  const auto index = static_cast<std::size_t>(line - 1);
  return index < line_starts_.size() ? line_starts_[index] : text_.size();
}

std::string_view SourceFile::line_text(int line) const {
  if (line < 1 || line > line_count()) return {};
  const std::size_t begin = line_begin(line);
  std::size_t end = text_.find('\n', begin);
  if (end == std::string::npos) end = text_.size();
  if (end > begin && text_[end - 1] == '\r') --end;
  return std::string_view(text_).substr(begin, end - begin);
}

}  // namespace dynrt::dsl

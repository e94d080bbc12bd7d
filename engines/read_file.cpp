#include "engines/read_file.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace dynrt::engines {

Expected<std::string> read_bounded(const std::string& path, std::size_t max_bytes,
                                   std::string_view what) {
  const std::string named = std::string(what) + " " + path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return make_error("the " + named + " is a folder, not a file");
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return make_error("cannot read the " + named +
                      (errno != 0 ? std::string(": ") + std::strerror(errno) : std::string()));
  std::string text;
  char buffer[64 << 10];
  while (text.size() <= max_bytes && in.read(buffer, sizeof buffer).gcount() > 0)
    text.append(buffer, static_cast<std::size_t>(in.gcount()));
  if (in.bad()) return make_error("cannot read the " + named);
  if (text.size() > max_bytes)
    return make_error("the " + named + " is over " + std::to_string(max_bytes) + " bytes");
  return text;
}

}  // namespace dynrt::engines

// Reading an operator's data file whole (a response script, a corpus, a key file), bounded.
#pragma once

#include "runtime/expected.hpp"

#include <cstddef>
#include <string>
#include <string_view>

namespace dynrt::engines {

// The whole of the file at `path`, read in chunks up to `max_bytes`. A pipe works (process
// substitution: `--keys <(vault read ...)`), while a device that never ends (/dev/zero) or a file
// over the limit is refused instead of read until memory runs out. A folder is refused by name
// (a stream opens one and reads nothing). Errors name `what` and the path: "the script S is a
// folder, not a file", "cannot read the key file K: No such file or directory", "the corpus C is
// over 268435456 bytes".
Expected<std::string> read_bounded(const std::string& path, std::size_t max_bytes,
                                   std::string_view what);

}  // namespace dynrt::engines

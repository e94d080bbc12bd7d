#include "engines/openai/sse.hpp"

namespace dynrt::engines {

void SseParser::feed(std::string_view bytes, std::vector<std::string>& events) {
  while (!bytes.empty()) {
    if (after_cr_) {
      after_cr_ = false;
      if (bytes.front() == '\n') {  // the LF of a CRLF
        bytes.remove_prefix(1);
        continue;
      }
    }
    const std::size_t end = bytes.find_first_of("\r\n");
    if (end == std::string_view::npos) {  // a line continued by the next feed
      line_.append(bytes);
      return;
    }
    line_.append(bytes.substr(0, end));
    after_cr_ = bytes[end] == '\r';
    bytes.remove_prefix(end + 1);
    line(events);
  }
}

void SseParser::line(std::vector<std::string>& events) {
  if (line_.empty()) {  // a blank line dispatches the event
    if (has_data_) events.push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line_.front() != ':') {
    const auto colon = line_.find(':');
    const std::string_view field = std::string_view(line_).substr(0, colon);
    std::string_view value;
    if (colon != std::string::npos) {
      value = std::string_view(line_).substr(colon + 1);
      if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    }
    if (field == "data") {
      if (has_data_) data_.push_back('\n');
      data_.append(value);
      has_data_ = true;
    }
  }
  line_.clear();
}

}  // namespace dynrt::engines

// An incremental parser for server-sent events (the WHATWG EventSource format), fed whatever
// byte ranges the network delivers. Lines end in LF, CRLF or CR, even split across feeds;
// `data:` lines accumulate (joined by LF) until a blank line dispatches the event; comments
// (`:`) and other fields are skipped. Pure; one parser per stream.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dynrt::engines {

class SseParser {
 public:
  // Appends the data of every event completed by `bytes` to `events`.
  void feed(std::string_view bytes, std::vector<std::string>& events);
  // Bytes fed so far that did not yet complete an event (an event cut off by the stream's end).
  bool has_partial_event() const { return !line_.empty() || has_data_; }

 private:
  void line(std::vector<std::string>& events);

  std::string line_;
  std::string data_;
  bool has_data_ = false;
  bool after_cr_ = false;  // the last byte was CR: a following LF belongs to the same line end
};

}  // namespace dynrt::engines

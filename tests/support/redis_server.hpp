// A redis-server of a test's own: started on a free loopback port, without persistence, in
// a temporary directory, and stopped (SIGTERM, or a given signal) when the test is done. Tests
// that need it skip when redis-server is not on PATH (scripts/install-deps.sh installs it).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace dynrt::testing {

inline bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::string dirs = path;
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const auto end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = dirs.substr(start, end - start);
    if (!dir.empty() && ::access((dir + "/" + program).c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

// A loopback port nobody listens on right now.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

// One inline command on a fresh connection; the reply as text once it holds `lines` CRLFs.
inline std::optional<std::string> redis_exchange(int port, const std::string& command, int lines) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return std::nullopt;
  timeval tv{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  std::optional<std::string> out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string request = command + "\r\n";
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
        static_cast<ssize_t>(request.size())) {
      std::string reply;
      char buffer[512];
      for (;;) {
        int seen = 0;
        for (std::size_t at = reply.find("\r\n"); at != std::string::npos;
             at = reply.find("\r\n", at + 2))
          ++seen;
        if (seen >= lines) {
          out = reply;
          break;
        }
        const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
        if (n <= 0) break;
        reply.append(buffer, static_cast<std::size_t>(n));
      }
    }
  }
  ::close(fd);
  return out;
}

// A redis-server child process: no persistence, its own directory, loopback only.
class RedisServer {
 public:
  RedisServer() {
    char dir[] = "/tmp/dynrt-redis-XXXXXX";
    if (::mkdtemp(dir)) dir_ = dir;
  }
  ~RedisServer() {
    stop();
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }

  // Starts it on `port` and waits until it answers PING.
  bool start(int port, std::string* error) {
    port_ = port;
    const std::string port_text = std::to_string(port);
    const std::string log = dir_ + "/redis.log";
    std::vector<std::string> args{
        "redis-server", "--port", port_text, "--bind", "127.0.0.1", "--save", "",
        "--appendonly", "no",     "--dir",   dir_,     "--logfile", log};
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    if (::posix_spawnp(&pid_, "redis-server", nullptr, nullptr, argv.data(), environ) != 0) {
      pid_ = -1;
      *error = "cannot start redis-server";
      return false;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        *error = "redis-server exited at start (see " + log + ")";
        return false;
      }
      const auto reply = redis_exchange(port, "PING", 1);
      if (reply && reply->starts_with("+PONG")) return true;
      std::this_thread::sleep_for(
          std::chrono::milliseconds(5));  // the poll interval of a bounded wait
    }
    *error = "redis-server did not answer PING within 5 s";
    stop();
    return false;
  }

  void stop(int signal = SIGTERM) {
    if (pid_ <= 0) return;
    ::kill(pid_, signal);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  int port() const { return port_; }

 private:
  std::string dir_;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace dynrt::testing

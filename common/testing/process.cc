#include "common/testing/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sched.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/time/clock.h"

namespace fulcrum::testing {
namespace {

pid_t Spawn(const std::vector<std::string>& argv, int out_fd, int err_fd,
            const std::string& netns = "") {
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // Entered by the child itself (not `ip netns exec`, which forks), so
  // that the pid is the program's own.
  const std::string netns_path = netns.empty() ? "" : "/run/netns/" + netns;
  const pid_t pid = fork();
  if (pid == 0) {
    if (out_fd >= 0) dup2(out_fd, 1);
    if (err_fd >= 0) dup2(err_fd, 2);
    if (!netns_path.empty()) {
      const int fd = open(netns_path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) _exit(126);
    }
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

std::optional<int> WaitPid(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    if (r < 0) return -1;
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

}  // namespace

Process::Process(const std::vector<std::string>& argv, const std::string& log,
                 const std::string& netns) {
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  pid_ = Spawn(argv, fd, fd, netns);
  if (fd >= 0) close(fd);
}

Process::~Process() {
  if (pid_ > 0 && !exit_code_.has_value()) {
    kill(pid_, SIGKILL);
    WaitPid(pid_, absl::Seconds(10));
  }
}

std::optional<int> Process::Wait(absl::Duration timeout) {
  if (!exit_code_.has_value()) exit_code_ = WaitPid(pid_, timeout);
  return exit_code_;
}

int Process::Stop(absl::Duration grace) {
  if (exit_code_.has_value()) return *exit_code_;
  kill(pid_, SIGTERM);
  if (Wait(grace).has_value()) return *exit_code_;
  kill(pid_, SIGKILL);
  exit_code_ = WaitPid(pid_, absl::Seconds(10));
  return exit_code_.value_or(-9);
}

RunResult RunCommand(const std::vector<std::string>& argv,
                     absl::Duration timeout, const std::string& log,
                     const std::string& netns) {
  const std::string out_path = TestTempDir() + "/run_command.out";
  const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err =
      log.empty() ? -1 : open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  const pid_t pid = Spawn(argv, out, err, netns);
  close(out);
  if (err >= 0) close(err);
  RunResult result;
  std::optional<int> code = WaitPid(pid, timeout);
  if (!code.has_value()) {
    kill(pid, SIGKILL);
    code = WaitPid(pid, absl::Seconds(10));
    result.exit_code = -9;
  } else {
    result.exit_code = *code;
  }
  result.out = ReadFile(out_path);
  return result;
}

std::string Runfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr) return path;
  return std::string(srcdir) + "/" +
         (workspace != nullptr ? workspace : "fulcrum") + "/" + path;
}

std::string TestTempDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d != nullptr ? d : "/tmp";
}

bool WaitForFile(const std::string& path, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && st.st_size > 0) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

// Whether 127.0.0.1:`port` can be bound now (0: let the kernel pick).
// Returns the bound port, or 0.
int TryBind(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(addr);
  int bound = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    bound = ntohs(addr.sin_port);
  }
  close(fd);
  return bound;
}

// The first port of the kernel's ephemeral range (what bind to port 0 and
// outgoing connections draw from).
int EphemeralLow() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  if (!(in >> low)) return 32768;
  return low;
}

}  // namespace

int PickFreePort() {
  // A port from the kernel's ephemeral range can be handed, between this
  // check and the program's bind, to any process that listens on port 0 or
  // connects out (a CI run lost a shard's port to a worker's /metrics that
  // way). Ports below that range are only ever taken by name, so pick one
  // there at random.
  constexpr int kLowest = 10000;
  const int high = EphemeralLow();
  if (high - kLowest >= 1000) {
    std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(getpid()));
    std::uniform_int_distribution<int> port(kLowest, high - 1);
    for (int attempt = 0; attempt < 200; ++attempt) {
      const int p = port(rng);
      if (TryBind(p) == p) return p;
    }
  }
  return TryBind(0);
}

}  // namespace fulcrum::testing

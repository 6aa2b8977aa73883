// Child processes for multi-process tests: spawn with output to a log file,
// wait with a deadline, and always reap (the destructor kills what is left).
#ifndef FULCRUM_COMMON_TESTING_PROCESS_H_
#define FULCRUM_COMMON_TESTING_PROCESS_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace fulcrum::testing {

class Process {
 public:
  // Starts argv[0] with stdout and stderr appended to `log`; in network
  // namespace `netns` (a name under /run/netns, as `ip netns add` makes)
  // when not empty.
  Process(const std::vector<std::string>& argv, const std::string& log,
          const std::string& netns = "");
  ~Process();  // SIGKILL + reap if still running
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  // Exit code once exited within `timeout` (-signal if killed), else nullopt.
  std::optional<int> Wait(absl::Duration timeout);
  // SIGTERM, then SIGKILL after `grace`; returns the exit code.
  int Stop(absl::Duration grace = absl::Seconds(5));

 private:
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

// Runs a command to completion (bounded by `timeout`, killed after it) and
// returns {exit code, stdout}. stderr goes to `log` when given.
struct RunResult {
  int exit_code = -1;
  std::string out;
};
RunResult RunCommand(const std::vector<std::string>& argv,
                     absl::Duration timeout, const std::string& log = "",
                     const std::string& netns = "");

// Path of a file in the test's runfiles (Bazel), e.g. "worker/fulcrum-worker".
std::string Runfile(const std::string& path);
std::string TestTempDir();
// Polls until `path` exists and is non-empty, or the timeout passes.
bool WaitForFile(const std::string& path, absl::Duration timeout);
std::string ReadFile(const std::string& path);
// A TCP port on 127.0.0.1 that was free a moment ago, for programs that
// must listen on a known port (a coordinator restarted at its address,
// Prometheus). Drawn below the kernel's ephemeral range, so a process that
// listens on port 0 or connects out cannot take it before the program binds.
int PickFreePort();

}  // namespace fulcrum::testing

#endif  // FULCRUM_COMMON_TESTING_PROCESS_H_

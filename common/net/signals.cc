#include "common/net/signals.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

namespace fulcrum {
namespace {

int pipe_fds[2] = {-1, -1};

// Async-signal-safe: one write to the self-pipe.
void OnSignal(int sig) {
  const int saved = errno;
  const char byte = static_cast<char>(sig);
  if (pipe_fds[1] >= 0) (void)!write(pipe_fds[1], &byte, 1);
  errno = saved;
}

}  // namespace

void BlockTerminationSignals() {
  if (pipe_fds[0] < 0 && pipe2(pipe_fds, O_CLOEXEC) != 0) return;
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int WaitForTerminationSignal() {
  if (pipe_fds[0] < 0) BlockTerminationSignals();
  char byte = 0;
  for (;;) {
    const ssize_t n = read(pipe_fds[0], &byte, 1);
    if (n == 1) return static_cast<unsigned char>(byte);
    if (n < 0 && errno == EINTR) continue;
    return SIGTERM;  // the pipe failed: treat as a request to stop
  }
}

}  // namespace fulcrum

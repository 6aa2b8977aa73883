// Blocks until SIGINT or SIGTERM, for the mains of long-running processes.
#ifndef FULCRUM_COMMON_NET_SIGNALS_H_
#define FULCRUM_COMMON_NET_SIGNALS_H_

namespace fulcrum {

// Blocks SIGINT/SIGTERM in the calling thread (call first thing in main,
// before any thread starts, so every thread inherits the mask) ...
void BlockTerminationSignals();
// ... then waits for one of them. Returns the signal number.
int WaitForTerminationSignal();

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_NET_SIGNALS_H_

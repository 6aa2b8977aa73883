// Graceful shutdown on SIGINT or SIGTERM, for the mains of long-running
// processes.
#ifndef FULCRUM_COMMON_NET_SIGNALS_H_
#define FULCRUM_COMMON_NET_SIGNALS_H_

namespace fulcrum {

// Installs handlers for SIGINT/SIGTERM (call first thing in main). A
// handler, not a blocked mask: threads that libraries start before main
// (OpenBLAS's pool) do not inherit a mask, and a signal delivered to one of
// them would otherwise kill the process without a graceful exit.
void BlockTerminationSignals();
// Waits for one of them. Returns the signal number.
int WaitForTerminationSignal();

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_NET_SIGNALS_H_

// A local cluster of real Fulcrum processes for multi-process tests: a
// coordinator, shards and workers on 127.0.0.1 (kernel-picked ports), each
// logging to the test's temp dir, all stopped and reaped by the destructor.
#ifndef FULCRUM_TESTS_PROCESS_CLUSTER_H_
#define FULCRUM_TESTS_PROCESS_CLUSTER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fulcrum/v1/coordinator.pb.h"
#include "common/testing/process.h"

namespace fulcrum::testing {

class ProcessCluster {
 public:
  // A host: a network namespace and the address processes there listen on.
  struct Host {
    std::string netns;  // empty: this one
    std::string ip = "127.0.0.1";
  };
  struct Options {
    int shards = 1;
    int workers = 1;
    std::vector<std::string> worker_flags;  // added to every worker
    int worker_max_jobs = 1;                // workers exit after this many jobs (0: never)
    std::vector<std::string> coordinator_flags;  // e.g. --lease_ms
    std::vector<std::string> shard_flags;
    // Given to every process and fulcrumctl (e.g. --tls_cert/--tls_key/--tls_ca).
    std::vector<std::string> all_flags;
    std::vector<std::string> ctl_flags;  // fulcrumctl only (e.g. --token_file)
    // Multi-host (tests/multihost): the host each process runs on, by
    // name ("coordinator", "shard-N", "worker-N"); fulcrumctl runs on the
    // coordinator's. Null: every process on 127.0.0.1 here.
    std::function<Host(const std::string& process)> host_of;
  };
  struct MetricsEndpoint {
    std::string role;     // coordinator | server | worker
    std::string process;  // coordinator, shard-1, worker-2, ...
    int port = 0;
  };

  // `name` makes the log directory unique within the test.
  ProcessCluster(const std::string& name, const Options& options);
  ~ProcessCluster();

  // Empty when the coordinator did not come up.
  const std::string& address() const { return address_; }
  const std::string& dir() const { return dir_; }
  // Runs fulcrumctl against the cluster (stderr goes to fulcrumctl.log).
  RunResult Ctl(std::vector<std::string> args,
                absl::Duration timeout = absl::Seconds(30));
  std::string CtlLog() const;
  // Every log, for failure messages.
  std::string Logs() const;
  // The /metrics endpoint of every process (waits for their port files).
  std::vector<MetricsEndpoint> MetricsEndpoints(absl::Duration timeout) const;

  // Fault injection. Processes are named "coordinator", "shard-N" and
  // "worker-N"; every one listens on a fixed port picked at start, so a
  // restarted process comes back at the same address.
  std::string AddWorker(const std::vector<std::string>& flags = {});
  void Kill(const std::string& process);  // SIGKILL and reap
  // Sends `signo` (e.g. SIGSTOP, SIGCONT) and returns at once.
  void Signal(const std::string& process, int signo);
  void Stop(const std::string& process);  // SIGTERM (a graceful leave), reap
  // Starts the process again with the same arguments (log: NAME.N.log).
  void Restart(const std::string& process);
  // The process's pid (-1 when there is none).
  pid_t Pid(const std::string& process);
  // `fulcrumctl status JOB --json`, parsed.
  absl::StatusOr<v1::JobStatus> Status(const std::string& job_id);
  // The same once the epochs' ledger counts at least `samples` trained in
  // all (it reaches the coordinator with a shard heartbeat, so it can trail
  // the job's end), or the last status after `timeout`.
  absl::StatusOr<v1::JobStatus> StatusWithLedger(
      const std::string& job_id, int64_t samples,
      absl::Duration timeout = absl::Seconds(10));

 private:
  void Add(const std::string& process, std::vector<std::string> argv);
  Host HostOf(const std::string& process) const;
  Process* Find(const std::string& process);

  int workers_added_ = 0;
  std::vector<std::vector<std::string>> argvs_;
  std::vector<int> starts_;
  std::vector<std::string> netns_;  // by process, as names_

  const std::string dir_;
  Options options_;
  std::string address_;
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<Process>> procs_;
};

}  // namespace fulcrum::testing

#endif  // FULCRUM_TESTS_PROCESS_CLUSTER_H_

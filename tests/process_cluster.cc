#include "tests/process_cluster.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include <google/protobuf/util/json_util.h>

namespace fulcrum::testing {

ProcessCluster::ProcessCluster(const std::string& name, const Options& options)
    : dir_(TestTempDir() + "/" + name), options_(options) {
  mkdir(dir_.c_str(), 0755);
  const std::string port_file = dir_ + "/coordinator.port";
  const int port = PickFreePort();
  const std::string coordinator_ip = HostOf("coordinator").ip;
  std::vector<std::string> argv = {
      Runfile("server/coordinator/fulcrum-coordinator"),
      "--listen=" + coordinator_ip + ":" + std::to_string(port),
      "--port_file=" + port_file,
      "--heartbeat_ms=200", "--start_grace_ms=3000",
      // Tests write checkpoints under their temp dir.
      "--checkpoint_root=" + TestTempDir()};
  argv.insert(argv.end(), options.coordinator_flags.begin(),
              options.coordinator_flags.end());
  argv.insert(argv.end(), options.all_flags.begin(), options.all_flags.end());
  Add("coordinator", argv);
  if (!WaitForFile(port_file, absl::Seconds(20))) return;
  address_ = coordinator_ip + ":" + std::to_string(port);
  for (int i = 1; i <= options.shards; ++i) {
    const std::string name = "shard-" + std::to_string(i);
    std::vector<std::string> shard = {
        Runfile("server/ps/fulcrum-server"),
        "--listen=" + HostOf(name).ip + ":" + std::to_string(PickFreePort()),
        "--coordinator=" + address_, "--checkpoint_root=" + TestTempDir()};
    shard.insert(shard.end(), options.shard_flags.begin(),
                 options.shard_flags.end());
    shard.insert(shard.end(), options.all_flags.begin(),
                 options.all_flags.end());
    Add(name, shard);
  }
  for (int i = 1; i <= options.workers; ++i) AddWorker();
}

std::string ProcessCluster::AddWorker(const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {
      Runfile("worker/fulcrum-worker"), "--coordinator=" + address_,
      "--max_jobs=" + std::to_string(options_.worker_max_jobs)};
  argv.insert(argv.end(), options_.worker_flags.begin(),
              options_.worker_flags.end());
  argv.insert(argv.end(), options_.all_flags.begin(), options_.all_flags.end());
  argv.insert(argv.end(), flags.begin(), flags.end());
  const std::string name = "worker-" + std::to_string(++workers_added_);
  Add(name, argv);
  return name;
}

Process* ProcessCluster::Find(const std::string& process) {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == process) return procs_[i].get();
  }
  return nullptr;
}

pid_t ProcessCluster::Pid(const std::string& process) {
  Process* p = Find(process);
  return p == nullptr ? -1 : p->pid();
}

void ProcessCluster::Kill(const std::string& process) {
  Process* p = Find(process);
  if (p == nullptr) return;
  kill(p->pid(), SIGKILL);
  p->Wait(absl::Seconds(10));
}

void ProcessCluster::Signal(const std::string& process, int signo) {
  if (Process* p = Find(process)) kill(p->pid(), signo);
}

void ProcessCluster::Stop(const std::string& process) {
  Process* p = Find(process);
  if (p != nullptr) p->Stop(absl::Seconds(10));
}

void ProcessCluster::Restart(const std::string& process) {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] != process) continue;
    Kill(process);
    procs_[i] = std::make_unique<Process>(
        argvs_[i],
        dir_ + "/" + process + "." + std::to_string(++starts_[i]) + ".log",
        netns_[i]);
    return;
  }
}

absl::StatusOr<v1::JobStatus> ProcessCluster::Status(const std::string& job_id) {
  RunResult r = Ctl({"status", job_id, "--json"});
  if (r.exit_code != 0)
    return absl::UnavailableError("fulcrumctl status failed: " + r.out);
  v1::JobStatus status;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  auto s = google::protobuf::util::JsonStringToMessage(r.out, &status, options);
  if (!s.ok())
    return absl::InternalError("fulcrumctl printed no JobStatus: " + r.out);
  return status;
}

absl::StatusOr<v1::JobStatus> ProcessCluster::StatusWithLedger(
    const std::string& job_id, int64_t samples, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    absl::StatusOr<v1::JobStatus> status = Status(job_id);
    if (!status.ok()) return status;
    int64_t trained = 0;
    for (const v1::EpochSamples& e : status->epochs()) trained += e.trained();
    if (trained >= samples || absl::Now() > deadline) return status;
    absl::SleepFor(absl::Milliseconds(100));
  }
}

void ProcessCluster::Add(const std::string& process,
                         std::vector<std::string> argv) {
  argv.push_back("--metrics_port_file=" + dir_ + "/" + process +
                 ".metrics_port");
  names_.push_back(process);
  argvs_.push_back(argv);
  starts_.push_back(1);
  netns_.push_back(HostOf(process).netns);
  procs_.push_back(std::make_unique<Process>(
      argv, dir_ + "/" + process + ".log", netns_.back()));
}

ProcessCluster::Host ProcessCluster::HostOf(const std::string& process) const {
  return options_.host_of ? options_.host_of(process) : Host{};
}

ProcessCluster::~ProcessCluster() {
  for (auto it = procs_.rbegin(); it != procs_.rend(); ++it)
    (*it)->Stop(absl::Seconds(5));
}

RunResult ProcessCluster::Ctl(std::vector<std::string> args,
                              absl::Duration timeout) {
  args.insert(args.begin(), options_.ctl_flags.begin(),
              options_.ctl_flags.end());
  args.insert(args.begin(), options_.all_flags.begin(),
              options_.all_flags.end());
  args.insert(args.begin(),
              {Runfile("client/fulcrumctl"), "--coordinator=" + address_});
  return RunCommand(args, timeout, dir_ + "/fulcrumctl.log",
                    HostOf("coordinator").netns);
}

std::string ProcessCluster::CtlLog() const {
  return ReadFile(dir_ + "/fulcrumctl.log");
}

std::string ProcessCluster::Logs() const {
  std::string out;
  std::vector<std::string> files = names_;
  files.push_back("fulcrumctl");
  for (const std::string& f : files) {
    out += "---- " + f + ".log\n" + ReadFile(dir_ + "/" + f + ".log");
    for (int n = 2; n < 10; ++n) {
      const std::string again = dir_ + "/" + f + "." + std::to_string(n) + ".log";
      if (access(again.c_str(), R_OK) != 0) break;
      out += "---- " + f + "." + std::to_string(n) + ".log\n" + ReadFile(again);
    }
  }
  return out;
}

std::vector<ProcessCluster::MetricsEndpoint> ProcessCluster::MetricsEndpoints(
    absl::Duration timeout) const {
  std::vector<MetricsEndpoint> out;
  for (const std::string& name : names_) {
    const std::string file = dir_ + "/" + name + ".metrics_port";
    if (!WaitForFile(file, timeout)) continue;
    const std::string role = name == "coordinator"         ? "coordinator"
                             : name.rfind("shard", 0) == 0 ? "server"
                                                           : "worker";
    out.push_back({role, name, std::atoi(ReadFile(file).c_str())});
  }
  return out;
}

}  // namespace fulcrum::testing

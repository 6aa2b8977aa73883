#include "tests/process_cluster.h"

#include <sys/stat.h>

#include <cstdlib>

namespace fulcrum::testing {

ProcessCluster::ProcessCluster(const std::string& name, const Options& options)
    : dir_(TestTempDir() + "/" + name) {
  mkdir(dir_.c_str(), 0755);
  const std::string port_file = dir_ + "/coordinator.port";
  Add("coordinator", {Runfile("server/coordinator/fulcrum-coordinator"),
                      "--listen=127.0.0.1:0", "--port_file=" + port_file,
                      "--heartbeat_ms=200", "--start_grace_ms=3000"});
  if (!WaitForFile(port_file, absl::Seconds(20))) return;
  address_ =
      "127.0.0.1:" + std::to_string(std::atoi(ReadFile(port_file).c_str()));
  for (int i = 1; i <= options.shards; ++i) {
    Add("shard-" + std::to_string(i),
        {Runfile("server/ps/fulcrum-server"), "--listen=127.0.0.1:0",
         "--coordinator=" + address_});
  }
  for (int i = 1; i <= options.workers; ++i) {
    std::vector<std::string> argv = {
        Runfile("worker/fulcrum-worker"), "--coordinator=" + address_,
        "--max_jobs=" + std::to_string(options.worker_max_jobs)};
    argv.insert(argv.end(), options.worker_flags.begin(),
                options.worker_flags.end());
    Add("worker-" + std::to_string(i), argv);
  }
}

void ProcessCluster::Add(const std::string& process,
                         std::vector<std::string> argv) {
  argv.push_back("--metrics_port_file=" + dir_ + "/" + process +
                 ".metrics_port");
  names_.push_back(process);
  procs_.push_back(
      std::make_unique<Process>(argv, dir_ + "/" + process + ".log"));
}

ProcessCluster::~ProcessCluster() {
  for (auto it = procs_.rbegin(); it != procs_.rend(); ++it)
    (*it)->Stop(absl::Seconds(5));
}

RunResult ProcessCluster::Ctl(std::vector<std::string> args,
                              absl::Duration timeout) {
  args.insert(args.begin(),
              {Runfile("client/fulcrumctl"), "--coordinator=" + address_});
  return RunCommand(args, timeout, dir_ + "/fulcrumctl.log");
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

#include "tests/multihost/host_network.h"

#include <unistd.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/testing/process.h"

namespace fulcrum::testing {
namespace {

constexpr int kTags = 200;

// Runs `ip ARGS...` (or tc) to completion; its output goes in the error.
absl::Status Run(const std::vector<std::string>& argv) {
  const std::string log = TestTempDir() + "/host_network.log";
  RunResult r = RunCommand(argv, absl::Seconds(20), log);
  if (r.exit_code == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("`", absl::StrJoin(argv, " "),
                                          "` exited ", r.exit_code, ": ",
                                          ReadFile(log)));
}

std::string Tool(const std::string& name) {
  for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"}) {
    const std::string path = dir + name;
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<HostNetwork>> HostNetwork::Create(int hosts) {
  if (hosts < 1 || hosts > 250)
    return absl::InvalidArgumentError("hosts must be in [1, 250]");
  if (Tool("ip").empty() || Tool("tc").empty()) {
    return absl::FailedPreconditionError(
        "multi-host tests need iproute2 (ip, tc): apt-get install iproute2");
  }
  if (geteuid() != 0) {
    return absl::FailedPreconditionError(
        "multi-host tests need root to make network namespaces");
  }
  // Claim a tag: the switch namespace's name is the lock.
  const int start = static_cast<int>(getpid() % kTags);
  int tag = -1;
  absl::Status last;
  for (int i = 0; i < kTags && tag < 0; ++i) {
    const int t = (start + i) % kTags;
    last = Run({Tool("ip"), "netns", "add", absl::StrCat("fmh", t, "-sw")});
    if (last.ok()) tag = t;
    // Not root enough (a container without CAP_SYS_ADMIN): no use trying
    // other names.
    if (!last.ok() && last.message().find("ermission") != std::string::npos)
      break;
    if (!last.ok() && last.message().find("xists") == std::string::npos)
      break;
  }
  if (tag < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot make a network namespace here (", last.message(), ")"));
  }
  std::unique_ptr<HostNetwork> net(new HostNetwork(tag, hosts));
  const std::string ip = Tool("ip");
  const std::string sw = net->Switch();
  std::vector<std::vector<std::string>> steps = {
      {ip, "-n", sw, "link", "add", "br0", "type", "bridge"},
      {ip, "-n", sw, "link", "set", "br0", "up"},
      {ip, "-n", sw, "link", "set", "lo", "up"},
  };
  for (int h = 0; h < hosts; ++h) {
    const std::string ns = net->Namespace(h);
    const std::string port = net->Port(h);
    const std::string tmp = absl::StrCat("fmh", tag, "x", h);
    steps.push_back({ip, "netns", "add", ns});
    steps.push_back({ip, "-n", sw, "link", "add", port, "type", "veth", "peer",
                     "name", tmp});
    steps.push_back({ip, "-n", sw, "link", "set", tmp, "netns", ns});
    steps.push_back({ip, "-n", ns, "link", "set", tmp, "name", "eth0"});
    steps.push_back({ip, "-n", ns, "addr", "add", net->Address(h) + "/24",
                     "dev", "eth0"});
    steps.push_back({ip, "-n", ns, "link", "set", "eth0", "up"});
    steps.push_back({ip, "-n", ns, "link", "set", "lo", "up"});
    steps.push_back({ip, "-n", sw, "link", "set", port, "master", "br0"});
    steps.push_back({ip, "-n", sw, "link", "set", port, "up"});
  }
  for (const auto& step : steps) {
    if (absl::Status s = Run(step); !s.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot build the hosts' network: ", s.message()));
    }
  }
  return net;
}

HostNetwork::~HostNetwork() {
  const std::string ip = Tool("ip");
  for (int h = 0; h < hosts_; ++h) Run({ip, "netns", "del", Namespace(h)}).IgnoreError();
  Run({ip, "netns", "del", Switch()}).IgnoreError();
}

std::string HostNetwork::Switch() const { return absl::StrCat("fmh", tag_, "-sw"); }
std::string HostNetwork::Port(int host) const { return absl::StrCat("p", host); }
std::string HostNetwork::Namespace(int host) const {
  return absl::StrCat("fmh", tag_, "-h", host);
}
std::string HostNetwork::Address(int host) const {
  return absl::StrCat("10.213.", tag_, ".", host + 1);
}

absl::Status HostNetwork::Cut(int host) {
  return Run({Tool("ip"), "-n", Switch(), "link", "set", Port(host), "down"});
}

absl::Status HostNetwork::Heal(int host) {
  return Run({Tool("ip"), "-n", Switch(), "link", "set", Port(host), "up"});
}

absl::Status HostNetwork::Shape(int host, const std::string& rate) {
  const std::string tc = Tool("tc");
  for (const auto& [ns, dev] :
       {std::pair{Switch(), Port(host)}, std::pair{Namespace(host), std::string("eth0")}}) {
    if (absl::Status s = Run({tc, "-n", ns, "qdisc", "replace", "dev", dev, "root",
                              "tbf", "rate", rate, "burst", "1mb", "latency",
                              "100ms"});
        !s.ok())
      return s;
  }
  return absl::OkStatus();
}

}  // namespace fulcrum::testing

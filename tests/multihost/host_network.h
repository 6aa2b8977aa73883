// Hosts for multi-host tests on one machine: network namespaces joined by a
// bridge (as machines on one switch), with faults an operator sees - a
// host's link taken down and brought back, and a link's rate shaped with a
// token bucket (this kernel has no netem: no delay or loss emulation).
//
//   switch namespace  fmh<T>-sw: bridge br0, one port p<i> per host
//   host namespace    fmh<T>-h<i>: eth0 = 10.213.<T>.<i+1>/24, lo
//
// T is a tag claimed atomically (`ip netns add` of the switch fails when it
// exists), so that tests running at once do not share names or subnets.
// The destructor deletes the namespaces, and their links with them.
//
// Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN for /run/netns) and
// iproute2; Create() says why not where it cannot (a test then skips,
// saying so). Processes join a host with testing::Process's netns argument
// (setns in the child, so the pid is the program's own).
//
// Thread safety: none; the test's thread owns it.
#ifndef FULCRUM_TESTS_MULTIHOST_HOST_NETWORK_H_
#define FULCRUM_TESTS_MULTIHOST_HOST_NETWORK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace fulcrum::testing {

class HostNetwork {
 public:
  // `hosts` hosts on one bridge. FAILED_PRECONDITION with the reason where
  // namespaces cannot be made here.
  static absl::StatusOr<std::unique_ptr<HostNetwork>> Create(int hosts);
  ~HostNetwork();
  HostNetwork(const HostNetwork&) = delete;
  HostNetwork& operator=(const HostNetwork&) = delete;

  int hosts() const { return hosts_; }
  std::string Namespace(int host) const;
  std::string Address(int host) const;

  // Takes the host's port on the bridge down (every packet to and from
  // the host is dropped, as when its cable is pulled) or up again.
  absl::Status Cut(int host);
  absl::Status Heal(int host);
  // Shapes the host's link to `rate` (tc tbf, e.g. "1gbit") both ways.
  absl::Status Shape(int host, const std::string& rate);

 private:
  HostNetwork(int tag, int hosts) : tag_(tag), hosts_(hosts) {}
  std::string Switch() const;
  std::string Port(int host) const;

  const int tag_;
  const int hosts_;
};

}  // namespace fulcrum::testing

#endif  // FULCRUM_TESTS_MULTIHOST_HOST_NETWORK_H_

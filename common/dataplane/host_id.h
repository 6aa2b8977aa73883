// Which processes can share memory: a host identity that two machines do
// not share by accident. Host groups (wire.pre_reduce) form among the
// workers with one HostId, not one hostname - cloned VMs and containers
// with a fixed hostname share a name but not memory.
//
// The identity is the kernel's boot id (random at every boot, so two
// machines - and two boots of one - differ) and the device and inode of
// the /dev/shm mount that shared-memory segments live in (two containers of
// one kernel with private /dev/shm mounts differ; network namespaces that
// share the mount do not, and can indeed map each other's segments).
#ifndef FULCRUM_COMMON_DATAPLANE_HOST_ID_H_
#define FULCRUM_COMMON_DATAPLANE_HOST_ID_H_

#include <string>

namespace fulcrum {

// "<boot id>/<st_dev>:<st_ino of shm_dir>"; empty when either cannot be
// read (then callers fall back to the hostname). Thread-safe.
std::string HostId(const std::string& boot_id_file =
                       "/proc/sys/kernel/random/boot_id",
                   const std::string& shm_dir = "/dev/shm");

// The longest HostId the coordinator accepts (a boot id is 36 bytes).
inline constexpr size_t kMaxHostIdBytes = 128;

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_DATAPLANE_HOST_ID_H_

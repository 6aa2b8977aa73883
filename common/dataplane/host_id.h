// Which processes can share memory: a host identity that two machines do
// not share by accident. Host groups (wire.pre_reduce) form among the
// workers with one HostId, not one hostname - cloned VMs and containers
// with a fixed hostname share a name but not memory.
//
// The identity is the kernel's boot id (random at every boot, so two
// machines - and two boots of one - differ), a random token read from a
// file in the shm directory that shared-memory segments live in (made by
// the first process that looks), and the user id (segments are 0600).
// Processes with one HostId have read one file out of one shm mount as one
// user: they can map each other's segments. Two containers of one kernel
// with private /dev/shm mounts differ; network namespaces that share the
// mount do not. Where the token cannot be written (a read-only shm_dir)
// the mount's device and inode stand in for it.
#ifndef FULCRUM_COMMON_DATAPLANE_HOST_ID_H_
#define FULCRUM_COMMON_DATAPLANE_HOST_ID_H_

#include <string>

namespace fulcrum {

// "<boot id>/<token>/<euid>"; empty when the boot id or shm_dir cannot be
// read (then callers fall back to the hostname). Thread-safe; safe to
// call from processes racing to make the token.
std::string HostId(const std::string& boot_id_file =
                       "/proc/sys/kernel/random/boot_id",
                   const std::string& shm_dir = "/dev/shm");

// The longest HostId the coordinator accepts (a boot id is 36 bytes).
inline constexpr size_t kMaxHostIdBytes = 128;

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_DATAPLANE_HOST_ID_H_

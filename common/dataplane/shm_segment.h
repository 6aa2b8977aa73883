// A POSIX shared-memory segment that carries one data-plane stream's
// payloads between a worker and a shard on the same host (the gRPC stream
// keeps carrying control: hello, offsets, acknowledgements, deaths).
//
// The worker Create()s it (name /fulcrum-<pid>-<16 hex>, O_EXCL, mode
// 0600, a header with a random nonce) and offers name and nonce in its
// hello; the shard Attach()es it only when it is a regular object owned by
// its own uid with mode 0600 whose header holds the same nonce, and then
// unlinks the name, so a SIGKILL of either side leaves nothing behind. A
// name whose creator died before the shard mapped it is removed by
// SweepStale (run by every process that creates or maps segments).
//
// Layout: a 64-byte header, then the gradient region (written by the
// worker, read by the shard) and the parameter region (written by the
// shard, read by the worker), each 64-byte aligned. Offsets in ShmRef are
// from the segment's start. Which slot is safe to overwrite when is the
// stream protocol's business (docs/architecture.md, "Shared memory").
//
// Thread safety: the accessors are const and safe from any thread; the
// bytes in the regions are the protocol's to order.
#ifndef FULCRUM_COMMON_DATAPLANE_SHM_SEGMENT_H_
#define FULCRUM_COMMON_DATAPLANE_SHM_SEGMENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace fulcrum {

class ShmSegment {
 public:
  static constexpr int64_t kHeaderBytes = 64;
  static constexpr int kNonceBytes = 16;

  // A new segment with regions of at least the given sizes (worker side).
  // RESOURCE_EXHAUSTED when it would take more than half of /dev/shm's free
  // space (FitsIn) or the pages cannot be reserved.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Create(
      int64_t grad_bytes, int64_t params_bytes);
  // The same with a name and nonce its mappers know beforehand (a host
  // group's, group_segment.h): /fulcrum-<pid>-<tag>, tag 16 hex digits,
  // nonce kNonceBytes.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> CreateTagged(
      int64_t grad_bytes, int64_t params_bytes, const std::string& tag,
      const std::string& nonce);
  // The name of the segment /fulcrum-<pid>-<tag> in `dir` (any pid), or
  // NOT_FOUND.
  static absl::StatusOr<std::string> FindTagged(
      const std::string& tag, const std::string& dir = "/dev/shm");
  // OK when `bytes` are at most half of the space free in `dir` now;
  // RESOURCE_EXHAUSTED saying how much is free otherwise.
  static absl::Status FitsIn(const std::string& dir, int64_t bytes);
  // Maps the segment `name` if it passes every check above, then unlinks
  // the name (shard side). INVALID_ARGUMENT / PERMISSION_DENIED / NOT_FOUND
  // say which check failed.
  // unlink = false: the name stays for further mappers (a group's members);
  // its creator removes it (Unlink, or its destructor).
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Attach(
      const std::string& name, const std::string& nonce, bool unlink = true);
  // Removes the name (the mappings stay). Creator side.
  void Unlink();
  // Removes /dev/shm/fulcrum-<pid>-* whose creator pid is gone and which
  // are older than `min_age`; returns how many. The age guard keeps it off
  // live segments of processes in another pid namespace that shares
  // /dev/shm (a sandbox, a container with the host's IPC): a segment is
  // mapped, and so unlinked, within the shard's hello timeout (10 s) or
  // never. `dir`: for tests.
  static int SweepStale(absl::Duration min_age = absl::Seconds(60),
                        const std::string& dir = "/dev/shm");

  ~ShmSegment();  // unmaps; the creator also unlinks a name still there
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  const std::string& name() const { return name_; }
  const std::string& nonce() const { return nonce_; }
  int64_t grad_offset() const { return grad_offset_; }
  int64_t grad_bytes() const { return grad_bytes_; }
  int64_t params_offset() const { return params_offset_; }
  int64_t params_bytes() const { return params_bytes_; }
  char* at(int64_t offset) const { return base_ + offset; }

  // The bytes [offset, offset + bytes) when they lie in the gradient
  // (parameter) region and are 4-aligned; else INVALID_ARGUMENT naming
  // `field`.
  absl::StatusOr<const char*> Grad(int64_t offset, int64_t bytes,
                                   const char* field) const;
  absl::StatusOr<const char*> Params(int64_t offset, int64_t bytes,
                                     const char* field) const;
  // Whether the segment's file was shrunk under the mapping (by its creator
  // or another holder) and a page past its new end was touched: that
  // access, and every later one of the pages past the fault, reads zeros
  // instead of killing the process with SIGBUS. The user ends the stream.
  bool truncated() const { return truncated_.load(std::memory_order_acquire); }

 private:
  ShmSegment() = default;

  std::string name_, nonce_;
  bool creator_ = false;
  char* base_ = nullptr;
  int64_t size_ = 0;
  int64_t grad_offset_ = 0, grad_bytes_ = 0;
  int64_t params_offset_ = 0, params_bytes_ = 0;
  int guard_ = -1;  // the SIGBUS guard's slot
  std::atomic<bool> truncated_{false};
};

// Whether the host part of "host:port" names this host: a loopback
// address, "localhost", or an address of one of this host's interfaces.
bool IsOnThisHost(const std::string& address);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_DATAPLANE_SHM_SEGMENT_H_

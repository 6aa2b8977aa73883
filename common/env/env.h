// The process's environment as an interface: the clock and the file system.
// Code that writes files or compares times takes an `Env*` so that tests can
// run it on a fake clock and a fault-injecting file system
// (common/testing/fault_injection_env.h) instead of sleeping and hoping, in
// the way leveldb's Env is used.
//
// Errors: NOT_FOUND when a path does not exist, INTERNAL (naming the path
// and the errno text) otherwise. Never UNAVAILABLE: a disk error is not
// retried by waiting.
//
// Thread safety: every method of an Env is safe to call concurrently. A
// WritableFile is used by one thread at a time.
#ifndef FULCRUM_COMMON_ENV_ENV_H_
#define FULCRUM_COMMON_ENV_ENV_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace fulcrum {

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual absl::Status Append(std::string_view data) = 0;
  // Makes what was appended durable (fdatasync).
  virtual absl::Status Sync() = 0;
  // Closes the file; the destructor closes it too, ignoring errors.
  virtual absl::Status Close() = 0;
  // Empties the file (the next Append writes at offset 0).
  virtual absl::Status Truncate() = 0;
};

class Env {
 public:
  virtual ~Env() = default;

  // The real environment: POSIX files and the system clock. It has no state
  // and lives as long as the process.
  static Env* Default();

  virtual absl::Time Now() = 0;

  // Creates or truncates `path`.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) = 0;
  // Opens `path` for appending, creating it if needed.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
      const std::string& path) = 0;
  virtual absl::StatusOr<std::string> ReadFile(const std::string& path) = 0;
  virtual absl::Status RenameFile(const std::string& from,
                                  const std::string& to) = 0;
  virtual absl::Status RemoveFile(const std::string& path) = 0;
  // Removes an empty directory (FAILED_PRECONDITION when not empty).
  virtual absl::Status RemoveDir(const std::string& path) = 0;
  // Creates `path` and its missing parents.
  virtual absl::Status CreateDirs(const std::string& path) = 0;
  // Makes a rename or creation inside `dir` durable.
  virtual absl::Status SyncDir(const std::string& dir) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  // Names in `dir` (no "." or ".."), in no particular order.
  virtual absl::StatusOr<std::vector<std::string>> GetChildren(
      const std::string& dir) = 0;
  // Cuts `path` to `size` bytes.
  virtual absl::Status TruncateFile(const std::string& path,
                                    uint64_t size) = 0;
};

// Writes `data` to `path` so that a reader sees the whole file or the old
// one: a temp file beside it, synced, renamed into place, the directory
// synced. Creates the directory if needed.
absl::Status WriteFileAtomically(Env* env, const std::string& path,
                                 std::string_view data);

// The directory part of `path` ("." when it has none).
std::string Dirname(const std::string& path);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_ENV_ENV_H_

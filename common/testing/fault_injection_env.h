// A test Env (common/env/env.h): a fake clock that moves only when told to,
// over the real file system with faults injected on request - the way
// leveldb's tests use SpecialEnv and FaultInjectionTestEnv instead of
// sleeping or filling a disk.
//
// Thread safety: every method is safe to call concurrently.
#ifndef FULCRUM_COMMON_TESTING_FAULT_INJECTION_ENV_H_
#define FULCRUM_COMMON_TESTING_FAULT_INJECTION_ENV_H_

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/env/env.h"

namespace fulcrum::testing {

class FaultInjectionEnv : public Env {
 public:
  enum class Op { kCreate, kAppend, kSync, kRename, kRead, kRemove };

  // The clock starts at `start` and moves only by Advance / SetNow.
  explicit FaultInjectionEnv(absl::Time start = absl::FromUnixSeconds(1000),
                             Env* base = Env::Default());

  void Advance(absl::Duration d);
  void SetNow(absl::Time t);

  // The next `times` calls of `op` on a path containing `path_part` fail
  // with `status` (and do nothing). times < 0: until ClearFaults().
  void FailOn(Op op, std::string path_part, absl::Status status,
              int times = 1);
  void ClearFaults();
  // How many calls of `op` (on any path) were made / failed.
  int Calls(Op op) const;
  int Failures(Op op) const;

  absl::Time Now() override;
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override;
  absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
      const std::string& path) override;
  absl::StatusOr<std::string> ReadFile(const std::string& path) override;
  absl::Status RenameFile(const std::string& from,
                          const std::string& to) override;
  absl::Status RemoveFile(const std::string& path) override;
  absl::Status RemoveDir(const std::string& path) override;
  absl::Status CreateDirs(const std::string& path) override;
  absl::Status SyncDir(const std::string& dir) override;
  bool FileExists(const std::string& path) override;
  absl::StatusOr<std::vector<std::string>> GetChildren(
      const std::string& dir) override;
  absl::Status TruncateFile(const std::string& path, uint64_t size) override;

  // OK, or the injected failure of `op` on `path` (counting the call).
  absl::Status Check(Op op, const std::string& path);

 private:
  struct Fault {
    Op op;
    std::string path_part;
    absl::Status status;
    int times;
  };
  Env* const base_;  // Not owned.
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  std::vector<Fault> faults_ ABSL_GUARDED_BY(mu_);
  int calls_[6] ABSL_GUARDED_BY(mu_) = {};
  int failures_[6] ABSL_GUARDED_BY(mu_) = {};
};

}  // namespace fulcrum::testing

#endif  // FULCRUM_COMMON_TESTING_FAULT_INJECTION_ENV_H_

#include "common/testing/fault_injection_env.h"

namespace fulcrum::testing {
namespace {

// Appends and syncs go through the env's fault table.
class FaultyFile : public WritableFile {
 public:
  FaultyFile(FaultInjectionEnv* env, std::string path,
             std::unique_ptr<WritableFile> base)
      : env_(env), path_(std::move(path)), base_(std::move(base)) {}
  absl::Status Append(std::string_view data) override {
    absl::Status s = env_->Check(FaultInjectionEnv::Op::kAppend, path_);
    return s.ok() ? base_->Append(data) : s;
  }
  absl::Status Sync() override {
    absl::Status s = env_->Check(FaultInjectionEnv::Op::kSync, path_);
    return s.ok() ? base_->Sync() : s;
  }
  absl::Status Close() override { return base_->Close(); }
  absl::Status Truncate() override { return base_->Truncate(); }

 private:
  FaultInjectionEnv* const env_;
  const std::string path_;
  std::unique_ptr<WritableFile> base_;
};

}  // namespace

FaultInjectionEnv::FaultInjectionEnv(absl::Time start, Env* base)
    : base_(base), now_(start) {}

void FaultInjectionEnv::Advance(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  now_ += d;
}

void FaultInjectionEnv::SetNow(absl::Time t) {
  absl::MutexLock lock(&mu_);
  now_ = t;
}

absl::Time FaultInjectionEnv::Now() {
  absl::MutexLock lock(&mu_);
  return now_;
}

void FaultInjectionEnv::FailOn(Op op, std::string path_part,
                               absl::Status status, int times) {
  absl::MutexLock lock(&mu_);
  faults_.push_back({op, std::move(path_part), std::move(status), times});
}

void FaultInjectionEnv::ClearFaults() {
  absl::MutexLock lock(&mu_);
  faults_.clear();
}

int FaultInjectionEnv::Calls(Op op) const {
  absl::MutexLock lock(&mu_);
  return calls_[static_cast<int>(op)];
}

int FaultInjectionEnv::Failures(Op op) const {
  absl::MutexLock lock(&mu_);
  return failures_[static_cast<int>(op)];
}

absl::Status FaultInjectionEnv::Check(Op op, const std::string& path) {
  absl::MutexLock lock(&mu_);
  ++calls_[static_cast<int>(op)];
  for (auto it = faults_.begin(); it != faults_.end(); ++it) {
    if (it->op != op || path.find(it->path_part) == std::string::npos ||
        it->times == 0)
      continue;
    absl::Status s = it->status;
    if (it->times > 0 && --it->times == 0) faults_.erase(it);
    ++failures_[static_cast<int>(op)];
    return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WritableFile>>
FaultInjectionEnv::NewWritableFile(const std::string& path) {
  if (absl::Status s = Check(Op::kCreate, path); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<WritableFile>> f = base_->NewWritableFile(path);
  if (!f.ok()) return f.status();
  return std::unique_ptr<WritableFile>(
      new FaultyFile(this, path, std::move(*f)));
}

absl::StatusOr<std::unique_ptr<WritableFile>>
FaultInjectionEnv::NewAppendableFile(const std::string& path) {
  if (absl::Status s = Check(Op::kCreate, path); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<WritableFile>> f =
      base_->NewAppendableFile(path);
  if (!f.ok()) return f.status();
  return std::unique_ptr<WritableFile>(
      new FaultyFile(this, path, std::move(*f)));
}

absl::StatusOr<std::string> FaultInjectionEnv::ReadFile(
    const std::string& path) {
  if (absl::Status s = Check(Op::kRead, path); !s.ok()) return s;
  return base_->ReadFile(path);
}

absl::Status FaultInjectionEnv::RenameFile(const std::string& from,
                                           const std::string& to) {
  if (absl::Status s = Check(Op::kRename, to); !s.ok()) return s;
  return base_->RenameFile(from, to);
}

absl::Status FaultInjectionEnv::RemoveFile(const std::string& path) {
  if (absl::Status s = Check(Op::kRemove, path); !s.ok()) return s;
  return base_->RemoveFile(path);
}

absl::Status FaultInjectionEnv::RemoveDir(const std::string& path) {
  return base_->RemoveDir(path);
}

absl::Status FaultInjectionEnv::CreateDirs(const std::string& path) {
  return base_->CreateDirs(path);
}

absl::Status FaultInjectionEnv::SyncDir(const std::string& dir) {
  if (absl::Status s = Check(Op::kSync, dir); !s.ok()) return s;
  return base_->SyncDir(dir);
}

bool FaultInjectionEnv::FileExists(const std::string& path) {
  return base_->FileExists(path);
}

absl::StatusOr<std::vector<std::string>> FaultInjectionEnv::GetChildren(
    const std::string& dir) {
  return base_->GetChildren(dir);
}

absl::Status FaultInjectionEnv::TruncateFile(const std::string& path,
                                             uint64_t size) {
  return base_->TruncateFile(path, size);
}

}  // namespace fulcrum::testing

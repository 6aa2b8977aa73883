#include "server/coordinator/state_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/checksum/crc32c.h"

namespace fulcrum {
namespace {

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::InternalError(
      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, const char* data, size_t n,
                      const std::string& path) {
  while (n > 0) {
    const ssize_t w = write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Errno("cannot write", path);
    data += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status SyncDir(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", dir);
  const int r = fsync(fd);
  close(fd);
  return r == 0 ? absl::OkStatus() : Errno("cannot fsync", dir);
}

void Apply(const v1::StateRecord& record,
           std::map<std::string, v1::PersistedJob>* jobs,
           v1::IdCounters* counters) {
  if (record.has_job()) {
    (*jobs)[record.job().status().job_id()] = record.job();
  } else if (record.has_counters()) {
    counters->set_next_job(
        std::max(counters->next_job(), record.counters().next_job()));
    counters->set_next_member(
        std::max(counters->next_member(), record.counters().next_member()));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<StateStore>> StateStore::Open(
    const std::string& dir, v1::CoordinatorState* state) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return Errno("cannot create", dir);
  std::unique_ptr<StateStore> store(new StateStore(dir));
  std::map<std::string, v1::PersistedJob> jobs;
  v1::IdCounters counters;
  const std::string snapshot_path = dir + "/snapshot";
  {
    std::ifstream in(snapshot_path, std::ios::binary);
    if (in) {
      std::stringstream buffer;
      buffer << in.rdbuf();
      v1::CoordinatorState snapshot;
      if (!snapshot.ParseFromString(buffer.str())) {
        return absl::DataLossError(
            absl::StrCat(snapshot_path, " is not a coordinator snapshot"));
      }
      for (const v1::PersistedJob& j : snapshot.jobs())
        jobs[j.status().job_id()] = j;
      counters = snapshot.counters();
    }
  }
  const std::string log_path = dir + "/log";
  std::string data;
  {
    std::ifstream in(log_path, std::ios::binary);
    if (in) {
      std::stringstream buffer;
      buffer << in.rdbuf();
      data = buffer.str();
    }
  }
  size_t at = 0;
  while (at + 8 <= data.size()) {
    uint32_t length, crc;
    std::memcpy(&length, data.data() + at, 4);
    std::memcpy(&crc, data.data() + at + 4, 4);
    if (at + 8 + length > data.size()) break;  // torn tail
    const char* payload = data.data() + at + 8;
    if (Crc32c(payload, length) != crc) break;
    v1::StateRecord record;
    if (!record.ParseFromArray(payload, static_cast<int>(length))) break;
    Apply(record, &jobs, &counters);
    at += 8 + length;
    ++store->records_;
  }
  if (at != data.size() && truncate(log_path.c_str(), at) != 0)
    return Errno("cannot cut the torn tail of", log_path);
  state->Clear();
  for (auto& [id, job] : jobs) *state->add_jobs() = std::move(job);
  *state->mutable_counters() = counters;
  absl::Status s = store->OpenLog();
  if (!s.ok()) return s;
  return store;
}

absl::Status StateStore::OpenLog() {
  const std::string path = dir_ + "/log";
  log_fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd_ < 0) return Errno("cannot open", path);
  return SyncDir(dir_);
}

StateStore::~StateStore() {
  if (log_fd_ >= 0) close(log_fd_);
}

absl::Status StateStore::Append(const v1::StateRecord& record) {
  const std::string payload = record.SerializeAsString();
  std::string out(8 + payload.size(), '\0');
  const uint32_t length = static_cast<uint32_t>(payload.size());
  const uint32_t crc = Crc32c(payload.data(), payload.size());
  std::memcpy(out.data(), &length, 4);
  std::memcpy(out.data() + 4, &crc, 4);
  std::memcpy(out.data() + 8, payload.data(), payload.size());
  const std::string path = dir_ + "/log";
  absl::Status s = WriteAll(log_fd_, out.data(), out.size(), path);
  if (!s.ok()) return s;
  if (fdatasync(log_fd_) != 0) return Errno("cannot fsync", path);
  ++records_;
  return absl::OkStatus();
}

absl::Status StateStore::Snapshot(const v1::CoordinatorState& state) {
  const std::string path = dir_ + "/snapshot";
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", tmp);
  const std::string data = state.SerializeAsString();
  absl::Status s = WriteAll(fd, data.data(), data.size(), tmp);
  if (s.ok() && fsync(fd) != 0) s = Errno("cannot fsync", tmp);
  close(fd);
  if (!s.ok()) return s;
  if (rename(tmp.c_str(), path.c_str()) != 0) return Errno("cannot rename", tmp);
  s = SyncDir(dir_);
  if (!s.ok()) return s;
  // The snapshot holds everything: start an empty log.
  if (ftruncate(log_fd_, 0) != 0) return Errno("cannot truncate", dir_ + "/log");
  if (fdatasync(log_fd_) != 0) return Errno("cannot fsync", dir_ + "/log");
  records_ = 0;
  return absl::OkStatus();
}

}  // namespace fulcrum

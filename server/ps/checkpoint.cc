#include "server/ps/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checksum/crc32c.h"

namespace fulcrum {
namespace {

struct Header {
  char magic[4];  // "FCK1"
  uint32_t format_version;
  int64_t step;
  int32_t shard;
  int32_t partitions;
  uint32_t payload_crc;
  uint32_t job_id_size;
};
static_assert(sizeof(Header) == 32, "the header layout is part of the format");
constexpr uint32_t kFormat = 1;

absl::Status ErrnoStatus(const std::string& what, const std::string& path) {
  const int err = errno;
  const std::string message =
      absl::StrCat(what, " ", path, ": ", std::strerror(err));
  return err == ENOENT ? absl::NotFoundError(message)
                       : absl::InternalError(message);
}

absl::Status MakeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i < path.size() && path[i] != '/') continue;
    const std::string prefix = path.substr(0, i);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus("cannot create", prefix);
    }
  }
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, const char* data, size_t n,
                      const std::string& path) {
  while (n > 0) {
    const ssize_t w = write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("cannot write", path);
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

std::string Dirname(const std::string& path) {
  return path.substr(0, path.rfind('/'));
}

}  // namespace

std::string CheckpointPath(const std::string& dir, const std::string& job_id,
                           int64_t step, int32_t shard) {
  return absl::StrCat(dir, "/", job_id, "/step-", step, "/shard-", shard,
                      ".ckpt");
}

absl::Status WriteCheckpoint(const std::string& path,
                             const CheckpointFile& file) {
  std::string payload;
  for (const auto& [id, blob] : file.partitions) {
    const uint64_t size = blob.size();
    payload.append(reinterpret_cast<const char*>(&id), sizeof(id));
    payload.append(reinterpret_cast<const char*>(&size), sizeof(size));
    payload.append(blob);
  }
  Header h{{'F', 'C', 'K', '1'},
           kFormat,
           file.step,
           file.shard,
           static_cast<int32_t>(file.partitions.size()),
           Crc32c(payload.data(), payload.size()),
           static_cast<uint32_t>(file.job_id.size())};
  const std::string dir = Dirname(path);
  absl::Status s = MakeDirs(dir);
  if (!s.ok()) return s;
  const std::string tmp = path + ".tmp";
  const int fd =
      open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("cannot create", tmp);
  s = WriteAll(fd, reinterpret_cast<const char*>(&h), sizeof(h), tmp);
  if (s.ok()) s = WriteAll(fd, file.job_id.data(), file.job_id.size(), tmp);
  if (s.ok()) s = WriteAll(fd, payload.data(), payload.size(), tmp);
  if (s.ok() && fsync(fd) != 0) s = ErrnoStatus("cannot fsync", tmp);
  if (close(fd) != 0 && s.ok()) s = ErrnoStatus("cannot close", tmp);
  if (s.ok() && rename(tmp.c_str(), path.c_str()) != 0)
    s = ErrnoStatus("cannot rename", tmp);
  if (!s.ok()) {
    unlink(tmp.c_str());
    return s;
  }
  // Make the rename itself durable.
  const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointFile> ReadCheckpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string data = buffer.str();
  auto loss = [&path](const std::string& why) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", path, " is corrupt: ", why));
  };
  Header h;
  if (data.size() < sizeof(h)) return loss("shorter than its header");
  std::memcpy(&h, data.data(), sizeof(h));
  if (std::memcmp(h.magic, "FCK1", 4) != 0) return loss("bad magic");
  if (h.format_version != kFormat) {
    return loss(absl::StrCat("unknown format version ", h.format_version));
  }
  if (data.size() < sizeof(h) + h.job_id_size) return loss("truncated job id");
  CheckpointFile file;
  file.job_id = data.substr(sizeof(h), h.job_id_size);
  file.step = h.step;
  file.shard = h.shard;
  const size_t payload_at = sizeof(h) + h.job_id_size;
  if (Crc32c(data.data() + payload_at, data.size() - payload_at) !=
      h.payload_crc) {
    return loss("CRC-32C mismatch (truncated or modified)");
  }
  size_t at = payload_at;
  for (int32_t i = 0; i < h.partitions; ++i) {
    int32_t id;
    uint64_t size;
    if (data.size() - at < sizeof(id) + sizeof(size))
      return loss("truncated partition header");
    std::memcpy(&id, data.data() + at, sizeof(id));
    std::memcpy(&size, data.data() + at + sizeof(id), sizeof(size));
    at += sizeof(id) + sizeof(size);
    if (data.size() - at < size) return loss("truncated partition");
    file.partitions.emplace_back(id, data.substr(at, size));
    at += size;
  }
  if (at != data.size()) return loss("trailing bytes");
  return file;
}

std::vector<int64_t> ListCheckpointSteps(const std::string& dir,
                                         const std::string& job_id,
                                         int32_t shard) {
  const std::string job_dir = absl::StrCat(dir, "/", job_id);
  std::vector<int64_t> steps;
  if (DIR* d = opendir(job_dir.c_str())) {
    while (dirent* e = readdir(d)) {
      long long step;
      char tail;
      if (std::sscanf(e->d_name, "step-%lld%c", &step, &tail) == 1 &&
          access(CheckpointPath(dir, job_id, step, shard).c_str(), F_OK) == 0)
        steps.push_back(step);
    }
    closedir(d);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::vector<int64_t> PruneCheckpoints(const std::string& dir,
                                      const std::string& job_id, int32_t shard,
                                      int keep) {
  const std::string job_dir = absl::StrCat(dir, "/", job_id);
  std::vector<int64_t> steps;
  if (DIR* d = opendir(job_dir.c_str())) {
    while (dirent* e = readdir(d)) {
      long long step;
      char tail;
      if (std::sscanf(e->d_name, "step-%lld%c", &step, &tail) == 1)
        steps.push_back(step);
    }
    closedir(d);
  }
  std::sort(steps.rbegin(), steps.rend());
  for (size_t i = static_cast<size_t>(std::max(keep, 0)); i < steps.size();
       ++i) {
    const std::string path = CheckpointPath(dir, job_id, steps[i], shard);
    unlink(path.c_str());
    rmdir(Dirname(path)
              .c_str());  // succeeds only once every shard's file is gone
  }
  if (steps.size() > static_cast<size_t>(std::max(keep, 0)))
    steps.resize(std::max(keep, 0));
  return steps;
}

CheckpointWriter::CheckpointWriter(Options options)
    : options_(std::move(options)), thread_([this] { Run(); }) {}

CheckpointWriter::~CheckpointWriter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
  }
  thread_.join();
}

void CheckpointWriter::Add(int64_t step, int32_t partition, std::string blob) {
  absl::MutexLock lock(&mu_);
  CheckpointFile& file = collecting_[step];
  file.job_id = options_.job_id;
  file.step = step;
  file.shard = options_.shard;
  // A partition re-added for the same step (its step was undone and
  // redone after a membership change) replaces its earlier blob.
  auto same = std::find_if(file.partitions.begin(), file.partitions.end(),
                           [partition](const auto& p) { return p.first == partition; });
  if (same != file.partitions.end()) {
    same->second = std::move(blob);
  } else {
    file.partitions.emplace_back(partition, std::move(blob));
  }
  if (static_cast<int>(file.partitions.size()) < options_.partitions_here)
    return;
  std::sort(file.partitions.begin(), file.partitions.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  ready_.push_back(std::move(file));
  collecting_.erase(step);
  changed_.SignalAll();
}

void CheckpointWriter::DropAfter(int64_t step) {
  absl::MutexLock lock(&mu_);
  collecting_.erase(collecting_.upper_bound(step), collecting_.end());
  ready_.erase(std::remove_if(ready_.begin(), ready_.end(),
                              [step](const CheckpointFile& f) { return f.step > step; }),
               ready_.end());
  for (int64_t s : ListCheckpointSteps(options_.dir, options_.job_id, options_.shard)) {
    if (s > step) unlink(CheckpointPath(options_.dir, options_.job_id, s, options_.shard).c_str());
  }
  if (writing_ > step) writing_ = -1;
  last_written_ = -1;
  for (int64_t s : ListCheckpointSteps(options_.dir, options_.job_id, options_.shard))
    last_written_ = std::max(last_written_, s);
}

int64_t CheckpointWriter::last_written() const {
  absl::MutexLock lock(&mu_);
  return last_written_;
}

int64_t CheckpointWriter::failures() const {
  absl::MutexLock lock(&mu_);
  return failures_;
}

void CheckpointWriter::Run() {
  for (;;) {
    CheckpointFile file;
    {
      absl::MutexLock lock(&mu_);
      while (ready_.empty() && !stopping_) changed_.Wait(&mu_);
      if (ready_.empty()) return;
      file = std::move(ready_.front());
      ready_.pop_front();
      writing_ = file.step;
    }
    const absl::Time start = absl::Now();
    absl::Status s =
        WriteCheckpoint(CheckpointPath(options_.dir, options_.job_id, file.step,
                                       options_.shard),
                        file);
    if (s.ok())
      PruneCheckpoints(options_.dir, options_.job_id, options_.shard,
                       options_.keep);
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    {
      absl::MutexLock lock(&mu_);
      if (writing_ < 0 && s.ok()) {  // dropped while being written
        unlink(CheckpointPath(options_.dir, options_.job_id, file.step,
                              options_.shard)
                   .c_str());
        continue;
      }
      writing_ = -1;
      if (s.ok()) {
        last_written_ = std::max(last_written_, file.step);
      } else {
        ++failures_;
      }
    }
    if (options_.on_written) options_.on_written(file.step, seconds, s);
  }
}

}  // namespace fulcrum

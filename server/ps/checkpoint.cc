#include "server/ps/checkpoint.h"

#include <algorithm>
#include <set>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checksum/crc32c.h"
#include "common/status/status_macros.h"
#include "common/tensor/bytes.h"

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

}  // namespace

std::string CheckpointPath(const std::string& dir, const std::string& job_id,
                           int64_t step, int32_t shard) {
  return absl::StrCat(dir, "/", job_id, "/step-", step, "/shard-", shard,
                      ".ckpt");
}

absl::Status WriteCheckpoint(Env* env, const std::string& path,
                             const CheckpointFile& file) {
  std::string payload;
  for (const auto& [id, blob] : file.partitions) {
    const uint64_t size = blob.size();
    AppendRaw(&payload, id);
    AppendRaw(&payload, size);
    payload.append(blob);
  }
  const Header h{{'F', 'C', 'K', '1'},
                 kFormat,
                 file.step,
                 file.shard,
                 static_cast<int32_t>(file.partitions.size()),
                 Crc32c(payload.data(), payload.size()),
                 static_cast<uint32_t>(file.job_id.size())};
  std::string data;
  AppendRaw(&data, h);
  data += file.job_id;
  data += payload;
  return WriteFileAtomically(env, path, data);
}

absl::StatusOr<CheckpointFile> ReadCheckpoint(Env* env,
                                              const std::string& path) {
  ASSIGN_OR_RETURN(const std::string data, env->ReadFile(path));
  auto loss = [&path](const std::string& why) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", path, " is corrupt: ", why));
  };
  ByteReader r(data);
  Header h;
  if (!r.Get(&h)) return loss("shorter than its header");
  if (std::memcmp(h.magic, "FCK1", 4) != 0) return loss("bad magic");
  if (h.format_version != kFormat) {
    return loss(absl::StrCat("unknown format version ", h.format_version));
  }
  std::string_view job_id;
  if (!r.Bytes(h.job_id_size, &job_id)) return loss("truncated job id");
  CheckpointFile file;
  file.job_id = std::string(job_id);
  file.step = h.step;
  file.shard = h.shard;
  const size_t payload_at = data.size() - r.left();
  if (Crc32c(data.data() + payload_at, r.left()) != h.payload_crc) {
    return loss("CRC-32C mismatch (truncated or modified)");
  }
  for (int32_t i = 0; i < h.partitions; ++i) {
    int32_t id;
    uint64_t size;
    if (!r.Get(&id) || !r.Get(&size))
      return loss("truncated partition header");
    std::string_view blob;
    if (!r.Bytes(size, &blob)) return loss("truncated partition");
    file.partitions.emplace_back(id, std::string(blob));
  }
  if (r.left() != 0) return loss("trailing bytes");
  return file;
}

namespace {

// Steps with a directory under the job's, ascending.
std::vector<int64_t> StepDirs(Env* env, const std::string& job_dir) {
  std::vector<int64_t> steps;
  absl::StatusOr<std::vector<std::string>> names = env->GetChildren(job_dir);
  if (!names.ok()) return steps;
  for (const std::string& name : *names) {
    long long step;
    char tail;
    if (std::sscanf(name.c_str(), "step-%lld%c", &step, &tail) == 1)
      steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

}  // namespace

std::vector<int64_t> ListCheckpointSteps(Env* env, const std::string& dir,
                                         const std::string& job_id,
                                         int32_t shard) {
  std::vector<int64_t> steps;
  for (int64_t step : StepDirs(env, absl::StrCat(dir, "/", job_id))) {
    if (env->FileExists(CheckpointPath(dir, job_id, step, shard)))
      steps.push_back(step);
  }
  return steps;
}

std::string NeedsPath(const std::string& dir, const std::string& job_id,
                      int64_t step, int32_t shard) {
  return absl::StrCat(dir, "/", job_id, "/step-", step, "/shard-", shard,
                      ".needs");
}

int64_t CheckpointNeeds(Env* env, const std::string& dir,
                        const std::string& job_id, int64_t step,
                        int32_t shard) {
  absl::StatusOr<std::string> text =
      env->ReadFile(NeedsPath(dir, job_id, step, shard));
  long long needs = -1;
  if (!text.ok() || std::sscanf(text->c_str(), "%lld", &needs) != 1) return -1;
  return needs;
}

std::vector<int64_t> PruneCheckpoints(Env* env, const std::string& dir,
                                      const std::string& job_id, int32_t shard,
                                      int keep) {
  std::vector<int64_t> steps = StepDirs(env, absl::StrCat(dir, "/", job_id));
  std::reverse(steps.begin(), steps.end());  // newest first
  const size_t newest = std::min(steps.size(),
                                 static_cast<size_t>(std::max(keep, 0)));
  std::set<int64_t> kept(steps.begin(), steps.begin() + newest);
  for (size_t i = 0; i < newest; ++i) {
    const int64_t needs = CheckpointNeeds(env, dir, job_id, steps[i], shard);
    if (needs >= 0) kept.insert(needs);
  }
  for (int64_t step : steps) {
    if (kept.count(step)) continue;
    const std::string path = CheckpointPath(dir, job_id, step, shard);
    env->RemoveFile(path).IgnoreError();
    env->RemoveFile(NeedsPath(dir, job_id, step, shard)).IgnoreError();
    // Succeeds only once every shard's file is gone.
    env->RemoveDir(Dirname(path)).IgnoreError();
  }
  return std::vector<int64_t>(kept.rbegin(), kept.rend());
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
  EnqueueLocked(std::move(file));
  collecting_.erase(step);
  changed_.SignalAll();
}

void CheckpointWriter::Complete(int64_t step) {
  absl::MutexLock lock(&mu_);
  if (step <= last_written_ || step == writing_) return;
  for (const CheckpointFile& f : ready_) {
    if (f.step == step) return;
  }
  CheckpointFile file;
  file.job_id = options_.job_id;
  file.step = step;
  file.shard = options_.shard;
  EnqueueLocked(std::move(file));
  changed_.SignalAll();
}

void CheckpointWriter::EnqueueLocked(CheckpointFile file) {
  ready_.push_back(std::move(file));
  while (ready_.size() > kMaxQueued) {
    overflowed_.push_back(ready_.front().step);
    ready_.pop_front();
  }
  NotePendingLocked();
}

void CheckpointWriter::NotePendingLocked() {
  int64_t oldest = INT64_MAX;
  if (writing_ > given_up_through_) oldest = writing_;
  for (const CheckpointFile& f : ready_)
    if (f.step > given_up_through_) oldest = std::min(oldest, f.step);
  oldest_pending_.store(oldest, std::memory_order_release);
}

bool CheckpointWriter::AwaitFilesThrough(int64_t step, absl::Duration limit) {
  if (oldest_pending_.load(std::memory_order_acquire) > step) return true;
  const absl::Time deadline = absl::Now() + limit;
  absl::MutexLock lock(&mu_);
  while (oldest_pending_.load(std::memory_order_relaxed) <= step) {
    if (changed_.WaitWithDeadline(&mu_, deadline) &&
        oldest_pending_.load(std::memory_order_relaxed) <= step) {
      given_up_through_ = std::max(given_up_through_, step);
      NotePendingLocked();
      changed_.SignalAll();  // the others waiting for these files go on
      return false;
    }
  }
  return true;
}

void CheckpointWriter::DropAfter(int64_t step) {
  absl::MutexLock lock(&mu_);
  collecting_.erase(collecting_.upper_bound(step), collecting_.end());
  ready_.erase(std::remove_if(ready_.begin(), ready_.end(),
                              [step](const CheckpointFile& f) { return f.step > step; }),
               ready_.end());
  Env* const env = options_.env;
  for (int64_t s : ListCheckpointSteps(env, options_.dir, options_.job_id,
                                       options_.shard)) {
    if (s > step) {
      env->RemoveFile(
             CheckpointPath(options_.dir, options_.job_id, s, options_.shard))
          .IgnoreError();
      env->RemoveFile(NeedsPath(options_.dir, options_.job_id, s, options_.shard))
          .IgnoreError();
    }
  }
  if (writing_ > step) writing_ = -1;
  NotePendingLocked();
  changed_.SignalAll();
  last_written_ = -1;
  for (int64_t s : ListCheckpointSteps(env, options_.dir, options_.job_id,
                                       options_.shard))
    last_written_ = std::max(last_written_, s);
}

void CheckpointWriter::Flush() {
  absl::MutexLock lock(&mu_);
  while (!ready_.empty() || busy_) changed_.Wait(&mu_);
}

int64_t CheckpointWriter::last_written() const {
  absl::MutexLock lock(&mu_);
  return last_written_;
}

void CheckpointWriter::Run() {
  std::vector<int64_t> overflowed;
  for (;;) {
    CheckpointFile file;
    {
      absl::MutexLock lock(&mu_);
      while (ready_.empty() && !stopping_) changed_.Wait(&mu_);
      if (ready_.empty()) return;
      file = std::move(ready_.front());
      ready_.pop_front();
      writing_ = file.step;
      busy_ = true;
      NotePendingLocked();
      overflowed.swap(overflowed_);
    }
    for (int64_t step : overflowed) {
      if (options_.on_written) {
        options_.on_written(
            step, 0,
            absl::ResourceExhaustedError(absl::StrCat(
                "checkpoint of step ", step, " dropped: ", kMaxQueued,
                " newer files were waiting for the disk")));
      }
    }
    overflowed.clear();
    Env* const env = options_.env;
    const std::string path =
        CheckpointPath(options_.dir, options_.job_id, file.step, options_.shard);
    const absl::Time start = env->Now();
    absl::Status s;
    bool skipped = false;
    if (options_.more) {
      Options::More more = options_.more(file.step);
      s = more.skip;
      skipped = !s.ok();
      for (auto& blob : more.blobs) file.partitions.push_back(std::move(blob));
      // The sidecar goes first: a file that needs another is never on
      // disk without saying so.
      const std::string needs =
          NeedsPath(options_.dir, options_.job_id, file.step, options_.shard);
      if (skipped) {
        // nothing written
      } else if (more.needs >= 0 && more.needs != file.step) {
        s = WriteFileAtomically(env, needs, absl::StrCat(more.needs, "\n"));
      } else {
        env->RemoveFile(needs).IgnoreError();  // an older one's, rewritten
      }
    }
    if (s.ok()) s = WriteCheckpoint(env, path, file);
    if (options_.more_written && !skipped)
      options_.more_written(file.step, s.ok());
    if (s.ok())
      PruneCheckpoints(env, options_.dir, options_.job_id, options_.shard,
                       options_.keep);
    const double seconds = absl::ToDoubleSeconds(env->Now() - start);
    bool dropped;
    {
      absl::MutexLock lock(&mu_);
      dropped = writing_ < 0;  // DropAfter ran while it was being written
      writing_ = -1;
      NotePendingLocked();
      if (dropped && s.ok()) env->RemoveFile(path).IgnoreError();
      if (!dropped && s.ok()) last_written_ = std::max(last_written_, file.step);
    }
    if (!dropped && options_.on_written)
      options_.on_written(file.step, seconds, s);
    absl::MutexLock lock(&mu_);
    busy_ = false;
    changed_.SignalAll();
  }
}

}  // namespace fulcrum

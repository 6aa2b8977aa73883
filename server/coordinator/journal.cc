#include "server/coordinator/journal.h"

#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/checksum/crc32c.h"
#include "common/status/status_macros.h"

namespace fulcrum {
namespace {

void Apply(const v1::StateRecord& record,
           std::map<std::string, v1::PersistedJob>* jobs,
           v1::IdCounters* counters) {
  if (record.has_job()) {
    (*jobs)[record.job().status().job_id()] = record.job();
  } else if (record.kind_case() == v1::StateRecord::kForgottenJob) {
    jobs->erase(record.forgotten_job());
  } else if (record.has_counters()) {
    counters->set_next_job(
        std::max(counters->next_job(), record.counters().next_job()));
    counters->set_next_member(
        std::max(counters->next_member(), record.counters().next_member()));
  }
}

std::string Frame(const v1::StateRecord& record) {
  const std::string payload = record.SerializeAsString();
  std::string out(8 + payload.size(), '\0');
  const uint32_t length = static_cast<uint32_t>(payload.size());
  const uint32_t crc = Crc32c(payload.data(), payload.size());
  std::memcpy(out.data(), &length, 4);
  std::memcpy(out.data() + 4, &crc, 4);
  std::memcpy(out.data() + 8, payload.data(), payload.size());
  return out;
}

// Replays the log's whole records; returns how many bytes they take.
size_t Replay(const std::string& data,
              std::map<std::string, v1::PersistedJob>* jobs,
              v1::IdCounters* counters, int64_t* records) {
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
    Apply(record, jobs, counters);
    at += 8 + length;
    ++*records;
  }
  return at;
}

}  // namespace

Journal::Journal(Env* env, std::string dir)
    : env_(env), dir_(std::move(dir)) {}

Journal::~Journal() = default;

absl::StatusOr<std::unique_ptr<Journal>> Journal::Open(
    Env* env, const std::string& dir, v1::CoordinatorState* state) {
  RETURN_IF_ERROR(env->CreateDirs(dir));
  std::unique_ptr<Journal> journal(new Journal(env, dir));
  std::map<std::string, v1::PersistedJob> jobs;
  v1::IdCounters counters;
  const std::string snapshot_path = dir + "/snapshot";
  if (env->FileExists(snapshot_path)) {
    ASSIGN_OR_RETURN(std::string data, env->ReadFile(snapshot_path));
    v1::CoordinatorState snapshot;
    if (!snapshot.ParseFromString(data)) {
      return absl::DataLossError(
          absl::StrCat(snapshot_path, " is not a coordinator snapshot"));
    }
    for (const v1::PersistedJob& j : snapshot.jobs())
      jobs[j.status().job_id()] = j;
    counters = snapshot.counters();
  }
  const std::string log_path = dir + "/log";
  std::string data;
  if (env->FileExists(log_path)) {
    ASSIGN_OR_RETURN(data, env->ReadFile(log_path));
  }
  int64_t records = 0;
  const size_t whole = Replay(data, &jobs, &counters, &records);
  if (whole != data.size()) RETURN_IF_ERROR(env->TruncateFile(log_path, whole));
  journal->log_size_ = whole;
  journal->since_snapshot_ = records;
  state->Clear();
  for (auto& [id, job] : jobs) *state->add_jobs() = std::move(job);
  *state->mutable_counters() = counters;
  RETURN_IF_ERROR(journal->OpenLog());
  return journal;
}

absl::Status Journal::OpenLog() {
  ASSIGN_OR_RETURN(log_, env_->NewAppendableFile(dir_ + "/log"));
  return env_->SyncDir(dir_);
}

uint64_t Journal::Add(v1::StateRecord record) {
  absl::MutexLock lock(&mu_);
  queue_.emplace_back(std::move(record));
  ++since_snapshot_;
  return ++queued_;
}

uint64_t Journal::AddSnapshot(v1::CoordinatorState state) {
  absl::MutexLock lock(&mu_);
  queue_.emplace_back(std::move(state));
  since_snapshot_ = 0;
  return ++queued_;
}

int64_t Journal::records_since_snapshot() const {
  absl::MutexLock lock(&mu_);
  return since_snapshot_;
}

absl::Status Journal::Sync(uint64_t ticket) {
  absl::MutexLock lock(&mu_);
  while (done_ < ticket) {
    if (writing_) {
      changed_.Wait(&mu_);
      continue;
    }
    // Become the writer of everything queued so far.
    std::deque<Entry> batch;
    batch.swap(queue_);
    const uint64_t first = done_ + 1, last = queued_;
    writing_ = true;
    mu_.Unlock();
    const absl::Status s = Write(batch);
    mu_.Lock();
    writing_ = false;
    done_ = last;
    if (!s.ok()) {
      failures_.push_back({first, last, s});
      if (failures_.size() > 64) failures_.pop_front();
    }
    changed_.SignalAll();
  }
  for (const Failure& f : failures_) {
    if (ticket >= f.first && ticket <= f.last) return f.status;
  }
  return absl::OkStatus();
}

absl::Status Journal::Write(std::deque<Entry>& batch) {
  absl::Status first_error;
  std::string records;
  auto flush = [&]() -> absl::Status {
    if (records.empty()) return absl::OkStatus();
    absl::Status s = log_->Append(records);
    if (s.ok()) s = log_->Sync();
    if (!s.ok()) {
      // Cut what may have reached the file, so later records follow the
      // last good one (a torn record would end every later replay).
      env_->TruncateFile(dir_ + "/log", log_size_).IgnoreError();
      OpenLog().IgnoreError();
      records.clear();
      return s;
    }
    log_size_ += records.size();
    records.clear();
    return absl::OkStatus();
  };
  for (Entry& e : batch) {
    if (auto* record = std::get_if<v1::StateRecord>(&e)) {
      records += Frame(*record);
      continue;
    }
    absl::Status s = flush();
    if (s.ok()) s = WriteSnapshot(std::get<v1::CoordinatorState>(e));
    if (first_error.ok()) first_error = s;
  }
  absl::Status s = flush();
  return first_error.ok() ? s : first_error;
}

absl::Status Journal::WriteSnapshot(const v1::CoordinatorState& state) {
  RETURN_IF_ERROR(WriteFileAtomically(env_, dir_ + "/snapshot",
                                      state.SerializeAsString()));
  // The snapshot holds everything: start an empty log.
  RETURN_IF_ERROR(log_->Truncate());
  RETURN_IF_ERROR(log_->Sync());
  log_size_ = 0;
  return absl::OkStatus();
}

}  // namespace fulcrum

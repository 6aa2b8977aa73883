// The coordinator's durable state: a snapshot file plus an append-only log
// of the records written after it, with group commit.
//
// Files in `dir`:
//   snapshot  CoordinatorState, written atomically (temp file, fsync,
//             rename, directory fsync).
//   log       records: uint32 length, uint32 CRC-32C of the payload, then a
//             StateRecord (little-endian). A torn or corrupt tail (a crash
//             mid-append) ends the replay and is cut off.
//
// Add() queues a record and returns a ticket at once; the Coordinator calls
// it under its lock, so the log's order is the order of the changes.
// Sync(ticket) writes and fsyncs everything queued so far (one fdatasync
// for every record that queued meanwhile) and is called without the
// Coordinator's lock: a slow disk no longer stalls every other call. A
// write that fails is cut off the log again and fails every ticket of its
// batch; later batches are written normally.
//
// Thread safety: every method is safe to call concurrently.
#ifndef FULCRUM_SERVER_COORDINATOR_JOURNAL_H_
#define FULCRUM_SERVER_COORDINATOR_JOURNAL_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <variant>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/env/env.h"
#include "fulcrum/v1/coordinator_state.pb.h"

namespace fulcrum {

class Journal {
 public:
  // Opens (creating) `dir` and replays the snapshot and log into *state:
  // every job's newest record, the newest counters. DATA_LOSS when the
  // snapshot is corrupt. `env` is not owned.
  static absl::StatusOr<std::unique_ptr<Journal>> Open(
      Env* env, const std::string& dir, v1::CoordinatorState* state);
  ~Journal();

  // Queues a record; returns its ticket (> 0).
  uint64_t Add(v1::StateRecord record);
  // Queues a snapshot holding everything so far; written in its turn, it
  // replaces the snapshot file and empties the log.
  uint64_t AddSnapshot(v1::CoordinatorState state);
  // Records since the last snapshot, queued ones included.
  int64_t records_since_snapshot() const;
  // Makes `ticket` durable; its batch's status.
  absl::Status Sync(uint64_t ticket);

 private:
  using Entry = std::variant<v1::StateRecord, v1::CoordinatorState>;
  Journal(Env* env, std::string dir);
  absl::Status OpenLog();
  // Writes a batch (no lock held): records appended with one fsync, a
  // snapshot replacing the files.
  absl::Status Write(std::deque<Entry>& batch);
  absl::Status WriteSnapshot(const v1::CoordinatorState& state);

  Env* const env_;  // Not owned.
  const std::string dir_;
  std::unique_ptr<WritableFile> log_;  // the writer's (one at a time)
  uint64_t log_size_ = 0;              // bytes durably in the log

  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  std::deque<Entry> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t queued_ ABSL_GUARDED_BY(mu_) = 0;   // last ticket handed out
  uint64_t done_ ABSL_GUARDED_BY(mu_) = 0;     // last ticket written
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // a Sync is writing
  int64_t since_snapshot_ ABSL_GUARDED_BY(mu_) = 0;
  // Failed batches, newest last: (first ticket, last ticket, status).
  struct Failure {
    uint64_t first, last;
    absl::Status status;
  };
  std::deque<Failure> failures_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_COORDINATOR_JOURNAL_H_

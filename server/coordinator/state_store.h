// The coordinator's durable state: a snapshot file plus an append-only log
// of records written after it, each fsync'd before the change it records is
// acknowledged.
//
// Files in `dir`:
//   snapshot  CoordinatorState, written to a temp file, fsync'd, renamed
//             into place and the directory fsync'd.
//   log       records: uint32 length, uint32 CRC-32C of the payload, then a
//             StateRecord (little-endian). A torn or corrupt tail (a crash
//             mid-append) ends the replay and is cut off.
//
// Thread safety: none; the coordinator calls it under its own lock.
#ifndef FULCRUM_SERVER_COORDINATOR_STATE_STORE_H_
#define FULCRUM_SERVER_COORDINATOR_STATE_STORE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "fulcrum/v1/coordinator_state.pb.h"

namespace fulcrum {

class StateStore {
 public:
  // Opens (creating) `dir` and replays the snapshot and log into *state:
  // every job's newest record, the newest counters.
  static absl::StatusOr<std::unique_ptr<StateStore>> Open(
      const std::string& dir, v1::CoordinatorState* state);
  ~StateStore();

  // Appends and fsyncs one record.
  absl::Status Append(const v1::StateRecord& record);
  // Replaces the snapshot with `state` and empties the log.
  absl::Status Snapshot(const v1::CoordinatorState& state);
  int64_t records_since_snapshot() const { return records_; }

 private:
  explicit StateStore(std::string dir) : dir_(std::move(dir)) {}
  absl::Status OpenLog();

  const std::string dir_;
  int log_fd_ = -1;
  int64_t records_ = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_COORDINATOR_STATE_STORE_H_

// ShardControl fakes for the coordinator's tests: NoShards accepts
// everything and does nothing; FakeShards records every call, answers as
// configured, and can hold InitJob calls until released (a slow shard).
#ifndef FULCRUM_SERVER_COORDINATOR_TESTING_FAKE_SHARDS_H_
#define FULCRUM_SERVER_COORDINATOR_TESTING_FAKE_SHARDS_H_

#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "server/coordinator/shard_control.h"

namespace fulcrum::testing {

class NoShards : public ShardControl {
 public:
  absl::Status InitJob(const std::string&, const v1::InitJobRequest&) override {
    return absl::OkStatus();
  }
  void EndJob(const std::string&, const std::string&) override {}
  absl::StatusOr<v1::ReconfigureResponse> Reconfigure(
      const std::string&, const v1::ReconfigureRequest&) override {
    v1::ReconfigureResponse response;
    response.set_initialized(true);
    return response;
  }
  absl::Status Pull(const std::string&, const v1::PullRequest&,
                    const std::function<bool(const v1::Params&)>&) override {
    return absl::OkStatus();
  }
  absl::Status ExportRows(const std::string&, const v1::ExportRowsRequest&,
                          const std::function<bool(const v1::RowsPage&)>&)
      override {
    return absl::OkStatus();
  }
};

// Not thread-safe except InitJob's hold: drive the coordinator with an
// InlineExecutor, or read the records once its executor is idle.
class FakeShards : public ShardControl {
 public:
  absl::Status InitJob(const std::string& address,
                       const v1::InitJobRequest& r) override {
    if (hold_inits != nullptr) hold_inits->WaitForNotification();
    absl::MutexLock lock(&mu);
    inits.push_back({address, r});
    return next_status;
  }
  void EndJob(const std::string& address, const std::string& job_id) override {
    absl::MutexLock lock(&mu);
    ends.push_back(address + "/" + job_id);
  }
  absl::StatusOr<v1::ReconfigureResponse> Reconfigure(
      const std::string& address, const v1::ReconfigureRequest& r) override {
    if (during_reconfigure) during_reconfigure();
    absl::MutexLock lock(&mu);
    reconfigures.push_back({address, r});
    if (r.restore() && bad_steps.count(r.restore_step()))
      return absl::DataLossError("corrupt checkpoint");
    if (failing.count(address)) return failing[address];
    v1::ReconfigureResponse response;
    response.set_initialized(!awaiting_values.count(address));
    response.set_min_version(versions.count(address) ? versions[address] : 0);
    for (int64_t step : disk[address]) response.add_checkpoint_steps(step);
    response.set_checkpoints_nothing(holds_nothing.count(address) > 0);
    if (r.align_version() >= 0 && address == ledger_address) {
      response.set_has_ledger(true);
      for (const v1::LedgerEntry& e : ledger) *response.add_ledger() = e;
    }
    return response;
  }
  absl::Status Pull(const std::string& address, const v1::PullRequest& r,
                    const std::function<bool(const v1::Params&)>& sink) override {
    std::vector<v1::Params> chunks;
    {
      absl::MutexLock lock(&mu);
      pulls.push_back(address + "/" + r.job_id());
      chunks = params[address];
    }
    for (const v1::Params& p : chunks) {
      if (!sink(p)) return absl::CancelledError("reader gone");
    }
    return absl::OkStatus();
  }
  absl::Status ExportRows(const std::string& address,
                          const v1::ExportRowsRequest&,
                          const std::function<bool(const v1::RowsPage&)>& sink)
      override {
    std::vector<v1::RowsPage> pages;
    {
      absl::MutexLock lock(&mu);
      pages = rows[address];
    }
    for (const v1::RowsPage& p : pages) {
      if (!sink(p)) return absl::CancelledError("reader gone");
    }
    return absl::OkStatus();
  }

  absl::Mutex mu;
  std::vector<std::pair<std::string, v1::InitJobRequest>> inits;
  std::vector<std::pair<std::string, v1::ReconfigureRequest>> reconfigures;
  std::vector<std::string> ends;
  std::vector<std::string> pulls;
  absl::Status next_status;
  std::map<std::string, int64_t> versions;  // phase 1 min_version by address
  std::set<std::string> holds_nothing;      // checkpoints_nothing, by address
  std::map<std::string, std::vector<v1::RowsPage>> rows;  // ExportRows
  std::set<std::string> awaiting_values;    // shards without values
  std::set<int64_t> bad_steps;              // checkpoints that fail to load
  std::map<std::string, absl::Status> failing;  // Reconfigure fails there
  std::map<std::string, std::vector<int64_t>> disk;  // checkpoint files
  std::map<std::string, std::vector<v1::Params>> params;  // what Pull sends
  std::string ledger_address = "127.0.0.1:1";
  std::vector<v1::LedgerEntry> ledger;
  // Non-null: InitJob waits for it (a slow shard).
  absl::Notification* hold_inits = nullptr;
  // Set: runs at the start of each Reconfigure, outside `mu` (something that
  // happens to the job while its round is in flight).
  std::function<void()> during_reconfigure;
};

}  // namespace fulcrum::testing

#endif  // FULCRUM_SERVER_COORDINATOR_TESTING_FAKE_SHARDS_H_

// The coordinator's durable state: a restart re-adopts members and goes
// on; a journal that cannot write refuses the change; a rejected request
// changes no state (a report for an unknown job adopts nobody).
#include <cstdlib>

#include "common/concurrency/executor.h"
#include "common/testing/fault_injection_env.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator_core.h"
#include "server/coordinator/testing/fake_shards.h"
#include "server/coordinator/testing/test_specs.h"

namespace fulcrum {
namespace {

using testing::FakeShards;

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
}

using testing::TinySpec;

// A coordinator's surroundings that outlive it: its state directory on a
// fault-injecting file system with a fake clock, and its shards.
struct Durable {
  explicit Durable(const std::string& name) {
    options.env = &env;
    options.executor = &inline_executor;  // shard calls done in Tick()
    options.state_dir = TestDir(name);
  }
  testing::FaultInjectionEnv env;
  InlineExecutor inline_executor;
  FakeShards shards;
  Coordinator::Options options;
};

TEST(CoordinatorRecoveryTest, RestartedCoordinatorReadoptsAndContinues) {
  Durable d("coordinator_state");
  std::string job, w1, w2, s1;
  {
    Coordinator first(d.options, &d.shards);
    ASSERT_TRUE(first.Recover().ok());
    const v1::JobSpec spec = TinySpec(2, 2, 1);
    job = *first.SubmitJob(spec);
    w1 = first.RegisterWorker(testing::WorkerOn())->worker_id();
    w2 = first.RegisterWorker(testing::WorkerOn())->worker_id();
    v1::RegisterShardRequest r;
    r.set_address("127.0.0.1:1");
    s1 = first.RegisterShard(r)->shard_id();
    first.Tick();
    ASSERT_EQ(first.GetJob(job)->state(), v1::RUNNING);
  }  // the coordinator "crashes": nothing but the state dir survives
  Coordinator second(d.options, &d.shards);
  ASSERT_TRUE(second.Recover().ok());
  v1::JobStatus status = *second.GetJob(job);
  EXPECT_EQ(status.state(), v1::RUNNING);
  EXPECT_EQ(status.generation(), 1);
  EXPECT_EQ(status.workers_size(), 2);
  // New ids never collide with ones issued before the restart.
  const std::string w3 = second.RegisterWorker(testing::WorkerOn())->worker_id();
  EXPECT_NE(w3, w1);
  EXPECT_NE(w3, w2);
  // Members come back with heartbeats; chunk leases wait meanwhile.
  v1::LeaseChunkRequest lease;
  lease.set_worker_id(w1);
  lease.set_job_id(job);
  lease.set_generation(1);
  lease.set_dataset_size(100);
  v1::WorkerHeartbeatRequest hb;
  hb.set_worker_id(w1);
  hb.set_job_id(job);
  hb.set_hostname("h");
  ASSERT_TRUE(second.WorkerHeartbeat(hb).ok());
  EXPECT_EQ(second.LeaseChunk(lease).status().code(),
            absl::StatusCode::kUnavailable);
  hb.set_worker_id(w2);
  ASSERT_TRUE(second.WorkerHeartbeat(hb).ok());
  v1::ShardHeartbeatRequest sb;
  sb.set_shard_id(s1);
  sb.set_address("127.0.0.1:1");
  ASSERT_TRUE(second.ShardHeartbeat(sb).ok());
  // Everyone is back: the next tick moves to generation 2 (rebuilding the
  // chunk table from the ledger) without waiting for the lease.
  second.Tick();
  status = *second.GetJob(job);
  EXPECT_EQ(status.generation(), 2);
  EXPECT_EQ(status.workers_size(), 2);
  lease.set_generation(2);
  EXPECT_TRUE(second.LeaseChunk(lease).ok());
  // A worker id that was never issued is not adopted.
  hb.set_worker_id("w-999");
  EXPECT_EQ(second.WorkerHeartbeat(hb).status().code(),
            absl::StatusCode::kNotFound);
}

// An ended job keeps its samples and per-epoch ledger across a restart
// (they showed 0 samples and no epochs).
TEST(CoordinatorRecoveryTest, AnEndedJobKeepsWhatItTrainedAcrossARestart) {
  Durable d("ended_state");
  std::string job;
  v1::JobStatus before;
  {
    Coordinator first(d.options, &d.shards);
    ASSERT_TRUE(first.Recover().ok());
    job = *first.SubmitJob(TinySpec(1, 1, 1));
    const std::string w = first.RegisterWorker(testing::WorkerOn())->worker_id();
    v1::RegisterShardRequest r;
    r.set_address("127.0.0.1:1");
    const std::string s = first.RegisterShard(r)->shard_id();
    first.Tick();
    ASSERT_EQ(first.GetJob(job)->state(), v1::RUNNING);
    v1::LeaseChunkRequest lease;  // the dataset's size: the chunk table
    lease.set_worker_id(w);
    lease.set_job_id(job);
    lease.set_generation(1);
    lease.set_dataset_size(100);
    ASSERT_TRUE(first.LeaseChunk(lease).ok());
    v1::ShardHeartbeatRequest sb;  // the shard's ledger: 40 samples of epoch 0
    sb.set_shard_id(s);
    v1::ShardJobStats* stats = sb.add_jobs();
    stats->set_job_id(job);
    stats->set_generation(1);
    stats->set_has_ledger(true);
    v1::LedgerEntry* entry = stats->add_ledger();
    entry->set_chunk(0);
    entry->set_end(40);
    entry->set_samples(40);
    ASSERT_TRUE(first.ShardHeartbeat(sb).ok());
    v1::ReportProgressRequest done;
    done.set_worker_id(w);
    done.set_job_id(job);
    done.set_done(true);
    done.mutable_progress()->set_step(5);
    done.mutable_progress()->set_samples_total(40);
    ASSERT_TRUE(first.ReportProgress(done).ok());
    before = *first.GetJob(job);
    ASSERT_EQ(before.state(), v1::SUCCEEDED);
    ASSERT_EQ(before.progress().samples_total(), 40);
    ASSERT_GE(before.epochs_size(), 1);
    ASSERT_EQ(before.epochs(0).trained(), 40);
  }
  Coordinator second(d.options, &d.shards);
  ASSERT_TRUE(second.Recover().ok());
  const v1::JobStatus after = *second.GetJob(job);
  EXPECT_EQ(after.state(), v1::SUCCEEDED);
  EXPECT_EQ(after.progress().samples_total(), 40);
  EXPECT_EQ(after.progress().step(), 5);
  ASSERT_EQ(after.epochs_size(), before.epochs_size());
  EXPECT_EQ(after.epochs(0).trained(), 40);
}

// Regression: after a restart, a ReportProgress of a worker the
// coordinator issued, for a job it does not know, was answered NOT_FOUND
// but adopted the worker pointing at that job - and the worker's next
// heartbeat crashed the coordinator (jobs_.at on a missing key). A
// rejected request changes no state.
// The job table does not grow without bound: beyond keep_ended_jobs the
// oldest ended jobs are forgotten, durably; running and pending ones stay.
TEST(CoordinatorRecoveryTest, OnlyTheNewestEndedJobsAreKept) {
  Durable d("forget_state");
  d.options.keep_ended_jobs = 2;
  std::vector<std::string> ids;
  {
    Coordinator first(d.options, &d.shards);
    ASSERT_TRUE(first.Recover().ok());
    for (int i = 0; i < 5; ++i) ids.push_back(*first.SubmitJob(TinySpec(1, 1, 1)));
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(first.CancelJob(ids[i]).ok());
    first.Tick();
    EXPECT_EQ(first.GetJob(ids[0]).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(first.GetJob(ids[1]).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(first.ListJobs().size(), 3u) << "2 ended + the pending one";
  }
  Coordinator second(d.options, &d.shards);
  ASSERT_TRUE(second.Recover().ok());
  std::vector<std::string> kept;
  for (const v1::JobStatus& s : second.ListJobs()) kept.push_back(s.job_id());
  EXPECT_EQ(kept, (std::vector<std::string>{ids[2], ids[3], ids[4]}));
}

TEST(CoordinatorRecoveryTest, ARejectedReportAdoptsNobody) {
  Durable d("coordinator_report");
  std::string w1;
  {
    Coordinator first(d.options, &d.shards);
    ASSERT_TRUE(first.Recover().ok());
    ASSERT_TRUE(first.SubmitJob(TinySpec(1, 1, 1)).ok());
    w1 = first.RegisterWorker(testing::WorkerOn())->worker_id();
  }
  Coordinator second(d.options, &d.shards);
  ASSERT_TRUE(second.Recover().ok());
  v1::ReportProgressRequest report;
  report.set_worker_id(w1);
  report.set_job_id("job-77");
  report.set_done(true);
  EXPECT_EQ(second.ReportProgress(report).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(second.ListMembers().empty()) << "nobody adopted";
  // Not a member of job-1's generation (it never started): refused too.
  report.set_job_id("job-1");
  EXPECT_EQ(second.ReportProgress(report).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(second.ListMembers().empty());
  // Its heartbeat adopts it, idle, and a later one answers normally.
  v1::WorkerHeartbeatRequest hb;
  hb.set_worker_id(w1);
  hb.set_job_id("job-77");
  ASSERT_TRUE(second.WorkerHeartbeat(hb).ok());
  auto again = second.WorkerHeartbeat(hb);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->has_assignment());
  ASSERT_EQ(second.ListMembers().size(), 1u);
  EXPECT_EQ(second.ListMembers()[0].job_id(), "");
}

// A journal that cannot make a submission durable refuses it: no job, and
// the next submission (the disk back) is recorded and survives a restart.
TEST(CoordinatorRecoveryTest, ASubmissionThatIsNotDurableIsRefused) {
  Durable d("coordinator_disk");
  std::string kept;
  {
    Coordinator c(d.options, &d.shards);
    ASSERT_TRUE(c.Recover().ok());
    d.env.FailOn(testing::FaultInjectionEnv::Op::kSync, "/log",
               absl::InternalError("injected: I/O error"));
    auto refused = c.SubmitJob(TinySpec(1, 1, 1));
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(refused.status().message().find("durably"), std::string::npos);
    EXPECT_TRUE(c.ListJobs().empty());
    auto accepted = c.SubmitJob(TinySpec(1, 1, 1));
    ASSERT_TRUE(accepted.ok()) << accepted.status();
    kept = *accepted;
  }
  Coordinator restarted(d.options, &d.shards);
  ASSERT_TRUE(restarted.Recover().ok());
  ASSERT_EQ(restarted.ListJobs().size(), 1u);
  EXPECT_EQ(restarted.ListJobs()[0].job_id(), kept);
}

}  // namespace
}  // namespace fulcrum

#include "server/coordinator/coordinator_core.h"

#include "common/config/job_spec.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

class FakeShards : public ShardControl {
 public:
  absl::Status InitJob(const std::string& address,
                       const v1::InitJobRequest& r) override {
    inits.push_back({address, r});
    return next_status;
  }
  void EndJob(const std::string& address, const std::string& job_id) override {
    ends.push_back(address + "/" + job_id);
  }
  std::vector<std::pair<std::string, v1::InitJobRequest>> inits;
  std::vector<std::string> ends;
  absl::Status next_status;
};

class CoordinatorTest : public ::testing::Test {
 protected:
  CoordinatorTest() : coordinator_(MakeOptions(), &shards_) {}

  Coordinator::Options MakeOptions() {
    Coordinator::Options o;
    o.now = [this] { return now_; };
    return o;
  }

  static v1::JobSpec Spec(int min, int max, int shards) {
    v1::JobSpec spec;
    spec.set_name("j");
    spec.mutable_model()->set_type("mlp");
    spec.mutable_model()->add_layers(4);
    spec.mutable_model()->add_layers(2);
    spec.mutable_dataset()->set_dir("/d");
    spec.mutable_optimizer()->set_lr(0.1);
    spec.mutable_workers()->set_min(min);
    spec.mutable_workers()->set_max(max);
    spec.set_shards(shards);
    return spec;
  }

  std::string AddWorker() {
    return coordinator_.RegisterWorker({}).worker_id();
  }
  std::string AddShard(const std::string& address) {
    v1::RegisterShardRequest r;
    r.set_address(address);
    return coordinator_.RegisterShard(r)->shard_id();
  }
  v1::WorkerAssignment Beat(const std::string& worker,
                            const std::string& job = "") {
    v1::WorkerHeartbeatRequest r;
    r.set_worker_id(worker);
    r.set_job_id(job);
    auto resp = coordinator_.WorkerHeartbeat(r);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->assignment() : v1::WorkerAssignment();
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  FakeShards shards_;
  Coordinator coordinator_;
};

TEST_F(CoordinatorTest, RejectsInvalidSpecNamingTheField) {
  v1::JobSpec spec = Spec(1, 1, 1);
  spec.mutable_optimizer()->set_lr(-1);
  auto r = coordinator_.SubmitJob(spec);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "optimizer.lr must be > 0, got -1");
  EXPECT_TRUE(coordinator_.ListJobs().empty());
}

TEST_F(CoordinatorTest, StartsWhenEnoughMembersThenSucceeds) {
  auto id = coordinator_.SubmitJob(Spec(2, 3, 2));
  ASSERT_TRUE(id.ok());
  const std::string w1 = AddWorker();
  AddShard("127.0.0.1:1");
  coordinator_.Tick();
  EXPECT_EQ(coordinator_.GetJob(*id)->state(), v1::PENDING);
  const std::string w2 = AddWorker();
  AddShard("127.0.0.1:2");
  coordinator_.Tick();  // min reached: waits start_grace for a third worker
  EXPECT_TRUE(shards_.inits.empty());
  now_ += absl::Seconds(2);
  coordinator_.Tick();
  ASSERT_EQ(shards_.inits.size(), 2u);
  EXPECT_EQ(shards_.inits[1].second.shard_index(), 1);
  EXPECT_EQ(shards_.inits[0].second.workers_size(), 2);
  v1::JobStatus status = *coordinator_.GetJob(*id);
  EXPECT_EQ(status.state(), v1::RUNNING);
  EXPECT_EQ(status.generation(), 1);
  EXPECT_EQ(status.live_workers(), 2);

  v1::WorkerAssignment a1 = Beat(w1), a2 = Beat(w2);
  EXPECT_EQ(a1.job_id(), *id);
  EXPECT_EQ(a1.rank(), 0);
  EXPECT_EQ(a2.rank(), 1);
  EXPECT_EQ(a2.world_size(), 2);
  ASSERT_EQ(a2.shard_addresses_size(), 2);
  EXPECT_EQ(a2.shard_addresses(0), "127.0.0.1:1");

  v1::ReportProgressRequest done;
  done.set_worker_id(w2);
  done.set_job_id(*id);
  done.set_done(true);
  done.mutable_progress()->set_samples_total(640);
  ASSERT_TRUE(coordinator_.ReportProgress(done).ok());
  EXPECT_EQ(coordinator_.GetJob(*id)->state(), v1::RUNNING);  // rank 0 decides
  done.set_worker_id(w1);
  done.mutable_progress()->set_step(100);
  done.mutable_progress()->set_test_accuracy(0.9);
  done.mutable_progress()->set_samples_total(650);
  ASSERT_TRUE(coordinator_.ReportProgress(done).ok());
  status = *coordinator_.GetJob(*id);
  EXPECT_EQ(status.state(), v1::SUCCEEDED);
  EXPECT_EQ(status.progress().step(), 100);
  // joined w1, w2, two shards; then w2 and w1 finished.
  std::vector<std::string> events;
  for (const v1::MembershipEvent& e : status.events()) {
    events.push_back(e.kind() + " " + e.member_id());
    EXPECT_EQ(e.generation(), 1);
  }
  ASSERT_EQ(events.size(), 6u);
  EXPECT_EQ(events[0], "joined " + w1);
  EXPECT_EQ(events[1], "joined " + w2);
  EXPECT_EQ(events[4], "finished " + w2);
  EXPECT_EQ(events[5], "finished " + w1);
  EXPECT_EQ(status.progress().samples_total(),
            640 + 650);              // every worker's samples
  EXPECT_EQ(Beat(w1).job_id(), "");  // idle again
  EXPECT_EQ(shards_.ends.size(), 2u);
}

TEST_F(CoordinatorTest, LostWorkerFailsItsJob) {
  auto id = coordinator_.SubmitJob(Spec(1, 1, 1));
  const std::string w = AddWorker();
  const std::string s = AddShard("127.0.0.1:1");
  coordinator_.Tick();
  ASSERT_EQ(coordinator_.GetJob(*id)->state(), v1::RUNNING);
  now_ += absl::Seconds(3);
  v1::ShardHeartbeatRequest sb;
  sb.set_shard_id(s);
  ASSERT_EQ(coordinator_.ShardHeartbeat(sb)->active_jobs_size(), 1);
  now_ += absl::Seconds(3);  // worker silent for 6 s > 5 s lease
  coordinator_.Tick();
  v1::JobStatus status = *coordinator_.GetJob(*id);
  EXPECT_EQ(status.state(), v1::FAILED);
  EXPECT_NE(status.message().find("worker " + w + " lost"), std::string::npos);
  ASSERT_GE(status.events_size(), 1);
  EXPECT_EQ(status.events(status.events_size() - 1).kind(), "lost");
  EXPECT_EQ(status.events(status.events_size() - 1).member_id(), w);
  EXPECT_EQ(shards_.ends, std::vector<std::string>{"127.0.0.1:1/" + *id});
  v1::WorkerHeartbeatRequest hb;
  hb.set_worker_id(w);
  EXPECT_EQ(coordinator_.WorkerHeartbeat(hb).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(CoordinatorTest, MergesStalenessAndCheckpointsFromEveryShard) {
  auto id = coordinator_.SubmitJob(Spec(1, 1, 2));
  AddWorker();
  const std::string s1 = AddShard("127.0.0.1:1");
  const std::string s2 = AddShard("127.0.0.1:2");
  coordinator_.Tick();
  auto beat = [&](const std::string& shard, std::vector<int64_t> histogram,
                  int64_t checkpoint = 0) {
    v1::ShardHeartbeatRequest r;
    r.set_shard_id(shard);
    v1::ShardJobStats* stats = r.add_jobs();
    stats->set_job_id(*id);
    stats->set_checkpoint_step(checkpoint);
    int64_t reads = 0, sum = 0;
    for (size_t i = 0; i < histogram.size(); ++i) {
      stats->mutable_staleness()->add_histogram(histogram[i]);
      reads += histogram[i];
      sum += i * histogram[i];
    }
    stats->mutable_staleness()->set_reads(reads);
    stats->mutable_staleness()->set_mean(double(sum) / reads);
    stats->mutable_staleness()->set_max(histogram.size() - 1);
    ASSERT_TRUE(coordinator_.ShardHeartbeat(r).ok());
  };
  beat(s1, {4, 2}, 100);  // 6 reads, sum 2
  EXPECT_EQ(coordinator_.GetJob(*id)->checkpoint_step(), 0)
      << "s2 has not written any";
  beat(s2, {1, 0, 0, 1}, 200);  // 2 reads, sum 3
  EXPECT_EQ(coordinator_.GetJob(*id)->checkpoint_step(), 100)
      << "complete = on every shard";
  beat(s1, {6, 2}, 200);  // a newer report replaces the older: 8 reads, sum 2
  EXPECT_EQ(coordinator_.GetJob(*id)->checkpoint_step(), 200);
  const v1::StalenessSummary st = coordinator_.GetJob(*id)->staleness();
  EXPECT_EQ(st.reads(), 10);
  EXPECT_EQ(st.max(), 3);
  EXPECT_DOUBLE_EQ(st.mean(), 5.0 / 10);
  ASSERT_EQ(st.histogram_size(), 4);
  EXPECT_EQ(st.histogram(0), 7);
  EXPECT_EQ(st.histogram(1), 2);
  EXPECT_EQ(st.histogram(3), 1);
}

TEST_F(CoordinatorTest, ReportsStallsOfRunningJobs) {
  auto id = coordinator_.SubmitJob(Spec(1, 1, 1));
  AddWorker();
  const std::string s1 = AddShard("127.0.0.1:1");
  coordinator_.Tick();
  v1::ShardHeartbeatRequest r;
  r.set_shard_id(s1);
  v1::ShardJobStats* stats = r.add_jobs();
  stats->set_job_id(*id);
  v1::Stall* stall = stats->add_stalls();
  stall->set_shard_id(s1);
  stall->set_step(7);
  stall->set_waited_seconds(12.5);
  stall->add_waiting_for("w-9");
  ASSERT_TRUE(coordinator_.ShardHeartbeat(r).ok());
  v1::JobStatus status = *coordinator_.GetJob(*id);
  ASSERT_EQ(status.stalls_size(), 1);
  EXPECT_EQ(status.stalls(0).step(), 7);
  EXPECT_EQ(status.stalls(0).waiting_for(0), "w-9");
  stats->clear_stalls();  // the next report has none: the stall is over
  ASSERT_TRUE(coordinator_.ShardHeartbeat(r).ok());
  EXPECT_EQ(coordinator_.GetJob(*id)->stalls_size(), 0);
}

TEST_F(CoordinatorTest, CancelAndUnknownJobs) {
  auto id = coordinator_.SubmitJob(Spec(1, 1, 1));
  EXPECT_EQ(coordinator_.CancelJob(*id)->state(), v1::CANCELLED);
  EXPECT_EQ(coordinator_.CancelJob(*id).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(coordinator_.GetJob("job-99").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(coordinator_.CancelJob("job-99").status().code(),
            absl::StatusCode::kNotFound);
  // A cancelled job never starts.
  AddWorker();
  AddShard("127.0.0.1:1");
  coordinator_.Tick();
  EXPECT_TRUE(shards_.inits.empty());
}

TEST_F(CoordinatorTest, ShardInitFailureRetriesThenRejectsBadJobs) {
  auto id = coordinator_.SubmitJob(Spec(1, 1, 1));
  const std::string w = AddWorker();
  AddShard("127.0.0.1:1");
  shards_.next_status = absl::UnavailableError("connection refused");
  coordinator_.Tick();
  v1::JobStatus status = *coordinator_.GetJob(*id);
  EXPECT_EQ(status.state(), v1::PENDING);
  EXPECT_NE(status.message().find("will retry"), std::string::npos);
  EXPECT_EQ(Beat(w).job_id(), "");  // worker released
  shards_.next_status = absl::OkStatus();
  coordinator_.Tick();
  EXPECT_EQ(coordinator_.GetJob(*id)->state(), v1::RUNNING);
  EXPECT_EQ(shards_.inits.size(), 2u);
}

TEST_F(CoordinatorTest, RegistrationValidation) {
  v1::RegisterShardRequest r;
  r.set_address("nohostport");
  EXPECT_EQ(coordinator_.RegisterShard(r).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(coordinator_.Leave("nobody").code(), absl::StatusCode::kNotFound);
  const std::string w = AddWorker();
  EXPECT_TRUE(coordinator_.Leave(w).ok());
  EXPECT_EQ(coordinator_.ListMembers().size(), 0u);
}

}  // namespace
}  // namespace fulcrum

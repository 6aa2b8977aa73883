#include "server/coordinator/coordinator_core.h"

#include <cstdlib>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/concurrency/executor.h"
#include "common/config/job_spec.h"
#include "common/testing/fault_injection_env.h"
#include "gtest/gtest.h"
#include "server/coordinator/testing/fake_shards.h"
#include "server/coordinator/testing/test_specs.h"

namespace fulcrum {
namespace {

using testing::FakeShards;

v1::LedgerEntry Entry(int64_t chunk, int64_t end, int64_t samples) {
  v1::LedgerEntry e;
  e.set_chunk(chunk);
  e.set_end(end);
  e.set_samples(samples);
  return e;
}

using testing::TinySpec;

int Count(const v1::JobStatus& s, const std::string& kind) {
  int n = 0;
  for (const v1::MembershipEvent& e : s.events()) n += e.kind() == kind;
  return n;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  CoordinatorTest() : coordinator_(MakeOptions(), &shards_) {}

  Coordinator::Options MakeOptions() {
    Coordinator::Options o;
    o.env = &env_;
    o.executor = &inline_;  // every shard call done when Tick() returns
    return o;
  }

  static v1::JobSpec Spec(int min, int max, int shards) {
    return TinySpec(min, max, shards);
  }

  std::string AddWorker() {
    return coordinator_.RegisterWorker(testing::WorkerOn())->worker_id();
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
  // A worker offered a place in running job `job` loads its data and says
  // so (or that it could not).
  void Prepared(const std::string& worker, const std::string& job,
                const std::string& error = "") {
    v1::WorkerHeartbeatRequest r;
    r.set_worker_id(worker);
    r.set_prepared_job(job);
    r.set_prepare_error(error);
    ASSERT_TRUE(coordinator_.WorkerHeartbeat(r).ok());
  }

  // A shard's heartbeat reporting one non-finite update of `partition` at
  // `step` by `worker` (generation 1).
  static v1::ShardHeartbeatRequest NonFiniteBeat(const std::string& shard,
                                                 const std::string& job,
                                                 const std::string& worker,
                                                 int64_t step,
                                                 int32_t partition) {
    v1::ShardHeartbeatRequest beat;
    beat.set_shard_id(shard);
    v1::ShardJobStats* stats = beat.add_jobs();
    stats->set_job_id(job);
    stats->set_generation(1);
    v1::NonFiniteUpdates* n = stats->mutable_nonfinite();
    n->set_count(1);
    n->set_step(step);
    n->set_partition(partition);
    n->set_worker_id(worker);
    n->set_largest(1e37f);
    return beat;
  }

  testing::FaultInjectionEnv env_;  // the clock moves when the test says
  InlineExecutor inline_;
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

// Spec paths outside the roots are refused at submit, naming the field,
// and no job is created.
TEST(CoordinatorRootsTest, SpecPathsOutsideTheRootsAreRefusedAtSubmit) {
  testing::FaultInjectionEnv env;
  InlineExecutor inline_executor;
  FakeShards shards;
  Coordinator::Options o;
  o.env = &env;
  o.executor = &inline_executor;
  o.data_root = "/data";
  o.checkpoint_root = "/ck";
  Coordinator c(o, &shards);
  struct Case {
    std::string dataset, checkpoint, message;
  } cases[] = {
      {"/etc", "", "dataset.dir '/etc' is outside /data"},
      {"../etc", "", "dataset.dir must not contain '..'"},
      {"mnist", "../../etc", "checkpoint.dir must not contain '..'"},
      {"/data/mnist", "/var/ck", "checkpoint.dir '/var/ck' is outside /ck"},
  };
  for (const Case& k : cases) {
    v1::JobSpec spec = testing::TinySpec(1, 1, 1);
    spec.mutable_dataset()->set_dir(k.dataset);
    if (!k.checkpoint.empty()) {
      spec.mutable_checkpoint()->set_every_steps(10);
      spec.mutable_checkpoint()->set_dir(k.checkpoint);
    }
    absl::StatusOr<std::string> id = c.SubmitJob(spec);
    EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(id.status().message().find(k.message), std::string::npos)
        << id.status();
  }
  EXPECT_TRUE(c.ListJobs().empty());
  v1::JobSpec fine = testing::TinySpec(1, 1, 1);
  fine.mutable_dataset()->set_dir("mnist");  // under /data
  fine.mutable_checkpoint()->set_every_steps(10);
  fine.mutable_checkpoint()->set_dir("/ck/j");
  EXPECT_TRUE(c.SubmitJob(fine).ok());
}

TEST_F(CoordinatorTest, StartsWhenEnoughMembersThenSucceeds) {
  auto id = coordinator_.SubmitJob(Spec(2, 3, 2));
  ASSERT_TRUE(id.ok());
  const std::string w1 = AddWorker();
  AddShard("127.0.0.1:1");
  coordinator_.Tick();
  EXPECT_EQ(coordinator_.GetJob(*id)->state(), v1::PENDING);
  // A pending job says what it waits for.
  EXPECT_EQ(coordinator_.GetJob(*id)->message(),
            "waiting for 2 workers (1 idle now) and 2 shards (1 registered)");
  const std::string w2 = AddWorker();
  AddShard("127.0.0.1:2");
  coordinator_.Tick();  // min reached: waits start_grace for a third worker
  EXPECT_TRUE(shards_.inits.empty());
  env_.Advance(absl::Seconds(2));
  coordinator_.Tick();
  ASSERT_EQ(shards_.inits.size(), 2u);
  EXPECT_EQ(shards_.inits[1].second.shard_index(), 1);
  EXPECT_EQ(shards_.inits[0].second.workers_size(), 2);
  v1::JobStatus status = *coordinator_.GetJob(*id);
  EXPECT_EQ(status.state(), v1::RUNNING);
  EXPECT_EQ(status.message(), "");
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

TEST_F(CoordinatorTest, LostWorkersLeaveTheJobWhichContinuesAndRegrows) {
  auto id = coordinator_.SubmitJob(Spec(1, 2, 1));
  const std::string w1 = AddWorker();
  const std::string w2 = AddWorker();
  const std::string s1 = AddShard("127.0.0.1:1");
  coordinator_.Tick();
  ASSERT_EQ(coordinator_.GetJob(*id)->state(), v1::RUNNING);
  ASSERT_EQ(coordinator_.GetJob(*id)->workers_size(), 2);
  env_.Advance(absl::Seconds(3));
  Beat(w1, *id);
  v1::ShardHeartbeatRequest sb;
  sb.set_shard_id(s1);
  ASSERT_TRUE(coordinator_.ShardHeartbeat(sb).ok());
  env_.Advance(absl::Seconds(3));  // w2 silent for 6 s > 5 s lease
  Beat(w1, *id);                   // w1 alive (it beats every second)
  shards_.versions["127.0.0.1:1"] = 41;
  coordinator_.Tick();
  v1::JobStatus status = *coordinator_.GetJob(*id);
  EXPECT_EQ(status.state(), v1::RUNNING);
  EXPECT_EQ(status.generation(), 2);
  EXPECT_EQ(std::vector<std::string>(status.workers().begin(),
                                     status.workers().end()),
            std::vector<std::string>{w1});
  // Two phases: adopt generation 2, then align at the reported version.
  ASSERT_EQ(shards_.reconfigures.size(), 2u);
  EXPECT_EQ(shards_.reconfigures[0].second.generation(), 2);
  EXPECT_EQ(shards_.reconfigures[0].second.align_version(), -1);
  EXPECT_FALSE(shards_.reconfigures[0].second.restore());
  EXPECT_EQ(shards_.reconfigures[1].second.align_version(), 41);
  ASSERT_GE(status.events_size(), 1);
  EXPECT_EQ(status.events(status.events_size() - 1).kind(), "lost");
  EXPECT_EQ(status.events(status.events_size() - 1).member_id(), w2);
  EXPECT_TRUE(shards_.ends.empty()) << "the job did not end";
  v1::WorkerAssignment a = Beat(w1, *id);
  EXPECT_EQ(a.generation(), 2);
  EXPECT_EQ(a.world_size(), 1);
  // Heard from again (it was paused), w2 is taken back under its id, idle:
  // it reports training nothing. Once it left it is gone for good.
  v1::WorkerHeartbeatRequest hb;
  hb.set_worker_id(w2);
  ASSERT_TRUE(coordinator_.WorkerHeartbeat(hb).ok());
  ASSERT_TRUE(coordinator_.Leave(w2).ok());
  EXPECT_EQ(coordinator_.WorkerHeartbeat(hb).status().code(),
            absl::StatusCode::kNotFound);
  // The last member leaves: the job waits for workers instead of failing.
  ASSERT_TRUE(coordinator_.Leave(w1).ok());
  coordinator_.Tick();
  status = *coordinator_.GetJob(*id);
  EXPECT_EQ(status.state(), v1::RUNNING);
  EXPECT_NE(status.message().find("waiting for workers"), std::string::npos);
  // A new worker is offered a place, loads the data, and joins at the next
  // generation; it gets its assignment only once the shards serve that
  // generation.
  const std::string w3 = AddWorker();
  coordinator_.Tick();
  a = Beat(w3);
  EXPECT_TRUE(a.prepare());
  EXPECT_EQ(a.job_id(), *id);
  EXPECT_EQ(coordinator_.GetJob(*id)->generation(), 2) << "not before";
  Prepared(w3, *id);
  coordinator_.Tick();
  status = *coordinator_.GetJob(*id);
  EXPECT_EQ(status.generation(), 3);
  EXPECT_EQ(status.workers(0), w3);
  EXPECT_EQ(status.events(status.events_size() - 1).kind(), "joined");
  a = Beat(w3);
  EXPECT_EQ(a.job_id(), *id);
  EXPECT_FALSE(a.prepare());
  EXPECT_EQ(a.rank(), 0);
  EXPECT_EQ(a.generation(), 3);
}

// Every member's lease ran out at once (all paused, or the coordinator cut
// off): heard from again, each takes its place back under its own id - the
// workers rejoin, the shards keep their state - and the job trains on at a
// new generation without a restore. (The job was wedged: the shards
// registered anew, ended the job locally and refused every round.)
TEST_F(CoordinatorTest, MembersWhoseLeasesLapsedTakeTheirPlacesBack) {
  auto id = coordinator_.SubmitJob(Spec(2, 2, 2));
  const std::string w1 = AddWorker(), w2 = AddWorker();
  const std::string s1 = AddShard("127.0.0.1:1"), s2 = AddShard("127.0.0.1:2");
  coordinator_.Tick();
  ASSERT_EQ(coordinator_.GetJob(*id)->state(), v1::RUNNING);
  env_.Advance(absl::Seconds(8));
  coordinator_.Tick();
  v1::JobStatus status = *coordinator_.GetJob(*id);
  ASSERT_EQ(status.state(), v1::RUNNING);
  EXPECT_EQ(Count(status, "lost"), 4) << status.DebugString();
  EXPECT_TRUE(shards_.reconfigures.empty()) << "no round without members";
  for (const std::string& s : {s1, s2}) {
    v1::ShardHeartbeatRequest beat;
    beat.set_shard_id(s);
    beat.set_address(s == s1 ? "127.0.0.1:1" : "127.0.0.1:2");
    auto r = coordinator_.ShardHeartbeat(beat);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->active_jobs_size(), 1) << "the shard keeps the job";
  }
  Beat(w1, *id);
  Beat(w2, *id);
  coordinator_.Tick();
  status = *coordinator_.GetJob(*id);
  EXPECT_EQ(status.state(), v1::RUNNING);
  EXPECT_EQ(status.generation(), 2);
  EXPECT_EQ(std::vector<std::string>(status.workers().begin(),
                                     status.workers().end()),
            (std::vector<std::string>{w1, w2}));
  EXPECT_EQ(std::vector<std::string>(status.shards().begin(),
                                     status.shards().end()),
            (std::vector<std::string>{s1, s2}));
  EXPECT_EQ(Count(status, "rejoined"), 4);
  ASSERT_FALSE(shards_.reconfigures.empty());
  for (const auto& [address, r] : shards_.reconfigures)
    EXPECT_FALSE(r.restore()) << "the shards' state is intact";
  EXPECT_TRUE(shards_.inits.size() == 2) << "no shard initialised again";
  EXPECT_EQ(Beat(w1, *id).generation(), 2);
}

// Workers cut off together expire a tick apart: no generation runs with
// the one whose lease lasted longer (nor trains it alone), and both come
// back in one generation.
TEST_F(CoordinatorTest, MembersSilentTogetherLapseIntoOneGeneration) {
  auto id = coordinator_.SubmitJob(Spec(2, 2, 1));
  const std::string w1 = AddWorker(), w2 = AddWorker();
  const std::string s1 = AddShard("127.0.0.1:1");
  coordinator_.Tick();
  ASSERT_EQ(coordinator_.GetJob(*id)->state(), v1::RUNNING);
  auto shard_beat = [&] {
    v1::ShardHeartbeatRequest beat;
    beat.set_shard_id(s1);
    beat.set_address("127.0.0.1:1");
    ASSERT_TRUE(coordinator_.ShardHeartbeat(beat).ok());
  };
  env_.Advance(absl::Milliseconds(600));
  Beat(w2, *id);  // the last word of either
  env_.Advance(absl::Milliseconds(2400));
  shard_beat();
  env_.Advance(absl::Milliseconds(2300));  // w1 silent 5.3 s, w2 4.7 s
  shard_beat();
  coordinator_.Tick();
  v1::JobStatus status = *coordinator_.GetJob(*id);
  EXPECT_EQ(Count(status, "lost"), 1);
  EXPECT_EQ(status.generation(), 1) << "no generation of w2 alone";
  EXPECT_TRUE(shards_.reconfigures.empty());
  env_.Advance(absl::Milliseconds(400));  // w2 silent 5.1 s: lapsed too
  shard_beat();
  coordinator_.Tick();
  status = *coordinator_.GetJob(*id);
  EXPECT_EQ(Count(status, "lost"), 2);
  EXPECT_TRUE(shards_.reconfigures.empty()) << "no round without members";
  env_.Advance(absl::Seconds(10));  // the link heals
  shard_beat();
  Beat(w2, *id);
  Beat(w1, *id);
  coordinator_.Tick();
  status = *coordinator_.GetJob(*id);
  EXPECT_EQ(status.generation(), 2);
  EXPECT_EQ(status.workers_size(), 2);
  EXPECT_EQ(Beat(w1, *id).generation(), 2);
}

// A process that registers at a lapsed shard's address is that shard
// restarted: the old one's heartbeats are refused from then on.
TEST_F(CoordinatorTest, ALapsedShardRestartedAtItsAddressIsNotTakenBack) {
  const std::string s1 = AddShard("127.0.0.1:1");
  env_.Advance(absl::Seconds(6));
  coordinator_.Tick();
  const std::string again = AddShard("127.0.0.1:1");
  EXPECT_NE(again, s1);
  v1::ShardHeartbeatRequest beat;
  beat.set_shard_id(s1);
  beat.set_address("127.0.0.1:1");
  EXPECT_EQ(coordinator_.ShardHeartbeat(beat).status().code(),
            absl::StatusCode::kNotFound);
}

// Rank 0's "done" ends the job: every member of the last generation has
// finished, also the ones that learn it from a heartbeat and never report
// (they had no "finished" event); a late report adds no second one.
TEST_F(CoordinatorTest, EveryMemberOfTheLastGenerationFinishesWithTheJob) {
  auto id = coordinator_.SubmitJob(Spec(2, 2, 1));
  const std::string w1 = AddWorker(), w2 = AddWorker();
  AddShard("127.0.0.1:1");
  coordinator_.Tick();
  ASSERT_EQ(coordinator_.GetJob(*id)->state(), v1::RUNNING);
  v1::ReportProgressRequest done;
  done.set_worker_id(w1);
  done.set_job_id(*id);
  done.set_done(true);
  ASSERT_TRUE(coordinator_.ReportProgress(done).ok());
  v1::JobStatus status = *coordinator_.GetJob(*id);
  ASSERT_EQ(status.state(), v1::SUCCEEDED);
  EXPECT_EQ(Count(status, "finished"), 2) << status.DebugString();
  done.set_worker_id(w2);
  ASSERT_TRUE(coordinator_.ReportProgress(done).ok());
  EXPECT_EQ(Count(*coordinator_.GetJob(*id), "finished"), 2);
}

// The coordinator itself did not run (paused): it heard nobody, so the
// time counts against nobody's lease.
TEST_F(CoordinatorTest, ACoordinatorThatDidNotRunExpiresNobody) {
  auto id = coordinator_.SubmitJob(Spec(1, 1, 1));
  AddWorker();
  AddShard("127.0.0.1:1");
  coordinator_.Tick();
  ASSERT_EQ(coordinator_.GetJob(*id)->state(), v1::RUNNING);
  env_.Advance(absl::Seconds(30));
  coordinator_.Resumed(absl::Seconds(30));
  coordinator_.Tick();
  const v1::JobStatus status = *coordinator_.GetJob(*id);
  EXPECT_EQ(Count(status, "lost"), 0) << status.DebugString();
  EXPECT_EQ(status.generation(), 1);
  EXPECT_EQ(coordinator_.ListMembers().size(), 2u);
}

TEST_F(CoordinatorTest, WorkersJoinARunningJobUpToMax) {
  auto id = coordinator_.SubmitJob(Spec(1, 3, 2));
  const std::string w1 = AddWorker();
  AddShard("127.0.0.1:1");
  AddShard("127.0.0.1:2");
  coordinator_.Tick();
  env_.Advance(absl::Seconds(2));  // past the start grace
  coordinator_.Tick();
  ASSERT_EQ(coordinator_.GetJob(*id)->workers_size(), 1);
  const std::string w2 = AddWorker(), w3 = AddWorker(), w4 = AddWorker();
  coordinator_.Tick();  // w2 and w3 are offered a place (max 3), not w4
  EXPECT_TRUE(Beat(w2).prepare());
  EXPECT_TRUE(Beat(w3).prepare());
  EXPECT_TRUE(Beat(w4).job_id().empty());
  EXPECT_EQ(coordinator_.GetJob(*id)->generation(), 1);
  EXPECT_EQ(coordinator_.GetJob(*id)->preparing_size(), 2);
  EXPECT_TRUE(shards_.reconfigures.empty()) << "nobody waits for the loading";
  Prepared(w2, *id);
  Prepared(w3, *id);
  coordinator_.Tick();
  v1::JobStatus status = *coordinator_.GetJob(*id);
  EXPECT_EQ(status.generation(), 2);
  EXPECT_EQ(status.workers_size(), 3);  // max 3: w4 stays idle
  EXPECT_EQ(status.preparing_size(), 0);
  EXPECT_EQ(shards_.reconfigures.size(), 4u);  // 2 shards x 2 phases
  EXPECT_TRUE(Beat(w4).job_id().empty());
  EXPECT_EQ(Beat(w3).world_size(), 3);
}

TEST_F(CoordinatorTest, WorkersThatCannotLoadAreNotAskedAgainSlowOnesJoin) {
  auto id = coordinator_.SubmitJob(Spec(1, 3, 1));
  const std::string w1 = AddWorker();
  const std::string s1 = AddShard("127.0.0.1:1");
  coordinator_.Tick();
  env_.Advance(absl::Seconds(2));
  coordinator_.Tick();
  ASSERT_EQ(coordinator_.GetJob(*id)->workers_size(), 1);
  const std::string w2 = AddWorker(), w3 = AddWorker();
  coordinator_.Tick();
  ASSERT_TRUE(Beat(w2).prepare());
  ASSERT_TRUE(Beat(w3).prepare());
  // w2 cannot read the data: a "failed" event, and no second offer.
  Prepared(w2, *id, "dataset.dir /d: no such directory");
  v1::JobStatus status = *coordinator_.GetJob(*id);
  EXPECT_EQ(status.events(status.events_size() - 1).kind(), "failed");
  EXPECT_EQ(status.events(status.events_size() - 1).member_id(), w2);
  // w3 takes longer than the prepare timeout (60 s): the offer lapses and,
  // the place still free, is made again; the job does not wait meanwhile.
  for (int i = 0; i < 13; ++i) {
    env_.Advance(absl::Seconds(5));
    Beat(w1, *id);
    v1::ShardHeartbeatRequest sb;
    sb.set_shard_id(s1);
    ASSERT_TRUE(coordinator_.ShardHeartbeat(sb).ok());
    coordinator_.Tick();
    EXPECT_TRUE(Beat(w2).job_id().empty()) << "declined jobs are not offered";
    EXPECT_TRUE(Beat(w3).prepare()) << i;
  }
  EXPECT_EQ(coordinator_.GetJob(*id)->generation(), 1) << "nobody joined";
  Prepared(w3, *id);  // finally loaded (and offered again meanwhile)
  coordinator_.Tick();
  status = *coordinator_.GetJob(*id);
  EXPECT_EQ(status.generation(), 2);
  EXPECT_EQ(status.workers_size(), 2);
}

// More shards than partitions: a shard holding nothing of the job writes no
// checkpoint, and the others' files are complete checkpoints without it.
TEST_F(CoordinatorTest, ACheckpointIsCompleteWithoutAShardThatHoldsNothing) {
  auto id = coordinator_.SubmitJob(Spec(1, 1, 2));
  AddWorker();
  const std::string s1 = AddShard("127.0.0.1:1");
  const std::string s2 = AddShard("127.0.0.1:2");
  coordinator_.Tick();
  ASSERT_EQ(coordinator_.GetJob(*id)->state(), v1::RUNNING);
  auto beat = [&](const std::string& shard, std::vector<int64_t> steps,
                  bool nothing) {
    v1::ShardHeartbeatRequest r;
    r.set_shard_id(shard);
    v1::ShardJobStats* stats = r.add_jobs();
    stats->set_job_id(*id);
    for (int64_t step : steps) stats->add_checkpoint_steps(step);
    stats->set_checkpoints_nothing(nothing);
    ASSERT_TRUE(coordinator_.ShardHeartbeat(r).ok());
  };
  beat(s1, {100, 200}, false);
  beat(s2, {}, false);
  EXPECT_EQ(coordinator_.GetJob(*id)->checkpoint_step(), 0);
  beat(s2, {}, true);
  EXPECT_EQ(coordinator_.GetJob(*id)->checkpoint_step(), 200);
}

TEST_F(CoordinatorTest, LostShardIsReplacedFromTheNewestGoodCheckpoint) {
  auto id = coordinator_.SubmitJob(Spec(1, 1, 2));
  const std::string w = AddWorker();
  const std::string s1 = AddShard("127.0.0.1:1");
  const std::string s2 = AddShard("127.0.0.1:2");
  coordinator_.Tick();
  ASSERT_EQ(coordinator_.GetJob(*id)->state(), v1::RUNNING);
  auto beat = [&](const std::string& shard, std::vector<int64_t> steps) {
    v1::ShardHeartbeatRequest r;
    r.set_shard_id(shard);
    v1::ShardJobStats* stats = r.add_jobs();
    stats->set_job_id(*id);
    for (int64_t step : steps) stats->add_checkpoint_steps(step);
    ASSERT_TRUE(coordinator_.ShardHeartbeat(r).ok());
  };
  beat(s1, {100, 200, 300});
  beat(s2, {100, 200});
  EXPECT_EQ(coordinator_.GetJob(*id)->checkpoint_step(), 200);
  // By the time of the restore, step 300 is on both shards' disks.
  shards_.disk["127.0.0.1:1"] = {100, 200, 300};
  shards_.disk["127.0.0.1:2"] = {100, 200, 300};
  // Another process claiming s2's address while s2 is alive is refused.
  v1::RegisterShardRequest claim;
  claim.set_address("127.0.0.1:2");
  auto refused = coordinator_.RegisterShard(claim);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("is served by live shard " + s2),
            std::string::npos)
      << refused.status();
  // s2's process restarts at the same address: once s2's lease ran out
  // (s1 and the worker still beat) it registers, and s2 is lost at once.
  env_.Advance(absl::Seconds(6));
  beat(s1, {100, 200, 300});
  Beat(w, *id);
  const std::string s3 = AddShard("127.0.0.1:2");
  shards_.bad_steps = {300};  // step 300 turns out corrupt
  coordinator_.Tick();
  v1::JobStatus status = *coordinator_.GetJob(*id);
  EXPECT_EQ(status.state(), v1::RUNNING);
  EXPECT_EQ(status.generation(), 1) << "the first attempt failed";
  ASSERT_EQ(shards_.inits.size(), 3u);
  EXPECT_EQ(shards_.inits[2].first, "127.0.0.1:2");
  EXPECT_EQ(shards_.inits[2].second.shard_index(), 1);
  EXPECT_EQ(shards_.inits[2].second.generation(), 2);
  // Probe (what is on disk), then restore the newest common step.
  ASSERT_GE(shards_.reconfigures.size(), 3u);
  EXPECT_FALSE(shards_.reconfigures[0].second.restore());
  EXPECT_TRUE(shards_.reconfigures[2].second.restore());
  EXPECT_EQ(shards_.reconfigures[2].second.restore_step(), 300);
  coordinator_.Tick();  // retries with the previous complete checkpoint
  status = *coordinator_.GetJob(*id);
  EXPECT_EQ(status.generation(), 2);
  EXPECT_EQ(status.shards(1), s3);
  const v1::ReconfigureRequest& last = shards_.reconfigures.back().second;
  EXPECT_EQ(last.align_version(), 0);
  bool restored = false;
  for (const auto& [address, r] : shards_.reconfigures) {
    if (r.align_version() < 0 && r.restore() && r.restore_step() == 200)
      restored = true;
  }
  EXPECT_TRUE(restored);
  bool saw_restored = false, saw_rejected = false;
  for (const v1::MembershipEvent& e : status.events()) {
    if (e.kind() == "restored") {
      saw_restored = true;
      EXPECT_EQ(e.step(), 200);
    }
    if (e.kind() == "checkpoint_rejected") {
      saw_rejected = true;
      EXPECT_EQ(e.step(), 300);
    }
  }
  EXPECT_TRUE(saw_restored);
  EXPECT_TRUE(saw_rejected);
  EXPECT_EQ(Beat(w, *id).generation(), 2);
  EXPECT_EQ(Beat(w, *id).shard_addresses(1), "127.0.0.1:2");
}

TEST_F(CoordinatorTest, ChunksAreLeasedOncePerEpochAndReturnWithGenerations) {
  v1::JobSpec spec = Spec(2, 2, 1);
  spec.set_epochs(2);
  spec.mutable_dataset()->set_chunk_size(30);
  auto id = coordinator_.SubmitJob(spec);
  const std::string w1 = AddWorker(), w2 = AddWorker();
  AddShard("127.0.0.1:1");
  coordinator_.Tick();
  ASSERT_EQ(coordinator_.GetJob(*id)->state(), v1::RUNNING);
  auto lease = [&](const std::string& w, std::vector<int64_t> done,
                   int64_t generation = 1, int64_t size = 100) {
    v1::LeaseChunkRequest r;
    r.set_worker_id(w);
    r.set_job_id(*id);
    r.set_generation(generation);
    r.set_dataset_size(size);
    for (int64_t d : done) r.add_done(d);
    return coordinator_.LeaseChunk(r);
  };
  // 100 samples in chunks of 30: [0,30) [30,60) [60,90) [90,100).
  auto a = lease(w1, {});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->chunk().chunk(), 0);
  EXPECT_EQ(a->chunk().begin(), 0);
  EXPECT_EQ(a->chunk().end(), 30);
  EXPECT_EQ(lease(w1, {})->chunk().chunk(), 0) << "a retry gets the same lease";
  auto b = lease(w2, {});
  EXPECT_EQ(b->chunk().chunk(), 1);
  EXPECT_EQ(lease(w2, {}, 1, 99).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(lease(w2, {}, 7).status().code(), absl::StatusCode::kAborted);
  // A size no table may be built for is refused before anything is.
  auto huge = lease(w2, {}, 1, int64_t{1} << 50);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(huge.status().message().find("dataset_size 1125899906842624 "
                                         "makes more than 262144 chunks"),
            std::string::npos)
      << huge.status();
  EXPECT_EQ(lease(w1, {0})->chunk().chunk(), 2);
  // w2 dies; the shards' ledger says 10 samples of chunk 1 were applied.
  shards_.ledger = {Entry(0, 30, 30), Entry(1, 40, 10)};
  ASSERT_TRUE(coordinator_.Leave(w2).ok());
  coordinator_.Tick();
  ASSERT_EQ(coordinator_.GetJob(*id)->generation(), 2);
  EXPECT_EQ(lease(w1, {2}).status().code(), absl::StatusCode::kAborted)
      << "leases end with their generation";
  // Generation 2: chunk 1 resumes where the ledger ends; chunk 2 (leased by
  // w1 in generation 1, not in the ledger) is leased again from its start.
  auto c = lease(w1, {}, 2);
  EXPECT_EQ(c->chunk().chunk(), 1);
  EXPECT_EQ(c->chunk().begin(), 40);
  EXPECT_EQ(c->chunk().end(), 60);
  std::vector<int64_t> order;
  std::vector<int64_t> done = {1};
  for (;;) {
    auto next = lease(w1, done, 2);
    ASSERT_TRUE(next.ok());
    if (!next->has_chunk()) {
      EXPECT_TRUE(next->exhausted());
      break;
    }
    order.push_back(next->chunk().chunk());
    done = {next->chunk().chunk()};
  }
  EXPECT_EQ(order, (std::vector<int64_t>{2, 3, 4, 5, 6, 7}));
  // Epoch counts come from the ledger the shard holding partition 0 reports.
  v1::ShardHeartbeatRequest hb;
  hb.set_shard_id(coordinator_.GetJob(*id)->shards(0));
  v1::ShardJobStats* stats = hb.add_jobs();
  stats->set_job_id(*id);
  stats->set_generation(2);
  stats->set_has_ledger(true);
  for (auto [chunk, end, n] : std::vector<std::tuple<int, int, int>>{
           {0, 30, 30}, {1, 60, 30}, {2, 90, 30}, {3, 100, 10}, {4, 30, 30}})
    *stats->add_ledger() = Entry(chunk, end, n);
  ASSERT_TRUE(coordinator_.ShardHeartbeat(hb).ok());
  v1::JobStatus status = *coordinator_.GetJob(*id);
  ASSERT_EQ(status.epochs_size(), 2);
  EXPECT_EQ(status.epochs(0).trained(), 100);
  EXPECT_EQ(status.epochs(0).total(), 100);
  EXPECT_EQ(status.epochs(1).trained(), 30);
}

// dataset.size fixes the training set: a member whose lease says another
// size is the one refused, however early it asks (a first liar was once
// believed, and the honest workers refused).
TEST_F(CoordinatorTest, TheSpecsDatasetSizeRefusesTheMemberThatDisagrees) {
  v1::JobSpec spec = Spec(2, 2, 1);
  spec.mutable_dataset()->set_chunk_size(30);
  spec.mutable_dataset()->set_size(100);
  auto id = coordinator_.SubmitJob(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  const std::string liar = AddWorker(), honest = AddWorker();
  AddShard("127.0.0.1:1");
  coordinator_.Tick();
  ASSERT_EQ(coordinator_.GetJob(*id)->state(), v1::RUNNING);
  auto lease = [&](const std::string& w, int64_t size) {
    v1::LeaseChunkRequest r;
    r.set_worker_id(w);
    r.set_job_id(*id);
    r.set_generation(1);
    r.set_dataset_size(size);
    return coordinator_.LeaseChunk(r);
  };
  auto lie = lease(liar, 1000);
  EXPECT_EQ(lie.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(lie.status().message().find("dataset.size 100"),
            std::string::npos)
      << lie.status();
  auto a = lease(honest, 100);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->chunk().begin(), 0);
  EXPECT_EQ(a->chunk().end(), 30);
  v1::JobStatus status = *coordinator_.GetJob(*id);
  ASSERT_EQ(status.epochs_size(), 1);
  EXPECT_EQ(status.epochs(0).total(), 100);
}

TEST_F(CoordinatorTest, MergesStalenessAndCheckpointsFromEveryShard) {
  auto id = coordinator_.SubmitJob(Spec(1, 1, 2));
  AddWorker();
  const std::string s1 = AddShard("127.0.0.1:1");
  const std::string s2 = AddShard("127.0.0.1:2");
  coordinator_.Tick();
  auto beat = [&](const std::string& shard, std::vector<int64_t> histogram,
                  std::vector<int64_t> checkpoints) {
    v1::ShardHeartbeatRequest r;
    r.set_shard_id(shard);
    v1::ShardJobStats* stats = r.add_jobs();
    stats->set_job_id(*id);
    for (int64_t step : checkpoints) stats->add_checkpoint_steps(step);
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
  beat(s1, {4, 2}, {100});  // 6 reads, sum 2
  EXPECT_EQ(coordinator_.GetJob(*id)->checkpoint_step(), 0)
      << "s2 has not written any";
  beat(s2, {1, 0, 0, 1}, {100, 200});  // 2 reads, sum 3
  EXPECT_EQ(coordinator_.GetJob(*id)->checkpoint_step(), 100)
      << "complete = on every shard";
  beat(s1, {6, 2}, {100, 200});  // a newer report replaces the older: 8 reads, sum 2
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

// A shard's report of a refused non-finite update: one event naming the
// worker (however often the report repeats); the job fails only when its
// spec says fail_job.
TEST_F(CoordinatorTest, ANonFiniteUpdateIsAnEventAndFailsTheJobIfAsked) {
  int port = 1;
  for (const std::string policy : {"drop_worker", "fail_job"}) {
    v1::JobSpec spec = Spec(1, 1, 1);
    spec.mutable_optimizer()->set_on_nonfinite(policy);
    auto id = coordinator_.SubmitJob(spec);
    ASSERT_TRUE(id.ok()) << id.status();
    const std::string w = AddWorker();
    AddShard(absl::StrCat("127.0.0.1:", port++));
    coordinator_.Tick();
    env_.Advance(absl::Seconds(2));
    coordinator_.Tick();
    v1::JobStatus status = *coordinator_.GetJob(*id);
    ASSERT_EQ(status.state(), v1::RUNNING) << policy;
    const v1::ShardHeartbeatRequest beat =
        NonFiniteBeat(status.shards(0), *id, w, 7, 2);
    ASSERT_TRUE(coordinator_.ShardHeartbeat(beat).ok());
    ASSERT_TRUE(coordinator_.ShardHeartbeat(beat).ok());  // the same again
    status = *coordinator_.GetJob(*id);
    int events = 0;
    for (const v1::MembershipEvent& e : status.events()) {
      if (e.kind() != "nonfinite") continue;
      ++events;
      EXPECT_EQ(e.member_id(), w);
      EXPECT_EQ(e.step(), 7);
    }
    EXPECT_EQ(events, 1) << policy;
    if (policy == "fail_job") {
      EXPECT_EQ(status.state(), v1::FAILED);
      EXPECT_NE(status.message().find("step 7: the update of partition 2 "
                                      "would have made values non-finite"),
                std::string::npos)
          << status.message();
      EXPECT_NE(status.message().find(w), std::string::npos);
    } else {
      EXPECT_EQ(status.state(), v1::RUNNING) << status.message();
    }
  }
}

// A job that fails while a round is in flight keeps its reason: the round's
// shards then answer "job has ended", and that failure is not the job's
// message (it overwrote the non-finite reason before; a flake in
// pytorch_workers_test's fail_job case).
TEST_F(CoordinatorTest, AJobThatEndsDuringARoundKeepsItsReason) {
  v1::JobSpec spec = Spec(1, 2, 1);
  spec.mutable_optimizer()->set_on_nonfinite("fail_job");
  auto id = coordinator_.SubmitJob(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  const std::string w1 = AddWorker();
  AddShard("127.0.0.1:1");
  coordinator_.Tick();
  env_.Advance(absl::Seconds(2));
  coordinator_.Tick();
  v1::JobStatus status = *coordinator_.GetJob(*id);
  ASSERT_EQ(status.state(), v1::RUNNING);
  const std::string w2 = AddWorker();
  coordinator_.Tick();
  ASSERT_TRUE(Beat(w2).prepare());
  Prepared(w2, *id);
  // The round to generation 2 starts; while it runs, the shard reports a
  // non-finite update and then refuses the round: the job has ended.
  int calls = 0;
  shards_.during_reconfigure = [&] {
    if (calls++ > 0) return;
    ASSERT_TRUE(coordinator_
                    .ShardHeartbeat(
                        NonFiniteBeat(status.shards(0), *id, w1, 9, 0))
                    .ok());
    shards_.failing["127.0.0.1:1"] = absl::FailedPreconditionError(
        absl::StrCat("job ", *id, " has ended"));
  };
  coordinator_.Tick();
  shards_.during_reconfigure = nullptr;
  ASSERT_EQ(calls, 1) << "no round ran";
  status = *coordinator_.GetJob(*id);
  EXPECT_EQ(status.state(), v1::FAILED);
  EXPECT_EQ(status.generation(), 1);
  EXPECT_NE(status.message().find("step 9: the update of partition 0 "
                                  "would have made values non-finite"),
            std::string::npos)
      << status.message();
}

// ListJobs answers pages of summaries: however many jobs, one answer stays
// small (two 5 MB specs made every later list fail before).
// Shards declare their memory: a model no registered shard could hold is
// refused at submit; one that fits only some shards waits for them, saying
// so.
TEST_F(CoordinatorTest, AJobTooLargeForTheShardsIsRefusedOrWaitsSayingWhy) {
  v1::RegisterShardRequest small;
  small.set_address("127.0.0.1:1");
  small.set_memory_bytes(100);
  ASSERT_TRUE(coordinator_.RegisterShard(small).ok());
  // 10 parameters with momentum: 5 floats each on its shard, 200 bytes.
  absl::StatusOr<std::string> refused = coordinator_.SubmitJob(Spec(1, 1, 1));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find(
                "a shard would hold 200 bytes of this job"),
            std::string::npos)
      << refused.status();
  EXPECT_TRUE(coordinator_.ListJobs().empty());
  v1::RegisterShardRequest big = small;
  big.set_address("127.0.0.1:2");
  big.set_memory_bytes(1000);
  ASSERT_TRUE(coordinator_.RegisterShard(big).ok());
  auto id = coordinator_.SubmitJob(Spec(1, 1, 2));  // 2 shards: 1 fits
  ASSERT_TRUE(id.ok()) << id.status();
  AddWorker();
  coordinator_.Tick();
  v1::JobStatus status = *coordinator_.GetJob(*id);
  EXPECT_EQ(status.state(), v1::PENDING);
  EXPECT_NE(status.message().find("2 shards with"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("(1 of 2 registered have them)"),
            std::string::npos)
      << status.message();
  EXPECT_TRUE(shards_.inits.empty());
}

// Embedding tables count at capacity: 50 rows of dim 4 with adagrad per
// shard, 4 x 8 + 45 bytes each, beside the model's 200.
TEST_F(CoordinatorTest, EmbeddingTablesCountTowardsAShardsMemory) {
  v1::RegisterShardRequest shard;
  shard.set_address("127.0.0.1:1");
  shard.set_memory_bytes(4000);
  ASSERT_TRUE(coordinator_.RegisterShard(shard).ok());
  v1::JobSpec spec = Spec(1, 1, 2);
  v1::EmbeddingTableSpec* table = spec.add_embeddings();
  table->set_name("user");
  table->set_dim(4);
  table->set_capacity(100);
  table->mutable_optimizer()->set_lr(0.1);
  ApplyDefaults(&spec);
  absl::StatusOr<std::string> refused = coordinator_.SubmitJob(spec);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find(absl::StrCat(
                "a shard would hold ", 200 + 50 * (4 * 8 + 45), " bytes")),
            std::string::npos)
      << refused.status();
  spec.mutable_embeddings(0)->set_capacity(60);  // 30 rows a shard fit
  EXPECT_TRUE(coordinator_.SubmitJob(spec).ok());
}

TEST_F(CoordinatorTest, ListJobsPagesSummaries) {
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(*coordinator_.SubmitJob(Spec(1, 1, 1)));
  AddWorker();
  AddShard("127.0.0.1:1");
  coordinator_.Tick();  // the first job starts: "joined" events
  ASSERT_GT(coordinator_.GetJob(ids[0])->events_size(), 0);
  v1::ListJobsRequest request;
  request.set_page_size(2);
  std::vector<std::string> listed;
  int pages = 0;
  do {
    absl::StatusOr<v1::ListJobsResponse> page = coordinator_.ListJobs(request);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_LE(page->jobs_size(), 2);
    for (const v1::JobStatus& j : page->jobs()) {
      listed.push_back(j.job_id());
      EXPECT_EQ(j.events_size(), 0) << "a summary";
      EXPECT_FALSE(j.spec().name().empty());
    }
    request.set_page_token(page->next_page_token());
    ASSERT_LT(++pages, 10);
  } while (!request.page_token().empty());
  EXPECT_EQ(listed, ids);
  EXPECT_EQ(pages, 3);
  request.set_page_size(1001);
  request.clear_page_token();
  auto big = coordinator_.ListJobs(request);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("page_size"), std::string::npos);
  request.set_page_size(0);
  request.set_page_token("job-404");
  auto bad = coordinator_.ListJobs(request);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("page_token"), std::string::npos);
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

TEST_F(CoordinatorTest, ACancelledJobKeepsItsProgress) {
  auto id = coordinator_.SubmitJob(Spec(1, 1, 1));
  const std::string w = AddWorker();
  AddShard("127.0.0.1:1");
  coordinator_.Tick();
  ASSERT_EQ(coordinator_.GetJob(*id)->state(), v1::RUNNING);
  v1::WorkerHeartbeatRequest beat;
  beat.set_worker_id(w);
  beat.set_job_id(*id);
  beat.mutable_progress()->set_step(42);
  beat.mutable_progress()->set_epoch(1);
  ASSERT_TRUE(coordinator_.WorkerHeartbeat(beat).ok());
  EXPECT_EQ(coordinator_.GetJob(*id)->progress().step(), 42);
  ASSERT_EQ(coordinator_.CancelJob(*id)->state(), v1::CANCELLED);
  EXPECT_EQ(coordinator_.GetJob(*id)->progress().step(), 42)
      << "was 0 once the job ended";
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
  // A worker says which host it runs on (an empty request made a member
  // without one).
  absl::StatusOr<v1::RegisterWorkerResponse> nameless =
      coordinator_.RegisterWorker({});
  EXPECT_EQ(nameless.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(nameless.status().message().find("hostname"), std::string::npos);
  EXPECT_EQ(coordinator_.ListMembers().size(), 0u);
  EXPECT_EQ(coordinator_.Leave("nobody").code(), absl::StatusCode::kNotFound);
  const std::string w = AddWorker();
  EXPECT_TRUE(coordinator_.Leave(w).ok());
  EXPECT_EQ(coordinator_.ListMembers().size(), 0u);
}

}  // namespace
}  // namespace fulcrum

namespace fulcrum {
namespace {

// A shard that does not answer InitJob holds only its own job: the calls
// run on the coordinator's pool, so Tick returns at once and the next one
// still expires leases. (Before, one tick could wait 30-60 s on one shard.)
TEST(CoordinatorPoolTest, ASlowShardHoldsOnlyItsOwnJob) {
  testing::FaultInjectionEnv env;
  FakeShards shards;
  absl::Notification release;
  shards.hold_inits = &release;
  Coordinator::Options o;
  o.env = &env;  // no executor given: the coordinator's own pool
  Coordinator c(o, &shards);
  auto id = c.SubmitJob(TinySpec(1, 1, 1));
  ASSERT_TRUE(id.ok());
  const std::string w1 = c.RegisterWorker(testing::WorkerOn())->worker_id();
  v1::RegisterShardRequest r;
  r.set_address("127.0.0.1:1");
  const std::string s1 = c.RegisterShard(r)->shard_id();
  // Released for certain after 4 s, so that a coordinator calling InitJob
  // from its tick fails this test instead of hanging it.
  std::thread releaser([&] {
    absl::SleepFor(absl::Seconds(4));
    release.Notify();
  });
  c.Tick();  // starts the job: its InitJob is now held on the pool
  env.Advance(absl::Seconds(6));
  v1::ShardHeartbeatRequest sb;
  sb.set_shard_id(s1);
  ASSERT_TRUE(c.ShardHeartbeat(sb).ok());
  c.Tick();  // w1 was silent past its lease
  bool held;
  {
    absl::MutexLock lock(&shards.mu);
    held = shards.inits.empty();
  }
  EXPECT_TRUE(held) << "the second tick ran while InitJob was held";
  std::vector<v1::Member> members = c.ListMembers();
  ASSERT_EQ(members.size(), 1u);
  EXPECT_EQ(members[0].id(), s1) << w1 << " expired meanwhile";
  EXPECT_EQ(c.GetJob(*id)->state(), v1::PENDING);
  releaser.join();
}

}  // namespace
}  // namespace fulcrum

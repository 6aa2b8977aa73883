// JobShard's membership changes, undo, checkpoints and restores.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/config/job_spec.h"
#include "gtest/gtest.h"
#include "common/testing/fault_injection_env.h"
#include "server/ps/checkpoint.h"
#include "server/ps/parameter_shard.h"
#include "server/ps/testing/test_jobs.h"

namespace fulcrum {
namespace {

using testing::Chunk;
using testing::Completed;
using testing::MultiPartitionJob;
using testing::PartChunk;
using testing::ReadAll;
using testing::ReadPartition;
using testing::TestDir;
using testing::TinyJob;

TEST(ShardCoreTest, MembershipAndGeneration) {
  auto job = JobShard::Create(TinyJob({"a", "b"}));
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(*(*job)->MemberIndex("b", 1), 1);
  EXPECT_EQ((*job)->MemberIndex("c", 1).status().code(),
            absl::StatusCode::kPermissionDenied);
  // A newer generation than the shard knows: not yet reconfigured, retry.
  EXPECT_EQ((*job)->MemberIndex("a", 2).status().code(),
            absl::StatusCode::kUnavailable);
  ASSERT_TRUE((*job)->Adopt(2, {"b", "c"}, std::nullopt).ok());
  // Between the phases nobody of the new generation may start yet.
  EXPECT_EQ((*job)->MemberIndex("c", 2).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ((*job)->MemberIndex("a", 1).status().code(),
            absl::StatusCode::kAborted);
  ASSERT_TRUE((*job)->Align(2, {"b", "c"}, 0).ok());
  EXPECT_EQ(*(*job)->MemberIndex("c", 2), 1);
  EXPECT_EQ((*job)->MemberIndex("a", 2).status().code(),
            absl::StatusCode::kPermissionDenied);
  // Generations only move forward.
  EXPECT_EQ((*job)->Adopt(1, {"a"}, std::nullopt).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*job)->Adopt(2, {}, std::nullopt).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShardCoreTest, MembershipChangeUndoesAStepOnlySomePartitionsApplied) {
  auto job = JobShard::Create(MultiPartitionJob({"a", "b"}));
  ASSERT_TRUE(job.ok()) << job.status();
  const std::vector<int32_t> ids = (*job)->partition_ids();
  ASSERT_GE(ids.size(), 2u);
  std::map<int32_t, std::vector<float>> w0;
  for (int32_t id : ids) w0[id] = ReadPartition(**job, id);
  auto grad = [&](int32_t id, float v) {
    return std::vector<float>((*job)->PartitionSize(id), v);
  };
  // Step 0 applies everywhere; a's range ends at 10, b's at 20 (chunk 7).
  for (int32_t id : ids) {
    auto ga = grad(id, 1.0f), gb = grad(id, 3.0f);
    ASSERT_TRUE(Completed((*job)->Push(0, PartChunk(id, 0, ga, 1, 1, 10))));
    ASSERT_TRUE(Completed((*job)->Push(1, PartChunk(id, 0, gb, 1, 1, 20))));
  }
  std::map<int32_t, std::vector<float>> w1;
  for (int32_t id : ids) w1[id] = ReadPartition(**job, id);
  // Step 1: a pushes everything; b only the first partition, then dies.
  for (int32_t id : ids) {
    auto ga = grad(id, 2.0f);
    ASSERT_TRUE(Completed((*job)->Push(0, PartChunk(id, 1, ga, 1, 1, 30))));
  }
  auto gb = grad(ids[0], 5.0f);
  ASSERT_TRUE(Completed((*job)->Push(1, PartChunk(ids[0], 1, gb, 1, 1, 40))));
  int64_t v;
  ReadPartition(**job, ids[0], &v);
  EXPECT_EQ(v, 2);
  ReadPartition(**job, ids[1], &v);
  EXPECT_EQ(v, 1);
  // A waiter of generation 1 is woken by the change.
  std::thread waiter([&] {
    EXPECT_EQ((*job)
                  ->WaitForVersion(ids[1], 2, 1,
                                   absl::Now() + absl::Seconds(10), nullptr)
                  .code(),
              absl::StatusCode::kAborted);
  });
  absl::StatusOr<Adopted> frozen =
      (*job)->Adopt(2, {"a"}, std::nullopt);
  waiter.join();
  ASSERT_TRUE(frozen.ok()) << frozen.status();
  EXPECT_EQ(frozen->min_version, 1);
  // Generation 1's pushes are refused from now on.
  auto late = grad(ids[1], 5.0f);
  EXPECT_EQ((*job)->Push(1, PartChunk(ids[1], 1, late, 1, 1, 40))
                .status()
                .code(),
            absl::StatusCode::kAborted);
  absl::StatusOr<Aligned> aligned =
      (*job)->Align(2, {"a"}, 1);
  ASSERT_TRUE(aligned.ok()) << aligned.status();
  // Every partition is back at version 1 with step 0's values, and the
  // ledger (partition 0) forgets step 1's ranges.
  for (int32_t id : ids) {
    EXPECT_EQ(ReadPartition(**job, id, &v), w1[id]) << id;
    EXPECT_EQ(v, 1);
  }
  ASSERT_TRUE(aligned->has_ledger);
  EXPECT_EQ(aligned->ledger, (Ledger{{7, LedgerEntry{20, 20}}}));
  // Generation 2 (only a) redoes step 1: momentum state was undone too, so
  // the result equals a fresh run of step 0 (a+b) then step 1 (a alone).
  auto replay = JobShard::Create(MultiPartitionJob({"a", "b"}));
  for (int32_t id : ids) {
    auto ga = grad(id, 1.0f), gb3 = grad(id, 3.0f), ga2 = grad(id, 2.0f);
    ASSERT_TRUE(Completed((*replay)->Push(0, PartChunk(id, 0, ga, 1, 1, 10))));
    ASSERT_TRUE(
        Completed((*replay)->Push(1, PartChunk(id, 0, gb3, 1, 1, 20))));
    ASSERT_TRUE(Completed((*replay)->Push(0, PartChunk(id, 1, ga2, 1, 1, 30))));
    ASSERT_TRUE(Completed((*replay)->Push(1, PartChunk(id, 1, ga2, 1, 1, 30))));
    ASSERT_TRUE(Completed((*job)->Push(0, PartChunk(id, 1, ga2, 1, 2, 30))));
  }
  for (int32_t id : ids) {
    EXPECT_EQ(ReadPartition(**job, id, &v), ReadPartition(**replay, id)) << id;
    EXPECT_EQ(v, 2);
  }
}

TEST(ShardCoreTest, AlignRefusesVersionsItCannotReach) {
  auto job = JobShard::Create(MultiPartitionJob({"a"}));
  ASSERT_TRUE(job.ok());
  for (int step = 0; step < 3; ++step) {
    for (int32_t id : (*job)->partition_ids()) {
      std::vector<float> g((*job)->PartitionSize(id), 1.0f);
      ASSERT_TRUE(Completed((*job)->Push(0, PartChunk(id, step, g, 1, 1, 1))));
    }
  }
  ASSERT_TRUE((*job)->Adopt(2, {"a"}, std::nullopt).ok());
  // Two steps back is more than one undo.
  EXPECT_EQ((*job)->Align(2, {"a"}, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  int64_t v;
  ReadPartition(**job, 0, &v);
  EXPECT_EQ(v, 3);  // nothing changed
  EXPECT_TRUE((*job)->Align(2, {"a"}, 3).ok());
}

TEST(ShardCoreTest, ReconfigureRestoresACheckpointOrRejectsACorruptOne) {
  const std::string dir = TestDir("reconfigure_ckpt");
  JobInit init = MultiPartitionJob({"a"});
  init.spec.mutable_checkpoint()->set_every_steps(2);
  init.spec.mutable_checkpoint()->set_dir(dir);
  auto job = JobShard::Create(init);
  ASSERT_TRUE(job.ok()) << job.status();
  const std::vector<int32_t> ids = (*job)->partition_ids();
  std::map<int64_t, std::map<int32_t, std::vector<float>>> at;
  for (int step = 0; step < 5; ++step) {
    for (int32_t id : ids) at[step][id] = ReadPartition(**job, id);
    for (int32_t id : ids) {
      std::vector<float> g((*job)->PartitionSize(id), 0.25f * (step + 1));
      ASSERT_TRUE(Completed(
          (*job)->Push(0, PartChunk(id, step, g, 1, 1, 10 * (step + 1)))));
    }
  }
  (*job)->FlushCheckpoints();
  ASSERT_EQ((*job)->CheckpointSteps(), (std::vector<int64_t>{2, 4}));
  // Corrupt step 4's file: restoring it fails and changes nothing.
  const std::string path4 = CheckpointPath(dir, "job-1", 4, 0);
  {
    std::FILE* f = std::fopen(path4.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, -3, SEEK_END);
    std::fputc('X', f);
    std::fclose(f);
  }
  EXPECT_EQ((*job)->Adopt(2, {"a"}, 4).status().code(),
            absl::StatusCode::kDataLoss);
  int64_t v;
  ReadPartition(**job, ids[0], &v);
  EXPECT_EQ(v, 5);
  EXPECT_EQ((*job)->generation(), 1);
  // Step 2 restores: values, version, ledger; later files are dropped.
  absl::StatusOr<Adopted> frozen =
      (*job)->Adopt(2, {"a"}, 2);
  ASSERT_TRUE(frozen.ok()) << frozen.status();
  EXPECT_EQ(frozen->min_version, 2);
  absl::StatusOr<Aligned> aligned =
      (*job)->Align(2, {"a"}, 2);
  ASSERT_TRUE(aligned.ok()) << aligned.status();
  for (int32_t id : ids) EXPECT_EQ(ReadPartition(**job, id), at[2][id]) << id;
  EXPECT_EQ(aligned->ledger, (Ledger{{7, LedgerEntry{20, 20}}}));
  EXPECT_EQ((*job)->CheckpointSteps(), (std::vector<int64_t>{2}));
  // Restoring step 0 means the initial parameters.
  ASSERT_TRUE((*job)->Adopt(3, {"a"}, 0).ok());
  for (int32_t id : ids) EXPECT_EQ(ReadPartition(**job, id), at[0][id]) << id;
}

// ssp/async: checkpoint N is written once every member's clock reached N,
// with each partition as it is then (a faster member's later steps
// included); restoring it resumes every member at clock N.
class ClockCheckpointTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ClockCheckpointTest, WrittenWhenEveryClockReachedTheStepAndRestored) {
  const std::string dir = TestDir(std::string("clock_ckpt_") + GetParam());
  JobInit init = MultiPartitionJob({"a", "b"});
  init.spec.mutable_consistency()->set_mode(GetParam());
  if (std::string(GetParam()) == "ssp")
    init.spec.mutable_consistency()->set_staleness(3);
  init.spec.mutable_checkpoint()->set_every_steps(2);
  init.spec.mutable_checkpoint()->set_dir(dir);
  auto job = JobShard::Create(init);
  ASSERT_TRUE(job.ok()) << job.status();
  const std::vector<int32_t> ids = (*job)->partition_ids();
  ASSERT_GE(ids.size(), 2u);
  auto push = [&](int member, int step) {
    for (int32_t id : ids) {
      std::vector<float> g((*job)->PartitionSize(id),
                           0.125f * (member + 1) * (step + 1));
      ASSERT_TRUE(Completed((*job)->Push(
          member, PartChunk(id, step, g, 4, 1, 100 * member + 10 * (step + 1)))));
    }
  };
  // a runs 4 steps ahead; b has done none: no member-wide clock of 2 yet.
  for (int step = 0; step < 4; ++step) push(0, step);
  (*job)->FlushCheckpoints();  // whatever was handed to the writer is written
  EXPECT_TRUE((*job)->CheckpointSteps().empty());
  push(1, 0);
  push(1, 1);  // every clock >= 2 now: checkpoint 2, a's 4 steps included
  std::map<int32_t, std::vector<float>> at2;
  for (int32_t id : ids) at2[id] = ReadPartition(**job, id);
  (*job)->FlushCheckpoints();
  EXPECT_EQ((*job)->CheckpointSteps(), (std::vector<int64_t>{2}));
  push(1, 2);  // b's clock 3: min 3, nothing new
  (*job)->FlushCheckpoints();
  EXPECT_EQ((*job)->CheckpointSteps(), (std::vector<int64_t>{2}));

  // Restore: every member resumes at clock 2 with the partitions as they
  // were when the checkpoint was taken.
  absl::StatusOr<Adopted> frozen =
      (*job)->Adopt(2, {"a", "b"}, 2);
  ASSERT_TRUE(frozen.ok()) << frozen.status();
  EXPECT_EQ(frozen->min_version, 2);
  absl::StatusOr<Aligned> aligned =
      (*job)->Align(2, {"a", "b"}, 2);
  ASSERT_TRUE(aligned.ok()) << aligned.status();
  for (int32_t id : ids) EXPECT_EQ(ReadPartition(**job, id), at2[id]) << id;
  // The ledger as of the checkpoint: a's four steps and b's two, 10 samples
  // each, all in chunk 7.
  ASSERT_TRUE(aligned->has_ledger);
  EXPECT_EQ(aligned->ledger.at(7).samples, 60);
  // Steps before 2 are acknowledged as done; step 2 is taken, by both.
  std::vector<float> g((*job)->PartitionSize(ids[0]), 1.0f);
  absl::StatusOr<PushOutcome> old = (*job)->Push(0, PartChunk(ids[0], 1, g, 4, 2, 10));
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(*old, PushOutcome::kAlreadyComplete);
  for (int member : {0, 1}) {
    absl::StatusOr<PushOutcome> next =
        (*job)->Push(member, PartChunk(ids[0], 2, g, 4, 2, 10));
    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_EQ(*next, PushOutcome::kCompleted) << member;
  }
}

INSTANTIATE_TEST_SUITE_P(SspAndAsync, ClockCheckpointTest,
                         ::testing::Values("ssp", "async"));

TEST(ShardCoreTest, SaveAndRestoreCarryValuesOptimizerStateAndVersion) {
  JobInit init = TinyJob({"a"});
  init.spec.mutable_optimizer()->set_type("adam");
  init.spec.mutable_optimizer()->set_lr(0.01);
  auto job = JobShard::Create(init);
  ASSERT_TRUE(job.ok()) << job.status();
  std::vector<float> g(10);
  for (int step = 0; step < 3; ++step) {
    for (int i = 0; i < 10; ++i) g[i] = 0.1f * (i - step);
    ASSERT_TRUE(Completed((*job)->Push(0, Chunk(step, g, 2))));
  }
  auto blob = (*job)->SavePartition(0);
  ASSERT_TRUE(blob.ok());

  auto copy = JobShard::Create(init);  // a fresh shard, as after a restart
  ASSERT_TRUE(copy.ok());
  ASSERT_TRUE((*copy)->RestorePartition(0, *blob).ok());
  int64_t v1, v2;
  EXPECT_EQ(ReadAll(**copy, &v2), ReadAll(**job, &v1));
  EXPECT_EQ(v2, 3);
  // The Adam moments and step count came along: the next update matches.
  ASSERT_TRUE(Completed((*job)->Push(0, Chunk(3, g, 2))));
  ASSERT_TRUE(Completed((*copy)->Push(0, Chunk(3, g, 2))));
  EXPECT_EQ(ReadAll(**copy), ReadAll(**job));

  // Damaged or foreign blobs are rejected and change nothing.
  const std::vector<float> before = ReadAll(**copy);
  EXPECT_EQ(
      (*copy)->RestorePartition(0, blob->substr(0, blob->size() - 4)).code(),
      absl::StatusCode::kDataLoss);
  EXPECT_EQ((*copy)->RestorePartition(0, blob->substr(0, 10)).code(),
            absl::StatusCode::kDataLoss);
  std::string bad_magic = *blob;
  bad_magic[0] = 'X';
  EXPECT_EQ((*copy)->RestorePartition(0, bad_magic).code(),
            absl::StatusCode::kInvalidArgument);
  auto sgd = JobShard::Create(TinyJob({"a"}));  // 0 state slots: a mismatch
  EXPECT_EQ((*sgd)->RestorePartition(0, *blob).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadAll(**copy), before);
}

TEST(ShardCoreTest, WritesCheckpointsEveryKStepsThatRestore) {
  const std::string dir = TestDir("shard_ckpt");
  JobInit init = TinyJob({"a"}, "momentum");
  init.spec.mutable_checkpoint()->set_every_steps(2);
  init.spec.mutable_checkpoint()->set_dir(dir);
  init.spec.mutable_checkpoint()->set_keep(3);
  std::vector<int64_t> written;
  absl::Mutex mu;
  init.on_checkpoint = [&](int64_t step, double, const absl::Status& s) {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(s.ok()) << s;
    written.push_back(step);
  };
  std::vector<float> at_step4;
  {
    auto job = JobShard::Create(init);
    ASSERT_TRUE(job.ok()) << job.status();
    std::vector<float> g(10, 0.5f);
    for (int step = 0; step < 5; ++step)
      ASSERT_TRUE(Completed((*job)->Push(0, Chunk(step, g, 1))));
    // The state at version 4, before the fifth update.
    (*job)->FlushCheckpoints();
    EXPECT_EQ((*job)->LastCheckpoint(), 4);
  }
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(written, (std::vector<int64_t>{2, 4}));
  }
  auto file = ReadCheckpoint(Env::Default(), CheckpointPath(dir, "job-1", 4, 0));
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->partitions.size(), 1u);
  // Restoring it gives a job at version 4 whose next update equals the
  // original's fifth (momentum state included).
  JobInit plain = TinyJob({"a"}, "momentum");
  auto restored = JobShard::Create(plain);
  ASSERT_TRUE(
      (*restored)->RestorePartition(0, file->partitions[0].second).ok());
  int64_t version;
  ReadAll(**restored, &version);
  EXPECT_EQ(version, 4);
  auto replay = JobShard::Create(plain);
  std::vector<float> g(10, 0.5f);
  for (int step = 0; step < 5; ++step)
    ASSERT_TRUE(Completed((*replay)->Push(0, Chunk(step, g, 1))));
  ASSERT_TRUE(Completed((*restored)->Push(0, Chunk(4, g, 1))));
  EXPECT_EQ(ReadAll(**restored), ReadAll(**replay));
}


// A disk that holds step 2's file at its rename: the shard (every_steps 2)
// goes on through steps 2 and 3 - one file in flight while training
// crosses the next checkpoint step - but a push of step 4 waits until the
// file of step 2 is on disk, so a crash never costs more than two
// intervals however slow the disk (JobShard::Push's back-pressure).
class RenameStallingEnv : public testing::FaultInjectionEnv {
 public:
  absl::Status RenameFile(const std::string& from,
                          const std::string& to) override {
    if (to.find("/step-2/") != std::string::npos) {
      entered.Notify();
      release.WaitForNotification();
    }
    return FaultInjectionEnv::RenameFile(from, to);
  }
  absl::Notification entered, release;
};

TEST(ShardCoreTest, APushTwoIntervalsPastAnUnwrittenCheckpointWaitsForIt) {
  const std::string dir = TestDir("shard_ckpt_backpressure");
  RenameStallingEnv env;
  JobInit init = TinyJob({"a"}, "momentum");
  init.spec.mutable_checkpoint()->set_every_steps(2);
  init.spec.mutable_checkpoint()->set_dir(dir);
  init.env = &env;
  auto job = JobShard::Create(init);
  ASSERT_TRUE(job.ok()) << job.status();
  std::vector<float> g(10, 0.5f);
  for (int step = 0; step < 4; ++step)
    ASSERT_TRUE(Completed((*job)->Push(0, Chunk(step, g, 1)))) << step;
  ASSERT_TRUE(env.entered.WaitForNotificationWithTimeout(absl::Seconds(30)));
  absl::Notification pushed;
  bool completed = false;
  bool on_disk = false;
  std::thread pusher([&] {
    completed = Completed((*job)->Push(0, Chunk(4, g, 1)));
    on_disk = env.FileExists(CheckpointPath(dir, "job-1", 2, 0));
    pushed.Notify();
  });
  EXPECT_FALSE(pushed.WaitForNotificationWithTimeout(absl::Milliseconds(200)))
      << "step 4 was applied while step 2's checkpoint was not on disk";
  env.release.Notify();
  pusher.join();
  EXPECT_TRUE(completed);
  EXPECT_TRUE(on_disk);
  (*job)->FlushCheckpoints();
  EXPECT_EQ((*job)->LastCheckpoint(), 4);
}
}  // namespace
}  // namespace fulcrum

namespace fulcrum {
namespace {

TEST(ShardCoreTest, AShardWithoutPartitionsReportsNoVersion) {
  JobInit init = testing::TinyJob({"a"});
  init.spec.set_shards(2);
  init.num_shards = 2;
  init.shard_index = 1;  // the tiny model's one partition is on shard 0
  auto job = JobShard::Create(init);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->partition_ids().empty());
  auto adopted = (*job)->Adopt(2, {"a"}, std::nullopt);
  ASSERT_TRUE(adopted.ok());
  EXPECT_EQ(adopted->min_version, -1);
  EXPECT_TRUE((*job)->Align(2, {"a"}, 7).ok());
}

}  // namespace
}  // namespace fulcrum

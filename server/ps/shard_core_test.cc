#include "server/ps/shard_core.h"

#include <cmath>
#include <cstring>
#include <cstdio>
#include <limits>
#include <map>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "common/config/job_spec.h"
#include "gtest/gtest.h"
#include "server/ps/checkpoint.h"

namespace fulcrum {
namespace {

// A tiny job: 4 -> 2 MLP (10 parameters), one shard, 1 KiB chunks.
JobInit TinyJob(std::vector<std::string> workers,
                const std::string& opt = "sgd") {
  JobInit init;
  init.job_id = "job-1";
  init.spec.set_name("tiny");
  init.spec.mutable_model()->set_type("mlp");
  init.spec.mutable_model()->add_layers(4);
  init.spec.mutable_model()->add_layers(2);
  init.spec.mutable_dataset()->set_dir("/nowhere");
  init.spec.mutable_optimizer()->set_type(opt);
  init.spec.mutable_optimizer()->set_lr(0.5);
  if (opt == "momentum") init.spec.mutable_optimizer()->set_momentum(0.9);
  init.spec.set_chunk_bytes(1024);
  ApplyDefaults(&init.spec);
  init.workers = std::move(workers);
  return init;
}

std::vector<float> ReadAll(JobShard& job, int64_t* version = nullptr) {
  std::vector<float> out(job.PartitionSize(0));
  int64_t v;
  bool stop;
  EXPECT_TRUE(job.Read(0, 0, out.size(), out.data(), &v, &stop).ok());
  if (version != nullptr) *version = v;
  return out;
}

PushChunk Chunk(int64_t step, const std::vector<float>& g, int64_t samples) {
  PushChunk c;
  c.step = step;
  c.samples = samples;
  c.data = reinterpret_cast<const char*>(g.data());
  c.bytes = g.size() * 4;
  return c;
}

bool Completed(const absl::StatusOr<PushOutcome>& r) {
  return r.ok() && *r == PushOutcome::kCompleted;
}

TEST(ShardCoreTest, WeightedAverageOfUnevenPushes) {
  auto job = JobShard::Create(TinyJob({"a", "b"}));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ((*job)->partition_ids().size(), 1u);
  std::vector<float> w0 = ReadAll(**job);
  std::vector<float> ga(10, 1.0f), gb(10, 4.0f);
  // Worker a: 3 samples with mean gradient 1; worker b: 1 sample with 4.
  auto r = (*job)->Push(0, Chunk(0, ga, 3));
  ASSERT_TRUE(r.ok() && *r == PushOutcome::kCompleted);
  int64_t version;
  EXPECT_EQ(ReadAll(**job, &version), w0);  // not applied before b pushes
  EXPECT_EQ(version, 0);
  r = (*job)->Push(1, Chunk(0, gb, 1));
  ASSERT_TRUE(r.ok() && *r == PushOutcome::kCompleted);
  std::vector<float> w1 = ReadAll(**job, &version);
  EXPECT_EQ(version, 1);
  // mean = (3*1 + 1*4) / 4 = 1.75; w1 = w0 - 0.5 * 1.75
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - 0.875f) << i;
}

TEST(ShardCoreTest, EmptyPushWithZeroSamplesDoesNotBlockOrWeigh) {
  auto job = JobShard::Create(TinyJob({"a", "b"}));
  ASSERT_TRUE(job.ok());
  std::vector<float> w0 = ReadAll(**job);
  std::vector<float> ga(10, 2.0f);
  ASSERT_TRUE((*job)->Push(0, Chunk(0, ga, 5)).ok());
  PushChunk empty;
  empty.step = 0;
  ASSERT_TRUE((*job)->Push(1, empty).ok());
  int64_t version;
  std::vector<float> w1 = ReadAll(**job, &version);
  EXPECT_EQ(version, 1);
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - 1.0f);
}

TEST(ShardCoreTest, RepeatedPushIsNotAppliedTwice) {
  auto job = JobShard::Create(TinyJob({"a", "b"}));
  ASSERT_TRUE(job.ok());
  std::vector<float> w0 = ReadAll(**job);
  std::vector<float> g(10, 1.0f);
  ASSERT_TRUE(Completed((*job)->Push(0, Chunk(0, g, 1))));
  auto again = (*job)->Push(0, Chunk(0, g, 1));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, PushOutcome::kAlreadyComplete);
  ASSERT_TRUE(Completed((*job)->Push(1, Chunk(0, g, 1))));
  // A retry of step 0 after it was applied is acknowledged and ignored.
  auto late = (*job)->Push(1, Chunk(0, g, 1));
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(*late, PushOutcome::kAlreadyComplete);
  std::vector<float> w1 = ReadAll(**job);
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - 0.5f);
}

TEST(ShardCoreTest, AStepCarryingAStopAppliesNothing) {
  auto job = JobShard::Create(TinyJob({"a", "b"}));
  ASSERT_TRUE(job.ok());
  std::vector<float> g(10, 1.0f);
  ASSERT_TRUE(Completed((*job)->Push(0, Chunk(0, g, 1))));
  ASSERT_TRUE(Completed((*job)->Push(1, Chunk(0, g, 1))));
  int64_t version;
  const std::vector<float> w1 = ReadAll(**job, &version);
  PushChunk stop = Chunk(1, g, 1);
  stop.stop = true;
  ASSERT_TRUE(Completed((*job)->Push(0, stop)));
  ASSERT_TRUE(Completed((*job)->Push(1, Chunk(1, g, 1))));
  // Version 2 is final and equals version 1: what rank 0 evaluated.
  std::vector<float> w2(10);
  bool stopped = false;
  ASSERT_TRUE((*job)->Read(0, 0, 10, w2.data(), &version, &stopped).ok());
  EXPECT_EQ(version, 2);
  EXPECT_TRUE(stopped);
  EXPECT_EQ(w2, w1);
}

TEST(ShardCoreTest, MomentumAcrossSteps) {
  auto job = JobShard::Create(TinyJob({"a"}, "momentum"));
  ASSERT_TRUE(job.ok());
  std::vector<float> w0 = ReadAll(**job);
  std::vector<float> g(10, 1.0f);
  ASSERT_TRUE(Completed((*job)->Push(0, Chunk(0, g, 2))));
  ASSERT_TRUE(Completed((*job)->Push(0, Chunk(1, g, 2))));
  // v1 = 1, w1 = w0 - 0.5; v2 = 0.9 + 1 = 1.9, w2 = w1 - 0.95
  std::vector<float> w2 = ReadAll(**job);
  for (int i = 0; i < 10; ++i) EXPECT_NEAR(w2[i], w0[i] - 1.45f, 1e-6);
}

TEST(ShardCoreTest, RejectsBadPushesWithoutChangingState) {
  auto job = JobShard::Create(TinyJob({"a", "b"}));
  ASSERT_TRUE(job.ok());
  std::vector<float> w0 = ReadAll(**job);
  std::vector<float> g(10, 1.0f);
  PushChunk c = Chunk(0, g, 1);
  c.partition = 7;
  auto r = (*job)->Push(0, c);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("push.partition 7"), std::string::npos);

  c = Chunk(0, g, 1);
  c.bytes = 36;
  r = (*job)->Push(0, c);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("push.data has 36 bytes, expected 40"),
            std::string::npos);

  std::vector<float> bad = g;
  bad[3] = std::numeric_limits<float>::quiet_NaN();
  r = (*job)->Push(0, Chunk(0, bad, 1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("element 3"), std::string::npos);
  bad[3] = std::numeric_limits<float>::infinity();
  EXPECT_EQ((*job)->Push(0, Chunk(0, bad, 1)).status().code(),
            absl::StatusCode::kInvalidArgument);

  r = (*job)->Push(0, Chunk(3, g, 1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  r = (*job)->Push(0, Chunk(0, g, -1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);

  // Nothing was accumulated: after both valid pushes the update is exactly one
  // step.
  ASSERT_TRUE(Completed((*job)->Push(0, Chunk(0, g, 1))));
  ASSERT_TRUE(Completed((*job)->Push(1, Chunk(0, g, 1))));
  std::vector<float> w1 = ReadAll(**job);
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - 0.5f);
}

TEST(ShardCoreTest, StallInspectorNamesTheMissingWorkers) {
  auto job = JobShard::Create(TinyJob({"a", "b", "c"}));
  ASSERT_TRUE(job.ok());
  EXPECT_TRUE((*job)->Stalls(absl::ZeroDuration()).empty())
      << "nothing pushed yet";
  std::vector<float> g(10, 1.0f);
  ASSERT_TRUE(Completed((*job)->Push(1, Chunk(0, g, 1))));
  EXPECT_TRUE((*job)->Stalls(absl::Seconds(60)).empty())
      << "below the threshold";
  absl::SleepFor(absl::Milliseconds(20));
  auto stalls = (*job)->Stalls(absl::Milliseconds(10));
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].partition, 0);
  EXPECT_EQ(stalls[0].step, 0);
  EXPECT_GE(stalls[0].waited_seconds, 0.01);
  EXPECT_EQ(stalls[0].waiting_for, (std::vector<std::string>{"a", "c"}));
  ASSERT_TRUE(Completed((*job)->Push(0, Chunk(0, g, 1))));
  ASSERT_TRUE(Completed((*job)->Push(2, Chunk(0, g, 1))));
  EXPECT_TRUE((*job)->Stalls(absl::ZeroDuration()).empty())
      << "the step completed";
}

TEST(ShardCoreTest, MembershipAndGeneration) {
  auto job = JobShard::Create(TinyJob({"a", "b"}));
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(*(*job)->MemberIndex("b", 1), 1);
  EXPECT_EQ((*job)->MemberIndex("c", 1).status().code(),
            absl::StatusCode::kPermissionDenied);
  // A newer generation than the shard knows: not yet reconfigured, retry.
  EXPECT_EQ((*job)->MemberIndex("a", 2).status().code(),
            absl::StatusCode::kUnavailable);
  ASSERT_TRUE((*job)->Reconfigure(2, {"b", "c"}, -1, false, 0).ok());
  // Between the phases nobody of the new generation may start yet.
  EXPECT_EQ((*job)->MemberIndex("c", 2).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ((*job)->MemberIndex("a", 1).status().code(),
            absl::StatusCode::kAborted);
  ASSERT_TRUE((*job)->Reconfigure(2, {"b", "c"}, 0, false, 0).ok());
  EXPECT_EQ(*(*job)->MemberIndex("c", 2), 1);
  EXPECT_EQ((*job)->MemberIndex("a", 2).status().code(),
            absl::StatusCode::kPermissionDenied);
  // Generations only move forward.
  EXPECT_EQ((*job)->Reconfigure(1, {"a"}, -1, false, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*job)->Reconfigure(2, {}, -1, false, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A job whose single shard holds several partitions (64 -> 8 MLP, 1 KiB
// partitions).
JobInit MultiPartitionJob(std::vector<std::string> workers,
                          const std::string& opt = "momentum") {
  JobInit init = TinyJob(std::move(workers), opt);
  init.spec.mutable_model()->clear_layers();
  init.spec.mutable_model()->add_layers(64);
  init.spec.mutable_model()->add_layers(8);
  init.spec.set_partition_bytes(1024);
  return init;
}

std::vector<float> ReadPartition(JobShard& job, int32_t id,
                                 int64_t* version = nullptr) {
  std::vector<float> out(job.PartitionSize(id));
  int64_t v;
  bool stop;
  EXPECT_TRUE(job.Read(id, 0, out.size(), out.data(), &v, &stop).ok());
  if (version != nullptr) *version = v;
  return out;
}

PushChunk PartChunk(int32_t id, int64_t step, const std::vector<float>& g,
                    int64_t samples, int64_t generation, int64_t range_end) {
  PushChunk c = Chunk(step, g, samples);
  c.partition = id;
  c.generation = generation;
  c.range_chunk = 7;
  c.range_begin = range_end - 10;
  c.range_end = range_end;
  return c;
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
  absl::StatusOr<Reconfigured> frozen =
      (*job)->Reconfigure(2, {"a"}, -1, false, 0);
  waiter.join();
  ASSERT_TRUE(frozen.ok()) << frozen.status();
  EXPECT_EQ(frozen->min_version, 1);
  EXPECT_EQ(frozen->max_version, 2);
  // Generation 1's pushes are refused from now on.
  auto late = grad(ids[1], 5.0f);
  EXPECT_EQ((*job)->Push(1, PartChunk(ids[1], 1, late, 1, 1, 40))
                .status()
                .code(),
            absl::StatusCode::kAborted);
  absl::StatusOr<Reconfigured> aligned =
      (*job)->Reconfigure(2, {"a"}, 1, false, 0);
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
  ASSERT_TRUE((*job)->Reconfigure(2, {"a"}, -1, false, 0).ok());
  // Two steps back is more than one undo.
  EXPECT_EQ((*job)->Reconfigure(2, {"a"}, 1, false, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  int64_t v;
  ReadPartition(**job, 0, &v);
  EXPECT_EQ(v, 3);  // nothing changed
  EXPECT_TRUE((*job)->Reconfigure(2, {"a"}, 3, false, 0).ok());
}

TEST(ShardCoreTest, ReconfigureRestoresACheckpointOrRejectsACorruptOne) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      std::string(tmp != nullptr ? tmp : "/tmp") + "/reconfigure_ckpt";
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
  for (int i = 0; i < 300 && (*job)->LastCheckpoint() < 4; ++i)
    absl::SleepFor(absl::Milliseconds(10));
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
  EXPECT_EQ((*job)->Reconfigure(2, {"a"}, -1, true, 4).status().code(),
            absl::StatusCode::kDataLoss);
  int64_t v;
  ReadPartition(**job, ids[0], &v);
  EXPECT_EQ(v, 5);
  EXPECT_EQ((*job)->generation(), 1);
  // Step 2 restores: values, version, ledger; later files are dropped.
  absl::StatusOr<Reconfigured> frozen =
      (*job)->Reconfigure(2, {"a"}, -1, true, 2);
  ASSERT_TRUE(frozen.ok()) << frozen.status();
  EXPECT_EQ(frozen->min_version, 2);
  EXPECT_EQ(frozen->max_version, 2);
  absl::StatusOr<Reconfigured> aligned =
      (*job)->Reconfigure(2, {"a"}, 2, false, 0);
  ASSERT_TRUE(aligned.ok()) << aligned.status();
  for (int32_t id : ids) EXPECT_EQ(ReadPartition(**job, id), at[2][id]) << id;
  EXPECT_EQ(aligned->ledger, (Ledger{{7, LedgerEntry{20, 20}}}));
  EXPECT_EQ((*job)->CheckpointSteps(), (std::vector<int64_t>{2}));
  // Restoring step 0 means the initial parameters.
  ASSERT_TRUE((*job)->Reconfigure(3, {"a"}, -1, true, 0).ok());
  for (int32_t id : ids) EXPECT_EQ(ReadPartition(**job, id), at[0][id]) << id;
}

// ssp/async: checkpoint N is written once every member's clock reached N,
// with each partition as it is then (a faster member's later steps
// included); restoring it resumes every member at clock N.
class ClockCheckpointTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ClockCheckpointTest, WrittenWhenEveryClockReachedTheStepAndRestored) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") +
                          "/clock_ckpt_" + GetParam();
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
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_TRUE((*job)->CheckpointSteps().empty());
  push(1, 0);
  push(1, 1);  // every clock >= 2 now: checkpoint 2, a's 4 steps included
  std::map<int32_t, std::vector<float>> at2;
  for (int32_t id : ids) at2[id] = ReadPartition(**job, id);
  for (int i = 0; i < 300 && (*job)->LastCheckpoint() < 2; ++i)
    absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ((*job)->CheckpointSteps(), (std::vector<int64_t>{2}));
  push(1, 2);  // b's clock 3: min 3, nothing new
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ((*job)->CheckpointSteps(), (std::vector<int64_t>{2}));

  // Restore: every member resumes at clock 2 with the partitions as they
  // were when the checkpoint was taken.
  absl::StatusOr<Reconfigured> frozen =
      (*job)->Reconfigure(2, {"a", "b"}, -1, true, 2);
  ASSERT_TRUE(frozen.ok()) << frozen.status();
  EXPECT_EQ(frozen->min_version, 2);
  EXPECT_EQ(frozen->max_version, 2);
  absl::StatusOr<Reconfigured> aligned =
      (*job)->Reconfigure(2, {"a", "b"}, 2, false, 0);
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

TEST(ShardCoreTest, WaitForVersionWakesOnUpdateAndEnd) {
  auto job = JobShard::Create(TinyJob({"a"}));
  ASSERT_TRUE(job.ok());
  std::vector<float> g(10, 1.0f);
  std::thread pusher([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE((*job)->Push(0, Chunk(0, g, 1)).ok());
  });
  EXPECT_TRUE(
      (*job)
          ->WaitForVersion(0, 1, 1, absl::Now() + absl::Seconds(10), nullptr)
          .ok());
  pusher.join();
  EXPECT_EQ(
      (*job)
          ->WaitForVersion(0, 5, 1, absl::Now() + absl::Milliseconds(20), nullptr)
          .code(),
      absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ((*job)
                ->WaitForVersion(0, 5, 1, absl::Now() + absl::Seconds(10),
                                 [] { return true; })
                .code(),
            absl::StatusCode::kCancelled);
  std::thread ender([&] {
    absl::SleepFor(absl::Milliseconds(50));
    (*job)->End();
  });
  EXPECT_EQ((*job)
                ->WaitForVersion(0, 5, 1, absl::Now() + absl::Seconds(10), nullptr)
                .code(),
            absl::StatusCode::kAborted);
  ender.join();
}

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
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      std::string(tmp != nullptr ? tmp : "/tmp") + "/shard_ckpt";
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
    auto file4 = [&] {
      return ReadCheckpoint(CheckpointPath(dir, "job-1", 4, 0));
    };
    for (int i = 0; i < 200 && !file4().ok(); ++i)
      absl::SleepFor(absl::Milliseconds(10));
    EXPECT_EQ((*job)->LastCheckpoint(), 4);
  }
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(written, (std::vector<int64_t>{2, 4}));
  }
  auto file = ReadCheckpoint(CheckpointPath(dir, "job-1", 4, 0));
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

TEST(ParameterShardTest, InitIsIdempotentAndChecksSpec) {
  ParameterShard shard;
  JobInit init = TinyJob({"a"});
  auto first = shard.InitJob(init);
  ASSERT_TRUE(first.ok());
  auto again = shard.InitJob(init);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(first->get(), again->get());
  init.spec.mutable_optimizer()->set_lr(0.1);
  EXPECT_EQ(shard.InitJob(init).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(shard.Find("nope").status().code(), absl::StatusCode::kNotFound);
  JobInit bad = TinyJob({"a"});
  bad.job_id = "job-2";
  bad.spec.mutable_optimizer()->set_lr(-1);
  EXPECT_EQ(shard.InitJob(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  shard.EndJob("job-1");
  EXPECT_TRUE((*first)->ended());
  shard.ForgetJob("job-1");
  EXPECT_EQ(shard.Find("job-1").status().code(), absl::StatusCode::kNotFound);
}

TEST(ParameterShardTest, KeepsOnlyTheLastEndedJobs) {
  ParameterShard shard;
  const int jobs = ParameterShard::kKeepEnded + 2;
  for (int i = 0; i < jobs; ++i) {
    JobInit init = TinyJob({"a"});
    init.job_id = "job-" + std::to_string(i);
    ASSERT_TRUE(shard.InitJob(init).ok());
    shard.EndJob(init.job_id);
    shard.EndJob(init.job_id);  // idempotent: counted once
  }
  EXPECT_EQ(shard.JobIds().size(), ParameterShard::kKeepEnded);
  EXPECT_EQ(shard.Find("job-0").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(shard.Find("job-1").status().code(), absl::StatusCode::kNotFound);
  auto last = shard.Find("job-" + std::to_string(jobs - 1));
  ASSERT_TRUE(last.ok());
  EXPECT_TRUE((*last)->ended());
}

}  // namespace
}  // namespace fulcrum

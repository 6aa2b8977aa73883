#include "server/ps/shard_core.h"

#include <cmath>
#include <cstring>
#include <limits>
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

TEST(ShardCoreTest, WeightedAverageOfUnevenPushes) {
  auto job = JobShard::Create(TinyJob({"a", "b"}));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ((*job)->partition_ids().size(), 1u);
  std::vector<float> w0 = ReadAll(**job);
  std::vector<float> ga(10, 1.0f), gb(10, 4.0f);
  // Worker a: 3 samples with mean gradient 1; worker b: 1 sample with 4.
  auto r = (*job)->Push(0, Chunk(0, ga, 3));
  ASSERT_TRUE(r.ok() && *r);
  int64_t version;
  EXPECT_EQ(ReadAll(**job, &version), w0);  // not applied before b pushes
  EXPECT_EQ(version, 0);
  r = (*job)->Push(1, Chunk(0, gb, 1));
  ASSERT_TRUE(r.ok() && *r);
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
  ASSERT_TRUE(*(*job)->Push(0, Chunk(0, g, 1)));
  auto again = (*job)->Push(0, Chunk(0, g, 1));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
  ASSERT_TRUE(*(*job)->Push(1, Chunk(0, g, 1)));
  // A retry of step 0 after it was applied is acknowledged and ignored.
  auto late = (*job)->Push(1, Chunk(0, g, 1));
  ASSERT_TRUE(late.ok());
  EXPECT_FALSE(*late);
  std::vector<float> w1 = ReadAll(**job);
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - 0.5f);
}

TEST(ShardCoreTest, MomentumAcrossSteps) {
  auto job = JobShard::Create(TinyJob({"a"}, "momentum"));
  ASSERT_TRUE(job.ok());
  std::vector<float> w0 = ReadAll(**job);
  std::vector<float> g(10, 1.0f);
  ASSERT_TRUE(*(*job)->Push(0, Chunk(0, g, 2)));
  ASSERT_TRUE(*(*job)->Push(0, Chunk(1, g, 2)));
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
  ASSERT_TRUE(*(*job)->Push(0, Chunk(0, g, 1)));
  ASSERT_TRUE(*(*job)->Push(1, Chunk(0, g, 1)));
  std::vector<float> w1 = ReadAll(**job);
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - 0.5f);
}

TEST(ShardCoreTest, StallInspectorNamesTheMissingWorkers) {
  auto job = JobShard::Create(TinyJob({"a", "b", "c"}));
  ASSERT_TRUE(job.ok());
  EXPECT_TRUE((*job)->Stalls(absl::ZeroDuration()).empty())
      << "nothing pushed yet";
  std::vector<float> g(10, 1.0f);
  ASSERT_TRUE(*(*job)->Push(1, Chunk(0, g, 1)));
  EXPECT_TRUE((*job)->Stalls(absl::Seconds(60)).empty())
      << "below the threshold";
  absl::SleepFor(absl::Milliseconds(20));
  auto stalls = (*job)->Stalls(absl::Milliseconds(10));
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].partition, 0);
  EXPECT_EQ(stalls[0].step, 0);
  EXPECT_GE(stalls[0].waited_seconds, 0.01);
  EXPECT_EQ(stalls[0].waiting_for, (std::vector<std::string>{"a", "c"}));
  ASSERT_TRUE(*(*job)->Push(0, Chunk(0, g, 1)));
  ASSERT_TRUE(*(*job)->Push(2, Chunk(0, g, 1)));
  EXPECT_TRUE((*job)->Stalls(absl::ZeroDuration()).empty())
      << "the step completed";
}

TEST(ShardCoreTest, MembershipAndGeneration) {
  auto job = JobShard::Create(TinyJob({"a", "b"}));
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(*(*job)->MemberIndex("b", 1), 1);
  EXPECT_EQ((*job)->MemberIndex("c", 1).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ((*job)->MemberIndex("a", 2).status().code(),
            absl::StatusCode::kAborted);
}

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
          ->WaitForVersion(0, 1, absl::Now() + absl::Seconds(10), nullptr)
          .ok());
  pusher.join();
  EXPECT_EQ(
      (*job)
          ->WaitForVersion(0, 5, absl::Now() + absl::Milliseconds(20), nullptr)
          .code(),
      absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ((*job)
                ->WaitForVersion(0, 5, absl::Now() + absl::Seconds(10),
                                 [] { return true; })
                .code(),
            absl::StatusCode::kCancelled);
  std::thread ender([&] {
    absl::SleepFor(absl::Milliseconds(50));
    (*job)->End();
  });
  EXPECT_EQ((*job)
                ->WaitForVersion(0, 5, absl::Now() + absl::Seconds(10), nullptr)
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
    ASSERT_TRUE(*(*job)->Push(0, Chunk(step, g, 2)));
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
  ASSERT_TRUE(*(*job)->Push(0, Chunk(3, g, 2)));
  ASSERT_TRUE(*(*copy)->Push(0, Chunk(3, g, 2)));
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
      ASSERT_TRUE(*(*job)->Push(0, Chunk(step, g, 1)));
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
    ASSERT_TRUE(*(*replay)->Push(0, Chunk(step, g, 1)));
  ASSERT_TRUE(*(*restored)->Push(0, Chunk(4, g, 1)));
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

#include "server/ps/checkpoint.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/testing/fault_injection_env.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

std::string Dir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
}

CheckpointFile Sample() {
  CheckpointFile f;
  f.job_id = "job-7";
  f.step = 300;
  f.shard = 1;
  f.partitions = {{2, std::string(1000, 'a')}, {5, std::string("\0\1\2", 3)}};
  return f;
}

TEST(CheckpointTest, RoundTrip) {
  const std::string path = CheckpointPath(Dir("rt"), "job-7", 300, 1);
  EXPECT_EQ(path, Dir("rt") + "/job-7/step-300/shard-1.ckpt");
  ASSERT_TRUE(WriteCheckpoint(Env::Default(), path, Sample()).ok());
  struct stat st;
  EXPECT_NE(stat((path + ".tmp").c_str(), &st), 0)
      << "the temp file must be gone";
  auto read = ReadCheckpoint(Env::Default(), path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->job_id, "job-7");
  EXPECT_EQ(read->step, 300);
  EXPECT_EQ(read->shard, 1);
  EXPECT_EQ(read->partitions, Sample().partitions);
}

TEST(CheckpointTest, DetectsCorruptionAndTruncation) {
  const std::string path = CheckpointPath(Dir("bad"), "job-7", 300, 1);
  ASSERT_TRUE(WriteCheckpoint(Env::Default(), path, Sample()).ok());
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write = [&](const std::string& b) {
    std::ofstream(path, std::ios::binary) << b;
  };
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x40;  // a bit in a partition blob
  write(flipped);
  auto r = ReadCheckpoint(Env::Default(), path);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("CRC-32C mismatch"), std::string::npos);
  write(bytes.substr(0, bytes.size() - 10));
  EXPECT_EQ(ReadCheckpoint(Env::Default(), path).status().code(), absl::StatusCode::kDataLoss);
  write(bytes.substr(0, 20));
  EXPECT_EQ(ReadCheckpoint(Env::Default(), path).status().code(), absl::StatusCode::kDataLoss);
  write("not a checkpoint at all, but long enough to hold a header");
  EXPECT_EQ(ReadCheckpoint(Env::Default(), path).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadCheckpoint(Env::Default(), path + ".missing").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(CheckpointTest, PruneKeepsTheNewest) {
  const std::string dir = Dir("prune");
  for (int64_t step : {100, 200, 300, 400}) {
    for (int shard : {0, 1}) {
      CheckpointFile f = Sample();
      f.step = step;
      f.shard = shard;
      ASSERT_TRUE(
          WriteCheckpoint(Env::Default(), CheckpointPath(dir, "job-7", step, shard), f).ok());
    }
  }
  EXPECT_EQ(PruneCheckpoints(Env::Default(), dir, "job-7", 0, 2),
            (std::vector<int64_t>{400, 300}));
  struct stat st;
  EXPECT_NE(stat(CheckpointPath(dir, "job-7", 100, 0).c_str(), &st), 0);
  EXPECT_EQ(stat(CheckpointPath(dir, "job-7", 100, 1).c_str(), &st),
            0);  // other shard's
  EXPECT_EQ(stat(CheckpointPath(dir, "job-7", 300, 0).c_str(), &st), 0);
  PruneCheckpoints(Env::Default(), dir, "job-7", 1, 2);
  EXPECT_NE(stat((dir + "/job-7/step-100").c_str(), &st), 0)
      << "empty step dir removed";
}

// A kept file that needs an older one (its sidecar names it: an embedding
// table's differential and its full save) keeps that one too.
TEST(CheckpointTest, PruneKeepsWhatKeptFilesNeed) {
  const std::string dir = Dir("prune_needs");
  for (int64_t step : {100, 200, 300, 400}) {
    CheckpointFile f = Sample();
    f.step = step;
    ASSERT_TRUE(
        WriteCheckpoint(Env::Default(), CheckpointPath(dir, "job-7", step, 0), f).ok());
  }
  ASSERT_TRUE(WriteFileAtomically(Env::Default(),
                                  NeedsPath(dir, "job-7", 400, 0), "200\n")
                  .ok());
  ASSERT_TRUE(WriteFileAtomically(Env::Default(),
                                  NeedsPath(dir, "job-7", 300, 0), "200\n")
                  .ok());
  EXPECT_EQ(CheckpointNeeds(Env::Default(), dir, "job-7", 400, 0), 200);
  EXPECT_EQ(PruneCheckpoints(Env::Default(), dir, "job-7", 0, 1),
            (std::vector<int64_t>{400, 200}));
  struct stat st;
  EXPECT_EQ(stat(CheckpointPath(dir, "job-7", 200, 0).c_str(), &st), 0);
  EXPECT_NE(stat(CheckpointPath(dir, "job-7", 300, 0).c_str(), &st), 0);
  EXPECT_NE(stat(NeedsPath(dir, "job-7", 300, 0).c_str(), &st), 0)
      << "a pruned file's sidecar goes with it";
  EXPECT_NE(stat(CheckpointPath(dir, "job-7", 100, 0).c_str(), &st), 0);
}

TEST(CheckpointWriterTest, WritesOnceEveryPartitionReportedAndPrunes) {
  const std::string dir = Dir("writer");
  std::vector<int64_t> written;
  absl::Mutex mu;
  {
    CheckpointWriter writer(
        {dir, "job-9", 0, 2, 2,
         [&](int64_t step, double seconds, const absl::Status& s) {
           absl::MutexLock lock(&mu);
           EXPECT_TRUE(s.ok()) << s;
           EXPECT_GE(seconds, 0);
           written.push_back(step);
         }});
    for (int64_t step : {10, 20, 30}) {
      writer.Add(step, 4, "b" + std::to_string(step));
      writer.Add(step, 1, "a" + std::to_string(step));
    }
    writer.Add(40, 1, "half");  // partition 4 never reports step 40: no file
  }                             // the destructor finishes queued writes
  EXPECT_EQ(written, (std::vector<int64_t>{10, 20, 30}));
  auto file = ReadCheckpoint(Env::Default(), CheckpointPath(dir, "job-9", 30, 0));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->partitions, (std::vector<std::pair<int32_t, std::string>>{
                                  {1, "a30"}, {4, "b30"}}));
  struct stat st;
  EXPECT_NE(stat(CheckpointPath(dir, "job-9", 10, 0).c_str(), &st), 0)
      << "pruned (keep 2)";
  EXPECT_NE(stat(CheckpointPath(dir, "job-9", 40, 0).c_str(), &st), 0);
}

// A disk that fails the fsync of step 5's file (injected, not a full disk):
// the attempt is reported with the error, nothing is left behind, the last
// written step does not move, and the next step writes normally.
TEST(CheckpointWriterTest, AFailedSyncIsReportedAndLeavesNoFile) {
  const std::string dir = Dir("faulty");
  testing::FaultInjectionEnv env;
  env.FailOn(testing::FaultInjectionEnv::Op::kSync, "step-5/",
             absl::InternalError("injected: no space left on device"));
  std::vector<std::pair<int64_t, absl::Status>> seen;
  CheckpointWriter::Options options{
      dir, "job-2", 0, 1, 3,
      [&](int64_t step, double, const absl::Status& s) {
        seen.emplace_back(step, s);
      }};
  options.env = &env;
  CheckpointWriter writer(options);
  writer.Add(5, 0, "x");
  writer.Flush();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].second.code(), absl::StatusCode::kInternal);
  EXPECT_NE(seen[0].second.message().find("no space"), std::string::npos);
  EXPECT_EQ(writer.last_written(), -1);
  EXPECT_TRUE(ListCheckpointSteps(&env, dir, "job-2", 0).empty());
  EXPECT_FALSE(env.FileExists(CheckpointPath(dir, "job-2", 5, 0) + ".tmp"));
  writer.Add(6, 0, "y");
  writer.Flush();
  EXPECT_EQ(writer.last_written(), 6);
  EXPECT_EQ(ListCheckpointSteps(&env, dir, "job-2", 0),
            (std::vector<int64_t>{6}));
  EXPECT_EQ(env.Failures(testing::FaultInjectionEnv::Op::kSync), 1);
}

TEST(CheckpointWriterTest, ReportsFailures) {
  const std::string blocker = Dir("blocker");
  std::ofstream(blocker) << "a file where a directory should be";
  absl::Status seen;
  {
    CheckpointWriter writer(
        {blocker, "job-1", 0, 1, 3,
         [&](int64_t, double, const absl::Status& s) { seen = s; }});
    writer.Add(5, 0, "x");
  }
  EXPECT_FALSE(seen.ok());
}


// `more` may say a step's file is not to be written (the embedding rows'
// cut was dropped): nothing is written, on_written gets the reason,
// more_written is not called, and the next step writes normally.
TEST(CheckpointWriterTest, AStepMoreSkipsIsNotWritten) {
  const std::string dir = Dir("skipped");
  std::vector<std::pair<int64_t, absl::Status>> seen;
  std::vector<int64_t> more_written;
  CheckpointWriter::Options options{
      dir, "job-3", 0, 1, 3,
      [&](int64_t step, double, const absl::Status& s) {
        seen.emplace_back(step, s);
      }};
  options.more = [](int64_t step) {
    CheckpointWriter::Options::More more;
    if (step == 5) more.skip = absl::FailedPreconditionError("cut dropped");
    more.blobs.emplace_back(-1, "rows" + std::to_string(step));
    return more;
  };
  options.more_written = [&](int64_t step, bool) {
    more_written.push_back(step);
  };
  CheckpointWriter writer(options);
  writer.Add(5, 0, "x");
  writer.Flush();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].second.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(ListCheckpointSteps(Env::Default(), dir, "job-3", 0).empty());
  writer.Add(6, 0, "y");
  writer.Flush();
  EXPECT_EQ(ListCheckpointSteps(Env::Default(), dir, "job-3", 0),
            (std::vector<int64_t>{6}));
  EXPECT_EQ(more_written, (std::vector<int64_t>{6}));
  EXPECT_EQ(writer.last_written(), 6);
}


// A disk slower than the steps: while step 1's file is being written,
// steps 2..7 complete; only the newest kMaxQueued wait, the older ones are
// dropped and reported as RESOURCE_EXHAUSTED, the others written.
TEST(CheckpointWriterTest, TheQueueOfWaitingFilesIsBounded) {
  ASSERT_EQ(CheckpointWriter::kMaxQueued, 4u);
  const std::string dir = Dir("slow_disk");
  absl::Mutex mu;
  std::map<int64_t, absl::StatusCode> seen;
  absl::Notification writing, release;
  CheckpointWriter::Options options{
      dir, "job-4", 0, 1, 10,
      [&](int64_t step, double, const absl::Status& s) {
        absl::MutexLock lock(&mu);
        seen[step] = s.code();
      }};
  options.more = [&](int64_t step) {
    if (step == 1) {
      writing.Notify();
      release.WaitForNotification();
    }
    return CheckpointWriter::Options::More{};
  };
  CheckpointWriter writer(options);
  writer.Add(1, 0, "x");
  writing.WaitForNotification();  // step 1 is the file being written
  for (int64_t step = 2; step <= 7; ++step) writer.Add(step, 0, "x");
  release.Notify();
  writer.Flush();
  absl::MutexLock lock(&mu);
  EXPECT_EQ(seen, (std::map<int64_t, absl::StatusCode>{
                      {1, absl::StatusCode::kOk},
                      {2, absl::StatusCode::kResourceExhausted},
                      {3, absl::StatusCode::kResourceExhausted},
                      {4, absl::StatusCode::kOk},
                      {5, absl::StatusCode::kOk},
                      {6, absl::StatusCode::kOk},
                      {7, absl::StatusCode::kOk}}));
  EXPECT_EQ(ListCheckpointSteps(Env::Default(), dir, "job-4", 0),
            (std::vector<int64_t>{1, 4, 5, 6, 7}));
}

// Back-pressure (AwaitFilesThrough): while step 4's file is being written
// a wait through step 3 returns at once, one through step 4 blocks until
// the file is on disk; a wait that outlives its limit says so (false) and
// that file is not waited for again - a stalled disk throttles it once.
TEST(CheckpointWriterTest, AwaitFilesThroughWaitsForTheFileOnItsWayToDisk) {
  const std::string dir = Dir("await");
  absl::Notification writing4, release4, writing6, release6;
  CheckpointWriter::Options options{dir, "job-5", 0, 1, 10, nullptr};
  options.more = [&](int64_t step) {
    if (step == 4) {
      writing4.Notify();
      release4.WaitForNotification();
    }
    if (step == 6) {
      writing6.Notify();
      release6.WaitForNotification();
    }
    return CheckpointWriter::Options::More{};
  };
  CheckpointWriter writer(options);
  EXPECT_TRUE(writer.AwaitFilesThrough(100, absl::ZeroDuration()));  // none
  writer.Add(4, 0, "x");
  writing4.WaitForNotification();
  EXPECT_TRUE(writer.AwaitFilesThrough(3, absl::Seconds(30)));
  absl::Notification waited;
  bool result = false;
  std::thread waiter([&] {
    result = writer.AwaitFilesThrough(4, absl::Seconds(60));
    waited.Notify();
  });
  EXPECT_FALSE(waited.WaitForNotificationWithTimeout(absl::Milliseconds(100)))
      << "returned while step 4's file was still being written";
  release4.Notify();
  waiter.join();
  EXPECT_TRUE(result);
  EXPECT_EQ(writer.last_written(), 4);  // on disk when the wait ended

  writer.Add(6, 0, "y");
  writing6.WaitForNotification();
  const absl::Time start = absl::Now();
  EXPECT_FALSE(writer.AwaitFilesThrough(6, absl::Milliseconds(50)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(50));
  // Given up: step 6's file is not waited for again, a newer one is.
  EXPECT_TRUE(writer.AwaitFilesThrough(6, absl::Seconds(30)));
  writer.Add(8, 0, "z");
  EXPECT_FALSE(writer.AwaitFilesThrough(8, absl::Milliseconds(10)));
  release6.Notify();
  writer.Flush();
  EXPECT_TRUE(writer.AwaitFilesThrough(100, absl::ZeroDuration()));
  EXPECT_EQ(ListCheckpointSteps(Env::Default(), dir, "job-5", 0),
            (std::vector<int64_t>{4, 6, 8}));
}

}  // namespace
}  // namespace fulcrum

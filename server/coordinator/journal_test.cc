#include "server/coordinator/journal.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include <thread>

#include "absl/strings/str_cat.h"
#include "common/testing/fault_injection_env.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

std::string TempDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
}

v1::StateRecord JobRecord(const std::string& id, v1::JobState state,
                          int64_t generation) {
  v1::StateRecord r;
  r.mutable_job()->mutable_status()->set_job_id(id);
  r.mutable_job()->mutable_status()->set_state(state);
  r.mutable_job()->mutable_status()->set_generation(generation);
  return r;
}

TEST(JournalTest, ReplaysTheNewestRecordOfEachJobAcrossSnapshots) {
  const std::string dir = TempDir("store1");
  v1::CoordinatorState state;
  {
    auto store = Journal::Open(Env::Default(), dir, &state);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ(state.jobs_size(), 0);
    ASSERT_TRUE((*store)->Sync((*store)->Add(JobRecord("job-1", v1::RUNNING, 1))).ok());
    ASSERT_TRUE((*store)->Sync((*store)->Add(JobRecord("job-2", v1::PENDING, 0))).ok());
    ASSERT_TRUE((*store)->Sync((*store)->Add(JobRecord("job-1", v1::RUNNING, 3))).ok());
    v1::StateRecord ids;
    ids.mutable_counters()->set_next_member(65);
    ASSERT_TRUE((*store)->Sync((*store)->Add(ids)).ok());
  }
  {
    auto store = Journal::Open(Env::Default(), dir, &state);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_EQ(state.jobs_size(), 2);
    EXPECT_EQ(state.jobs(0).status().job_id(), "job-1");
    EXPECT_EQ(state.jobs(0).status().generation(), 3);
    EXPECT_EQ(state.jobs(1).status().state(), v1::PENDING);
    EXPECT_EQ(state.counters().next_member(), 65);
    // A snapshot holds it all; later records still apply on top.
    ASSERT_TRUE((*store)->Sync((*store)->AddSnapshot(state)).ok());
    EXPECT_EQ((*store)->records_since_snapshot(), 0);
    ASSERT_TRUE((*store)->Sync((*store)->Add(JobRecord("job-2", v1::SUCCEEDED, 1))).ok());
  }
  auto store = Journal::Open(Env::Default(), dir, &state);
  ASSERT_TRUE(store.ok());
  ASSERT_EQ(state.jobs_size(), 2);
  EXPECT_EQ(state.jobs(0).status().generation(), 3);
  EXPECT_EQ(state.jobs(1).status().state(), v1::SUCCEEDED);
  EXPECT_EQ(state.counters().next_member(), 65);
}

TEST(JournalTest, ATornTailIsCutAndTheRestKept) {
  const std::string dir = TempDir("store2");
  v1::CoordinatorState state;
  {
    auto store = Journal::Open(Env::Default(), dir, &state);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Sync((*store)->Add(JobRecord("job-1", v1::RUNNING, 1))).ok());
    ASSERT_TRUE((*store)->Sync((*store)->Add(JobRecord("job-1", v1::RUNNING, 2))).ok());
  }
  struct stat st;
  ASSERT_EQ(stat((dir + "/log").c_str(), &st), 0);
  const off_t whole = st.st_size;
  // A crash in the middle of a third append: half a record.
  {
    std::ofstream log(dir + "/log", std::ios::app | std::ios::binary);
    log.write("\x40\x00\x00\x00\x12\x34", 6);
  }
  {
    auto store = Journal::Open(Env::Default(), dir, &state);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_EQ(state.jobs_size(), 1);
    EXPECT_EQ(state.jobs(0).status().generation(), 2);
    ASSERT_EQ(stat((dir + "/log").c_str(), &st), 0);
    EXPECT_EQ(st.st_size, whole) << "the torn tail is cut";
    ASSERT_TRUE((*store)->Sync((*store)->Add(JobRecord("job-1", v1::RUNNING, 3))).ok());
  }
  // A flipped byte in the last record: it is dropped, the first kept.
  {
    std::fstream log(dir + "/log",
                     std::ios::in | std::ios::out | std::ios::binary);
    log.seekp(whole + 10);
    log.put('\x7f');
  }
  auto store = Journal::Open(Env::Default(), dir, &state);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(state.jobs(0).status().generation(), 2);
}

TEST(JournalTest, ACorruptSnapshotIsAnError) {
  const std::string dir = TempDir("store3");
  mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/snapshot") << "not a snapshot \xff\xff\xff";
  v1::CoordinatorState state;
  EXPECT_EQ(Journal::Open(Env::Default(), dir, &state).status().code(),
            absl::StatusCode::kDataLoss);
}

// Group commit: one Sync writes every record queued before it with one
// fdatasync; records added and synced by many threads at once are all
// durable after their Sync, the newest of each job last.
TEST(JournalTest, ASyncWritesEverythingQueuedWithOneFsync) {
  const std::string dir = TempDir("store4");
  testing::FaultInjectionEnv env;
  v1::CoordinatorState state;
  auto store = Journal::Open(&env, dir, &state);
  ASSERT_TRUE(store.ok());
  const int syncs_before = env.Calls(testing::FaultInjectionEnv::Op::kSync);
  uint64_t last = 0;
  for (int g = 1; g <= 50; ++g)
    last = (*store)->Add(JobRecord("job-a", v1::RUNNING, g));
  ASSERT_TRUE((*store)->Sync(last).ok());
  EXPECT_EQ(env.Calls(testing::FaultInjectionEnv::Op::kSync) - syncs_before, 1);
  EXPECT_TRUE((*store)->Sync(last - 10).ok()) << "durable already: no write";
  EXPECT_EQ(env.Calls(testing::FaultInjectionEnv::Op::kSync) - syncs_before, 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int g = 1; g <= 25; ++g) {
        const uint64_t ticket = (*store)->Add(
            JobRecord(absl::StrCat("job-", t), v1::RUNNING, g));
        EXPECT_TRUE((*store)->Sync(ticket).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  store->reset();
  auto again = Journal::Open(&env, dir, &state);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(state.jobs_size(), 9);
  for (const v1::PersistedJob& j : state.jobs()) {
    EXPECT_EQ(j.status().generation(), j.status().job_id() == "job-a" ? 50 : 25)
        << j.status().job_id();
  }
}

// A failed fsync fails its batch's tickets, cuts what it wrote, and the
// next record is written and replayed normally.
TEST(JournalTest, AFailedWriteFailsItsRecordsAndLeavesTheLogWhole) {
  const std::string dir = TempDir("store5");
  testing::FaultInjectionEnv env;
  v1::CoordinatorState state;
  auto store = Journal::Open(&env, dir, &state);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Sync((*store)->Add(JobRecord("job-1", v1::RUNNING, 1)))
                  .ok());
  env.FailOn(testing::FaultInjectionEnv::Op::kSync, "/log",
             absl::InternalError("injected: disk gone"));
  EXPECT_EQ((*store)->Sync((*store)->Add(JobRecord("job-2", v1::PENDING, 0)))
                .code(),
            absl::StatusCode::kInternal);
  EXPECT_TRUE((*store)->Sync((*store)->Add(JobRecord("job-1", v1::RUNNING, 2)))
                  .ok());
  store->reset();
  auto again = Journal::Open(&env, dir, &state);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(state.jobs_size(), 1) << "job-2 never became durable";
  EXPECT_EQ(state.jobs(0).status().generation(), 2) << "nor did it tear the log";
}

}  // namespace
}  // namespace fulcrum

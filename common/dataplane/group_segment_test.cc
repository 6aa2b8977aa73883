// GroupSegment: joining and admission, push records, parameters, failure,
// and futex wake-ups between threads (processes share them the same way).
#include "common/dataplane/group_segment.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>

#include <thread>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

std::string UniqueNonce(const char* name) {
  return std::string(name) + std::to_string(getpid()) +
         std::to_string(absl::ToUnixNanos(absl::Now()));
}

TEST(GroupSegmentTest, MembersJoinUntilAdmissionCloses) {
  const std::string nonce = UniqueNonce("join");
  EXPECT_EQ(GroupSegment::Join(nonce, 1, 3, 2, 100).status().code(),
            absl::StatusCode::kNotFound);  // no leader yet
  auto leader = GroupSegment::Create(nonce, 3, 2, 100);
  ASSERT_TRUE(leader.ok()) << leader.status();
  EXPECT_EQ((*leader)->joined(), 1);
  auto one = GroupSegment::Join(nonce, 1, 3, 2, 100);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ((*leader)->joined(), 2);
  // Slot 1 is taken; a model of another size is not this group's.
  EXPECT_EQ(GroupSegment::Join(nonce, 1, 3, 2, 100).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(GroupSegment::Join(nonce, 2, 3, 2, 1 << 20).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Another group's nonce finds nothing.
  EXPECT_EQ(GroupSegment::Join(nonce + "x", 2, 3, 2, 100).status().code(),
            absl::StatusCode::kNotFound);
  const std::vector<bool> joined = (*leader)->CloseAdmission();
  EXPECT_EQ(joined, (std::vector<bool>{true, true, false}));
  // Closed: the name is gone and slot 2 stays shut.
  EXPECT_EQ(GroupSegment::Join(nonce, 2, 3, 2, 100).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(GroupSegmentTest, PushesAndParametersTravelWithTheirRecords) {
  const std::string nonce = UniqueNonce("records");
  auto leader = GroupSegment::Create(nonce, 2, 2, 8);
  ASSERT_TRUE(leader.ok());
  auto member = GroupSegment::Join(nonce, 1, 2, 2, 8);
  ASSERT_TRUE(member.ok());
  (*leader)->CloseAdmission();

  GroupPush got;
  EXPECT_FALSE((*leader)->Pushed(1, 1, 0, &got));
  (*member)->grads(1)[5] = 2.5f;
  (*member)->Publish(1, 1, 0, {3, 7, 10, 13, true});
  ASSERT_TRUE((*leader)->Pushed(1, 1, 0, &got));
  EXPECT_EQ(got.samples, 3);
  EXPECT_EQ(got.chunk, 7);
  EXPECT_EQ(got.end, 13);
  EXPECT_TRUE(got.stop);
  EXPECT_EQ((*leader)->grads(1)[5], 2.5f);  // the same memory
  EXPECT_FALSE((*leader)->Pushed(1, 1, 1, &got));  // not step 1's
  EXPECT_FALSE((*leader)->Pushed(1, 0, 0, &got));  // nor partition 0's

  EXPECT_EQ((*member)->ParamsClock(0), -1);
  EXPECT_EQ((*member)->opened(), -1);
  (*leader)->params()[3] = 1.5f;
  (*leader)->PublishParams(0, 4);
  (*leader)->SetOpened(4);
  EXPECT_EQ((*member)->ParamsClock(0), 4);
  EXPECT_EQ((*member)->opened(), 4);
  EXPECT_EQ((*member)->params()[3], 1.5f);
  bool stop = false;
  EXPECT_EQ((*member)->done(&stop), -1);
  (*leader)->SetDone(5, true);
  EXPECT_EQ((*member)->done(&stop), 5);
  EXPECT_TRUE(stop);

  EXPECT_EQ((*member)->failed(), 0);
  (*leader)->Fail(static_cast<int>(absl::StatusCode::kAborted));
  (*leader)->Fail(static_cast<int>(absl::StatusCode::kUnavailable));
  EXPECT_EQ((*member)->failed(), static_cast<int>(absl::StatusCode::kAborted));
  EXPECT_FALSE((*leader)->left(1));
  (*member)->Leave(1);
  EXPECT_TRUE((*leader)->left(1));
  EXPECT_EQ((*leader)->pid(1), getpid());
}

TEST(GroupSegmentTest, APublicationWakesAWaiter) {
  const std::string nonce = UniqueNonce("wake");
  auto leader = GroupSegment::Create(nonce, 2, 1, 4);
  ASSERT_TRUE(leader.ok());
  auto member = GroupSegment::Join(nonce, 1, 2, 1, 4);
  ASSERT_TRUE(member.ok());
  const uint32_t seen = (*leader)->pushes_seq();
  const absl::Time start = absl::Now();
  std::thread publisher([&] {
    absl::SleepFor(absl::Milliseconds(50));
    (*member)->Publish(1, 0, 0, {1, -1, 0, 0, false});
  });
  // Woken by the publication long before the 10 s bound.
  GroupPush got;
  while (!(*leader)->Pushed(1, 0, 0, &got))
    (*leader)->WaitPushes(seen, absl::Seconds(10));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  publisher.join();
  // A wait on a value that already moved returns at once.
  const absl::Time again = absl::Now();
  (*leader)->WaitPushes(seen, absl::Seconds(10));
  EXPECT_LT(absl::Now() - again, absl::Seconds(5));
}

// The names of this process's segments under /dev/shm.
std::set<std::string> OwnSegments() {
  std::set<std::string> names;
  const std::string prefix = "fulcrum-" + std::to_string(getpid()) + "-";
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return names;
  while (dirent* e = readdir(d))
    if (std::string(e->d_name).rfind(prefix, 0) == 0) names.insert(e->d_name);
  closedir(d);
  return names;
}

TEST(GroupSegmentTest, TheSegmentIsPrivateAndGoneWithItsLeader) {
  const std::string nonce = UniqueNonce("private");
  const std::set<std::string> before = OwnSegments();
  {
    auto leader = GroupSegment::Create(nonce, 2, 1, 4);
    ASSERT_TRUE(leader.ok());
    std::set<std::string> now = OwnSegments();
    ASSERT_EQ(now.size(), before.size() + 1);
    for (const std::string& name : before) now.erase(name);
    struct stat st;
    ASSERT_EQ(stat(("/dev/shm/" + *now.begin()).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    auto member = GroupSegment::Join(nonce, 1, 2, 1, 4);
    ASSERT_TRUE(member.ok());
  }
  // The leader ended without closing admission: its destructor unlinked
  // the name.
  EXPECT_EQ(OwnSegments(), before);
  EXPECT_EQ(GroupSegment::Join(nonce, 1, 2, 1, 4).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace fulcrum

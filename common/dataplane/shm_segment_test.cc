#include "common/dataplane/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

bool Exists(const std::string& name) {
  struct stat st;
  return stat(("/dev/shm" + name).c_str(), &st) == 0;
}

TEST(ShmSegmentTest, AttachSeesTheCreatorsBytesAndUnlinksTheName) {
  auto created = ShmSegment::Create(1000, 3000);
  ASSERT_TRUE(created.ok()) << created.status();
  ShmSegment& a = **created;
  EXPECT_GE(a.grad_bytes(), 1000);
  EXPECT_GE(a.params_bytes(), 3000);
  EXPECT_TRUE(Exists(a.name()));
  struct stat st;
  ASSERT_EQ(stat(("/dev/shm" + a.name()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);

  std::memcpy(a.at(a.grad_offset()), "gradient", 8);
  auto attached = ShmSegment::Attach(a.name(), a.nonce());
  ASSERT_TRUE(attached.ok()) << attached.status();
  ShmSegment& b = **attached;
  EXPECT_FALSE(Exists(a.name())) << "the shard unlinks the name it mapped";
  EXPECT_EQ(b.grad_offset(), a.grad_offset());
  EXPECT_EQ(b.params_offset(), a.params_offset());
  EXPECT_EQ(std::string(b.at(b.grad_offset()), 8), "gradient");
  std::memcpy(b.at(b.params_offset()), "params", 6);
  EXPECT_EQ(std::string(a.at(a.params_offset()), 6), "params");
}

// Issue 40, item 7: a member that shrinks its own segment under the
// shard's mapping killed the shard with SIGBUS. Now the pages past the
// new end read zeros and the segment says it was truncated; a segment not
// truncated is untouched, and a SIGBUS elsewhere still kills.
TEST(ShmSegmentTest, ASegmentShrunkUnderItsMappingReadsZerosNotSigbus) {
  auto created = ShmSegment::Create(1 << 16, 1 << 16);
  ASSERT_TRUE(created.ok()) << created.status();
  ShmSegment& a = **created;
  std::memset(a.at(a.grad_offset()), 7, a.grad_bytes());
  // The attacker keeps a descriptor before the shard unlinks the name.
  const int fd = shm_open(a.name().c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  auto attached = ShmSegment::Attach(a.name(), a.nonce());
  ASSERT_TRUE(attached.ok()) << attached.status();
  ShmSegment& b = **attached;
  auto intact = ShmSegment::Create(1 << 12, 1 << 12);
  ASSERT_TRUE(intact.ok());
  EXPECT_FALSE(b.truncated());
  ASSERT_EQ(ftruncate(fd, 4096), 0);  // the header's page stays
  close(fd);
  EXPECT_EQ(*static_cast<volatile char*>(b.at(b.grad_offset())), 7)
      << "the first page is still the file's";
  int64_t sum = 0;
  for (int64_t off = 4096; off < b.grad_offset() + b.grad_bytes(); off += 4096)
    sum += *static_cast<volatile char*>(b.at(off));
  EXPECT_EQ(sum, 0) << "past the new end: zeros";
  EXPECT_TRUE(b.truncated());
  std::memcpy(b.at(b.params_offset()), "written", 7);  // writes survive too
  EXPECT_FALSE((*intact)->truncated());
  EXPECT_DEATH(
      {
        const int other = shm_open("/fulcrum-test-unguarded", O_RDWR | O_CREAT, 0600);
        ftruncate(other, 8192);
        char* p = static_cast<char*>(
            mmap(nullptr, 8192, PROT_READ, MAP_SHARED, other, 0));
        ftruncate(other, 0);
        shm_unlink("/fulcrum-test-unguarded");
        volatile char c = p[4096];
        (void)c;
      },
      "");
}

TEST(ShmSegmentTest, AWrongNonceIsRefusedAndLeavesTheName) {
  auto a = ShmSegment::Create(64, 64);
  ASSERT_TRUE(a.ok());
  std::string nonce = (*a)->nonce();
  nonce[0] ^= 1;
  auto b = ShmSegment::Attach((*a)->name(), nonce);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(Exists((*a)->name()));
  EXPECT_EQ(ShmSegment::Attach((*a)->name(), "short").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShmSegmentTest, NamesOutsideTheSchemeAreNotOpened) {
  for (const char* name : {"", "fulcrum-1-0123456789abcdef", "/etc/passwd",
                           "/fulcrum-1-0123", "/fulcrum-x-0123456789abcdef",
                           "/fulcrum-1-0123456789ABCDEF", "/other"}) {
    auto s = ShmSegment::Attach(name, std::string(16, 'x'));
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_NE(s.status().message().find("hello.shm.name"), std::string::npos);
  }
  EXPECT_EQ(ShmSegment::Attach("/fulcrum-1-0123456789abcdef",
                               std::string(16, 'x'))
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

TEST(ShmSegmentTest, AnotherModeIsRefused) {
  auto a = ShmSegment::Create(64, 64);
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(chmod(("/dev/shm" + (*a)->name()).c_str(), 0644), 0);
  auto b = ShmSegment::Attach((*a)->name(), (*a)->nonce());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(b.status().message().find("mode"), std::string::npos);
}

TEST(ShmSegmentTest, RangesOutsideARegionAreRefused) {
  auto a = ShmSegment::Create(256, 256);
  ASSERT_TRUE(a.ok());
  const ShmSegment& s = **a;
  EXPECT_TRUE(s.Grad(s.grad_offset(), s.grad_bytes(), "push.shm").ok());
  EXPECT_TRUE(s.Params(s.params_offset() + 8, 16, "params.shm").ok());
  for (auto [offset, bytes] :
       std::vector<std::pair<int64_t, int64_t>>{
           {s.grad_offset() - 4, 8},
           {s.grad_offset(), s.grad_bytes() + 4},
           {s.grad_offset() + 2, 4},
           {s.grad_offset(), -4},
           {s.params_offset(), 4},
           {int64_t{1} << 62, int64_t{1} << 62}}) {
    auto r = s.Grad(offset, bytes, "push.shm");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << offset << " " << bytes;
    EXPECT_NE(r.status().message().find("push.shm"), std::string::npos);
  }
}

TEST(ShmSegmentTest, TheCreatorUnlinksANameNobodyMapped) {
  std::string name;
  {
    auto a = ShmSegment::Create(64, 64);
    ASSERT_TRUE(a.ok());
    name = (*a)->name();
    EXPECT_TRUE(Exists(name));
  }
  EXPECT_FALSE(Exists(name));
}

TEST(ShmSegmentTest, SweepRemovesNamesOfDeadCreatorsOnly) {
  // A child creates a segment and dies by SIGKILL before anyone maps it.
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto a = ShmSegment::Create(64, 64);
    auto b = ShmSegment::Create(64, 64);
    const std::string name =
        a.ok() && b.ok() ? (*a)->name() + " " + (*b)->name() : "";
    (void)!write(pipe_fds[1], name.data(), name.size());
    close(pipe_fds[1]);
    pause();  // killed
    _exit(0);
  }
  close(pipe_fds[1]);
  char buffer[128];
  const ssize_t n = read(pipe_fds[0], buffer, sizeof(buffer));
  close(pipe_fds[0]);
  ASSERT_GT(n, 0);
  const std::string names(buffer, n);
  ASSERT_NE(names.find(' '), std::string::npos) << names;
  const std::string dead = names.substr(0, names.find(' '));
  const std::string fresh = names.substr(names.find(' ') + 1);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  auto alive = ShmSegment::Create(64, 64);  // ours: our pid lives
  ASSERT_TRUE(alive.ok());
  ASSERT_TRUE(Exists(dead));
  ASSERT_TRUE(Exists(fresh));
  // `dead` was left an hour ago; `fresh` just now (it could be a live
  // process's in another pid namespace that shares /dev/shm).
  const timespec an_hour_ago[2] = {{time(nullptr) - 3600, 0},
                                   {time(nullptr) - 3600, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, ("/dev/shm" + dead).c_str(), an_hour_ago, 0),
            0);
  EXPECT_GE(ShmSegment::SweepStale(), 1);
  EXPECT_FALSE(Exists(dead));
  EXPECT_TRUE(Exists(fresh)) << "swept a segment younger than min_age";
  EXPECT_TRUE(Exists((*alive)->name()));
  shm_unlink(fresh.c_str());
}

// A segment takes at most half of the shared memory free (here measured
// on the test's own directory, whose free space is what it is).
TEST(ShmSegmentTest, ASegmentMayNotTakeMoreThanHalfOfWhatIsFree) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string d = dir != nullptr ? dir : "/tmp";
  struct statvfs st;
  ASSERT_EQ(statvfs(d.c_str(), &st), 0);
  const int64_t free_bytes = static_cast<int64_t>(st.f_bavail) * st.f_frsize;
  ASSERT_GT(free_bytes, 1 << 20);
  EXPECT_TRUE(ShmSegment::FitsIn(d, 4096).ok());
  const absl::Status s = ShmSegment::FitsIn(d, free_bytes / 2 + (1 << 20));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("more than half"), std::string::npos) << s;
  EXPECT_EQ(ShmSegment::FitsIn(d + "/no-such-dir", 1).code(),
            absl::StatusCode::kNotFound);
  // And Create asks it of /dev/shm.
  EXPECT_EQ(ShmSegment::Create(int64_t{1} << 50, 0).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(ShmSegmentTest, IsOnThisHost) {
  EXPECT_TRUE(IsOnThisHost("127.0.0.1:5000"));
  EXPECT_TRUE(IsOnThisHost("localhost:1"));
  EXPECT_TRUE(IsOnThisHost("[::1]:1"));
  EXPECT_TRUE(IsOnThisHost("ipv4:127.0.0.1:80"));
  EXPECT_FALSE(IsOnThisHost("192.0.2.1:5000"));  // TEST-NET-1
  EXPECT_FALSE(IsOnThisHost("example.com:5000"));
}

}  // namespace
}  // namespace fulcrum

#include "common/dataplane/host_id.h"

#include <sys/stat.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/testing/process.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

TEST(HostIdTest, TheBootIdTheShmTokenAndTheUserMakeTheIdentity) {
  const std::string dir = testing::TestTempDir();
  const std::string boot = dir + "/boot_id";
  std::ofstream(boot) << "0f1e2d3c-aaaa-bbbb-cccc-000000000001\n";
  mkdir((dir + "/shm-a").c_str(), 0755);
  mkdir((dir + "/shm-b").c_str(), 0755);
  const std::string a = HostId(boot, dir + "/shm-a");
  EXPECT_EQ(a.rfind("0f1e2d3c-aaaa-bbbb-cccc-000000000001/", 0), 0u) << a;
  EXPECT_EQ(a.substr(a.rfind('/') + 1), std::to_string(geteuid())) << a;
  EXPECT_EQ(HostId(boot, dir + "/shm-a"), a) << "stable";
  EXPECT_NE(HostId(boot, dir + "/shm-b"), a) << "another shm mount";
  const std::string other = dir + "/boot_id_2";
  std::ofstream(other) << "99999999-aaaa-bbbb-cccc-000000000002\n";
  EXPECT_NE(HostId(other, dir + "/shm-a"), a) << "another machine";
  EXPECT_LE(a.size(), kMaxHostIdBytes);
  EXPECT_EQ(HostId(dir + "/missing", dir + "/shm-a"), "");
  EXPECT_EQ(HostId(boot, dir + "/missing"), "");
}

// The token is what the processes read out of the shm directory: another
// token there (the directory of another mount) is another identity.
TEST(HostIdTest, TheTokenIsReadFromTheShmDirectory) {
  const std::string dir = testing::TestTempDir() + "/shm-token";
  mkdir(dir.c_str(), 0755);
  const std::string boot = testing::TestTempDir() + "/boot_id_t";
  std::ofstream(boot) << "0f1e2d3c-aaaa-bbbb-cccc-000000000003\n";
  const std::string a = HostId(boot, dir);
  const std::string token = testing::ReadFile(dir + "/fulcrum-host-token");
  ASSERT_EQ(token.size(), 33u) << token;
  EXPECT_NE(a.find(token.substr(0, 32)), std::string::npos) << a;
  std::ofstream(dir + "/fulcrum-host-token") << std::string(32, 'a') << "\n";
  const std::string b = HostId(boot, dir);
  EXPECT_NE(b, a);
  EXPECT_NE(b.find(std::string(32, 'a')), std::string::npos) << b;
}

// Processes starting at once agree on the one token linked first.
TEST(HostIdTest, RacingFirstCallersAgree) {
  const std::string dir = testing::TestTempDir() + "/shm-race";
  mkdir(dir.c_str(), 0755);
  const std::string boot = testing::TestTempDir() + "/boot_id_r";
  std::ofstream(boot) << "0f1e2d3c-aaaa-bbbb-cccc-000000000004\n";
  std::vector<std::string> ids(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] { ids[i] = HostId(boot, dir); });
  for (std::thread& t : threads) t.join();
  for (const std::string& id : ids) EXPECT_EQ(id, ids[0]);
  EXPECT_FALSE(ids[0].empty());
}

TEST(HostIdTest, ThisMachineHasOne) {
  EXPECT_FALSE(HostId().empty());
}

}  // namespace
}  // namespace fulcrum

#include "common/dataplane/host_id.h"

#include <sys/stat.h>

#include <fstream>

#include "common/testing/process.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

TEST(HostIdTest, TheBootIdAndTheShmMountMakeTheIdentity) {
  const std::string dir = testing::TestTempDir();
  const std::string boot = dir + "/boot_id";
  std::ofstream(boot) << "0f1e2d3c-aaaa-bbbb-cccc-000000000001\n";
  mkdir((dir + "/shm-a").c_str(), 0755);
  mkdir((dir + "/shm-b").c_str(), 0755);
  const std::string a = HostId(boot, dir + "/shm-a");
  EXPECT_EQ(a.rfind("0f1e2d3c-aaaa-bbbb-cccc-000000000001/", 0), 0u) << a;
  EXPECT_EQ(HostId(boot, dir + "/shm-a"), a) << "stable";
  EXPECT_NE(HostId(boot, dir + "/shm-b"), a) << "another shm mount";
  const std::string other = dir + "/boot_id_2";
  std::ofstream(other) << "99999999-aaaa-bbbb-cccc-000000000002\n";
  EXPECT_NE(HostId(other, dir + "/shm-a"), a) << "another machine";
  EXPECT_LE(a.size(), kMaxHostIdBytes);
  EXPECT_EQ(HostId(dir + "/missing", dir + "/shm-a"), "");
  EXPECT_EQ(HostId(boot, dir + "/missing"), "");
}

TEST(HostIdTest, ThisMachineHasOne) {
  EXPECT_FALSE(HostId().empty());
}

}  // namespace
}  // namespace fulcrum

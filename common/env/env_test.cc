#include "common/env/env.h"

#include <algorithm>

#include "common/testing/fault_injection_env.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

std::string Dir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
}

TEST(EnvTest, WritesAtomicallyReadsListsAndRemoves) {
  Env* env = Env::Default();
  const std::string dir = Dir("env/a/b");
  ASSERT_TRUE(WriteFileAtomically(env, dir + "/f", "hello").ok());
  EXPECT_EQ(*env->ReadFile(dir + "/f"), "hello");
  ASSERT_TRUE(WriteFileAtomically(env, dir + "/f", "again").ok());
  EXPECT_EQ(*env->ReadFile(dir + "/f"), "again");
  EXPECT_EQ(*env->GetChildren(dir), (std::vector<std::string>{"f"}))
      << "no temp file left";
  EXPECT_EQ(env->ReadFile(dir + "/missing").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(env->RemoveDir(dir).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(env->RemoveFile(dir + "/f").ok());
  EXPECT_TRUE(env->RemoveDir(dir).ok());
  EXPECT_EQ(Dirname("a/b/c"), "a/b");
  EXPECT_EQ(Dirname("c"), ".");
}

TEST(EnvTest, AppendSyncTruncate) {
  Env* env = Env::Default();
  const std::string path = Dir("env_log");
  {
    auto f = env->NewAppendableFile(path);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Append("ab").ok());
    ASSERT_TRUE((*f)->Sync().ok());
  }
  auto f = env->NewAppendableFile(path);
  ASSERT_TRUE((*f)->Append("cd").ok());
  EXPECT_EQ(*env->ReadFile(path), "abcd");
  ASSERT_TRUE((*f)->Truncate().ok());
  ASSERT_TRUE((*f)->Append("e").ok());
  EXPECT_EQ(*env->ReadFile(path), "e");
  ASSERT_TRUE(env->TruncateFile(path, 0).ok());
  EXPECT_EQ(*env->ReadFile(path), "");
}

// A failed write of the atomic replacement keeps the old file whole.
TEST(FaultInjectionEnvTest, AFailedAtomicWriteKeepsTheOldFile) {
  testing::FaultInjectionEnv env(absl::FromUnixSeconds(5));
  const std::string path = Dir("env_atomic/f");
  ASSERT_TRUE(WriteFileAtomically(&env, path, "old").ok());
  env.FailOn(testing::FaultInjectionEnv::Op::kAppend, "env_atomic",
             absl::InternalError("injected"));
  EXPECT_EQ(WriteFileAtomically(&env, path, "new").code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(*env.ReadFile(path), "old");
  EXPECT_FALSE(env.FileExists(path + ".tmp"));
  EXPECT_TRUE(WriteFileAtomically(&env, path, "new").ok()) << "one fault";
  EXPECT_EQ(*env.ReadFile(path), "new");
  // The clock moves only when told.
  EXPECT_EQ(env.Now(), absl::FromUnixSeconds(5));
  env.Advance(absl::Seconds(2));
  EXPECT_EQ(env.Now(), absl::FromUnixSeconds(7));
}

}  // namespace
}  // namespace fulcrum

#include "common/net/member_credential.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

TEST(MemberCredentialTest, HmacMatchesRfc4231Case2) {
  EXPECT_EQ(HmacHex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(MemberCredentialTest, ASecretIsKeptAcrossRestartsAndChecksItsOwn) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  auto first = MemberSecret::LoadOrCreate(dir);
  ASSERT_TRUE(first.ok()) << first.status();
  auto again = MemberSecret::LoadOrCreate(dir);
  ASSERT_TRUE(again.ok());
  const std::string c = first->Credential("worker/w-3");
  EXPECT_TRUE(again->Check("worker/w-3", c)) << "the restarted coordinator";
  EXPECT_FALSE(again->Check("worker/w-4", c)) << "another member's";
  EXPECT_FALSE(MemberSecret::Random().Check("worker/w-3", c));
  EXPECT_FALSE(first->Check("worker/w-3", ""));
}

TEST(MemberCredentialTest, MetadataRoundTripsAndRejectsMalformed) {
  auto claim = ParseMemberMetadata(MemberMetadataValue("w-1", "abc"));
  ASSERT_TRUE(claim.has_value());
  EXPECT_EQ(claim->id, "w-1");
  EXPECT_EQ(claim->credential, "abc");
  EXPECT_FALSE(ParseMemberMetadata("w-1").has_value());
  EXPECT_FALSE(ParseMemberMetadata(":abc").has_value());
  EXPECT_FALSE(ParseMemberMetadata("w-1:").has_value());
}

}  // namespace
}  // namespace fulcrum

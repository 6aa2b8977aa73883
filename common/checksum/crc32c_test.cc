#include "common/checksum/crc32c.h"

#include <string>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

TEST(Crc32cTest, KnownVectors) {
  // RFC 3720 B.4 and the common check value.
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  std::string ones(32, '\xff');
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  std::string inc(32, 0);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<char>(i);
  EXPECT_EQ(Crc32c(inc.data(), inc.size()), 0x46DD794Eu);
}

TEST(Crc32cTest, IncrementalEqualsWhole) {
  const std::string s = "The quick brown fox jumps over the lazy dog";
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    EXPECT_EQ(Crc32c(s.data() + cut, s.size() - cut, Crc32c(s.data(), cut)),
              Crc32c(s.data(), s.size()));
  }
}

}  // namespace
}  // namespace fulcrum

#include "common/tensor/bytes.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

TEST(BytesTest, WhatIsAppendedReadsBackInOrder) {
  std::string out;
  AppendRaw(&out, uint32_t{7});
  AppendRaw(&out, int64_t{-3});
  const std::vector<float> values = {1.5f, -2.0f, 3.25f};
  AppendRawArray(&out, values.data(), values.size());
  out += "tail";
  ASSERT_EQ(out.size(), 4u + 8u + 12u + 4u);

  ByteReader r(out);
  uint32_t a;
  int64_t b;
  std::vector<float> back(3);
  std::string_view tail;
  ASSERT_TRUE(r.Get(&a));
  ASSERT_TRUE(r.Get(&b));
  ASSERT_TRUE(r.GetArray(back.data(), back.size()));
  ASSERT_TRUE(r.Bytes(4, &tail));
  EXPECT_EQ(a, 7u);
  EXPECT_EQ(b, -3);
  EXPECT_EQ(back, values);
  EXPECT_EQ(tail, "tail");
  EXPECT_EQ(r.left(), 0u);
}

TEST(BytesTest, AShortReadFailsAndConsumesNothing) {
  std::string out;
  AppendRaw(&out, uint16_t{0xBEEF});
  out.push_back('x');  // 3 bytes
  ByteReader r(out);
  uint32_t wide;
  EXPECT_FALSE(r.Get(&wide));
  EXPECT_EQ(r.left(), 3u);
  float two[2];
  EXPECT_FALSE(r.GetArray(two, 2));
  std::string_view v;
  EXPECT_FALSE(r.Bytes(4, &v));
  EXPECT_EQ(r.left(), 3u);
  uint16_t narrow;
  ASSERT_TRUE(r.Get(&narrow));
  EXPECT_EQ(narrow, 0xBEEF);
  EXPECT_EQ(r.left(), 1u);
}

TEST(BytesTest, AnArrayCountThatWouldOverflowIsAShortRead) {
  const std::string out(16, '\0');
  ByteReader r(out);
  uint64_t dst[2];
  EXPECT_FALSE(r.GetArray(dst, SIZE_MAX / 4));
  EXPECT_EQ(r.left(), 16u);
  EXPECT_TRUE(r.GetArray(dst, 2));
}

}  // namespace
}  // namespace fulcrum

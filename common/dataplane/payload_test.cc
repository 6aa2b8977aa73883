#include "common/dataplane/payload.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

TEST(PayloadTest, Bf16RoundsToNearestEvenAndKeepsSpecials) {
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f)), 1.0f);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(-2.5f)), -2.5f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 0x1p-8f)), 1.0f);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: to 1 + 2^-6.
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 0x1p-8f + 0x1p-20f)), 1.0f + 0x1p-7f);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(INFINITY)), INFINITY);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(-INFINITY)), -INFINITY);
}

TEST(PayloadTest, Fp16RoundTripsItsOwnValuesAndSaturates) {
  // Every finite fp16 value survives a round trip through float.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if (((h >> 10) & 0x1f) == 0x1f) continue;
    const float f = Fp16ToFloat(static_cast<uint16_t>(h));
    ASSERT_EQ(FloatToFp16(f), static_cast<uint16_t>(h)) << h;
  }
  EXPECT_EQ(Fp16ToFloat(FloatToFp16(65504.0f)), 65504.0f);
  EXPECT_EQ(Fp16ToFloat(FloatToFp16(1e6f)), 65504.0f);  // saturates
  EXPECT_EQ(Fp16ToFloat(FloatToFp16(-65530.0f)), -65504.0f);
  EXPECT_EQ(Fp16ToFloat(FloatToFp16(INFINITY)), INFINITY);
  EXPECT_TRUE(std::isnan(Fp16ToFloat(FloatToFp16(std::nanf("")))));
  EXPECT_EQ(Fp16ToFloat(FloatToFp16(0x1p-24f)), 0x1p-24f);  // smallest subnormal
  EXPECT_EQ(Fp16ToFloat(FloatToFp16(0x1p-26f)), 0.0f);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even.
  EXPECT_EQ(Fp16ToFloat(FloatToFp16(1.0f + 0x1p-11f)), 1.0f);
}

// The vectorized bulk encoders equal the one-element ones on every kind of
// value (random bit patterns: normals, subnormals, NaNs, infinities,
// halfway cases), at every length and alignment, in place too.
TEST(PayloadTest, BulkEncodingEqualsElementwise) {
  std::mt19937 rng(11);
  std::vector<float> values(1000);
  for (float& v : values) {
    uint32_t bits = rng();
    if (rng() % 4 == 0) bits = (bits & 0xffff0000u) | 0x8000u;  // a tie
    std::memcpy(&v, &bits, 4);
  }
  values[3] = INFINITY;
  values[4] = -0.0f;
  values[5] = std::numeric_limits<float>::max();
  for (WireEncoding e : {WireEncoding::kBf16, WireEncoding::kFp16}) {
    for (int64_t n : {0, 1, 7, 8, 9, 255, 256, 257, 1000}) {
      for (int64_t skew : {0, 1}) {
        const int64_t count = std::min<int64_t>(n, values.size() - skew);
        std::vector<char> out(2 * count + 1);
        EncodeRun(e, values.data() + skew, count, out.data() + skew % 2);
        std::vector<float> in_place(values.begin() + skew,
                                    values.begin() + skew + count);
        EncodeRun(e, in_place.data(), count,
                  reinterpret_cast<char*>(in_place.data()));
        for (int64_t i = 0; i < count; ++i) {
          const float v = values[skew + i];
          const uint16_t want =
              e == WireEncoding::kBf16 ? FloatToBf16(v) : FloatToFp16(v);
          uint16_t got, got_in_place;
          std::memcpy(&got, out.data() + skew % 2 + 2 * i, 2);
          std::memcpy(&got_in_place,
                      reinterpret_cast<char*>(in_place.data()) + 2 * i, 2);
          ASSERT_EQ(got, want) << EncodingName(e) << " n " << n << " i " << i;
          ASSERT_EQ(got_in_place, want) << EncodingName(e) << " i " << i;
        }
      }
    }
  }
}

TEST(PayloadTest, RelativeErrorIsThatOfTheFormat) {
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 1e-2f);
  for (int i = 0; i < 10000; ++i) {
    const float x = d(rng);
    EXPECT_NEAR(Bf16ToFloat(FloatToBf16(x)), x, std::fabs(x) * 0x1p-8f);
    if (std::fabs(x) > 0x1p-14f) {
      EXPECT_NEAR(Fp16ToFloat(FloatToFp16(x)), x, std::fabs(x) * 0x1p-11f);
    }
  }
}

// A payload split into pieces at every byte offset, elements straddling
// them, decodes and accumulates as the whole.
TEST(PayloadTest, RunsOverPiecesSeeEveryElementOnceInOrder) {
  for (WireEncoding e :
       {WireEncoding::kFp32, WireEncoding::kBf16, WireEncoding::kFp16}) {
    std::vector<float> values(37);
    for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * i - 3.0f;
    std::vector<char> wire(values.size() * ElementBytes(e));
    EncodeRun(e, values.data(), values.size(), wire.data());
    for (size_t cut1 = 0; cut1 <= wire.size(); cut1 += 3) {
      for (size_t cut2 = cut1; cut2 <= wire.size(); cut2 += 5) {
        Payload p;
        p.set_encoding(e);
        p.Add(wire.data(), cut1);
        p.Add(wire.data() + cut1, cut2 - cut1);
        p.Add(wire.data() + cut2, wire.size() - cut2);
        ASSERT_EQ(p.elements(), 37);
        std::vector<float> out(37, -1.0f), acc(37, 1.0f);
        Decode(p, out.data());
        AddScaled(p, 2.0f, acc.data());
        for (size_t i = 0; i < values.size(); ++i) {
          ASSERT_EQ(out[i], values[i]) << EncodingName(e) << " " << cut1
                                       << " " << cut2 << " " << i;
          ASSERT_EQ(acc[i], 1.0f + 2.0f * values[i]);
        }
      }
    }
  }
}

TEST(PayloadTest, SetScaledIsAddScaledOnZerosBitForBit) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (WireEncoding e :
       {WireEncoding::kFp32, WireEncoding::kBf16, WireEncoding::kFp16}) {
    std::vector<float> values(1000);
    for (float& v : values) v = normal(rng);
    values[0] = -0.0f;  // -0 scaled is -0; added to a zero it is +0
    values[1] = 0.0f;
    values[2] = 1e-30f;  // its product underflows (to -0 with w < 0)
    std::vector<char> wire(values.size() * ElementBytes(e));
    EncodeRun(e, values.data(), values.size(), wire.data());
    Payload p;
    p.set_encoding(e);
    p.Add(wire.data(), 501 * ElementBytes(e));  // two pieces
    p.Add(wire.data() + 501 * ElementBytes(e), wire.size() - 501 * ElementBytes(e));
    for (float w : {1.0f, 64.0f, -1e-20f}) {
      std::vector<float> added(values.size(), 0.0f);
      std::vector<float> set(values.size(), std::nanf(""));  // not read
      AddScaled(p, w, added.data());
      SetScaled(p, w, set.data());
      for (size_t i = 0; i < values.size(); ++i) {
        ASSERT_EQ(std::signbit(set[i]), std::signbit(added[i]))
            << EncodingName(e) << " w " << w << " element " << i;
        ASSERT_EQ(set[i], added[i]) << EncodingName(e) << " w " << w << " " << i;
      }
    }
  }
}

TEST(PayloadTest, MaxExponentBoundsTheLargestAndFlagsNonFinite) {
  for (WireEncoding e :
       {WireEncoding::kFp32, WireEncoding::kBf16, WireEncoding::kFp16}) {
    std::vector<float> values = {0.5f, -3.0f, 100.0f, 0.0f};
    std::vector<char> wire(values.size() * ElementBytes(e));
    EncodeRun(e, values.data(), values.size(), wire.data());
    const uint8_t top = MaxExponent(Payload(wire.data(), wire.size(), e));
    EXPECT_LT(100.0f, std::ldexp(1.0f, top - 126)) << EncodingName(e);
    EXPECT_GE(100.0f, std::ldexp(1.0f, top - 127)) << EncodingName(e);
    values[1] = std::numeric_limits<float>::infinity();
    EncodeRun(e, values.data(), values.size(), wire.data());
    EXPECT_EQ(MaxExponent(Payload(wire.data(), wire.size(), e)), 255);
    values[1] = std::nanf("");
    EncodeRun(e, values.data(), values.size(), wire.data());
    EXPECT_EQ(MaxExponent(Payload(wire.data(), wire.size(), e)), 255);
  }
}

TEST(PayloadTest, EncodingNamesAndProtoValues) {
  EXPECT_EQ(*ParseEncoding("bf16", "wire.gradients"), WireEncoding::kBf16);
  absl::StatusOr<WireEncoding> bad = ParseEncoding("int8", "wire.gradients");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("wire.gradients"), std::string::npos);
  EXPECT_EQ(*EncodingFromProto(0, "push.encoding"), WireEncoding::kFp32);
  EXPECT_EQ(*EncodingFromProto(3, "push.encoding"), WireEncoding::kFp16);
  EXPECT_FALSE(EncodingFromProto(9, "push.encoding").ok());
}

}  // namespace
}  // namespace fulcrum

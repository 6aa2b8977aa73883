#include "server/ps/embedding/admission.h"

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

TEST(AdmissionSketchTest, NeverUndercountsAndSaturates) {
  AdmissionSketch sketch(1 << 12);
  for (uint64_t id = 0; id < 2000; ++id) {
    for (uint64_t k = 0; k < id % 7; ++k) sketch.Add(id, 1);
  }
  int exact = 0;
  for (uint64_t id = 0; id < 2000; ++id) {
    const uint32_t e = sketch.Estimate(id);
    EXPECT_GE(e, id % 7) << id;
    exact += e == id % 7;
  }
  EXPECT_GT(exact, 1900);  // 2000 ids in 4096 counters per row: few collisions
  EXPECT_EQ(sketch.Add(99999, 1000), 255u);
  EXPECT_EQ(sketch.Estimate(99999), 255u);
}

TEST(AdmissionSketchTest, OldCountsFade) {
  AdmissionSketch sketch(64);
  sketch.Add(1, 40);
  EXPECT_GE(sketch.Estimate(1), 40u);
  // 8 x 64 more additions halve every counter once.
  for (uint64_t id = 100; id < 100 + 8 * 64; ++id) sketch.Add(id, 1);
  EXPECT_LE(sketch.Estimate(1), 20u + 8);  // halved (plus collisions at most)
  EXPECT_GE(sketch.Estimate(1), 20u);
  EXPECT_EQ(sketch.bytes(), 4u * 64);
}

}  // namespace
}  // namespace fulcrum

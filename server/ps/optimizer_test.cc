#include "server/ps/optimizer.h"

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

TEST(OptimizerTest, MomentumMatchesHandComputedValues) {
  OptimizerConfig c;
  c.type = OptimizerConfig::Type::kMomentum;
  c.lr = 0.1f;
  c.momentum = 0.9f;
  c.weight_decay = 0.01f;
  float w[2] = {1.0f, -2.0f};
  float v[2] = {0.0f, 0.0f};
  const float g1[2] = {0.5f, 1.0f};
  ApplyUpdate(c, g1, w, v, 2);
  // g = 0.5 + 0.01*1 = 0.51; v = 0.51; w = 1 - 0.051 = 0.949
  // g = 1 + 0.01*-2 = 0.98; v = 0.98; w = -2 - 0.098 = -2.098
  EXPECT_FLOAT_EQ(v[0], 0.51f);
  EXPECT_FLOAT_EQ(w[0], 0.949f);
  EXPECT_FLOAT_EQ(v[1], 0.98f);
  EXPECT_FLOAT_EQ(w[1], -2.098f);
  const float g2[2] = {-0.5f, 0.0f};
  ApplyUpdate(c, g2, w, v, 2);
  // g = -0.5 + 0.00949 = -0.49051; v = 0.9*0.51 - 0.49051 = -0.03151
  // w = 0.949 + 0.003151 = 0.952151
  // g = 0 - 0.02098 = -0.02098; v = 0.882 - 0.02098 = 0.86102; w = -2.184102
  EXPECT_NEAR(v[0], -0.03151f, 1e-6);
  EXPECT_NEAR(w[0], 0.952151f, 1e-6);
  EXPECT_NEAR(v[1], 0.86102f, 1e-6);
  EXPECT_NEAR(w[1], -2.184102f, 1e-6);
}

TEST(OptimizerTest, PlainSgd) {
  OptimizerConfig c;
  c.lr = 0.5f;
  float w[1] = {2.0f};
  const float g[1] = {1.0f};
  ApplyUpdate(c, g, w, nullptr, 1);
  EXPECT_FLOAT_EQ(w[0], 1.5f);
  EXPECT_EQ(c.StateSlots(), 0);
}

TEST(OptimizerTest, FromSpec) {
  v1::OptimizerSpec spec;
  spec.set_type("momentum");
  spec.set_lr(0.05);
  spec.set_momentum(0.9);
  OptimizerConfig c = OptimizerConfig::FromSpec(spec);
  EXPECT_EQ(c.type, OptimizerConfig::Type::kMomentum);
  EXPECT_FLOAT_EQ(c.lr, 0.05f);
  EXPECT_EQ(c.StateSlots(), 1);
}

}  // namespace
}  // namespace fulcrum

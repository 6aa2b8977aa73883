#include "server/ps/optimizer.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

OptimizerConfig Config(OptimizerConfig::Type type, double lr, float wd = 0.0f) {
  OptimizerConfig c;
  c.type = type;
  c.lr = lr;
  c.weight_decay = wd;
  return c;
}

TEST(OptimizerTest, MomentumMatchesHandComputedValues) {
  OptimizerConfig c = Config(OptimizerConfig::Type::kMomentum, 0.1, 0.01f);
  c.momentum = 0.9f;
  float w[2] = {1.0f, -2.0f};
  float v[2] = {0.0f, 0.0f};
  const float g1[2] = {0.5f, 1.0f};
  ApplyUpdate(c, 0, 0, g1, w, v, 2);
  // g = 0.5 + 0.01*1 = 0.51; v = 0.51; w = 1 - 0.051 = 0.949
  // g = 1 + 0.01*-2 = 0.98; v = 0.98; w = -2 - 0.098 = -2.098
  EXPECT_FLOAT_EQ(v[0], 0.51f);
  EXPECT_FLOAT_EQ(w[0], 0.949f);
  EXPECT_FLOAT_EQ(v[1], 0.98f);
  EXPECT_FLOAT_EQ(w[1], -2.098f);
  const float g2[2] = {-0.5f, 0.0f};
  ApplyUpdate(c, 1, 1, g2, w, v, 2);
  // g = -0.5 + 0.00949 = -0.49051; v = 0.9*0.51 - 0.49051 = -0.03151
  // w = 0.949 + 0.003151 = 0.952151
  // g = 0 - 0.02098 = -0.02098; v = 0.882 - 0.02098 = 0.86102; w = -2.184102
  EXPECT_NEAR(v[0], -0.03151f, 1e-6);
  EXPECT_NEAR(w[0], 0.952151f, 1e-6);
  EXPECT_NEAR(v[1], 0.86102f, 1e-6);
  EXPECT_NEAR(w[1], -2.184102f, 1e-6);
}

TEST(OptimizerTest, PlainSgdWithWeightDecay) {
  OptimizerConfig c = Config(OptimizerConfig::Type::kSgd, 0.5, 0.1f);
  float w[1] = {2.0f};
  const float g[1] = {1.0f};
  ApplyUpdate(c, 0, 0, g, w, nullptr, 1);
  EXPECT_FLOAT_EQ(w[0], 2.0f - 0.5f * (1.0f + 0.2f));  // 1.4
  EXPECT_EQ(c.StateSlots(), 0);
}

TEST(OptimizerTest, Nesterov) {
  OptimizerConfig c = Config(OptimizerConfig::Type::kNesterov, 0.1);
  c.momentum = 0.9f;
  float w[1] = {1.0f}, v[1] = {0.0f};
  const float g[1] = {1.0f};
  ApplyUpdate(c, 0, 0, g, w, v, 1);
  // v = 1; w = 1 - 0.1 * (1 + 0.9) = 0.81
  EXPECT_FLOAT_EQ(v[0], 1.0f);
  EXPECT_FLOAT_EQ(w[0], 0.81f);
  ApplyUpdate(c, 1, 1, g, w, v, 1);
  // v = 1.9; w = 0.81 - 0.1 * (1 + 1.71) = 0.539
  EXPECT_FLOAT_EQ(v[0], 1.9f);
  EXPECT_NEAR(w[0], 0.539f, 1e-6);
}

TEST(OptimizerTest, AdamWithBiasCorrection) {
  OptimizerConfig c = Config(OptimizerConfig::Type::kAdam, 0.1);
  EXPECT_EQ(c.StateSlots(), 2);
  float w[1] = {1.0f}, state[2] = {0.0f, 0.0f};
  const float g1[1] = {0.5f};
  ApplyUpdate(c, 0, 0, g1, w, state, 1);
  // m = 0.05, s = 0.00025; m^ = 0.5, s^ = 0.25; w = 1 - 0.1 * 0.5 / (0.5 +
  // 1e-8) = 0.9
  EXPECT_NEAR(state[0], 0.05f, 1e-7);
  EXPECT_NEAR(state[1], 0.00025f, 0.00025f * 1e-4);  // float (1 - b2)
  EXPECT_NEAR(w[0], 0.9f, 1e-6);
  const float g2[1] = {-1.0f};
  ApplyUpdate(c, 1, 1, g2, w, state, 1);
  // m = 0.9*0.05 - 0.1 = -0.055; s = 0.999*0.00025 + 0.001 = 0.00124975
  // m^ = -0.055 / 0.19 = -0.2894737; s^ = 0.00124975 / 0.001999 = 0.6251876
  // w = 0.9 + 0.1 * 0.2894737 / 0.7906881 = 0.9366103
  EXPECT_NEAR(state[0], -0.055f, 1e-7);
  EXPECT_NEAR(state[1], 0.00124975f, 0.00124975f * 1e-4);
  EXPECT_NEAR(w[0], 0.9366103f, 1e-6);
}

TEST(OptimizerTest, AdamWDecouplesWeightDecayFromAdamL2) {
  // With weight decay, Adam (L2 in the gradient, then normalised) and AdamW
  // (w *= 1 - lr wd, outside the normalisation) must differ.
  OptimizerConfig adam = Config(OptimizerConfig::Type::kAdam, 0.1, 0.5f);
  OptimizerConfig adamw = Config(OptimizerConfig::Type::kAdamW, 0.1, 0.5f);
  float wa[1] = {2.0f}, sa[2] = {0, 0};
  float ww[1] = {2.0f}, sw[2] = {0, 0};
  const float g[1] = {0.1f};
  ApplyUpdate(adam, 0, 0, g, wa, sa, 1);
  ApplyUpdate(adamw, 0, 0, g, ww, sw, 1);
  // Adam: g = 0.1 + 1.0 = 1.1; first step moves by lr * sign = 0.1 -> 1.9
  EXPECT_NEAR(wa[0], 1.9f, 1e-6);
  // AdamW: w = 2 * (1 - 0.05) = 1.9; then the step on g = 0.1 moves by 0.1
  // -> 1.8
  EXPECT_NEAR(ww[0], 1.8f, 1e-6);
  // Without weight decay the two are the same optimizer.
  OptimizerConfig a0 = Config(OptimizerConfig::Type::kAdam, 0.1);
  OptimizerConfig w0 = Config(OptimizerConfig::Type::kAdamW, 0.1);
  float x[1] = {2.0f}, y[1] = {2.0f}, sx[2] = {0, 0}, sy[2] = {0, 0};
  for (int k = 0; k < 5; ++k) {
    ApplyUpdate(a0, k, k, g, x, sx, 1);
    ApplyUpdate(w0, k, k, g, y, sy, 1);
  }
  EXPECT_FLOAT_EQ(x[0], y[0]);
}

TEST(ScheduleTest, ConstantStepCosineAndWarmup) {
  LrSchedule constant;
  EXPECT_DOUBLE_EQ(constant.At(0.1, 0), 0.1);
  EXPECT_DOUBLE_EQ(constant.At(0.1, 1000), 0.1);

  LrSchedule step;
  step.type = LrSchedule::Type::kStep;
  step.step_size = 10;
  step.gamma = 0.5;
  EXPECT_DOUBLE_EQ(step.At(0.1, 9), 0.1);
  EXPECT_DOUBLE_EQ(step.At(0.1, 10), 0.05);
  EXPECT_DOUBLE_EQ(step.At(0.1, 25), 0.025);

  LrSchedule cosine;
  cosine.type = LrSchedule::Type::kCosine;
  cosine.total_steps = 100;
  cosine.min_lr = 0.01;
  EXPECT_DOUBLE_EQ(cosine.At(0.1, 0), 0.1);
  EXPECT_NEAR(cosine.At(0.1, 50), 0.055, 1e-12);
  EXPECT_NEAR(cosine.At(0.1, 100), 0.01, 1e-12);
  EXPECT_NEAR(cosine.At(0.1, 500), 0.01, 1e-12);  // stays at the floor

  LrSchedule warm;
  warm.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(warm.At(0.1, 0), 0.025);
  EXPECT_DOUBLE_EQ(warm.At(0.1, 3), 0.1);
  EXPECT_DOUBLE_EQ(warm.At(0.1, 4), 0.1);

  // The schedule drives ApplyUpdate: SGD at step 10 of the step schedule.
  OptimizerConfig c = Config(OptimizerConfig::Type::kSgd, 0.1);
  c.schedule = step;
  float w[1] = {1.0f};
  const float g[1] = {1.0f};
  ApplyUpdate(c, 10, 10, g, w, nullptr, 1);
  EXPECT_FLOAT_EQ(w[0], 0.95f);
}

TEST(OptimizerTest, FromSpec) {
  v1::OptimizerSpec spec;
  spec.set_type("adamw");
  spec.set_lr(0.001);
  spec.set_beta2(0.98);
  spec.mutable_schedule()->set_type("cosine");
  spec.mutable_schedule()->set_total_steps(500);
  OptimizerConfig c = OptimizerConfig::FromSpec(spec);
  EXPECT_EQ(c.type, OptimizerConfig::Type::kAdamW);
  EXPECT_FLOAT_EQ(c.beta1, 0.9f);
  EXPECT_FLOAT_EQ(c.beta2, 0.98f);
  EXPECT_EQ(c.schedule.type, LrSchedule::Type::kCosine);
  EXPECT_EQ(c.schedule.total_steps, 500);
}

TEST(OptimizerTest, OutOfPlaceMatchesInPlaceAndKeepsInputs) {
  for (auto type :
       {OptimizerConfig::Type::kSgd, OptimizerConfig::Type::kMomentum,
        OptimizerConfig::Type::kNesterov, OptimizerConfig::Type::kAdam,
        OptimizerConfig::Type::kAdamW}) {
    OptimizerConfig c = Config(type, 0.05, 0.01f);
    c.momentum = 0.9f;
    const int n = 5;
    std::vector<float> w = {0.5f, -1.0f, 2.0f, 0.0f, 3.0f};
    std::vector<float> state(2 * n, 0.1f);
    const std::vector<float> g = {0.1f, -0.2f, 0.3f, 0.0f, 1.0f};
    const std::vector<float> w_before = w, state_before = state;
    std::vector<float> w_out(n), state_out(2 * n, 0.1f);
    ApplyUpdate(c, 3, 2, g.data(), w.data(), state.data(), w_out.data(),
                state_out.data(), n);
    EXPECT_EQ(w, w_before);  // inputs untouched: the undo copy
    EXPECT_EQ(state, state_before);
    ApplyUpdate(c, 3, 2, g.data(), w.data(), state.data(), n);
    EXPECT_EQ(w_out, w) << static_cast<int>(type);
    for (int i = 0; i < c.StateSlots() * n; ++i)
      EXPECT_EQ(state_out[i], state[i]) << static_cast<int>(type);
    EXPECT_NE(w, w_before);
  }
}

// The update pass says when a value it wrote is not finite (the shard
// then refuses the update) - parameters and optimizer state alike.
TEST(OptimizerTest, SaysWhenAWrittenValueIsNotFinite) {
  for (auto type :
       {OptimizerConfig::Type::kSgd, OptimizerConfig::Type::kMomentum,
        OptimizerConfig::Type::kNesterov, OptimizerConfig::Type::kAdam,
        OptimizerConfig::Type::kAdamW, OptimizerConfig::Type::kAverage}) {
    OptimizerConfig c = Config(type, 0.5, 0.0f);
    if (type == OptimizerConfig::Type::kMomentum ||
        type == OptimizerConfig::Type::kNesterov)
      c.momentum = 0.9f;
    const int n = 9;  // not a multiple of the vector width
    std::vector<float> w(n, 1.0f), state(2 * n, 0.0f), g(n, 1.0f);
    std::vector<float> w_out(n), state_out(2 * n);
    EXPECT_TRUE(ApplyUpdate(c, 0, 0, g.data(), w.data(), state.data(),
                            w_out.data(), state_out.data(), n))
        << static_cast<int>(type);
    g[n - 1] = 3e38f;  // x 2 (the averaging scale) overflows
    EXPECT_FALSE(ApplyUpdate(c, 0, 0, g.data(), w.data(), state.data(),
                             w_out.data(), state_out.data(), n, 2.0f))
        << static_cast<int>(type);
  }
  std::vector<float> values = {1.0f, 3e38f}, out(2);
  EXPECT_TRUE(SetBuffers({{0, 1}}, values.data(), 2.0f, out.data()));
  EXPECT_FALSE(SetBuffers({{0, 2}}, values.data(), 2.0f, out.data()));
}

}  // namespace
}  // namespace fulcrum

//===- NormKernelTest.cpp - Unit tests of kernels/cpu/Norm.cpp ---===//
//
// The forward kernels against their definitions (including BatchNormalization's
// running statistics), and both gradient kernels against central differences
// of the forward kernels in float64. ONNX's node tests (CpuNodeTest) cover the
// forward kernels' f32 results.
//
//===----------------------------------------------------------------------===//
#include "KernelTestUtil.h"
#include "kernels/cpu/Kernel.h"
#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

using namespace headroom;
using namespace headroom::cpu;

namespace {

AttributeMap layerNormAttrs(int64_t axis, double epsilon) {
  AttributeMap a;
  a["axis"] = Attribute::getInt(axis);
  a["epsilon"] = Attribute::getFloat(epsilon);
  return a;
}

TEST(NormKernelTest, LayerNormalizationAndItsStatistics) {
  // Two rows of four: normalized over axis 1.
  T64 x({2, 4}), scale({4}), bias({4}), y({2, 4}), mean({2, 1}), inv({2, 1});
  x.Data = {1, 2, 3, 4, -2, 0, 0, 2};
  scale.Data = {1, 2, 1, 0.5};
  bias.Data = {0, 0, 1, 1};
  ASSERT_EQ(
      runKernel("LayerNormalization", {x.view(), scale.view(), bias.view()},
                {y.view(), mean.view(), inv.view()}, layerNormAttrs(1, 0)),
      "");
  // Row 0: mean 2.5, variance 1.25; row 1: mean 0, variance 2.
  EXPECT_EQ(mean.Data, (std::vector<double>{2.5, 0}));
  EXPECT_NEAR(inv.Data[0], 1 / std::sqrt(1.25), 1e-15);
  EXPECT_NEAR(inv.Data[1], 1 / std::sqrt(2.0), 1e-15);
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 4; ++c)
      EXPECT_NEAR(y.Data[r * 4 + c],
                  (x.Data[r * 4 + c] - mean.Data[r]) * inv.Data[r] *
                          scale.Data[c] +
                      bias.Data[c],
                  1e-15);
}

TEST(NormKernelTest, LayerNormalizationRejectsABadAxis) {
  T64 x({2, 4}), scale({4}), y({2, 4});
  std::string error = runKernel("LayerNormalization", {x.view(), scale.view()},
                                {y.view()}, layerNormAttrs(2, 1e-5));
  EXPECT_NE(error.find("LayerNormalization: axis 2 is out of range"),
            std::string::npos)
      << error;
}

TEST(NormKernelTest, LayerNormalizationGradMatchesFiniteDifferences) {
  // Normalized over the last two axes (20 elements); a leading axis too
  // (axis -3) to cover a row of the whole input.
  for (int64_t axis : {1, -1, -3}) {
    std::vector<int64_t> scaleShape = axis == 1 ? std::vector<int64_t>{4, 5}
                                      : axis == -1
                                          ? std::vector<int64_t>{5}
                                          : std::vector<int64_t>{3, 4, 5};
    T64 x({3, 4, 5}, 1), scale(scaleShape, 2), bias(scaleShape, 3),
        y({3, 4, 5}), r({3, 4, 5}, 4);
    T64 dx(x.Shape), dscale(scaleShape), dbias(scaleShape);
    AttributeMap attrs = layerNormAttrs(axis, 1e-3);
    auto loss = [&] {
      EXPECT_EQ(runKernel("LayerNormalization",
                          {x.view(), scale.view(), bias.view()}, {y.view()},
                          attrs),
                "");
      return dot(y.Data, r.Data);
    };
    ASSERT_EQ(runKernel("LayerNormalizationGrad",
                        {r.view(), x.view(), scale.view()},
                        {dx.view(), dscale.view(), dbias.view()}, attrs),
              "");
    expectGradient(x.Data, loss, dx.Data, "dx");
    expectGradient(scale.Data, loss, dscale.Data, "dscale");
    expectGradient(bias.Data, loss, dbias.Data, "dbias");
  }
}

AttributeMap batchNormAttrs(int64_t training, double epsilon, double momentum) {
  AttributeMap a;
  a["training_mode"] = Attribute::getInt(training);
  a["epsilon"] = Attribute::getFloat(epsilon);
  a["momentum"] = Attribute::getFloat(momentum);
  return a;
}

TEST(NormKernelTest, BatchNormalizationInferenceUsesTheInputStatistics) {
  T64 x({1, 2, 2}), scale({2}), bias({2}), mean({2}), var({2}), y({1, 2, 2});
  x.Data = {1, 3, 0, 4};
  scale.Data = {2, 1};
  bias.Data = {1, 0};
  mean.Data = {1, 2};
  var.Data = {4, 1};
  ASSERT_EQ(
      runKernel("BatchNormalization",
                {x.view(), scale.view(), bias.view(), mean.view(), var.view()},
                {y.view()}, batchNormAttrs(0, 0, 0.9)),
      "");
  EXPECT_EQ(y.Data, (std::vector<double>{1, 3, -2, 2}));
}

TEST(NormKernelTest, BatchNormalizationTrainingUpdatesRunningStatistics) {
  // Channel 0 holds {1, 3, 5, 7} over N=2 and 2 positions: mean 4, biased
  // variance 5 (unbiased would be 20/3). Channel 1 is constant: variance 0.
  T64 x({2, 2, 2}), scale({2}), bias({2}), mean({2}), var({2}), y({2, 2, 2}),
      runMean({2}), runVar({2});
  x.Data = {1, 3, 2, 2, 5, 7, 2, 2};
  scale.Data = {1, 1};
  bias.Data = {0, 0.5};
  mean.Data = {10, 0};
  var.Data = {1, 1};
  ASSERT_EQ(
      runKernel("BatchNormalization",
                {x.view(), scale.view(), bias.view(), mean.view(), var.view()},
                {y.view(), runMean.view(), runVar.view()},
                batchNormAttrs(1, 1e-5, 0.75)),
      "");
  EXPECT_NEAR(runMean.Data[0], 10 * 0.75 + 4 * 0.25, 1e-15);
  EXPECT_NEAR(runMean.Data[1], 2 * 0.25, 1e-15);
  // The running variance takes the unbiased batch variance, as PyTorch's
  // BatchNorm does (ONNX's reference would use the biased 5).
  EXPECT_NEAR(runVar.Data[0], 0.75 + (20.0 / 3) * 0.25, 1e-15);
  EXPECT_NEAR(runVar.Data[1], 0.75, 1e-15);
  EXPECT_NEAR(y.Data[0], (1 - 4) / std::sqrt(5 + 1e-5), 1e-12);
  EXPECT_NEAR(y.Data[5], (7 - 4) / std::sqrt(5 + 1e-5), 1e-12);
  EXPECT_EQ(y.Data[2], 0.5);
}

TEST(NormKernelTest, BatchNormalizationGradMatchesFiniteDifferences) {
  for (std::vector<int64_t> shape :
       {std::vector<int64_t>{3, 2, 2, 3}, std::vector<int64_t>{5, 3}}) {
    int64_t c = shape[1];
    T64 x(shape, 1), scale({c}, 2), bias({c}, 3), mean({c}, 5), var({c}),
        y(shape), r(shape, 4), dx(shape), dscale({c}), dbias({c});
    for (double &v : var.Data)
      v = 1;
    AttributeMap attrs = batchNormAttrs(1, 1e-3, 0.9);
    auto loss = [&] {
      EXPECT_EQ(runKernel("BatchNormalization",
                          {x.view(), scale.view(), bias.view(), mean.view(),
                           var.view()},
                          {y.view()}, attrs),
                "");
      return dot(y.Data, r.Data);
    };
    ASSERT_EQ(runKernel("BatchNormalizationGrad",
                        {r.view(), x.view(), scale.view()},
                        {dx.view(), dscale.view(), dbias.view()}, attrs),
              "");
    expectGradient(x.Data, loss, dx.Data, "dx");
    expectGradient(scale.Data, loss, dscale.Data, "dscale");
    expectGradient(bias.Data, loss, dbias.Data, "dbias");
  }
}

} // namespace

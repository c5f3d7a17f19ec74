//===- CudaNormUpdateTest.cpp - kernels/cuda Norm.cu and Update.cu vs CPU -===//
//
// The normalizations and their gradients, over shapes whose rows are shorter
// and longer than a block and whose columns do not fill the gradient's
// column tiles, and the in-place update ops, each against kernels/cpu.
//
//===----------------------------------------------------------------------===//
#include "CudaKernelTestUtil.h"

#include "compiler/StateQuantization.h"
#include "kernels/common/Nf4.h"
#include "kernels/cpu/Parallel.h"
#include "kernels/cuda/HostKernel.h"

#include <chrono>
#include <cmath>
#include <iostream>
#include <optional>

using namespace headroom;
using namespace headroom::cudatest;

namespace {

TensorType ty(DType t, std::vector<int64_t> shape) { return {t, shape}; }

std::string name(DType t) { return dtypeName(t).str(); }

/// Statistics accumulate in float where the CPU uses double; f16 and bf16
/// results may then round one ulp apart.
Tolerance tolFor(DType t) {
  switch (t) {
  case DType::F64:
    return {1e-12, 1e-10};
  case DType::F16:
    return {1e-2, 1e-2};
  case DType::BF16:
    return {4e-2, 2e-2};
  default:
    return {2e-5, 2e-4};
  }
}

/// The CUDA kernel's error for `c`, "" when it succeeds (for calls the CPU
/// kernel refuses too).
std::string cudaError(CudaCase c) {
  std::vector<Tensor> outs;
  return runCudaOnly(c, outs);
}

std::vector<int64_t> rowsShape(const std::vector<int64_t> &shape,
                               int64_t axis) {
  if (axis < 0)
    axis += shape.size();
  std::vector<int64_t> s(shape.begin(), shape.begin() + axis);
  s.resize(shape.size(), 1);
  return s;
}

std::vector<int64_t> colsShape(const std::vector<int64_t> &shape,
                               int64_t axis) {
  if (axis < 0)
    axis += shape.size();
  return std::vector<int64_t>(shape.begin() + axis, shape.end());
}

CudaCase layerNorm(DType t, std::vector<int64_t> shape, int64_t axis,
                   DType param, bool bias, bool stats) {
  CudaCase c;
  c.Op = "LayerNormalization";
  std::vector<int64_t> cols = colsShape(shape, axis);
  c.Inputs = {randomTensor(ty(t, shape), 1, -3, 5),
              randomTensor(ty(param, cols), 2, 0.5, 1.5),
              randomTensor(ty(param, cols), 3)};
  c.Absent = {false, false, !bias};
  c.Outputs = {ty(t, shape)};
  if (stats)
    for (int k = 0; k < 2; ++k)
      c.Outputs.push_back(ty(DType::F32, rowsShape(shape, axis)));
  c.Attrs["axis"] = Attribute::getInt(axis);
  c.Tol = tolFor(t);
  return c;
}

TEST(CudaNorm, LayerNormalization) {
  struct Shape {
    std::vector<int64_t> Dims;
    int64_t Axis;
  } shapes[] = {{{4, 6, 10}, -1}, {{4, 6, 10}, 1}, {{4, 6, 10}, 0},
                {{3, 1000}, -1},  {{2, 3, 5}, -2}, {{7}, 0},
                {{0, 8}, 1},      {{5, 300}, 1}};
  for (const Shape &s : shapes)
    for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16})
      for (bool bias : {true, false})
        for (bool stats : {true, false}) {
          DType param = t == DType::F64 ? DType::F64 : DType::F32;
          CudaCase c = layerNorm(t, s.Dims, s.Axis, param, bias, stats);
          EXPECT_EQ(compareCudaWithCpu(c), "")
              << name(t) << " axis " << s.Axis << " bias " << bias;
        }
  // Parameters in the narrow type, and a non-default epsilon.
  CudaCase half = layerNorm(DType::F16, {6, 40}, -1, DType::F16, true, true);
  half.Attrs["epsilon"] = Attribute::getFloat(0.5);
  EXPECT_EQ(compareCudaWithCpu(half), "");
  // An empty row: NaN statistics, as on the CPU.
  CudaCase empty = layerNorm(DType::F32, {3, 0}, 1, DType::F32, true, true);
  EXPECT_EQ(compareCudaWithCpu(empty), "");
}

TEST(CudaNorm, LayerNormalizationErrors) {
  CudaCase axis = layerNorm(DType::F32, {4, 6}, 2, DType::F32, true, false);
  EXPECT_NE(cudaError(axis).find("axis 2 is out of range"), std::string::npos);
  CudaCase scale = layerNorm(DType::F32, {4, 6}, 1, DType::F32, true, false);
  scale.Inputs[1] = randomTensor(ty(DType::F32, {4}), 2);
  EXPECT_NE(cudaError(scale).find("operand 1 has 4 elements, 6 expected"),
            std::string::npos);
  CudaCase ints = layerNorm(DType::F32, {4, 6}, 1, DType::I32, false, false);
  EXPECT_NE(cudaError(ints).find("operand 1 of element type"),
            std::string::npos);
}

CudaCase layerNormGrad(DType t, std::vector<int64_t> shape, int64_t axis,
                       DType param) {
  CudaCase c;
  c.Op = "LayerNormalizationGrad";
  std::vector<int64_t> cols = colsShape(shape, axis);
  c.Inputs = {randomTensor(ty(t, shape), 4), randomTensor(ty(t, shape), 5),
              randomTensor(ty(param, cols), 6, 0.5, 1.5)};
  c.Outputs = {ty(t, shape), ty(param, cols), ty(param, cols)};
  c.Attrs["axis"] = Attribute::getInt(axis);
  c.Tol = tolFor(t);
  if (t != DType::F64) // sums over the rows, of terms of either sign
    c.Tol.Atol *= 10;
  return c;
}

TEST(CudaNorm, LayerNormalizationGrad) {
  struct Shape {
    std::vector<int64_t> Dims;
    int64_t Axis;
  } shapes[] = {{{5, 7, 9}, -1}, {{5, 7, 9}, 1},  {{300, 13}, 1},
                {{4, 1000}, -1}, {{3, 4, 1}, -1}, {{9, 3}, 1},
                {{6, 2}, -1},    {{0, 5}, 1},     {{33}, 0}};
  for (const Shape &s : shapes)
    for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
      DType param = t == DType::F64 ? DType::F64 : DType::F32;
      CudaCase c = layerNormGrad(t, s.Dims, s.Axis, param);
      EXPECT_EQ(compareCudaWithCpu(c), "")
          << name(t) << " shape " << s.Dims.size() << " axis " << s.Axis;
    }
  CudaCase half = layerNormGrad(DType::BF16, {20, 24}, -1, DType::BF16);
  half.Tol = {0.1, 2e-2};
  half.Attrs["epsilon"] = Attribute::getFloat(1e-3);
  EXPECT_EQ(compareCudaWithCpu(half), "");
}

CudaCase batchNorm(DType t, std::vector<int64_t> shape, DType param,
                   bool training, int runningOutputs) {
  CudaCase c;
  c.Op = "BatchNormalization";
  std::vector<int64_t> ch = {shape[1]};
  c.Inputs = {randomTensor(ty(t, shape), 1, -1, 3),
              randomTensor(ty(param, ch), 2, 0.5, 1.5),
              randomTensor(ty(param, ch), 3), randomTensor(ty(param, ch), 4),
              randomTensor(ty(param, ch), 5, 0.2, 2)};
  c.Outputs = {ty(t, shape)};
  for (int k = 0; k < runningOutputs; ++k)
    c.Outputs.push_back(ty(param, ch));
  if (training)
    c.Attrs["training_mode"] = Attribute::getInt(1);
  c.Tol = tolFor(t);
  return c;
}

TEST(CudaNorm, BatchNormalization) {
  std::vector<std::vector<int64_t>> shapes = {
      {2, 3, 4, 5}, {8, 5}, {3, 4, 70}, {1, 3}, {2, 2, 0}, {1, 2, 600}};
  for (const auto &s : shapes)
    for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
      DType param = t == DType::F64 ? DType::F64 : DType::F32;
      EXPECT_EQ(compareCudaWithCpu(batchNorm(t, s, param, false, 0)), "")
          << name(t) << " inference";
      for (int outputs : {0, 1, 2}) {
        CudaCase c = batchNorm(t, s, param, true, outputs);
        c.Attrs["momentum"] = Attribute::getFloat(0.8);
        c.Attrs["epsilon"] = Attribute::getFloat(1e-3);
        EXPECT_EQ(compareCudaWithCpu(c), "")
            << name(t) << " training, " << outputs << " outputs";
      }
    }
  // f64 statistics of an f32 input, f16 ones of an f16 input.
  EXPECT_EQ(
      compareCudaWithCpu(batchNorm(DType::F32, {4, 3, 6}, DType::F64, true, 2)),
      "");
  EXPECT_EQ(
      compareCudaWithCpu(batchNorm(DType::F16, {4, 3, 6}, DType::F16, true, 2)),
      "");
}

TEST(CudaNorm, BatchNormalizationErrors) {
  CudaCase running = batchNorm(DType::F32, {2, 3, 4}, DType::F32, false, 2);
  EXPECT_NE(cudaError(running).find("only defined in training mode"),
            std::string::npos);
  CudaCase rank1 = batchNorm(DType::F32, {2, 3}, DType::F32, false, 0);
  rank1.Inputs[0] = randomTensor(ty(DType::F32, {6}), 1);
  rank1.Outputs = {ty(DType::F32, {6})};
  EXPECT_NE(cudaError(rank1).find("input of rank 1"), std::string::npos);
}

CudaCase batchNormGrad(DType t, std::vector<int64_t> shape, DType param) {
  CudaCase c;
  c.Op = "BatchNormalizationGrad";
  std::vector<int64_t> ch = {shape[1]};
  c.Inputs = {randomTensor(ty(t, shape), 6), randomTensor(ty(t, shape), 7),
              randomTensor(ty(param, ch), 8, 0.5, 1.5)};
  c.Outputs = {ty(t, shape), ty(param, ch), ty(param, ch)};
  c.Tol = tolFor(t);
  if (t != DType::F64)
    c.Tol.Atol *= 10;
  return c;
}

TEST(CudaNorm, BatchNormalizationGrad) {
  std::vector<std::vector<int64_t>> shapes = {
      {2, 3, 4, 5}, {8, 5}, {3, 4, 70}, {2, 2, 0}, {1, 2, 600}};
  for (const auto &s : shapes)
    for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
      DType param = t == DType::F64 ? DType::F64 : DType::F32;
      CudaCase c = batchNormGrad(t, s, param);
      c.Attrs["epsilon"] = Attribute::getFloat(1e-4);
      EXPECT_EQ(compareCudaWithCpu(c), "") << name(t);
    }
}

CudaCase sgd(DType t, bool scaled, double wd, int enabled) {
  CudaCase c;
  c.Op = "SgdUpdate";
  std::vector<int64_t> shape = {7, 33};
  Tensor scale(ty(t, {})), on(ty(DType::Bool, {}));
  scale.setDouble(0, 0.25);
  on.setDouble(0, enabled > 0);
  c.Inputs = {randomTensor(ty(t, shape), 1), scale, on};
  c.Absent = {false, !scaled, enabled < 0};
  c.InOut = {randomTensor(ty(t, shape), 2)};
  c.Attrs["lr"] = Attribute::getFloat(0.1);
  if (wd != 0)
    c.Attrs["weight_decay"] = Attribute::getFloat(wd);
  c.Tol = {0, 0};
  return c;
}

TEST(CudaUpdate, SgdUpdate) {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16})
    for (bool scaled : {false, true})
      for (double wd : {0.0, 0.01})
        for (int enabled : {-1, 0, 1})
          EXPECT_EQ(compareCudaWithCpu(sgd(t, scaled, wd, enabled)), "")
              << name(t) << " scaled " << scaled << " wd " << wd << " enabled "
              << enabled;
  // An f32 scale of an f16 state: the CPU widens both.
  CudaCase mixed = sgd(DType::F16, true, 0.01, 1);
  mixed.Inputs[1] = Tensor(ty(DType::F32, {}));
  mixed.Inputs[1].setDouble(0, 3);
  EXPECT_EQ(compareCudaWithCpu(mixed), "");
}

TEST(CudaUpdate, SgdUpdateErrors) {
  CudaCase scale = sgd(DType::F32, true, 0, 1);
  scale.Inputs[1] = randomTensor(ty(DType::F32, {2}), 3);
  EXPECT_NE(cudaError(scale).find("scale must be a scalar"), std::string::npos);
  CudaCase enabled = sgd(DType::F32, false, 0, 1);
  enabled.Inputs[2] = Tensor(ty(DType::F32, {}));
  EXPECT_NE(cudaError(enabled).find("enabled must be a bool scalar"),
            std::string::npos);
  CudaCase state = sgd(DType::F32, false, 0, 1);
  state.InOut = {randomTensor(ty(DType::F32, {7, 32}), 2)};
  EXPECT_NE(cudaError(state).find("does not match the state"),
            std::string::npos);
  state.InOut.clear();
  EXPECT_NE(cudaError(state).find("needs its state slot"), std::string::npos);
}

/// MomentumUpdate on (w, buf); `enabled` < 0: no flag.
/// `m`: the buffer's (and scale's) type, t's by default (f32 for a bf16/f16
/// weight without master copies).
CudaCase momentum(DType t, bool scaled, double wd, bool nesterov, int enabled,
                  std::optional<DType> m = {}) {
  DType mt = m.value_or(t);
  CudaCase c;
  c.Op = "MomentumUpdate";
  std::vector<int64_t> shape = {5, 37};
  Tensor scale(ty(mt, {})), on(ty(DType::Bool, {}));
  scale.setDouble(0, 0.25);
  on.setDouble(0, enabled > 0);
  c.Inputs = {randomTensor(ty(t, shape), 1), scale, on};
  c.Absent = {false, !scaled && enabled < 0, enabled < 0};
  c.InOut = {randomTensor(ty(t, shape), 2), randomTensor(ty(mt, shape), 3)};
  c.Attrs["lr"] = Attribute::getFloat(0.1);
  c.Attrs["momentum"] = Attribute::getFloat(0.9);
  c.Attrs["nesterov"] = Attribute::getInt(nesterov);
  if (wd != 0)
    c.Attrs["weight_decay"] = Attribute::getFloat(wd);
  c.Tol = {0, 0};
  return c;
}

TEST(CudaUpdate, MomentumUpdate) {
  for (DType t : {DType::F32, DType::F64})
    for (bool scaled : {false, true})
      for (double wd : {0.0, 0.01})
        for (bool nesterov : {false, true})
          for (int enabled : {-1, 0, 1})
            EXPECT_EQ(
                compareCudaWithCpu(momentum(t, scaled, wd, nesterov, enabled)),
                "")
                << name(t) << scaled << wd << nesterov << enabled;
}

/// AdamWUpdate on (w, m, v); `enabled` < 0: no flag.
CudaCase adamw(DType t, bool scaled, bool decay, int enabled,
               std::optional<DType> m = {}) {
  DType mt = m.value_or(t);
  CudaCase c;
  c.Op = "AdamWUpdate";
  std::vector<int64_t> shape = {3, 301};
  Tensor stepSize(ty(mt, {})), sqrtBc2(ty(mt, {})), scale(ty(mt, {})),
      on(ty(DType::Bool, {}));
  stepSize.setDouble(0, 0.01);
  sqrtBc2.setDouble(0, 0.0447);
  scale.setDouble(0, 0.25);
  on.setDouble(0, enabled > 0);
  c.Inputs = {randomTensor(ty(t, shape), 1), stepSize, sqrtBc2, scale, on};
  c.Absent = {false, false, false, !scaled && enabled < 0, enabled < 0};
  // The second moment is non-negative.
  c.InOut = {randomTensor(ty(t, shape), 2), randomTensor(ty(mt, shape), 3),
             randomTensor(ty(mt, shape), 4, 0.0, 0.01)};
  if (decay)
    c.Attrs["decay"] = Attribute::getFloat(1.0 - 1e-3 * 0.01);
  c.Attrs["beta1"] = Attribute::getFloat(0.9);
  c.Attrs["one_minus_beta1"] = Attribute::getFloat(1.0 - 0.9);
  c.Attrs["beta2"] = Attribute::getFloat(0.999);
  c.Attrs["one_minus_beta2"] = Attribute::getFloat(1.0 - 0.999);
  c.Attrs["eps"] = Attribute::getFloat(1e-8);
  c.Tol = {0, 0};
  return c;
}

TEST(CudaUpdate, AdamWUpdate) {
  for (DType t : {DType::F32, DType::F64})
    for (bool scaled : {false, true})
      for (bool decay : {false, true})
        for (int enabled : {-1, 0, 1})
          EXPECT_EQ(compareCudaWithCpu(adamw(t, scaled, decay, enabled)), "")
              << name(t) << scaled << decay << enabled;
}

/// bf16/f16 weights without master copies: f32 moments and scalars, the
/// update computed in f32 and the weight rounded once, as the CPU's
/// widened kernel does (the same bits).
TEST(CudaUpdate, NarrowWeightsWithF32Moments) {
  for (DType t : {DType::BF16, DType::F16})
    for (bool scaled : {false, true})
      for (int enabled : {-1, 0, 1}) {
        EXPECT_EQ(
            compareCudaWithCpu(adamw(t, scaled, true, enabled, DType::F32)), "")
            << name(t) << scaled << enabled;
        EXPECT_EQ(compareCudaWithCpu(
                      momentum(t, scaled, 0.01, true, enabled, DType::F32)),
                  "")
            << name(t) << scaled << enabled;
      }
  CudaCase f64Moments = adamw(DType::BF16, false, false, -1, DType::F64);
  EXPECT_NE(cudaError(f64Moments).find("moments of type f64"),
            std::string::npos);
}

/// AdamW8bitUpdate on (w, m codes, v codes, m absmax, v absmax): 903
/// elements, four blocks, the last partial; random codes and absmaxes.
CudaCase adamw8bit(DType t, bool scaled, int enabled) {
  CudaCase c = adamw(t, scaled, true, enabled, DType::F32);
  c.Op = "AdamW8bitUpdate";
  int64_t n = 3 * 301, blocks = stateBlocks(n);
  std::vector<int64_t> shape = {3, 301};
  Tensor mc(ty(DType::U8, shape)), vc(ty(DType::U8, shape));
  Tensor mc0 = randomTensor(ty(DType::F32, shape), 5, 0.0, 255.99),
         vc0 = randomTensor(ty(DType::F32, shape), 6, 0.0, 255.99);
  for (int64_t i = 0; i < n; ++i) {
    mc.setDouble(i, std::floor(mc0.getDouble(i)));
    vc.setDouble(i, std::floor(vc0.getDouble(i)));
  }
  c.InOut = {c.InOut[0], mc, vc,
             randomTensor(ty(DType::F32, {blocks}), 7, 0.01, 0.1),
             randomTensor(ty(DType::F32, {blocks}), 8, 1e-4, 1e-3)};
  return c;
}

/// The same codes, absmaxes and weights as the CPU's (kernels/cpu/
/// Blockwise8bit.h is one definition for both), for f32 weights and for
/// bf16/f16 ones computed in f32 and rounded once.
TEST(CudaUpdate, AdamW8bitUpdate) {
  for (DType t : {DType::F32, DType::BF16, DType::F16})
    for (bool scaled : {false, true})
      for (int enabled : {-1, 0, 1})
        EXPECT_EQ(compareCudaWithCpu(adamw8bit(t, scaled, enabled)), "")
            << name(t) << scaled << enabled;
  CudaCase absmax = adamw8bit(DType::F32, false, -1);
  absmax.InOut[4] = randomTensor(ty(DType::F32, {3}), 9);
  EXPECT_NE(cudaError(absmax).find("absmax f32[3] is not f32[4]"),
            std::string::npos);
  CudaCase f64 = adamw8bit(DType::F64, false, -1);
  EXPECT_NE(cudaError(f64).find("f32, bf16 or f16 weight"), std::string::npos)
      << cudaError(f64);
}

TEST(CudaUpdate, FusedUpdateErrors) {
  CudaCase slots = adamw(DType::F32, false, false, -1);
  slots.InOut.pop_back();
  EXPECT_NE(cudaError(slots).find("needs its 3 state slots"),
            std::string::npos);
  CudaCase moment = momentum(DType::F32, false, 0, false, -1);
  moment.InOut[1] = randomTensor(ty(DType::F32, {5, 36}), 3);
  EXPECT_NE(cudaError(moment).find("does not match the weight"),
            std::string::npos);
  CudaCase step = adamw(DType::F32, false, false, -1);
  step.Inputs[1] = randomTensor(ty(DType::F32, {2}), 5);
  EXPECT_NE(cudaError(step).find("operand 1 must be a scalar"),
            std::string::npos);
}

TEST(CudaUpdate, Accumulate) {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16})
    for (int first : {0, 1})
      for (double scale : {1.0, 0.125, -3.0}) {
        CudaCase c;
        c.Op = "Accumulate";
        c.Inputs = {randomTensor(ty(t, {5, 41}), 1)};
        c.InOut = {randomTensor(ty(t, {5, 41}), 2)};
        c.Attrs["first"] = Attribute::getInt(first);
        if (scale != 1.0)
          c.Attrs["scale"] = Attribute::getFloat(scale);
        c.Tol = {0, 0};
        EXPECT_EQ(compareCudaWithCpu(c), "")
            << name(t) << " first " << first << " scale " << scale;
      }
  CudaCase ints;
  ints.Op = "Accumulate";
  ints.Inputs = {randomTensor(ty(DType::I32, {4}), 1)};
  ints.InOut = {randomTensor(ty(DType::I32, {4}), 2)};
  EXPECT_NE(cudaError(ints).find("element type i32 is not supported"),
            std::string::npos);
}

/// Nf4Dequantize: the CPU's values (kernels/common/Nf4.h is one definition for
/// both) in f32, bf16 and f16, for a [3, 301] weight (15 blocks, the last
/// partial, an odd count).
TEST(CudaUpdate, Nf4Dequantize) {
  int64_t n = 3 * 301;
  Tensor w = randomTensor(ty(DType::F32, {n}), 11);
  Tensor packed(ty(DType::U8, {nf4PackedBytes(n)})),
      codes(ty(DType::U8, {nf4Blocks(n)})),
      nested(ty(DType::F32, {nf4NestedBlocks(n)})), offset(ty(DType::F32, {1}));
  quantizeNf4(reinterpret_cast<const float *>(w.bytes().data()), n,
              {packed.data(), codes.data(),
               reinterpret_cast<float *>(nested.data()),
               reinterpret_cast<float *>(offset.data())});
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    CudaCase c;
    c.Op = "Nf4Dequantize";
    c.Inputs = {packed, codes, nested, offset};
    c.Outputs = {ty(t, {3, 301})};
    c.Tol = Tolerance{0, 0};
    EXPECT_EQ(compareCudaWithCpu(c), "") << name(t);
  }
  CudaCase bad;
  bad.Op = "Nf4Dequantize";
  bad.Inputs = {packed, codes, nested, offset};
  bad.Outputs = {ty(DType::F32, {3, 302})};
  EXPECT_NE(cudaError(bad).find("codes u8[452] should be u8[453]"),
            std::string::npos)
      << cudaError(bad);
}

} // namespace

namespace {

/// Host calls of offloaded plans (kernels/cuda/HostKernel.h) run update ops
/// as threads over chunks of elements: the result is the op run piece by
/// piece, bit for bit (here AdamW on 300000 bf16 weights with f32 moments,
/// whole against slices of 1000 that each run in one piece).
TEST(HostKernel, ChunkedUpdateEqualsPieceByPiece) {
  const int64_t n = 300000, piece = 1000;
  std::vector<int64_t> shape = {n};
  Tensor g = randomTensor(ty(DType::BF16, shape), 1);
  Tensor w[2] = {randomTensor(ty(DType::BF16, shape), 2),
                 randomTensor(ty(DType::BF16, shape), 2)};
  Tensor m[2] = {randomTensor(ty(DType::F32, shape), 3),
                 randomTensor(ty(DType::F32, shape), 3)};
  Tensor v[2] = {randomTensor(ty(DType::F32, shape), 4, 0.0, 0.01),
                 randomTensor(ty(DType::F32, shape), 4, 0.0, 0.01)};
  Tensor stepSize(ty(DType::F32, {})), sqrtBc2(ty(DType::F32, {}));
  stepSize.setDouble(0, 0.01);
  sqrtBc2.setDouble(0, 0.0447);
  AttributeMap attrs;
  attrs["beta1"] = Attribute::getFloat(0.9);
  attrs["one_minus_beta1"] = Attribute::getFloat(1.0 - 0.9);
  attrs["beta2"] = Attribute::getFloat(0.999);
  attrs["one_minus_beta2"] = Attribute::getFloat(1.0 - 0.999);
  attrs["eps"] = Attribute::getFloat(1e-8);
  auto view = [](Tensor &t, int64_t at, const int64_t &len) {
    return kernels::TensorView{t.type().dtype(), llvm::makeArrayRef(&len, 1),
                               t.data() +
                                   at * int64_t(dtypeSize(t.type().dtype()))};
  };
  auto scalar = [](Tensor &t) {
    return kernels::TensorView{t.type().dtype(), {}, t.data()};
  };
  auto run = [&](int k, int64_t at, const int64_t &len) {
    kernels::TensorView ins[] = {view(g, at, len), scalar(stepSize),
                                 scalar(sqrtBc2)};
    kernels::TensorView outs[] = {view(w[k], at, len), view(m[k], at, len),
                                  view(v[k], at, len)};
    cuda::HostKernelCall call{
        kernels::KernelContext{"AdamWUpdate", ins, outs, attrs},
        nullptr,
        0,
        0,
        {}};
    return llvm::toString(cuda::runOnHost(call));
  };
  const int64_t whole = n, slice = piece;
  ASSERT_EQ(run(0, 0, whole), "");
  for (int64_t at = 0; at < n; at += piece)
    ASSERT_EQ(run(1, at, slice), "");
  EXPECT_TRUE(w[0] == w[1]);
  EXPECT_TRUE(m[0] == m[1]);
  EXPECT_TRUE(v[0] == v[1]);
  if (cpu::kernelThreads() < 2)
    std::cout << "[ note ] one kernel thread here: the whole call ran in one "
                 "piece too\n";
}

} // namespace

namespace {

/// Information only (run with --gtest_also_run_disabled_tests): the host
/// AdamW of an offloaded optimizer, f32 weights and moments, in GB/s of
/// state touched (weight, gradient, two moments read, three written).
TEST(HostKernel, DISABLED_AdamWThroughput) {
  const int64_t n = int64_t(1) << 25;
  const int64_t len = n;
  Tensor g(ty(DType::F32, {n})), w(ty(DType::F32, {n})), m(ty(DType::F32, {n})),
      v(ty(DType::F32, {n}));
  Tensor stepSize(ty(DType::F32, {})), sqrtBc2(ty(DType::F32, {}));
  stepSize.setDouble(0, 0.01);
  sqrtBc2.setDouble(0, 0.0447);
  AttributeMap attrs;
  attrs["beta1"] = Attribute::getFloat(0.9);
  attrs["one_minus_beta1"] = Attribute::getFloat(0.1);
  attrs["beta2"] = Attribute::getFloat(0.999);
  attrs["one_minus_beta2"] = Attribute::getFloat(0.001);
  attrs["eps"] = Attribute::getFloat(1e-8);
  auto view = [&](Tensor &t) {
    return kernels::TensorView{DType::F32, llvm::makeArrayRef(&len, 1),
                               t.data()};
  };
  kernels::TensorView ins[] = {view(g),
                               {DType::F32, {}, stepSize.data()},
                               {DType::F32, {}, sqrtBc2.data()}};
  kernels::TensorView outs[] = {view(w), view(m), view(v)};
  cuda::HostKernelCall call{
      kernels::KernelContext{"AdamWUpdate", ins, outs, attrs},
      nullptr,
      0,
      0,
      {}};
  ASSERT_EQ(llvm::toString(cuda::runOnHost(call)), ""); // warm
  auto start = std::chrono::steady_clock::now();
  const int reps = 5;
  for (int r = 0; r < reps; ++r)
    ASSERT_EQ(llvm::toString(cuda::runOnHost(call)), "");
  double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count() /
      reps;
  std::cout << "[ host adamw ] " << n << " f32 elements: " << s * 1e3 << " ms, "
            << 7.0 * 4 * double(n) / s / 1e9 << " GB/s on "
            << cpu::kernelThreads() << " threads\n";
}

} // namespace

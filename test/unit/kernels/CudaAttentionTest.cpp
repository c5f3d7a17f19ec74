//===- CudaAttentionTest.cpp - kernels/cuda/Attention.cu vs the CPU -------===//
//
// FusedAttention and FusedAttentionGrad against kernels/cpu/Attention.cpp on
// the same inputs (bf16 and f16 rounded once, as both kernels read them):
// grouped-query heads with a per-key bias, causal rows with dropout (the
// masks must agree bit for bit or the outputs differ), rows whose every
// score is -inf with and without zero_empty_rows, rows and heads longer than
// a block (the staged sums' chunks and passes), and a head too narrow to
// keep rowDot in dq; common head sizes over several tiles, and heads too
// wide for tiles (the untiled bodies). The gradient cases take the CPU
// forward's out and lse.
//
//===----------------------------------------------------------------------===//
#include "CudaKernelTestUtil.h"

#include "compiler/AttentionShape.h"

#include <limits>
#include <optional>

using namespace headroom;
using namespace headroom::cudatest;

namespace {

TensorType ty(DType t, std::vector<int64_t> shape) { return {t, shape}; }

std::string name(DType t) { return dtypeName(t).str(); }

/// Within a rounding of the result type: sums run in another order, exp
/// differs in its last bits between the two kernels, and the CUDA tiles
/// round p and ds to the operand type before their products (the tensor
/// cores' inputs; FlashAttention does the same, and the unfused bf16 graph
/// rounds its probabilities too), where the CPU keeps them in f32: a bf16
/// d(v) summed over 150 rows moves by up to ~20 of its last bits.
Tolerance tolFor(DType t) {
  switch (t) {
  case DType::F64:
    return {1e-12, 1e-10};
  case DType::F16:
    return {1e-3, 3e-3};
  case DType::BF16:
    return {4e-3, 1.6e-2};
  default:
    return {2e-5, 2e-4};
  }
}

struct Sizes {
  std::vector<int64_t> Batch;
  int64_t H = 1, Hkv = 1, Sq = 1, Sk = 1, D = 1, Dv = 1;

  std::vector<int64_t> shape(std::initializer_list<int64_t> tail) const {
    std::vector<int64_t> s = Batch;
    s.insert(s.end(), tail);
    return s;
  }
};

/// FusedAttention on random q, k and v of type `t` (and `bias`, if any).
CudaCase forwardCase(DType t, const Sizes &s, std::optional<Tensor> bias = {},
                     AttributeMap attrs = {}) {
  CudaCase c;
  c.Op = "FusedAttention";
  c.Inputs = {randomTensor(ty(t, s.shape({s.H, s.Sq, s.D})), 1, -1, 1),
              randomTensor(ty(t, s.shape({s.Hkv, s.Sk, s.D})), 2, -1, 1),
              randomTensor(ty(t, s.shape({s.Hkv, s.Sk, s.Dv})), 3, -1, 1)};
  if (bias)
    c.Inputs.push_back(std::move(*bias));
  c.Outputs = {ty(t, s.shape({s.H, s.Sq, s.Dv})),
               ty(attentionLseType(t), s.shape({s.H, s.Sq}))};
  c.Attrs = std::move(attrs);
  c.Seed = 1234;
  c.Tol = tolFor(t);
  return c;
}

/// FusedAttentionGrad of `fwd` at a random dout, with the CPU forward's out
/// and lse.
CudaCase gradCase(const CudaCase &fwd, bool biasGrad = false) {
  std::vector<Tensor> outs;
  std::string err = runCase(fwd, /*onCuda=*/false, outs);
  EXPECT_EQ(err, "");
  CudaCase c = fwd;
  c.Op = "FusedAttentionGrad";
  c.Inputs = {randomTensor(outs[0].type(), 4, -1, 1),
              fwd.Inputs[0],
              fwd.Inputs[1],
              fwd.Inputs[2],
              outs[0],
              outs[1]};
  if (fwd.Inputs.size() > 3)
    c.Inputs.push_back(fwd.Inputs[3]);
  c.Outputs = {fwd.Inputs[0].type(), fwd.Inputs[1].type(),
               fwd.Inputs[2].type()};
  if (biasGrad)
    c.Outputs.push_back(fwd.Inputs[3].type());
  return c;
}

/// Forward and gradient agree with the CPU's.
void expectBothAgree(const CudaCase &fwd, const std::string &what) {
  EXPECT_EQ(compareCudaWithCpu(fwd), "") << what << " forward";
  EXPECT_EQ(compareCudaWithCpu(gradCase(fwd)), "") << what << " gradient";
}

const DType kFloatTypes[] = {DType::F32, DType::BF16, DType::F16, DType::F64};

TEST(CudaAttention, GroupedQueryHeadsWithKeyBias) {
  Sizes s{{2}, 4, 2, 5, 7, 8, 6};
  for (DType t : kFloatTypes) {
    // [b, 1, 1, Sk]: a padding mask's shape, per batch and key.
    Tensor bias = randomTensor(ty(DType::F32, {2, 1, 1, 7}), 5, -1, 1);
    bias.setDouble(3, -std::numeric_limits<double>::infinity());
    expectBothAgree(forwardCase(t, s, bias), name(t));
    AttributeMap scaled;
    scaled["scale"] = Attribute::getFloat(0.7);
    expectBothAgree(forwardCase(t, s, bias, scaled), name(t) + " scale 0.7");
    expectBothAgree(forwardCase(t, s), name(t) + " without bias");
  }
}

/// A trained bias (T5's relative positions, [1, H, Sq, Sk], shared by the
/// batch; a per-key one) gets d(bias): ds summed over the broadcast axes.
TEST(CudaAttention, TrainedBiasGradient) {
  Sizes s{{3}, 4, 2, 6, 6, 8, 5};
  AttributeMap causal;
  causal["causal"] = Attribute::getInt(1);
  causal["dropout"] = Attribute::getFloat(0.2);
  for (DType t : {DType::F32, DType::BF16, DType::F64}) {
    DType bt = t == DType::F64 ? DType::F64 : DType::F32;
    Tensor positions = randomTensor(ty(bt, {1, 4, 6, 6}), 7, -1, 1);
    EXPECT_EQ(compareCudaWithCpu(gradCase(forwardCase(t, s, positions), true)),
              "")
        << name(t) << " [1, H, Sq, Sk]";
    EXPECT_EQ(compareCudaWithCpu(
                  gradCase(forwardCase(t, s, positions, causal), true)),
              "")
        << name(t) << " causal, dropout";
    Tensor keys = randomTensor(ty(bt, {3, 1, 1, 6}), 8, -1, 1);
    EXPECT_EQ(compareCudaWithCpu(gradCase(forwardCase(t, s, keys), true)), "")
        << name(t) << " [b, 1, 1, Sk]";
  }
}

TEST(CudaAttention, CausalWithDropout) {
  // Two batch axes, the bias broadcast over the first.
  Sizes s{{2, 3}, 2, 1, 9, 9, 8, 5};
  for (DType t : kFloatTypes) {
    AttributeMap attrs;
    attrs["causal"] = Attribute::getInt(1);
    attrs["dropout"] = Attribute::getFloat(0.3);
    Tensor bias = randomTensor(ty(DType::F32, {3, 1, 9, 9}), 6, -1, 1);
    expectBothAgree(forwardCase(t, s, bias, attrs), name(t));
    expectBothAgree(forwardCase(t, s, {}, attrs), name(t) + " without bias");
  }
  // The mask is drawn: the output differs from the one without dropout.
  AttributeMap causal;
  causal["causal"] = Attribute::getInt(1);
  AttributeMap dropped = causal;
  dropped["dropout"] = Attribute::getFloat(0.3);
  std::vector<Tensor> kept, drop;
  ASSERT_EQ(runCudaOnly(forwardCase(DType::F32, s, {}, causal), kept), "");
  ASSERT_EQ(runCudaOnly(forwardCase(DType::F32, s, {}, dropped), drop), "");
  EXPECT_NE(compareTensors(drop[0], kept[0], {1e-3, 1e-3}), "");
  EXPECT_EQ(compareTensors(drop[1], kept[1], {0, 0}), "") << "lse";
}

TEST(CudaAttention, RowsWithNoKeyToLookAt) {
  Sizes s{{2}, 2, 2, 4, 6, 8, 8};
  const double inf = std::numeric_limits<double>::infinity();
  // [Sq, Sk]: row 1 sees no key, row 2 some.
  Tensor bias = randomTensor(ty(DType::F32, {4, 6}), 7, -1, 1);
  for (int64_t j = 0; j < 6; ++j)
    bias.setDouble(1 * 6 + j, -inf);
  bias.setDouble(2 * 6 + 0, -inf);
  bias.setDouble(2 * 6 + 4, -inf);
  for (DType t : {DType::F32, DType::BF16}) {
    AttributeMap zero;
    zero["zero_empty_rows"] = Attribute::getInt(1);
    CudaCase fwd = forwardCase(t, s, bias, zero);
    expectBothAgree(fwd, name(t) + " zero_empty_rows");
    // Without the attribute the empty rows are NaN on both.
    expectBothAgree(forwardCase(t, s, bias), name(t) + " NaN rows");

    std::vector<Tensor> outs, grads;
    ASSERT_EQ(runCudaOnly(fwd, outs), "");
    for (int64_t bh = 0; bh < 4; ++bh) {
      EXPECT_EQ(outs[1].getDouble(bh * 4 + 1), -inf) << name(t);
      for (int64_t e = 0; e < 8; ++e)
        EXPECT_EQ(outs[0].getDouble((bh * 4 + 1) * 8 + e), 0.0) << name(t);
    }
    ASSERT_EQ(runCudaOnly(gradCase(fwd), grads), "");
    for (const Tensor &g : grads)
      for (int64_t i = 0; i < g.numElements(); ++i)
        ASSERT_TRUE(std::isfinite(g.getDouble(i))) << name(t) << " " << i;
    for (int64_t bh = 0; bh < 4; ++bh)
      for (int64_t e = 0; e < 8; ++e)
        EXPECT_EQ(grads[0].getDouble((bh * 4 + 1) * 8 + e), 0.0) << name(t);
  }
}

TEST(CudaAttention, RowsAndHeadsWiderThanABlock) {
  // 300 keys and 2 x 270 query rows per key: more than a block's staged
  // weights; D + Dv = 300: two passes of the key gradient's elements.
  Sizes longRows{{1}, 2, 1, 270, 300, 12, 10};
  Sizes wideHeads{{2}, 2, 2, 6, 5, 200, 100};
  for (DType t : {DType::F32, DType::BF16}) {
    Tensor bias = randomTensor(ty(DType::F32, {270, 300}), 8, -1, 1);
    expectBothAgree(forwardCase(t, longRows, bias), name(t) + " long rows");
    AttributeMap causal;
    causal["causal"] = Attribute::getInt(1);
    causal["dropout"] = Attribute::getFloat(0.1);
    Sizes square = longRows;
    square.Sq = square.Sk = 280;
    expectBothAgree(forwardCase(t, square, {}, causal), name(t) + " causal");
    expectBothAgree(forwardCase(t, wideHeads), name(t) + " wide heads");
  }
}

TEST(CudaAttention, TilesOfCommonHeadSizes) {
  // GPT-2's and Llama's head sizes: several query and key tiles, the last
  // ones partial, grouped-query heads, causal rows with dropout and a
  // padding mask; on the GPU, bf16 and f16 tiles go through the tensor
  // cores.
  for (int64_t d : {64, 128}) {
    Sizes s{{1}, 4, 2, 150, 150, d, d};
    Tensor bias = randomTensor(ty(DType::F32, {1, 1, 1, 150}), 10, -1, 1);
    bias.setDouble(17, -std::numeric_limits<double>::infinity());
    AttributeMap attrs;
    attrs["causal"] = Attribute::getInt(1);
    attrs["dropout"] = Attribute::getFloat(0.1);
    for (DType t : {DType::BF16, DType::F16, DType::F32})
      expectBothAgree(forwardCase(t, s, bias, attrs),
                      name(t) + " d " + std::to_string(d));
  }
}

TEST(CudaAttention, HeadsTooWideForTiles) {
  // f64 rows of 300 elements: not even 16 x 16 tiles fit in a block's
  // shared memory, so every pass runs untiled.
  Sizes s{{1}, 2, 1, 20, 24, 300, 200};
  AttributeMap attrs;
  attrs["dropout"] = Attribute::getFloat(0.2);
  expectBothAgree(forwardCase(DType::F64, s, {}, attrs), "f64");
}

TEST(CudaAttention, HeadsTooNarrowToKeepRowDotInDq) {
  // A bf16 dq row of one element cannot hold a float: the key pass
  // recomputes rowDot.
  Sizes s{{2}, 2, 1, 5, 4, 1, 3};
  AttributeMap attrs;
  attrs["dropout"] = Attribute::getFloat(0.25);
  for (DType t : {DType::BF16, DType::F16, DType::F32})
    expectBothAgree(forwardCase(t, s, {}, attrs), name(t));
}

TEST(CudaAttention, BiasInF64WithF64Queries) {
  Sizes s{{2}, 2, 1, 3, 4, 5, 5};
  Tensor bias = randomTensor(ty(DType::F64, {2, 2, 3, 4}), 9, -1, 1);
  expectBothAgree(forwardCase(DType::F64, s, bias), "f64");
}

TEST(CudaAttention, RefusesWhatTheCpuRefuses) {
  Sizes s{{1}, 2, 1, 3, 4, 8, 8};
  AttributeMap causal;
  causal["causal"] = Attribute::getInt(1);
  std::vector<Tensor> outs;
  EXPECT_NE(runCudaOnly(forwardCase(DType::F32, s, {}, causal), outs)
                .find("as many queries as keys"),
            std::string::npos);
  AttributeMap dropout;
  dropout["dropout"] = Attribute::getFloat(1.0);
  EXPECT_NE(runCudaOnly(forwardCase(DType::F32, s, {}, dropout), outs)
                .find("is not in [0, 1)"),
            std::string::npos);
  Sizes odd = s;
  odd.Hkv = 3;
  odd.H = 4;
  EXPECT_NE(runCudaOnly(forwardCase(DType::F32, odd), outs).find("divide"),
            std::string::npos);
  CudaCase badLse = forwardCase(DType::BF16, s);
  badLse.Outputs[1] = ty(DType::BF16, {1, 2, 3});
  EXPECT_NE(runCudaOnly(badLse, outs).find("lse"), std::string::npos);
}

} // namespace

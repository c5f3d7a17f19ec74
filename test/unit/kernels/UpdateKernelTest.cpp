//===- UpdateKernelTest.cpp - The optimizer updates and Accumulate --------===//
//
// The update kernels write their state slots (the outputs) in place. They
// must round exactly as torch.optim's ops do, one rounding per operation in
// its order (LOMO's weights are SGD's bit for bit; fused momentum and AdamW
// are the primitive ops' arithmetic), so the expected values are computed
// here with the same f32 operations in the same order, and compared exactly.
//
//===----------------------------------------------------------------------===//
#include "KernelTestUtil.h"

#include "kernels/common/Blockwise8bit.h"
#include "kernels/common/Nf4.h"
#include "kernels/cpu/Parallel.h"

#include <cmath>

using namespace headroom;
using namespace headroom::cpu;

namespace {

std::vector<float> randomFloats(int64_t n, unsigned seed) {
  std::vector<double> d = randomData(n, seed);
  return std::vector<float>(d.begin(), d.end());
}

TensorView view(std::vector<float> &v, const std::vector<int64_t> &shape) {
  return TensorView{DType::F32, shape, v.data()};
}

AttributeMap sgdAttrs(double lr, double wd) {
  AttributeMap a;
  a["lr"] = Attribute::getFloat(lr);
  a["weight_decay"] = Attribute::getFloat(wd);
  return a;
}

TEST(UpdateKernel, SgdUpdateRoundsLikeTheSgdOps) {
  std::vector<int64_t> shape = {7, 5};
  for (bool scaled : {false, true})
    for (double wd : {0.0, 0.01}) {
      std::vector<float> w = randomFloats(35, 1), g = randomFloats(35, 2);
      std::vector<float> want = w;
      float lr = 0.05f, wdf = static_cast<float>(wd), scale = 0.37f;
      for (size_t i = 0; i < want.size(); ++i) {
        float d = scaled ? g[i] * scale : g[i]; // Mul(g, coef)
        if (wd != 0)
          d = d + want[i] * wdf;    // Add(g, Mul(w, wd))
        want[i] = want[i] - d * lr; // Sub(w, Mul(g, lr))
      }
      std::vector<float> s = {scale};
      std::vector<TensorView> ins = {view(g, shape)};
      if (scaled)
        ins.push_back(view(s, {}));
      ASSERT_EQ(
          runKernel("SgdUpdate", ins, {view(w, shape)}, sgdAttrs(0.05, wd)),
          "");
      EXPECT_EQ(w, want) << "scaled " << scaled << " wd " << wd;
    }
}

TEST(UpdateKernel, SgdUpdateF64) {
  T64 w({4}, 3), g({4}, 4);
  std::vector<double> want = w.Data;
  double lr = static_cast<float>(0.1); // attributes are f32
  for (size_t i = 0; i < want.size(); ++i)
    want[i] = want[i] - g.Data[i] * lr;
  ASSERT_EQ(runKernel("SgdUpdate", {g.view()}, {w.view()}, sgdAttrs(0.1, 0)),
            "");
  EXPECT_EQ(w.Data, want);
}

AttributeMap momentumAttrs(double lr, double wd, double mu, bool nesterov) {
  AttributeMap a = sgdAttrs(lr, wd);
  a["momentum"] = Attribute::getFloat(mu);
  a["nesterov"] = Attribute::getInt(nesterov);
  return a;
}

TEST(UpdateKernel, MomentumUpdateRoundsLikeTorch) {
  std::vector<int64_t> shape = {3, 4};
  for (bool scaled : {false, true})
    for (double wd : {0.0, 0.01})
      for (bool nesterov : {false, true}) {
        std::vector<float> w = randomFloats(12, 7), buf(12, 0.0f);
        std::vector<float> wantW = w, wantBuf = buf;
        float lr = 0.05f, wdf = static_cast<float>(wd), mu = 0.9f,
              scale = 0.37f;
        std::vector<float> s = {scale};
        // Two steps: the second one reads a buffer the first one wrote.
        for (unsigned step = 0; step < 2; ++step) {
          std::vector<float> g = randomFloats(12, 8 + step);
          for (size_t i = 0; i < w.size(); ++i) {
            float d = scaled ? g[i] * scale : g[i];
            if (wd != 0)
              d = d + wantW[i] * wdf;
            wantBuf[i] = wantBuf[i] * mu + d;
            float u = nesterov ? d + wantBuf[i] * mu : wantBuf[i];
            wantW[i] = wantW[i] - u * lr;
          }
          std::vector<TensorView> ins = {view(g, shape)};
          if (scaled)
            ins.push_back(view(s, {}));
          ASSERT_EQ(runKernel("MomentumUpdate", ins,
                              {view(w, shape), view(buf, shape)},
                              momentumAttrs(0.05, wd, 0.9, nesterov)),
                    "");
        }
        EXPECT_EQ(w, wantW) << scaled << wd << nesterov;
        EXPECT_EQ(buf, wantBuf) << scaled << wd << nesterov;
      }
}

/// The attributes the optimizer pass gives AdamWUpdate: each factor computed
/// in double and rounded once, as torch's Python scalars are.
AttributeMap adamwAttrs(double lr, double wd) {
  AttributeMap a;
  if (wd != 0)
    a["decay"] = Attribute::getFloat(1.0 - lr * wd);
  a["beta1"] = Attribute::getFloat(0.9);
  a["one_minus_beta1"] = Attribute::getFloat(1.0 - 0.9);
  a["beta2"] = Attribute::getFloat(0.999);
  a["one_minus_beta2"] = Attribute::getFloat(1.0 - 0.999);
  a["eps"] = Attribute::getFloat(1e-8);
  return a;
}

/// lr / (1 - beta1^t) and sqrt(1 - beta2^t) in double, rounded once.
std::vector<float> biasCorrections(double lr, int step) {
  return {static_cast<float>(lr / (1.0 - std::pow(0.9, double(step)))),
          static_cast<float>(std::sqrt(1.0 - std::pow(0.999, double(step))))};
}

/// One AdamW step as torch.optim.AdamW (single tensor) computes it in f32.
void adamwReference(std::vector<float> &w, std::vector<float> &m,
                    std::vector<float> &v, const std::vector<float> &g,
                    float scale, double lr, double wd, int step) {
  float decay = static_cast<float>(1.0 - lr * wd);
  float b1 = 0.9f, b2 = 0.999f, c1 = static_cast<float>(1.0 - 0.9),
        c2 = static_cast<float>(1.0 - 0.999), eps = 1e-8f;
  std::vector<float> bc = biasCorrections(lr, step);
  for (size_t i = 0; i < w.size(); ++i) {
    float d = g[i] * scale;
    float wi = wd != 0 ? w[i] * decay : w[i];
    m[i] = m[i] * b1 + d * c1;
    v[i] = v[i] * b2 + (d * d) * c2;
    float denom = std::sqrt(v[i]) / bc[1] + eps;
    w[i] = wi - (m[i] / denom) * bc[0];
  }
}

TEST(UpdateKernel, AdamWUpdateRoundsLikeTorch) {
  // Large enough that the kernel splits the loop across its threads.
  int64_t n = 3 * kParallelGrain + 17;
  std::vector<int64_t> shape = {n};
  for (bool scaled : {false, true})
    for (double wd : {0.0, 0.01}) {
      std::vector<float> w = randomFloats(n, 11), m(n, 0.0f), v(n, 0.0f);
      std::vector<float> wantW = w, wantM = m, wantV = v;
      float scale = scaled ? 0.37f : 1.0f;
      for (int step = 1; step <= 3; ++step) {
        std::vector<float> g = randomFloats(n, 12 + step);
        adamwReference(wantW, wantM, wantV, g, scale, 1e-3, wd, step);
        std::vector<float> bc = biasCorrections(1e-3, step);
        std::vector<float> stepSize = {bc[0]}, sqrtBc2 = {bc[1]};
        std::vector<float> s = {scale};
        std::vector<TensorView> ins = {view(g, shape), view(stepSize, {}),
                                       view(sqrtBc2, {})};
        if (scaled)
          ins.push_back(view(s, {}));
        ASSERT_EQ(runKernel("AdamWUpdate", ins,
                            {view(w, shape), view(m, shape), view(v, shape)},
                            adamwAttrs(1e-3, wd)),
                  "");
      }
      EXPECT_EQ(w, wantW) << scaled << wd;
      EXPECT_EQ(m, wantM) << scaled << wd;
      EXPECT_EQ(v, wantV) << scaled << wd;
    }
}

TEST(UpdateKernel, DisabledFusedUpdatesWriteNothing) {
  std::vector<int64_t> shape = {5};
  std::vector<float> w = randomFloats(5, 21), m = randomFloats(5, 22),
                     v(5, 0.25f), g(5, std::nanf("")), one = {1.0f};
  std::vector<float> w0 = w, m0 = m, v0 = v;
  uint8_t off = 0;
  TensorView flag{DType::Bool, {}, &off};
  ASSERT_EQ(runKernel("AdamWUpdate",
                      {view(g, shape), view(one, {}), view(one, {}),
                       view(one, {}), flag},
                      {view(w, shape), view(m, shape), view(v, shape)},
                      adamwAttrs(1e-3, 0.01)),
            "");
  ASSERT_EQ(runKernel("MomentumUpdate", {view(g, shape), view(one, {}), flag},
                      {view(w, shape), view(m, shape)},
                      momentumAttrs(0.1, 0, 0.9, false)),
            "");
  EXPECT_EQ(w, w0);
  EXPECT_EQ(m, m0);
  EXPECT_EQ(v, v0);
}

TEST(UpdateKernel, AdamWUpdateF64) {
  T64 w({6}, 31), g({6}, 32), m({6}, 0), v({6}, 0);
  std::vector<double> stepSize = {0.01}, sqrtBc2 = {0.0316};
  std::vector<int64_t> none;
  TensorView ss{DType::F64, none, stepSize.data()},
      bc{DType::F64, none, sqrtBc2.data()};
  std::vector<double> want = w.Data;
  // The attributes are f32: the factors are f32 values computed in f64.
  double c1 = static_cast<float>(1.0 - 0.9),
         c2 = static_cast<float>(1.0 - 0.999), eps = static_cast<float>(1e-8);
  for (size_t i = 0; i < want.size(); ++i) {
    double mi = g.Data[i] * c1;
    double vi = (g.Data[i] * g.Data[i]) * c2;
    want[i] = want[i] - (mi / (std::sqrt(vi) / sqrtBc2[0] + eps)) * 0.01;
  }
  ASSERT_EQ(runKernel("AdamWUpdate", {g.view(), ss, bc},
                      {w.view(), m.view(), v.view()}, adamwAttrs(0.1, 0)),
            "");
  EXPECT_EQ(w.Data, want);
}

TEST(UpdateKernel, AccumulateWritesFirstThenAdds) {
  std::vector<int64_t> shape = {6};
  std::vector<float> acc(6, 123.0f), g1 = randomFloats(6, 5),
                                     g2 = randomFloats(6, 6);
  AttributeMap first, add;
  first["scale"] = Attribute::getFloat(0.25);
  first["first"] = Attribute::getInt(1);
  add["scale"] = Attribute::getFloat(0.25);
  ASSERT_EQ(
      runKernel("Accumulate", {view(g1, shape)}, {view(acc, shape)}, first),
      "");
  ASSERT_EQ(runKernel("Accumulate", {view(g2, shape)}, {view(acc, shape)}, add),
            "");
  for (size_t i = 0; i < acc.size(); ++i)
    EXPECT_EQ(acc[i], g1[i] * 0.25f + g2[i] * 0.25f) << i;
}

TEST(UpdateKernel, ErrorsNameTheProblem) {
  std::vector<float> w(4), g(3), s(2);
  EXPECT_EQ(
      runKernel("SgdUpdate", {view(g, {3})}, {view(w, {4})}, sgdAttrs(0.1, 0)),
      "SgdUpdate: gradient f32[3] does not match the state f32[4]");
  std::vector<float> g4(4);
  EXPECT_EQ(runKernel("SgdUpdate", {view(g4, {4}), view(s, {2})},
                      {view(w, {4})}, sgdAttrs(0.1, 0)),
            "SgdUpdate: operand 1 must be a scalar of the state's type");
  EXPECT_EQ(runKernel("Accumulate", {view(g4, {4})}, {}),
            "Accumulate: needs its state slot as the output");
  std::vector<float> m(4), m3(3), one = {1.0f};
  EXPECT_EQ(runKernel("AdamWUpdate",
                      {view(g4, {4}), view(one, {}), view(one, {})},
                      {view(w, {4}), view(m, {4})}),
            "AdamWUpdate: needs its 3 state slots as the outputs");
  EXPECT_EQ(runKernel("MomentumUpdate", {view(g4, {4})},
                      {view(w, {4}), view(m3, {3})}),
            "MomentumUpdate: state f32[3] does not match the weight f32[4]");
  EXPECT_EQ(runKernel("AdamWUpdate",
                      {view(g4, {4}), view(s, {2}), view(one, {})},
                      {view(w, {4}), view(m, {4}), view(m, {4})}),
            "AdamWUpdate: operand 1 must be a scalar of the state's type");
  EXPECT_EQ(runKernel("AdamWUpdate", {view(g4, {4})},
                      {view(w, {4}), view(m, {4}), view(m, {4})}),
            "AdamWUpdate: needs the step size and sqrt_bc2");
  std::vector<int32_t> wi(4), gi(4);
  std::vector<int64_t> four = {4};
  EXPECT_EQ(runKernel("Accumulate", {TensorView{DType::I32, four, gi.data()}},
                      {TensorView{DType::I32, four, wi.data()}}),
            "Accumulate: element type i32 is not supported");
}

/// The 8-bit state of kernels/common/Blockwise8bit.h.

TEST(Blockwise8bit, EveryCodeQuantizesToItself) {
  for (int i = 0; i < 256; ++i) {
    EXPECT_EQ(kSignedDynamicMap[nearestCode<true>(kSignedDynamicMap,
                                                  kSignedDynamicMap[i])],
              kSignedDynamicMap[i])
        << i;
    EXPECT_EQ(kUnsignedDynamicMap[nearestCode<false>(kUnsignedDynamicMap,
                                                     kUnsignedDynamicMap[i])],
              kUnsignedDynamicMap[i])
        << i;
  }
  // Sorted, from about -1 (signed) or 0 (unsigned) to 1.
  for (int i = 1; i < 256; ++i) {
    EXPECT_LE(kSignedDynamicMap[i - 1], kSignedDynamicMap[i]);
    EXPECT_LE(kUnsignedDynamicMap[i - 1], kUnsignedDynamicMap[i]);
  }
  EXPECT_EQ(kSignedDynamicMap[255], 1.0f);
  EXPECT_EQ(kSignedDynamicMap[127], 0.0f);
  EXPECT_EQ(kUnsignedDynamicMap[0], 0.0f);
  EXPECT_EQ(kUnsignedDynamicMap[255], 1.0f);
}

TEST(Blockwise8bit, CodesAreTheNearestAndKeepTheSign) {
  // Values spread over the maps' decades, both signs.
  std::vector<float> xs = randomFloats(4000, 31);
  for (size_t k = 0; k < xs.size(); ++k)
    xs[k] *= std::pow(10.0f, -float(k % 7));
  xs.push_back(-1e-9f); // nearer 0 than any negative code
  xs.push_back(-0.0f);
  for (float x : xs) {
    uint8_t c = nearestCode<true>(kSignedDynamicMap, x);
    for (int j = 0; j < 256; ++j)
      ASSERT_LE(std::fabs(x - kSignedDynamicMap[c]),
                std::fabs(x - kSignedDynamicMap[j]))
          << x << " -> code " << int(c) << ", but code " << j << " is nearer";
    // The first moment's code keeps the value's sign: a negative value
    // nearest 0 takes the smallest negative code instead.
    uint8_t q = quantizeSigned(kSignedDynamicMap, x, 1.0f);
    EXPECT_EQ(std::signbit(kSignedDynamicMap[q]), std::signbit(x)) << x;
    EXPECT_LE(std::abs(int(q) - int(c)), 1) << x;
    float u = std::fabs(x);
    uint8_t cu = nearestCode<false>(kUnsignedDynamicMap, u);
    for (int j = 0; j < 256; ++j)
      ASSERT_LE(std::fabs(u - kUnsignedDynamicMap[cu]),
                std::fabs(u - kUnsignedDynamicMap[j]))
          << u;
  }
}

/// The state of an 8-bit AdamW: codes and an absmax per block.
struct State8bit {
  std::vector<uint8_t> M, V;
  std::vector<float> MAbs, VAbs;
  std::vector<int64_t> Codes, Blocks; // the views' shapes
  explicit State8bit(int64_t n)
      : M(n, 127), V(n, 0), MAbs(stateBlocks(n), 0.0f),
        VAbs(stateBlocks(n), 0.0f), Codes{n}, Blocks{stateBlocks(n)} {}
  /// The moments the codes stand for.
  float m(int64_t i) const {
    return kSignedDynamicMap[M[i]] * MAbs[i / kStateBlock];
  }
  float v(int64_t i) const {
    return kUnsignedDynamicMap[V[i]] * VAbs[i / kStateBlock];
  }
  std::vector<TensorView> views(TensorView w) {
    return {w, TensorView{DType::U8, Codes, M.data()},
            TensorView{DType::U8, Codes, V.data()},
            TensorView{DType::F32, Blocks, MAbs.data()},
            TensorView{DType::F32, Blocks, VAbs.data()}};
  }
};

TEST(UpdateKernel, AdamW8bitUpdateIsAdamWOnTheDequantizedMoments) {
  // Several blocks and a partial last one, across the kernel's threads.
  for (int64_t n : {int64_t(1000), 40 * kStateBlock + 3}) {
    for (bool scaled : {false, true}) {
      std::vector<int64_t> shape = {n};
      std::vector<float> w = randomFloats(n, 41);
      State8bit q(n);
      float scale = scaled ? 0.37f : 1.0f;
      for (int step = 1; step <= 4; ++step) {
        std::vector<float> g = randomFloats(n, 42 + step);
        if (step == 2) // a block of zeros: absmax 0 stays exact
          std::fill(g.begin(), g.begin() + kStateBlock, 0.0f);
        // What AdamWUpdate computes from the same moments, in f32.
        std::vector<float> wantW = w, m(n), v(n);
        for (int64_t i = 0; i < n; ++i) {
          m[i] = q.m(i);
          v[i] = q.v(i);
        }
        adamwReference(wantW, m, v, g, scale, 1e-3, 0.01, step);
        std::vector<float> bc = biasCorrections(1e-3, step);
        std::vector<float> stepSize = {bc[0]}, sqrtBc2 = {bc[1]}, s = {scale};
        std::vector<TensorView> ins = {view(g, shape), view(stepSize, {}),
                                       view(sqrtBc2, {})};
        if (scaled)
          ins.push_back(view(s, {}));
        ASSERT_EQ(runKernel("AdamW8bitUpdate", ins, q.views(view(w, shape)),
                            adamwAttrs(1e-3, 0.01)),
                  "");
        // The weight from the unquantized moments: AdamW's bits.
        ASSERT_EQ(w, wantW) << "step " << step;
        for (int64_t b = 0; b < stateBlocks(n); ++b) {
          float mMax = 0, vMax = 0;
          for (int64_t i = b * kStateBlock;
               i < std::min(n, (b + 1) * kStateBlock); ++i) {
            mMax = std::max(mMax, std::fabs(m[i]));
            vMax = std::max(vMax, v[i]);
          }
          ASSERT_EQ(q.MAbs[b], mMax) << "block " << b;
          ASSERT_EQ(q.VAbs[b], vMax) << "block " << b;
        }
        // Each stored moment is the nearest code to the f32 one (the first
        // keeping its sign).
        for (int64_t i = 0; i < n; ++i) {
          float mAbs = q.MAbs[i / kStateBlock], vAbs = q.VAbs[i / kStateBlock];
          if (vAbs == 0) {
            ASSERT_EQ(q.m(i), 0.0f);
            ASSERT_EQ(q.v(i), 0.0f);
            continue;
          }
          ASSERT_EQ(q.M[i], quantizeSigned(kSignedDynamicMap, m[i], mAbs));
          ASSERT_EQ(q.V[i], quantizeUnsigned(kUnsignedDynamicMap, v[i], vAbs));
          // The codes are dense near 1: the largest element is kept within
          // 1% of its block's absmax.
          if (std::fabs(m[i]) == mAbs) {
            ASSERT_NEAR(q.m(i), m[i], 0.01f * mAbs) << i;
          }
        }
      }
    }
  }
}

TEST(UpdateKernel, AdamW8bitUpdateWidensBf16Weights) {
  int64_t n = 600;
  std::vector<int64_t> shape = {n};
  std::vector<float> w32 = randomFloats(n, 51), g32 = randomFloats(n, 52);
  std::vector<uint16_t> w(n), g(n);
  for (int64_t i = 0; i < n; ++i) {
    w[i] = floatToBf16(w32[i]);
    g[i] = floatToBf16(g32[i]);
    w32[i] = bf16ToFloat(w[i]);
    g32[i] = bf16ToFloat(g[i]);
  }
  State8bit a(n), b(n);
  std::vector<float> bc = biasCorrections(1e-3, 1);
  std::vector<float> stepSize = {bc[0]}, sqrtBc2 = {bc[1]};
  // Through cpu::runKernel, which widens the bf16 operands for the kernel.
  std::vector<TensorView> ins = {TensorView{DType::BF16, shape, g.data()},
                                 view(stepSize, {}), view(sqrtBc2, {})},
                          outs =
                              a.views(TensorView{DType::BF16, shape, w.data()});
  AttributeMap attrs = adamwAttrs(1e-3, 0.01);
  KernelContext ctx{"AdamW8bitUpdate", ins, outs, attrs, 0};
  llvm::Error e = cpu::runKernel(ctx);
  ASSERT_EQ(e ? llvm::toString(std::move(e)) : "", "");
  ASSERT_EQ(runKernel("AdamW8bitUpdate",
                      {view(g32, shape), view(stepSize, {}), view(sqrtBc2, {})},
                      b.views(view(w32, shape)), adamwAttrs(1e-3, 0.01)),
            "");
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(w[i], floatToBf16(w32[i])) << i; // computed in f32, rounded once
  EXPECT_EQ(a.M, b.M);
  EXPECT_EQ(a.V, b.V);
  EXPECT_EQ(a.MAbs, b.MAbs);
}

TEST(UpdateKernel, AdamW8bitUpdateChecksItsState) {
  std::vector<float> w(300), g(300), one = {1.0f};
  State8bit q(300);
  std::vector<int64_t> shape = {300};
  uint8_t off = 0;
  TensorView flag{DType::Bool, {}, &off};
  std::vector<uint8_t> m0 = q.M;
  std::vector<float> g0(300, 1.0f), w0 = w;
  ASSERT_EQ(runKernel("AdamW8bitUpdate",
                      {view(g0, shape), view(one, {}), view(one, {}),
                       view(one, {}), flag},
                      q.views(view(w, shape)), adamwAttrs(1e-3, 0.01)),
            "");
  EXPECT_EQ(w, w0); // a skipped step
  EXPECT_EQ(q.M, m0);
  std::vector<TensorView> bad = q.views(view(w, shape));
  std::vector<int64_t> oneBlock = {1};
  bad[3] = TensorView{DType::F32, oneBlock, q.MAbs.data()};
  EXPECT_EQ(runKernel("AdamW8bitUpdate",
                      {view(g, shape), view(one, {}), view(one, {})}, bad,
                      adamwAttrs(1e-3, 0)),
            "AdamW8bitUpdate: absmax f32[1] is not f32[2]");
  bad = q.views(view(w, shape));
  bad.pop_back();
  EXPECT_EQ(runKernel("AdamW8bitUpdate",
                      {view(g, shape), view(one, {}), view(one, {})}, bad,
                      adamwAttrs(1e-3, 0)),
            "AdamW8bitUpdate: needs its 5 state slots as the outputs");
}

} // namespace

namespace {

/// An NF4 weight's four slots, filled by quantizeNf4 from `w`.
struct Nf4Weight {
  std::vector<uint8_t> Packed, Codes;
  std::vector<float> Nested, Offset{0.0f};
  std::vector<int64_t> PackedShape, CodesShape, NestedShape, OffsetShape{1};
  explicit Nf4Weight(const std::vector<float> &w) {
    int64_t n = int64_t(w.size());
    Packed.resize(size_t(nf4PackedBytes(n)));
    Codes.resize(size_t(nf4Blocks(n)));
    Nested.resize(size_t(nf4NestedBlocks(n)));
    PackedShape = {nf4PackedBytes(n)};
    CodesShape = {nf4Blocks(n)};
    NestedShape = {nf4NestedBlocks(n)};
    quantizeNf4(w.data(), n,
                {Packed.data(), Codes.data(), Nested.data(), Offset.data()});
  }
  std::vector<TensorView> views() {
    return {TensorView{DType::U8, PackedShape, Packed.data()},
            TensorView{DType::U8, CodesShape, Codes.data()},
            TensorView{DType::F32, NestedShape, Nested.data()},
            TensorView{DType::F32, OffsetShape, Offset.data()}};
  }
};

} // namespace

/// One block by hand: 2 is its absmax (code 15, the value 1), 0.5 of it
/// lies below the midpoint of 0.4407 and 0.5626 (code 12), -2 is code 0,
/// 0 is code 7 (an exact 0). A single block's absmax less the offset (its
/// own mean) is 0, which dequantizes to the offset exactly.
TEST(Nf4, QuantizesOneBlockByHand) {
  std::vector<float> w(kNf4Block, 0.0f);
  w[0] = 2.0f;
  w[1] = 1.0f;
  w[2] = -2.0f;
  Nf4Weight q(w);
  EXPECT_EQ(q.Packed[0], (15 << 4) | 12);
  EXPECT_EQ(q.Packed[1], (0 << 4) | 7);
  EXPECT_EQ(q.Offset[0], 2.0f);
  EXPECT_EQ(q.Nested[0], 0.0f);
  std::vector<float> out(kNf4Block);
  std::vector<int64_t> shape = {kNf4Block};
  ASSERT_EQ(runKernel("Nf4Dequantize", q.views(), {view(out, shape)}), "");
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(out[1], kNf4Map[12] * 2.0f);
  EXPECT_EQ(out[2], -2.0f);
  EXPECT_EQ(out[3], 0.0f);
}

/// Many blocks (a partial last one, an odd count: the pad nibble): each
/// code is the NF4 value nearest the element over its block's absmax, each
/// absmax survives its 8-bit code within the map's resolution, and the
/// kernel's f32, bf16 and f16 results are dequantizeNf4's, rounded once.
TEST(Nf4, DequantizeIsTheNearestValueTimesTheAbsmax) {
  for (int64_t n : {int64_t(1001), 300 * kNf4Block}) {
    std::vector<float> w = randomFloats(n, 61);
    Nf4Weight q(w);
    std::vector<int64_t> shape = {n};
    std::vector<float> out(static_cast<size_t>(n));
    ASSERT_EQ(runKernel("Nf4Dequantize", q.views(), {view(out, shape)}), "");
    for (int64_t b = 0; b < nf4Blocks(n); ++b) {
      float absmax = 0.0f;
      int64_t first = b * kNf4Block, last = std::min(n, first + kNf4Block);
      for (int64_t i = first; i < last; ++i)
        absmax = std::max(absmax, std::fabs(w[i]));
      float stored = nf4BlockAbsmax(kSignedDynamicMap, q.Codes.data(),
                                    q.Nested.data(), q.Offset[0], b);
      ASSERT_NEAR(stored, absmax, 0.01f * absmax) << "block " << b;
      for (int64_t i = first; i < last; ++i) {
        float x = w[i] / absmax;
        unsigned code = nf4CodeAt(q.Packed.data(), i);
        for (unsigned c = 0; c < 16; ++c) // no value nearer
          ASSERT_LE(std::fabs(kNf4Map[code] - x),
                    std::fabs(kNf4Map[c] - x) + 1e-6f)
              << i;
        ASSERT_EQ(out[size_t(i)], kNf4Map[code] * stored) << i;
      }
    }
    if (n % 2) {
      EXPECT_EQ(q.Packed.back() & 0xF, 7u); // the pad element: 0
    }
    std::vector<uint16_t> bf(static_cast<size_t>(n)), half(bf);
    std::vector<TensorView> bfOut = {TensorView{DType::BF16, shape, bf.data()}},
                            hOut = {TensorView{DType::F16, shape, half.data()}};
    ASSERT_EQ(runKernel("Nf4Dequantize", q.views(), bfOut), "");
    ASSERT_EQ(runKernel("Nf4Dequantize", q.views(), hOut), "");
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(bf[size_t(i)], floatToBf16(out[size_t(i)])) << i;
      ASSERT_EQ(half[size_t(i)], floatToHalf(out[size_t(i)])) << i;
    }
  }
}

TEST(Nf4, DequantizeChecksItsOperands) {
  std::vector<float> w = randomFloats(1000, 62), out(1100);
  Nf4Weight q(w);
  EXPECT_EQ(runKernel("Nf4Dequantize", q.views(), {view(out, {1100})}),
            "Nf4Dequantize: codes u8[500] should be u8[550] for f32[1100]");
  std::vector<TensorView> ins = q.views();
  ins[2].Type = DType::BF16;
  EXPECT_EQ(runKernel("Nf4Dequantize", ins, {view(out, {1000})}),
            "Nf4Dequantize: nested_absmax bf16[1] should be f32[1] for "
            "f32[1000]");
  std::vector<int32_t> ints(1000);
  std::vector<int64_t> shape = {1000};
  EXPECT_EQ(runKernel("Nf4Dequantize", q.views(),
                      {TensorView{DType::I32, shape, ints.data()}}),
            "Nf4Dequantize: result i32[1000] is not f32, bf16 or f16");
}

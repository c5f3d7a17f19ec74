//===- ConvPoolKernelTest.cpp - Unit tests of kernels/cpu/ConvPool.cpp ---===//
//
// Conv against a direct (naive) N-D reference over strided, padded, dilated,
// grouped and auto-padded cases in 1-D, 2-D and 3-D, and a batch that spans
// several of the kernels' chunks of samples; every gradient kernel
// against central differences of its forward kernel in float64. ONNX's node
// tests (CpuNodeTest) cover the forward kernels' f32 results.
//
//===----------------------------------------------------------------------===//
#include "KernelTestUtil.h"
#include "kernels/cpu/Kernel.h"
#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

using namespace headroom;
using namespace headroom::cpu;

namespace {

//===----------------------------------------------------------------------===//
// Conv
//===----------------------------------------------------------------------===//

struct ConvCase {
  const char *Name;
  std::vector<int64_t> X, W, Y;
  AttributeMap Attrs;
  /// The pads the reference uses ([begin..., end...]; resolved by hand for
  /// auto_pad), and its strides, dilations and group.
  std::vector<int64_t> Pads, Strides, Dilations;
  int64_t Group = 1;
};

AttributeMap convAttrs(std::vector<int64_t> strides, std::vector<int64_t> pads,
                       std::vector<int64_t> dilations, int64_t group) {
  AttributeMap a;
  a["strides"] = Attribute::getInts(strides);
  a["pads"] = Attribute::getInts(pads);
  a["dilations"] = Attribute::getInts(dilations);
  a["group"] = Attribute::getInt(group);
  return a;
}

AttributeMap autoPadAttrs(const char *autoPad, std::vector<int64_t> strides) {
  AttributeMap a;
  a["auto_pad"] = Attribute::getString(autoPad);
  a["strides"] = Attribute::getInts(strides);
  return a;
}

std::vector<ConvCase> convCases() {
  std::vector<ConvCase> cases;
  // H: 7 + 1 + 2 - 3 = 6 -> 6/2 + 1 = 4; W: 6 + 0 + 1 - 3 = 4 -> 5.
  cases.push_back({"strided_padded_dilated_grouped",
                   {2, 4, 7, 6},
                   {6, 2, 3, 2},
                   {2, 6, 4, 5},
                   convAttrs({2, 1}, {1, 0, 2, 1}, {1, 2}, 2),
                   {1, 0, 2, 1},
                   {2, 1},
                   {1, 2},
                   2});
  // ceil(5/2) = 3 outputs need 1 pad: SAME_LOWER puts it first.
  cases.push_back({"same_lower",
                   {1, 3, 5, 5},
                   {2, 3, 2, 2},
                   {1, 2, 3, 3},
                   autoPadAttrs("SAME_LOWER", {2, 2}),
                   {1, 1, 0, 0},
                   {2, 2},
                   {1, 1}});
  cases.push_back({"same_upper",
                   {1, 3, 5, 5},
                   {2, 3, 2, 2},
                   {1, 2, 3, 3},
                   autoPadAttrs("SAME_UPPER", {2, 2}),
                   {0, 0, 1, 1},
                   {2, 2},
                   {1, 1}});
  cases.push_back({"valid",
                   {1, 2, 6, 6},
                   {3, 2, 3, 3},
                   {1, 3, 2, 2},
                   autoPadAttrs("VALID", {2, 2}),
                   {0, 0, 0, 0},
                   {2, 2},
                   {1, 1}});
  cases.push_back({"pointwise",
                   {2, 3, 4, 4},
                   {5, 3, 1, 1},
                   {2, 5, 4, 4},
                   AttributeMap(),
                   {0, 0, 0, 0},
                   {1, 1},
                   {1, 1}});
  // 9 + 1 + 2 - 5 = 7 -> 7/2 + 1 = 4.
  cases.push_back({"1d",
                   {2, 3, 9},
                   {4, 3, 3},
                   {2, 4, 4},
                   convAttrs({2}, {1, 2}, {2}, 1),
                   {1, 2},
                   {2},
                   {2}});
  // 20 samples of 4 x 6 = 24 outputs: chunks of 11 and 9 samples
  // (kChunkColumns 256). Width 6 + 2 + 0 - 3 + 1 = 6 keeps the input's row
  // length, im2col's shifted-block path, with padding on one side per axis.
  cases.push_back({"batch_in_chunks_same_width",
                   {20, 2, 5, 6},
                   {3, 2, 3, 3},
                   {20, 3, 4, 6},
                   convAttrs({1, 1}, {0, 2, 1, 0}, {1, 1}, 1),
                   {0, 2, 1, 0},
                   {1, 1},
                   {1, 1}});
  // End padding wider than the input: taps 2..4 of each row read only
  // padding (W: 2 + 0 + 4 - 5 + 1 = 2, the input's width).
  cases.push_back({"padding_wider_than_input",
                   {1, 1, 3, 2},
                   {1, 1, 1, 5},
                   {1, 1, 3, 2},
                   convAttrs({1, 1}, {0, 0, 0, 4}, {1, 1}, 1),
                   {0, 0, 0, 4},
                   {1, 1},
                   {1, 1}});
  // W: 5 + 2 + 1 - 3 + 1 = 6, one more than the input: padded ends on
  // unit-stride rows that im2col copies one at a time.
  cases.push_back({"wider_than_input",
                   {2, 2, 4, 5},
                   {2, 2, 2, 3},
                   {2, 2, 4, 6},
                   convAttrs({1, 1}, {1, 2, 0, 1}, {1, 1}, 1),
                   {1, 2, 0, 1},
                   {1, 1},
                   {1, 1}});
  cases.push_back({"3d_grouped",
                   {1, 2, 4, 3, 5},
                   {2, 1, 2, 2, 3},
                   {1, 2, 4, 2, 3},
                   convAttrs({1, 2, 1}, {0, 1, 1, 1, 0, 1}, {1, 1, 2}, 2),
                   {0, 1, 1, 1, 0, 1},
                   {1, 2, 1},
                   {1, 1, 2},
                   2});
  return cases;
}

/// Advances a row-major multi-index; false after the last one.
bool next(std::vector<int64_t> &index, const std::vector<int64_t> &shape) {
  for (size_t a = index.size(); a-- > 0;) {
    if (++index[a] < shape[a])
      return true;
    index[a] = 0;
  }
  return false;
}

/// Conv by its definition, one output element at a time.
std::vector<double> referenceConv(const ConvCase &c, const T64 &x, const T64 &w,
                                  const T64 &b) {
  unsigned rank = c.X.size() - 2;
  int64_t cg = c.W[1], mg = c.W[0] / c.Group;
  std::vector<int64_t> inDims(c.X.begin() + 2, c.X.end());
  std::vector<int64_t> kDims(c.W.begin() + 2, c.W.end());
  std::vector<int64_t> outDims(c.Y.begin() + 2, c.Y.end());
  std::vector<double> y;
  for (int64_t n = 0; n < c.Y[0]; ++n) {
    for (int64_t m = 0; m < c.Y[1]; ++m) {
      std::vector<int64_t> o(rank, 0);
      do {
        double sum = b.Data[m];
        for (int64_t ci = 0; ci < cg; ++ci) {
          int64_t channel = (m / mg) * cg + ci;
          std::vector<int64_t> k(rank, 0);
          do {
            int64_t xi = n * c.X[1] + channel, wi = m * cg + ci;
            bool valid = true;
            for (unsigned a = 0; a < rank; ++a) {
              int64_t i =
                  o[a] * c.Strides[a] - c.Pads[a] + k[a] * c.Dilations[a];
              valid &= i >= 0 && i < inDims[a];
              xi = xi * inDims[a] + i;
              wi = wi * kDims[a] + k[a];
            }
            if (valid)
              sum += x.Data[xi] * w.Data[wi];
          } while (next(k, kDims));
        }
        y.push_back(sum);
      } while (next(o, outDims));
    }
  }
  return y;
}

TEST(ConvPoolKernelTest, ConvMatchesDirectDefinition) {
  for (ConvCase &c : convCases()) {
    T64 x(c.X, 1), w(c.W, 2), b({c.W[0]}, 3), y(c.Y);
    ASSERT_EQ(
        runKernel("Conv", {x.view(), w.view(), b.view()}, {y.view()}, c.Attrs),
        "")
        << c.Name;
    std::vector<double> want = referenceConv(c, x, w, b);
    ASSERT_EQ(want.size(), y.Data.size()) << c.Name;
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(y.Data[i], want[i], 1e-12) << c.Name << " element " << i;
  }
}

TEST(ConvPoolKernelTest, ConvWithoutBiasAndInF32) {
  T64 x({1, 2, 3, 3}, 1), w({1, 2, 2, 2}, 2), y({1, 1, 2, 2});
  ASSERT_EQ(runKernel("Conv", {x.view(), w.view(), TensorView()}, {y.view()},
                      AttributeMap()),
            "");
  std::vector<float> xf(x.Data.begin(), x.Data.end()),
      wf(w.Data.begin(), w.Data.end()), yf(4);
  ASSERT_EQ(runKernel("Conv",
                      {TensorView{DType::F32, x.Shape, xf.data()},
                       TensorView{DType::F32, w.Shape, wf.data()}},
                      {TensorView{DType::F32, y.Shape, yf.data()}},
                      AttributeMap()),
            "");
  // One output by hand: the top-left 2x2 patch of both channels.
  double want = 0;
  for (int c = 0; c < 2; ++c)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        want += x.Data[c * 9 + i * 3 + j] * w.Data[c * 4 + i * 2 + j];
  EXPECT_NEAR(y.Data[0], want, 1e-12);
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(yf[i], y.Data[i], 1e-5);
}

TEST(ConvPoolKernelTest, ConvRejectsAMismatchedOutputShape) {
  T64 x({1, 2, 5, 5}, 1), w({3, 2, 3, 3}, 2), y({1, 3, 4, 4});
  std::string error =
      runKernel("Conv", {x.view(), w.view()}, {y.view()}, AttributeMap());
  EXPECT_NE(error.find("Conv: spatial output size 4"), std::string::npos)
      << error;
  AttributeMap a;
  a["auto_pad"] = Attribute::getString("SAME_SIDEWAYS");
  error = runKernel("Conv", {x.view(), w.view()}, {y.view()}, a);
  EXPECT_NE(error.find("auto_pad 'SAME_SIDEWAYS'"), std::string::npos) << error;
}

TEST(ConvPoolKernelTest, ConvGradientsMatchFiniteDifferences) {
  for (ConvCase &c : convCases()) {
    T64 x(c.X, 1), w(c.W, 2), y(c.Y), r(c.Y, 4), dx(c.X), dw(c.W);
    auto loss = [&] {
      std::string e =
          runKernel("Conv", {x.view(), w.view()}, {y.view()}, c.Attrs);
      EXPECT_EQ(e, "");
      return dot(y.Data, r.Data);
    };
    ASSERT_EQ(
        runKernel("ConvGradInput", {r.view(), w.view()}, {dx.view()}, c.Attrs),
        "")
        << c.Name;
    ASSERT_EQ(
        runKernel("ConvGradWeight", {r.view(), x.view()}, {dw.view()}, c.Attrs),
        "")
        << c.Name;
    expectGradient(x.Data, loss, dx.Data, c.Name);
    expectGradient(w.Data, loss, dw.Data, c.Name);
  }
}

/// The workspace `op` declares for operands `ins` -> `outs` (f64, no data).
uint64_t workspaceOf(llvm::StringRef op,
                     std::vector<std::vector<int64_t>> insShapes,
                     std::vector<std::vector<int64_t>> outsShapes,
                     const AttributeMap &attrs) {
  WorkspaceFn query = lookupWorkspace(op);
  EXPECT_NE(query, nullptr) << op.str();
  if (!query)
    return 0;
  std::vector<TensorView> ins, outs;
  for (const auto &shape : insShapes)
    ins.push_back(TensorView{DType::F64, shape, nullptr});
  for (const auto &shape : outsShapes)
    outs.push_back(TensorView{DType::F64, shape, nullptr});
  return query(KernelContext{op, ins, outs, attrs});
}

/// Runs `op` with a workspace of exactly `bytes` followed by a guard, and
/// without one: the results must be identical, the workspace used (when
/// declared) and nothing written past it. A workspace one byte short must be
/// left alone (the kernel allocates its own).
void expectUsesExactlyItsWorkspace(llvm::StringRef op,
                                   std::vector<TensorView> ins,
                                   std::vector<int64_t> outShape,
                                   const AttributeMap &attrs, uint64_t bytes,
                                   const char *name) {
  T64 want(outShape), got(outShape), shortOut(outShape);
  ASSERT_EQ(runKernel(op, ins, {want.view()}, attrs), "") << name;
  const uint8_t kPoison = 0xA5;
  const uint64_t kGuard = 256;
  std::vector<uint8_t> ws(bytes + kGuard, kPoison);
  auto run = [&](T64 &out, uint64_t given) {
    std::vector<TensorView> outs = {out.view()};
    KernelContext ctx{op, ins, outs, attrs, 0, ws.data(), given};
    llvm::Error e = lookupKernel(op)(ctx);
    return e ? llvm::toString(std::move(e)) : "";
  };
  ASSERT_EQ(run(got, bytes), "") << name;
  EXPECT_EQ(got.Data, want.Data) << name;
  bool used = false;
  for (uint64_t i = 0; i < bytes; ++i)
    used |= ws[i] != kPoison;
  EXPECT_EQ(used, bytes > 0) << name;
  for (uint64_t i = bytes; i < ws.size(); ++i)
    ASSERT_EQ(ws[i], kPoison) << name << ": byte " << i << " past the " << bytes
                              << "-byte workspace was written";
  if (!bytes)
    return;
  std::fill(ws.begin(), ws.end(), kPoison);
  ASSERT_EQ(run(shortOut, bytes - 1), "") << name;
  EXPECT_EQ(shortOut.Data, want.Data) << name;
  EXPECT_TRUE(std::all_of(ws.begin(), ws.end(),
                          [&](uint8_t v) { return v == kPoison; }))
      << name << ": a too-small workspace was written";
}

/// The workspace each Conv kernel declares is the scratch it uses: im2col
/// columns for a chunk of ceil(256 / P) samples (none for a pointwise
/// window), the chunk's y or dy in [mg, count * P] form when a chunk has
/// several samples, and ConvGradWeight's transposed dw, each rounded up to
/// 64 bytes.
TEST(ConvPoolKernelTest, ConvWorkspaceIsTheScratchTheKernelUses) {
  struct Case {
    const char *Name;
    std::vector<int64_t> X, W, Y;
    AttributeMap Attrs;
    uint64_t Forward, GradWeight; // bytes, by hand (f64)
  };
  AttributeMap padded;
  padded["pads"] = Attribute::getInts({2, 2, 2, 2});
  std::vector<Case> cases = {
      // LeNet's conv1: P = 784 -> 1 sample a chunk; K = 25.
      // col 25*784*8 = 156800; dwT 6*25*8 = 1200 -> 1216.
      {"lenet_conv1",
       {8, 1, 28, 28},
       {6, 1, 5, 5},
       {8, 6, 28, 28},
       padded,
       156800,
       156800 + 1216},
      // LeNet's conv2: P = 100 -> 3 samples a chunk; K = 150, mg = 16.
      // col 150*300*8 = 360000; y/dy 16*300*8 = 38400; dwT 16*150*8 = 19200.
      {"lenet_conv2",
       {8, 6, 14, 14},
       {16, 6, 5, 5},
       {8, 16, 10, 10},
       AttributeMap(),
       360000 + 38400,
       360000 + 38400 + 19200},
      // Pointwise: GEMMs on x's own data one sample at a time, so only
      // ConvGradWeight's dwT, 4*8*8 = 256.
      {"pointwise",
       {4, 8, 3, 3},
       {4, 8, 1, 1},
       {4, 4, 3, 3},
       AttributeMap(),
       0,
       256},
  };
  for (Case &c : cases) {
    EXPECT_EQ(workspaceOf("Conv", {c.X, c.W}, {c.Y}, c.Attrs), c.Forward)
        << c.Name;
    EXPECT_EQ(workspaceOf("ConvGradInput", {c.Y, c.W}, {c.X}, c.Attrs),
              c.Forward)
        << c.Name;
    EXPECT_EQ(workspaceOf("ConvGradWeight", {c.Y, c.X}, {c.W}, c.Attrs),
              c.GradWeight)
        << c.Name;
    T64 x(c.X, 1), w(c.W, 2), dy(c.Y, 3);
    expectUsesExactlyItsWorkspace("Conv", {x.view(), w.view()}, c.Y, c.Attrs,
                                  c.Forward, c.Name);
    expectUsesExactlyItsWorkspace("ConvGradInput", {dy.view(), w.view()}, c.X,
                                  c.Attrs, c.Forward, c.Name);
    expectUsesExactlyItsWorkspace("ConvGradWeight", {dy.view(), x.view()}, c.W,
                                  c.Attrs, c.GradWeight, c.Name);
  }
  // A malformed call declares none: the kernel reports the error.
  EXPECT_EQ(workspaceOf("Conv", {{1, 2, 5, 5}, {3, 2, 3, 3}}, {{1, 3, 4, 4}},
                        AttributeMap()),
            0u);
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

AttributeMap poolAttrs(std::vector<int64_t> kernel,
                       std::vector<int64_t> strides, std::vector<int64_t> pads,
                       std::vector<int64_t> dilations = {}) {
  AttributeMap a;
  a["kernel_shape"] = Attribute::getInts(kernel);
  a["strides"] = Attribute::getInts(strides);
  a["pads"] = Attribute::getInts(pads);
  if (!dilations.empty())
    a["dilations"] = Attribute::getInts(dilations);
  return a;
}

struct PoolCase {
  const char *Name;
  std::vector<int64_t> X, Y;
  AttributeMap Attrs;
};

/// Overlapping, padded, dilated, ceil-mode and auto-padded windows.
std::vector<PoolCase> poolCases() {
  std::vector<PoolCase> cases;
  // Overlapping 3x3 windows: H 7 + 2 - 3 = 6 -> 4, W 6 + 2 - 3 = 5 -> 6.
  cases.push_back({"overlapping_padded",
                   {2, 3, 7, 6},
                   {2, 3, 4, 6},
                   poolAttrs({3, 3}, {2, 1}, {1, 1, 1, 1})});
  // H: span 3, 8 - 3 = 5 -> ceil(5/3) + 1 = 3 (the last window is partial).
  PoolCase ceil{"dilated_ceil_mode",
                {1, 2, 8, 7},
                {1, 2, 3, 3},
                poolAttrs({2, 3}, {3, 2}, {0, 0, 0, 0}, {2, 1})};
  ceil.Attrs["ceil_mode"] = Attribute::getInt(1);
  cases.push_back(ceil);
  PoolCase same{"same_lower_1d", {2, 2, 7}, {2, 2, 4}, AttributeMap()};
  same.Attrs["kernel_shape"] = Attribute::getInts({3});
  same.Attrs["strides"] = Attribute::getInts({2});
  same.Attrs["auto_pad"] = Attribute::getString("SAME_LOWER");
  cases.push_back(same);
  cases.push_back({"3d",
                   {1, 2, 3, 4, 4},
                   {1, 2, 2, 3, 2},
                   poolAttrs({2, 2, 3}, {1, 1, 2}, {0, 0, 1, 0, 0, 1})});
  return cases;
}

TEST(ConvPoolKernelTest, MaxPoolGradMatchesFiniteDifferences) {
  for (PoolCase &c : poolCases()) {
    T64 x(c.X, 1), y(c.Y), r(c.Y, 4), dx(c.X);
    auto loss = [&] {
      EXPECT_EQ(runKernel("MaxPool", {x.view()}, {y.view()}, c.Attrs), "");
      return dot(y.Data, r.Data);
    };
    ASSERT_EQ(
        runKernel("MaxPoolGrad", {r.view(), x.view()}, {dx.view()}, c.Attrs),
        "")
        << c.Name;
    expectGradient(x.Data, loss, dx.Data, c.Name);
  }
}

TEST(ConvPoolKernelTest, MaxPoolGradRoutesTiesToTheFirstMaximum) {
  // 1-D windows {0, 1} and {1, 2} of equal values: the first tap of each
  // window wins, and element 1 is not counted twice.
  T64 x({1, 1, 3}), dy({1, 1, 2}), dx({1, 1, 3});
  x.Data = {5, 5, 5};
  dy.Data = {1, 10};
  ASSERT_EQ(runKernel("MaxPoolGrad", {dy.view(), x.view()}, {dx.view()},
                      poolAttrs({2}, {1}, {0, 0})),
            "");
  EXPECT_EQ(dx.Data, (std::vector<double>{1, 10, 0}));
  // Overlapping windows sharing a strict maximum accumulate into it.
  x.Data = {0, 7, 1};
  ASSERT_EQ(runKernel("MaxPoolGrad", {dy.view(), x.view()}, {dx.view()},
                      poolAttrs({2}, {1}, {0, 0})),
            "");
  EXPECT_EQ(dx.Data, (std::vector<double>{0, 11, 0}));
}

TEST(ConvPoolKernelTest, MaxPoolIndicesInBothStorageOrders) {
  // Two planes of 2x3; one 2x2 window per plane at the left, stride 1.
  T64 x({1, 2, 2, 3}), y({1, 2, 1, 2});
  x.Data = {1, 2, 3, 9, 4, 5, /*plane 1*/ 6, 1, 1, 1, 1, 8};
  std::vector<int64_t> idx(4);
  TensorView indices{DType::I64, y.Shape, idx.data()};
  AttributeMap a = poolAttrs({2, 2}, {1, 1}, {0, 0, 0, 0});
  ASSERT_EQ(runKernel("MaxPool", {x.view()}, {y.view(), indices}, a), "");
  EXPECT_EQ(y.Data, (std::vector<double>{9, 5, 6, 8}));
  EXPECT_EQ(idx, (std::vector<int64_t>{3, 5, 6, 11}));
  a["storage_order"] = Attribute::getInt(1);
  ASSERT_EQ(runKernel("MaxPool", {x.view()}, {y.view(), indices}, a), "");
  // Column-major within a plane: (h, w) -> w * 2 + h.
  EXPECT_EQ(idx, (std::vector<int64_t>{1, 5, 6, 11}));
}

TEST(ConvPoolKernelTest, MaxPoolRejectsUnsupportedForms) {
  std::vector<int32_t> data(4);
  std::vector<int64_t> shape = {1, 1, 2, 2}, outShape = {1, 1, 1, 1};
  TensorView x{DType::I32, shape, data.data()},
      y{DType::I32, outShape, data.data()};
  std::string error =
      runKernel("MaxPool", {x}, {y}, poolAttrs({2, 2}, {1, 1}, {0, 0, 0, 0}));
  EXPECT_NE(error.find("MaxPool: element type i32"), std::string::npos)
      << error;
  // A window entirely in the padding has no maximum.
  T64 xf({1, 1, 1}), yf({1, 1, 3});
  error = runKernel("MaxPool", {xf.view()}, {yf.view()},
                    poolAttrs({1}, {1}, {1, 1}));
  EXPECT_NE(error.find("entirely in the padding"), std::string::npos) << error;
}

TEST(ConvPoolKernelTest, AveragePoolDivisors) {
  // 1-D, input [1, 2, 3], kernel 2, stride 1, pads 1/1: windows
  // {pad, 1}, {1, 2}, {2, 3}, {3, pad}.
  T64 x({1, 1, 3}), y({1, 1, 4});
  x.Data = {1, 2, 3};
  AttributeMap a = poolAttrs({2}, {1}, {1, 1});
  ASSERT_EQ(runKernel("AveragePool", {x.view()}, {y.view()}, a), "");
  EXPECT_EQ(y.Data, (std::vector<double>{1, 1.5, 2.5, 3}));
  a["count_include_pad"] = Attribute::getInt(1);
  ASSERT_EQ(runKernel("AveragePool", {x.view()}, {y.view()}, a), "");
  EXPECT_EQ(y.Data, (std::vector<double>{0.5, 1.5, 2.5, 1.5}));
}

TEST(ConvPoolKernelTest, AveragePoolGradMatchesFiniteDifferences) {
  for (int includePad : {0, 1}) {
    for (PoolCase &c : poolCases()) {
      c.Attrs["count_include_pad"] = Attribute::getInt(includePad);
      T64 x(c.X, 1), y(c.Y), r(c.Y, 4), dx(c.X);
      auto loss = [&] {
        EXPECT_EQ(runKernel("AveragePool", {x.view()}, {y.view()}, c.Attrs),
                  "");
        return dot(y.Data, r.Data);
      };
      ASSERT_EQ(runKernel("AveragePoolGrad", {r.view()}, {dx.view()}, c.Attrs),
                "")
          << c.Name;
      expectGradient(x.Data, loss, dx.Data, c.Name);
    }
  }
}

/// A pool's workspace is its window table: Begin [out + 1], Padded [out] and
/// Offsets [out * kernel taps] of i64, and AveragePool's divisors [out] of
/// f64, where out is one plane's output size.
TEST(ConvPoolKernelTest, PoolWorkspaceIsItsWindowTable) {
  for (PoolCase &c : poolCases()) {
    int64_t out = 1, taps = 1;
    for (size_t a = 2; a < c.Y.size(); ++a)
      out *= c.Y[a];
    for (int64_t k : c.Attrs.at("kernel_shape").asInts())
      taps *= k;
    uint64_t table = (out + 1 + out + out * taps) * 8, divisors = out * 8;
    EXPECT_EQ(workspaceOf("MaxPool", {c.X}, {c.Y}, c.Attrs), table) << c.Name;
    EXPECT_EQ(workspaceOf("MaxPoolGrad", {c.Y, c.X}, {c.X}, c.Attrs), table)
        << c.Name;
    EXPECT_EQ(workspaceOf("AveragePool", {c.X}, {c.Y}, c.Attrs),
              table + divisors)
        << c.Name;
    EXPECT_EQ(workspaceOf("AveragePoolGrad", {c.Y}, {c.X}, c.Attrs),
              table + divisors)
        << c.Name;
    T64 x(c.X, 1), dy(c.Y, 3);
    expectUsesExactlyItsWorkspace("MaxPool", {x.view()}, c.Y, c.Attrs, table,
                                  c.Name);
    expectUsesExactlyItsWorkspace("MaxPoolGrad", {dy.view(), x.view()}, c.X,
                                  c.Attrs, table, c.Name);
    expectUsesExactlyItsWorkspace("AveragePool", {x.view()}, c.Y, c.Attrs,
                                  table + divisors, c.Name);
    expectUsesExactlyItsWorkspace("AveragePoolGrad", {dy.view()}, c.X, c.Attrs,
                                  table + divisors, c.Name);
  }
}

TEST(ConvPoolKernelTest, GlobalAveragePool) {
  T64 x({2, 1, 2, 2}), y({2, 1, 1, 1});
  x.Data = {1, 2, 3, 4, -1, -1, -1, 3};
  ASSERT_EQ(
      runKernel("GlobalAveragePool", {x.view()}, {y.view()}, AttributeMap()),
      "");
  EXPECT_EQ(y.Data, (std::vector<double>{2.5, 0}));
}

} // namespace

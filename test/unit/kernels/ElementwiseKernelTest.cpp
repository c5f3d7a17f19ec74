//===- ElementwiseKernelTest.cpp - Tests of kernels/cpu/Elementwise.cpp ---===//
//
// The broadcast loop nest (KernelUtil.h) by the dimensions it merges and
// against an index-by-index reference, then each kernel family on the cases
// ONNX's node tests do not reach: integer wrapping and division, mixed-type
// Pow, NaN handling, Cast's truncation and saturation, and Dropout's mask
// statistics and determinism.
//
//===----------------------------------------------------------------------===//
#include "KernelTestUtil.h"
#include "kernels/common/KernelUtil.h"
#include "kernels/cpu/Kernel.h"
#include "kernels/cpu/Parallel.h"
#include "kernels/cpu/VecMath.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace headroom;
using namespace headroom::cpu;

namespace {

/// A tensor the test owns: shape and elements of storage type T.
template <typename T> struct Buf {
  DType Type;
  std::vector<int64_t> Shape;
  std::vector<T> Data;

  Buf(DType type, std::vector<int64_t> shape, std::vector<T> data = {})
      : Type(type), Shape(std::move(shape)), Data(std::move(data)) {
    int64_t n = 1;
    for (int64_t d : Shape)
      n *= d;
    Data.resize(n);
  }
  TensorView view() { return TensorView{Type, Shape, Data.data()}; }
};

std::vector<double> randomDoubles(int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-2, 2);
  std::vector<double> v(n);
  for (double &x : v)
    x = dist(gen);
  return v;
}

/// The element of `in` (right-aligned, numpy broadcasting) that feeds flat
/// index `o` of a result of shape `out`: the reference the loops must match.
int64_t sourceIndex(int64_t o, llvm::ArrayRef<int64_t> out,
                    llvm::ArrayRef<int64_t> in) {
  int64_t index = 0, stride = 1;
  for (size_t j = in.size(); j-- > 0;) {
    size_t d = j + out.size() - in.size();
    int64_t coord = o % out[d];
    o /= out[d];
    if (in[j] != 1)
      index += coord * stride;
    stride *= in[j];
  }
  return index;
}

//===----------------------------------------------------------------------===//
// BroadcastLoops
//===----------------------------------------------------------------------===//

TEST(BroadcastLoopsTest, MergesCommonCasesIntoLongRows) {
  // Same shapes: one row.
  BroadcastLoops<2> same({4, 5, 6}, {llvm::ArrayRef<int64_t>({4, 5, 6}),
                                     llvm::ArrayRef<int64_t>({4, 5, 6})});
  EXPECT_EQ(same.dims(), llvm::ArrayRef<int64_t>({120}));
  EXPECT_EQ(same.strides(1), llvm::ArrayRef<int64_t>({1}));
  // A scalar operand: one row, stride 0.
  BroadcastLoops<2> scalar(
      {4, 5}, {llvm::ArrayRef<int64_t>({4, 5}), llvm::ArrayRef<int64_t>()});
  EXPECT_EQ(scalar.dims(), llvm::ArrayRef<int64_t>({20}));
  EXPECT_EQ(scalar.strides(1), llvm::ArrayRef<int64_t>({0}));
  // Bias add [8, 4, 16] + [16]: rows of 16 with the bias contiguous.
  BroadcastLoops<2> bias({8, 4, 16}, {llvm::ArrayRef<int64_t>({8, 4, 16}),
                                      llvm::ArrayRef<int64_t>({16})});
  EXPECT_EQ(bias.dims(), llvm::ArrayRef<int64_t>({32, 16}));
  EXPECT_EQ(bias.strides(0), llvm::ArrayRef<int64_t>({16, 1}));
  EXPECT_EQ(bias.strides(1), llvm::ArrayRef<int64_t>({0, 1}));
  // Size-1 dimensions disappear; a scalar result is one row of one.
  BroadcastLoops<2> ones(
      {1, 1}, {llvm::ArrayRef<int64_t>({1, 1}), llvm::ArrayRef<int64_t>({1})});
  EXPECT_EQ(ones.dims(), llvm::ArrayRef<int64_t>({1}));
  // An empty result has no rows.
  BroadcastLoops<2> empty(
      {0, 3}, {llvm::ArrayRef<int64_t>({0, 3}), llvm::ArrayRef<int64_t>({3})});
  int rows = 0;
  empty.forEachRow([&](int64_t, const BroadcastLoops<2>::Offsets &, int64_t,
                       const BroadcastLoops<2>::Offsets &) { ++rows; });
  EXPECT_EQ(rows, 0);
}

struct ShapePair {
  std::vector<int64_t> A, B, Out;
};

TEST(ElementwiseKernelTest, BroadcastingMatchesIndexReference) {
  std::vector<ShapePair> cases = {
      {{3, 4}, {3, 4}, {3, 4}},       // same shape
      {{}, {2, 3}, {2, 3}},           // scalar first
      {{2, 3}, {1}, {2, 3}},          // scalar-like second
      {{5, 7}, {7}, {5, 7}},          // bias
      {{5, 7}, {5, 1}, {5, 7}},       // column broadcast
      {{3, 1}, {1, 4}, {3, 4}},       // outer product
      {{2, 1, 3}, {4, 1}, {2, 4, 3}}, // general strided
      {{2, 3, 1, 5}, {3, 4, 1}, {2, 3, 4, 5}},
      {{}, {}, {}}, // scalars
  };
  for (const ShapePair &c : cases) {
    Buf<double> a(DType::F64, c.A), b(DType::F64, c.B), y(DType::F64, c.Out);
    a.Data = randomDoubles(a.Data.size(), 1);
    b.Data = randomDoubles(b.Data.size(), 2);
    ASSERT_EQ(runKernel("Sub", {a.view(), b.view()}, {y.view()}), "");
    for (size_t o = 0; o < y.Data.size(); ++o)
      ASSERT_EQ(y.Data[o], a.Data[sourceIndex(o, c.Out, c.A)] -
                               b.Data[sourceIndex(o, c.Out, c.B)])
          << "result element " << o << " of case " << &c - cases.data();
  }
}

TEST(ElementwiseKernelTest, WhereBroadcastsAllThreeOperands) {
  std::vector<int64_t> cs = {2, 1, 3}, as = {4, 1}, bs = {}, out = {2, 4, 3};
  Buf<uint8_t> c(DType::Bool, cs, {1, 0, 1, 0, 0, 1});
  Buf<float> a(DType::F32, as, {1, 2, 3, 4}), b(DType::F32, bs, {-1});
  Buf<float> y(DType::F32, out);
  ASSERT_EQ(runKernel("Where", {c.view(), a.view(), b.view()}, {y.view()}), "");
  for (size_t o = 0; o < y.Data.size(); ++o) {
    float want = c.Data[sourceIndex(o, out, cs)]
                     ? a.Data[sourceIndex(o, out, as)]
                     : -1.0f;
    ASSERT_EQ(y.Data[o], want) << "element " << o;
  }
}

//===----------------------------------------------------------------------===//
// Arithmetic
//===----------------------------------------------------------------------===//

TEST(ElementwiseKernelTest, IntegerArithmeticWrapsAndTruncates) {
  const int32_t kMin = std::numeric_limits<int32_t>::min();
  Buf<int32_t> a(DType::I32, {5}, {-7, 7, -7, 5, kMin});
  Buf<int32_t> b(DType::I32, {5}, {2, -2, -2, 0, -1});
  Buf<int32_t> q(DType::I32, {5});
  ASSERT_EQ(runKernel("Div", {a.view(), b.view()}, {q.view()}), "");
  // Toward zero like C; x / 0 is defined as 0 and MIN / -1 wraps.
  EXPECT_EQ(q.Data, (std::vector<int32_t>{-3, -3, 3, 0, kMin}));

  Buf<uint8_t> u(DType::U8, {2}, {250, 3}), v(DType::U8, {2}, {10, 5});
  Buf<uint8_t> sum(DType::U8, {2}), diff(DType::U8, {2});
  ASSERT_EQ(runKernel("Add", {u.view(), v.view()}, {sum.view()}), "");
  ASSERT_EQ(runKernel("Sub", {u.view(), v.view()}, {diff.view()}), "");
  EXPECT_EQ(sum.Data, (std::vector<uint8_t>{4, 8}));
  EXPECT_EQ(diff.Data, (std::vector<uint8_t>{240, 254}));

  // u16 * u16 would overflow a promoted int; it must wrap instead.
  Buf<uint16_t> h(DType::U16, {1}, {65535}), p(DType::U16, {1});
  ASSERT_EQ(runKernel("Mul", {h.view(), h.view()}, {p.view()}), "");
  EXPECT_EQ(p.Data[0], 1);

  Buf<int8_t> s(DType::I8, {3}, {-128, -5, 7}), abs(DType::I8, {3}),
      neg(DType::I8, {3});
  ASSERT_EQ(runKernel("Abs", {s.view()}, {abs.view()}), "");
  ASSERT_EQ(runKernel("Neg", {s.view()}, {neg.view()}), "");
  EXPECT_EQ(abs.Data, (std::vector<int8_t>{-128, 5, 7}));
  EXPECT_EQ(neg.Data, (std::vector<int8_t>{-128, 5, -7}));
}

TEST(ElementwiseKernelTest, PowKeepsTheBaseTypeForAnyExponentType) {
  Buf<float> fb(DType::F32, {2}, {2, 3}), fy(DType::F32, {2});
  Buf<int64_t> ie(DType::I64, {}, {3});
  ASSERT_EQ(runKernel("Pow", {fb.view(), ie.view()}, {fy.view()}), "");
  EXPECT_EQ(fy.Data, (std::vector<float>{8, 27}));

  // Integer base, fractional exponent: computed in double, then truncated.
  Buf<int64_t> ib(DType::I64, {3}, {2, 3, 4}), iy(DType::I64, {3});
  Buf<float> half(DType::F32, {1}, {0.5});
  ASSERT_EQ(runKernel("Pow", {ib.view(), half.view()}, {iy.view()}), "");
  EXPECT_EQ(iy.Data, (std::vector<int64_t>{1, 1, 2}));

  // Integer base and exponent: exact, including negative exponents.
  Buf<int32_t> b(DType::I32, {4}, {3, 2, -1, 1}),
      e(DType::I32, {4}, {20, -1, 3, -5});
  Buf<int32_t> y(DType::I32, {4});
  ASSERT_EQ(runKernel("Pow", {b.view(), e.view()}, {y.view()}), "");
  // 3^20 = 3486784401 wraps to -808182895.
  EXPECT_EQ(y.Data, (std::vector<int32_t>{-808182895, 0, -1, 1}));

  Buf<double> x(DType::F64, {1}, {2}), p(DType::F64, {1}, {0.5}),
      r(DType::F64, {1});
  ASSERT_EQ(runKernel("Pow", {x.view(), p.view()}, {r.view()}), "");
  EXPECT_DOUBLE_EQ(r.Data[0], std::sqrt(2.0));
}

TEST(ElementwiseKernelTest, VariadicMaxMinSumBroadcastAndPropagateNaN) {
  const double nan = std::nan("");
  Buf<double> a(DType::F64, {2, 2}, {1, nan, 5, 0});
  Buf<double> b(DType::F64, {2}, {nan, 2});
  Buf<double> c(DType::F64, {}, {3});
  Buf<double> mx(DType::F64, {2, 2}), mn(DType::F64, {2, 2}),
      sum(DType::F64, {2, 2});
  ASSERT_EQ(runKernel("Max", {a.view(), b.view(), c.view()}, {mx.view()}), "");
  ASSERT_EQ(runKernel("Min", {a.view(), b.view(), c.view()}, {mn.view()}), "");
  ASSERT_EQ(runKernel("Sum", {a.view(), b.view(), c.view()}, {sum.view()}), "");
  // NaN in either position of any pair wins, as in numpy.maximum.
  EXPECT_TRUE(std::isnan(mx.Data[0]) && std::isnan(mx.Data[1]) &&
              std::isnan(mx.Data[2]));
  EXPECT_EQ(mx.Data[3], 3);
  EXPECT_TRUE(std::isnan(mn.Data[1]) && std::isnan(mn.Data[2]));
  EXPECT_EQ(mn.Data[3], 0);
  EXPECT_EQ(sum.Data[3], 5);

  Buf<int64_t> one(DType::I64, {3}, {4, -1, 9}), copy(DType::I64, {3});
  ASSERT_EQ(runKernel("Max", {one.view()}, {copy.view()}), "");
  EXPECT_EQ(copy.Data, one.Data);
}

TEST(ElementwiseKernelTest, ComparisonsAndLogicGiveBools) {
  Buf<double> a(DType::F64, {2, 2}, {1, 2, 3, 4}), b(DType::F64, {2}, {2, 3});
  Buf<uint8_t> lt(DType::Bool, {2, 2}), ge(DType::Bool, {2, 2}),
      eq(DType::Bool, {2, 2});
  ASSERT_EQ(runKernel("Less", {a.view(), b.view()}, {lt.view()}), "");
  ASSERT_EQ(runKernel("GreaterOrEqual", {a.view(), b.view()}, {ge.view()}), "");
  ASSERT_EQ(runKernel("Equal", {a.view(), b.view()}, {eq.view()}), "");
  EXPECT_EQ(lt.Data, (std::vector<uint8_t>{1, 1, 0, 0}));
  EXPECT_EQ(ge.Data, (std::vector<uint8_t>{0, 0, 1, 1}));
  EXPECT_EQ(eq.Data, (std::vector<uint8_t>{0, 0, 0, 0}));

  Buf<uint8_t> p(DType::Bool, {4}, {0, 0, 1, 1}),
      q(DType::Bool, {4}, {0, 1, 0, 1});
  Buf<uint8_t> andr(DType::Bool, {4}), orr(DType::Bool, {4}),
      notr(DType::Bool, {4});
  ASSERT_EQ(runKernel("And", {p.view(), q.view()}, {andr.view()}), "");
  ASSERT_EQ(runKernel("Or", {p.view(), q.view()}, {orr.view()}), "");
  ASSERT_EQ(runKernel("Not", {p.view()}, {notr.view()}), "");
  EXPECT_EQ(andr.Data, (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ(orr.Data, (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(notr.Data, (std::vector<uint8_t>{1, 1, 0, 0}));
}

//===----------------------------------------------------------------------===//
// Unary math
//===----------------------------------------------------------------------===//

TEST(ElementwiseKernelTest, UnaryMathEdgeCases) {
  const double nan = std::nan("");
  Buf<double> x(DType::F64, {4}, {-800, 0, 800, nan}), y(DType::F64, {4});
  // Sigmoid never overflows exp, at either end.
  ASSERT_EQ(runKernel("Sigmoid", {x.view()}, {y.view()}), "");
  EXPECT_EQ(y.Data[0], 0);
  EXPECT_EQ(y.Data[1], 0.5);
  EXPECT_EQ(y.Data[2], 1);
  EXPECT_TRUE(std::isnan(y.Data[3]));
  // Relu keeps NaN (numpy's maximum(x, 0)).
  ASSERT_EQ(runKernel("Relu", {x.view()}, {y.view()}), "");
  EXPECT_EQ(y.Data[0], 0);
  EXPECT_EQ(y.Data[2], 800);
  EXPECT_TRUE(std::isnan(y.Data[3]));

  Buf<double> v(DType::F64, {3}, {-2.5, 0.5, 4}), w(DType::F64, {3});
  ASSERT_EQ(runKernel("LeakyRelu", {v.view()}, {w.view()}), "");
  EXPECT_EQ(w.Data, (std::vector<double>{-0.025, 0.5, 4}));
  AttributeMap alpha{{"alpha", Attribute::getFloat(0.5)}};
  ASSERT_EQ(runKernel("LeakyRelu", {v.view()}, {w.view()}, alpha), "");
  EXPECT_EQ(w.Data, (std::vector<double>{-1.25, 0.5, 4}));
  ASSERT_EQ(runKernel("Floor", {v.view()}, {w.view()}), "");
  EXPECT_EQ(w.Data, (std::vector<double>{-3, 0, 4}));
  ASSERT_EQ(runKernel("Ceil", {v.view()}, {w.view()}), "");
  EXPECT_EQ(w.Data, (std::vector<double>{-2, 1, 4}));
  ASSERT_EQ(runKernel("Reciprocal", {v.view()}, {w.view()}), "");
  EXPECT_EQ(w.Data, (std::vector<double>{-0.4, 2, 0.25}));
  ASSERT_EQ(runKernel("Erf", {v.view()}, {w.view()}), "");
  EXPECT_DOUBLE_EQ(w.Data[1], 0.52049987781304654);

  // Clip: NaN stays NaN; min > max gives max (numpy.clip); integers.
  Buf<double> c(DType::F64, {4}, {-2.5, 0.5, 4, NAN}), cy(DType::F64, {4});
  Buf<double> lo(DType::F64, {}, {0}), hi(DType::F64, {}, {1});
  ASSERT_EQ(runKernel("Clip", {c.view(), lo.view(), hi.view()}, {cy.view()}),
            "");
  EXPECT_EQ(cy.Data[0], 0);
  EXPECT_EQ(cy.Data[1], 0.5);
  EXPECT_EQ(cy.Data[2], 1);
  EXPECT_TRUE(std::isnan(cy.Data[3]));
  ASSERT_EQ(runKernel("Clip", {c.view(), hi.view(), lo.view()}, {cy.view()}),
            "");
  EXPECT_EQ(cy.Data[0], 0);
  EXPECT_EQ(cy.Data[2], 0);
  Buf<int64_t> ci(DType::I64, {3}, {-7, 3, 9}), cio(DType::I64, {3});
  Buf<int64_t> ilo(DType::I64, {}, {-5}), ihi(DType::I64, {}, {5});
  ASSERT_EQ(
      runKernel("Clip", {ci.view(), ilo.view(), ihi.view()}, {cio.view()}), "");
  EXPECT_EQ(cio.Data, (std::vector<int64_t>{-5, 3, 5}));
  // HardSigmoid: default alpha 0.2, beta 0.5.
  ASSERT_EQ(runKernel("HardSigmoid", {c.view()}, {cy.view()}), "");
  EXPECT_EQ(cy.Data[0], 0);
  EXPECT_DOUBLE_EQ(cy.Data[1], 0.6);
  EXPECT_EQ(cy.Data[2], 1);
  EXPECT_TRUE(std::isnan(cy.Data[3]));

  // f16 computes in float and rounds the result once.
  Buf<uint16_t> h(DType::F16, {2}, {floatToHalf(0), floatToHalf(1)}),
      e(DType::F16, {2});
  ASSERT_EQ(runKernel("Exp", {h.view()}, {e.view()}), "");
  EXPECT_EQ(e.Data[0], floatToHalf(1));
  EXPECT_EQ(e.Data[1], floatToHalf(std::exp(1.0f)));
}

TEST(ElementwiseKernelTest, UnsupportedElementTypesAreErrors) {
  Buf<int32_t> i(DType::I32, {2}), o(DType::I32, {2});
  EXPECT_EQ(runKernel("Exp", {i.view()}, {o.view()}),
            "Exp: element type i32 is not supported");
  Buf<float> f(DType::F32, {2}), g(DType::F32, {2});
  EXPECT_EQ(runKernel("Not", {f.view()}, {g.view()}),
            "Not: element type f32 is not supported");
}

//===----------------------------------------------------------------------===//
// Cast
//===----------------------------------------------------------------------===//

TEST(ElementwiseKernelTest, CastTruncatesSaturatesAndRounds) {
  auto to = [](DType t) { return AttributeMap{{"to", Attribute::getType(t)}}; };
  const float nan = std::nanf("");
  Buf<float> f(DType::F32, {6}, {-1.7f, 1.7f, nan, 1e10f, -1e10f, -0.5f});
  Buf<int32_t> i(DType::I32, {6});
  ASSERT_EQ(runKernel("Cast", {f.view()}, {i.view()}, to(DType::I32)), "");
  const int32_t kMax = std::numeric_limits<int32_t>::max(),
                kMin = std::numeric_limits<int32_t>::min();
  EXPECT_EQ(i.Data, (std::vector<int32_t>{-1, 1, 0, kMax, kMin, 0}));

  Buf<uint8_t> b(DType::Bool, {6});
  ASSERT_EQ(runKernel("Cast", {f.view()}, {b.view()}, to(DType::Bool)), "");
  EXPECT_EQ(b.Data, (std::vector<uint8_t>{1, 1, 1, 1, 1, 1}));
  Buf<double> back(DType::F64, {6});
  ASSERT_EQ(runKernel("Cast", {b.view()}, {back.view()}, to(DType::F64)), "");
  EXPECT_EQ(back.Data, (std::vector<double>(6, 1.0)));

  Buf<int64_t> big(DType::I64, {2}, {300, -1});
  Buf<uint8_t> small(DType::U8, {2});
  ASSERT_EQ(runKernel("Cast", {big.view()}, {small.view()}, to(DType::U8)), "");
  EXPECT_EQ(small.Data, (std::vector<uint8_t>{44, 255}));

  Buf<double> d(DType::F64, {3}, {1.5, 65504, 1.0 / 3});
  Buf<uint16_t> h(DType::F16, {3}), bf(DType::BF16, {3});
  ASSERT_EQ(runKernel("Cast", {d.view()}, {h.view()}, to(DType::F16)), "");
  ASSERT_EQ(runKernel("Cast", {d.view()}, {bf.view()}, to(DType::BF16)), "");
  EXPECT_EQ(h.Data[0], floatToHalf(1.5f));
  EXPECT_EQ(h.Data[1], floatToHalf(65504.0f));
  EXPECT_EQ(bf.Data[2], floatToBf16(1.0f / 3));
  Buf<float> wide(DType::F32, {3});
  ASSERT_EQ(runKernel("Cast", {h.view()}, {wide.view()}, to(DType::F32)), "");
  EXPECT_EQ(wide.Data[1], 65504.0f);

  EXPECT_EQ(runKernel("Cast", {d.view()}, {wide.view()}, to(DType::F64)),
            "Cast: result type f32 differs from `to` f64");
}

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

struct DropoutRun {
  Buf<float> Y;
  Buf<uint8_t> Mask;
  std::string Error;
};

DropoutRun dropout(Buf<float> &x, std::vector<float> ratio,
                   std::vector<uint8_t> training, uint64_t seed) {
  DropoutRun r{Buf<float>(DType::F32, x.Shape),
               Buf<uint8_t>(DType::Bool, x.Shape), ""};
  Buf<float> ratioBuf(DType::F32, {}, ratio);
  Buf<uint8_t> trainingBuf(DType::Bool, {}, training);
  std::vector<TensorView> ins = {x.view(), TensorView(), TensorView()};
  if (!ratio.empty())
    ins[1] = ratioBuf.view();
  if (!training.empty())
    ins[2] = trainingBuf.view();
  r.Error = runKernel("Dropout", ins, {r.Y.view(), r.Mask.view()}, {}, seed);
  return r;
}

TEST(ElementwiseKernelTest, DropoutInInferenceModeIsTheIdentity) {
  Buf<float> x(DType::F32, {100});
  for (size_t i = 0; i < x.Data.size(); ++i)
    x.Data[i] = i + 1;
  for (DropoutRun r : {dropout(x, {}, {}, 7), dropout(x, {0.5f}, {0}, 7),
                       dropout(x, {0.0f}, {1}, 7)}) {
    ASSERT_EQ(r.Error, "");
    EXPECT_EQ(r.Y.Data, x.Data);
    EXPECT_EQ(r.Mask.Data, std::vector<uint8_t>(100, 1));
  }
}

TEST(ElementwiseKernelTest, DropoutInTrainingModeDropsRatioAndScales) {
  const int64_t n = 100000;
  const float ratio = 0.3f;
  Buf<float> x(DType::F32, {n});
  for (int64_t i = 0; i < n; ++i)
    x.Data[i] = 1 + i % 7;
  DropoutRun r = dropout(x, {ratio}, {1}, 42);
  ASSERT_EQ(r.Error, "");
  int64_t dropped = 0;
  float scale = 1 / (1 - static_cast<double>(ratio));
  for (int64_t i = 0; i < n; ++i) {
    dropped += !r.Mask.Data[i];
    ASSERT_EQ(r.Y.Data[i], r.Mask.Data[i] ? x.Data[i] * scale : 0.0f)
        << "element " << i;
  }
  // The dropped count is binomial(n, 0.3): standard deviation
  // sqrt(n * 0.3 * 0.7) ~ 145, so +-1000 is a ~7 sigma band.
  EXPECT_NEAR(dropped, 0.3 * n, 1000);

  // Deterministic for a seed, different across seeds.
  DropoutRun again = dropout(x, {ratio}, {1}, 42);
  EXPECT_EQ(again.Mask.Data, r.Mask.Data);
  DropoutRun other = dropout(x, {ratio}, {1}, 43);
  EXPECT_NE(other.Mask.Data, r.Mask.Data);

  EXPECT_EQ(dropout(x, {1.0f}, {1}, 42).Error,
            "Dropout: ratio 1.000000 is not in [0, 1)");
}

} // namespace

namespace {

/// Distance in units in the last place between two finite floats.
int64_t ulps(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if ((ia < 0) != (ib < 0))
    return a == b ? 0
                  : std::abs(int64_t(ia & 0x7fffffff)) +
                        std::abs(int64_t(ib & 0x7fffffff));
  return std::abs(int64_t(ia) - int64_t(ib));
}

// kernels/cpu/VecMath.h: exp and tanh within 2 ulp of libm over the range
// softmax, losses and gelu see (sigmoid 4: a division more), the special
// values kept; the max of an array.
TEST(VecMathTest, ExpTanhSigmoidAreWithinAFewUlpOfLibm) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> wide(-87, 88), narrow(-1, 1);
  std::vector<float> x(200000);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = i % 2 ? wide(rng) : narrow(rng) * (i % 7 ? 1.0f : 1e-3f);
  std::vector<float> y(x.size());
  expScaled(x.data(), 1.0f, y.data(), x.size());
  int64_t worst = 0;
  for (size_t i = 0; i < x.size(); ++i)
    worst = std::max(worst, ulps(y[i], std::exp(x[i])));
  EXPECT_LE(worst, 2) << "exp";
  tanhArray(x.data(), y.data(), x.size());
  worst = 0;
  for (size_t i = 0; i < x.size(); ++i)
    worst = std::max(worst, ulps(y[i], std::tanh(x[i])));
  EXPECT_LE(worst, 2) << "tanh";
  float special[] = {0.0f,
                     -0.0f,
                     100.0f,
                     -100.0f,
                     std::numeric_limits<float>::infinity(),
                     -std::numeric_limits<float>::infinity(),
                     std::nanf("")};
  float e[7], t[7];
  expScaled(special, 1.0f, e, 7);
  tanhArray(special, t, 7);
  EXPECT_EQ(e[0], 1.0f);
  EXPECT_EQ(e[2], std::numeric_limits<float>::infinity());
  EXPECT_EQ(e[3], 0.0f);
  EXPECT_EQ(e[4], std::numeric_limits<float>::infinity());
  EXPECT_EQ(e[5], 0.0f);
  EXPECT_TRUE(std::isnan(e[6]));
  EXPECT_EQ(t[0], 0.0f);
  EXPECT_EQ(t[2], 1.0f);
  EXPECT_EQ(t[3], -1.0f);
  EXPECT_EQ(t[4], 1.0f);
  EXPECT_EQ(t[5], -1.0f);
  EXPECT_TRUE(std::isnan(t[6]));
  sigmoidArray(x.data(), y.data(), x.size());
  worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    float want = x[i] >= 0 ? 1 / (1 + std::exp(-x[i]))
                           : std::exp(x[i]) / (1 + std::exp(x[i]));
    worst = std::max(worst, ulps(y[i], want));
  }
  EXPECT_LE(worst, 4) << "sigmoid";
  EXPECT_EQ(maxArray(x.data(), x.size()),
            *std::max_element(x.begin(), x.end()));
  EXPECT_EQ(maxArray(x.data(), 0), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(maxArray(special, 7)));
  // The sums are the sums of the stored values (to float rounding).
  std::vector<float> z(1000);
  float sum = expShifted(x.data(), 3.0f, z.data(), z.size());
  double want = 0;
  for (float v : z)
    want += v;
  EXPECT_NEAR(sum, want, 1e-5 * want);
  EXPECT_NEAR(sumExpShifted(x.data(), 3.0f, z.size()), want, 1e-5 * want);
}

// erf against the double erf rounded to float: every 127th float of [0, 5]
// (both signs) and the special values. 2.4 ulp from the exact erf without
// FMA (scripts/fit-erf.py), so up to 3 from its rounding; 2 where the
// AVX-512 clone contracts the polynomial into FMAs.
TEST(VecMathTest, ErfIsWithinAFewUlp) {
  std::vector<float> x;
  for (uint32_t bits = 0; bits <= 0x40a00000u; bits += 127) {
    float v;
    std::memcpy(&v, &bits, 4);
    x.push_back(v);
    x.push_back(-v);
  }
  std::vector<float> y(x.size());
  erfArray(x.data(), y.data(), x.size());
  int64_t worst = 0;
  float at = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t u = ulps(y[i], static_cast<float>(std::erf(double(x[i]))));
    if (u > worst)
      worst = u, at = x[i];
  }
  EXPECT_LE(worst, 3) << "at " << at;
  float special[] = {0.0f,
                     -0.0f,
                     4.0f,
                     -100.0f,
                     std::numeric_limits<float>::infinity(),
                     -std::numeric_limits<float>::infinity(),
                     std::nanf(""),
                     1e-30f};
  float e[8];
  erfArray(special, e, 8);
  EXPECT_EQ(e[0], 0.0f);
  EXPECT_EQ(e[2], 1.0f);
  EXPECT_EQ(e[3], -1.0f);
  EXPECT_EQ(e[4], 1.0f);
  EXPECT_EQ(e[5], -1.0f);
  EXPECT_TRUE(std::isnan(e[6]));
  EXPECT_EQ(e[7], static_cast<float>(std::erf(1e-30)));
}

} // namespace

namespace {

// kernels/cpu/Parallel.h: every index exactly once, chunks contiguous and
// ordered, small loops on the calling thread; many jobs back to back (the
// pool's generations) lose nothing.
TEST(ParallelTest, EveryIndexOnceInContiguousChunks) {
  for (int64_t n : {int64_t(0), int64_t(5), kParallelGrain * 2 - 1,
                    kParallelGrain * 2, kParallelGrain * 7 + 3}) {
    std::vector<std::atomic<int>> hits(n);
    std::atomic<int> calls{0};
    parallelFor(n, kParallelGrain, [&](int64_t b, int64_t e) {
      EXPECT_LE(b, e);
      ++calls;
      for (int64_t i = b; i < e; ++i)
        ++hits[i];
    });
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(hits[i].load(), 1) << "n " << n << " index " << i;
    if (n < 2 * kParallelGrain)
      EXPECT_EQ(calls.load(), n ? 1 : 0);
    else
      EXPECT_LE(calls.load(), int(kernelThreads()));
  }
  std::atomic<int64_t> total{0};
  for (int job = 0; job < 2000; ++job)
    parallelFor(4 * 16, 16, [&](int64_t b, int64_t e) { total += e - b; });
  EXPECT_EQ(total.load(), 2000 * 64);
}

} // namespace

//===- ShapeKernelTest.cpp - Unit tests of kernels/cpu/Shape.cpp ---===//
//
// Each data-movement kernel is compared with a naive reference written here
// from the ONNX definition (one index computation per element), on shapes
// that exercise the fast paths (merged axes, 2-D tiles with partial edges,
// broadcast fills) and the general one. GatherGrad and SliceGrad are checked
// against central differences of Gather and Slice in float64.
//
//===----------------------------------------------------------------------===//
#include "KernelTestUtil.h"
#include "kernels/cpu/Kernel.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using namespace headroom;
using namespace headroom::cpu;

namespace {

template <typename T> DType dtypeOf();
template <> DType dtypeOf<float>() { return DType::F32; }
template <> DType dtypeOf<double>() { return DType::F64; }
template <> DType dtypeOf<int64_t>() { return DType::I64; }
template <> DType dtypeOf<int32_t>() { return DType::I32; }
template <> DType dtypeOf<int16_t>() { return DType::I16; }
template <> DType dtypeOf<int8_t>() { return DType::I8; }

/// A test tensor: a shape and its elements.
template <typename T> struct Buf {
  std::vector<int64_t> Shape;
  std::vector<T> Data;

  explicit Buf(std::vector<int64_t> shape, std::vector<T> data = {})
      : Shape(std::move(shape)), Data(std::move(data)) {
    int64_t n = 1;
    for (int64_t d : Shape)
      n *= d;
    Data.resize(n);
  }
  TensorView view() { return TensorView{dtypeOf<T>(), Shape, Data.data()}; }
};

using I64 = Buf<int64_t>;
using F64 = Buf<double>;

template <typename T> Buf<T> iota(std::vector<int64_t> shape, T first = 0) {
  Buf<T> b(std::move(shape));
  std::iota(b.Data.begin(), b.Data.end(), first);
  return b;
}

F64 randomF64(std::vector<int64_t> shape, unsigned seed) {
  F64 b(std::move(shape));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1, 1);
  for (double &v : b.Data)
    v = dist(gen);
  return b;
}

std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i)
    s[i] = s[i + 1] * shape[i + 1];
  return s;
}

std::vector<int64_t> coordsOf(int64_t flat, const std::vector<int64_t> &shape) {
  std::vector<int64_t> c(shape.size());
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    c[i] = flat % shape[i];
    flat /= shape[i];
  }
  return c;
}

AttributeMap attrs(std::initializer_list<std::pair<std::string, Attribute>> l) {
  return AttributeMap(l.begin(), l.end());
}

//===----------------------------------------------------------------------===//
// Layout-preserving ops and Transpose
//===----------------------------------------------------------------------===//

TEST(ShapeKernels, ReshapeFamilyCopiesBytes) {
  auto x = iota<float>({2, 3, 4});
  for (const char *op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}) {
    Buf<float> y({6, 4});
    I64 shape({2}, {6, 4});
    EXPECT_EQ(runKernel(op, {x.view(), shape.view()}, {y.view()}), "") << op;
    EXPECT_EQ(y.Data, x.Data) << op;
  }
  Buf<float> wrong({5, 4});
  EXPECT_NE(runKernel("Reshape", {x.view(), I64({2}).view()}, {wrong.view()}),
            "");
}

/// Transpose of `shape` by `perm` against the per-element definition.
template <typename T>
void checkTranspose(std::vector<int64_t> shape, std::vector<int64_t> perm) {
  auto x = iota<T>(shape, T(1));
  std::vector<int64_t> outShape;
  for (int64_t p : perm)
    outShape.push_back(shape[p]);
  Buf<T> y(outShape);
  ASSERT_EQ(runKernel("Transpose", {x.view()}, {y.view()},
                      attrs({{"perm", Attribute::getInts(perm)}})),
            "");
  std::vector<int64_t> st = stridesOf(shape);
  for (size_t o = 0; o < y.Data.size(); ++o) {
    std::vector<int64_t> c = coordsOf(o, outShape);
    int64_t src = 0;
    for (size_t d = 0; d < perm.size(); ++d)
      src += c[d] * st[perm[d]];
    ASSERT_EQ(y.Data[o], x.Data[src]) << "element " << o;
  }
}

TEST(ShapeKernels, Transpose2DTilesWithPartialEdges) {
  // Whole cache-line blocks (16 floats, 8 doubles, 32 i16, 64 i8) and the
  // partial rows and columns around them.
  checkTranspose<float>({70, 45}, {1, 0});
  checkTranspose<float>({3, 40, 50}, {0, 2, 1});
  checkTranspose<double>({33, 97}, {1, 0});
  checkTranspose<int8_t>({130, 70}, {1, 0});
  checkTranspose<int16_t>({40, 70}, {1, 0});
  checkTranspose<int64_t>({3, 5}, {1, 0});
}

TEST(ShapeKernels, TransposeAllPermutationsOfRank3And4) {
  for (std::vector<int64_t> shape :
       {std::vector<int64_t>{3, 4, 5}, {2, 1, 37}, {40, 3, 35}}) {
    std::vector<int64_t> perm = {0, 1, 2};
    do
      checkTranspose<float>(shape, perm);
    while (std::next_permutation(perm.begin(), perm.end()));
  }
  std::vector<int64_t> perm = {0, 1, 2, 3};
  do
    checkTranspose<float>({2, 3, 4, 5}, perm);
  while (std::next_permutation(perm.begin(), perm.end()));
  checkTranspose<float>({2, 3, 33, 34}, {0, 1, 3, 2}); // last two axes
}

TEST(ShapeKernels, TransposeDefaultReversesAndRejectsBadPerm) {
  auto x = iota<float>({2, 3, 4});
  Buf<float> y({4, 3, 2});
  ASSERT_EQ(runKernel("Transpose", {x.view()}, {y.view()}), "");
  EXPECT_EQ(y.Data[1], x.Data[12]); // y[0][0][1] = x[1][0][0]
  EXPECT_EQ(y.Data[2], x.Data[4]);  // y[0][1][0] = x[0][1][0]
  EXPECT_NE(runKernel("Transpose", {x.view()}, {y.view()},
                      attrs({{"perm", Attribute::getInts({2, 2, 0})}})),
            "");
}

//===----------------------------------------------------------------------===//
// Concat and Split
//===----------------------------------------------------------------------===//

TEST(ShapeKernels, ConcatAndSplitAreInverse) {
  auto a = iota<float>({2, 1, 3}, 0), b = iota<float>({2, 2, 3}, 100);
  Buf<float> y({2, 3, 3});
  auto axis = attrs({{"axis", Attribute::getInt(-2)}});
  ASSERT_EQ(runKernel("Concat", {a.view(), b.view()}, {y.view()}, axis), "");
  std::vector<float> want = {0, 1, 2, 100, 101, 102, 103, 104, 105,
                             3, 4, 5, 106, 107, 108, 109, 110, 111};
  EXPECT_EQ(y.Data, want);

  Buf<float> a2({2, 1, 3}), b2({2, 2, 3});
  I64 split({2}, {1, 2});
  ASSERT_EQ(runKernel("Split", {y.view(), split.view()}, {a2.view(), b2.view()},
                      axis),
            "");
  EXPECT_EQ(a2.Data, a.Data);
  EXPECT_EQ(b2.Data, b.Data);
  I64 badSplit({2}, {2, 1});
  EXPECT_NE(runKernel("Split", {y.view(), badSplit.view()},
                      {a2.view(), b2.view()}, axis),
            "");
}

//===----------------------------------------------------------------------===//
// Slice and Gather
//===----------------------------------------------------------------------===//

TEST(ShapeKernels, SliceNegativeStepsAndClamping) {
  auto x = iota<float>({10});
  Buf<float> y({5});
  I64 starts({1}, {-1}), ends({1}, {INT64_MIN}), axes({1}, {0}),
      steps({1}, {-2});
  ASSERT_EQ(runKernel("Slice",
                      {x.view(), starts.view(), ends.view(), axes.view(),
                       steps.view()},
                      {y.view()}),
            "");
  EXPECT_EQ(y.Data, (std::vector<float>{9, 7, 5, 3, 1}));

  // Ends past the axis clamp; a start past the end gives an empty slice.
  Buf<float> tail({3});
  I64 s2({1}, {7}), e2({1}, {1000});
  ASSERT_EQ(runKernel("Slice", {x.view(), s2.view(), e2.view()}, {tail.view()}),
            "");
  EXPECT_EQ(tail.Data, (std::vector<float>{7, 8, 9}));
  Buf<float> empty({0});
  I64 s3({1}, {20});
  EXPECT_EQ(
      runKernel("Slice", {x.view(), s3.view(), e2.view()}, {empty.view()}), "");
  // With a negative step a start clamps into [0, dim-1], as the spec says
  // (numpy would clamp it to -1 and give an empty slice).
  I64 s4({1}, {-20}), e4({1}, {-30}), back({1}, {-1});
  Buf<float> first({1});
  ASSERT_EQ(
      runKernel("Slice",
                {x.view(), s4.view(), e4.view(), axes.view(), back.view()},
                {first.view()}),
      "");
  EXPECT_EQ(first.Data, (std::vector<float>{0}));
  // A result type that disagrees with the operands is an error.
  EXPECT_NE(runKernel("Slice", {x.view(), s2.view(), e2.view()}, {y.view()}),
            "");
}

TEST(ShapeKernels, Slice3DMatchesDefinition) {
  auto x = iota<int32_t>({4, 5, 6});
  // x[1:4:2, ::-1, -1:0:-3] with the axes listed out of order.
  I64 starts({3}, {-1, 1, INT64_MAX}), ends({3}, {0, 4, INT64_MIN}),
      axes({3}, {2, 0, 1}), steps({3}, {-3, 2, -1});
  Buf<int32_t> y({2, 5, 2});
  ASSERT_EQ(runKernel("Slice",
                      {x.view(), starts.view(), ends.view(), axes.view(),
                       steps.view()},
                      {y.view()}),
            "");
  for (size_t o = 0; o < y.Data.size(); ++o) {
    std::vector<int64_t> c = coordsOf(o, y.Shape);
    int64_t i = 1 + 2 * c[0], j = 4 - c[1], k = 5 - 3 * c[2];
    ASSERT_EQ(y.Data[o], x.Data[(i * 5 + j) * 6 + k]) << "element " << o;
  }
}

TEST(ShapeKernels, GatherNegativeIndicesAndRangeErrors) {
  auto x = iota<float>({3, 4});
  I64 idx({2, 2}, {0, -1, 2, 1});
  Buf<float> rows({2, 2, 4});
  ASSERT_EQ(runKernel("Gather", {x.view(), idx.view()}, {rows.view()}), "");
  EXPECT_EQ(rows.Data[4], 8); // row -1 = row 2
  EXPECT_EQ(rows.Data[15], 7);

  Buf<int32_t> idx32({2}, {-4, 3});
  Buf<float> cols({3, 2});
  ASSERT_EQ(runKernel("Gather", {x.view(), idx32.view()}, {cols.view()},
                      attrs({{"axis", Attribute::getInt(1)}})),
            "");
  EXPECT_EQ(cols.Data, (std::vector<float>{0, 3, 4, 7, 8, 11}));

  I64 bad({2}, {0, 3});
  Buf<float> out({2, 4});
  std::string e = runKernel("Gather", {x.view(), bad.view()}, {out.view()});
  EXPECT_NE(e.find("index 3 is out of range"), std::string::npos) << e;
}

//===----------------------------------------------------------------------===//
// Gradients against finite differences
//===----------------------------------------------------------------------===//

/// Checks `grad` (dL/dx) for L(x) = sum(forward(x) * u) by central
/// differences. L is linear in x, so the difference quotient has no
/// truncation error, only rounding: about eps * |L| / h ~ 1e-16 * 10 / 1e-3
/// = 1e-12 here, well inside 1e-8, while a misplaced or missing contribution
/// is off by about |u| ~ 0.5.
template <typename Forward>
void checkByFiniteDifferences(F64 x, const F64 &u, const F64 &grad,
                              Forward forward) {
  const double h = 1e-3;
  auto loss = [&](F64 &at) {
    F64 y = forward(at);
    double l = 0;
    for (size_t i = 0; i < y.Data.size(); ++i)
      l += y.Data[i] * u.Data[i];
    return l;
  };
  for (size_t i = 0; i < x.Data.size(); ++i) {
    double v = x.Data[i];
    x.Data[i] = v + h;
    double up = loss(x);
    x.Data[i] = v - h;
    double down = loss(x);
    x.Data[i] = v;
    ASSERT_NEAR(grad.Data[i], (up - down) / (2 * h), 1e-8) << "element " << i;
  }
}

void checkGatherGrad(std::vector<int64_t> dataShape, I64 idx, int64_t axis) {
  AttributeMap a = attrs({{"axis", Attribute::getInt(axis)}});
  if (axis < 0)
    axis += dataShape.size();
  std::vector<int64_t> outShape(dataShape.begin(), dataShape.begin() + axis);
  outShape.insert(outShape.end(), idx.Shape.begin(), idx.Shape.end());
  outShape.insert(outShape.end(), dataShape.begin() + axis + 1,
                  dataShape.end());
  F64 x = randomF64(dataShape, 1), u = randomF64(outShape, 2), dx(dataShape);
  ASSERT_EQ(runKernel("GatherGrad", {u.view(), idx.view()}, {dx.view()}, a),
            "");
  checkByFiniteDifferences(x, u, dx, [&](F64 &at) {
    F64 y(outShape);
    EXPECT_EQ(runKernel("Gather", {at.view(), idx.view()}, {y.view()}, a), "");
    return y;
  });
}

TEST(ShapeKernels, GatherGradMatchesFiniteDifferences) {
  // An embedding table: repeated and negative indices accumulate.
  checkGatherGrad({5, 3}, I64({2, 3}, {1, -4, 4, 0, 1, 1}), 0);
  checkGatherGrad({2, 4, 3}, I64({3}, {3, -1, 0}), 1);
  checkGatherGrad({2, 3, 4}, I64({2}, {-1, 2}), -1);
}

TEST(ShapeKernels, GatherGradAccumulatesRepeatedRows) {
  I64 idx({3}, {2, 2, 0});
  Buf<float> dy({3, 2}, {1, 2, 3, 4, 5, 6}), dx({3, 2});
  ASSERT_EQ(runKernel("GatherGrad", {dy.view(), idx.view()}, {dx.view()}), "");
  EXPECT_EQ(dx.Data, (std::vector<float>{5, 6, 0, 0, 4, 6}));
  I64 bad({3}, {2, 3, 0});
  EXPECT_NE(runKernel("GatherGrad", {dy.view(), bad.view()}, {dx.view()}), "");
}

TEST(ShapeKernels, SliceGradMatchesFiniteDifferences) {
  std::vector<int64_t> shape = {4, 5, 6};
  I64 starts({3}, {-1, 1, 100}), ends({3}, {0, 4, -100}), axes({3}, {2, 0, 1}),
      steps({3}, {-3, 2, -2});
  std::vector<int64_t> sliceShape = {2, 3, 2};
  F64 x = randomF64(shape, 3), u = randomF64(sliceShape, 4), dx(shape);
  auto operands = [&](TensorView first) {
    return std::vector<TensorView>{first, starts.view(), ends.view(),
                                   axes.view(), steps.view()};
  };
  ASSERT_EQ(runKernel("SliceGrad", operands(u.view()), {dx.view()}), "");
  checkByFiniteDifferences(x, u, dx, [&](F64 &at) {
    F64 y(sliceShape);
    EXPECT_EQ(runKernel("Slice", operands(at.view()), {y.view()}), "");
    return y;
  });
  F64 wrongDy({2, 2, 2});
  EXPECT_NE(runKernel("SliceGrad", operands(wrongDy.view()), {dx.view()}), "");
}

//===----------------------------------------------------------------------===//
// Expand, Tile, Pad, Trilu
//===----------------------------------------------------------------------===//

TEST(ShapeKernels, ExpandBroadcasts) {
  auto x = iota<float>({3, 1});
  I64 shape({3}, {2, 1, 4});
  Buf<float> y({2, 3, 4});
  ASSERT_EQ(runKernel("Expand", {x.view(), shape.view()}, {y.view()}), "");
  for (size_t o = 0; o < y.Data.size(); ++o)
    ASSERT_EQ(y.Data[o], float(o / 4 % 3)) << "element " << o;
  Buf<float> bad({2, 3, 4});
  auto x2 = iota<float>({2, 4});
  EXPECT_NE(runKernel("Expand", {x2.view(), shape.view()}, {bad.view()}), "");
}

TEST(ShapeKernels, TileRepeats) {
  auto x = iota<int64_t>({2, 3});
  I64 repeats({2}, {2, 3});
  I64 y({4, 9});
  ASSERT_EQ(runKernel("Tile", {x.view(), repeats.view()}, {y.view()}), "");
  for (size_t o = 0; o < y.Data.size(); ++o)
    ASSERT_EQ(y.Data[o], int64_t(o / 9 % 2 * 3 + o % 9 % 3)) << "element " << o;
}

TEST(ShapeKernels, PadModes) {
  auto x = iota<float>({2, 3}, 1); // [[1 2 3] [4 5 6]]
  I64 pads({4}, {1, 2, 0, -1});    // rows +1 before; cols +2 before, -1 after
  Buf<float> y({3, 4}), fill({}, {9});
  ASSERT_EQ(runKernel("Pad", {x.view(), pads.view(), fill.view()}, {y.view()}),
            "");
  EXPECT_EQ(y.Data, (std::vector<float>{9, 9, 9, 9, 9, 9, 1, 2, 9, 9, 4, 5}));
  AttributeMap reflect = attrs({{"mode", Attribute::getString("reflect")}});
  ASSERT_EQ(runKernel("Pad", {x.view(), pads.view()}, {y.view()}, reflect), "");
  EXPECT_EQ(y.Data, (std::vector<float>{6, 5, 4, 5, 3, 2, 1, 2, 6, 5, 4, 5}));
  AttributeMap edge = attrs({{"mode", Attribute::getString("edge")}});
  ASSERT_EQ(runKernel("Pad", {x.view(), pads.view()}, {y.view()}, edge), "");
  EXPECT_EQ(y.Data, (std::vector<float>{1, 1, 1, 2, 1, 1, 1, 2, 4, 4, 4, 5}));
  // Reflecting further than the axis is long folds back again, as numpy.pad.
  auto row = iota<float>({3});
  I64 wide({2}, {5, 0});
  Buf<float> r({8});
  ASSERT_EQ(runKernel("Pad", {row.view(), wide.view()}, {r.view()}, reflect),
            "");
  EXPECT_EQ(r.Data, (std::vector<float>{1, 0, 1, 2, 1, 0, 1, 2}));
  // Wrap (opset 19) continues from the other end, as numpy.pad's wrap.
  AttributeMap wrap = attrs({{"mode", Attribute::getString("wrap")}});
  ASSERT_EQ(runKernel("Pad", {row.view(), wide.view()}, {r.view()}, wrap), "");
  EXPECT_EQ(r.Data, (std::vector<float>{1, 2, 0, 1, 2, 0, 1, 2}));
  AttributeMap circular = attrs({{"mode", Attribute::getString("circular")}});
  EXPECT_NE(runKernel("Pad", {x.view(), pads.view()}, {y.view()}, circular),
            "");
}

TEST(ShapeKernels, TriluKeepsATriangle) {
  auto x = iota<float>({2, 3, 4}, 1);
  for (int64_t upper : {0, 1}) {
    for (int64_t k : {-4, -1, 0, 2, 5}) {
      Buf<float> y({2, 3, 4});
      I64 kT({}, {k});
      ASSERT_EQ(runKernel("Trilu", {x.view(), kT.view()}, {y.view()},
                          attrs({{"upper", Attribute::getInt(upper)}})),
                "");
      for (size_t o = 0; o < y.Data.size(); ++o) {
        int64_t c = o % 4, r = o / 4 % 3;
        bool keep = upper ? c - r >= k : c - r <= k;
        ASSERT_EQ(y.Data[o], keep ? x.Data[o] : 0)
            << "upper " << upper << " k " << k << " element " << o;
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// Shape, Size, ConstantOfShape, Range
//===----------------------------------------------------------------------===//

TEST(ShapeKernels, ShapeAndSize) {
  Buf<float> x({2, 3, 4});
  I64 all({3}), tail({2}), size({});
  ASSERT_EQ(runKernel("Shape", {x.view()}, {all.view()}), "");
  EXPECT_EQ(all.Data, (std::vector<int64_t>{2, 3, 4}));
  ASSERT_EQ(runKernel("Shape", {x.view()}, {tail.view()},
                      attrs({{"start", Attribute::getInt(-2)},
                             {"end", Attribute::getInt(10)}})),
            "");
  EXPECT_EQ(tail.Data, (std::vector<int64_t>{3, 4}));
  ASSERT_EQ(runKernel("Size", {x.view()}, {size.view()}), "");
  EXPECT_EQ(size.Data[0], 24);
}

TEST(ShapeKernels, ConstantOfShapeFills) {
  I64 shape({2}, {2, 3});
  Buf<float> zeros({2, 3}, std::vector<float>(6, 7));
  ASSERT_EQ(runKernel("ConstantOfShape", {shape.view()}, {zeros.view()}), "");
  EXPECT_EQ(zeros.Data, std::vector<float>(6, 0));
  I64 fives({2, 3});
  AttributeMap value =
      attrs({{"value",
              Attribute::getTensor(Tensor::fromInts(DType::I64, {1}, {5}))}});
  ASSERT_EQ(runKernel("ConstantOfShape", {shape.view()}, {fives.view()}, value),
            "");
  EXPECT_EQ(fives.Data, std::vector<int64_t>(6, 5));
  EXPECT_NE(runKernel("ConstantOfShape", {shape.view()}, {zeros.view()}, value),
            "");
}

TEST(ShapeKernels, RangeCountsLikeTheSpec) {
  Buf<float> start({}, {1}), limit({}, {2}), delta({}, {0.25}), y({4});
  ASSERT_EQ(runKernel("Range", {start.view(), limit.view(), delta.view()},
                      {y.view()}),
            "");
  EXPECT_EQ(y.Data, (std::vector<float>{1, 1.25, 1.5, 1.75}));
  Buf<int32_t> s({}, {10}), l({}, {3}), d({}, {-3}), yi({3});
  ASSERT_EQ(runKernel("Range", {s.view(), l.view(), d.view()}, {yi.view()}),
            "");
  EXPECT_EQ(yi.Data, (std::vector<int32_t>{10, 7, 4}));
  Buf<int32_t> wrong({2});
  EXPECT_NE(runKernel("Range", {s.view(), l.view(), d.view()}, {wrong.view()}),
            "");
}

} // namespace

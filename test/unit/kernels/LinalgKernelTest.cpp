//===- LinalgKernelTest.cpp - Unit tests of kernels/cpu/Linalg.cpp ---===//
//
// Gemm and MatMul against plain reference loops on small random inputs, over
// every transpose and bias form of Gemm and every promotion and broadcast
// form of MatMul.
//
//===----------------------------------------------------------------------===//
#include "KernelTestUtil.h"
#include "kernels/cpu/Kernel.h"

#include <gtest/gtest.h>

#include <random>

using namespace headroom;
using namespace headroom::cpu;

namespace {

template <typename T> DType dtypeOf();
template <> DType dtypeOf<float>() { return DType::F32; }
template <> DType dtypeOf<double>() { return DType::F64; }

/// A tensor owned by the test, viewable by a kernel.
template <typename T> struct Buffer {
  std::vector<int64_t> Shape;
  std::vector<T> Data;

  Buffer() = default;
  explicit Buffer(std::vector<int64_t> shape) : Shape(std::move(shape)) {
    int64_t n = 1;
    for (int64_t d : Shape)
      n *= d;
    Data.assign(n, T(0));
  }
  TensorView view() { return TensorView{dtypeOf<T>(), Shape, Data.data()}; }
  int64_t size() const { return Data.size(); }
};

template <typename T> Buffer<T> randomBuffer(std::vector<int64_t> shape) {
  static std::mt19937 rng(42);
  std::uniform_real_distribution<double> dist(-1, 1);
  Buffer<T> b(std::move(shape));
  for (T &v : b.Data)
    v = T(dist(rng));
  return b;
}

/// Y = alpha * op(A) * op(B) + beta * C, with C of rank <= 2 broadcast.
template <typename T>
std::vector<double> referenceGemm(const Buffer<T> &a, const Buffer<T> &b,
                                  const Buffer<T> *c, bool transA, bool transB,
                                  double alpha, double beta) {
  int64_t m = a.Shape[transA], k = a.Shape[!transA], n = b.Shape[!transB];
  std::vector<double> y(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p)
        acc += double(transA ? a.Data[p * m + i] : a.Data[i * k + p]) *
               double(transB ? b.Data[j * k + p] : b.Data[p * n + j]);
      double bias = 0;
      if (c) {
        int64_t rank = c->Shape.size();
        int64_t cm = rank == 2 ? c->Shape[0] : 1;
        int64_t cn = rank >= 1 ? c->Shape[rank - 1] : 1;
        bias = c->Data[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)];
      }
      y[i * n + j] = alpha * acc + beta * bias;
    }
  return y;
}

template <typename T> void checkGemm(double tol) {
  const int64_t m = 3, k = 5, n = 4;
  std::vector<std::vector<int64_t>> biasShapes = {{},     {1},    {n},   {1, n},
                                                  {m, 1}, {m, n}, {1, 1}};
  for (bool transA : {false, true})
    for (bool transB : {false, true})
      for (int bias = -1; bias < static_cast<int>(biasShapes.size()); ++bias) {
        SCOPED_TRACE("transA=" + std::to_string(transA) + " transB=" +
                     std::to_string(transB) + " bias=" + std::to_string(bias));
        auto a = randomBuffer<T>(transA ? std::vector<int64_t>{k, m}
                                        : std::vector<int64_t>{m, k});
        auto b = randomBuffer<T>(transB ? std::vector<int64_t>{n, k}
                                        : std::vector<int64_t>{k, n});
        Buffer<T> c =
            bias < 0 ? Buffer<T>() : randomBuffer<T>(biasShapes[bias]);
        Buffer<T> y({m, n});
        AttributeMap attrs{{"alpha", Attribute::getFloat(0.75)},
                           {"beta", Attribute::getFloat(-1.25)},
                           {"transA", Attribute::getInt(transA)},
                           {"transB", Attribute::getInt(transB)}};
        std::vector<TensorView> ins = {a.view(), b.view()};
        if (bias >= 0)
          ins.push_back(c.view());
        ASSERT_EQ(runKernel("Gemm", ins, {y.view()}, attrs), "");
        auto want = referenceGemm(a, b, bias < 0 ? nullptr : &c, transA, transB,
                                  0.75, -1.25);
        for (int64_t i = 0; i < y.size(); ++i)
          EXPECT_NEAR(y.Data[i], want[i], tol) << "element " << i;
      }
}

TEST(LinalgKernelTest, GemmMatchesReferenceF64) { checkGemm<double>(1e-12); }
TEST(LinalgKernelTest, GemmMatchesReferenceF32) { checkGemm<float>(1e-5); }

TEST(LinalgKernelTest, GemmBetaZeroIgnoresOutputContents) {
  auto a = randomBuffer<double>({2, 3}), b = randomBuffer<double>({3, 2});
  Buffer<double> y({2, 2});
  // BLAS must not read the (uninitialized) output when there is no bias.
  std::fill(y.Data.begin(), y.Data.end(), std::nan(""));
  ASSERT_EQ(runKernel("Gemm", {a.view(), b.view()}, {y.view()}, {}), "");
  auto want = referenceGemm<double>(a, b, nullptr, false, false, 1, 0);
  for (int64_t i = 0; i < y.size(); ++i)
    EXPECT_NEAR(y.Data[i], want[i], 1e-12);
}

/// numpy matmul by its definition: promote 1-D operands, broadcast batch
/// axes, one dot product per output element.
template <typename T>
std::pair<std::vector<int64_t>, std::vector<double>>
referenceMatMul(const Buffer<T> &a, const Buffer<T> &b) {
  std::vector<int64_t> as = a.Shape, bs = b.Shape;
  bool rowA = as.size() == 1, colB = bs.size() == 1;
  if (rowA)
    as.insert(as.begin(), 1);
  if (colB)
    bs.push_back(1);
  int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  size_t batchRank = std::max(as.size(), bs.size()) - 2;
  // Pad both batch shapes with leading 1s to the same rank.
  std::vector<int64_t> ab(batchRank - (as.size() - 2), 1),
      bb(batchRank - (bs.size() - 2), 1);
  ab.insert(ab.end(), as.begin(), as.end() - 2);
  bb.insert(bb.end(), bs.begin(), bs.end() - 2);
  std::vector<int64_t> outBatch(batchRank);
  int64_t batches = 1;
  for (size_t i = 0; i < batchRank; ++i) {
    outBatch[i] = std::max(ab[i], bb[i]);
    batches *= outBatch[i];
  }
  std::vector<double> y(batches * m * n);
  for (int64_t bi = 0; bi < batches; ++bi) {
    int64_t rest = bi, aOff = 0, bOff = 0, aMul = 1, bMul = 1;
    for (int64_t d = batchRank - 1; d >= 0; --d) {
      int64_t idx = rest % outBatch[d];
      rest /= outBatch[d];
      aOff += (ab[d] == 1 ? 0 : idx) * aMul;
      bOff += (bb[d] == 1 ? 0 : idx) * bMul;
      aMul *= ab[d];
      bMul *= bb[d];
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p)
          acc += double(a.Data[aOff * m * k + i * k + p]) *
                 double(b.Data[bOff * k * n + p * n + j]);
        y[bi * m * n + i * n + j] = acc;
      }
  }
  std::vector<int64_t> shape = outBatch;
  if (!rowA)
    shape.push_back(m);
  if (!colB)
    shape.push_back(n);
  return {shape, y};
}

TEST(LinalgKernelTest, MatMulMatchesReference) {
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{3, 4}, {4, 5}},
      {{4}, {4, 5}},
      {{3, 4}, {4}},
      {{4}, {4}},
      {{2, 3, 4}, {4, 5}},
      {{2, 3, 4}, {2, 4, 5}},
      {{1, 3, 4}, {2, 4, 5}},
      {{2, 1, 3, 4}, {3, 4, 5}},
      {{5}, {2, 5, 3}},
      {{2, 3, 4}, {4}},
      {{2, 3, 4}, {1, 1, 4, 2}},
      {{3, 1, 2, 4}, {1, 2, 4, 3}}};
  for (auto &[as, bs] : cases) {
    SCOPED_TRACE(testing::PrintToString(as) + " x " +
                 testing::PrintToString(bs));
    auto a = randomBuffer<double>(as), b = randomBuffer<double>(bs);
    auto [shape, want] = referenceMatMul(a, b);
    Buffer<double> y(shape);
    ASSERT_EQ(runKernel("MatMul", {a.view(), b.view()}, {y.view()}, {}), "");
    for (int64_t i = 0; i < y.size(); ++i)
      EXPECT_NEAR(y.Data[i], want[i], 1e-12) << "element " << i;
  }
}

/// `x` with its last two axes swapped (what transA/transB undo).
template <typename T> Buffer<T> swapLastTwo(const Buffer<T> &x) {
  std::vector<int64_t> shape = x.Shape;
  size_t r = shape.size();
  std::swap(shape[r - 2], shape[r - 1]);
  Buffer<T> t(shape);
  int64_t rows = x.Shape[r - 2], cols = x.Shape[r - 1];
  int64_t batches = rows * cols != 0 ? x.size() / (rows * cols) : 0;
  for (int64_t b = 0; b < batches; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        t.Data[b * rows * cols + j * rows + i] =
            x.Data[b * rows * cols + i * cols + j];
  return t;
}

TEST(LinalgKernelTest, MatMulTransposedOperands) {
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{3, 4}, {4, 5}},       {{2, 3, 4}, {4, 5}},
      {{2, 3, 4}, {2, 4, 5}}, {{1, 3, 4}, {2, 4, 5}},
      {{3, 4}, {2, 4, 5}},    {{2, 1, 3, 4}, {3, 4, 5}},
      {{3, 0}, {0, 5}},       {{2, 3, 4}, {1, 1, 4, 2}}};
  for (auto &[as, bs] : cases)
    for (int flags = 1; flags < 4; ++flags) {
      bool ta = flags & 1, tb = flags & 2;
      SCOPED_TRACE(testing::PrintToString(as) + " x " +
                   testing::PrintToString(bs) + " transA " +
                   std::to_string(ta) + " transB " + std::to_string(tb));
      auto a = randomBuffer<double>(as), b = randomBuffer<double>(bs);
      auto [shape, want] = referenceMatMul(a, b);
      Buffer<double> at = ta ? swapLastTwo(a) : a, bt = tb ? swapLastTwo(b) : b;
      AttributeMap attrs;
      attrs["transA"] = Attribute::getInt(ta);
      attrs["transB"] = Attribute::getInt(tb);
      Buffer<double> y(shape);
      ASSERT_EQ(runKernel("MatMul", {at.view(), bt.view()}, {y.view()}, attrs),
                "");
      for (int64_t i = 0; i < y.size(); ++i)
        EXPECT_NEAR(y.Data[i], want[i], 1e-12) << "element " << i;
    }
  auto a = randomBuffer<double>({4}), b = randomBuffer<double>({4, 5});
  Buffer<double> y({5});
  AttributeMap attrs;
  attrs["transA"] = Attribute::getInt(1);
  EXPECT_EQ(runKernel("MatMul", {a.view(), b.view()}, {y.view()}, attrs),
            "MatMul: a transposed operand must have rank >= 2");
}

TEST(LinalgKernelTest, MatMulF32) {
  auto a = randomBuffer<float>({2, 3, 7}), b = randomBuffer<float>({2, 7, 5});
  auto [shape, want] = referenceMatMul(a, b);
  Buffer<float> y(shape);
  ASSERT_EQ(runKernel("MatMul", {a.view(), b.view()}, {y.view()}, {}), "");
  for (int64_t i = 0; i < y.size(); ++i)
    EXPECT_NEAR(y.Data[i], want[i], 1e-5) << "element " << i;
}

TEST(LinalgKernelTest, ErrorsNameWhatIsUnsupported) {
  auto a = randomBuffer<double>({3, 4}), b = randomBuffer<double>({5, 2});
  Buffer<double> y({3, 2});
  EXPECT_EQ(runKernel("MatMul", {a.view(), b.view()}, {y.view()}, {}),
            "MatMul: inner dimensions differ (4 vs 5)");
  std::vector<int64_t> shape = {2, 2};
  std::vector<int32_t> ints(4);
  TensorView iv{DType::I32, shape, ints.data()};
  EXPECT_EQ(runKernel("Gemm", {iv, iv}, {iv}, {}),
            "Gemm: element type i32 is not supported");
}

} // namespace

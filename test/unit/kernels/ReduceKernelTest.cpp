//===- ReduceKernelTest.cpp - Unit tests of kernels/cpu/Reduce.cpp ---===//
//
// The reductions against a per-element reference over every subset of axes
// of a 4-D tensor (so every pattern of merged reduced/kept runs occurs),
// ArgMax's tie rules, and the softmaxes along each axis and on logits large
// enough to overflow a naive exp.
//
//===----------------------------------------------------------------------===//
#include "KernelTestUtil.h"
#include "kernels/cpu/Kernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace headroom;
using namespace headroom::cpu;

namespace {

/// Reduces `x` of `shape` over the axes in `mask` one element at a time.
std::vector<double> referenceReduce(llvm::StringRef op,
                                    const std::vector<int64_t> &shape,
                                    const std::vector<double> &x,
                                    unsigned mask) {
  std::vector<int64_t> outStrides(shape.size(), 0);
  int64_t outCount = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d)
    if (!(mask >> d & 1)) {
      outStrides[d] = outCount;
      outCount *= shape[d];
    }
  double init = op == "ReduceProd"  ? 1
                : op == "ReduceMax" ? -INFINITY
                : op == "ReduceMin" ? INFINITY
                                    : 0;
  std::vector<double> y(outCount, init);
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
    int64_t rest = i, o = 0;
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      o += (rest % shape[d]) * outStrides[d];
      rest /= shape[d];
    }
    if (op == "ReduceProd")
      y[o] *= x[i];
    else if (op == "ReduceMax")
      y[o] = std::max(y[o], x[i]);
    else if (op == "ReduceMin")
      y[o] = std::min(y[o], x[i]);
    else
      y[o] += x[i];
  }
  if (op == "ReduceMean")
    for (double &v : y)
      v /= double(x.size()) / double(outCount);
  return y;
}

TEST(ReduceKernelTest, EveryAxisSubsetMatchesReference) {
  std::vector<int64_t> shape = {2, 3, 1, 4};
  std::vector<double> x = randomData(24, 1);
  for (llvm::StringRef op :
       {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"})
    for (unsigned mask = 1; mask < 16; ++mask) {
      SCOPED_TRACE(op.str() + " mask " + std::to_string(mask));
      std::vector<int64_t> axes, outShape;
      for (int d = 0; d < 4; ++d) {
        // Name every other axis from the end, to cover negative axes.
        if (mask >> d & 1)
          axes.push_back(d % 2 ? d - 4 : d);
        outShape.push_back(mask >> d & 1 ? 1 : shape[d]);
      }
      std::vector<double> want = referenceReduce(op, shape, x, mask);
      std::vector<double> y(want.size(), 123.0);
      AttributeMap attrs;
      std::vector<TensorView> ins = {{DType::F64, shape, x.data()}};
      std::vector<int64_t> axesShape = {static_cast<int64_t>(axes.size())};
      if (op == "ReduceSum")
        ins.push_back({DType::I64, axesShape, axes.data()});
      else
        attrs["axes"] = Attribute::getInts(axes);
      ASSERT_EQ(runKernel(op, ins, {{DType::F64, outShape, y.data()}}, attrs),
                "");
      for (size_t i = 0; i < y.size(); ++i)
        EXPECT_NEAR(y[i], want[i], 1e-12) << "element " << i;
    }
}

TEST(ReduceKernelTest, EmptyAxesReduceAllOrNothing) {
  std::vector<int64_t> shape = {2, 3};
  std::vector<double> x = randomData(6, 2);
  std::vector<int64_t> noAxes, emptyShape = {0}, one = {1, 1};
  double sum = 0;
  for (double v : x)
    sum += v;
  double all = 0;
  ASSERT_EQ(runKernel("ReduceSum",
                      {{DType::F64, shape, x.data()},
                       {DType::I64, emptyShape, noAxes.data()}},
                      {{DType::F64, one, &all}}, {}),
            "");
  EXPECT_NEAR(all, sum, 1e-12);
  // An absent axes input also means every axis.
  all = 0;
  ASSERT_EQ(runKernel("ReduceSum",
                      {{DType::F64, shape, x.data()}, TensorView{}},
                      {{DType::F64, one, &all}}, {}),
            "");
  EXPECT_NEAR(all, sum, 1e-12);
  std::vector<double> y(6);
  AttributeMap noop{{"noop_with_empty_axes", Attribute::getInt(1)}};
  ASSERT_EQ(runKernel("ReduceSum",
                      {{DType::F64, shape, x.data()},
                       {DType::I64, emptyShape, noAxes.data()}},
                      {{DType::F64, shape, y.data()}}, noop),
            "");
  EXPECT_EQ(y, x);
}

TEST(ReduceKernelTest, IntegerReductionsAndUnsupportedMean) {
  std::vector<int64_t> shape = {2, 3}, outShape = {2};
  std::vector<int64_t> x = {1, -5, 3, 7, 2, 2}, y(2);
  AttributeMap attrs{{"axes", Attribute::getInts({1})},
                     {"keepdims", Attribute::getInt(0)}};
  ASSERT_EQ(runKernel("ReduceMax", {{DType::I64, shape, x.data()}},
                      {{DType::I64, outShape, y.data()}}, attrs),
            "");
  EXPECT_EQ(y, (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(runKernel("ReduceMean", {{DType::I64, shape, x.data()}},
                      {{DType::I64, outShape, y.data()}}, attrs),
            "ReduceMean: element type i64 is not supported");
  attrs["axes"] = Attribute::getInts({2});
  EXPECT_EQ(runKernel("ReduceMax", {{DType::I64, shape, x.data()}},
                      {{DType::I64, outShape, y.data()}}, attrs),
            "ReduceMax: axis 2 is out of range for rank 2");
}

TEST(ReduceKernelTest, MaxPropagatesNaN) {
  std::vector<int64_t> shape = {3}, scalar = {};
  std::vector<double> x = {1, std::nan(""), 2};
  double y = 0;
  ASSERT_EQ(runKernel("ReduceMax", {{DType::F64, shape, x.data()}},
                      {{DType::F64, scalar, &y}},
                      {{"keepdims", Attribute::getInt(0)}}),
            "");
  EXPECT_TRUE(std::isnan(y));
}

TEST(ReduceKernelTest, ArgMaxTiesAndAxes) {
  // [2, 3, 2]: along axis 1 column (0,0) has a tie between rows 0 and 2.
  std::vector<int64_t> shape = {2, 3, 2}, outShape = {2, 2};
  std::vector<float> x = {5, 1, 2, 9, 5, 3, //
                          0, 0, 4, 0, 4, -1};
  std::vector<int64_t> y(4);
  AttributeMap attrs{{"axis", Attribute::getInt(-2)},
                     {"keepdims", Attribute::getInt(0)}};
  ASSERT_EQ(runKernel("ArgMax", {{DType::F32, shape, x.data()}},
                      {{DType::I64, outShape, y.data()}}, attrs),
            "");
  EXPECT_EQ(y, (std::vector<int64_t>{0, 1, 1, 0}));
  attrs["select_last_index"] = Attribute::getInt(1);
  ASSERT_EQ(runKernel("ArgMax", {{DType::F32, shape, x.data()}},
                      {{DType::I64, outShape, y.data()}}, attrs),
            "");
  EXPECT_EQ(y, (std::vector<int64_t>{2, 1, 2, 1}));
}

/// Softmax along `axis` of [2, 3, 4] computed in the plainest way.
std::vector<double> referenceSoftmax(const std::vector<double> &x, int axis,
                                     bool log) {
  std::vector<int64_t> shape = {2, 3, 4};
  int64_t inner = 1;
  for (int d = axis + 1; d < 3; ++d)
    inner *= shape[d];
  int64_t n = shape[axis];
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
    int64_t base = i - ((i / inner) % n) * inner;
    double sum = 0;
    for (int64_t k = 0; k < n; ++k)
      sum += std::exp(x[base + k * inner]);
    y[i] = log ? x[i] - std::log(sum) : std::exp(x[i]) / sum;
  }
  return y;
}

TEST(ReduceKernelTest, SoftmaxAlongEachAxis) {
  std::vector<int64_t> shape = {2, 3, 4};
  std::vector<double> x = randomData(24, 3);
  for (llvm::StringRef op : {"Softmax", "LogSoftmax"})
    for (int axis = -3; axis < 3; ++axis) {
      SCOPED_TRACE(op.str() + " axis " + std::to_string(axis));
      std::vector<double> y(24);
      ASSERT_EQ(runKernel(op, {{DType::F64, shape, x.data()}},
                          {{DType::F64, shape, y.data()}},
                          {{"axis", Attribute::getInt(axis)}}),
                "");
      auto want =
          referenceSoftmax(x, axis < 0 ? axis + 3 : axis, op == "LogSoftmax");
      for (size_t i = 0; i < y.size(); ++i)
        EXPECT_NEAR(y[i], want[i], 1e-12) << "element " << i;
    }
}

TEST(ReduceKernelTest, SoftmaxOverAnEmptyAxisWritesNothing) {
  // [2, 0, 3] along axis 1: no element, and no read of x (it has none).
  std::vector<int64_t> shape = {2, 0, 3};
  for (llvm::StringRef op : {"Softmax", "LogSoftmax"})
    EXPECT_EQ(runKernel(op, {{DType::F32, shape, nullptr}},
                        {{DType::F32, shape, nullptr}},
                        {{"axis", Attribute::getInt(1)}}),
              "")
        << op.str();
}

TEST(ReduceKernelTest, SoftmaxIsStableForLargeLogits) {
  // exp(1000) overflows even f64; shifted by the maximum it does not, and in
  // f32 log-softmax must keep the small differences of large logits.
  std::vector<int64_t> shape = {2, 2};
  std::vector<float> x = {1000, 1001, 10000, 10000.5};
  std::vector<float> y(4);
  ASSERT_EQ(runKernel("Softmax", {{DType::F32, shape, x.data()}},
                      {{DType::F32, shape, y.data()}}, {}),
            "");
  EXPECT_NEAR(y[0], 1 / (1 + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(y[3], 1 / (1 + std::exp(-0.5)), 1e-6);
  ASSERT_EQ(runKernel("LogSoftmax", {{DType::F32, shape, x.data()}},
                      {{DType::F32, shape, y.data()}},
                      {{"axis", Attribute::getInt(1)}}),
            "");
  EXPECT_NEAR(y[1], -std::log1p(std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(y[2], -std::log1p(std::exp(0.5)), 1e-6);
}

} // namespace

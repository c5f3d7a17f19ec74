//===- LossKernelTest.cpp - Unit tests of kernels/cpu/Loss.cpp -------===//
//
// The losses against a direct transcription of ONNX's reference (weights,
// ignore_index, each reduction), and SoftmaxCrossEntropyLossGrad against
// central differences of the forward kernel in f64.
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

/// A [N=2, C=4, d1=3] problem whose labels include ignore_index (-1), so the
/// weighting rules and the ignored rows are all exercised.
struct Problem {
  std::vector<int64_t> ScoresShape = {2, 4, 3}, LabelsShape = {2, 3},
                       WeightShape = {4}, Scalar = {};
  std::vector<double> Scores = randomData(24, 7);
  std::vector<int64_t> Labels = {0, 3, -1, 2, -1, 1};
  std::vector<double> Weight = {0.5, 2.0, 1.5, 0.25};

  std::vector<TensorView> inputs(bool weighted) {
    std::vector<TensorView> ins = {{DType::F64, ScoresShape, Scores.data()},
                                   {DType::I64, LabelsShape, Labels.data()}};
    if (weighted)
      ins.push_back({DType::F64, WeightShape, Weight.data()});
    return ins;
  }
  const std::vector<int64_t> &lossShape(llvm::StringRef reduction) const {
    return reduction == "none" ? LabelsShape : Scalar;
  }
};

AttributeMap lossAttrs(llvm::StringRef reduction) {
  return {{"reduction", Attribute::getString(reduction.str())},
          {"ignore_index", Attribute::getInt(-1)}};
}

/// ONNX's reference: loss_i = -w_i log_softmax(x)[label_i], w_i = 0 for an
/// ignored target; mean divides by sum_i w_i.
std::vector<double> referenceLoss(const Problem &p, bool weighted,
                                  llvm::StringRef reduction) {
  std::vector<double> loss;
  double total = 0, weightSum = 0;
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t d = 0; d < 3; ++d) {
      int64_t label = p.Labels[n * 3 + d];
      double sum = 0;
      for (int64_t c = 0; c < 4; ++c)
        sum += std::exp(p.Scores[(n * 4 + c) * 3 + d]);
      double w = label == -1 ? 0 : weighted ? p.Weight[label] : 1;
      double l = label == -1
                     ? 0
                     : -w * (p.Scores[(n * 4 + label) * 3 + d] - std::log(sum));
      loss.push_back(l);
      total += l;
      weightSum += w;
    }
  if (reduction == "sum")
    return {total};
  if (reduction == "mean")
    return {total / weightSum};
  return loss;
}

TEST(LossKernelTest, SoftmaxCrossEntropyMatchesReference) {
  Problem p;
  for (bool weighted : {false, true})
    for (llvm::StringRef reduction : {"none", "sum", "mean"}) {
      SCOPED_TRACE(reduction.str() + (weighted ? " weighted" : ""));
      std::vector<double> want = referenceLoss(p, weighted, reduction);
      std::vector<double> loss(want.size()), logProb(24);
      ASSERT_EQ(runKernel("SoftmaxCrossEntropyLoss", p.inputs(weighted),
                          {{DType::F64, p.lossShape(reduction), loss.data()},
                           {DType::F64, p.ScoresShape, logProb.data()}},
                          lossAttrs(reduction)),
                "");
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_NEAR(loss[i], want[i], 1e-12) << "element " << i;
      // log_prob sums to 1 in probability over the class axis.
      double total = 0;
      for (int64_t c = 0; c < 4; ++c)
        total += std::exp(logProb[c * 3]);
      EXPECT_NEAR(total, 1.0, 1e-12);

      // NegativeLogLikelihoodLoss of those log-probabilities is the same.
      std::vector<TensorView> ins = p.inputs(weighted);
      ins[0].Data = logProb.data();
      std::vector<double> nll(want.size());
      ASSERT_EQ(runKernel("NegativeLogLikelihoodLoss", ins,
                          {{DType::F64, p.lossShape(reduction), nll.data()}},
                          lossAttrs(reduction)),
                "");
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_NEAR(nll[i], want[i], 1e-12) << "element " << i;
    }
}

TEST(LossKernelTest, LabelOutOfRangeIsAnError) {
  Problem p;
  p.Labels[1] = 4;
  double loss = 0;
  EXPECT_EQ(runKernel("SoftmaxCrossEntropyLoss", p.inputs(false),
                      {{DType::F64, p.Scalar, &loss}}, lossAttrs("mean")),
            "SoftmaxCrossEntropyLoss: label 4 is not a class index in [0, 4)");
  EXPECT_EQ(runKernel("NegativeLogLikelihoodLoss", p.inputs(false),
                      {{DType::F64, p.Scalar, &loss}},
                      {{"reduction", Attribute::getString("max")}}),
            "NegativeLogLikelihoodLoss: reduction 'max' is not supported");
}

/// sum_i g_i * loss_i of the forward kernel at `scores`.
double weightedLoss(Problem &p, bool weighted, llvm::StringRef reduction,
                    const std::vector<double> &g) {
  std::vector<double> loss(g.size());
  std::string error =
      runKernel("SoftmaxCrossEntropyLoss", p.inputs(weighted),
                {{DType::F64, p.lossShape(reduction), loss.data()}},
                lossAttrs(reduction));
  EXPECT_EQ(error, "");
  double total = 0;
  for (size_t i = 0; i < g.size(); ++i)
    total += g[i] * loss[i];
  return total;
}

TEST(LossKernelTest, GradMatchesFiniteDifferences) {
  Problem p;
  for (bool weighted : {false, true})
    for (llvm::StringRef reduction : {"none", "sum", "mean"}) {
      SCOPED_TRACE(reduction.str() + (weighted ? " weighted" : ""));
      // A fixed random upstream gradient: one value per target for "none".
      std::vector<double> g = randomData(reduction == "none" ? 6 : 1, 11);
      std::vector<TensorView> ins = p.inputs(weighted);
      ins.insert(ins.begin(), {DType::F64, p.lossShape(reduction), g.data()});
      std::vector<double> grad(24);
      ASSERT_EQ(runKernel("SoftmaxCrossEntropyLossGrad", ins,
                          {{DType::F64, p.ScoresShape, grad.data()}},
                          lossAttrs(reduction)),
                "");
      // Central differences with h = 1e-5: truncation error is O(h^2 f''')
      // ~ 1e-10 for these O(1) logits, and rounding O(eps |f| / h) ~ 1e-10, so
      // 1e-8 leaves a wide margin while a wrong weight or normalizer (errors
      // of order 0.1) still fails.
      const double h = 1e-5;
      for (int64_t i = 0; i < 24; ++i) {
        double saved = p.Scores[i];
        p.Scores[i] = saved + h;
        double up = weightedLoss(p, weighted, reduction, g);
        p.Scores[i] = saved - h;
        double down = weightedLoss(p, weighted, reduction, g);
        p.Scores[i] = saved;
        EXPECT_NEAR(grad[i], (up - down) / (2 * h), 1e-8) << "element " << i;
      }
      // Targets labelled ignore_index (n=0, d=2 and n=1, d=1) get zero rows.
      for (int64_t c = 0; c < 4; ++c) {
        EXPECT_EQ(grad[(0 * 4 + c) * 3 + 2], 0.0);
        EXPECT_EQ(grad[(1 * 4 + c) * 3 + 1], 0.0);
      }
    }
}

} // namespace

namespace {

/// The [N, C] f32 paths split rows across the kernel threads: a batch large
/// enough to split gives each row the bits a call on that row alone gives
/// (one row never splits), for the loss (reduction none), its gradient and
/// Softmax.
TEST(LossKernelTest, RowsSplitAcrossThreadsKeepTheirBits) {
  const int64_t n = 64, c = 4099; // > 2 * kParallelGrain elements
  std::vector<double> d = randomData(n * c, 11, -6, 6);
  std::vector<float> x(d.begin(), d.end());
  std::vector<int64_t> labels(n);
  for (int64_t i = 0; i < n; ++i)
    labels[i] = i % 7 ? (i * 131) % c : -1; // some ignored
  std::vector<float> loss(n), grad(n * c), probs(n * c), ones(n, 1.0f);
  std::vector<int64_t> xs = {n, c}, ls = {n};
  AttributeMap none = lossAttrs("none");
  ASSERT_EQ(
      runKernel("SoftmaxCrossEntropyLoss",
                {{DType::F32, xs, x.data()}, {DType::I64, ls, labels.data()}},
                {{DType::F32, ls, loss.data()}}, none),
      "");
  ASSERT_EQ(runKernel("SoftmaxCrossEntropyLossGrad",
                      {{DType::F32, ls, ones.data()},
                       {DType::F32, xs, x.data()},
                       {DType::I64, ls, labels.data()}},
                      {{DType::F32, xs, grad.data()}}, none),
            "");
  ASSERT_EQ(runKernel("Softmax", {{DType::F32, xs, x.data()}},
                      {{DType::F32, xs, probs.data()}}, {}),
            "");
  std::vector<int64_t> row = {1, c}, one = {1};
  for (int64_t i = 0; i < n; ++i) {
    float l;
    std::vector<float> g(c), p(c);
    float *xi = x.data() + i * c;
    ASSERT_EQ(runKernel("SoftmaxCrossEntropyLoss",
                        {{DType::F32, row, xi}, {DType::I64, one, &labels[i]}},
                        {{DType::F32, one, &l}}, none),
              "");
    ASSERT_EQ(runKernel("SoftmaxCrossEntropyLossGrad",
                        {{DType::F32, one, ones.data()},
                         {DType::F32, row, xi},
                         {DType::I64, one, &labels[i]}},
                        {{DType::F32, row, g.data()}}, none),
              "");
    ASSERT_EQ(runKernel("Softmax", {{DType::F32, row, xi}},
                        {{DType::F32, row, p.data()}}, {}),
              "");
    EXPECT_EQ(loss[i], l) << "row " << i;
    EXPECT_TRUE(std::equal(g.begin(), g.end(), grad.begin() + i * c))
        << "row " << i;
    EXPECT_TRUE(std::equal(p.begin(), p.end(), probs.begin() + i * c))
        << "row " << i;
  }
}

} // namespace

namespace {

/// A LinearCrossEntropy problem in f64: x [N, D], w ([V, D] with transB,
/// else [D, V]), labels [N] (some ignore_index = -100).
struct Head {
  int64_t N, D, V;
  bool TransB;
  T64 X, W;
  std::vector<int64_t> Labels, LabelShape;
  Head(int64_t n, int64_t d, int64_t v, bool transB)
      : N(n), D(d), V(v), TransB(transB), X({n, d}, 71),
        W(transB ? std::vector<int64_t>{v, d} : std::vector<int64_t>{d, v}, 72),
        LabelShape{n} {
    for (int64_t i = 0; i < n; ++i)
      Labels.push_back(i % 5 == 3 ? -100 : (i * 7 + 3) % v);
  }
  TensorView labels() {
    return TensorView{DType::I64, LabelShape, Labels.data()};
  }
  AttributeMap attrs(int64_t rows) const {
    AttributeMap a;
    a["transB"] = Attribute::getInt(TransB);
    a["ignore_index"] = Attribute::getInt(-100);
    a["rows"] = Attribute::getInt(rows);
    return a;
  }
  double w(int64_t k, int64_t j) const { // w'[k, j]: D x V
    return TransB ? W.Data[j * D + k] : W.Data[k * V + j];
  }
  /// Row i's loss by hand: log-sum-exp of its logits less its label's.
  double rowLoss(int64_t i) const {
    if (Labels[i] == -100)
      return 0;
    std::vector<double> z(V, 0.0);
    double mx = -1e300;
    for (int64_t j = 0; j < V; ++j) {
      for (int64_t k = 0; k < D; ++k)
        z[j] += X.Data[i * D + k] * w(k, j);
      mx = std::max(mx, z[j]);
    }
    double s = 0;
    for (double zj : z)
      s += std::exp(zj - mx);
    return mx + std::log(s) - z[Labels[i]];
  }
};

/// Each row's loss is its cross-entropy, whatever the chunking (one chunk,
/// chunks that divide N, a short last chunk), both layouts of w.
TEST(LinearCrossEntropy, IsEachRowsCrossEntropy) {
  for (bool transB : {true, false})
    for (int64_t rows : {20, 5, 3}) {
      Head h(10, 6, 7, transB);
      T64 out({10});
      ASSERT_EQ(runKernel("LinearCrossEntropy",
                          {h.X.view(), h.W.view(), h.labels()}, {out.view()},
                          h.attrs(rows)),
                "");
      for (int64_t i = 0; i < h.N; ++i)
        EXPECT_NEAR(out.Data[i], h.rowLoss(i), 1e-12)
            << "row " << i << " rows " << rows << " transB " << transB;
    }
}

/// dx and dw of sum_i c_i loss_i by central differences, chunked (rows 3 of
/// 10: dw summed over four chunks), both layouts.
TEST(LinearCrossEntropy, GradientMatchesFiniteDifferences) {
  for (bool transB : {true, false}) {
    Head h(10, 6, 7, transB);
    T64 c({10}, 73), dx({10, 6}),
        dw(transB ? std::vector<int64_t>{7, 6} : std::vector<int64_t>{6, 7});
    ASSERT_EQ(runKernel("LinearCrossEntropyGrad",
                        {c.view(), h.X.view(), h.W.view(), h.labels()},
                        {dx.view(), dw.view()}, h.attrs(3)),
              "");
    auto loss = [&]() {
      double s = 0;
      for (int64_t i = 0; i < h.N; ++i)
        s += c.Data[i] * h.rowLoss(i);
      return s;
    };
    expectGradient(h.X.Data, loss, dx.Data, "dx");
    expectGradient(h.W.Data, loss, dw.Data, "dw");
    // Without dw (a frozen head): the same dx.
    T64 dxOnly({10, 6});
    ASSERT_EQ(runKernel("LinearCrossEntropyGrad",
                        {c.view(), h.X.view(), h.W.view(), h.labels()},
                        {dxOnly.view()}, h.attrs(4)),
              "");
    for (size_t i = 0; i < dx.Data.size(); ++i)
      EXPECT_NEAR(dxOnly.Data[i], dx.Data[i], 1e-12);
  }
}

TEST(LinearCrossEntropy, ChecksItsOperands) {
  Head h(10, 6, 7, true);
  T64 out({9}), w({7, 5}, 3);
  EXPECT_EQ(runKernel("LinearCrossEntropy",
                      {h.X.view(), h.W.view(), h.labels()}, {out.view()},
                      h.attrs(3)),
            "LinearCrossEntropy: result f64[9] should be f64[10]");
  T64 rows({10});
  EXPECT_EQ(runKernel("LinearCrossEntropy", {h.X.view(), w.view(), h.labels()},
                      {rows.view()}, h.attrs(3)),
            "LinearCrossEntropy: x f64[10, 6] and w f64[7, 5] (transB) differ "
            "in the inner dimension");
}

} // namespace

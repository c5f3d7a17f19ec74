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

//===- CudaReduceLossTest.cpp - kernels/cuda Reduce.cu, Loss.cu vs the CPU ===//
//
// Shapes are chosen to take both launch shapes of each kernel (a block per
// output or target, a thread per one), strided and contiguous axes, empty
// reductions, NaNs, ties, and the gradient's three ways to its normalizer.
//
//===----------------------------------------------------------------------===//
#include "CudaKernelTestUtil.h"

using namespace headroom;
using namespace headroom::cudatest;

namespace {

using Shape = std::vector<int64_t>;

TensorType ty(DType t, Shape shape) { return {t, shape}; }

/// A tolerance for results in `t`: f16/bf16 results may round to the
/// neighbouring value when the GPU's order of additions differs.
Tolerance tolFor(DType t) {
  if (t == DType::F16)
    return {1e-3, 2e-3};
  if (t == DType::BF16)
    return {1e-2, 1e-2};
  return {1e-6, 1e-5};
}

/// Runs `c` on the emulated CUDA kernel alone (for what the CPU refuses or
/// does differently): its error, or "" with the results in `outs`.
std::string runCuda(CudaCase c, std::vector<Tensor> &outs) {
  return runCudaOnly(c, outs);
}

/// `shape` reduced over `axes` (all when empty), keeping size-1 axes or not.
Shape reducedShape(const Shape &shape, std::vector<int64_t> axes,
                   bool keepdims) {
  int64_t rank = shape.size();
  std::vector<bool> red(rank, axes.empty());
  for (int64_t a : axes)
    red[a < 0 ? a + rank : a] = true;
  Shape out;
  for (int64_t i = 0; i < rank; ++i)
    if (!red[i])
      out.push_back(shape[i]);
    else if (keepdims)
      out.push_back(1);
  return out;
}

CudaCase reduceCase(const char *op, DType t, Shape shape,
                    std::vector<int64_t> axes, bool keepdims = true,
                    double lo = -2, double hi = 2) {
  CudaCase c;
  c.Op = op;
  c.Inputs = {randomTensor(ty(t, shape), 1, lo, hi)};
  c.Outputs = {ty(t, reducedShape(shape, axes, keepdims))};
  if (!axes.empty())
    c.Attrs["axes"] = Attribute::getInts(axes);
  c.Attrs["keepdims"] = Attribute::getInt(keepdims);
  c.Tol = tolFor(t);
  return c;
}

const char *kReduceOps[] = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                            "ReduceProd"};

struct AxesCase {
  Shape S;
  std::vector<int64_t> Axes;
};

const AxesCase kAxesCases[] = {
    {{3, 4, 5}, {1}},        {{3, 4, 5}, {-1}},         {{3, 4, 5}, {0, 2}},
    {{3, 4, 5}, {}},         {{2, 1, 3, 1, 4}, {1, 2}}, {{5}, {0}},
    {{4, 300}, {1}},         {{300, 5}, {0}},           {{2, 100, 3}, {1}},
    {{2, 40, 3, 5}, {1, 3}}, {{3, 2, 7, 11}, {0, 2}},   {{6, 70, 2}, {0, 1}},
};

TEST(CudaReduce, FloatReductionsMatchTheCpu) {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16})
    for (const char *op : kReduceOps)
      for (const AxesCase &a : kAxesCases)
        for (bool keep : {true, false}) {
          bool prod = std::string(op) == "ReduceProd";
          CudaCase c = reduceCase(op, t, a.S, a.Axes, keep, prod ? 0.9 : -2,
                                  prod ? 1.1 : 2);
          EXPECT_EQ(compareCudaWithCpu(c), "")
              << op << " " << dtypeName(t).str() << " axes " << a.Axes.size()
              << " of rank " << a.S.size();
        }
}

TEST(CudaReduce, ThreadPerOutputOverAStridedAxis) {
  // 16400 outputs with the innermost axis kept: a thread per output.
  for (const char *op : {"ReduceSum", "ReduceMax", "ReduceMean"}) {
    CudaCase c = reduceCase(op, DType::F32, {70, 16400}, {0});
    EXPECT_EQ(compareCudaWithCpu(c), "") << op;
  }
}

TEST(CudaReduce, IntegerReductionsAreExact) {
  for (DType t : {DType::I32, DType::I64})
    for (const char *op : {"ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"})
      for (const AxesCase &a : kAxesCases) {
        bool prod = std::string(op) == "ReduceProd";
        CudaCase c = reduceCase(op, t, a.S, a.Axes, true, prod ? -3 : -1000,
                                prod ? 4 : 1000);
        c.Tol = {0, 0};
        EXPECT_EQ(compareCudaWithCpu(c), "") << op << " " << dtypeName(t).str();
      }
  // Integer means are refused, as on the CPU.
  CudaCase mean = reduceCase("ReduceMean", DType::I32, {3, 4}, {1});
  std::vector<Tensor> outs;
  EXPECT_NE(runCuda(mean, outs).find("element type i32 is not supported"),
            std::string::npos);
}

TEST(CudaReduce, AxesInputNoopAndEmpty) {
  for (DType t : {DType::F32, DType::F16}) {
    // ReduceSum since opset 13: axes as a constant input.
    CudaCase c = reduceCase("ReduceSum", t, {3, 4, 5}, {0, -1});
    c.Attrs.erase("axes");
    c.Inputs.push_back(Tensor::fromInts(DType::I64, {2}, {0, -1}));
    c.Constant = {false, true};
    EXPECT_EQ(compareCudaWithCpu(c), "");
    // Empty axes: all of them, or a copy with noop_with_empty_axes.
    CudaCase all = reduceCase("ReduceMax", t, {3, 4}, {});
    all.Inputs.push_back(Tensor(ty(DType::I64, {0})));
    all.Constant = {false, true};
    EXPECT_EQ(compareCudaWithCpu(all), "");
    CudaCase noop = all;
    noop.Outputs = {ty(t, {3, 4})};
    noop.Attrs["noop_with_empty_axes"] = Attribute::getInt(1);
    EXPECT_EQ(compareCudaWithCpu(noop), "");
  }
  CudaCase notConstant = reduceCase("ReduceSum", DType::F32, {3, 4}, {1});
  notConstant.Attrs.erase("axes");
  notConstant.Inputs.push_back(Tensor::fromInts(DType::I64, {1}, {1}));
  EXPECT_NE(compareCudaWithCpu(notConstant).find("axes must be a constant"),
            std::string::npos);
  CudaCase outOfRange = reduceCase("ReduceSum", DType::F32, {3, 4}, {1});
  outOfRange.Attrs["axes"] = Attribute::getInts({2});
  EXPECT_NE(compareCudaWithCpu(outOfRange), "");
  // An empty reduced axis: the fold's start (a NaN mean, as 0 * inf).
  for (const char *op : kReduceOps) {
    CudaCase e = reduceCase(op, DType::F32, {3, 0}, {1});
    EXPECT_EQ(compareCudaWithCpu(e), "") << op;
    CudaCase keptEmpty = reduceCase(op, DType::F32, {0, 4}, {1});
    EXPECT_EQ(compareCudaWithCpu(keptEmpty), "") << op;
  }
}

TEST(CudaReduce, MaxAndMinPropagateNaN) {
  for (const char *op : {"ReduceMax", "ReduceMin"})
    for (Shape s : {Shape{4, 5}, Shape{4, 300}}) {
      CudaCase c = reduceCase(op, DType::F32, s, {1});
      c.Inputs[0].setDouble(7, std::nan(""));
      EXPECT_EQ(compareCudaWithCpu(c), "") << op;
    }
}

/// Reduce* of many elements to few outputs: the two passes through the
/// workspace (its partials then a block per output), and the same cases
/// with no workspace, a block per output.
TEST(CudaReduce, ManyElementsToFewOutputsSplitAcrossBlocks) {
  const AxesCase cases[] = {
      {{3, 40000}, {1}},      // contiguous rows, 10 runs each
      {{40000, 3}, {0}},      // a strided axis, the innermost kept
      {{64, 64, 8}, {}},      // everything to a scalar
      {{2, 5000, 3}, {0, 1}}, // runs over two merged axes
      {{7, 9001}, {-1}},      // a last run shorter than the others
  };
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (const char *op : kReduceOps)
      for (const AxesCase &a : cases)
        for (bool noWorkspace : {false, true}) {
          std::string name = op;
          CudaCase c = reduceCase(op, t, a.S, a.Axes, true);
          Tensor &x = c.Inputs[0];
          // Sums of small integers are exact in any order; products of
          // +-1 with a few 2s and halves too.
          for (int64_t i = 0; i < x.numElements(); ++i) {
            double v = x.getDouble(i);
            if (name == "ReduceSum" || name == "ReduceMean")
              x.setDouble(i, std::floor(v));
            if (name == "ReduceProd")
              x.setDouble(i,
                          i % 1000 == 7 ? (v > 0 ? 2 : 0.5) : (v > 0 ? 1 : -1));
          }
          EXPECT_GT(plannedWorkspaceBytes(c), 0u);
          c.NoWorkspace = noWorkspace;
          EXPECT_EQ(compareCudaWithCpu(c), "")
              << op << " " << dtypeName(t).str() << " rank " << a.S.size()
              << " no workspace " << noWorkspace;
        }
  // NaN wins through the partials; integers fold exactly.
  for (const char *op : {"ReduceMax", "ReduceMin"}) {
    CudaCase c = reduceCase(op, DType::F32, {3, 40000}, {1});
    c.Inputs[0].setDouble(40000 + 12345, std::nan(""));
    EXPECT_EQ(compareCudaWithCpu(c), "") << op;
  }
  for (DType t : {DType::I32, DType::I64})
    for (const char *op :
         {"ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"}) {
      bool prod = std::string(op) == "ReduceProd";
      CudaCase c = reduceCase(op, t, {2, 20000}, {1}, false, prod ? -1 : -1000,
                              prod ? 2 : 1000);
      c.Tol = {0, 0};
      EXPECT_EQ(compareCudaWithCpu(c), "") << op << " " << dtypeName(t).str();
    }
  // A gradient's norm: millions of elements to a scalar.
  CudaCase norm = reduceCase("ReduceSum", DType::F32, {4096, 512}, {}, false);
  for (int64_t i = 0; i < norm.Inputs[0].numElements(); ++i)
    norm.Inputs[0].setDouble(i, std::floor(norm.Inputs[0].getDouble(i)));
  EXPECT_EQ(plannedWorkspaceBytes(norm), 512u * 8u); // runs of 4096
  EXPECT_EQ(compareCudaWithCpu(norm), "");
  // Few elements, or outputs enough to fill the GPU: no split.
  EXPECT_EQ(plannedWorkspaceBytes(
                reduceCase("ReduceSum", DType::F32, {3, 4000}, {1})),
            0u);
  EXPECT_EQ(plannedWorkspaceBytes(
                reduceCase("ReduceSum", DType::F32, {4096, 8192}, {1})),
            0u);
}

CudaCase argMaxCase(DType t, Shape shape, int64_t axis, bool last = false,
                    double lo = -2, double hi = 2) {
  CudaCase c;
  c.Op = "ArgMax";
  c.Inputs = {randomTensor(ty(t, shape), 3, lo, hi)};
  c.Outputs = {ty(DType::I64, reducedShape(shape, {axis}, true))};
  c.Attrs["axis"] = Attribute::getInt(axis);
  c.Attrs["select_last_index"] = Attribute::getInt(last);
  return c;
}

TEST(CudaReduce, ArgMax) {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::I32, DType::I64})
    for (bool last : {false, true})
      for (auto [s, axis] : {std::pair<Shape, int64_t>{{3, 4, 5}, 1},
                             {{3, 4, 5}, -1},
                             {{3, 4, 5}, 0},
                             {{3, 500}, 1},
                             {{2, 300, 3}, 1},
                             {{7}, 0}}) {
        // Integers in [-3, 3) tie often.
        bool integer = !isFloat(t);
        CudaCase c =
            argMaxCase(t, s, axis, last, integer ? -3 : -2, integer ? 3 : 2);
        c.Tol = {0, 0};
        EXPECT_EQ(compareCudaWithCpu(c), "")
            << dtypeName(t).str() << " last " << last << " axis " << axis;
      }
  // NaNs: skipped, except a NaN first element, which the CPU's scan keeps.
  for (Shape s : {Shape{4, 6}, Shape{4, 300}}) {
    CudaCase c = argMaxCase(DType::F32, s, 1);
    c.Inputs[0].setDouble(0, std::nan(""));
    c.Inputs[0].setDouble(s[1] + 2, std::nan(""));
    c.Inputs[0].setDouble(2 * s[1] + s[1] - 1, std::nan(""));
    EXPECT_EQ(compareCudaWithCpu(c), "");
  }
  CudaCase empty = argMaxCase(DType::F32, {3, 0}, 1);
  EXPECT_NE(compareCudaWithCpu(empty), "");
}

CudaCase softmaxCase(const char *op, DType t, Shape shape, int64_t axis,
                     double lo = -5, double hi = 5) {
  CudaCase c;
  c.Op = op;
  c.Inputs = {randomTensor(ty(t, shape), 4, lo, hi)};
  c.Outputs = {ty(t, shape)};
  c.Attrs["axis"] = Attribute::getInt(axis);
  c.Tol = tolFor(t);
  return c;
}

TEST(CudaReduce, SoftmaxAndLogSoftmax) {
  for (const char *op : {"Softmax", "LogSoftmax"})
    for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16})
      for (auto [s, axis] : {std::pair<Shape, int64_t>{{4, 10}, -1},
                             {{4, 300}, 1},
                             {{2, 300, 3}, 1},
                             {{3, 5, 7}, 1},
                             {{3, 5, 7}, 0},
                             {{}, -1},
                             {{6, 1}, 1},
                             {{2, 0}, 1},
                             {{0, 5}, 1}}) {
        CudaCase c = softmaxCase(op, t, s, axis);
        EXPECT_EQ(compareCudaWithCpu(c), "")
            << op << " " << dtypeName(t).str() << " axis " << axis;
      }
  // Large logits: the shift keeps them finite.
  for (const char *op : {"Softmax", "LogSoftmax"}) {
    CudaCase c = softmaxCase(op, DType::F32, {3, 100}, -1, 1000, 1010);
    EXPECT_EQ(compareCudaWithCpu(c), "") << op;
    CudaCase nan = softmaxCase(op, DType::F32, {3, 8}, -1);
    nan.Inputs[0].setDouble(9, std::nan(""));
    EXPECT_EQ(compareCudaWithCpu(nan), "") << op;
  }
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

/// Labels of [N, d...] in [0, C), with every third one `ignore` when given.
Tensor labelTensor(DType t, Shape shape, int64_t c, unsigned seed,
                   const int64_t *ignore = nullptr) {
  Tensor l = randomTensor(ty(t, shape), seed, 0, double(c));
  if (ignore)
    for (int64_t i = 0; i < l.numElements(); i += 3)
      l.setInt(i, *ignore);
  return l;
}

struct LossCase {
  Shape Scores; // [N, C, d...]
  const char *Reduction;
  bool Weight = false, Ignore = false;
  DType Labels = DType::I64;
};

const LossCase kLossCases[] = {
    {{6, 5}, "mean"},
    {{6, 5}, "sum"},
    {{6, 5}, "none"},
    {{6, 5}, "mean", true, true},
    {{6, 5}, "none", true, false, DType::I32},
    {{4, 300}, "mean", false, true},
    {{4, 300}, "sum", true, false},
    {{4, 300}, "none", false, true},
    {{3, 4, 2, 5}, "mean", true, true},
    {{3, 4, 2, 5}, "none", false, true, DType::I32},
    {{2, 100, 3}, "mean", false, true},
    {{2, 100, 3}, "none", true, true},
    {{1, 3}, "mean", false, true},
    {{1, 1}, "mean", false, true},
    {{5, 2}, "mean", false, true}, // all of batch item 0's rows park
};

Shape labelShape(const Shape &scores) {
  Shape l = {scores[0]};
  l.insert(l.end(), scores.begin() + 2, scores.end());
  return l;
}

/// Inputs (scores or log-probabilities, labels, weight?) and attributes of
/// a loss case; the loss output's type.
CudaCase lossCase(const char *op, DType t, const LossCase &lc, double lo = -3,
                  double hi = 3) {
  CudaCase c;
  c.Op = op;
  int64_t ignore = 1;
  c.Inputs = {randomTensor(ty(t, lc.Scores), 5, lo, hi),
              labelTensor(lc.Labels, labelShape(lc.Scores), lc.Scores[1], 6,
                          lc.Ignore ? &ignore : nullptr)};
  if (lc.Weight)
    c.Inputs.push_back(randomTensor(ty(t, {lc.Scores[1]}), 7, 0.1, 2));
  c.Attrs["reduction"] = Attribute::getString(lc.Reduction);
  if (lc.Ignore)
    c.Attrs["ignore_index"] = Attribute::getInt(ignore);
  bool none = std::string(lc.Reduction) == "none";
  c.Outputs = {ty(t, none ? labelShape(lc.Scores) : Shape{})};
  c.Tol = tolFor(t);
  return c;
}

std::string describe(const LossCase &lc, DType t) {
  std::string s = dtypeName(t).str() + " " + lc.Reduction + " scores";
  for (int64_t d : lc.Scores)
    s += " " + std::to_string(d);
  return s + (lc.Weight ? " weight" : "") + (lc.Ignore ? " ignore" : "");
}

TEST(CudaLoss, NegativeLogLikelihoodLoss) {
  for (DType t : {DType::F32, DType::F64, DType::BF16})
    for (const LossCase &lc : kLossCases) {
      CudaCase c = lossCase("NegativeLogLikelihoodLoss", t, lc, -6, 0);
      EXPECT_EQ(compareCudaWithCpu(c), "") << describe(lc, t);
    }
}

TEST(CudaLoss, SoftmaxCrossEntropyLoss) {
  for (DType t : {DType::F32, DType::F64, DType::F16})
    for (const LossCase &lc : kLossCases)
      for (bool logProb : {false, true}) {
        CudaCase c = lossCase("SoftmaxCrossEntropyLoss", t, lc);
        if (logProb)
          c.Outputs.push_back(ty(t, lc.Scores));
        EXPECT_EQ(compareCudaWithCpu(c), "")
            << describe(lc, t) << " log_prob " << logProb;
      }
  // Many targets, few classes, strided: a thread per target.
  for (const char *red : {"none", "mean"}) {
    LossCase lc{{2, 3, 9000}, red, true, true};
    CudaCase c = lossCase("SoftmaxCrossEntropyLoss", DType::F32, lc);
    EXPECT_EQ(compareCudaWithCpu(c), "") << red;
  }
  // Large logits stay finite.
  LossCase big{{4, 300}, "mean", false, false};
  CudaCase c = lossCase("SoftmaxCrossEntropyLoss", DType::F32, big, 500, 600);
  EXPECT_EQ(compareCudaWithCpu(c), "");
  CudaCase badReduction =
      lossCase("SoftmaxCrossEntropyLoss", DType::F32, kLossCases[0]);
  badReduction.Attrs["reduction"] = Attribute::getString("max");
  EXPECT_NE(compareCudaWithCpu(badReduction), "");
}

/// SoftmaxCrossEntropyLossGrad(dloss, scores, labels, weight?).
CudaCase gradCase(DType t, const LossCase &lc) {
  CudaCase loss = lossCase("SoftmaxCrossEntropyLossGrad", t, lc);
  CudaCase c = loss;
  Tensor dloss = randomTensor(loss.Outputs[0], 8, 0.5, 1.5);
  c.Inputs.insert(c.Inputs.begin(), dloss);
  c.Outputs = {ty(t, lc.Scores)};
  return c;
}

TEST(CudaLoss, SoftmaxCrossEntropyLossGrad) {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16})
    for (const LossCase &lc : kLossCases) {
      CudaCase c = gradCase(t, lc);
      EXPECT_EQ(compareCudaWithCpu(c), "") << describe(lc, t);
    }
  for (const char *red : {"none", "mean", "sum"}) {
    LossCase lc{{2, 3, 9000}, red, true, true};
    EXPECT_EQ(compareCudaWithCpu(gradCase(DType::F32, lc)), "") << red;
  }
  // Every target ignored: a mean over zero weight stays zero.
  LossCase allIgnored{{3, 4}, "mean", false, true};
  CudaCase c = gradCase(DType::F32, allIgnored);
  for (int64_t i = 0; i < 3; ++i)
    c.Inputs[2].setInt(i, 1);
  EXPECT_EQ(compareCudaWithCpu(c), "");
}

/// Mixed precision's form: bf16/f16 logits, an f32 loss (and, in the
/// gradient, an f32 dloss): computed in f32 from the low scores, as the CPU
/// computes it from their widened copy; class weights stay in the scores'
/// type, so the cases here have none.
TEST(CudaLoss, LowScoresWithAnF32Loss) {
  for (DType t : {DType::BF16, DType::F16})
    for (const LossCase &lc : kLossCases) {
      if (lc.Weight)
        continue;
      CudaCase c = lossCase("SoftmaxCrossEntropyLoss", t, lc);
      c.Outputs[0] = c.Outputs[0].withDType(DType::F32);
      EXPECT_EQ(compareCudaWithCpu(c), "") << describe(lc, t) << " f32 loss";
      CudaCase g = gradCase(t, lc);
      g.Inputs[0] =
          randomTensor(g.Inputs[0].type().withDType(DType::F32), 8, 0.5, 1.5);
      EXPECT_EQ(compareCudaWithCpu(g), "") << describe(lc, t) << " f32 dloss";
    }
  // An f32 loss with log_prob, or an f16 loss of bf16 scores, is refused.
  CudaCase withLogProb =
      lossCase("SoftmaxCrossEntropyLoss", DType::BF16, kLossCases[0]);
  withLogProb.Outputs[0] = withLogProb.Outputs[0].withDType(DType::F32);
  withLogProb.Outputs.push_back(ty(DType::BF16, kLossCases[0].Scores));
  std::vector<Tensor> outs;
  EXPECT_NE(runCudaOnly(withLogProb, outs), "");
}

/// Sum and mean over many targets: runs of targets write partial sums,
/// one block adds them (and the same without a workspace: one block).
TEST(CudaLoss, TotalsOverManyTargetsSplitAcrossBlocks) {
  const LossCase cases[] = {
      {{4096, 512}, "mean", true, true},  // a block a target, 2048 runs
      {{300, 70}, "sum"},                 // a block a target, 300 runs
      {{3000, 10}, "mean", false, true},  // a thread a target, 3 runs
      {{2, 3, 9000}, "mean", true, true}, // strided, 18 runs
      {{2, 3, 9000}, "sum", false, true, DType::I32},
      {{4, 100, 700}, "mean", true, false}, // strided blocks, 1400 runs
  };
  for (const LossCase &lc : cases)
    for (DType t : {DType::F32, DType::F16})
      for (bool logProb : {false, true})
        for (bool noWorkspace : {false, true}) {
          if (lc.Scores[0] == 4096 && (t != DType::F32 || noWorkspace))
            continue; // the big one once
          CudaCase c = lossCase("SoftmaxCrossEntropyLoss", t, lc);
          if (logProb)
            c.Outputs.push_back(ty(t, lc.Scores));
          // A gather of log-probabilities splits from 1024 targets on.
          int64_t targets = c.Inputs[1].numElements();
          if (!logProb || targets > 1024) {
            EXPECT_GT(plannedWorkspaceBytes(c), 0u) << describe(lc, t);
          }
          c.NoWorkspace = noWorkspace;
          EXPECT_EQ(compareCudaWithCpu(c), "")
              << describe(lc, t) << " log_prob " << logProb << " no workspace "
              << noWorkspace;
        }
  for (const LossCase &lc : cases)
    for (bool noWorkspace : {false, true}) {
      CudaCase c = lossCase("NegativeLogLikelihoodLoss", DType::F32, lc, -6, 0);
      if (c.Inputs[1].numElements() > 1024) {
        EXPECT_GT(plannedWorkspaceBytes(c), 0u) << describe(lc, DType::F32);
      }
      c.NoWorkspace = noWorkspace;
      EXPECT_EQ(compareCudaWithCpu(c), "")
          << describe(lc, DType::F32) << " no workspace " << noWorkspace;
    }
  // 2048 runs of two targets: 2048 sums and weight sums.
  EXPECT_EQ(plannedWorkspaceBytes(
                lossCase("SoftmaxCrossEntropyLoss", DType::F32, cases[0])),
            2048u * 16u);
  // None needs no total; a few thread-per-target targets are one run.
  EXPECT_EQ(
      plannedWorkspaceBytes(lossCase("SoftmaxCrossEntropyLoss", DType::F32,
                                     {{4096, 512}, "none", true, true})),
      0u);
  EXPECT_EQ(plannedWorkspaceBytes(lossCase("SoftmaxCrossEntropyLoss",
                                           DType::F32, {{1000, 10}, "mean"})),
            0u);
}

/// The gradient's normalizer through the workspace (runs of weight sums,
/// or one run), against the parked one of the no-workspace path.
TEST(CudaLoss, GradientNormalizerInTheWorkspace) {
  const LossCase cases[] = {
      {{3000, 10}, "mean", false, true},  // 3 runs
      {{2, 3, 9000}, "mean", true, true}, // 18 runs
      {{300, 70}, "mean", true, false},   // one run, a block a target
      {{5, 2}, "mean", false, true},      {{1, 1}, "mean", false, true},
  };
  for (const LossCase &lc : cases)
    for (DType t : {DType::F32, DType::BF16})
      for (bool noWorkspace : {false, true}) {
        CudaCase c = gradCase(t, lc);
        EXPECT_GT(plannedWorkspaceBytes(c), 0u) << describe(lc, t);
        c.NoWorkspace = noWorkspace;
        EXPECT_EQ(compareCudaWithCpu(c), "")
            << describe(lc, t) << " no workspace " << noWorkspace;
      }
  // The normalizer and 18 weight sums; none when it is N*D or no mean.
  EXPECT_EQ(plannedWorkspaceBytes(gradCase(DType::F32, cases[1])), 256u);
  EXPECT_EQ(plannedWorkspaceBytes(gradCase(DType::F32, {{3000, 10}, "mean"})),
            0u);
  EXPECT_EQ(plannedWorkspaceBytes(
                gradCase(DType::F32, {{3000, 10}, "sum", true, true})),
            0u);
}

TEST(CudaLoss, LabelsOutOfRangeGiveNaNNotAnError) {
  // The CPU refuses them on the host; the device cannot, so the target's
  // loss (and a mean through it) is NaN, and the others are unchanged.
  for (const char *red : {"none", "mean"})
    for (int64_t classes : {5, 300}) {
      LossCase lc{{4, classes}, red};
      CudaCase c = lossCase("SoftmaxCrossEntropyLoss", DType::F32, lc);
      c.Inputs[1].setInt(2, classes);
      std::vector<Tensor> outs;
      ASSERT_EQ(runCuda(c, outs), "");
      EXPECT_TRUE(
          std::isnan(outs[0].getDouble(std::string(red) == "none" ? 2 : 0)));
      if (std::string(red) == "none") {
        EXPECT_FALSE(std::isnan(outs[0].getDouble(1)));
      }
      CudaCase g = gradCase(DType::F32, lc);
      g.Inputs[2].setInt(2, classes);
      ASSERT_EQ(runCuda(g, outs), "");
      EXPECT_TRUE(std::isnan(outs[0].getDouble(2 * classes)));
      EXPECT_FALSE(std::isnan(outs[0].getDouble(0)));
    }
}

} // namespace

// The cuda target's figure for a node needs the cuda target library, which
// test/gpu's binary links; headroom_cudakerneltests does not (it is the
// emulator and the CPU kernels alone).
#if defined(HEADROOM_CUDA_TEST_ON_GPU) || defined(HEADROOM_TEST_CUDA_TARGET)
#include "compiler/Parser.h"
#include "compiler/Plan.h"
#include "kernels/cuda/CudaTarget.h"

namespace {

/// The node of `f` whose op is `op`.
const Node *nodeOf(const Function &f, llvm::StringRef op) {
  for (const Node &n : f.nodes())
    if (n.op() == op)
      return &n;
  return nullptr;
}

TEST(CudaWorkspace, TheTargetPlansWhatTheKernelsUse) {
  // An LM head's loss, its gradient with ignore_index, a gradient's norm.
  auto m = parseModule(
      "func @f(%x: f32[4096, 512], %y: i64[4096], %g: f32[1000, 1000],\n"
      "        %d: f32[]) {\n"
      "  %l = SoftmaxCrossEntropyLoss(%x, %y) {reduction = \"mean\"} : f32[]\n"
      "  %dx = SoftmaxCrossEntropyLossGrad(%d, %x, %y) {ignore_index = -100,"
      " reduction = \"mean\"} : f32[4096, 512]\n"
      "  %s = ReduceSum(%g) {keepdims = 0} : f32[]\n"
      "  %n = Neg(%g) : f32[1000, 1000]\n"
      "  return %l, %dx, %s, %n\n}\n");
  ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
  const Function &f = *(*m)->functions()[0];
  const Target &cuda = cudaTarget();
  const Node *loss = nodeOf(f, "SoftmaxCrossEntropyLoss"),
             *grad = nodeOf(f, "SoftmaxCrossEntropyLossGrad"),
             *sum = nodeOf(f, "ReduceSum"), *neg = nodeOf(f, "Neg");
  ASSERT_TRUE(loss && grad && sum && neg);
  // What the kernels ask for (their own sizes) and what the tests give them.
  EXPECT_EQ(cuda.workspaceBytes(*loss),
            cuda::ws::lossWorkspaceBytes(4096, true));
  EXPECT_EQ(cuda.workspaceBytes(*loss), 2048u * 16u);
  LossCase lc{{4096, 512}, "mean"};
  EXPECT_EQ(cuda.workspaceBytes(*loss),
            plannedWorkspaceBytes(
                lossCase("SoftmaxCrossEntropyLoss", DType::F32, lc)));
  EXPECT_EQ(cuda.workspaceBytes(*grad),
            cuda::ws::lossGradWorkspaceBytes(4096, true));
  EXPECT_GT(cuda.workspaceBytes(*grad), 0u);
  EXPECT_EQ(cuda.workspaceBytes(*sum),
            cuda::ws::reduceWorkspaceBytes(1, 1000000));
  EXPECT_EQ(cuda.workspaceBytes(*sum),
            plannedWorkspaceBytes(
                reduceCase("ReduceSum", DType::F32, {1000, 1000}, {}, false)));
  EXPECT_GT(cuda.workspaceBytes(*sum), 0u);
  EXPECT_EQ(cuda.workspaceBytes(*neg), 0u);
  // The plan's workspace is the largest call's.
  auto plan = lowerModule(**m, cuda);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_EQ(plan->WorkspaceBytes, 2048u * 16u);
}

/// LinearCrossEntropy and its gradient: the CPU's chunk loop and the
/// CUDA's are the same calls of each backend's MatMul, Gemm and
/// cross-entropy kernels (kernels/common/OutputHead.h), so they agree as those
/// do: 10 rows in chunks of 3, w [V, D] with transB and [D, V], f32 and
/// bf16 (whose dw the GPU sums chunk by chunk in bf16, the CPU in f32).
TEST(CudaLoss, LinearCrossEntropy) {
  for (DType t : {DType::F32, DType::BF16})
    for (bool transB : {true, false}) {
      int64_t n = 10, d = 6, v = 7, ignore = -100;
      Shape w = transB ? Shape{v, d} : Shape{d, v};
      CudaCase f;
      f.Op = "LinearCrossEntropy";
      f.Inputs = {randomTensor(ty(t, {n, d}), 11), randomTensor(ty(t, w), 12),
                  labelTensor(DType::I64, {n}, v, 13, &ignore)};
      f.Attrs["transB"] = Attribute::getInt(transB);
      f.Attrs["ignore_index"] = Attribute::getInt(ignore);
      f.Attrs["rows"] = Attribute::getInt(3);
      f.Outputs = {ty(DType::F32, {n})};
      f.Tol = tolFor(t);
      EXPECT_EQ(compareCudaWithCpu(f), "") << dtypeName(t).str() << transB;
      CudaCase g = f;
      g.Op = "LinearCrossEntropyGrad";
      g.Inputs.insert(g.Inputs.begin(),
                      randomTensor(ty(DType::F32, {n}), 14, 0.1, 1));
      g.Outputs = {ty(t, {n, d}), ty(t, w)};
      g.Tol = t == DType::BF16 ? Tolerance{2e-2, 2e-2} : tolFor(t);
      EXPECT_EQ(compareCudaWithCpu(g), "") << dtypeName(t).str() << transB;
      g.Outputs.pop_back(); // a frozen head: dx only
      EXPECT_EQ(compareCudaWithCpu(g), "") << dtypeName(t).str() << transB;
    }
  CudaCase none;
  none.Op = "LinearCrossEntropy";
  none.Inputs = {randomTensor(ty(DType::F32, {4, 3}), 1),
                 randomTensor(ty(DType::F32, {5, 3}), 2),
                 labelTensor(DType::I64, {4}, 5, 3)};
  none.Attrs["transB"] = Attribute::getInt(1);
  none.Outputs = {ty(DType::F32, {4})};
  none.NoWorkspace = true; // the emulator makes its own; a GPU refuses
  EXPECT_EQ(compareCudaWithCpu(none), "");
}

} // namespace
#endif

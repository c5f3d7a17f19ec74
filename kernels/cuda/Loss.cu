//===- Loss.cu - Cross-entropy losses and their gradient on CUDA ----------===//
//
// kernels/cpu/Loss.cpp's ops with its semantics: scores [N, C, D], labels
// [N, D], per-target weights w_i (0 for ignore_index, else weight[label] or
// 1), loss -w_i * log_prob[label], reductions none / sum / mean (the sum
// over sum_i w_i). A target is a column of C classes D apart.
//
// Launch shapes:
//  - per target (reduction none, log_prob, the gradient): a block per
//    target sharing its classes when there are many of them and they are
//    contiguous (or there are few targets), else a thread per target;
//  - sum and mean: the total crosses every target. With the call's
//    workspace (kernels/cuda/Workspace.h) it is two passes: runs of targets
//    (a block a target, or a thread a target in runs of 1024) each write
//    their loss and weight sums as doubles, then one block adds those up in
//    order. Without it (a direct call given none, or too few targets to
//    split) one block walks every target, each one's log-sum-exp shared by
//    the block's threads (or one target per thread when C is small), and
//    sums in double as the CPU does: one SM. SoftmaxCrossEntropyLoss with
//    log_prob writes log_prob in parallel first; its total only gathers;
//  - the gradient's mean needs sum_i w_i before any row: without weights
//    or ignore_index it is N*D, known on the host. Otherwise, with the
//    workspace, runs of targets write weight sums, one block adds them into
//    the workspace's first slot and every row then runs in parallel reading
//    it. Without the workspace a one-block launch sums it and parks the
//    double in the first 8 bytes of d scores (the only memory the op owns),
//    the rows that do not overlap those bytes run in parallel, and one last
//    block reads it, then writes the overlapping rows.
//
// The CPU checks labels on the host; here they live on the device, so a
// label that is neither ignore_index nor in [0, C) is no error but gives a
// NaN loss (a NaN row of the gradient, and NaN everywhere through a mean)
// and is never used to index.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/LossShape.h"
#include "kernels/common/OutputHead.h"
#include "kernels/cuda/Launch.h"
#include "kernels/cuda/Math.h"
#include "kernels/cuda/Workspace.h"

#include "compiler/Types.h"

using namespace headroom;
using namespace headroom::cuda;
using llvm::Error;
using llvm::Expected;

namespace {

using kernels::checkLossType;
using kernels::LossShape;
using kernels::lossShape;
using kernels::Reduction;

/// Whether one target is a block's work (else a thread's).
bool blockPerTarget(const LossShape &s) {
  return ws::lossBlockPerTarget(s.C, s.D, s.targets());
}

/// Each target's label and weight, on the device.
template <typename T> struct TargetView {
  using A = Accum<T>;
  const void *Labels;
  bool Labels64;
  const T *ClassWeight; // or null
  int64_t C, D;
  bool HasIgnore;
  int64_t IgnoreIndex;

  HR_HD int64_t label(int64_t i) const {
    return Labels64 ? static_cast<const int64_t *>(Labels)[i]
                    : static_cast<const int32_t *>(Labels)[i];
  }
  /// w_i: 0 when ignored, NaN for a label out of [0, C).
  HR_HD A weight(int64_t i) const {
    int64_t l = label(i);
    if (HasIgnore && l == IgnoreIndex)
      return A(0);
    if (l < 0 || l >= C)
      return std::numeric_limits<A>::quiet_NaN();
    return ClassWeight ? A(ld(ClassWeight, l)) : A(1);
  }
  /// Element offset of target i's class 0 in [N, C, D]; classes are D apart.
  HR_HD int64_t base(int64_t i) const {
    if (D == 1)
      return i * C;
    int64_t n = i / D;
    return n * C * D + (i - n * D);
  }
};

template <typename T>
TargetView<T> makeTargets(const LossShape &s, const TensorView &labels,
                          const TensorView *weight) {
  return {labels.Data,
          labels.Type == DType::I64,
          weight && weight->present() ? weight->as<T>() : nullptr,
          s.C,
          s.D,
          s.HasIgnore,
          s.IgnoreIndex};
}

/// The loss of a target of weight w whose label's log-probability is
/// logProb() (not asked for an ignored target or an invalid label).
template <typename A, typename LogProb>
HR_HD A targetLoss(A w, const LogProb &logProb) {
  if (w == A(0))
    return A(0);
  if (w != w)
    return w;
  return -w * logProb();
}

/// Max and log(sum(exp(x - max))) of the C classes at x, D apart: by one
/// thread, or shared by r's block.
template <typename T> struct Lse { Accum<T> Max, LogSum; };

template <typename T>
HR_HD Lse<T> serialLse(const T *x, int64_t c, int64_t stride) {
  using A = Accum<T>;
  A max = -std::numeric_limits<A>::infinity();
  for (int64_t k = 0; k < c; ++k) {
    A v = ld(x, k * stride);
    max = v > max || v != v ? v : max;
  }
  A sum = 0;
  for (int64_t k = 0; k < c; ++k)
    sum += mexp(A(ld(x, k * stride)) - max);
  return {max, mlog(sum)};
}

template <typename T>
HR_HD Lse<T> rowLse(const Row &r, const T *x, int64_t c, int64_t stride) {
  using A = Accum<T>;
  A max = r.max<A>(c, [&](int64_t k) { return A(ld(x, k * stride)); });
  A sum =
      r.sum<A>(c, [&](int64_t k) { return mexp(A(ld(x, k * stride)) - max); });
  return {max, mlog(sum)};
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

/// Where a target's log-probability comes from: an [N, C, D] array of them
/// (NegativeLogLikelihoodLoss, or SoftmaxCrossEntropyLoss's log_prob), or
/// the scores, through the target's log-sum-exp.
template <typename T, bool FromScores> struct LossSource {
  using A = Accum<T>;
  const T *X;
  TargetView<T> Tg;
  /// Target i's loss, by this thread alone.
  HR_HD A serial(int64_t i) const {
    A w = Tg.weight(i);
    const T *x = X + Tg.base(i);
    return targetLoss(w, [&]() {
      A xl = ld(x, Tg.label(i) * Tg.D);
      if constexpr (!FromScores)
        return xl;
      Lse<T> l = serialLse(x, Tg.C, Tg.D);
      return (xl - l.Max) - l.LogSum;
    });
  }
  /// The same, shared by r's block (every thread gets it).
  HR_HD A shared(int64_t i, const Row &r) const {
    if constexpr (!FromScores)
      return serial(i);
    A w = Tg.weight(i);
    if (w == A(0) || w != w) // the same for the whole block
      return w == A(0) ? A(0) : w;
    const T *x = X + Tg.base(i);
    Lse<T> l = rowLse(r, x, Tg.C, Tg.D);
    A xl = ld(x, Tg.label(i) * Tg.D);
    return -w * ((xl - l.Max) - l.LogSum);
  }
};

/// Where the loss goes: the scores' type, or f32 for f16/bf16 scores (mixed
/// precision reads the logits low and keeps the loss f32).
template <typename T> struct LossOut {
  void *P;
  bool F32;
  HR_HD void store(int64_t i, Accum<T> v) const {
    if (F32)
      st(static_cast<float *>(P), i, float(v));
    else
      st(static_cast<T *>(P), i, v);
  }
};

/// Reduction none, a thread or a block per target.
template <typename T, bool FromScores> struct LossNoneBody {
  LossSource<T, FromScores> Src;
  LossOut<T> Loss;
  HR_HD void operator()(int64_t i) const { Loss.store(i, Src.serial(i)); }
  HR_HD void operator()(int64_t i, const Row &r) const {
    auto l = Src.shared(i, r);
    r.each(1, [&](int64_t) { Loss.store(i, l); });
  }
};

/// Sum and mean: the one block's walk over every target.
template <typename T, bool FromScores> struct LossTotalBody {
  LossSource<T, FromScores> Src;
  LossOut<T> Loss;
  int64_t Targets;
  bool Mean, Shared;
  HR_HD void operator()(int64_t, const Row &r) const {
    double total = 0;
    if (Shared) {
      for (int64_t i = 0; i < Targets; ++i)
        total += double(Src.shared(i, r));
    } else {
      total = r.sum<double>(Targets,
                            [&](int64_t i) { return double(Src.serial(i)); });
    }
    double weights = 0;
    if (Mean)
      weights = r.sum<double>(
          Targets, [&](int64_t i) { return double(Src.Tg.weight(i)); });
    using A = Accum<T>;
    r.each(1,
           [&](int64_t) { Loss.store(0, A(Mean ? total / weights : total)); });
  }
};

/// Sum and mean, first pass: block b sums the losses (and, for a mean, the
/// weights) of targets [b * Per, (b + 1) * Per) into Partials[2b] (and
/// [2b + 1]).
template <typename T, bool FromScores> struct LossPartialBody {
  LossSource<T, FromScores> Src;
  double *Partials;
  int64_t Targets, Per;
  bool Mean, Shared;
  HR_HD void operator()(int64_t b, const Row &r) const {
    int64_t first = b * Per;
    int64_t n = Targets - first < Per ? Targets - first : Per;
    double total = 0;
    if (Shared) {
      for (int64_t i = 0; i < n; ++i)
        total += double(Src.shared(first + i, r));
    } else {
      total = r.sum<double>(
          n, [&](int64_t i) { return double(Src.serial(first + i)); });
    }
    double weights = 0;
    if (Mean)
      weights = r.sum<double>(
          n, [&](int64_t i) { return double(Src.Tg.weight(first + i)); });
    r.each(1, [&](int64_t) {
      Partials[2 * b] = total;
      Partials[2 * b + 1] = weights;
    });
  }
};

/// Sum and mean, second pass: one block adds the Parts partials up.
template <typename T> struct LossFinishBody {
  const double *Partials;
  int64_t Parts;
  LossOut<T> Loss;
  bool Mean;
  HR_HD void operator()(int64_t, const Row &r) const {
    double total =
        r.sum<double>(Parts, [&](int64_t b) { return Partials[2 * b]; });
    double weights = 0;
    if (Mean)
      weights =
          r.sum<double>(Parts, [&](int64_t b) { return Partials[2 * b + 1]; });
    using A = Accum<T>;
    r.each(1,
           [&](int64_t) { Loss.store(0, A(Mean ? total / weights : total)); });
  }
};

template <typename T, bool FromScores>
void launchLoss(const KernelContext &ctx, const LossShape &s, const T *x,
                const TargetView<T> &tg, LossOut<T> loss) {
  LossSource<T, FromScores> src{x, tg};
  // Gathering log-probabilities is one load a target: no block needed.
  bool shared = FromScores && blockPerTarget(s);
  if (s.Red == Reduction::None) {
    LossNoneBody<T, FromScores> body{src, loss};
    if (shared)
      forEachRow(ctx, s.targets(), body);
    else
      forEach(ctx, s.targets(), body);
    return;
  }
  bool mean = s.Red == Reduction::Mean;
  uint64_t need = ws::lossWorkspaceBytes(s.targets(), shared);
  if (need && ctx.Workspace && ctx.WorkspaceBytes >= need) {
    ws::Runs runs = ws::lossRuns(s.targets(), shared);
    double *partials = static_cast<double *>(ctx.Workspace);
    forEachRow(ctx, runs.Parts,
               LossPartialBody<T, FromScores>{src, partials, s.targets(),
                                              runs.Per, mean, shared});
    forEachRow(ctx, 1, LossFinishBody<T>{partials, runs.Parts, loss, mean});
    return;
  }
  forEachRow(
      ctx, 1,
      LossTotalBody<T, FromScores>{src, loss, s.targets(), mean, shared});
}

struct NllApply {
  const KernelContext &Ctx;
  template <typename T> Error apply() const {
    const TensorView &input = Ctx.Inputs[0], &labels = Ctx.Inputs[1];
    const TensorView *weight = Ctx.hasInput(2) ? &Ctx.Inputs[2] : nullptr;
    auto s = checkedLoss(Ctx, 0, Ctx.Outputs[0]);
    if (!s)
      return s.takeError();
    launchLoss<T, false>(Ctx, *s, input.as<T>(),
                         makeTargets<T>(*s, labels, weight),
                         LossOut<T>{Ctx.Outputs[0].Data, false});
    return Error::success();
  }
};

/// log_softmax over the classes of each target.
template <typename T> struct LogSoftmaxBody {
  using A = Accum<T>;
  const T *X;
  T *Y;
  TargetView<T> Tg;
  HR_HD void operator()(int64_t i) const {
    int64_t b = Tg.base(i);
    Lse<T> l = serialLse(X + b, Tg.C, Tg.D);
    for (int64_t k = 0; k < Tg.C; ++k)
      st(Y + b, k * Tg.D, (A(ld(X + b, k * Tg.D)) - l.Max) - l.LogSum);
  }
  HR_HD void operator()(int64_t i, const Row &r) const {
    int64_t b = Tg.base(i);
    const T *x = X + b;
    T *y = Y + b;
    int64_t d = Tg.D;
    Lse<T> l = rowLse(r, x, Tg.C, d);
    r.each(Tg.C, [&](int64_t k) {
      st(y, k * d, (A(ld(x, k * d)) - l.Max) - l.LogSum);
    });
  }
};

struct SoftmaxCrossEntropyApply {
  const KernelContext &Ctx;
  template <typename T> Error apply() const {
    const TensorView &scores = Ctx.Inputs[0], &labels = Ctx.Inputs[1];
    const TensorView *weight = Ctx.hasInput(2) ? &Ctx.Inputs[2] : nullptr;
    auto s = checkedLoss(Ctx, 0, Ctx.Outputs[0]);
    if (!s)
      return s.takeError();
    TargetView<T> tg = makeTargets<T>(*s, labels, weight);
    // An f32 loss of f16/bf16 scores: mixed precision's (the scores are
    // read low and the loss is computed in f32, as from their f32 copy).
    bool f32Loss = Ctx.Outputs[0].Type != scores.Type;
    if (f32Loss &&
        (Ctx.Outputs[0].Type != DType::F32 || dtypeSize(scores.Type) != 2 ||
         (Ctx.Outputs.size() > 1 && Ctx.Outputs[1].present())))
      return Ctx.unsupported("a loss of type " +
                             dtypeName(Ctx.Outputs[0].Type) + " for " +
                             dtypeName(scores.Type) +
                             " scores (f32 for f16/bf16 without log_prob "
                             "only) is not supported");
    LossOut<T> loss{Ctx.Outputs[0].Data, f32Loss};
    if (Ctx.Outputs.size() > 1 && Ctx.Outputs[1].present()) {
      if (Ctx.Outputs[1].numElements() != scores.numElements())
        return Ctx.unsupported("log_prob type does not match the scores");
      T *logProb = Ctx.Outputs[1].as<T>();
      LogSoftmaxBody<T> body{scores.as<T>(), logProb, tg};
      if (blockPerTarget(*s))
        forEachRow(Ctx, s->targets(), body);
      else
        forEach(Ctx, s->targets(), body);
      launchLoss<T, false>(Ctx, *s, logProb, tg, loss);
      return Error::success();
    }
    launchLoss<T, true>(Ctx, *s, scores.as<T>(), tg, loss);
    return Error::success();
  }
};

//===----------------------------------------------------------------------===//
// The gradient
//===----------------------------------------------------------------------===//

HR_HD inline double readParked(const void *p) {
  double v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// The normalizer's first pass: block b sums the weights of targets
/// [b * Per, (b + 1) * Per) into Out[b].
template <typename T> struct NormPartialBody {
  TargetView<T> Tg;
  double *Out;
  int64_t Targets, Per;
  HR_HD void operator()(int64_t b, const Row &r) const {
    int64_t first = b * Per;
    int64_t n = Targets - first < Per ? Targets - first : Per;
    double sum = r.sum<double>(
        n, [&](int64_t i) { return double(Tg.weight(first + i)); });
    r.each(1, [&](int64_t) { Out[b] = sum; });
  }
};

/// Its second pass: one block adds the Parts partials into *Norm. (A
/// template, as every body: nvcc then lets it call Row's device functions.)
template <typename T> struct NormFinishBody {
  const double *Partials;
  int64_t Parts;
  double *Norm;
  HR_HD void operator()(int64_t, const Row &r) const {
    double sum = r.sum<double>(Parts, [&](int64_t b) { return Partials[b]; });
    r.each(1, [&](int64_t) { *Norm = sum; });
  }
};

/// Sums the weights and parks the double at the start of d scores.
template <typename T> struct ParkNormBody {
  TargetView<T> Tg;
  int64_t Targets;
  void *Park;
  HR_HD void operator()(int64_t, const Row &r) const {
    double norm =
        r.sum<double>(Targets, [&](int64_t i) { return double(Tg.weight(i)); });
    r.each(1, [&](int64_t) { std::memcpy(Park, &norm, sizeof norm); });
  }
};

/// d scores of target i: (softmax - onehot(label)) * w_i * g_i / norm, for
/// the targets from First on (the body's index i counts from there).
template <typename T> struct GradBody {
  using A = Accum<T>;
  const void *G; // dloss: T, or f32 for f16/bf16 scores (GF32)
  const T *X;
  T *Dx;
  TargetView<T> Tg;
  int64_t First;
  bool PerTarget; // dloss has one value per target (reduction none)
  double Norm;    // the normalizer, when not parked
  bool GF32 = false;

  HR_HD A scale(int64_t i, double norm) const {
    A w = Tg.weight(i);
    int64_t at = PerTarget ? i : 0;
    A gi = GF32 ? A(static_cast<const float *>(G)[at])
                : A(ld(static_cast<const T *>(G), at));
    // An ignored target contributes nothing, even when norm is 0.
    return w == A(0) ? A(0) : A(double(w * gi) / norm);
  }
  /// The row's value at class k, with its log-sum-exp l.
  HR_HD A value(A x, Lse<T> l, A sc, bool isLabel) const {
    A v = mexp((x - l.Max) - l.LogSum) * sc;
    return isLabel ? v - sc : v;
  }
  /// Target i's row by this thread; `norm` already read.
  HR_HD void serial(int64_t i, double norm) const {
    int64_t b = Tg.base(i);
    const T *x = X + b;
    T *dx = Dx + b;
    int64_t d = Tg.D, label = Tg.label(i);
    A w = Tg.weight(i), sc = scale(i, norm);
    bool hit = w != A(0) && w == w; // the label is a class index
    Lse<T> l = serialLse(x, Tg.C, d);
    for (int64_t k = 0; k < Tg.C; ++k)
      st(dx, k * d, value(ld(x, k * d), l, sc, hit && k == label));
  }
  HR_HD void shared(int64_t i, double norm, const Row &r) const {
    int64_t b = Tg.base(i);
    const T *x = X + b;
    T *dx = Dx + b;
    int64_t d = Tg.D, label = Tg.label(i);
    A w = Tg.weight(i), sc = scale(i, norm);
    bool hit = w != A(0) && w == w;
    Lse<T> l = rowLse(r, x, Tg.C, d);
    r.each(Tg.C, [&](int64_t k) {
      st(dx, k * d, value(ld(x, k * d), l, sc, hit && k == label));
    });
  }
};

/// The targets from First on, a thread or a block each.
template <typename T> struct GradRowsBody {
  GradBody<T> B;
  const void *Park; // the parked normalizer, or null
  HR_HD double norm() const { return Park ? readParked(Park) : B.Norm; }
  HR_HD void operator()(int64_t i) const { B.serial(B.First + i, norm()); }
  HR_HD void operator()(int64_t i, const Row &r) const {
    B.shared(B.First + i, norm(), r);
  }
};

/// The targets [0, Count) whose rows overlap the parked bytes: one block
/// reads the normalizer, waits for every thread to have it, then writes.
/// Without a parked value (d scores under 8 bytes: a few targets at most)
/// the block sums the weights of all Targets itself.
template <typename T> struct GradParkedRowsBody {
  GradBody<T> B;
  const void *Park; // or null
  int64_t Count, Targets;
  bool Shared;
  HR_HD void operator()(int64_t, const Row &r) const {
    double norm =
        Park ? readParked(Park) : r.sum<double>(Targets, [&](int64_t i) {
          return double(B.Tg.weight(i));
        });
    r.each(0, [](int64_t) {}); // a barrier: every thread has read it
    if (Shared) {
      for (int64_t i = 0; i < Count; ++i)
        B.shared(i, norm, r);
      return;
    }
    r.each(Count, [&](int64_t i) { B.serial(i, norm); });
  }
};

template <typename T>
void launchGradRows(const KernelContext &ctx, const LossShape &s,
                    GradBody<T> body, const void *park, int64_t count) {
  GradRowsBody<T> rows{body, park};
  if (blockPerTarget(s))
    forEachRow(ctx, count, rows);
  else
    forEach(ctx, count, rows);
}

struct GradApply {
  const KernelContext &Ctx;
  template <typename T> Error apply() const {
    const TensorView &dloss = Ctx.Inputs[0], &scores = Ctx.Inputs[1],
                     &labels = Ctx.Inputs[2];
    const TensorView *weight = Ctx.hasInput(3) ? &Ctx.Inputs[3] : nullptr;
    const TensorView &dscores = Ctx.Outputs[0];
    auto s = checkedLoss(Ctx, 1, dloss);
    if (!s)
      return s.takeError();
    // dloss is f32 for f16/bf16 scores under mixed precision.
    bool f32Dloss = dloss.Type == DType::F32 && dtypeSize(scores.Type) == 2;
    if ((dloss.Type != scores.Type && !f32Dloss) ||
        dscores.Type != scores.Type ||
        dscores.numElements() != scores.numElements())
      return Ctx.unsupported("dloss and d scores must have the scores' type "
                             "(dloss f32 for f16/bf16 scores)");
    TargetView<T> tg = makeTargets<T>(*s, labels, weight);
    GradBody<T> body{dloss.Data,      scores.as<T>(),
                     dscores.as<T>(), tg,
                     /*First=*/0,     s->Red == Reduction::None,
                     /*Norm=*/1,      f32Dloss};
    int64_t targets = s->targets();
    bool deviceNorm = s->Red == Reduction::Mean &&
                      ((weight && weight->present()) || s->HasIgnore);
    if (s->Red == Reduction::Mean && !deviceNorm)
      body.Norm = double(targets);
    if (!deviceNorm || targets == 0) {
      launchGradRows(Ctx, *s, body, nullptr, targets);
      return Error::success();
    }
    uint64_t need = ws::lossGradWorkspaceBytes(targets, deviceNorm);
    if (need && Ctx.Workspace && Ctx.WorkspaceBytes >= need) {
      // The normalizer in the workspace's first slot, the runs' weight sums
      // after it; a single run writes the normalizer itself.
      double *norm = static_cast<double *>(Ctx.Workspace);
      ws::Runs runs = ws::normRuns(targets);
      if (runs.Parts == 1) {
        forEachRow(Ctx, 1, NormPartialBody<T>{tg, norm, targets, targets});
      } else {
        forEachRow(Ctx, runs.Parts,
                   NormPartialBody<T>{tg, norm + 1, targets, runs.Per});
        forEachRow(Ctx, 1, NormFinishBody<T>{norm + 1, runs.Parts, norm});
      }
      launchGradRows(Ctx, *s, body, norm, targets);
      return Error::success();
    }
    bool shared = blockPerTarget(*s);
    if (dscores.sizeInBytes() < sizeof(double)) {
      forEachRow(
          Ctx, 1,
          GradParkedRowsBody<T>{body, nullptr, targets, targets, shared});
      return Error::success();
    }
    void *park = dscores.Data;
    forEachRow(Ctx, 1, ParkNormBody<T>{tg, targets, park});
    // Rows of whole batch items n < n0 cover the parked bytes.
    int64_t elems = int64_t(sizeof(double) / dtypeSize(scores.Type));
    int64_t perItem = s->C * s->D;
    int64_t n0 =
        perItem == 0 ? s->N : std::min(s->N, (elems + perItem - 1) / perItem);
    int64_t first = n0 * s->D;
    GradBody<T> rest = body;
    rest.First = first;
    launchGradRows(Ctx, *s, rest, park, targets - first);
    forEachRow(Ctx, 1,
               GradParkedRowsBody<T>{body, park, first, targets, shared});
    return Error::success();
  }
};

Error nllLossKernel(const KernelContext &ctx) {
  return dispatch<kernels::FloatTypes>(ctx, ctx.Inputs[0].Type, NllApply{ctx});
}

Error softmaxCrossEntropyKernel(const KernelContext &ctx) {
  return dispatch<kernels::FloatTypes>(ctx, ctx.Inputs[0].Type,
                                       SoftmaxCrossEntropyApply{ctx});
}

Error softmaxCrossEntropyGradKernel(const KernelContext &ctx) {
  return dispatch<kernels::FloatTypes>(ctx, ctx.Inputs[1].Type, GradApply{ctx});
}

/// LinearCrossEntropy and its gradient: kernels/common/OutputHead.h's chunk
/// loop over this backend's MatMul (cuBLASLt), Gemm and cross-entropy
/// kernels, on the executor's stream; the chunk's logits and gradient live
/// in the call's planned workspace (Workspace.h), the calls need none of
/// their own beyond cuBLASLt's.
Error outputHeadKernel(const KernelContext &ctx) {
  auto l = kernels::headLayout(ctx);
  if (!l)
    return l.takeError();
  KernelContext c = ctx;
#if defined(HEADROOM_CUDA_EMULATED)
  std::vector<uint8_t> own;
  if (!ctx.Workspace) { // a direct call in the emulator: host scratch
    own.resize(l->CallsOffset);
    c.Workspace = own.data();
    c.WorkspaceBytes = l->CallsOffset;
  }
#endif
  if (!c.Workspace || c.WorkspaceBytes < l->CallsOffset)
    return ctx.unsupported("needs a workspace of " +
                           llvm::Twine(l->CallsOffset) +
                           " bytes for a chunk's logits");
  return kernels::runOutputHead(c, *l, [&](const kernels::HeadCall &call) {
    kernels::KernelContext base{call.Op, call.Ins, call.Outs, call.Attrs,
                                ctx.Seed};
    KernelContext sub(base);
    sub.Stream = ctx.Stream;
    sub.BlasLt = ctx.BlasLt;
    sub.BlasWorkspace = ctx.BlasWorkspace;
    sub.BlasWorkspaceBytes = ctx.BlasWorkspaceBytes;
    sub.Step = ctx.Step;
    sub.RunSeed = ctx.RunSeed;
    sub.RandomStream = ctx.RandomStream;
    return runKernel(sub);
  });
}

} // namespace

void cuda::registerLossKernels() {
  registerKernel(OpKind::LinearCrossEntropy, outputHeadKernel);
  registerKernel(OpKind::LinearCrossEntropyGrad, outputHeadKernel);
  registerKernel(OpKind::NegativeLogLikelihoodLoss, nllLossKernel);
  registerKernel(OpKind::SoftmaxCrossEntropyLoss, softmaxCrossEntropyKernel);
  registerKernel(OpKind::SoftmaxCrossEntropyLossGrad,
                 softmaxCrossEntropyGradKernel);
}

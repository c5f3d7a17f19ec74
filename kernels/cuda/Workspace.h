//===- Workspace.h - Scratch for kernels/cuda's big reductions  -*- C++ -*-===//
//
// A few calls reduce many elements to few results: a loss's sum or mean over
// every target, Reduce* to a handful of outputs (a gradient's norm), the
// gradient's normalizer sum_i w_i. One block per result would put all of it
// on one SM; with scratch they run in two passes instead: many blocks write
// partial results into the call's workspace, then one block per result folds
// its partials in a fixed order (deterministic: no float atomics).
//
// This header is the one place that decides the split, so that the cuda
// target (kernels/cuda/CudaTarget.cpp: at plan time, from the node's types)
// and the kernels (at launch, from their views) agree on the bytes. It is
// host C++ only; the kernels call the per-family functions with their own
// checked sizes, lowering calls ws::workspaceBytes. A kernel given fewer bytes
// than it needs (a direct call with no workspace) takes its one-block path.
//
// Every partial is an 8-byte slot (a double, or the fold's accumulator), and
// the first pass has at most kMaxPartialBlocks blocks, so a call's workspace
// is a few KiB to 32 KiB whatever the problem's size.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_CUDA_WORKSPACE_H
#define HEADROOM_KERNELS_CUDA_WORKSPACE_H

#include "compiler/Attribute.h"
#include "compiler/OutputHeadShape.h"

#include "llvm/ADT/ArrayRef.h"

#include <algorithm>
#include <cstdint>
#include <string_view>

namespace headroom {
namespace cuda {
namespace ws {

/// Workspace sizes are multiples of this (the cuda target's alignment).
constexpr uint64_t kWorkspaceAlign = 256;
/// Bytes of one partial result.
constexpr uint64_t kPartialBytes = 8;
/// Blocks of a first pass, at most: enough to fill an H200's 132 SMs many
/// times over, few enough that the second pass is one short block each.
constexpr int64_t kMaxPartialBlocks = 2048;
/// Elements a Reduce* partial covers at least (16 per thread of a block).
constexpr int64_t kMinPartialElements = 4096;
/// Targets a partial of thread-per-target losses covers at least.
constexpr int64_t kMinPartialTargets = 1024;

/// From this many classes a target's log-sum-exp is a block's work...
constexpr int64_t kBlockClasses = 64;
/// ...unless its classes are strided and there are this many targets:
/// threads walking strided classes then fill the GPU.
constexpr int64_t kManyTargets = 16384;

inline uint64_t alignWorkspace(uint64_t bytes) {
  return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

inline int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// `n` items cut into Parts runs of Per (the last may be shorter, none is
/// empty): runs of at least `minPer`, at most `maxParts` of them.
struct Runs {
  int64_t Parts = 1, Per = 0;
};
inline Runs splitRuns(int64_t n, int64_t minPer, int64_t maxParts) {
  if (n <= 0)
    return {1, 0};
  int64_t parts = std::max<int64_t>(
      1, std::min(ceilDiv(n, minPer), std::max<int64_t>(maxParts, 1)));
  int64_t per = ceilDiv(n, parts);
  return {ceilDiv(n, per), per};
}

//===----------------------------------------------------------------------===//
// Reduce*
//===----------------------------------------------------------------------===//

/// The runs each of `outputs` outputs' `count` reduced elements are cut into:
/// together about kMaxPartialBlocks blocks. One run (no split) when the
/// outputs alone give that many blocks, or when there are few elements.
inline Runs reduceRuns(int64_t outputs, int64_t count) {
  if (outputs <= 0)
    return {1, count};
  return splitRuns(count, kMinPartialElements, kMaxPartialBlocks / outputs);
}

/// One partial per (output, run); 0 without a split.
inline uint64_t reduceWorkspaceBytes(int64_t outputs, int64_t count) {
  Runs r = reduceRuns(outputs, count);
  if (r.Parts <= 1)
    return 0;
  return alignWorkspace(uint64_t(outputs * r.Parts) * kPartialBytes);
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

/// Whether a target's log-sum-exp is a block's work (else a thread's).
inline bool lossBlockPerTarget(int64_t classes, int64_t d, int64_t targets) {
  return classes >= kBlockClasses && (d == 1 || targets < kManyTargets);
}

/// The runs of targets a loss's sum or mean is cut into: a block a target
/// when a target is a block's work (`shared`), else runs of at least
/// kMinPartialTargets (a thread a target); at most kMaxPartialBlocks.
inline Runs lossRuns(int64_t targets, bool shared) {
  return splitRuns(targets, shared ? 1 : kMinPartialTargets, kMaxPartialBlocks);
}

/// A loss and a weight sum per run; 0 without a split.
inline uint64_t lossWorkspaceBytes(int64_t targets, bool shared) {
  Runs r = lossRuns(targets, shared);
  if (r.Parts <= 1)
    return 0;
  return alignWorkspace(uint64_t(r.Parts) * 2 * kPartialBytes);
}

/// The runs of targets the gradient's normalizer sum_i w_i is cut into (a
/// thread a target).
inline Runs normRuns(int64_t targets) {
  return splitRuns(targets, kMinPartialTargets, kMaxPartialBlocks);
}

/// The normalizer, then a weight sum per run, when the normalizer is
/// computed on the device (`deviceNorm`: a mean with weights or
/// ignore_index).
inline uint64_t lossGradWorkspaceBytes(int64_t targets, bool deviceNorm) {
  if (!deviceNorm || targets <= 0)
    return 0;
  return alignWorkspace(uint64_t(1 + normRuns(targets).Parts) * kPartialBytes);
}

//===----------------------------------------------------------------------===//
// A call's workspace, as lowering sees it
//===----------------------------------------------------------------------===//

/// An operand or result: its shape, or absent.
struct CallValue {
  bool Present = false;
  llvm::ArrayRef<int64_t> Shape;
  DType Type = DType::F32;
};

inline int64_t elementCount(llvm::ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// The workspace bytes the kernel of `op` uses for a call with these
/// operands, results and attributes: 0 when it uses none, or when the call
/// is malformed (the kernel reports that when it runs).
inline uint64_t workspaceBytes(std::string_view op,
                               llvm::ArrayRef<CallValue> ins,
                               llvm::ArrayRef<CallValue> outs,
                               const AttributeMap &attrs) {
  auto present = [](llvm::ArrayRef<CallValue> vs, unsigned i) {
    return i < vs.size() && vs[i].Present;
  };
  if (op == "ReduceSum" || op == "ReduceMean" || op == "ReduceMax" ||
      op == "ReduceMin" || op == "ReduceProd") {
    if (!present(ins, 0) || !present(outs, 0))
      return 0;
    // The output's elements are the kept ones: whatever the axes, each folds
    // in/out elements (a noop copy folds 1).
    int64_t in = elementCount(ins[0].Shape), out = elementCount(outs[0].Shape);
    if (out <= 0 || in % out)
      return 0;
    return reduceWorkspaceBytes(out, in / out);
  }
  if (op == "LinearCrossEntropy" || op == "LinearCrossEntropyGrad") {
    // A chunk's logits (and, backward, their gradient) in x's type:
    // kernels/common/OutputHead.h's layout; its calls need none of their own.
    unsigned x = op == "LinearCrossEntropyGrad" ? 1 : 0;
    if (!present(ins, x) || !present(ins, x + 1) || ins[x].Shape.size() != 2 ||
        ins[x + 1].Shape.size() != 2)
      return 0;
    OutputHeadShape s;
    s.N = ins[x].Shape[0];
    s.D = ins[x].Shape[1];
    s.TransB = false;
    if (auto it = attrs.find("transB");
        it != attrs.end() && it->second.kind() == Attribute::Kind::Int)
      s.TransB = it->second.asInt() != 0;
    s.V = ins[x + 1].Shape[s.TransB ? 0 : 1];
    int64_t rows = 0;
    if (auto it = attrs.find("rows");
        it != attrs.end() && it->second.kind() == Attribute::Kind::Int)
      rows = it->second.asInt();
    uint64_t elem = dtypeSize(ins[x].Type);
    uint64_t chunk = alignWorkspace(uint64_t(outputHeadRows(s, elem, rows)) *
                                    uint64_t(s.V) * elem);
    return chunk * (x + 1);
  }
  bool grad = op == "SoftmaxCrossEntropyLossGrad";
  if (!grad && op != "SoftmaxCrossEntropyLoss" &&
      op != "NegativeLogLikelihoodLoss")
    return 0;
  unsigned scores = grad ? 1 : 0;
  if (!present(ins, scores) || ins[scores].Shape.size() < 2)
    return 0;
  llvm::ArrayRef<int64_t> s = ins[scores].Shape;
  int64_t n = s[0], c = s[1], d = elementCount(s.drop_front(2));
  std::string reduction = "mean";
  if (auto it = attrs.find("reduction");
      it != attrs.end() && it->second.kind() == Attribute::Kind::String)
    reduction = it->second.asString();
  if (reduction != "mean" && reduction != "sum")
    return 0;
  if (grad) {
    bool weighted = present(ins, 3), ignore = attrs.count("ignore_index");
    return lossGradWorkspaceBytes(n * d,
                                  reduction == "mean" && (weighted || ignore));
  }
  // SoftmaxCrossEntropyLoss's log_prob (result 1) makes the total a gather
  // of log-probabilities, as NegativeLogLikelihoodLoss's is: a thread's work.
  bool fromScores = op == "SoftmaxCrossEntropyLoss" && !present(outs, 1);
  return lossWorkspaceBytes(n * d,
                            fromScores && lossBlockPerTarget(c, d, n * d));
}

} // namespace ws
} // namespace cuda
} // namespace headroom

#endif // HEADROOM_KERNELS_CUDA_WORKSPACE_H

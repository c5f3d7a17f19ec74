//===- Cost.h - Floating-point operations of a node -----------------------===//
//
// The cost model recomputation is scored with: matrix products and
// convolutions exactly (2 per multiply-add: MatMul and Gemm 2MNK, Conv and
// its gradients 2 x output elements x input channels per group x kernel
// size), everything else one per element of its largest operand or result
// (elementwise math, reductions, norms, losses, updates), and data movement
// (reshapes, transposes, slices, casts, gathers) and state access none.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_COST_H
#define HEADROOM_COMPILER_COST_H

#include "compiler/IR.h"

#include <cstdint>

namespace headroom {

uint64_t nodeFlops(const Node &n);

struct Plan;

/// The cost model's step time for a cuda plan (docs/offload.md): each call
/// of the step's functions on its stream (compiler/Streams.h), a kernel
/// taking its FLOPs at the target's nominal rate (an H100 SXM's dense
/// bf16/fp16 tensor rate when the matmuls compute low, else its f32 rate:
/// cuBLASLt runs f32 without TF32), a transfer its bytes at the report's
/// HostBandwidth, with the waits the plan has; the step is when both
/// streams are done. Exposed time is the step less its compute.
/// A host call (an offloaded update) takes the bytes it reads and writes at
/// kHostBytesPerSecond: what a 16-core host does with the update ops
/// (this 2-core machine: 3.9 GB/s, `HostKernel.DISABLED_AdamWThroughput`).
/// Auto-fit ranks candidates by it, so recomputed FLOPs, transfers and host
/// work weigh on one scale.
constexpr double kNominalLowFlops = 989e12, kNominalF32Flops = 67e12;
constexpr double kHostBytesPerSecond = 20e9;
/// What one rank's collectives move per second (data parallelism): a
/// 400 Gb/s InfiniBand NIC per GPU, the usual multi-node build, nominal.
/// Overlapped collectives (Target::overlapsCollective) take the copy
/// stream; the others the compute stream, in schedule order.
constexpr double kLinkBytesPerSecond = 50e9;
struct StepEstimate {
  bool LowPrecision = false;
  double FlopsPerSecond = 0, ComputeSeconds = 0, TransferSeconds = 0,
         HostSeconds = 0, ExposedSeconds = 0, StepSeconds = 0;
  /// The collectives' bytes (compiler/Collectives.h) at
  /// kLinkBytesPerSecond; those on the copy stream are exposed only where
  /// the compute waits for them (in ExposedSeconds), the others
  /// (InOrderCollectiveSeconds) are on the compute stream, all exposed.
  double CollectiveSeconds = 0, InOrderCollectiveSeconds = 0;
};
StepEstimate estimateStep(const Plan &plan);

} // namespace headroom

#endif // HEADROOM_COMPILER_COST_H

//===- Target.h - What lowering needs to know about a backend -------------===//
//
// A Target describes a backend at compile time, in host C++, without its
// device: the alignment of every arena buffer, the scratch each call needs,
// which calls may write their result over a dying operand 0, whether the
// backend can run a node at all (an op or element type it lacks is refused
// when the plan is made, naming the node, never at step 1), and the bytes
// its libraries hold for the whole run (cuBLASLt's workspace). lowerModule
// (compiler/Plan.h) plans for one Target and records its name in the plan,
// so a plan's peak is exact for the backend that will run it, on a machine
// that does not have it.
//
// The implementations live beside their kernels (kernels/cpu/CpuTarget.h,
// kernels/cuda/CudaTarget.h); pipeline/ looks them up by name.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_TARGET_H
#define HEADROOM_COMPILER_TARGET_H

#include "compiler/IR.h"

#include "llvm/Support/Error.h"

#include <cstdint>

namespace headroom {

class Target {
public:
  virtual ~Target() = default;
  /// The name plans record and `--device` takes: "cpu", "cuda".
  virtual llvm::StringRef name() const = 0;
  /// Arena offsets and buffer sizes are multiples of this (a power of two).
  virtual uint64_t alignment() const = 0;
  /// Bytes the backend's libraries hold while a plan runs, whatever it
  /// computes (planned beside the arena, reported as workspace).
  virtual uint64_t libraryBytes() const { return 0; }
  /// What the collective library (NCCL on cuda) holds on the device per
  /// rank when a plan runs on several ranks; included in the plan's
  /// library bytes then.
  virtual uint64_t collectiveLibraryBytes() const { return 0; }
  /// Success when the backend can run `n`; otherwise an error saying what it
  /// lacks (the caller names the node). Ops the executor runs itself (Read,
  /// Assign, ParamGrad, Constant, Return) are always supported.
  virtual llvm::Error checkSupported(const Node &n) const = 0;
  /// The scratch bytes the call of `n` needs (0 for none). Calls run one at
  /// a time, so the plan's workspace is the largest.
  virtual uint64_t workspaceBytes(const Node &n) const { return 0; }
  /// Whether n's result 0 may be written into the buffer of operand 0 when
  /// that operand dies at n. The default: elementwise ops (Ops.def) of at
  /// most two operands whose result has operand 0's type; kernels read each
  /// element before writing it.
  virtual bool mayReuseOperand0(const Node &n) const;
  /// Whether plans for this target may keep state and values in a pinned
  /// host pool (compiler/Pools.h): the executor copies between the pools
  /// and runs host nodes on the CPU.
  virtual bool hasHostPool() const { return false; }
  /// Whether collective `n` runs on the copy stream (compiler/Streams.h),
  /// overlapping the compute stream's kernels; otherwise it runs on the
  /// compute stream in schedule order.
  virtual bool overlapsCollective(const Node &n) const { return false; }

  /// Whether the executor, not a kernel, runs `n` (Read, Assign, ...).
  static bool runByExecutor(const Node &n) { return runByExecutor(n.kind()); }
  static bool runByExecutor(OpKind op);

protected:
  /// Success when every float operand and result of `n` is one of
  /// `computed`; else "computes no bf16 (f32, f64 only)".
  static llvm::Error checkFloatTypes(const Node &n,
                                     llvm::ArrayRef<DType> computed);
};

} // namespace headroom

#endif // HEADROOM_COMPILER_TARGET_H

//===- Kernel.h - The CUDA kernel interface ---------------------*- C++ -*-===//
//
// A CUDA kernel is the host function that launches one op's device work on
// the executor's stream. It takes the CPU kernels' interface (views of the
// buffers, now device addresses; the attributes; errors that name the op)
// plus what the device needs: the stream, the cuBLASLt handle and its
// workspace, the device address of the step counter, and the host copies
// of constant operands (shape operands such as Slice's starts are read on
// the host when the call is launched; a CUDA graph records those launches).
//
// Kernels never synchronize, allocate or read device memory on the host: a
// function is captured once as a CUDA graph and replayed. Every float kernel
// computes f16 and bf16 itself (load to float, store rounded once). The only
// scratch is what kernels/cuda/Workspace.h computes and the cuda target plans
// (ctx.Workspace): a few KiB of partial sums for reductions split across
// blocks.
//
// Each family file (kernels/cuda/<Family>.cu) registers its kernels in one
// function listed in kernels/cuda/Kernels.cpp; the cuda target accepts the
// ops cudaHasKernel names (kernels/cuda/CudaTarget.h: every op the executor
// does not run itself, but Shape and Size), and CudaKernels.
// RegistryIsEveryKernelOp checks that the two agree.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_CUDA_KERNEL_H
#define HEADROOM_KERNELS_CUDA_KERNEL_H

#include "kernels/common/Kernel.h"
#include "kernels/common/KernelUtil.h"
#include "kernels/cuda/Device.h"

#include <array>

namespace headroom {
class Tensor;
namespace cuda {
inline namespace HR_CUDA_BUILD {

using kernels::TensorView;

struct KernelContext : kernels::KernelContext {
  /// The common interface's fields (kernels/common/Kernel.h); the CUDA
  /// ones are set after.
  explicit KernelContext(const kernels::KernelContext &base)
      : kernels::KernelContext(base) {
    HostData = false;
  }

  /// cudaStream_t (null in the emulator).
  void *Stream = nullptr;
  /// cublasLtHandle_t (null in the emulator) and the cuBLASLt workspace.
  void *BlasLt = nullptr;
  void *BlasWorkspace = nullptr;
  uint64_t BlasWorkspaceBytes = 0;
  /// Device address of the step the run is at (random ops mix it with the
  /// executor's seed and RandomStream on the device, see mixSeed).
  const uint64_t *Step = nullptr;
  uint64_t RunSeed = 0, RandomStream = 0;

  /// Input i's constant value; an error naming the op and `what` (e.g.
  /// "starts") when it is not a constant of the plan.
  llvm::Expected<const Tensor *> constant(unsigned i,
                                          llvm::StringRef what) const;
};

using KernelFn = llvm::Error (*)(const KernelContext &ctx);

/// The kernel for `op` (or the op of that name), or null.
KernelFn lookupKernel(OpKind op);
KernelFn lookupKernel(llvm::StringRef op);
void registerKernel(OpKind op, KernelFn fn);
/// Every registered op (for the check against cudaHasKernel).
std::vector<std::string> registeredOps();

/// Runs the kernel of ctx.Op; an error when there is none, or when the
/// launch failed (the CUDA error, named).
llvm::Error runKernel(const KernelContext &ctx);

// One registration function per family file.
void registerElementwiseKernels();
void registerLinalgKernels();
void registerReduceKernels();
void registerNormKernels();
void registerLossKernels();
void registerShapeKernels();
void registerConvPoolKernels();
void registerUpdateKernels();
void registerAttentionKernels();

/// Up to this many dimensions after merging (compiler/Types.h allows more;
/// such a call is refused by the kernel).
constexpr unsigned kMaxDims = 8;

/// Index arithmetic of an elementwise op with N operands broadcast to the
/// result, merged as kernels/cpu's BroadcastLoops merges them; passed by
/// value to the device. offset(k, i) is operand k's element index for result
/// element i.
template <unsigned N> struct Broadcast {
  int Rank = 0;
  int64_t Dims[kMaxDims] = {};
  int64_t Strides[N][kMaxDims] = {};
  /// True when every operand has the result's shape (offset(k, i) == i).
  bool Same = false;

  HR_HD int64_t offset(unsigned k, int64_t i) const {
    if (Same)
      return i;
    int64_t off = 0;
    for (int d = Rank - 1; d >= 0; --d) {
      int64_t q = i / Dims[d];
      off += (i - q * Dims[d]) * Strides[k][d];
      i = q;
    }
    return off;
  }
};

/// The Broadcast of `ins` to `out`; false when it has more than kMaxDims
/// merged dimensions.
template <unsigned N>
bool makeBroadcast(llvm::ArrayRef<int64_t> out,
                   std::array<llvm::ArrayRef<int64_t>, N> ins, Broadcast<N> &b);

/// Calls fn.template apply<T>() with T the storage type of `t` when T is
/// among the types `Types` names (kernels::TypeSet), else the kernel's
/// "element type X is not supported" error. The integer types kernels/cuda
/// computes are i8, i32, i64 and u8.
template <unsigned Types, typename Fn>
llvm::Error dispatch(const KernelContext &ctx, DType t, const Fn &fn) {
  constexpr bool F = Types & kernels::FloatTypes, I = Types & kernels::IntTypes,
                 B = Types & kernels::BoolType;
  switch (t) {
#define HR_CASE(DT, SET, T)                                                    \
  case DType::DT:                                                              \
    if constexpr (SET)                                                         \
      return fn.template apply<T>();                                           \
    break;
    HR_CASE(F32, F, float)
    HR_CASE(F64, F, double)
    HR_CASE(F16, F, Half)
    HR_CASE(BF16, F, BFloat16)
    HR_CASE(I8, I, int8_t)
    HR_CASE(I32, I, int32_t)
    HR_CASE(I64, I, int64_t)
    HR_CASE(U8, I, uint8_t)
    HR_CASE(Bool, B, Bool)
#undef HR_CASE
  default:
    break;
  }
  return ctx.unsupported("element type " + dtypeName(t) +
                         " is not supported on cuda");
}

} // namespace HR_CUDA_BUILD
} // namespace cuda
} // namespace headroom

#endif // HEADROOM_KERNELS_CUDA_KERNEL_H

//===- Kernel.h - Registering and running CPU kernels -----------*- C++ -*-===//
//
// A kernel computes one op on buffers the executor owns: it reads Inputs and
// writes every Output, whose types (and so shapes) were fixed at compile time.
// Kernels never allocate tensors that outlive the call. A kernel that needs
// tensor-sized scratch declares it: its family registers a workspace query
// for the op, lowering plans the largest query as the plan's workspace, and
// the executor passes that buffer in ctx.Workspace. A kernel falls back to
// its own allocation when the workspace given is smaller (direct calls in
// unit tests pass none).
//
// A kernel returns an error, never crashes, for a form of its op it does not
// implement (an element type, an attribute value); the message names the op
// and what is unsupported, e.g. "Conv: auto_pad 'SAME_LOWER' is not
// supported". Each family file registers its kernels in one function listed in
// kernels/cpu/Kernels.cpp.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_CPU_KERNEL_H
#define HEADROOM_KERNELS_CPU_KERNEL_H

#include "kernels/common/Kernel.h"

#include "llvm/Support/Error.h"

#include <cstdint>

namespace headroom {
namespace cpu {

// The kernel interface (TensorView, KernelContext) and the helpers both
// backends use are kernels/common's; the CPU's kernels are written against
// them.
using namespace kernels;

using KernelFn = llvm::Error (*)(const KernelContext &ctx);

/// The float element types a kernel computes in: every storage type (the
/// elementwise math through Elem<T>, data movement byte for byte), or f32
/// and f64 only (the kernels behind HR_DISPATCH_FLOAT). runKernel gives the
/// latter f16 and bf16 too: it widens those operands to f32 in the call's
/// workspace, runs the f32 kernel (f32 accumulation), and rounds each result
/// once, to nearest even, into its buffer.
enum class FloatSupport { Any, F32F64 };

/// The kernel for `op` (or the op of that name), or null.
KernelFn lookupKernel(OpKind op);
KernelFn lookupKernel(llvm::StringRef op);
/// Registers `fn` for `op` (an enumerator: a kernel for an op that does
/// not exist does not compile).
void registerKernel(OpKind op, KernelFn fn,
                    FloatSupport floats = FloatSupport::Any);

/// The scratch bytes a kernel needs for the call described by `ctx`, whose
/// views have their types and shapes but null Data (it is asked at plan
/// time). 0 when the call needs none or is malformed: the kernel reports
/// the error when it runs.
using WorkspaceFn = uint64_t (*)(const KernelContext &ctx);

/// The workspace query of `op`, or null when its kernel needs no scratch.
WorkspaceFn lookupWorkspace(llvm::StringRef op);
void registerWorkspace(OpKind op, WorkspaceFn fn);

/// Runs the kernel of ctx.Op (an error when there is none), widening f16 and
/// bf16 for an f32/f64-only kernel (FloatSupport).
llvm::Error runKernel(const KernelContext &ctx);
/// The whole scratch a runKernel call needs: the kernel's own (its workspace
/// query), plus the widened copies when it widens.
uint64_t kernelWorkspaceBytes(const KernelContext &ctx);

// One registration function per family file (kernels/cpu/<Family>.cpp).
void registerElementwiseKernels();
void registerShapeKernels();
void registerLinalgKernels();
void registerReduceKernels();
void registerNormKernels();
void registerLossKernels();
void registerConvPoolKernels();
void registerUpdateKernels();
void registerAttentionKernels();

} // namespace cpu
} // namespace headroom

#endif // HEADROOM_KERNELS_CPU_KERNEL_H

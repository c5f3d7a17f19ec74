//===- Kernel.h - The CPU kernel interface
//---------------------------------===//
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

#include "compiler/Attribute.h"
#include "compiler/OpInfo.h"

#include "llvm/Support/Error.h"

#include <cstdint>

namespace headroom {
class Tensor;
namespace cpu {

/// A typed view of a buffer. Data is null for an absent optional input.
struct TensorView {
  DType Type = DType::F32;
  llvm::ArrayRef<int64_t> Shape;
  void *Data = nullptr;

  bool present() const { return Data != nullptr; }
  unsigned rank() const { return Shape.size(); }
  int64_t numElements() const {
    int64_t n = 1;
    for (int64_t d : Shape)
      n *= d;
    return n;
  }
  uint64_t sizeInBytes() const { return numElements() * dtypeSize(Type); }
  template <typename T> T *as() const { return static_cast<T *>(Data); }
  TensorType type() const { return TensorType(Type, Shape); }
};

struct KernelContext {
  llvm::StringRef Op;
  llvm::ArrayRef<TensorView> Inputs;
  llvm::ArrayRef<TensorView> Outputs;
  const AttributeMap &Attrs;
  /// Seed for random ops: fixed per (run seed, step, node), so a step can be
  /// replayed exactly.
  uint64_t Seed = 0;
  /// Scratch the executor planned for this call (see WorkspaceFn), or null.
  void *Workspace = nullptr;
  uint64_t WorkspaceBytes = 0;
  /// Whether the views' Data are host memory (the CPU backend); a device
  /// backend reads shape operands (Slice's starts, ...) from Constants.
  bool HostData = true;
  /// Per input: the host tensor of a constant operand, else null (or none).
  llvm::ArrayRef<const Tensor *> Constants = {};

  int64_t attrInt(llvm::StringRef name, int64_t dflt) const;
  double attrFloat(llvm::StringRef name, double dflt) const;
  std::string attrString(llvm::StringRef name, llvm::StringRef dflt) const;
  std::vector<int64_t> attrInts(llvm::StringRef name,
                                std::vector<int64_t> dflt = {}) const;
  const Attribute *attr(llvm::StringRef name) const;
  bool hasInput(unsigned i) const {
    return i < Inputs.size() && Inputs[i].present();
  }
  /// An error naming the op: "Conv: <msg>".
  llvm::Error unsupported(const llvm::Twine &msg) const;
};

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

/// Dispatches on a float element type (f32 or f64) to fn<float>/fn<double>;
/// other types are an "unsupported element type" error.
#define HR_DISPATCH_FLOAT(ctx, dtype, FN, ...)                                 \
  ((dtype) == DType::F32 ? FN<float>(__VA_ARGS__)                              \
   : (dtype) == DType::F64                                                     \
       ? FN<double>(__VA_ARGS__)                                               \
       : (ctx).unsupported("element type " + dtypeName(dtype) +                \
                           " is not supported"))

} // namespace cpu
} // namespace headroom

#endif // HEADROOM_KERNELS_CPU_KERNEL_H

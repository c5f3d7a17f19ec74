//===- Kernels.cpp - The CUDA kernel registry -----------------------------===//
//
// Host code of both builds (nvcc's library and the emulator): the registry,
// the launch-error check, the copies and fills kernels put on the stream,
// and the broadcast index arithmetic.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/KernelUtil.h"
#include "kernels/cpu/Parallel.h"
#include "kernels/cuda/HostKernel.h"
#include "kernels/cuda/Launch.h"

#include "compiler/Types.h"

#include <mutex>

#if !defined(HEADROOM_CUDA_EMULATED)
#include <cuda_runtime.h>
#endif

using namespace headroom;
using namespace headroom::cuda;

/// Indexed by OpKind.
static std::vector<KernelFn> &registry() {
  static std::vector<KernelFn> r(allOps().size(), nullptr);
  return r;
}

void cuda::registerKernel(OpKind op, KernelFn fn) {
  registry()[static_cast<size_t>(op)] = fn;
}

static void registerAll() {
  static std::once_flag once;
  std::call_once(once, [] {
    registerElementwiseKernels();
    registerLinalgKernels();
    registerReduceKernels();
    registerNormKernels();
    registerLossKernels();
    registerShapeKernels();
    registerConvPoolKernels();
    registerUpdateKernels();
    registerAttentionKernels();
  });
}

KernelFn cuda::lookupKernel(OpKind op) {
  registerAll();
  return registry()[static_cast<size_t>(op)];
}

KernelFn cuda::lookupKernel(llvm::StringRef op) {
  const OpInfo *info = lookupOp(op);
  return info ? lookupKernel(info->Kind) : nullptr;
}

std::vector<std::string> cuda::registeredOps() {
  registerAll();
  std::vector<std::string> out;
  for (const OpInfo &op : allOps())
    if (registry()[static_cast<size_t>(op.Kind)])
      out.push_back(op.Name.str());
  std::sort(out.begin(), out.end());
  return out;
}

llvm::Error cuda::runKernel(const KernelContext &ctx) {
  KernelFn fn = lookupKernel(ctx.Op);
  if (!fn)
    return ctx.unsupported("no CUDA kernel");
  if (llvm::Error e = fn(ctx))
    return e;
#if !defined(HEADROOM_CUDA_EMULATED)
  // A launch error (a bad configuration, a previous fault) is reported at
  // the call that made it.
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return ctx.unsupported(llvm::Twine("CUDA error: ") + cudaGetErrorString(e));
#endif
  return llvm::Error::success();
}

#if defined(HEADROOM_CUDA_EMULATED)
/// Ops whose element i reads element i of each operand of the output's size
/// (scalars aside) and nothing else: on the host they run as threads over
/// chunks of elements, which changes no bit. (The 8-bit AdamW works on
/// blocks; it runs whole.)
static bool splitsByElement(llvm::StringRef op) {
  return op == "Accumulate" || op == "SgdUpdate" || op == "MomentumUpdate" ||
         op == "AdamWUpdate" || op == "Cast";
}

/// `views` with every view of `n` elements cut to [lo, lo + len).
static void cutViews(llvm::ArrayRef<TensorView> views, int64_t n, int64_t lo,
                     const int64_t &len,
                     llvm::SmallVectorImpl<TensorView> &out) {
  for (const TensorView &v : views) {
    TensorView c = v;
    if (v.present() && v.numElements() == n) {
      c.Data = static_cast<char *>(v.Data) + lo * int64_t(dtypeSize(v.Type));
      c.Shape = llvm::makeArrayRef(&len, 1);
    }
    out.push_back(c);
  }
}

llvm::Error cuda::runOnHost(const HostKernelCall &call) {
  auto run = [&](const kernels::KernelContext &base) {
    KernelContext ctx(base);
    ctx.Step = call.Step;
    ctx.RunSeed = call.RunSeed;
    ctx.RandomStream = call.RandomStream;
    ctx.Constants = call.Constants;
    return runKernel(ctx);
  };
  const kernels::KernelContext &b = call.Base;
  int64_t n = b.Outputs.empty() ? 0 : b.Outputs[0].numElements();
  if (!splitsByElement(b.Op) || n < 2 * cpu::kParallelGrain)
    return run(b);
  std::mutex failed;
  std::string error;
  cpu::parallelFor(n, cpu::kParallelGrain, [&](int64_t lo, int64_t hi) {
    const int64_t len = hi - lo;
    llvm::SmallVector<TensorView, 6> ins, outs;
    cutViews(b.Inputs, n, lo, len, ins);
    cutViews(b.Outputs, n, lo, len, outs);
    kernels::KernelContext part{
        b.Op, ins, outs, b.Attrs, b.Seed, b.Workspace, b.WorkspaceBytes};
    if (llvm::Error e = run(part)) {
      std::lock_guard<std::mutex> lock(failed);
      if (error.empty())
        error = llvm::toString(std::move(e));
      else
        llvm::consumeError(std::move(e));
    }
  });
  if (!error.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(), error);
  return llvm::Error::success();
}
#endif

llvm::Expected<const Tensor *>
KernelContext::constant(unsigned i, llvm::StringRef what) const {
  if (i < Constants.size() && Constants[i])
    return Constants[i];
  return unsupported(what + " must be a constant on cuda");
}

void cuda::copyAsync(const KernelContext &ctx, void *dst, const void *src,
                     uint64_t bytes) {
  if (dst == src || !bytes)
    return;
#if defined(HEADROOM_CUDA_EMULATED)
  std::memmove(dst, src, bytes);
#else
  cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                  static_cast<cudaStream_t>(ctx.Stream));
#endif
}

void cuda::fillZeroAsync(const KernelContext &ctx, void *dst, uint64_t bytes) {
  if (!bytes)
    return;
#if defined(HEADROOM_CUDA_EMULATED)
  std::memset(dst, 0, bytes);
#else
  cudaMemsetAsync(dst, 0, bytes, static_cast<cudaStream_t>(ctx.Stream));
#endif
}

namespace headroom {
namespace cuda {
inline namespace HR_CUDA_BUILD {

template <unsigned N>
bool makeBroadcast(llvm::ArrayRef<int64_t> out,
                   std::array<llvm::ArrayRef<int64_t>, N> ins,
                   Broadcast<N> &b) {
  b = Broadcast<N>();
  b.Same = true;
  for (unsigned k = 0; k < N; ++k)
    b.Same &= ins[k] == out;
  kernels::BroadcastLoops<N> loops(out, ins);
  llvm::ArrayRef<int64_t> dims = loops.dims();
  if (dims.size() > kMaxDims)
    return false;
  b.Rank = dims.size();
  for (unsigned d = 0; d < dims.size(); ++d) {
    b.Dims[d] = dims[d];
    for (unsigned k = 0; k < N; ++k)
      b.Strides[k][d] = loops.strides(k)[d];
  }
  return true;
}

template bool makeBroadcast<1>(llvm::ArrayRef<int64_t>,
                               std::array<llvm::ArrayRef<int64_t>, 1>,
                               Broadcast<1> &);
template bool makeBroadcast<2>(llvm::ArrayRef<int64_t>,
                               std::array<llvm::ArrayRef<int64_t>, 2>,
                               Broadcast<2> &);
template bool makeBroadcast<3>(llvm::ArrayRef<int64_t>,
                               std::array<llvm::ArrayRef<int64_t>, 3>,
                               Broadcast<3> &);

} // namespace HR_CUDA_BUILD
} // namespace cuda
} // namespace headroom

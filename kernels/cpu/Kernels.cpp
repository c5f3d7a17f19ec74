//===- Kernels.cpp - The CPU kernel registry ------------------------------===//
#include "kernels/cpu/Kernel.h"

#include <mutex>
#include <vector>

using namespace headroom;
using namespace headroom::cpu;

namespace {
struct Registered {
  KernelFn Fn = nullptr;
  FloatSupport Floats = FloatSupport::Any;
};
} // namespace

/// Both registries, indexed by OpKind.
static std::vector<Registered> &registry() {
  static std::vector<Registered> r(allOps().size());
  return r;
}

static std::vector<WorkspaceFn> &workspaceRegistry() {
  static std::vector<WorkspaceFn> r(allOps().size(), nullptr);
  return r;
}

void headroom::cpu::registerKernel(OpKind op, KernelFn fn,
                                   FloatSupport floats) {
  registry()[static_cast<size_t>(op)] = Registered{fn, floats};
}

void headroom::cpu::registerWorkspace(OpKind op, WorkspaceFn fn) {
  workspaceRegistry()[static_cast<size_t>(op)] = fn;
}

/// Runs every family's registration once.
static void registerAll() {
  static std::once_flag once;
  std::call_once(once, [] {
    registerElementwiseKernels();
    registerShapeKernels();
    registerLinalgKernels();
    registerReduceKernels();
    registerNormKernels();
    registerLossKernels();
    registerConvPoolKernels();
    registerUpdateKernels();
    registerAttentionKernels();
  });
}

/// The registration of the op named `op`, or null (no such op, no kernel).
static const Registered *registered(llvm::StringRef op) {
  registerAll();
  const OpInfo *info = lookupOp(op);
  const Registered *r =
      info ? &registry()[static_cast<size_t>(info->Kind)] : nullptr;
  return r && r->Fn ? r : nullptr;
}

KernelFn headroom::cpu::lookupKernel(OpKind op) {
  registerAll();
  return registry()[static_cast<size_t>(op)].Fn;
}

KernelFn headroom::cpu::lookupKernel(llvm::StringRef op) {
  const Registered *r = registered(op);
  return r ? r->Fn : nullptr;
}

WorkspaceFn headroom::cpu::lookupWorkspace(llvm::StringRef op) {
  registerAll();
  const OpInfo *info = lookupOp(op);
  return info ? workspaceRegistry()[static_cast<size_t>(info->Kind)] : nullptr;
}

//===----------------------------------------------------------------------===//
// Widening f16/bf16 for f32-only kernels
//===----------------------------------------------------------------------===//

static bool isNarrowFloat(DType t) {
  return t == DType::F16 || t == DType::BF16;
}

static uint64_t widenedBytes(const TensorView &v) {
  return (uint64_t(v.numElements()) * 4 + 63) & ~uint64_t(63);
}

/// Whether the call has f16/bf16 operands or results its kernel cannot
/// compute in.
static bool widens(const Registered &r, const KernelContext &ctx) {
  if (r.Floats != FloatSupport::F32F64)
    return false;
  for (auto views : {ctx.Inputs, ctx.Outputs})
    for (const TensorView &v : views)
      if (isNarrowFloat(v.Type))
        return true;
  return false;
}

/// `views` with every f16/bf16 view made f32 (shape and data unchanged).
static llvm::SmallVector<TensorView, 4>
widenedTypes(llvm::ArrayRef<TensorView> views) {
  llvm::SmallVector<TensorView, 4> out(views.begin(), views.end());
  for (TensorView &v : out)
    if (isNarrowFloat(v.Type))
      v.Type = DType::F32;
  return out;
}

static uint64_t ownWorkspace(const KernelContext &ctx) {
  WorkspaceFn query = lookupWorkspace(ctx.Op);
  return query ? query(ctx) : 0;
}

uint64_t headroom::cpu::kernelWorkspaceBytes(const KernelContext &ctx) {
  const Registered *r = registered(ctx.Op);
  if (!r || !widens(*r, ctx))
    return ownWorkspace(ctx);
  uint64_t bytes = 0;
  for (auto views : {ctx.Inputs, ctx.Outputs})
    for (const TensorView &v : views)
      if (isNarrowFloat(v.Type))
        bytes += widenedBytes(v);
  auto ins = widenedTypes(ctx.Inputs), outs = widenedTypes(ctx.Outputs);
  return bytes + ownWorkspace(KernelContext{ctx.Op, ins, outs, ctx.Attrs});
}

/// Loads a view's elements as f32, or stores f32 elements into it (rounding
/// to nearest even).
static void toF32(const TensorView &v, float *out) {
  int64_t n = v.numElements();
  const uint16_t *bits = v.as<uint16_t>();
  if (v.Type == DType::BF16)
    for (int64_t i = 0; i < n; ++i)
      out[i] = bf16ToFloat(bits[i]);
  else
    for (int64_t i = 0; i < n; ++i)
      out[i] = halfToFloat(bits[i]);
}

static void fromF32(const float *in, const TensorView &v) {
  int64_t n = v.numElements();
  uint16_t *bits = v.as<uint16_t>();
  if (v.Type == DType::BF16)
    for (int64_t i = 0; i < n; ++i)
      bits[i] = floatToBf16(in[i]);
  else
    for (int64_t i = 0; i < n; ++i)
      bits[i] = floatToHalf(in[i]);
}

llvm::Error headroom::cpu::runKernel(const KernelContext &ctx) {
  const Registered *r = registered(ctx.Op);
  if (!r)
    return ctx.unsupported("no CPU kernel");
  if (!widens(*r, ctx))
    return r->Fn(ctx);
  // Widened copies in the workspace, then the kernel's own scratch. A call
  // without a workspace (unit tests call kernels directly) allocates its
  // own; a planned one that is too small is the plan's error.
  uint64_t need = kernelWorkspaceBytes(ctx);
  std::vector<uint8_t> own;
  uint8_t *scratch = static_cast<uint8_t *>(ctx.Workspace);
  if (scratch && ctx.WorkspaceBytes < need)
    return ctx.unsupported("the planned workspace of " +
                           llvm::Twine(ctx.WorkspaceBytes) +
                           " bytes is smaller than the " + llvm::Twine(need) +
                           " bytes this call needs");
  if (!scratch) {
    own.resize(need);
    scratch = own.data();
  }
  uint8_t *at = scratch;
  auto widen = [&](llvm::ArrayRef<TensorView> views) {
    llvm::SmallVector<TensorView, 4> out(views.begin(), views.end());
    for (TensorView &v : out) {
      if (!isNarrowFloat(v.Type) || !v.present())
        continue;
      float *copy = reinterpret_cast<float *>(at);
      toF32(v, copy); // outputs too: update ops read their state
      at += widenedBytes(v);
      v = TensorView{DType::F32, v.Shape, copy};
    }
    return out;
  };
  auto ins = widen(ctx.Inputs), outs = widen(ctx.Outputs);
  KernelContext wide{ctx.Op,
                     ins,
                     outs,
                     ctx.Attrs,
                     ctx.Seed,
                     at,
                     need - uint64_t(at - scratch)};
  if (auto e = r->Fn(wide))
    return e;
  for (size_t i = 0; i < outs.size(); ++i)
    if (isNarrowFloat(ctx.Outputs[i].Type) && ctx.Outputs[i].present())
      fromF32(outs[i].as<float>(), ctx.Outputs[i]);
  return llvm::Error::success();
}

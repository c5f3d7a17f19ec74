//===- CudaKernelTestUtil.h - kernels/cuda against kernels/cpu --*- C++ -*-===//
//
// The CUDA kernels compiled for the host (the emulator, kernels/cuda/Device.h)
// run the GPU's arithmetic on host memory, so every machine can check them
// against the CPU kernels: compareCudaWithCpu runs one op through both on the
// same inputs and compares every output.
//
// The same test files are compiled a second time into test/gpu's binary
// with HEADROOM_CUDA_TEST_ON_GPU: then compareCudaWithCpu runs the nvcc
// build of the kernels on the GPU (operands copied to device memory, a
// stream, cuBLASLt), so every case here is also a GPU test.
//
// The CUDA side gets the per-call workspace the cuda target plans for the
// call (kernels/cuda/Workspace.h), filled with NaN bytes, as the executor
// passes the plan's; the CPU side gets none (its kernels allocate).
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_TEST_UNIT_KERNELS_CUDAKERNELTESTUTIL_H
#define HEADROOM_TEST_UNIT_KERNELS_CUDAKERNELTESTUTIL_H

#if !defined(HEADROOM_CUDA_TEST_ON_GPU) && !defined(HEADROOM_CUDA_EMULATED)
#define HEADROOM_CUDA_EMULATED 1
#endif
#if defined(HEADROOM_CUDA_TEST_ON_GPU)
#include "kernels/cuda/CublasLt.h"
#include "kernels/cuda/CudaTarget.h"
#include <cuda_runtime.h>
#endif
#include "kernels/cpu/Kernel.h"
#include "kernels/cuda/Kernel.h"
#include "kernels/cuda/Workspace.h"

#include "compiler/Types.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace headroom {
namespace cudatest {

/// A tensor of `type` with elements uniform in [lo, hi) (integers: in
/// [lo, hi) truncated; bool: random), the same for the same seed.
inline Tensor randomTensor(TensorType type, unsigned seed, double lo = -2,
                           double hi = 2) {
  Tensor t(type);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < t.numElements(); ++i) {
    double v = dist(rng);
    if (type.dtype() == DType::Bool)
      v = v > (lo + hi) / 2;
    else if (!isFloat(type.dtype()))
      v = std::floor(v);
    t.setDouble(i, v);
  }
  return t;
}

struct Tolerance {
  double Atol = 1e-6, Rtol = 1e-5;
};

/// "" when `got` equals `want` within `tol` (NaN where NaN; integers and
/// bools exactly), else the first difference.
inline std::string compareTensors(const Tensor &got, const Tensor &want,
                                  Tolerance tol) {
  if (got.type() != want.type())
    return "type " + got.type().str() + ", expected " + want.type().str();
  DType t = want.type().dtype();
  for (int64_t i = 0; i < want.numElements(); ++i) {
    if (isFloat(t)) {
      double g = got.getDouble(i), w = want.getDouble(i);
      if (std::isnan(w) ? std::isnan(g)
                        : (g == w || std::fabs(g - w) <=
                                         tol.Atol + tol.Rtol * std::fabs(w)))
        continue;
      return "element " + std::to_string(i) + " is " + std::to_string(g) +
             ", the CPU's " + std::to_string(w);
    }
    if (got.getInt(i) != want.getInt(i))
      return "element " + std::to_string(i) + " is " +
             std::to_string(got.getInt(i)) + ", the CPU's " +
             std::to_string(want.getInt(i));
  }
  return "";
}

/// A tensor's bytes; an address even when it has no elements (a null view
/// is an absent operand).
inline void *dataOf(Tensor &t) {
  static uint64_t empty = 0;
  return t.numElements() ? static_cast<void *>(t.data()) : &empty;
}

struct CudaCase {
  std::string Op;
  std::vector<Tensor> Inputs;
  std::vector<bool> Absent;        // per input: passed as absent (null)
  std::vector<bool> Constant;      // per input: given as a plan constant
  std::vector<TensorType> Outputs; // result types
  AttributeMap Attrs;
  /// Extra outputs both kernels update in place (an update op's state),
  /// with their initial values.
  std::vector<Tensor> InOut;
  Tolerance Tol;
  uint64_t Seed = 0;
  /// Give the CUDA kernel no workspace (its fallback), not the planned one.
  bool NoWorkspace = false;
};

/// The workspace bytes the cuda target plans for `c`'s call.
inline uint64_t plannedWorkspaceBytes(const CudaCase &c) {
  std::vector<cuda::ws::CallValue> ins, outs;
  for (size_t i = 0; i < c.Inputs.size(); ++i) {
    bool absent = i < c.Absent.size() && c.Absent[i];
    ins.push_back(absent ? cuda::ws::CallValue{}
                         : cuda::ws::CallValue{true, c.Inputs[i].type().shape(),
                                               c.Inputs[i].type().dtype()});
  }
  for (const TensorType &t : c.Outputs)
    outs.push_back({true, t.shape(), t.dtype()});
  return cuda::ws::workspaceBytes(c.Op, ins, outs, c.Attrs);
}

#if defined(HEADROOM_CUDA_TEST_ON_GPU)
/// The stream, cuBLASLt handle and workspace every GPU case runs with.
struct GpuContext {
  cudaStream_t Stream = nullptr;
  cublasLtHandle_t Lt = nullptr;
  void *Workspace = nullptr;
  uint64_t *Step = nullptr;
  static GpuContext &get() {
    static GpuContext g = [] {
      GpuContext g;
      cudaStreamCreate(&g.Stream);
      if (const cuda::CublasLtApi *lt = cuda::cublasLt())
        lt->Create(&g.Lt); // none: the GEMMs run GemmBody
      cudaMalloc(&g.Workspace, kCublasLtWorkspaceBytes);
      cudaMalloc(&g.Step, sizeof(uint64_t));
      uint64_t step = 3;
      cudaMemcpy(g.Step, &step, sizeof(step), cudaMemcpyHostToDevice);
      return g;
    }();
    return g;
  }
};

/// Runs the kernel on the GPU: views of host tensors in, outputs back.
inline llvm::Error runOnGpu(cuda::KernelContext ctx,
                            std::vector<kernels::TensorView> &ins,
                            std::vector<kernels::TensorView> &outs) {
  GpuContext &g = GpuContext::get();
  std::vector<void *> allocations;
  auto toDevice = [&](std::vector<kernels::TensorView> &views) {
    std::vector<kernels::TensorView> device = views;
    for (kernels::TensorView &v : device) {
      if (!v.present())
        continue;
      void *p = nullptr;
      cudaMalloc(&p, std::max<uint64_t>(v.sizeInBytes(), 1));
      cudaMemcpy(p, v.Data, v.sizeInBytes(), cudaMemcpyHostToDevice);
      allocations.push_back(p);
      v.Data = p;
    }
    return device;
  };
  std::vector<kernels::TensorView> dIns = toDevice(ins), dOuts = toDevice(outs);
  ctx.Inputs = dIns;
  ctx.Outputs = dOuts;
  if (ctx.WorkspaceBytes) {
    void *p = nullptr;
    cudaMalloc(&p, ctx.WorkspaceBytes);
    cudaMemset(p, 0xff, ctx.WorkspaceBytes);
    allocations.push_back(p);
    ctx.Workspace = p;
  }
  ctx.Stream = g.Stream;
  ctx.BlasLt = g.Lt;
  ctx.BlasWorkspace = g.Workspace;
  ctx.BlasWorkspaceBytes = kCublasLtWorkspaceBytes;
  ctx.Step = g.Step;
  llvm::Error e = cuda::runKernel(ctx);
  cudaError_t sync = cudaStreamSynchronize(g.Stream);
  for (size_t k = 0; k < outs.size(); ++k)
    cudaMemcpy(outs[k].Data, dOuts[k].Data, outs[k].sizeInBytes(),
               cudaMemcpyDeviceToHost);
  for (void *p : allocations)
    cudaFree(p);
  if (!e && sync != cudaSuccess)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "CUDA error: %s", cudaGetErrorString(sync));
  return e;
}
#endif

/// Runs `c` on the CPU kernels (onCuda false) or the CUDA kernels (emulated,
/// or on the GPU in test/gpu); the error, or "" with the results in `outs`
/// (the outputs, then the InOut tensors as the kernel left them).
inline std::string runCase(const CudaCase &c, bool onCuda,
                           std::vector<Tensor> &outs) {
  std::vector<Tensor> ins = c.Inputs;
  std::vector<kernels::TensorView> inViews, outViews;
  std::vector<const Tensor *> constants;
  for (size_t i = 0; i < ins.size(); ++i) {
    bool absent = i < c.Absent.size() && c.Absent[i];
    inViews.push_back(absent ? kernels::TensorView()
                             : kernels::TensorView{ins[i].type().dtype(),
                                                   ins[i].type().shape(),
                                                   dataOf(ins[i])});
    bool constant = i < c.Constant.size() && c.Constant[i];
    constants.push_back(constant && !absent ? &ins[i] : nullptr);
  }
  outs.clear();
  for (const TensorType &t : c.Outputs) {
    Tensor o(t);
    // Garbage, not zeros: a kernel must write every element.
    for (int64_t i = 0; i < o.numElements(); ++i)
      o.setDouble(i, isFloat(t.dtype()) ? 12345.0 : 7.0);
    outs.push_back(std::move(o));
  }
  for (const Tensor &t : c.InOut)
    outs.push_back(t);
  for (Tensor &o : outs)
    outViews.push_back(
        kernels::TensorView{o.type().dtype(), o.type().shape(), dataOf(o)});
  uint64_t step = 3;
  llvm::Error e = llvm::Error::success();
  if (onCuda) {
    cuda::KernelContext ctx{{c.Op, inViews, outViews, c.Attrs, 0}};
    ctx.Step = &step;
    ctx.RunSeed = c.Seed;
    ctx.RandomStream = 5;
    ctx.Constants = constants;
    uint64_t wsBytes = c.NoWorkspace ? 0 : plannedWorkspaceBytes(c);
#if defined(HEADROOM_CUDA_TEST_ON_GPU)
    ctx.WorkspaceBytes = wsBytes; // runOnGpu allocates it on the device
    e = runOnGpu(ctx, inViews, outViews);
#else
    // NaN bytes, not zeros: a kernel must write what it reads back.
    std::vector<double> workspace(wsBytes / sizeof(double));
    if (!workspace.empty())
      std::memset(workspace.data(), 0xff, workspace.size() * sizeof(double));
    ctx.Workspace = wsBytes ? workspace.data() : nullptr;
    ctx.WorkspaceBytes = wsBytes;
    e = cuda::runKernel(ctx);
#endif
  } else {
    uint64_t seed = cuda::mixSeed(c.Seed, step, 5);
    kernels::KernelContext ctx{c.Op, inViews, outViews, c.Attrs, seed};
    e = cpu::runKernel(ctx);
  }
  return e ? llvm::toString(std::move(e)) : "";
}

/// Runs `c` on the CUDA kernels alone (for what the CPU refuses or does
/// differently).
inline std::string runCudaOnly(const CudaCase &c, std::vector<Tensor> &outs) {
  return runCase(c, /*onCuda=*/true, outs);
}

/// Runs `c` on the CPU kernels and the CUDA kernels (emulated, or on the
/// GPU in test/gpu); "" when both succeed and agree, else what differs (or
/// the error of either).
inline std::string compareCudaWithCpu(const CudaCase &c) {
  Tolerance tol = c.Tol;
#if defined(HEADROOM_CUDA_TEST_ON_GPU)
  // The GPU's math library and fused multiply-adds round differently from
  // the host's within a few ulps; a float result that moves by one may round
  // to the neighbouring f16/bf16.
  for (const TensorType &t : c.Outputs) {
    double atol = 1e-6, rtol = 1e-5;
    if (t.dtype() == DType::F16)
      atol = 1e-3, rtol = 2e-3;
    if (t.dtype() == DType::BF16)
      atol = 1e-2, rtol = 1e-2;
    tol.Atol = std::max(tol.Atol, atol);
    tol.Rtol = std::max(tol.Rtol, rtol);
  }
#endif
  std::vector<Tensor> want, got;
  if (std::string err = runCase(c, false, want); !err.empty())
    return "cpu: " + err;
  if (std::string err = runCase(c, true, got); !err.empty())
    return "cuda: " + err;
  for (size_t k = 0; k < want.size(); ++k)
    if (std::string d = compareTensors(got[k], want[k], tol); !d.empty())
      return c.Op + " output " + std::to_string(k) + ": " + d;
  return "";
}

} // namespace cudatest
} // namespace headroom

#endif // HEADROOM_TEST_UNIT_KERNELS_CUDAKERNELTESTUTIL_H

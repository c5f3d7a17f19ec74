//===- CudaExecutor.cpp - The CUDA backend --------------------------------===//
//
// One device allocation holds everything a plan touches on the GPU, each
// part at the plan's alignment: the state slots, the arena, the kernels'
// workspace, cuBLASLt's workspace (the target's library bytes), the plan's
// constants (uploaded once) and the step counter random kernels read. So
// the device memory of a step is the planned peak plus the constants, and
// nothing is allocated after the executor is created.
//
// Each function is captured as a CUDA graph on its first run and replayed
// after: arguments are copied in from pinned host buffers before the
// launch, results and reported gradients copied out to pinned buffers by
// nodes of the graph itself (a gradient's buffer is reused later in the
// step), and the step counter is written to the device before each launch,
// so that a replayed Dropout draws a new mask every step.
//
// With offload (docs/offload.md) the plan has a second pool, pinned host
// memory, allocated once beside the device's: host state slots, the host
// arena and the scratch of host calls. ToHost and ToDevice are copies on
// the stream; a host call (KernelCall::Host) runs kernels/cuda's code
// compiled for the host (kernels/cuda/HostKernel.h) in stream order, as a
// host node of the graph (cudaLaunchHostFunc), so it sees the copies
// before it complete and the kernels after it wait for it.
//
// A plan for several ranks (data parallelism, docs/distributed.md) runs its
// collectives with NCCL on the compute stream, on a communicator whose
// unique id rank 0 makes and the MPI job (ExecutorOptions::Comm) carries
// to the others; such plans run call by call (no graphs). The emulator runs
// them through the host collectives of runtime/Communicator.h.
//
// This file is compiled twice, like kernels/cuda: against the CUDA runtime
// (createCudaExecutor) and as the emulator (createEmulatedCudaExecutor),
// where device memory is host memory, copies are memcpy, and functions run
// call by call instead of as graphs.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/CudaExecutor.h"

#include "compiler/Protocol.h"
#include "kernels/cuda/CudaTarget.h"
#include "kernels/cuda/HostKernel.h"
#include "kernels/cuda/Kernel.h"

#include "compiler/ByteSize.h"
#include "compiler/Collectives.h"
#include "runtime/Communicator.h"

#include "llvm/ADT/STLExtras.h"

#include <cstring>
#include <new>

#if !defined(HEADROOM_CUDA_EMULATED)
#include "kernels/cuda/CublasLt.h"

#include <cuda_runtime.h>
#include <nccl.h>
#endif

using namespace headroom;
using llvm::Error;

namespace headroom {
namespace cuda {
inline namespace HR_CUDA_BUILD {
namespace {

Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

//===----------------------------------------------------------------------===//
// The few runtime calls the executor makes, on the GPU or emulated
//===----------------------------------------------------------------------===//

#if defined(HEADROOM_CUDA_EMULATED)

Error deviceAlloc(void **p, uint64_t bytes) {
  *p = ::operator new[](bytes ? bytes : 1, std::align_val_t(256), std::nothrow);
  return *p ? Error::success()
            : fail("cannot allocate " + formatBytes(bytes) + " (emulated)");
}
void deviceFree(void *p) { ::operator delete[](p, std::align_val_t(256)); }
Error hostAlloc(void **p, uint64_t bytes) {
  *p = ::operator new[](bytes ? bytes : 1, std::nothrow);
  return *p ? Error::success() : fail("cannot allocate host staging");
}
void hostFree(void *p) { ::operator delete[](p); }
Error toDevice(void *dst, const void *src, uint64_t n, void *) {
  std::memcpy(dst, src, n);
  return Error::success();
}
Error toHost(void *dst, const void *src, uint64_t n, void *) {
  std::memcpy(dst, src, n);
  return Error::success();
}
Error onDevice(void *dst, const void *src, uint64_t n, void *) {
  std::memmove(dst, src, n);
  return Error::success();
}
Error fillZero(void *dst, uint64_t n, void *) {
  std::memset(dst, 0, n);
  return Error::success();
}
Error synchronize(void *) { return Error::success(); }
/// After a failed run: nothing is in flight in the emulator.
void settle(void *) {}
Error useDevice(int) { return Error::success(); }

#else

Error check(cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return Error::success();
  cudaGetLastError(); // clear a non-sticky error
  return fail(llvm::Twine(what) + ": " + cudaGetErrorString(e));
}
Error deviceAlloc(void **p, uint64_t bytes) {
  if (cudaError_t e = cudaMalloc(p, bytes ? bytes : 256); e != cudaSuccess) {
    size_t free = 0, total = 0;
    cudaGetLastError();
    cudaMemGetInfo(&free, &total);
    return fail("cannot allocate the plan's " + formatBytes(bytes) +
                " on the GPU (" + formatBytes(free) + " of " +
                formatBytes(total) + " free): " + cudaGetErrorString(e) +
                "; `headroom report --device cuda --memory-budget device` "
                "finds a step that fits");
  }
  return Error::success();
}
void deviceFree(void *p) { cudaFree(p); }
Error hostAlloc(void **p, uint64_t bytes) {
  return check(cudaMallocHost(p, bytes ? bytes : 1), "pinned host memory");
}
void hostFree(void *p) { cudaFreeHost(p); }
Error toDevice(void *dst, const void *src, uint64_t n, void *stream) {
  return check(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice,
                               static_cast<cudaStream_t>(stream)),
               "copying to the GPU");
}
Error toHost(void *dst, const void *src, uint64_t n, void *stream) {
  return check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost,
                               static_cast<cudaStream_t>(stream)),
               "copying from the GPU");
}
Error onDevice(void *dst, const void *src, uint64_t n, void *stream) {
  return check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice,
                               static_cast<cudaStream_t>(stream)),
               "copying on the GPU");
}
Error fillZero(void *dst, uint64_t n, void *stream) {
  return check(cudaMemsetAsync(dst, 0, n, static_cast<cudaStream_t>(stream)),
               "clearing GPU memory");
}
Error synchronize(void *stream) {
  return check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
               "the step failed on the GPU");
}
/// After a failed run: waits for what is in flight (the staging buffers are
/// reused by the next run) and clears the error, so a later call is not
/// blamed for it.
void settle(void *stream) {
  cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
  cudaGetLastError();
}
/// Every entry point runs on the executor's device, whatever thread calls.
Error useDevice(int device) {
  return check(cudaSetDevice(device), "selecting the GPU");
}

#endif

uint64_t alignTo(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/// Pinned host bytes a function's arguments, results and reported gradients
/// pass through, at fixed offsets.
struct Staging {
  uint8_t *Base = nullptr;
  std::vector<uint64_t> Args, Results, Grads; // offsets into Base
  uint64_t Bytes = 0;
};

class CudaExecutor : public Executor {
public:
  CudaExecutor(Plan plan, const ExecutorOptions &options)
      : Executor(std::move(plan)), Options(options) {}
  ~CudaExecutor() override;
  Error allocate();
  Error openDevice();
  Error placeBuffers(uint64_t arena, uint64_t hostArena,
                     llvm::ArrayRef<uint64_t> constantAt);
  Error allocateStaging();

  llvm::Expected<std::vector<Tensor>>
  run(llvm::StringRef function, llvm::ArrayRef<const Tensor *> args) override;
  llvm::Expected<Tensor> readState(llvm::StringRef name) const override;
  Error writeState(llvm::StringRef name, const Tensor &value) override;
  Error readStateBytes(size_t index, uint64_t offset,
                       llvm::MutableArrayRef<uint8_t> out) const override;
  Error writeStateBytes(size_t index, uint64_t offset,
                        llvm::ArrayRef<uint8_t> bytes) override;
  const std::map<std::string, Tensor> &gradients() const override {
    return Gradients;
  }
  void setStep(uint64_t step) override { Step = step; }
  uint64_t deviceBytes() const override { return Total; }
  uint64_t hostPoolBytes() const override { return HostTotal; }

  /// Runs host call `c` of `f` now (in stream order: the emulator calls it
  /// in turn, the GPU from a host node); a failure is kept for run().
  void runHostTask(const PlanFunction &f, const KernelCall &c);
  /// What each host node of a graph runs: it must outlive every replay.
  struct HostTask {
    CudaExecutor *Self;
    const PlanFunction *F;
    const KernelCall *C;
  };

private:
  Error runHost(const PlanFunction &f, const KernelCall &c);
  /// The views a kernel call takes: its inputs (and their constants), its
  /// outputs, then its state slots; host-pool views for a host call.
  void callViews(const KernelCall &c, bool host,
                 llvm::SmallVectorImpl<kernels::TensorView> &ins,
                 llvm::SmallVectorImpl<kernels::TensorView> &outs,
                 llvm::SmallVectorImpl<const Tensor *> &constants) const;
  Error runHostCall(const PlanFunction &f, const KernelCall &c);
  /// A buffer as a host call sees it: host-pool bytes, or a constant's
  /// host tensor.
  kernels::TensorView hostView(int buffer) const {
    if (buffer < 0)
      return kernels::TensorView();
    const TensorType &t = ThePlan.Buffers[buffer];
    void *p = Pointers[buffer];
    if (const Tensor *c = HostConstants[buffer])
      p = const_cast<uint8_t *>(c->bytes().data());
    return kernels::TensorView{t.dtype(), t.shape(), p};
  }
  Error launch(const PlanFunction &f, const Staging &s,
               llvm::ArrayRef<const Tensor *> args);
  Error runCalls(const PlanFunction &f, const Staging &s);
  Error runCall(const PlanFunction &f, const KernelCall &c, const Staging &s,
                unsigned &grad);
  Error runCollectiveCall(const KernelCall &c);
  Error joinRanks();
  kernels::TensorView view(int buffer) const {
    if (buffer < 0)
      return kernels::TensorView();
    const TensorType &t = ThePlan.Buffers[buffer];
    return kernels::TensorView{t.dtype(), t.shape(), Pointers[buffer]};
  }
  uint8_t *state(int i) const {
    return (ThePlan.States[i].Host ? HostBase : Base) + StateOffsets[i];
  }
  uint64_t stateBytes(int i) const {
    return ThePlan.States[i].Type.sizeInBytes();
  }
  Error checkStateRange(size_t index, uint64_t offset, uint64_t size) const;

  ExecutorOptions Options;
  uint8_t *Base = nullptr; // the one device allocation
  uint64_t Total = 0;
  std::vector<uint64_t> StateOffsets;
  uint8_t *Workspace = nullptr, *BlasWorkspace = nullptr;
  uint64_t *StepOnDevice = nullptr;
  uint64_t *StepStaging = nullptr;           // pinned
  std::vector<void *> Pointers;              // per buffer, device addresses
  std::vector<const Tensor *> HostConstants; // per buffer, or null
  std::map<std::string, Staging> Stagings;   // per function
  std::map<std::string, Tensor> Gradients;
  /// The pinned host pool (offload): state, arena, workspace of host calls.
  uint8_t *HostBase = nullptr, *HostWorkspace = nullptr;
  uint64_t HostTotal = 0;
  /// The first failure of a host call in the run under way.
  std::string HostError;
  uint64_t Step = 0;
  void *Stream = nullptr;
  void *BlasLt = nullptr;
  /// The stream the call being issued goes to (runCall): Stream, or the
  /// copy stream for transfers, host calls and overlapped collectives.
  void *Current = nullptr;
#if !defined(HEADROOM_CUDA_EMULATED)
  ncclComm_t Nccl = nullptr;
  std::map<std::string, cudaGraphExec_t> Graphs;
  void *CopyStream = nullptr;
  /// Per function with copy-stream calls: an event after each copy call
  /// (Done), one the copy stream waits on before a group (Progress), and
  /// the copy stream's end, all indexed by call.
  struct FunctionEvents {
    std::vector<cudaEvent_t> Done, Progress;
    cudaEvent_t End = nullptr;
  };
  std::map<std::string, FunctionEvents> Events;
  std::map<const KernelCall *, std::unique_ptr<HostTask>> HostTasks;
#endif
};

CudaExecutor::~CudaExecutor() {
#if !defined(HEADROOM_CUDA_EMULATED)
  cudaSetDevice(Options.CudaDevice);
  if (Stream)
    cudaStreamSynchronize(static_cast<cudaStream_t>(Stream));
  for (auto &[name, g] : Graphs)
    cudaGraphExecDestroy(g);
  for (auto &[name, ev] : Events) {
    for (cudaEvent_t e : llvm::concat<cudaEvent_t>(ev.Done, ev.Progress))
      if (e)
        cudaEventDestroy(e);
    if (ev.End)
      cudaEventDestroy(ev.End);
  }
  if (CopyStream)
    cudaStreamDestroy(static_cast<cudaStream_t>(CopyStream));
  if (Nccl)
    ncclCommDestroy(Nccl);
  if (BlasLt)
    cublasLt()->Destroy(static_cast<cublasLtHandle_t>(BlasLt));
  if (Stream)
    cudaStreamDestroy(static_cast<cudaStream_t>(Stream));
#endif
  for (auto &[name, s] : Stagings)
    if (s.Base)
      hostFree(s.Base);
  if (StepStaging)
    hostFree(StepStaging);
  if (HostBase)
    hostFree(HostBase);
  if (Base)
    deviceFree(Base);
}

/// The GPU (a rank's among those it sees), the compute stream, the copy
/// stream and its events where a function needs them, cuBLASLt's handle.
/// Nothing in the emulator.
Error CudaExecutor::openDevice() {
#if !defined(HEADROOM_CUDA_EMULATED)
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || !count) {
    cudaGetLastError();
    return fail(llvm::Twine("the plan is for --device cuda, and this machine "
                            "has no usable CUDA device (") +
                (e != cudaSuccess ? cudaGetErrorString(e) : "none found") +
                "); compile with --device cpu to run it here");
  }
  // A rank's GPU is its place on the machine, among the GPUs it sees
  // (one each when CUDA_VISIBLE_DEVICES gives each rank its own).
  if (ThePlan.Ranks > 1)
    Options.CudaDevice %= count;
  if (Error e = check(cudaSetDevice(Options.CudaDevice), "selecting the GPU"))
    return e;
  cudaStream_t stream;
  if (Error e = check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                      "creating a stream"))
    return e;
  Stream = stream;
  Current = Stream;
  // A copy stream and its events for functions with transfers, host calls
  // or overlapped collectives (compiler/Streams.h).
  for (const PlanFunction &f : ThePlan.Functions) {
    if (llvm::none_of(f.Calls,
                      [](const KernelCall &c) { return c.onCopyStream(); }))
      continue;
    if (!CopyStream) {
      cudaStream_t copy;
      if (Error e =
              check(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking),
                    "creating the copy stream"))
        return e;
      CopyStream = copy;
    }
    FunctionEvents &ev = Events[f.Name];
    ev.Done.assign(f.Calls.size(), nullptr);
    ev.Progress.assign(f.Calls.size(), nullptr);
    auto make = [](cudaEvent_t &e) {
      return check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                   "creating an event");
    };
    for (size_t i = 0; i < f.Calls.size(); ++i) {
      if (!f.Calls[i].onCopyStream())
        continue;
      if (Error e = make(ev.Done[i]))
        return e;
      if (Error e = make(ev.Progress[i]))
        return e;
    }
    if (Error e = make(ev.End))
      return e;
  }
  std::string why;
  const CublasLtApi *api = cublasLt(&why);
  if (!api)
    return fail("cuBLASLt: " + why);
  cublasLtHandle_t lt;
  if (api->Create(&lt) != CUBLAS_STATUS_SUCCESS)
    return fail("cannot create the cuBLASLt handle");
  BlasLt = lt;
#endif
  return Error::success();
}

/// Every buffer's pointer: in the arena (device or host pool), a state
/// slot, or a constant uploaded once at `constantAt`.
Error CudaExecutor::placeBuffers(uint64_t arena, uint64_t hostArena,
                                 llvm::ArrayRef<uint64_t> constantAt) {
  Pointers.assign(ThePlan.Buffers.size(), nullptr);
  HostConstants.assign(ThePlan.Buffers.size(), nullptr);
  for (size_t i = 0; i < ThePlan.Buffers.size(); ++i) {
    const Placement &p = ThePlan.Placements[i];
    switch (p.Where) {
    case Placement::Kind::Arena:
      Pointers[i] =
          p.Host ? HostBase + hostArena + p.Offset : Base + arena + p.Offset;
      break;
    case Placement::Kind::State:
      Pointers[i] = state(p.Index);
      break;
    case Placement::Kind::Constant: {
      const Tensor &t =
          ThePlan.Functions[p.Index].Calls[p.Call].Attrs.at("value").asTensor();
      Pointers[i] = Base + constantAt[i];
      HostConstants[i] = &t;
      if (!t.bytes().empty())
        if (Error e = toDevice(Pointers[i], t.bytes().data(), t.bytes().size(),
                               Stream))
          return e;
      break;
    }
    }
  }

  return Error::success();
}

/// Pinned staging per function: its arguments, results and reported
/// gradients at fixed offsets.
Error CudaExecutor::allocateStaging() {
  for (const PlanFunction &f : ThePlan.Functions) {
    Staging s;
    auto add = [&](std::vector<uint64_t> &offsets, int buffer) {
      offsets.push_back(s.Bytes);
      s.Bytes = alignTo(s.Bytes + ThePlan.Buffers[buffer].sizeInBytes(), 64);
    };
    for (int b : f.Args)
      add(s.Args, b);
    for (int b : f.Results)
      add(s.Results, b);
    for (const KernelCall &c : f.Calls)
      if (c.Kind == OpKind::ParamGrad)
        add(s.Grads, c.Inputs[0]);
    void *p = nullptr;
    if (Error e = hostAlloc(&p, s.Bytes))
      return e;
    s.Base = static_cast<uint8_t *>(p);
    Stagings[f.Name] = std::move(s);
  }
  return Error::success();
}

Error CudaExecutor::allocate() {
  if (Error e = openDevice())
    return e;
  if (Error e = joinRanks())
    return e;
  uint64_t align = std::max<uint64_t>(ThePlan.Alignment, 256);
  StateOffsets = ThePlan.stateOffsets();
  uint64_t arena = StateOffsets.back();
  uint64_t workspace = arena + ThePlan.ArenaBytes;
  uint64_t blas = alignTo(workspace + ThePlan.WorkspaceBytes, align);
  uint64_t constants = alignTo(blas + ThePlan.LibraryBytes, align);
  // Where each constant goes.
  std::vector<uint64_t> constantAt(ThePlan.Buffers.size(), 0);
  uint64_t end = constants;
  for (size_t i = 0; i < ThePlan.Buffers.size(); ++i)
    if (ThePlan.Placements[i].Where == Placement::Kind::Constant) {
      constantAt[i] = end;
      end = alignTo(end + ThePlan.Buffers[i].sizeInBytes(), align);
    }
  uint64_t stepAt = end;
  Total = stepAt + align;
  void *base = nullptr;
  if (Error e = deviceAlloc(&base, Total))
    return e;
  Base = static_cast<uint8_t *>(base);
  Workspace = Base + workspace;
  BlasWorkspace = Base + blas;
  StepOnDevice = reinterpret_cast<uint64_t *>(Base + stepAt);
  void *stepStaging = nullptr;
  if (Error e = hostAlloc(&stepStaging, sizeof(uint64_t)))
    return e;
  StepStaging = static_cast<uint64_t *>(stepStaging);
  // The host pool, laid out as the report counts it (HostPeakBytes).
  uint64_t hostArena = ThePlan.hostStateBytes();
  uint64_t hostWorkspace = hostArena + ThePlan.HostArenaBytes;
  HostTotal = hostWorkspace + ThePlan.HostWorkspaceBytes;
  if (HostTotal) {
    void *host = nullptr;
    if (Error e = hostAlloc(&host, HostTotal))
      return fail("cannot allocate the plan's " + formatBytes(HostTotal) +
                  " of pinned host memory: " + llvm::toString(std::move(e)));
    HostBase = static_cast<uint8_t *>(host);
    HostWorkspace = HostBase + hostWorkspace;
    std::memset(HostBase, 0, hostArena);
  }

  // State starts zeroed; constants are uploaded once.
  if (Error e = fillZero(Base, arena, Stream))
    return e;
  if (Error e = placeBuffers(arena, hostArena, constantAt))
    return e;
  if (Error e = allocateStaging())
    return e;
  return synchronize(Stream);
}

void CudaExecutor::callViews(
    const KernelCall &c, bool host,
    llvm::SmallVectorImpl<kernels::TensorView> &ins,
    llvm::SmallVectorImpl<kernels::TensorView> &outs,
    llvm::SmallVectorImpl<const Tensor *> &constants) const {
  for (int b : c.Inputs) {
    ins.push_back(host ? hostView(b) : view(b));
    constants.push_back(b >= 0 ? HostConstants[b] : nullptr);
  }
  for (int b : c.Outputs)
    outs.push_back(host ? hostView(b) : view(b));
  if (c.State >= 0) // update ops write their slots in place
    for (int s :
         llvm::concat<const int>(llvm::makeArrayRef(c.State), c.MoreStates)) {
      const TensorType &t = ThePlan.States[s].Type;
      outs.push_back(kernels::TensorView{t.dtype(), t.shape(), state(s)});
    }
}

Error CudaExecutor::runHostCall(const PlanFunction &f, const KernelCall &c) {
  switch (c.Kind) {
  case OpKind::Read:
    if (readCopies(c.Attrs))
      std::memmove(Pointers[c.Outputs[0]], state(c.State), stateBytes(c.State));
    return Error::success();
  case OpKind::Assign:
    if (Pointers[c.Inputs[0]] != state(c.State))
      std::memmove(state(c.State), hostView(c.Inputs[0]).Data,
                   stateBytes(c.State));
    return Error::success();
  case OpKind::Constant:
    return Error::success();
  default:
    break;
  }
  llvm::SmallVector<kernels::TensorView, 4> ins, outs;
  llvm::SmallVector<const Tensor *, 4> constants;
  callViews(c, /*host=*/true, ins, outs, constants);
  HostKernelCall call{
      {c.Op, ins, outs, c.Attrs, 0, HostWorkspace, ThePlan.HostWorkspaceBytes},
      StepStaging,
      Options.Seed,
      c.randomStream(),
      constants};
  if (Error e = runOnHost(call))
    return fail("@" + f.Name + " call " + llvm::Twine(c.Id) +
                " (on the host): " + llvm::toString(std::move(e)));
  return Error::success();
}

void CudaExecutor::runHostTask(const PlanFunction &f, const KernelCall &c) {
  if (!HostError.empty())
    return;
  if (Error e = runHostCall(f, c))
    HostError = llvm::toString(std::move(e));
}

#if !defined(HEADROOM_CUDA_EMULATED)
static void CUDART_CB hostTaskEntry(void *data) {
  auto *task = static_cast<CudaExecutor::HostTask *>(data);
  task->Self->runHostTask(*task->F, *task->C);
}
#endif

Error CudaExecutor::runHost(const PlanFunction &f, const KernelCall &c) {
  bool nothing = c.Kind == OpKind::Constant ||
                 (c.Kind == OpKind::Read && !readCopies(c.Attrs));
  if (nothing)
    return Error::success();
#if defined(HEADROOM_CUDA_EMULATED)
  runHostTask(f, c);
  return Error::success();
#else
  std::unique_ptr<HostTask> &task = HostTasks[&c];
  if (!task)
    task.reset(new HostTask{this, &f, &c});
  return check(cudaLaunchHostFunc(static_cast<cudaStream_t>(Current),
                                  hostTaskEntry, task.get()),
               "queueing a host call");
#endif
}

Error CudaExecutor::runCall(const PlanFunction &f, const KernelCall &c,
                            const Staging &s, unsigned &grad) {
  if (c.Host)
    return runHost(f, c);
  switch (c.Kind) {
  case OpKind::ToHost:
    return toHost(Pointers[c.Outputs[0]], Pointers[c.Inputs[0]],
                  ThePlan.Buffers[c.Inputs[0]].sizeInBytes(), Current);
  case OpKind::ToDevice:
    return toDevice(Pointers[c.Outputs[0]], hostView(c.Inputs[0]).Data,
                    ThePlan.Buffers[c.Inputs[0]].sizeInBytes(), Current);
  case OpKind::Read:
    if (readCopies(c.Attrs) && stateBytes(c.State))
      return onDevice(Pointers[c.Outputs[0]], state(c.State),
                      stateBytes(c.State), Stream);
    return Error::success();
  case OpKind::Assign:
    if (stateBytes(c.State) && Pointers[c.Inputs[0]] != state(c.State))
      return onDevice(state(c.State), Pointers[c.Inputs[0]],
                      stateBytes(c.State), Stream);
    return Error::success();
  case OpKind::ParamGrad: {
    uint64_t bytes = ThePlan.Buffers[c.Inputs[0]].sizeInBytes();
    unsigned at = grad++;
    if (bytes)
      return toHost(s.Base + s.Grads[at], Pointers[c.Inputs[0]], bytes, Stream);
    return Error::success();
  }
  case OpKind::Constant:
    return Error::success();
  default:
    break;
  }
  if (isCollective(c.Kind))
    if (Error e = runCollectiveCall(c))
      return fail("@" + f.Name + " call " + llvm::Twine(c.Id) + " (" + c.Op +
                  "): " + llvm::toString(std::move(e)));
  if (isCollective(c.Kind))
    return Error::success();
  llvm::SmallVector<kernels::TensorView, 4> ins, outs;
  llvm::SmallVector<const Tensor *, 4> constants;
  callViews(c, /*host=*/false, ins, outs, constants);
  KernelContext ctx{
      {c.Op, ins, outs, c.Attrs, 0, Workspace, ThePlan.WorkspaceBytes}};
  ctx.Stream = Stream;
  ctx.BlasLt = BlasLt;
  ctx.BlasWorkspace = BlasWorkspace;
  ctx.BlasWorkspaceBytes = ThePlan.LibraryBytes;
  ctx.Step = StepOnDevice;
  ctx.RunSeed = Options.Seed;
  ctx.RandomStream = c.randomStream();
  ctx.Constants = constants;
  if (Error e = runKernel(ctx))
    return fail("@" + f.Name + " call " + llvm::Twine(c.Id) + ": " +
                llvm::toString(std::move(e)));
  return Error::success();
}

/// A plan for several ranks: the NCCL communicator (on the GPU), made from a
/// unique id rank 0 draws and broadcasts over the MPI job.
Error CudaExecutor::joinRanks() {
  if (ThePlan.Ranks <= 1)
    return Error::success();
  if (!Options.Comm || Options.Comm->size() != ThePlan.Ranks)
    return fail("the plan is for " + llvm::Twine(ThePlan.Ranks) +
                " ranks and the executor was given none");
#if !defined(HEADROOM_CUDA_EMULATED)
  // NCCL's kernels cannot be captured in this executor's graphs alongside
  // its copy-stream events; collectives run call by call.
  Options.CudaGraphs = false;
  ncclUniqueId id;
  if (Options.Comm->rank() == 0)
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
      return fail(llvm::Twine("NCCL: ") + ncclGetErrorString(r));
  if (Error e = Options.Comm->broadcast(&id, sizeof(id), 0))
    return e;
  if (ncclResult_t r = ncclCommInitRank(&Nccl, int(ThePlan.Ranks), id,
                                        int(Options.Comm->rank()));
      r != ncclSuccess)
    return fail(llvm::Twine("NCCL: cannot join the ranks: ") +
                ncclGetErrorString(r));
#endif
  return Error::success();
}

#if !defined(HEADROOM_CUDA_EMULATED)
/// NCCL's type of `t` (a float type: the verifier's rule).
ncclDataType_t ncclType(DType t) {
  switch (t) {
  case DType::F64:
    return ncclFloat64;
  case DType::F16:
    return ncclFloat16;
  case DType::BF16:
    return ncclBfloat16;
  case DType::U8:
    return ncclUint8;
  default:
    return ncclFloat32;
  }
}
#endif

/// Collective `c` (compiler/Collectives.h). On the GPU NCCL's collectives
/// take equal shards: a tensor whose size the ranks do not divide goes
/// through the workspace the cuda target declared for it, padded
/// (kernels/cuda/CudaTarget.cpp, workspaceBytes).
Error CudaExecutor::runCollectiveCall(const KernelCall &c) {
  CollectiveArgs a = collectiveArgs(
      ThePlan, c, [&](int i) -> void * { return state(i); },
      [&](int b) { return Pointers[b]; });
  const TensorType &inType = *a.InType, &outType = *a.OutType;
  void *in = a.In, *out = a.Out;
#if defined(HEADROOM_CUDA_EMULATED)
  return runCollective(*Options.Comm, c, inType, in, outType, out, nullptr);
#else
  // The copy stream for an overlapped one (compiler/Streams.h).
  cudaStream_t stream = static_cast<cudaStream_t>(Current);
  unsigned ranks = ThePlan.Ranks;
  DType t = outType.dtype();
  uint64_t size = dtypeSize(t);
  auto nccl = [](ncclResult_t r) {
    return r == ncclSuccess
               ? Error::success()
               : fail(llvm::Twine("NCCL: ") + ncclGetErrorString(r));
  };
  auto op = [&]() {
    auto it = c.Attrs.find("op");
    return it != c.Attrs.end() && it->second.asString() == "mean" ? ncclAvg
                                                                  : ncclSum;
  };
  switch (c.Kind) {
  case OpKind::AllReduce:
  case OpKind::AllReduceState:
    return nccl(ncclAllReduce(in, out, size_t(outType.numElements()),
                              ncclType(t), op(), Nccl, stream));
  case OpKind::Broadcast: {
    int root = int(c.Attrs.at("root").asInt());
    return nccl(ncclBroadcast(in, out, size_t(outType.numElements()),
                              ncclType(t), root, Nccl, stream));
  }
  case OpKind::ReduceScatter: {
    int64_t n = inType.numElements(), s = outType.numElements();
    const void *from = in;
    if (n != s * int64_t(ranks)) { // padded with zeros in the workspace
      if (Error e = onDevice(Workspace, in, uint64_t(n) * size, stream))
        return e;
      if (Error e = fillZero(Workspace + n * size,
                             uint64_t(s * ranks - n) * size, stream))
        return e;
      from = Workspace;
    }
    return nccl(ncclReduceScatter(from, out, size_t(s), ncclType(t), op(), Nccl,
                                  stream));
  }
  case OpKind::AllGather:
  case OpKind::AllGatherState: {
    int64_t n = outType.numElements(), s = inType.numElements();
    void *to = n == s * int64_t(ranks) ? out : Workspace;
    if (Error e =
            nccl(ncclAllGather(in, to, size_t(s), ncclType(t), Nccl, stream)))
      return e;
    return to == out ? Error::success()
                     : onDevice(out, Workspace, uint64_t(n) * size, stream);
  }
  default:
    return fail(c.Op + " is not a collective");
  }
#endif
}

/// The function's calls on their streams (compiler/Streams.h): kernels on
/// the compute stream; transfers, host calls and overlapped collectives on
/// the copy stream, which
/// first waits for the compute calls scheduled before it; a compute call
/// waits for the copy call its plan names; the compute stream joins the
/// copy stream at the end. The emulator runs them in order.
Error CudaExecutor::runCalls(const PlanFunction &f, const Staging &s) {
  unsigned grad = 0;
#if defined(HEADROOM_CUDA_EMULATED)
  for (const KernelCall &c : f.Calls)
    if (Error e = runCall(f, c, s, grad))
      return e;
#else
  const FunctionEvents *ev = nullptr;
  if (auto it = Events.find(f.Name); it != Events.end())
    ev = &it->second;
  auto record = [](cudaEvent_t e, void *stream) {
    return check(cudaEventRecord(e, static_cast<cudaStream_t>(stream)),
                 "recording an event");
  };
  auto waitOn = [](void *stream, cudaEvent_t e) {
    return check(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), e, 0),
                 "waiting for an event");
  };
  bool computeSinceWait = true; // the copy stream has not joined yet
  int waited = -1;
  for (size_t i = 0; i < f.Calls.size(); ++i) {
    const KernelCall &c = f.Calls[i];
    if (ev && c.onCopyStream()) {
      if (computeSinceWait) {
        if (Error e = record(ev->Progress[i], Stream))
          return e;
        if (Error e = waitOn(CopyStream, ev->Progress[i]))
          return e;
        computeSinceWait = false;
      }
      Current = CopyStream;
      Error e = runCall(f, c, s, grad);
      Current = Stream;
      if (e)
        return e;
      if (Error e = record(ev->Done[i], CopyStream))
        return e;
      continue;
    }
    if (ev && c.WaitFor > waited) {
      if (Error e = waitOn(Stream, ev->Done[c.WaitFor]))
        return e;
      waited = c.WaitFor;
    }
    if (Error e = runCall(f, c, s, grad))
      return e;
    computeSinceWait = true;
  }
  if (ev) {
    if (Error e = record(ev->End, CopyStream))
      return e;
    if (Error e = waitOn(Stream, ev->End))
      return e;
  }
#endif
  for (size_t i = 0; i < f.Results.size(); ++i)
    if (uint64_t bytes = ThePlan.Buffers[f.Results[i]].sizeInBytes())
      if (Error e = toHost(s.Base + s.Results[i], Pointers[f.Results[i]], bytes,
                           Stream))
        return e;
  return Error::success();
}

/// Uploads the arguments and the step, then runs `f`: its CUDA graph
/// (captured on the first run), or its calls one by one.
Error CudaExecutor::launch(const PlanFunction &f, const Staging &s,
                           llvm::ArrayRef<const Tensor *> args) {
  for (size_t i = 0; i < args.size(); ++i)
    if (!args[i]->bytes().empty()) {
      std::memcpy(s.Base + s.Args[i], args[i]->bytes().data(),
                  args[i]->bytes().size());
      if (Error e = toDevice(Pointers[f.Args[i]], s.Base + s.Args[i],
                             args[i]->bytes().size(), Stream))
        return e;
    }
  *StepStaging = Step;
  if (Error e = toDevice(StepOnDevice, StepStaging, sizeof(uint64_t), Stream))
    return e;

#if defined(HEADROOM_CUDA_EMULATED)
  if (Error e = runCalls(f, s))
    return e;
#else
  if (!Options.CudaGraphs) {
    if (Error e = runCalls(f, s))
      return e;
  } else {
    auto it = Graphs.find(f.Name);
    if (it == Graphs.end()) {
      cudaStream_t stream = static_cast<cudaStream_t>(Stream);
      if (Error e = check(
              cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
              "capturing a CUDA graph"))
        return e;
      Error failed = runCalls(f, s);
      cudaGraph_t graph = nullptr;
      cudaError_t ended = cudaStreamEndCapture(stream, &graph);
      if (failed) {
        if (graph)
          cudaGraphDestroy(graph);
        return failed;
      }
      if (Error e = check(ended, "capturing a CUDA graph"))
        return e;
      cudaGraphExec_t exec;
      cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      if (Error e = check(made, "instantiating a CUDA graph"))
        return e;
      it = Graphs.emplace(f.Name, exec).first;
    }
    if (Error e = check(
            cudaGraphLaunch(it->second, static_cast<cudaStream_t>(Stream)),
            "launching a CUDA graph"))
      return e;
  }
#endif
  return Error::success();
}

llvm::Expected<std::vector<Tensor>>
CudaExecutor::run(llvm::StringRef function,
                  llvm::ArrayRef<const Tensor *> args) {
  const PlanFunction *f = ThePlan.function(function);
  if (!f)
    return fail("the plan has no function @" + function);
  if (args.size() != f->Args.size())
    return fail("@" + function + " takes " + llvm::Twine(f->Args.size()) +
                " arguments, got " + llvm::Twine(args.size()));
  for (size_t i = 0; i < args.size(); ++i) {
    const TensorType &want = ThePlan.Buffers[f->Args[i]];
    if (args[i]->type() != want)
      return fail("argument " + llvm::Twine(i) + " of @" + function + " is " +
                  args[i]->type().str() + ", expected " + want.str());
  }
  const Staging &s = Stagings.at(f->Name);
  Gradients.clear();
  HostError.clear();
  if (Error e = useDevice(Options.CudaDevice))
    return e;
  if (Error e = launch(*f, s, args)) {
    settle(Stream);
    return e;
  }
  if (Error e = synchronize(Stream)) {
    settle(Stream);
    return fail("@" + function + ": " + llvm::toString(std::move(e)));
  }
  if (!HostError.empty())
    return fail(HostError);
  ++Step;

  unsigned grad = 0;
  for (const KernelCall &c : f->Calls)
    if (c.Kind == OpKind::ParamGrad) {
      const TensorType &t = ThePlan.Buffers[c.Inputs[0]];
      const uint8_t *p = s.Base + s.Grads[grad++];
      Gradients[ThePlan.States[c.State].Name] =
          Tensor(t, std::vector<uint8_t>(p, p + t.sizeInBytes()));
    }
  std::vector<Tensor> results;
  for (size_t i = 0; i < f->Results.size(); ++i) {
    const TensorType &t = ThePlan.Buffers[f->Results[i]];
    const uint8_t *p = s.Base + s.Results[i];
    results.emplace_back(t, std::vector<uint8_t>(p, p + t.sizeInBytes()));
  }
  return results;
}

Error CudaExecutor::checkStateRange(size_t index, uint64_t offset,
                                    uint64_t size) const {
  if (index >= ThePlan.States.size())
    return fail("no state slot " + llvm::Twine(index));
  uint64_t bytes = stateBytes(index);
  if (offset > bytes || size > bytes - offset)
    return fail("bytes [" + llvm::Twine(offset) + ", " +
                llvm::Twine(offset + size) + ") are outside state @" +
                ThePlan.States[index].Name + " (" + llvm::Twine(bytes) +
                " bytes)");
  return Error::success();
}

Error CudaExecutor::readStateBytes(size_t index, uint64_t offset,
                                   llvm::MutableArrayRef<uint8_t> out) const {
  if (Error e = checkStateRange(index, offset, out.size()))
    return e;
  if (Error e = useDevice(Options.CudaDevice))
    return e;
  if (ThePlan.States[index].Host) {
    if (Error e = synchronize(Stream))
      return e;
    std::memcpy(out.data(), state(index) + offset, out.size());
    return Error::success();
  }
  if (Error e = toHost(out.data(), state(index) + offset, out.size(), Stream))
    return e;
  return synchronize(Stream);
}

Error CudaExecutor::writeStateBytes(size_t index, uint64_t offset,
                                    llvm::ArrayRef<uint8_t> bytes) {
  if (Error e = checkStateRange(index, offset, bytes.size()))
    return e;
  if (Error e = useDevice(Options.CudaDevice))
    return e;
  if (ThePlan.States[index].Host) {
    if (Error e = synchronize(Stream))
      return e;
    std::memcpy(state(index) + offset, bytes.data(), bytes.size());
    return Error::success();
  }
  if (Error e =
          toDevice(state(index) + offset, bytes.data(), bytes.size(), Stream))
    return e;
  return synchronize(Stream);
}

llvm::Expected<Tensor> CudaExecutor::readState(llvm::StringRef name) const {
  int i = ThePlan.stateIndex(name);
  if (i < 0)
    return fail("no state slot @" + name);
  std::vector<uint8_t> bytes(stateBytes(i));
  if (Error e = readStateBytes(i, 0, bytes))
    return e;
  return Tensor(ThePlan.States[i].Type, std::move(bytes));
}

Error CudaExecutor::writeState(llvm::StringRef name, const Tensor &value) {
  int i = ThePlan.stateIndex(name);
  if (i < 0)
    return fail("no state slot @" + name);
  if (value.type() != ThePlan.States[i].Type)
    return fail("state @" + name + " is " + ThePlan.States[i].Type.str() +
                ", got " + value.type().str());
  return writeStateBytes(i, 0, value.bytes());
}

} // namespace
} // namespace HR_CUDA_BUILD
} // namespace cuda
} // namespace headroom

llvm::Expected<std::unique_ptr<Executor>>
#if defined(HEADROOM_CUDA_EMULATED)
headroom::createEmulatedCudaExecutor(Plan plan,
                                     const ExecutorOptions &options) {
#else
headroom::createCudaExecutor(Plan plan, const ExecutorOptions &options) {
#endif
  if (plan.TargetName != "cuda")
    return cuda::fail("the plan is for --device " + plan.TargetName +
                      ", not cuda");
  auto e = std::make_unique<cuda::CudaExecutor>(std::move(plan), options);
  if (Error err = e->allocate())
    return err;
  return std::unique_ptr<Executor>(std::move(e));
}

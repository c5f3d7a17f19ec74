//===- Executor.h - Running a plan ----------------------------------------===//
//
// The interface every backend implements. An executor owns the state and the
// buffers of one plan, allocated once when it is created, and runs the plan's
// functions. State starts zeroed; the caller loads initial weights with
// writeState (runtime/ModelIO.h does it from the source ONNX model).
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_RUNTIME_EXECUTOR_H
#define HEADROOM_RUNTIME_EXECUTOR_H

#include "compiler/Plan.h"

#include <map>
#include <memory>

namespace headroom {

class Communicator;

struct ExecutorOptions {
  /// Seeds random ops (Dropout). Each run of a function advances the step;
  /// the seed of a call is derived from (Seed, step, call), so runs replay.
  uint64_t Seed = 0;
  /// cuda: the device to run on, and whether functions are captured as CUDA
  /// graphs and replayed (off: every call is launched each run).
  int CudaDevice = 0;
  bool CudaGraphs = true;
  /// The ranks a plan with Ranks > 1 runs with (runtime/Communicator.h):
  /// its collectives go through it. Not owned.
  Communicator *Comm = nullptr;
};

class Executor {
public:
  virtual ~Executor() = default;

  /// Runs `function` on `args` (one tensor per argument, types matching).
  virtual llvm::Expected<std::vector<Tensor>>
  run(llvm::StringRef function, llvm::ArrayRef<const Tensor *> args) = 0;

  virtual llvm::Expected<Tensor> readState(llvm::StringRef name) const = 0;
  virtual llvm::Error writeState(llvm::StringRef name, const Tensor &value) = 0;
  /// Bytes [offset, offset + out.size()) of state slot `index` (of
  /// plan().States), copied to host memory. Checkpoints stream state through
  /// a small buffer with these, so saving one needs no slot-sized copy.
  virtual llvm::Error
  readStateBytes(size_t index, uint64_t offset,
                 llvm::MutableArrayRef<uint8_t> out) const = 0;
  virtual llvm::Error writeStateBytes(size_t index, uint64_t offset,
                                      llvm::ArrayRef<uint8_t> bytes) = 0;

  /// Gradients that ParamGrad nodes produced in the last run, by state name
  /// (a plan without an optimizer reports its gradients this way).
  virtual const std::map<std::string, Tensor> &gradients() const = 0;

  /// The step the next run uses for random seeds (runs advance it by one);
  /// setting it replays a step's random numbers exactly.
  virtual void setStep(uint64_t step) = 0;

  /// The bytes the executor allocated for the plan on its device (state,
  /// arena, workspace, library bytes, and on cuda the uploaded constants).
  virtual uint64_t deviceBytes() const { return 0; }
  /// The pinned host memory it allocated for the plan's host pool
  /// (offload; 0 without one).
  virtual uint64_t hostPoolBytes() const { return 0; }

  const Plan &plan() const { return ThePlan; }

protected:
  explicit Executor(Plan plan) : ThePlan(std::move(plan)) {}
  Plan ThePlan;
};

/// The reference backend: kernels/cpu, GEMM through OpenBLAS.
llvm::Expected<std::unique_ptr<Executor>>
createCpuExecutor(Plan plan, const ExecutorOptions &options = {});

/// The executor of the plan's target (Plan::TargetName); a target this build
/// cannot run is an error naming it. A cuda plan runs on the GPU, or on the
/// emulator (runtime/cuda/CudaExecutor.h) when HEADROOM_CUDA_EMULATOR=1.
llvm::Expected<std::unique_ptr<Executor>>
createExecutor(Plan plan, const ExecutorOptions &options = {});

/// What `--device auto` means on this machine: the target plans are made
/// for when the user names none: "cuda" when this headroom has the CUDA
/// backend and a GPU is present, else "cpu".
std::string defaultDevice();

} // namespace headroom

#endif // HEADROOM_RUNTIME_EXECUTOR_H

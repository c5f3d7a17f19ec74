//===- Trainer.h - Compile a training step and run it ---------------------===//
//
// What `headroom train` does, as a library (the e2e tests use it directly):
// import the model, build the step (canonicalize, autodiff, optimizer,
// canonicalize), lower it, create the executor, load the initial weights.
// A Trainer can also start from a plan that was compiled earlier
// (`headroom run`): stepping only needs the plan.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_RUNTIME_TRAINER_H
#define HEADROOM_RUNTIME_TRAINER_H

#include "compiler/OnnxImport.h"
#include "passes/Optimizer.h"
#include "runtime/Data.h"
#include "runtime/Executor.h"

namespace headroom {

struct TrainOptions {
  ImportOptions Import; // Batch is the batch size (of a whole step)
  OptimizerOptions Optimizer;
  /// Gradient accumulation: each step runs Accumulate micro-batches of
  /// Batch / Accumulate samples (the `accumulate` pass).
  unsigned Accumulate = 1;
  /// Whether the `schedule` pass orders the step: Auto keeps whichever plan
  /// peaks lower (always the scheduled one for lomo and adalomo); Never
  /// keeps PyTorch's order (every update after the whole backward).
  enum class ScheduleMode { Auto, Always, Never } Schedule = ScheduleMode::Auto;
  /// Without an optimizer the step only reports gradients (ParamGrad).
  bool ApplyOptimizer = true;
  /// Sets every Dropout's ratio to 0 (to reproduce references computed
  /// without dropout; the trained model is then not the one described).
  bool DisableDropout = false;
  uint64_t Seed = 0;
};

/// Imports `modelPath` (at the micro-batch size) and builds @step and the
/// functions its driver calls.
llvm::Expected<std::unique_ptr<Module>>
buildTrainingStep(llvm::StringRef modelPath, const TrainOptions &options);

/// Lowers the step as `options.Schedule` says: with Auto twice, as built and
/// after the `schedule` pass, keeping the plan with the lower peak (the pass
/// helps most steps, not all: it is a heuristic, the plan's peak is the
/// truth). lomo and adalomo always schedule: fusing the updates into the
/// backward is what those optimizers are.
llvm::Expected<Plan> lowerTrainingStep(Module &m, const TrainOptions &options);

struct StepResult {
  double Loss = 0;
  llvm::Optional<double> GradNorm; // with clipping
};

class Trainer {
public:
  /// Compiles the step from the model.
  static llvm::Expected<std::unique_ptr<Trainer>>
  create(llvm::StringRef modelPath, const TrainOptions &options);
  /// Runs a plan compiled earlier; initial weights come from `modelPath`.
  static llvm::Expected<std::unique_ptr<Trainer>>
  fromPlan(Plan plan, llvm::StringRef modelPath, uint64_t seed);

  /// Runs one step on rows order[start, start + batch) of `data`: the
  /// plan's driver, each call on the next micro-batch (or the same one).
  /// The loss is the mean over the micro-batches.
  llvm::Expected<StepResult> step(const Dataset &data,
                                  llvm::ArrayRef<int64_t> order, int64_t start);
  /// Checks that `data` feeds the step (names, types, enough samples).
  llvm::Error checkData(const Dataset &data) const;
  Executor &executor() { return *Exec; }
  /// Samples per step, and per call of a driver function.
  int64_t batch() const;
  int64_t microBatch() const;
  /// The compiled module (null for a Trainer made from a plan).
  const Module *module() const { return M.get(); }

private:
  /// The first function the driver calls (all take the same arguments).
  const PlanFunction &stepFunction() const {
    return *Exec->plan().function(Exec->plan().Driver.front().Function);
  }
  std::unique_ptr<Module> M;
  std::unique_ptr<Executor> Exec;
  uint64_t MicroBatches = 0; // consumed so far: the random step of a call
};

} // namespace headroom

#endif // HEADROOM_RUNTIME_TRAINER_H

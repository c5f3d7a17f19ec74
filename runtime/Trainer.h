//===- Trainer.h - Run a compiled training step over data -----------------===//
//
// What `headroom train` and `headroom run` do with a plan (pipeline/Compile.h
// makes it): create the executor of the plan's target, load the initial
// weights from the source model, and run the plan's driver on batch after
// batch. A Trainer only executes; it never compiles.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_RUNTIME_TRAINER_H
#define HEADROOM_RUNTIME_TRAINER_H

#include "runtime/Data.h"
#include "runtime/Executor.h"

namespace headroom {

/// Writes the state slots whose first value is not the model's (StateInit
/// zeros, or kaiming-uniform drawn from `seed` and the slot's name, the same
/// on every machine): the lora pass's adapters. Returns how many. A shard
/// gets rank `rank`'s part of the whole drawn.
llvm::Expected<unsigned> initializeNewState(Executor &exec, uint64_t seed,
                                            unsigned rank = 0);

struct StepResult {
  double Loss = 0;
  llvm::Optional<double> GradNorm; // with clipping
};

class Trainer {
public:
  /// Runs `plan`; initial weights come from `modelPath`, dropout masks
  /// from `seed`. A plan for several ranks runs as rank comm->rank() of
  /// them (each rank's dropout masks drawn from its own stream).
  static llvm::Expected<std::unique_ptr<Trainer>>
  create(Plan plan, llvm::StringRef modelPath, uint64_t seed = 0,
         Communicator *comm = nullptr);

  /// Runs one step on rows order[start, start + batch) of `data`: the
  /// plan's driver, each call on the next micro-batch (or the same one).
  /// The loss is the mean over the micro-batches. With several ranks, this
  /// rank takes its own contiguous part of those rows (rank r: rows
  /// [start + r b, start + r b + b), b = rankBatch()).
  llvm::Expected<StepResult> step(const Dataset &data,
                                  llvm::ArrayRef<int64_t> order, int64_t start);
  /// Checks that `data` feeds the step (names, types, enough samples).
  llvm::Error checkData(const Dataset &data) const;
  Executor &executor() { return *Exec; }
  /// Samples per step (over every rank), per step of this rank, and per
  /// call of a driver function.
  int64_t batch() const;
  int64_t rankBatch() const;
  int64_t microBatch() const;
  /// The ranks it runs with (null: alone).
  Communicator *communicator() const { return Comm; }
  /// Micro-batches consumed so far: the random step (Dropout's masks) of
  /// the next call. A checkpoint saves it; resuming sets it back.
  uint64_t randomStep() const { return MicroBatches; }
  void setRandomStep(uint64_t step) { MicroBatches = step; }

private:
  /// The first function the driver calls (all take the same arguments).
  const PlanFunction &stepFunction() const {
    return *Exec->plan().function(Exec->plan().Driver.front().Function);
  }
  std::unique_ptr<Executor> Exec;
  Communicator *Comm = nullptr;
  uint64_t MicroBatches = 0; // consumed so far: the random step of a call
};

} // namespace headroom

#endif // HEADROOM_RUNTIME_TRAINER_H

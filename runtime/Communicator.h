//===- Communicator.h - The ranks of a data-parallel run -----------------===//
//
// A plan compiled with --ranks N (the `data-parallel` pass) is one rank's
// part of a step that N processes run together. A Communicator is this
// process's membership: its rank, the number of ranks, and the primitives
// the collectives are made of. runCollective() gives the IR's collectives
// (compiler/Collectives.h) their meaning on host memory with them, in one
// place for every executor that runs on the host.
//
// Every reduction is a reduce-scatter (each shard summed by the one rank
// that owns it) followed, for AllReduce, by an all-gather of the summed
// shards: every rank then holds the same bits, whatever order the library
// sums in, and reruns give the same bits. bf16/f16 values are summed in f32
// and rounded once, by the shard's owner.
//
// The engine is MPI (runtime/MpiCommunicator.cpp): processes are launched
// the way MPI programs are, `mpirun -np N` or Slurm's `srun`, and a rank
// that dies takes the job down with it (the launcher stops the others; no
// rank waits forever). docs/distributed.md says why MPI and not Gloo.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_RUNTIME_COMMUNICATOR_H
#define HEADROOM_RUNTIME_COMMUNICATOR_H

#include "compiler/Plan.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace headroom {

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual unsigned rank() const = 0;
  virtual unsigned size() const = 0;
  /// This rank's place among the ranks on its machine: the GPU it uses.
  virtual unsigned localRank() const = 0;

  /// Sums every rank's `in` (sum of counts elements of `type`, f32 or f64)
  /// and leaves elements [offset r, offset r + counts[r]) of the sum in
  /// rank r's `out` (offset r = counts[0] + ... + counts[r - 1]).
  virtual llvm::Error reduceScatter(const void *in, void *out,
                                    llvm::ArrayRef<int64_t> counts,
                                    DType type) = 0;
  /// Rank r's first counts[r] elements of `in` (of elementBytes each), one
  /// after another in every rank's `out`. `in` and `out` do not overlap.
  virtual llvm::Error allGather(const void *in, void *out,
                                llvm::ArrayRef<int64_t> counts,
                                uint64_t elementBytes) = 0;
  /// Rank root's `bytes` bytes at `data`, on every rank.
  virtual llvm::Error broadcast(void *data, uint64_t bytes, unsigned root) = 0;
  /// Every rank's `mine`, in rank order (small: fingerprints, checks).
  virtual llvm::Expected<std::vector<std::string>>
  allGatherStrings(llvm::StringRef mine) = 0;
  /// Returns once every rank has called it.
  virtual llvm::Error barrier() = 0;
};

/// The MPI world this process was started in (`mpirun -np N`, `srun`; one
/// rank when started alone), joined on first use and left at exit.
llvm::Expected<Communicator *> joinMpiWorld();

/// Stops every rank of the job at once (MPI_Abort): what a rank does when
/// it fails alone, so that the others do not wait for it forever.
[[noreturn]] void abortRanks(int code);

/// The elements each rank's shard of a tensor of `elements` holds
/// (shardElements() of them, fewer or none at the end).
std::vector<int64_t> shardCounts(int64_t elements, unsigned ranks);

/// What collective `call` of `plan` works on: its operand (the slot it
/// reduces in place for AllReduceState) and its result or the slot it
/// writes, with their types; `state` and `buffer` give an executor's
/// addresses.
struct CollectiveArgs {
  const TensorType *InType = nullptr, *OutType = nullptr;
  void *In = nullptr, *Out = nullptr;
};
CollectiveArgs collectiveArgs(const Plan &plan, const KernelCall &call,
                              llvm::function_ref<void *(int)> state,
                              llvm::function_ref<void *(int)> buffer);

/// Runs collective `call` of a plan (AllReduce, AllReduceState,
/// ReduceScatter, AllGather, AllGatherState, Broadcast) on host memory:
/// `in` its operand (null for AllReduceState), `out` its result or the slot
/// it writes, `workspace` at least hostCollectiveWorkspace() bytes (null:
/// it allocates its own).
llvm::Error runCollective(Communicator &comm, const KernelCall &call,
                          const TensorType &inType, const void *in,
                          const TensorType &outType, void *out,
                          void *workspace);

/// Whether every rank compiled the same plan: each rank's fingerprint is
/// compared with rank 0's; the error names the ranks that differ (every
/// rank gets it, so every rank can stop with the same line).
llvm::Error checkSamePlan(Communicator &comm, llvm::StringRef fingerprint);

} // namespace headroom

#endif // HEADROOM_RUNTIME_COMMUNICATOR_H

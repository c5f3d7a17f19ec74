//===- Streams.h - The copy stream of a plan -------------------*- C++ -*-===//
//
// With offload (docs/offload.md) or collectives the target overlaps
// (docs/distributed.md) a step runs on two streams: the compute stream runs
// the kernels; the copy stream runs the transfers (ToHost, ToDevice), the
// host calls and those collectives, in schedule order, so a gradient's copy
// to the host and its update there, or its reduction across the ranks,
// overlap the backward of the layers after it. The two meet only where the
// schedule says:
//   - before each group of consecutive copy-stream calls, the copy stream
//     waits for every compute call scheduled before it (it never runs ahead
//     of the schedule, so it reads complete values and writes memory no
//     compute call still uses);
//   - a compute call waits for the copy call that made a value it reads,
//     for one that read a slot it writes, and for one that wrote a slot it
//     touches (a collective on state); a collective on the compute stream
//     (Target::overlapsCollective says no) waits for the copy stream's
//     collectives before it: collectives run one at a time, as issued;
//   - each group is joined by the compute stream at its first call after
//     the next group (or at the function's end): at most two groups are in
//     flight, and a device value a group reads lives, in the plan, until
//     that join. The lowering plans those lifetimes, so the bytes in flight
//     are planned bytes.
// The executor records an event after each copy call a compute call waits
// for; the emulator runs everything in order, which the plan also allows.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_STREAMS_H
#define HEADROOM_COMPILER_STREAMS_H

#include "compiler/IR.h"
#include "compiler/Pools.h"
#include "compiler/Target.h"

#include <vector>

namespace headroom {

struct StreamSchedule {
  /// Per schedule position: whether the call runs on the copy stream.
  std::vector<bool> OnCopy;
  /// Per position: for a compute call, the copy call (its position) it
  /// waits for before it runs, -1 for none.
  std::vector<int> WaitFor;
  /// Per position: for a copy call, the position of the compute call that
  /// joins it (the number of calls: the function's end).
  std::vector<int> JoinedAt;
};

/// The streams of `calls` (a function's nodes in schedule order, the
/// terminator excluded) for `target`.
StreamSchedule scheduleStreams(llvm::ArrayRef<const Node *> calls,
                               const PoolAssignment &pools,
                               const Target &target);

/// Whether `n` runs on the copy stream.
bool runsOnCopyStream(const Node &n, const PoolAssignment &pools,
                      const Target &target);

} // namespace headroom

#endif // HEADROOM_COMPILER_STREAMS_H

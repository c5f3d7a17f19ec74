//===- MemoryPlan.h - Static offsets for transient buffers ----------------===//
//
// Given every transient buffer of a step with its size and the interval of
// the schedule in which it is live, assign each an offset in one arena so
// that no two simultaneously live buffers overlap. The algorithm is "greedy
// by size" with best fit (Pisarchyk & Lee 2020, "Efficient Memory Management
// for Deep Neural Net Inference"; TFLite's arena planner): place buffers from
// the largest down, each into the smallest gap between already placed
// buffers whose lifetimes overlap it, or on top of them.
//
// The lower bound is the largest total size of buffers live at one point of
// the schedule: no assignment can use less. The planner's tests check the
// invariants (no overlap, peak >= lower bound) on hand-made and random sets.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_MEMORYPLAN_H
#define HEADROOM_COMPILER_MEMORYPLAN_H

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <vector>

namespace headroom {

struct BufferLife {
  uint64_t Size = 0;
  /// Live from schedule position First through Last, inclusive.
  int64_t First = 0, Last = 0;
};

struct ArenaAssignment {
  std::vector<uint64_t> Offsets; // per buffer, aligned
  uint64_t ArenaBytes = 0;       // the arena's size: the planned peak
  uint64_t LowerBound = 0; // max bytes simultaneously live (aligned sizes)
};

/// Every buffer's size is rounded up to `alignment` (a power of two).
ArenaAssignment planArena(llvm::ArrayRef<BufferLife> buffers,
                          uint64_t alignment = 64);

/// Max over positions of the sum of sizes live there (sizes as given).
uint64_t liveLowerBound(llvm::ArrayRef<BufferLife> buffers);

} // namespace headroom

#endif // HEADROOM_COMPILER_MEMORYPLAN_H

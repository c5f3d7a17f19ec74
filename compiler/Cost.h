//===- Cost.h - Floating-point operations of a node -----------------------===//
//
// The cost model recomputation is scored with: matrix products and
// convolutions exactly (2 per multiply-add: MatMul and Gemm 2MNK, Conv and
// its gradients 2 x output elements x input channels per group x kernel
// size), everything else one per element of its largest operand or result
// (elementwise math, reductions, norms, losses, updates), and data movement
// (reshapes, transposes, slices, casts, gathers) and state access none.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_COST_H
#define HEADROOM_COMPILER_COST_H

#include "compiler/IR.h"

#include <cstdint>

namespace headroom {

uint64_t nodeFlops(const Node &n);

} // namespace headroom

#endif // HEADROOM_COMPILER_COST_H

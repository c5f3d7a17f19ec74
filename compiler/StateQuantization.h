//===- StateQuantization.h - The 8-bit optimizer state's layout -*- C++ -*-===//
//
// `--optimizer-state int8` stores AdamW's moments as bitsandbytes' block-wise
// 8-bit optimizers do: a u8 code per element (the moment's shape) and one f32
// absmax per block of kStateBlock elements. The optimizer pass, the verifier,
// the plan-file checker and the kernels (kernels/cpu/Blockwise8bit.h) agree
// on it through these.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_STATEQUANTIZATION_H
#define HEADROOM_COMPILER_STATEQUANTIZATION_H

#include <cstdint>

namespace headroom {

/// Elements per absmax (bitsandbytes' block-wise optimizers: 256).
constexpr int64_t kStateBlock = 256;

/// The absmax slots' length for a state of `n` elements.
constexpr int64_t stateBlocks(int64_t n) {
  return (n + kStateBlock - 1) / kStateBlock;
}

} // namespace headroom

#endif // HEADROOM_COMPILER_STATEQUANTIZATION_H

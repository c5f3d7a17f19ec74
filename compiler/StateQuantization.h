//===- StateQuantization.h - The 8-bit optimizer state's layout -*- C++ -*-===//
//
// `--optimizer-state int8` stores AdamW's moments as bitsandbytes' block-wise
// 8-bit optimizers do: a u8 code per element (the moment's shape) and one f32
// absmax per block of kStateBlock elements. The optimizer pass, the verifier,
// the plan-file checker and the kernels (kernels/common/Blockwise8bit.h) agree
// on it through these.
//
// `--base-weights nf4` stores frozen matrices as bitsandbytes'
// quantize_4bit(quant_type="nf4", compress_statistics=True) does (QLoRA,
// Dettmers et al. 2023): the weight's slot keeps its name and holds the
// 4-bit codes, two per byte (the first element in the high nibble), and
// three slots beside it hold the scales: `<w>.absmax`, a u8 code per block
// of kNf4Block elements, `<w>.nested_absmax`, an f32 per kNf4NestedBlock of
// those, and `<w>.nested_offset`, one f32 (kernels/common/Nf4.h).
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_STATEQUANTIZATION_H
#define HEADROOM_COMPILER_STATEQUANTIZATION_H

#include "compiler/Types.h"

#include <cstdint>
#include <string>

namespace headroom {

/// Elements per absmax (bitsandbytes' block-wise optimizers: 256).
constexpr int64_t kStateBlock = 256;

/// The absmax slots' length for a state of `n` elements.
constexpr int64_t stateBlocks(int64_t n) {
  return (n + kStateBlock - 1) / kStateBlock;
}

/// Elements per 4-bit absmax, and 4-bit absmaxes per nested f32 absmax
/// (bitsandbytes' defaults for NF4 with double quantization).
constexpr int64_t kNf4Block = 64;
constexpr int64_t kNf4NestedBlock = 256;

/// The lengths of an NF4 weight's four slots for `n` elements.
constexpr int64_t nf4PackedBytes(int64_t n) { return (n + 1) / 2; }
constexpr int64_t nf4Blocks(int64_t n) {
  return (n + kNf4Block - 1) / kNf4Block;
}
constexpr int64_t nf4NestedBlocks(int64_t n) {
  return (nf4Blocks(n) + kNf4NestedBlock - 1) / kNf4NestedBlock;
}

/// The names of the scale slots beside an NF4 weight's codes.
inline constexpr const char *kNf4ScaleSuffixes[3] = {
    ".absmax", ".nested_absmax", ".nested_offset"};

/// What is wrong with the operands of Nf4Dequantize (codes, absmax, nested
/// absmax, offset) for a result of type `result`, or "" when nothing is:
/// the verifier and both kernels ask.
inline std::string nf4OperandError(llvm::ArrayRef<TensorType> operands,
                                   const TensorType &result) {
  if (operands.size() != 4)
    return "needs 4 operands (codes, absmax, nested_absmax, nested_offset)";
  DType t = result.dtype();
  if (t != DType::F32 && t != DType::BF16 && t != DType::F16)
    return "result " + result.str() + " is not f32, bf16 or f16";
  int64_t n = result.numElements();
  const TensorType want[4] = {TensorType(DType::U8, {nf4PackedBytes(n)}),
                              TensorType(DType::U8, {nf4Blocks(n)}),
                              TensorType(DType::F32, {nf4NestedBlocks(n)}),
                              TensorType(DType::F32, {1})};
  const char *what[4] = {"codes", "absmax", "nested_absmax", "nested_offset"};
  for (unsigned i = 0; i < 4; ++i)
    if (operands[i] != want[i])
      return std::string(what[i]) + " " + operands[i].str() + " should be " +
             want[i].str() + " for " + result.str();
  return "";
}

} // namespace headroom

#endif // HEADROOM_COMPILER_STATEQUANTIZATION_H

//===- Nf4.h - 4-bit NormalFloat weights, one definition -------*- C++ -*-===//
//
// QLoRA's frozen base (Dettmers et al. 2023, "QLoRA: Efficient Finetuning
// of Quantized LLMs") stored as bitsandbytes stores it:
// quantize_4bit(quant_type="nf4", blocksize=64, compress_statistics=True).
//
//   codes   each element / its block's absmax (blocks of kNf4Block), the
//           index of the nearest of the 16 NF4 values (kNf4Map), two per
//           byte, the first element in the high nibble;
//   scales  the absmaxes less their mean (the offset), each a u8 code of
//           bitsandbytes' signed dynamic map (kernels/common/DynamicMap.h)
//           relative to an f32 absmax per kNf4NestedBlock of them.
//
// Dequantized, element i is kNf4Map[code] * (map[absmax code] *
// nested_absmax + offset), each operation in f32, rounded once to the
// compute type. The codes follow bitsandbytes' own quantizer (its CPU
// path, backends/default/ops.py: x * (1 / absmax) clamped to [-1, 1], the
// count of midpoints between neighbouring NF4 values below it; a block cut
// short at the end divides instead), and the absmaxes' codes its
// kQuantizeBlockwise kernel (the nearest code of x * (1 / absmax) by
// Blockwise8bit.h's search). The offset is the mean of the absmaxes summed
// in double. dequantizeNf4 is host-device: kernels/cpu/Update.cpp and
// kernels/cuda/Update.cu share it; quantizeNf4 runs on the host when a run
// starts (runtime/ModelIO.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_COMMON_NF4_H
#define HEADROOM_KERNELS_COMMON_NF4_H

#include "compiler/StateQuantization.h"
#include "kernels/common/Blockwise8bit.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace headroom {

/// bitsandbytes' NF4 values (get_4bit_type("nf4")): quantiles of N(0, 1)
/// scaled to [-1, 1], with an exact 0. Also the device's copy's source.
#define HR_NF4_MAP                                                             \
  -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,    \
      -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f,     \
      0.0f, 0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f,  \
      0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,         \
      0.7229568362236023f, 1.0f
inline constexpr float kNf4Map[16] = {HR_NF4_MAP};

/// The 4-bit code of element i of `packed`.
HR_Q8_HD inline unsigned nf4CodeAt(const uint8_t *packed, int64_t i) {
  uint8_t byte = packed[i / 2];
  return i % 2 ? byte & 0xF : byte >> 4;
}

/// Element i's block absmax: its code's value times the nested absmax,
/// plus the offset (bitsandbytes' dequantize_blockwise, then `+= offset`).
HR_Q8_HD inline float nf4BlockAbsmax(const float *signedMap,
                                     const uint8_t *absmaxCodes,
                                     const float *nested, float offset,
                                     int64_t block) {
  float scaled =
      signedMap[absmaxCodes[block]] * nested[block / kNf4NestedBlock];
  return scaled + offset;
}

/// Element i dequantized, in f32.
HR_Q8_HD inline float dequantizeNf4(const float *nf4Map, const float *signedMap,
                                    const uint8_t *packed,
                                    const uint8_t *absmaxCodes,
                                    const float *nested, float offset,
                                    int64_t i) {
  float absmax =
      nf4BlockAbsmax(signedMap, absmaxCodes, nested, offset, i / kNf4Block);
  return nf4Map[nf4CodeAt(packed, i)] * absmax;
}

/// The NF4 code of x in [-1, 1]: how many midpoints between neighbouring
/// values lie below it (torch.bucketize over them; a tie goes down).
inline unsigned nearestNf4(float x) {
  unsigned code = 0;
  for (unsigned j = 0; j + 1 < 16; ++j)
    code += x > (kNf4Map[j] + kNf4Map[j + 1]) / 2.0f;
  return code;
}

/// An NF4 weight's four slots (StateQuantization.h).
struct Nf4Slots {
  uint8_t *Packed;      // nf4PackedBytes(n)
  uint8_t *AbsmaxCodes; // nf4Blocks(n)
  float *Nested;        // nf4NestedBlocks(n)
  float *Offset;        // 1
};

/// Quantizes n f32 elements into `out`.
inline void quantizeNf4(const float *w, int64_t n, const Nf4Slots &out) {
  int64_t blocks = nf4Blocks(n);
  std::vector<float> absmax(size_t(blocks), 0.0f);
  std::fill(out.Packed, out.Packed + nf4PackedBytes(n), uint8_t(0));
  double sum = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    int64_t first = b * kNf4Block, len = std::min(kNf4Block, n - first);
    float am = 0.0f;
    for (int64_t j = 0; j < len; ++j)
      am = std::max(am, std::fabs(w[first + j]));
    absmax[size_t(b)] = am;
    sum += am;
    float safe = std::max(am, 1e-38f), inv = 1.0f / safe;
    for (int64_t j = 0; j < len; ++j) {
      float x = len == kNf4Block ? w[first + j] * inv : w[first + j] / safe;
      unsigned code = nearestNf4(std::min(1.0f, std::max(-1.0f, x)));
      int64_t i = first + j;
      out.Packed[i / 2] |= uint8_t(i % 2 ? code : code << 4);
    }
  }
  if (n % 2) // the pad element is a 0
    out.Packed[n / 2] |= uint8_t(nearestNf4(0.0f));
  float offset = float(sum / double(std::max<int64_t>(blocks, 1)));
  *out.Offset = offset;
  for (int64_t nb = 0; nb < nf4NestedBlocks(n); ++nb) {
    int64_t first = nb * kNf4NestedBlock,
            len = std::min(kNf4NestedBlock, blocks - first);
    float am = 0.0f;
    for (int64_t j = 0; j < len; ++j)
      am = std::max(am, std::fabs(absmax[size_t(first + j)] - offset));
    out.Nested[nb] = am;
    float inv = 1.0f / am;
    for (int64_t j = 0; j < len; ++j)
      out.AbsmaxCodes[first + j] = nearestCode<true>(
          kSignedDynamicMap, (absmax[size_t(first + j)] - offset) * inv);
  }
}

} // namespace headroom

#endif // HEADROOM_KERNELS_COMMON_NF4_H

//===- Blockwise8bit.h - 8-bit optimizer state, one definition --*- C++ -*-===//
//
// AdamW's moments stored as bitsandbytes' 8-bit optimizers store them
// (Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization";
// the algorithm of its kOptimizerStatic8bit2StateBlockwise kernel): the
// state is cut into blocks of kStateBlock elements; each element is a u8
// index into a dynamic map (kernels/common/DynamicMap.h: signed for the first
// moment, unsigned for the second) and each block has one f32 absmax, so an
// element's value is map[code] * absmax. A step dequantizes a block, updates
// it in f32, takes the new absmax of each moment over the block, and stores
// each element as the code nearest value / absmax (bitsandbytes' binary
// search and midpoint rule); a first-moment code whose sign differs from
// the value's moves one step towards it.
//
// Written once for both backends: kernels/cpu/Update.cpp runs it per block
// on the host and kernels/cuda/Update.cu a thread block per block, with the
// maps in shared memory; the functions are host-device when nvcc compiles
// them. The division is exact where bitsandbytes' kernel uses __fdividef, so
// the CPU and the GPU store the same codes.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_COMMON_BLOCKWISE8BIT_H
#define HEADROOM_KERNELS_COMMON_BLOCKWISE8BIT_H

#include "compiler/StateQuantization.h"
#include "kernels/common/DynamicMap.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define HR_Q8_HD __host__ __device__
#else
#define HR_Q8_HD
#endif

namespace headroom {

/// The index of the code nearest x in the sorted 256-entry `map`:
/// bitsandbytes' quantize_2D (seven halvings from the middle, then the
/// nearer neighbour by the midpoint; a NaN x gives 0).
template <bool Signed>
HR_Q8_HD inline uint8_t nearestCode(const float *map, float x) {
  int pivot = 127, upperPivot = 255, lowerPivot = 0;
  float lower = Signed ? -1.0f : 0.0f, upper = 1.0f;
  float val = map[pivot];
  for (int i = 64; i > 0; i >>= 1) {
    if (x > val) {
      lowerPivot = pivot;
      lower = val;
      pivot += i;
    } else {
      upperPivot = pivot;
      upper = val;
      pivot -= i;
    }
    val = map[pivot];
  }
  if (x > val)
    return uint8_t(x > (upper + val) * 0.5f ? upperPivot : pivot);
  return uint8_t(x < (lower + val) * 0.5f ? lowerPivot : pivot);
}

/// Whether x's sign bit is set (-0 and negative NaNs included).
HR_Q8_HD inline bool signBit(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits >> 31;
}

/// The first moment's code for `value` in a block of absmax `absmax`: the
/// nearest code, moved one step when its sign differs from the value's (a
/// code of 0 for a negative value; 0/0 for an all-zero block wraps as
/// bitsandbytes' does, to a code that absmax 0 makes 0 again).
HR_Q8_HD inline uint8_t quantizeSigned(const float *map, float value,
                                       float absmax) {
  uint8_t c = nearestCode<true>(map, value / absmax);
  if (signBit(map[c]) != signBit(value))
    c = value > 0.0f ? uint8_t(c + 1) : uint8_t(c - 1);
  return c;
}

/// The second moment's code for `value` (never negative).
HR_Q8_HD inline uint8_t quantizeUnsigned(const float *map, float value,
                                         float absmax) {
  return nearestCode<false>(map, value / absmax);
}

/// AdamWUpdate's arithmetic on one element, in f32 (each product rounded on
/// its own, as kernels/cpu/Update.cpp's adamwUpdate): the new moments from
/// the dequantized old ones, and the new weight from the new moments.
struct AdamWStep {
  float Decay, B1, C1, B2, C2, Eps, StepSize, SqrtBc2, Scale;
  bool Decays, Scaled;

#if defined(__CUDA_ARCH__)
  __device__ static float mul(float a, float b) { return __fmul_rn(a, b); }
#else
  HR_Q8_HD static float mul(float a, float b) { return a * b; }
#endif

  HR_Q8_HD float grad(float g) const { return Scaled ? mul(g, Scale) : g; }
  HR_Q8_HD float firstMoment(float m, float d) const {
    return mul(m, B1) + mul(d, C1);
  }
  HR_Q8_HD float secondMoment(float v, float d) const {
    return mul(v, B2) + mul(mul(d, d), C2);
  }
  HR_Q8_HD float weight(float w, float m, float v) const {
    if (Decays)
      w = mul(w, Decay);
    float denom = ::sqrtf(v) / SqrtBc2 + Eps;
    return w - mul(m / denom, StepSize);
  }
};

} // namespace headroom

#endif // HEADROOM_KERNELS_COMMON_BLOCKWISE8BIT_H

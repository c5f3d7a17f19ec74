//===- Device.h - What CUDA kernel bodies are written with ------*- C++ -*-===//
//
// kernels/cuda is compiled twice: by nvcc for the GPU (the `headroom_cuda`
// library) and by the host C++ compiler as an emulator (the
// `headroom_cuda_emulated` library), where a launch is a loop and device
// memory is host memory. Kernel bodies are written once, as functors whose
// operator() is HR_HD, so the emulated build runs the very arithmetic the GPU
// runs and the CPU suite checks it against kernels/cpu on every machine.
//
// This header holds what those bodies need and nothing that pulls in LLVM
// or the CUDA runtime:
//  - HR_HD and the inline namespace that keeps the two builds' symbols
//    apart (both may be linked into one test binary);
//  - the storage types f16, bf16 and bool, with conversions equal bit for
//    bit to compiler/Types.cpp's (rounding to nearest even);
//  - Elem<T>: load to the type a kernel computes in (float for f16/bf16),
//    store back;
//  - atomicAdd for every float storage type (scatter-add gradients);
//  - the Dropout counter hash, equal to kernels/cpu's, so masks agree.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_CUDA_DEVICE_H
#define HEADROOM_KERNELS_CUDA_DEVICE_H

#include "kernels/common/Storage.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#define HR_HD __host__ __device__
#else
#define HR_HD
#endif

// True while compiling device code (nvcc's device pass).
#if defined(__CUDA_ARCH__)
#define HR_ON_DEVICE 1
#else
#define HR_ON_DEVICE 0
#endif

// The namespace each build's symbols live in: headroom::cuda::device (nvcc)
// or headroom::cuda::emulated (host). Code names them as headroom::cuda::X.
#if defined(HEADROOM_CUDA_EMULATED)
#define HR_CUDA_BUILD emulated
#else
#define HR_CUDA_BUILD device
#endif

namespace headroom {
namespace cuda {
inline namespace HR_CUDA_BUILD {

using kernels::BFloat16; // kernels/common/Storage.h
using kernels::Bool;
using kernels::Half;

HR_HD inline float bitsToFloat(uint32_t b) {
#if HR_ON_DEVICE
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, 4);
  return f;
#endif
}

HR_HD inline uint32_t floatToBits(float f) {
#if HR_ON_DEVICE
  return __float_as_uint(f);
#else
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
#endif
}

HR_HD inline float halfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0x1f)
    return bitsToFloat(sign | 0x7f800000u | (man << 13));
  if (exp != 0)
    return bitsToFloat(sign | ((exp + 112) << 23) | (man << 13));
  // Zero or subnormal: man * 2^-24, exact in float.
  float v = float(man) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

HR_HD inline uint16_t floatToHalf(float f) {
  uint32_t x = floatToBits(f);
  uint16_t sign = (x >> 16) & 0x8000;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) // inf or nan
    return sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0);
  if (absx >= 0x477ff000u) // rounds to >= 65520: overflow to inf
    return sign | 0x7c00;
  if (absx < 0x38800000u) // subnormal or zero: round to nearest even
    return sign | static_cast<uint16_t>(rintf(bitsToFloat(absx) * 16777216.0f));
  uint32_t man = absx & 0x7fffff;
  uint32_t exp = (absx >> 23) - 112;
  uint32_t h = (exp << 10) | (man >> 13);
  uint32_t rest = man & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
    ++h;
  return sign | static_cast<uint16_t>(h);
}

HR_HD inline float bf16ToFloat(uint16_t h) {
  return bitsToFloat(uint32_t(h) << 16);
}

HR_HD inline uint16_t floatToBf16(float f) {
  uint32_t x = floatToBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) // nan stays a quiet nan
    return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

/// How a kernel computes on storage type T: in Elem<T>::Compute (float for
/// f16 and bf16, bool for bool, T itself otherwise).
template <typename T> struct Elem {
  using Compute = T;
  HR_HD static T load(T v) { return v; }
  HR_HD static T store(T v) { return v; }
};
template <> struct Elem<Half> {
  using Compute = float;
  HR_HD static float load(Half v) { return halfToFloat(v.Bits); }
  HR_HD static Half store(float v) { return {floatToHalf(v)}; }
};
template <> struct Elem<BFloat16> {
  using Compute = float;
  HR_HD static float load(BFloat16 v) { return bf16ToFloat(v.Bits); }
  HR_HD static BFloat16 store(float v) { return {floatToBf16(v)}; }
};
template <> struct Elem<Bool> {
  using Compute = bool;
  HR_HD static bool load(Bool v) { return v.Value != 0; }
  HR_HD static Bool store(bool v) { return {static_cast<uint8_t>(v)}; }
};

/// The type reductions of T accumulate in: double for f64, float for the
/// other floats.
template <typename T>
using Accum = std::conditional_t<std::is_same_v<T, double>, double, float>;

/// Loads p[i] in its compute type / stores v there.
template <typename T>
HR_HD inline typename Elem<T>::Compute ld(const T *p, int64_t i) {
  return Elem<T>::load(p[i]);
}
template <typename T>
HR_HD inline void st(T *p, int64_t i, typename Elem<T>::Compute v) {
  p[i] = Elem<T>::store(v);
}

/// *p += v, atomically on the GPU (where scatter-add kernels run threads
/// that may hit one element); a plain add in the emulator, whose loops are
/// sequential. f16 and bf16 go through a compare-and-swap of the 32-bit word
/// that holds them, so they need no sm_80 intrinsics and round like a store.
template <typename T> HR_HD inline void atomicAddElem(T *p, float v);

template <> HR_HD inline void atomicAddElem<float>(float *p, float v) {
#if HR_ON_DEVICE
  atomicAdd(p, v);
#else
  *p += v;
#endif
}

HR_HD inline void atomicAddF64(double *p, double v) {
#if HR_ON_DEVICE
  atomicAdd(p, v);
#else
  *p += v;
#endif
}

template <typename T> HR_HD inline void atomicAdd16(T *p, float v) {
#if HR_ON_DEVICE
  uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  unsigned int *word = reinterpret_cast<unsigned int *>(addr & ~uintptr_t(3));
  unsigned shift = (addr & 2) ? 16 : 0;
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    T cur{static_cast<uint16_t>((assumed >> shift) & 0xffff)};
    uint16_t next = Elem<T>::store(Elem<T>::load(cur) + v).Bits;
    unsigned int updated =
        (assumed & ~(0xffffu << shift)) | (unsigned(next) << shift);
    old = atomicCAS(word, assumed, updated);
  } while (old != assumed);
#else
  *p = Elem<T>::store(Elem<T>::load(*p) + v);
#endif
}
template <> HR_HD inline void atomicAddElem<Half>(Half *p, float v) {
  atomicAdd16(p, v);
}
template <> HR_HD inline void atomicAddElem<BFloat16>(BFloat16 *p, float v) {
  atomicAdd16(p, v);
}

/// splitmix64's output function at counter i of stream `seed`: the Dropout
/// hash of kernels/cpu/Elementwise.cpp, bit for bit.
HR_HD inline uint64_t counterHash(uint64_t seed, uint64_t i) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// The seed of a call at a step (the executors' mixSeed): Dropout kernels
/// compute it on the device from the step counter the executor keeps there,
/// so a CUDA graph captured once draws new masks every step.
HR_HD inline uint64_t mixSeed(uint64_t seed, uint64_t step, uint64_t call) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (step * 1000003ull + call + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

} // namespace HR_CUDA_BUILD
} // namespace cuda
} // namespace headroom

#endif // HEADROOM_KERNELS_CUDA_DEVICE_H

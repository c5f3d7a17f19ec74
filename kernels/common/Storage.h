//===- Storage.h - f16, bf16 and bool elements as stored --------*- C++ -*-===//
//
// The storage types of the elements C++ has no type for, shared by
// kernels/cpu and kernels/cuda (both builds): their bits, nothing more.
// Each backend says how it computes on them (Elem<T>: KernelUtil.h,
// Device.h). No LLVM, no CUDA: the device build includes it.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_COMMON_STORAGE_H
#define HEADROOM_KERNELS_COMMON_STORAGE_H

#include <cstdint>

namespace headroom {
namespace kernels {

/// IEEE half, bfloat16 and bool elements as stored: their bits.
struct Half {
  uint16_t Bits;
};
struct BFloat16 {
  uint16_t Bits;
};
struct Bool {
  uint8_t Value;
};

} // namespace kernels
} // namespace headroom

#endif // HEADROOM_KERNELS_COMMON_STORAGE_H

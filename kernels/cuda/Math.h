//===- Math.h - Float math for kernel bodies, host and device ---*- C++ -*-===//
//
// One name per function for float and double, resolving to the CUDA math
// library on the device and to <cmath> in the emulator (whose float
// functions round alike to within their documented ulps, not bit for bit:
// the GPU suite compares with tolerances).
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_CUDA_MATH_H
#define HEADROOM_KERNELS_CUDA_MATH_H

#include "kernels/cuda/Device.h"

namespace headroom {
namespace cuda {
inline namespace HR_CUDA_BUILD {

#define HR_MATH1(NAME, FN)                                                     \
  HR_HD inline float NAME(float x) { return ::FN##f(x); }                      \
  HR_HD inline double NAME(double x) { return ::FN(x); }
#include "kernels/common/Math.def"
#undef HR_MATH1
HR_HD inline float mpow(float x, float y) { return ::powf(x, y); }
HR_HD inline double mpow(double x, double y) { return ::pow(x, y); }

} // namespace HR_CUDA_BUILD
} // namespace cuda
} // namespace headroom

#endif // HEADROOM_KERNELS_CUDA_MATH_H

//===- VecMath.h - Vectorized math for the CPU kernels ----------*- C++ -*-===//
//
// glibc's expf, tanhf and erff are scalar calls, and the kernels are
// compiled for baseline x86-64: the loss over a vocabulary, softmax and gelu
// spent a fifth of a GPT step in them. These loops compute Cephes'
// single-precision polynomials (exp: range reduction by ln 2 and a degree-6
// polynomial; tanh: an odd polynomial below 0.625, 1 - 2 / (exp(2x) + 1)
// above) within 2 ulp of the correctly rounded result, and headroom's own
// erf fit within 3, branch-free so that the compiler vectorizes them; each
// is compiled for AVX-512, AVX2 and the baseline, and the CPU picks
// (function multiversioning). NaN stays NaN, exp overflows to
// inf and underflows to 0 below -87.3 (where expf gives subnormals).
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_CPU_VECMATH_H
#define HEADROOM_KERNELS_CPU_VECMATH_H

#include <cstdint>

namespace headroom {
namespace cpu {

/// y[i] = exp(x[i] - shift), i < n; returns the sum of the y[i] (float
/// accumulation). y may be x.
float expShifted(const float *x, float shift, float *y, int64_t n);
/// The sum of exp(x[i] - shift), i < n, without storing them.
float sumExpShifted(const float *x, float shift, int64_t n);
/// y[i] = exp(x[i]) * scale; y may be x.
void expScaled(const float *x, float scale, float *y, int64_t n);
/// y[i] = exp((x[i] - shift) - logSum) * scale: a softmax row times a
/// factor, rounded as exp of the stored log-softmax would be; y may be x.
void softmaxScaled(const float *x, float shift, float logSum, float scale,
                   float *y, int64_t n);
/// y[i] = tanh(x[i]); y may be x.
void tanhArray(const float *x, float *y, int64_t n);
/// y[i] = erf(x[i]) (BERT's and ViT's gelu), within 3 ulp; y may be x.
void erfArray(const float *x, float *y, int64_t n);
/// y[i] = 1 / (1 + exp(-x[i])), in the form whose exp cannot overflow; y may
/// be x.
void sigmoidArray(const float *x, float *y, int64_t n);
/// The largest x[i], i < n (-inf for n = 0); NaN when some x[i] is NaN.
float maxArray(const float *x, int64_t n);

} // namespace cpu
} // namespace headroom

#endif // HEADROOM_KERNELS_CPU_VECMATH_H

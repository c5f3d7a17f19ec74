//===- VecMath.cpp - Vectorized exp and tanh for the CPU kernels ----------===//
#include "kernels/cpu/VecMath.h"

#include <cstring>

using namespace headroom;
using namespace headroom::cpu;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HR_MULTIVERSION                                                        \
  __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HR_MULTIVERSION
#endif

namespace {

inline float bitsToFloat(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

/// Cephes expf, branch-free.
inline float vexp(float x) {
  const float hi = 88.7228391f, lo = -87.3365447f;
  float c = x > hi ? hi : x;
  c = c < lo ? lo : c;
  c = x != x ? 0.0f : c; // NaN: computed as 0, replaced by x at the end
  //                       (converting NaN to an integer is undefined)
  // k = round(c / ln 2) by adding and subtracting 1.5 * 2^23 (no libm
  // call, so the loop vectorizes); r = c - k ln 2 in two parts.
  const float magic = 12582912.0f;
  float k = (c * 1.44269504088896341f + magic) - magic;
  float r = c - k * 0.693359375f;
  r = r - k * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float e = p * r * r + r + 1.0f;
  // 2^k by the exponent bits; k in [-126, 128] after the clamp, and 2^128
  // (x at the top of the range) is split as 2 * 2^127.
  int32_t ki = static_cast<int32_t>(k);
  float twoK = bitsToFloat(static_cast<uint32_t>(ki - (ki > 127) + 127) << 23);
  e = e * twoK * (ki > 127 ? 2.0f : 1.0f);
  e = x > hi ? __builtin_inff() : e;
  e = x < lo ? 0.0f : e;
  return x != x ? x : e;
}

/// Cephes tanhf, branch-free.
inline float vtanh(float x) {
  float a = x < 0 ? -x : x;
  float z = x * x;
  float small =
      ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) *
            z +
        1.33314422036e-1f) *
           z -
       3.33332819422e-1f) *
          z * x +
      x;
  float big = 1.0f - 2.0f / (vexp(a + a) + 1.0f);
  big = x < 0 ? -big : big;
  float y = a < 0.625f ? small : big;
  return x != x ? x : y;
}

/// erf, branch-free: x P(x^2) below 1; 1 - exp(-x^2) R(1/x) from 1 to 4
/// (erfc(x) exp(x^2) is smooth there); 1 beyond (erfc(4) is under half an
/// ulp of 1). P (degree 6) and R (degree 9) are least-squares fits of erf(x)
/// / x and erfc(x) exp(x^2) in relative error (scripts/fit-erf.py; within
/// 3 ulp of the correctly rounded erf, tested).
inline float verf(float x) {
  float a = x < 0 ? -x : x;
  float u = a * a;
  float p = 7.970399020e-05f;
  p = p * u - 8.043200360e-04f;
  p = p * u + 5.191816017e-03f;
  p = p * u - 2.685550228e-02f;
  p = p * u + 1.128362194e-01f;
  p = p * u - 3.761262894e-01f;
  p = p * u + 1.128379107e+00f;
  float small = p * a;
  // The tail, on a clamped copy so that it stays finite where unused.
  float c = a < 1.0f ? 1.0f : (a > 4.0f ? 4.0f : a);
  float t = 1.0f / c;
  float r = 3.398285806e-02f;
  r = r * t - 1.969700605e-01f;
  r = r * t + 4.776808023e-01f;
  r = r * t - 5.880765915e-01f;
  r = r * t + 2.796934247e-01f;
  r = r * t + 2.087779790e-01f;
  r = r * t - 3.685731292e-01f;
  r = r * t + 1.900796779e-02f;
  r = r * t + 5.619484186e-01f;
  r = r * t + 1.119291846e-04f;
  float big = 1.0f - vexp(-(c * c)) * r;
  big = a >= 4.0f ? 1.0f : big;
  float y = a < 1.0f ? small : big;
  y = x < 0 ? -y : y;
  return x != x ? x : y;
}

} // namespace

HR_MULTIVERSION void headroom::cpu::erfArray(const float *x, float *y,
                                             int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    y[i] = verf(x[i]);
}

HR_MULTIVERSION float headroom::cpu::expShifted(const float *x, float shift,
                                                float *y, int64_t n) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) {
    float e = vexp(x[i] - shift);
    y[i] = e;
    sum += e;
  }
  return sum;
}

HR_MULTIVERSION float headroom::cpu::sumExpShifted(const float *x, float shift,
                                                   int64_t n) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i)
    sum += vexp(x[i] - shift);
  return sum;
}

HR_MULTIVERSION void headroom::cpu::expScaled(const float *x, float scale,
                                              float *y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    y[i] = vexp(x[i]) * scale;
}

HR_MULTIVERSION void headroom::cpu::softmaxScaled(const float *x, float shift,
                                                  float logSum, float scale,
                                                  float *y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    y[i] = vexp((x[i] - shift) - logSum) * scale;
}

HR_MULTIVERSION void headroom::cpu::tanhArray(const float *x, float *y,
                                              int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    y[i] = vtanh(x[i]);
}

HR_MULTIVERSION void headroom::cpu::sigmoidArray(const float *x, float *y,
                                                 int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    float e = vexp(v < 0 ? v : -v); // exp(-|x|) <= 1
    float s = v >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
    y[i] = v != v ? v : s;
  }
}

HR_MULTIVERSION float headroom::cpu::maxArray(const float *x, int64_t n) {
  // Two max reductions over floats (GCC vectorizes those; a bool flag
  // beside the max kept the loop scalar): the max, and 1 where x is NaN.
  float m = -__builtin_inff(), nan = 0;
#pragma omp simd reduction(max : m, nan)
  for (int64_t i = 0; i < n; ++i) {
    m = x[i] > m ? x[i] : m;
    float isNan = x[i] != x[i] ? 1.0f : 0.0f;
    nan = isNan > nan ? isNan : nan;
  }
  return nan != 0 ? __builtin_nanf("") : m;
}

//===- KernelTestUtil.h - Helpers shared by the kernel unit tests ---------===//
#ifndef HEADROOM_TEST_UNIT_KERNELS_KERNELTESTUTIL_H
#define HEADROOM_TEST_UNIT_KERNELS_KERNELTESTUTIL_H

#include "kernels/cpu/Kernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace headroom {
namespace cpu {

/// Runs kernel `op`; "" on success, else the kernel's error message.
inline std::string runKernel(llvm::StringRef op, std::vector<TensorView> ins,
                             std::vector<TensorView> outs,
                             const AttributeMap &attrs = {},
                             uint64_t seed = 0) {
  KernelFn fn = lookupKernel(op);
  if (!fn)
    return "no kernel for " + op.str();
  KernelContext ctx{op, ins, outs, attrs, seed};
  llvm::Error e = fn(ctx);
  return e ? llvm::toString(std::move(e)) : "";
}

/// `n` values uniform in [lo, hi), the same for the same seed.
inline std::vector<double> randomData(int64_t n, unsigned seed, double lo = -2,
                                      double hi = 2) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double &x : v)
    x = dist(rng);
  return v;
}

/// An f64 tensor owned by the test; uniform in [-1, 1) when seed != 0.
struct T64 {
  std::vector<int64_t> Shape;
  std::vector<double> Data;
  explicit T64(std::vector<int64_t> shape, unsigned seed = 0)
      : Shape(std::move(shape)) {
    int64_t n = 1;
    for (int64_t d : Shape)
      n *= d;
    Data = seed ? randomData(n, seed, -1, 1) : std::vector<double>(n, 0.0);
  }
  TensorView view() { return TensorView{DType::F64, Shape, Data.data()}; }
};

inline double dot(const std::vector<double> &a, const std::vector<double> &b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i)
    s += a[i] * b[i];
  return s;
}

/// Checks `analytic` = d(loss)/d(param) by central differences. In f64 with
/// h = 1e-6 the truncation error is O(h^2 f''') and the rounding error
/// ~ 1e-16 |loss| / h ~ 1e-9 for the losses of these tests (|loss| <= 10);
/// 1e-6 (1 + |numeric|) is far above both and far below a real mistake (a
/// missed tap, a wrong divisor or a dropped term changes an entry by ~0.1).
inline void expectGradient(std::vector<double> &param,
                           const std::function<double()> &loss,
                           const std::vector<double> &analytic,
                           const char *what) {
  const double h = 1e-6, tol = 1e-6;
  ASSERT_EQ(param.size(), analytic.size()) << what;
  for (size_t i = 0; i < param.size(); ++i) {
    double saved = param[i];
    param[i] = saved + h;
    double plus = loss();
    param[i] = saved - h;
    double minus = loss();
    param[i] = saved;
    double numeric = (plus - minus) / (2 * h);
    ASSERT_NEAR(analytic[i], numeric, tol * (1 + std::fabs(numeric)))
        << what << " element " << i;
  }
}

} // namespace cpu
} // namespace headroom

#endif // HEADROOM_TEST_UNIT_KERNELS_KERNELTESTUTIL_H

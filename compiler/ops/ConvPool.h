//===- ConvPool.h - Convolution and pooling windows, for every user -------===//
//
// The spatial geometry of Conv, its gradients and the pools, stated once:
// per spatial axis, input index of tap j of output o is
// o * Strides - PadBegin + j * Dilations, from the attributes (strides,
// dilations, pads, auto_pad) and checked against the output size the
// compiler gave. Conv's operands (x [N, C, In...], w [M, C/G, Kernel...],
// y [N, M, Out...]) are checked here too. The CPU and CUDA kernels take
// their geometry from here.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_OPS_CONVPOOL_H
#define HEADROOM_COMPILER_OPS_CONVPOOL_H

#include "compiler/Attribute.h"
#include "compiler/Types.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <cstdint>

namespace headroom {
namespace ops {

using WindowDims = llvm::SmallVector<int64_t, 3>;

/// The window of one op, per spatial axis.
struct Window {
  WindowDims In, Kernel, Out, Strides, Dilations, PadBegin, PadEnd;

  unsigned rank() const { return In.size(); }
  int64_t inSize() const;
  int64_t kernelSize() const;
  int64_t outSize() const;
  /// A 1x1 window with unit strides and no padding: im2col is the identity.
  bool isPointwise() const;
};

/// The window of an op with attributes `attrs`, spatial input `in`, kernel
/// `kernel` and the compiler's output `out`; an error when they disagree.
/// `ceilMode` allows the pools' rounded-up output size.
llvm::Expected<Window> makeWindow(const AttributeMap &attrs,
                                  llvm::ArrayRef<int64_t> in,
                                  llvm::ArrayRef<int64_t> kernel,
                                  llvm::ArrayRef<int64_t> out, bool ceilMode);

/// Conv's operands: x [N, C, In...], w [M, C/G, Kernel...], y [N, M, Out...].
struct ConvShape {
  int64_t N = 0, C = 0, M = 0, G = 1;
  Window W;
  int64_t cg() const { return C / G; }
  int64_t mg() const { return M / G; }
  /// 2 x N x M x outputs x (C/G x kernel taps): the forward's products,
  /// and each gradient's (dx and dw compute as many).
  uint64_t flops() const {
    return 2 * uint64_t(N) * M * W.outSize() * cg() * W.kernelSize();
  }
};

/// Conv's (and its gradients') geometry from the types of x, w and y.
llvm::Expected<ConvShape> convShape(const AttributeMap &attrs,
                                    const TensorType &x, const TensorType &w,
                                    const TensorType &y);

/// A pool's window from input `x` [N, C, In...] and output `y`
/// [N, C, Out...]; kernel_shape is required, ceil_mode allowed.
llvm::Expected<Window> poolWindow(const AttributeMap &attrs,
                                  const TensorType &x, const TensorType &y);

/// ceil(a / b) for b > 0 and any a.
inline int64_t ceilDiv(int64_t a, int64_t b) {
  return a >= 0 ? (a + b - 1) / b : -(-a / b);
}

} // namespace ops
} // namespace headroom

#endif // HEADROOM_COMPILER_OPS_CONVPOOL_H

//===- Norm.h - The normalizations' shapes, for every user ------*- C++ -*-===//
//
// LayerNormalization sees its input as rows ([Rows, Cols], Cols the product
// of the axes from `axis` on); BatchNormalization as N blocks of C channels
// of Spatial elements. The CPU and CUDA kernels take their sizes and their
// operand checks from here (kernels/common/NormCheck.h adds the op's name).
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_OPS_NORM_H
#define HEADROOM_COMPILER_OPS_NORM_H

#include "compiler/Types.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>

namespace headroom {
namespace ops {

struct NormRows {
  int64_t Rows = 1, Cols = 1;
};

/// LayerNormalization's input of `shape` around `axis` (negative counts from
/// the end), or "axis A is out of range for rank R".
llvm::Expected<NormRows> layerNormRows(llvm::ArrayRef<int64_t> shape,
                                       int64_t axis);

struct ChannelShape {
  int64_t N = 1, C = 1, Spatial = 1;
};

/// BatchNormalization's [N, C, D1, ...] input; an error below rank 2.
llvm::Expected<ChannelShape> channelShape(llvm::ArrayRef<int64_t> shape);

/// A norm's parameter operand `i` (scale, bias, mean, var) of type `p`: `n`
/// elements of a type the backend computes (`computed`).
llvm::Error checkNormParam(unsigned i, const TensorType &p, int64_t n,
                           bool computed);

} // namespace ops
} // namespace headroom

#endif // HEADROOM_COMPILER_OPS_NORM_H

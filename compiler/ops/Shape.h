//===- Shape.h - The shape family's rules, for every user -------*- C++ -*-===//
//
// What Slice, Transpose, Concat and Split mean, stated once: from the
// operands' shapes, the attributes and the constant operands to a
// description of the elements moved (a slice box, a permutation, the split
// of an axis) or an error saying what is wrong. Constant folding, the CPU
// kernels and the CUDA kernels take their sizes from here; the kernels name
// the op in front of the message (KernelContext::unsupported), folding
// names it too. Only shapes: no element is read or written here.
//
// compiler/MatMulShape.h and compiler/AttentionShape.h are the same kind of
// rule for their ops.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_OPS_SHAPE_H
#define HEADROOM_COMPILER_OPS_SHAPE_H

#include "compiler/Types.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/Optional.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <cstdint>

namespace headroom {
namespace ops {

using Dims = llvm::SmallVector<int64_t, 6>;

/// Row-major strides, in elements, of a tensor of `shape`.
Dims contiguousStrides(llvm::ArrayRef<int64_t> shape);

/// The product of `dims` (1 for none).
int64_t product(llvm::ArrayRef<int64_t> dims);

/// `axis` (negative counts from the end) as an index in [0, rank), or the
/// error "axis A is out of range for rank R".
llvm::Expected<int64_t> normalizeAxis(int64_t axis, int64_t rank);

/// The elements Slice reads from data of some shape: a box of Shape
/// elements starting at index Begin with step Step along each axis.
struct SliceBox {
  Dims Begin, Step, Shape;
};

/// Slice's (and SliceGrad's) box in data of `dataShape`, from its starts,
/// ends, and optional axes (default 0, 1, ...) and steps (default 1).
/// Clamping follows the ONNX spec: starts into [0, dim] (negative step:
/// [0, dim-1]), ends into [0, dim] (negative step: [-1, dim-1]), after
/// adding dim to negative values. Errors: lengths that differ, an axis out
/// of range or repeated, a step of 0.
llvm::Expected<SliceBox>
sliceBox(llvm::ArrayRef<int64_t> dataShape, llvm::ArrayRef<int64_t> starts,
         llvm::ArrayRef<int64_t> ends,
         llvm::Optional<llvm::ArrayRef<int64_t>> axes,
         llvm::Optional<llvm::ArrayRef<int64_t>> steps);

/// The box's first element's offset and its strides, in elements of data
/// with `dataShape` (row-major).
int64_t boxLayout(const SliceBox &box, llvm::ArrayRef<int64_t> dataShape,
                  Dims &strides);

/// Transpose's permutation of an operand of rank `rank`: `perm` when given,
/// else the axes reversed; an error unless it is a permutation.
llvm::Expected<Dims> transposePerm(llvm::Optional<llvm::ArrayRef<int64_t>> perm,
                                   int64_t rank);

/// Transpose of an operand of `shape` by `perm` (transposePerm's): the
/// result's shape, and per result axis the operand's stride (row-major).
struct TransposeLayout {
  Dims Shape, SourceStrides;
};
TransposeLayout transposeLayout(llvm::ArrayRef<int64_t> shape,
                                llvm::ArrayRef<int64_t> perm);

/// Split's optional sizes operand against its results along `axis`: one
/// size per result, each the result's size on the axis.
llvm::Error checkSplitSizes(llvm::ArrayRef<int64_t> sizes, int64_t axis,
                            const TensorType &x,
                            llvm::ArrayRef<TensorType> results);

/// Concat's result (`whole`) from its operands, or Split's operand from its
/// results (`parts`), along `axis`: every part has the whole's rank and
/// element type and its sizes off the axis, and their axis sizes sum to the
/// whole's. Returns the normalized axis.
llvm::Expected<int64_t> joinAxis(int64_t axis, const TensorType &whole,
                                 llvm::ArrayRef<TensorType> parts);

/// GatherND's and ScatterND's index tuples into `data` from `indices`
/// (batch_dims b: the first b axes of both are paired, each tuple indexes
/// within its batch element): K coordinates per tuple, Slice elements per
/// tuple, BatchStride elements per batch element of data, PerBatch tuples
/// per batch element, and SliceShape, the shape GatherND gives (the
/// indices' shape without its last axis, then data's after the K-th).
struct NdIndexing {
  int64_t Batch = 0, K = 0, Slice = 1, BatchStride = 0, PerBatch = 0;
  Dims SliceShape;
};
llvm::Expected<NdIndexing> ndIndexing(const TensorType &data,
                                      const TensorType &indices,
                                      int64_t batchDims);

/// Gather's result along normalized `axis`: data's dims before the axis,
/// then the indices' shape, then data's after it.
Dims gatherShape(llvm::ArrayRef<int64_t> data, llvm::ArrayRef<int64_t> indices,
                 int64_t axis);

/// Reshape of `x` to the requested dims (ONNX: 0 copies the operand's
/// dimension unless `allowZero`, one -1 is inferred). Errors: a 0 past the
/// operand's rank, two -1s, a negative size, a count that changes.
llvm::Expected<Dims> reshapeShape(const TensorType &x,
                                  llvm::ArrayRef<int64_t> request,
                                  bool allowZero);
/// Unsqueeze: `shape` with a 1 inserted at each of `axes` (of the result's
/// rank). Errors: an axis out of range or repeated.
llvm::Expected<Dims> unsqueezeShape(llvm::ArrayRef<int64_t> shape,
                                    llvm::ArrayRef<int64_t> axes);
/// Squeeze: `x`'s shape without `axes` (each must be 1), or without every 1
/// when no axes are given.
llvm::Expected<Dims> squeezeShape(const TensorType &x,
                                  llvm::Optional<llvm::ArrayRef<int64_t>> axes);
/// A reduction's axes of an operand of rank `rank`, normalized: `axes`, or
/// every axis when none are given (none at all, an identity, with
/// `noopWithEmptyAxes`).
llvm::Expected<Dims> reduceAxes(llvm::ArrayRef<int64_t> axes, int64_t rank,
                                bool noopWithEmptyAxes);
/// The shape a reduction over (normalized) `axes` leaves: each reduced axis
/// kept as 1 with `keepDims`, else dropped.
Dims reducedShape(llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<int64_t> axes,
                  bool keepDims);

} // namespace ops
} // namespace headroom

#endif // HEADROOM_COMPILER_OPS_SHAPE_H

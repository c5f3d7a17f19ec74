//===- KernelUtil.h - Helpers both backends' kernels share ------*- C++ -*-===//
//
// Three small pieces most kernel families need:
//
//  - Storage types for the element types C++ has no arithmetic type for
//    (Half, BFloat16, Bool) and Elem<T>, which says how a kernel loads an
//    element of storage type T into the type it computes in and stores it
//    back. For float, double and the integer types both are the identity, so
//    templated loops compile to plain (vectorizable) loops.
//  - dispatchType<Types>(ctx, dtype, fn): calls fn(TypeTag<T>{}) with the
//    storage type of a run-time element type, or returns the kernel's
//    "element type X is not supported" error.
//  - BroadcastLoops<N>: the loop nest of an elementwise op whose N operands
//    broadcast to its result (numpy rules), with dimensions merged so that the
//    common cases run as long contiguous rows.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_COMMON_KERNELUTIL_H
#define HEADROOM_KERNELS_COMMON_KERNELUTIL_H

#include "compiler/ops/Shape.h"
#include "kernels/common/Kernel.h"
#include "kernels/common/Storage.h"

#include "llvm/ADT/SmallVector.h"

#include <array>
#include <cassert>
#include <cstdint>

namespace headroom {
namespace kernels {

/// splitmix64's output function at counter i of stream `seed`: a uniform
/// 64-bit value per (seed, element), so a mask depends on the seed alone and
/// not on how the elements are split among threads. Dropout keeps element i
/// when the top 32 bits are >= ratio * 2^32 (FusedAttention draws its
/// probabilities' mask the same way; kernels/cuda/Device.h has the twin).
inline uint64_t counterHash(uint64_t seed, uint64_t i) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// `x` as [Outer, N, Inner] around `axis` (compiler/Types.h), or the op's
/// error naming the axis; the CPU and CUDA kernels of ops along an axis.
inline llvm::Expected<AxisSplit>
splitAtAxis(const KernelContext &ctx, const TensorView &x, int64_t axis) {
  auto s = axisSplit(x.Shape, axis);
  if (!s)
    return ctx.unsupported(llvm::toString(s.takeError()));
  return s;
}

/// Whether optional operand `i` is given. A zero-element operand has no
/// buffer, so its null Data does not mean "absent" (an absent view is rank 0).
inline bool hasOperand(const KernelContext &ctx, unsigned i) {
  return i < ctx.Inputs.size() &&
         (ctx.Inputs[i].present() || ctx.Inputs[i].numElements() == 0);
}

/// An op's rule (compiler/ops/) as the kernel's error, the op named.
template <typename T>
llvm::Expected<T> orUnsupported(const KernelContext &ctx, llvm::Expected<T> v) {
  if (!v)
    return ctx.unsupported(llvm::toString(v.takeError()));
  return v;
}

/// The elements of integer operand `i` (i32 or i64), read on the host: the
/// operand itself on the CPU, its plan constant on a device (`what` names
/// it when it is not one).
llvm::Expected<std::vector<int64_t>>
intOperand(const KernelContext &ctx, unsigned i, llvm::StringRef what);

/// Slice's (and SliceGrad's) box in data of `dataShape`
/// (compiler/ops/Shape.h); its operands (starts, ends, axes?, steps?)
/// begin at operand 1.
llvm::Expected<ops::SliceBox> sliceBox(const KernelContext &ctx,
                                       llvm::ArrayRef<int64_t> dataShape);

/// The reductions' axes, normalized: the `axes` operand (i64) or attribute;
/// empty with `noop` set means "copy" (noop_with_empty_axes).
llvm::Expected<std::vector<int64_t>> reduceAxes(const KernelContext &ctx,
                                                bool &noop);

/// `axis` normalized into [0, rank), or the op's error.
inline llvm::Expected<int64_t> normAxis(const KernelContext &ctx, int64_t axis,
                                        int64_t rank) {
  return orUnsupported(ctx, ops::normalizeAxis(axis, rank));
}

/// An error unless the result type has the shape the operands give.
inline llvm::Error expectResultShape(const KernelContext &ctx,
                                     const TensorView &result,
                                     llvm::ArrayRef<int64_t> shape) {
  if (result.Shape == shape)
    return llvm::Error::success();
  return ctx.unsupported("the operands give shape " + shapeString(shape) +
                         " but the result type is " + result.type().str());
}

inline llvm::Error expectSameType(const KernelContext &ctx, const TensorView &a,
                                  const TensorView &b) {
  if (a.Type == b.Type)
    return llvm::Error::success();
  return ctx.unsupported("element types " + dtypeName(a.Type) + " and " +
                         dtypeName(b.Type) + " differ");
}

/// The address of element `element` of `t`.
inline char *bytesAt(const TensorView &t, int64_t element) {
  return static_cast<char *>(t.Data) + element * dtypeSize(t.Type);
}

/// How kernels compute on elements of storage type T: in Elem<T>::Compute,
/// converting with load and store. f16 and bf16 compute in float (rounding
/// once per result, as numpy does), bool in bool.
template <typename T> struct Elem {
  using Compute = T;
  static T load(T v) { return v; }
  static T store(T v) { return v; }
};
template <> struct Elem<Half> {
  using Compute = float;
  static float load(Half v) { return halfToFloat(v.Bits); }
  static Half store(float v) { return {floatToHalf(v)}; }
};
template <> struct Elem<BFloat16> {
  using Compute = float;
  static float load(BFloat16 v) { return bf16ToFloat(v.Bits); }
  static BFloat16 store(float v) { return {floatToBf16(v)}; }
};
template <> struct Elem<Bool> {
  using Compute = bool;
  static bool load(Bool v) { return v.Value != 0; }
  static Bool store(bool v) { return {static_cast<uint8_t>(v)}; }
};

template <typename T> struct TypeTag { using type = T; };

/// Sets of element types for dispatchType, combined with '|'.
enum TypeSet : unsigned {
  FloatTypes = 1, ///< f32, f64, f16, bf16
  IntTypes = 2,   ///< i8..i64, u8..u64
  BoolType = 4,
  AllTypes = FloatTypes | IntTypes | BoolType,
};

/// Calls fn(TypeTag<T>{}), where T is the storage type of `t`, and returns its
/// llvm::Error; when `t` is not in `Types`, returns ctx.unsupported(...) naming
/// the element type. Only the types in `Types` are instantiated.
template <unsigned Types, typename Fn>
llvm::Error dispatchType(const KernelContext &ctx, DType t, Fn &&fn) {
  constexpr bool F = Types & FloatTypes, I = Types & IntTypes,
                 B = Types & BoolType;
  switch (t) {
#define HR_CASE(DT, SET, T)                                                    \
  case DType::DT:                                                              \
    if constexpr (SET)                                                         \
      return fn(TypeTag<T>{});                                                 \
    break;
    HR_CASE(F32, F, float)
    HR_CASE(F64, F, double)
    HR_CASE(F16, F, Half)
    HR_CASE(BF16, F, BFloat16)
    HR_CASE(I8, I, int8_t)
    HR_CASE(I16, I, int16_t)
    HR_CASE(I32, I, int32_t)
    HR_CASE(I64, I, int64_t)
    HR_CASE(U8, I, uint8_t)
    HR_CASE(U16, I, uint16_t)
    HR_CASE(U32, I, uint32_t)
    HR_CASE(U64, I, uint64_t)
    HR_CASE(Bool, B, Bool)
#undef HR_CASE
  }
  return ctx.unsupported("element type " + dtypeName(t) + " is not supported");
}

/// The loop nest of an elementwise op whose N operands broadcast (numpy
/// rules) to the result's shape. Size-1 result dimensions are dropped and
/// adjacent dimensions merged wherever every operand is laid out contiguously
/// across them, so the common cases become one long row (same shapes, or a
/// scalar operand, whose stride is 0) or rows of the trailing dimensions (a
/// bias add [N, C] + [C] is N rows of C with the bias at stride 1).
template <unsigned N> class BroadcastLoops {
public:
  using Offsets = std::array<int64_t, N>;

  /// `ins[k]` must broadcast to `out` (the compiler checked this).
  BroadcastLoops(llvm::ArrayRef<int64_t> out,
                 std::array<llvm::ArrayRef<int64_t>, N> ins) {
    unsigned rank = out.size();
    for (unsigned d = 0; d < rank; ++d)
      Empty |= out[d] == 0;
    // Per operand, right-aligned element strides, 0 where it broadcasts.
    std::array<llvm::SmallVector<int64_t, 6>, N> full;
    for (unsigned k = 0; k < N; ++k) {
      assert(ins[k].size() <= rank && "operand has a higher rank than result");
      full[k].assign(rank, 0);
      int64_t stride = 1;
      for (unsigned j = ins[k].size(); j-- > 0;) {
        unsigned d = j + rank - ins[k].size();
        assert((ins[k][j] == 1 || ins[k][j] == out[d]) && "does not broadcast");
        if (ins[k][j] != 1)
          full[k][d] = stride;
        stride *= ins[k][j];
      }
    }
    for (unsigned d = 0; d < rank; ++d) {
      if (out[d] == 1)
        continue;
      bool merge = !Dims.empty();
      for (unsigned k = 0; k < N && merge; ++k)
        merge = Strides[k].back() == full[k][d] * out[d];
      if (merge) {
        Dims.back() *= out[d];
        for (unsigned k = 0; k < N; ++k)
          Strides[k].back() = full[k][d];
        continue;
      }
      Dims.push_back(out[d]);
      for (unsigned k = 0; k < N; ++k)
        Strides[k].push_back(full[k][d]);
    }
    if (Dims.empty()) { // a scalar result
      Dims.push_back(1);
      for (unsigned k = 0; k < N; ++k)
        Strides[k].push_back(0);
    }
  }

  /// Calls row(outOffset, inOffsets, n, inStrides) for each innermost row:
  /// result elements [outOffset, outOffset + n) are computed from operand k's
  /// elements inOffsets[k] + i * inStrides[k], i < n. Rows come in order.
  template <typename RowFn> void forEachRow(RowFn &&row) const {
    if (Empty)
      return;
    unsigned outer = Dims.size() - 1;
    int64_t n = Dims[outer], rows = 1;
    for (unsigned d = 0; d < outer; ++d)
      rows *= Dims[d];
    Offsets offsets{}, inner;
    for (unsigned k = 0; k < N; ++k)
      inner[k] = Strides[k][outer];
    llvm::SmallVector<int64_t, 6> index(outer, 0);
    for (int64_t r = 0; r < rows; ++r) {
      row(r * n, static_cast<const Offsets &>(offsets), n,
          static_cast<const Offsets &>(inner));
      // Step the odometer over the outer dimensions.
      for (unsigned d = outer; d-- > 0;) {
        for (unsigned k = 0; k < N; ++k)
          offsets[k] += Strides[k][d];
        if (++index[d] < Dims[d])
          break;
        for (unsigned k = 0; k < N; ++k)
          offsets[k] -= Strides[k][d] * Dims[d];
        index[d] = 0;
      }
    }
  }

  /// The merged dimensions, outermost first (at least one).
  llvm::ArrayRef<int64_t> dims() const { return Dims; }
  /// Operand k's element stride along each merged dimension.
  llvm::ArrayRef<int64_t> strides(unsigned k) const { return Strides[k]; }

private:
  bool Empty = false;
  llvm::SmallVector<int64_t, 6> Dims;
  std::array<llvm::SmallVector<int64_t, 6>, N> Strides;
};

} // namespace kernels
} // namespace headroom

#endif // HEADROOM_KERNELS_COMMON_KERNELUTIL_H

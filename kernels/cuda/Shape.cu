//===- Shape.cu - Data-movement CUDA kernels ------------------------------===//
//
// kernels/cpu/Shape.cpp's ops on the GPU, one thread per element written.
// As on the CPU, the ops that only move elements move raw units of the
// element's size (so they take every type) and zero is all-zero bytes.
//
//  - Reshape, Flatten, Squeeze, Unsqueeze: one device copy, none when the
//    executor gave input and result the same buffer.
//  - Transpose, Slice, SliceGrad (after a zero fill), Expand, Tile, and
//    Concat and Split (one launch per part): a strided copy whose axes are
//    merged as the CPU's copyStrided merges them; when the innermost axis is
//    contiguous on both sides the copy moves units of up to 16 bytes.
//  - Gather, GatherElements, GatherND: one thread per result element
//    (Gather and GatherND also in wide units along their contiguous rows).
//  - GatherGrad, GatherElementsGrad: a zero fill, then one thread per
//    element of dy adding it into dx atomically; ScatterElements and
//    ScatterND: a copy of data, then one thread per update, written or
//    combined atomically (a compare-and-swap loop for "mul" and for integer
//    "add").
//  - Pad, Trilu, ConstantOfShape, Range: one thread per result element.
//
// Shape operands (Split's sizes, Slice's starts/ends/axes/steps, Tile's
// repeats, Pad's pads, Trilu's k, ConstantOfShape's shape, Range's scalars)
// must be plan constants: they are read on the host. Operands the CPU kernel
// does not read (Reshape's or Expand's shape, Squeeze's axes) are not read.
// Pad's constant_value is read by the device, so it need not be constant.
//
// Where this differs from the CPU: index tensors (Gather's indices, ...) are
// device data, so their values are not checked on the host. An index out of
// range, which the CPU reports as an error, reads zeros in the gathers and
// is skipped by GatherGrad, GatherElementsGrad and the scatters (ScatterND
// skips the whole slice of a tuple with a bad coordinate); it never touches
// memory outside the buffers. Repeated indices under reduction "none" keep
// one of the updates, not necessarily the last. Atomic sums run in no fixed
// order, and f16/bf16 GatherGrad rounds after each addition (the CPU widens
// to f32, sums, and rounds once).
//
//===----------------------------------------------------------------------===//
#include "kernels/common/MoveKernels.h"
#include "kernels/common/ShapeCheck.h"
#include "kernels/cuda/Launch.h"

#include "compiler/Types.h"

#include "llvm/ADT/SmallVector.h"

using namespace headroom;
using namespace headroom::cuda;
using llvm::ArrayRef;
using llvm::Error;
using llvm::Expected;
using llvm::Twine;

namespace {

using ops::contiguousStrides;
using ops::Dims;
using ops::product;

//===----------------------------------------------------------------------===//
// Device helpers
//===----------------------------------------------------------------------===//

/// The widest unit a copy moves per thread.
struct alignas(16) Bits128 {
  uint64_t Lo, Hi;
};

/// i % d, leaving i / d in i; in 32 bits when `narrow` (i and d are below
/// 2^31: 64-bit division is several times slower on the GPU).
HR_HD inline int64_t takeCoord(int64_t &i, int64_t d, bool narrow) {
  if (narrow) {
    uint32_t q = uint32_t(i) / uint32_t(d);
    int64_t c = uint32_t(i) - q * uint32_t(d);
    i = q;
    return c;
  }
  int64_t q = i / d, c = i - q * d;
  i = q;
  return c;
}

/// Whether one launch over n elements can use 32-bit index arithmetic.
bool narrowCount(int64_t n) { return n < (int64_t(1) << 31); }

template <typename T>
using WrapType = std::common_type_t<std::make_unsigned_t<T>, unsigned>;

/// a + b and a * b, wrapping for integers (what the CPU's a + b stores).
template <typename C> HR_HD C wrapAdd(C a, C b) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>)
    return C(WrapType<C>(a) + WrapType<C>(b));
  else
    return a + b;
}
template <typename C> HR_HD C wrapMul(C a, C b) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>)
    return C(WrapType<C>(a) * WrapType<C>(b));
  else
    return a * b;
}

/// *p = f(*p) atomically: a compare-and-swap loop on the 32- or 64-bit word
/// that holds *p (1- and 2-byte elements share their word with neighbours,
/// which the loop leaves as they are). A plain update in the emulator.
template <typename T, typename F> HR_HD void atomicApply(T *p, const F &f) {
#if HR_ON_DEVICE
  static_assert(sizeof(T) <= 8, "no wider atomics");
  if constexpr (sizeof(T) == 8) {
    auto *word = reinterpret_cast<unsigned long long *>(p);
    unsigned long long old = *word, assumed;
    do {
      assumed = old;
      T cur, next;
      memcpy(&cur, &assumed, 8);
      next = f(cur);
      unsigned long long bits;
      memcpy(&bits, &next, 8);
      old = atomicCAS(word, assumed, bits);
    } while (old != assumed);
  } else {
    uintptr_t addr = reinterpret_cast<uintptr_t>(p);
    auto *word = reinterpret_cast<unsigned int *>(addr & ~uintptr_t(3));
    unsigned shift = unsigned(addr & 3) * 8;
    constexpr unsigned kOnes = sizeof(T) == 1   ? 0xffu
                               : sizeof(T) == 2 ? 0xffffu
                                                : 0xffffffffu;
    unsigned mask = kOnes << shift;
    unsigned int old = *word, assumed;
    do {
      assumed = old;
      unsigned curBits = (assumed & mask) >> shift, nextBits = 0;
      T cur, next;
      memcpy(&cur, &curBits, sizeof(T));
      next = f(cur);
      memcpy(&nextBits, &next, sizeof(T));
      old = atomicCAS(word, assumed, (assumed & ~mask) | (nextBits << shift));
    } while (old != assumed);
  }
#else
  *p = f(*p);
#endif
}

template <typename T> struct AddBy {
  T V;
  HR_HD T operator()(T cur) const {
    return Elem<T>::store(wrapAdd(Elem<T>::load(cur), Elem<T>::load(V)));
  }
};
template <typename T> struct MulBy {
  T V;
  HR_HD T operator()(T cur) const {
    return Elem<T>::store(wrapMul(Elem<T>::load(cur), Elem<T>::load(V)));
  }
};

/// max and min propagate NaN (numpy's maximum, ONNX's reference).
template <typename T> struct MaxBy {
  T V;
  HR_HD T operator()(T cur) const {
    auto a = Elem<T>::load(cur), b = Elem<T>::load(V);
    return Elem<T>::store(b > a || b != b ? b : a);
  }
};
template <typename T> struct MinBy {
  T V;
  HR_HD T operator()(T cur) const {
    auto a = Elem<T>::load(cur), b = Elem<T>::load(V);
    return Elem<T>::store(b < a || b != b ? b : a);
  }
};

/// *p += v atomically: the hardware's float atomics where there are some,
/// else a compare-and-swap loop.
template <typename T> HR_HD void atomicAddAny(T *p, T v) {
  if constexpr (std::is_same_v<T, double>)
    atomicAddF64(p, v);
  else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, Half> ||
                     std::is_same_v<T, BFloat16>)
    atomicAddElem<T>(p, Elem<T>::load(v));
  else
    atomicApply(p, AddBy<T>{v});
}

/// How a scatter combines an update into its element.
struct AssignOp {
  template <typename T> HR_HD void operator()(T *p, T v) const { *p = v; }
};
struct AddOp {
  template <typename T> HR_HD void operator()(T *p, T v) const {
    atomicAddAny(p, v);
  }
};
struct MulOp {
  template <typename T> HR_HD void operator()(T *p, T v) const {
    atomicApply(p, MulBy<T>{v});
  }
};
struct MaxOp {
  template <typename T> HR_HD void operator()(T *p, T v) const {
    atomicApply(p, MaxBy<T>{v});
  }
};
struct MinOp {
  template <typename T> HR_HD void operator()(T *p, T v) const {
    atomicApply(p, MinBy<T>{v});
  }
};

//===----------------------------------------------------------------------===//
// Host helpers
//===----------------------------------------------------------------------===//

/// An error unless operand `i` is i32 or i64 (an index tensor, or a shape).
Error expectIndexType(const KernelContext &ctx, unsigned i) {
  DType t = ctx.Inputs[i].Type;
  if (t == DType::I32 || t == DType::I64)
    return Error::success();
  return ctx.unsupported("operand " + Twine(i) + " is " + dtypeName(t) +
                         ", expected i32 or i64");
}

/// A visitor that instantiates nothing: dispatch<Types>(ctx, t, NoApply())
/// checks that `t` is among Types before a kernel writes anything.
struct NoApply {
  template <typename T> Error apply() const { return Error::success(); }
};

Error tooManyDims(const KernelContext &ctx) {
  return ctx.unsupported("more than " + Twine(kMaxDims) +
                         " dimensions after merging");
}

/// Calls fn.template apply<T>() with T the unsigned unit of `bytes` bytes
/// (1 to 16), the type that kernels which only move elements move them as.
template <typename Fn> Error withUnit(unsigned bytes, const Fn &fn) {
  switch (bytes) {
  case 1:
    return fn.template apply<uint8_t>();
  case 2:
    return fn.template apply<uint16_t>();
  case 4:
    return fn.template apply<uint32_t>();
  case 8:
    return fn.template apply<uint64_t>();
  default:
    assert(bytes == 16 && "units are 1, 2, 4, 8 or 16 bytes");
    return fn.template apply<Bits128>();
  }
}

/// Calls fn.template apply<I>() with I the index type of operand `i`.
template <typename Fn>
Error withIndexType(const KernelContext &ctx, unsigned i, const Fn &fn) {
  if (Error e = expectIndexType(ctx, i))
    return e;
  if (ctx.Inputs[i].Type == DType::I32)
    return fn.template apply<int32_t>();
  return fn.template apply<int64_t>();
}

/// The widest unit (at most 16 bytes) that rows of elements of `bytes`
/// bytes can be moved in: one whose element count g divides every count in
/// `multiples`, with every address in `ptrs` aligned to it.
unsigned widestUnit(unsigned bytes, ArrayRef<int64_t> multiples,
                    ArrayRef<const void *> ptrs) {
  for (unsigned u = 16; u > bytes; u /= 2) {
    int64_t g = u / bytes;
    bool ok = true;
    for (int64_t m : multiples)
      ok &= m % g == 0;
    for (const void *p : ptrs)
      ok &= reinterpret_cast<uintptr_t>(p) % u == 0;
    if (ok)
      return u;
  }
  return bytes;
}

//===----------------------------------------------------------------------===//
// The strided copy
//===----------------------------------------------------------------------===//

/// Up to kMaxDims axes, each with a source and a destination stride (in
/// units, possibly 0 or negative); element i of the row-major index space
/// is at offsets(i).
struct StridedIndex {
  int Rank = 0;
  bool Narrow = false;
  int64_t Dims[kMaxDims] = {};
  int64_t Src[kMaxDims] = {}, Dst[kMaxDims] = {};

  HR_HD void offsets(int64_t i, int64_t &src, int64_t &dst) const {
    src = 0;
    dst = 0;
    for (int k = Rank - 1; k > 0; --k) {
      int64_t c = takeCoord(i, Dims[k], Narrow);
      src += c * Src[k];
      dst += c * Dst[k];
    }
    if (Rank > 0) {
      src += i * Src[0];
      dst += i * Dst[0];
    }
  }
};

template <typename T> struct CopyBody {
  T *Dst;
  const T *Src;
  StridedIndex Index;
  HR_HD void operator()(int64_t i) const {
    int64_t s, d;
    Index.offsets(i, s, d);
    Dst[d] = Src[s];
  }
};

struct CopyApply {
  const KernelContext &Ctx;
  const StridedIndex &Index;
  int64_t Count;
  void *Dst;
  const void *Src;
  template <typename T> Error apply() const {
    forEach(
        Ctx, Count,
        CopyBody<T>{static_cast<T *>(Dst), static_cast<const T *>(Src), Index});
    return Error::success();
  }
};

/// Copies a `shape` of elements of `bytes` bytes; dst and src point at the
/// element of index 0 on each side, strides are in elements. Size-1 axes
/// are dropped and axes contiguous on both sides merged, as the CPU's
/// copyStrided does; a row contiguous on both sides is moved in wide units.
Error stridedCopy(const KernelContext &ctx, unsigned bytes, void *dst,
                  const void *src, ArrayRef<int64_t> shape,
                  ArrayRef<int64_t> dstStrides, ArrayRef<int64_t> srcStrides) {
  int64_t count = product(shape);
  if (count == 0)
    return Error::success();
  Dims dims, ds, ss;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1)
      continue;
    if (!dims.empty() && ds.back() == dstStrides[i] * shape[i] &&
        ss.back() == srcStrides[i] * shape[i]) {
      dims.back() *= shape[i];
      ds.back() = dstStrides[i];
      ss.back() = srcStrides[i];
      continue;
    }
    dims.push_back(shape[i]);
    ds.push_back(dstStrides[i]);
    ss.push_back(srcStrides[i]);
  }
  if (dims.size() > kMaxDims)
    return tooManyDims(ctx);
  unsigned unit = bytes;
  if (!dims.empty() && ds.back() == 1 && ss.back() == 1) {
    Dims multiples{dims.back()};
    for (size_t k = 0; k + 1 < dims.size(); ++k)
      multiples.append({ds[k], ss[k]});
    unit = widestUnit(bytes, multiples, {dst, src});
    int64_t g = unit / bytes;
    dims.back() /= g;
    for (size_t k = 0; k + 1 < dims.size(); ++k) {
      ds[k] /= g;
      ss[k] /= g;
    }
    count /= g;
  }
  StridedIndex index;
  index.Rank = dims.size();
  index.Narrow = narrowCount(count);
  for (size_t k = 0; k < dims.size(); ++k) {
    index.Dims[k] = dims[k];
    index.Dst[k] = ds[k];
    index.Src[k] = ss[k];
  }
  return withUnit(unit, CopyApply{ctx, index, count, dst, src});
}

//===----------------------------------------------------------------------===//
// Layout-preserving ops, Transpose, Concat, Split
//===----------------------------------------------------------------------===//

/// Reshape, Flatten, Squeeze, Unsqueeze: the bytes are unchanged.
Error copyKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  if (Error e = kernels::checkSameBytes(ctx))
    return e;
  copyAsync(ctx, y.Data, x.Data, y.sizeInBytes());
  return Error::success();
}

//===----------------------------------------------------------------------===//
// Slice and SliceGrad
//===----------------------------------------------------------------------===//

/// The GPU's element moves for the shared kernels
/// (kernels/common/MoveKernels.h).
struct Moves {
  static Error copy(const KernelContext &ctx, unsigned bytes, void *dst,
                    const void *src, ArrayRef<int64_t> shape,
                    ArrayRef<int64_t> dstStrides,
                    ArrayRef<int64_t> srcStrides) {
    return stridedCopy(ctx, bytes, dst, src, shape, dstStrides, srcStrides);
  }
  static void zero(const KernelContext &ctx, void *dst, uint64_t bytes) {
    fillZeroAsync(ctx, dst, bytes);
  }
};

//===----------------------------------------------------------------------===//
// Gather and GatherGrad
//===----------------------------------------------------------------------===//

/// Gather's data seen as [Outer, N, Inner] around the axis, K indices.
struct GatherLayout {
  int64_t Outer, N, Inner, K;
};

/// `data` is Gather's data (for GatherGrad, its result); `gathered` is
/// Gather's result (GatherGrad's dy), checked against data and indices.
Expected<GatherLayout> gatherLayout(const KernelContext &ctx,
                                    const TensorView &data,
                                    const TensorView &gathered) {
  const TensorView &indices = ctx.Inputs[1];
  auto axis = normAxis(ctx, ctx.attrInt("axis", 0), data.rank());
  if (!axis)
    return axis.takeError();
  if (Error e = expectIndexType(ctx, 1))
    return Expected<GatherLayout>(std::move(e));
  GatherLayout l{product(data.Shape.take_front(*axis)), data.Shape[*axis],
                 product(data.Shape.drop_front(*axis + 1)),
                 indices.numElements()};
  if (Error e = kernels::checkGathered(ctx, data, gathered, *axis))
    return Expected<GatherLayout>(std::move(e));
  return l;
}

/// Element e of the gathered tensor [Outer, K, Inner] is element
/// (o, Idx[j], i) of the data, or none (-1) when the index is out of range.
template <typename I> struct GatherIndex {
  const I *Idx;
  int64_t N, K, Inner;
  bool Narrow;
  HR_HD int64_t source(int64_t e) const {
    int64_t i = takeCoord(e, Inner, Narrow), j = takeCoord(e, K, Narrow);
    int64_t n = int64_t(Idx[j]);
    n = n < 0 ? n + N : n;
    if (n < 0 || n >= N)
      return -1;
    return (e * N + n) * Inner + i;
  }
};

template <typename T, typename I> struct GatherBody {
  const T *X;
  T *Y;
  GatherIndex<I> Index;
  HR_HD void operator()(int64_t e) const {
    int64_t s = Index.source(e);
    Y[e] = s < 0 ? T{} : X[s];
  }
};

template <typename T> struct GatherIndexApply {
  const KernelContext &Ctx;
  const GatherLayout &L;
  int64_t Inner, Count;
  template <typename I> Error apply() const {
    GatherIndex<I> index{Ctx.Inputs[1].as<I>(), L.N, L.K, Inner,
                         narrowCount(Count)};
    forEach(
        Ctx, Count,
        GatherBody<T, I>{Ctx.Inputs[0].as<T>(), Ctx.Outputs[0].as<T>(), index});
    return Error::success();
  }
};

struct GatherApply {
  const KernelContext &Ctx;
  const GatherLayout &L;
  unsigned Bytes;
  template <typename T> Error apply() const {
    int64_t g = sizeof(T) / Bytes;
    return withIndexType(Ctx, 1,
                         GatherIndexApply<T>{Ctx, L, L.Inner / g,
                                             Ctx.Outputs[0].numElements() / g});
  }
};

Error gatherKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  auto l = gatherLayout(ctx, x, y);
  if (!l)
    return l.takeError();
  if (y.numElements() == 0)
    return Error::success();
  unsigned bytes = dtypeSize(x.Type);
  unsigned unit = widestUnit(bytes, {l->Inner}, {x.Data, y.Data});
  return withUnit(unit, GatherApply{ctx, *l, bytes});
}

template <typename T, typename I> struct GatherGradBody {
  const T *Dy;
  T *Dx;
  GatherIndex<I> Index;
  HR_HD void operator()(int64_t e) const {
    int64_t s = Index.source(e);
    if (s >= 0)
      atomicAddAny(Dx + s, Dy[e]);
  }
};

template <typename T> struct GatherGradIndexApply {
  const KernelContext &Ctx;
  const GatherLayout &L;
  template <typename I> Error apply() const {
    int64_t count = Ctx.Inputs[0].numElements();
    GatherIndex<I> index{Ctx.Inputs[1].as<I>(), L.N, L.K, L.Inner,
                         narrowCount(count)};
    forEach(Ctx, count,
            GatherGradBody<T, I>{Ctx.Inputs[0].as<T>(), Ctx.Outputs[0].as<T>(),
                                 index});
    return Error::success();
  }
};

struct GatherGradApply {
  const KernelContext &Ctx;
  const GatherLayout &L;
  template <typename T> Error apply() const {
    return withIndexType(Ctx, 1, GatherGradIndexApply<T>{Ctx, L});
  }
};

/// GatherGrad(dy, indices) {axis}: zeros shaped like Gather's data with each
/// row of dy added at the row it was gathered from.
Error gatherGradKernel(const KernelContext &ctx) {
  const TensorView &dy = ctx.Inputs[0], &dx = ctx.Outputs[0];
  auto l = gatherLayout(ctx, dx, dy);
  if (!l)
    return l.takeError();
  if (Error e = dispatch<kernels::FloatTypes>(ctx, dx.Type, NoApply{}))
    return e;
  fillZeroAsync(ctx, dx.Data, dx.sizeInBytes());
  return dispatch<kernels::FloatTypes>(ctx, dx.Type, GatherGradApply{ctx, *l});
}

//===----------------------------------------------------------------------===//
// GatherElements, ScatterElements, GatherElementsGrad
//===----------------------------------------------------------------------===//

/// For each element e of the indices (of Dims), the flat offset into the
/// data (of Strides) of the element it addresses: its own coordinates, with
/// the index (normalized) along Axis; -1 when the index is out of range.
template <typename I> struct ElementIndex {
  const I *Idx;
  int Rank = 0, Axis = 0;
  bool Narrow = false;
  int64_t N = 0;
  int64_t Dims[kMaxDims] = {}, Strides[kMaxDims] = {};
  HR_HD int64_t offset(int64_t e) const {
    int64_t n = int64_t(Idx[e]);
    n = n < 0 ? n + N : n;
    if (n < 0 || n >= N)
      return -1;
    int64_t off = n * Strides[Axis];
    for (int d = Rank - 1; d >= 0; --d) {
      int64_t c = d > 0 ? takeCoord(e, Dims[d], Narrow) : e;
      if (d != Axis)
        off += c * Strides[d];
    }
    return off;
  }
};

/// Checks the indices (operand 1, of `shape`) against `data` as the CPU's
/// elementOffsets does; `axis` is set to the normalized axis.
Error checkElementIndices(const KernelContext &ctx, const TensorView &data,
                          ArrayRef<int64_t> shape, int64_t &axis) {
  auto a = normAxis(ctx, ctx.attrInt("axis", 0), data.rank());
  if (!a)
    return a.takeError();
  axis = *a;
  if (shape.size() != data.rank())
    return ctx.unsupported("indices of shape " + shapeString(shape) +
                           " do not have the rank of " + data.type().str());
  for (size_t d = 0; d < shape.size(); ++d)
    if (int64_t(d) != axis && shape[d] > data.Shape[d])
      return ctx.unsupported("indices of shape " + shapeString(shape) +
                             " exceed " + data.type().str() + " on axis " +
                             Twine(d));
  if (Error e = expectIndexType(ctx, 1))
    return e;
  if (shape.size() > kMaxDims)
    return tooManyDims(ctx);
  return Error::success();
}

template <typename I>
ElementIndex<I> elementIndex(const KernelContext &ctx, const TensorView &data,
                             int64_t axis) {
  const TensorView &indices = ctx.Inputs[1];
  ElementIndex<I> x;
  x.Idx = indices.as<I>();
  x.Rank = indices.rank();
  x.Axis = axis;
  x.Narrow = narrowCount(indices.numElements());
  x.N = data.Shape[axis];
  Dims strides = contiguousStrides(data.Shape);
  for (unsigned d = 0; d < indices.rank(); ++d) {
    x.Dims[d] = indices.Shape[d];
    x.Strides[d] = strides[d];
  }
  return x;
}

template <typename T, typename I> struct GatherElementsBody {
  const T *X;
  T *Y;
  ElementIndex<I> Index;
  HR_HD void operator()(int64_t e) const {
    int64_t s = Index.offset(e);
    Y[e] = s < 0 ? T{} : X[s];
  }
};

/// y[offset(e)] op= u[e], for GatherElementsGrad and ScatterElements.
template <typename T, typename I, typename Op> struct ScatterElementsBody {
  const T *U;
  T *Y;
  ElementIndex<I> Index;
  HR_HD void operator()(int64_t e) const {
    int64_t s = Index.offset(e);
    if (s >= 0)
      Op()(Y + s, U[e]);
  }
};

/// Runs Body<T, I> over the indices' elements, with I the index type:
/// Body{operand 0 (data or updates/dy), result, index}.
template <typename T, template <typename, typename> class Body>
struct ElementsIndexApply {
  const KernelContext &Ctx;
  const TensorView &Data, &From;
  int64_t Axis;
  template <typename I> Error apply() const {
    forEach(Ctx, Ctx.Inputs[1].numElements(),
            Body<T, I>{From.as<T>(), Ctx.Outputs[0].as<T>(),
                       elementIndex<I>(Ctx, Data, Axis)});
    return Error::success();
  }
};

template <template <typename, typename> class Body> struct ElementsApply {
  const KernelContext &Ctx;
  const TensorView &Data, &From;
  int64_t Axis;
  template <typename T> Error apply() const {
    return withIndexType(Ctx, 1,
                         ElementsIndexApply<T, Body>{Ctx, Data, From, Axis});
  }
};

template <typename Op> struct ScatterOf {
  template <typename T, typename I> using Body = ScatterElementsBody<T, I, Op>;
};

/// GatherElements(data, indices) {axis}: y[e] = data[offset(e)].
Error gatherElementsKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  if (Error e = kernels::checkShapedLikeIndices(ctx, "result", y, x.Type))
    return e;
  int64_t axis;
  if (Error e = checkElementIndices(ctx, x, y.Shape, axis))
    return e;
  return withUnit(dtypeSize(x.Type),
                  ElementsApply<GatherElementsBody>{ctx, x, x, axis});
}

/// ScatterElements and ScatterND: copies data (operand 0) into the result,
/// then runs Apply<Op>{ctx, args} for the reduction: "none" on raw units of
/// `noneUnit` bytes, "add", "mul", "max" and "min" on the element type.
template <template <typename> class Apply, typename Args>
Error scatterWith(const KernelContext &ctx, const Args &args,
                  unsigned noneUnit) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  std::string reduction = ctx.attrString("reduction", "none");
  if (reduction != "none" && reduction != "add" && reduction != "mul" &&
      reduction != "max" && reduction != "min")
    return ctx.unsupported("reduction '" + reduction + "'");
  constexpr unsigned Num = kernels::FloatTypes | kernels::IntTypes;
  if (reduction != "none")
    if (Error e = dispatch<Num>(ctx, x.Type, NoApply{}))
      return e;
  copyAsync(ctx, y.Data, x.Data, x.sizeInBytes());
  if (reduction == "none")
    return withUnit(noneUnit, Apply<AssignOp>{ctx, args});
  if (reduction == "add")
    return dispatch<Num>(ctx, x.Type, Apply<AddOp>{ctx, args});
  if (reduction == "max")
    return dispatch<Num>(ctx, x.Type, Apply<MaxOp>{ctx, args});
  if (reduction == "min")
    return dispatch<Num>(ctx, x.Type, Apply<MinOp>{ctx, args});
  return dispatch<Num>(ctx, x.Type, Apply<MulOp>{ctx, args});
}

template <typename Op> struct ScatterElementsApply {
  const KernelContext &Ctx;
  int64_t Axis;
  template <typename T> Error apply() const {
    return ElementsApply<ScatterOf<Op>::template Body>{Ctx, Ctx.Inputs[0],
                                                       Ctx.Inputs[2], Axis}
        .template apply<T>();
  }
};

/// ScatterElements(data, indices, updates) {axis, reduction}.
Error scatterElementsKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &u = ctx.Inputs[2], &y = ctx.Outputs[0];
  if (Error e = expectSameType(ctx, x, y))
    return e;
  if (u.Type != x.Type || u.Shape != ctx.Inputs[1].Shape)
    return ctx.unsupported("updates " + u.type().str() + " are not " +
                           dtypeName(x.Type) + " shaped like the indices " +
                           ctx.Inputs[1].type().str());
  int64_t axis;
  if (Error e = checkElementIndices(ctx, x, u.Shape, axis))
    return e;
  return scatterWith<ScatterElementsApply>(ctx, axis, dtypeSize(x.Type));
}

/// GatherElementsGrad(dy, indices) {axis}: zeros of the result's type with
/// dy[e] added at offset(e).
Error gatherElementsGradKernel(const KernelContext &ctx) {
  const TensorView &dy = ctx.Inputs[0], &dx = ctx.Outputs[0];
  if (Error e = kernels::checkShapedLikeIndices(ctx, "dy", dy, dx.Type))
    return e;
  int64_t axis;
  if (Error e = checkElementIndices(ctx, dx, dy.Shape, axis))
    return e;
  if (Error e = dispatch<kernels::FloatTypes>(ctx, dx.Type, NoApply{}))
    return e;
  fillZeroAsync(ctx, dx.Data, dx.sizeInBytes());
  return dispatch<kernels::FloatTypes>(
      ctx, dx.Type, ElementsApply<ScatterOf<AddOp>::Body>{ctx, dx, dy, axis});
}

//===----------------------------------------------------------------------===//
// GatherND, ScatterND
//===----------------------------------------------------------------------===//

/// The index tuples (shape [..., K]) into data: tuple t addresses the slice
/// (Slice units) at offset(t), -1 when a coordinate is out of range. The
/// first Batch axes of data and indices are paired (GatherND's
/// batch_dims): PerBatch tuples per batch element, BatchStride apart.
template <typename I> struct NdIndex {
  const I *Idx;
  int64_t K = 0, Slice = 1, PerBatch = 0, BatchStride = 0;
  bool Narrow = false;
  int64_t Dims[kMaxDims] = {}, Strides[kMaxDims] = {};
  HR_HD int64_t offset(int64_t t) const {
    int64_t b = t, off = 0;
    if (PerBatch) {
      takeCoord(b, PerBatch, Narrow);
      off = b * BatchStride;
    }
    for (int64_t j = 0; j < K; ++j) {
      int64_t i = int64_t(Idx[t * K + j]), n = Dims[j];
      i = i < 0 ? i + n : i;
      if (i < 0 || i >= n)
        return -1;
      off += i * Strides[j];
    }
    return off;
  }
};

/// Host side of NdIndex, in elements, checked as the CPU's ndLayout does.
struct NdLayout {
  int64_t K = 0, Slice = 1, Batch = 0, PerBatch = 0, BatchStride = 0;
  Dims Extents, Strides;
  /// GatherND's result shape, ScatterND's updates'.
  Dims SliceShape;
};

Expected<NdLayout> ndLayout(const KernelContext &ctx, const TensorView &data) {
  auto nd =
      orUnsupported(ctx, ops::ndIndexing(data.type(), ctx.Inputs[1].type(),
                                         ctx.attrInt("batch_dims", 0)));
  if (!nd)
    return nd.takeError();
  NdLayout l;
  l.Batch = nd->Batch;
  l.K = nd->K;
  l.Slice = nd->Slice;
  l.BatchStride = nd->BatchStride;
  l.PerBatch = nd->PerBatch;
  l.SliceShape = nd->SliceShape;
  int64_t b = nd->Batch;
  if (l.K > kMaxDims)
    return ctx.unsupported("index tuples of more than " + Twine(kMaxDims) +
                           " coordinates");
  if (Error e = expectIndexType(ctx, 1))
    return Expected<NdLayout>(std::move(e));
  Dims strides = contiguousStrides(data.Shape);
  for (int64_t j = 0; j < l.K; ++j) {
    l.Extents.push_back(data.Shape[b + j]);
    l.Strides.push_back(strides[b + j]);
  }
  return l;
}

/// The device index of `l` in units of g elements (g divides Slice, so
/// every offset).
template <typename I>
NdIndex<I> ndIndex(const KernelContext &ctx, const NdLayout &l, int64_t g,
                   int64_t count) {
  NdIndex<I> x;
  x.Idx = ctx.Inputs[1].as<I>();
  x.K = l.K;
  x.Slice = l.Slice / g;
  x.PerBatch = l.PerBatch;
  x.BatchStride = l.BatchStride / g;
  x.Narrow = narrowCount(count);
  for (int64_t j = 0; j < l.K; ++j) {
    x.Dims[j] = l.Extents[j];
    x.Strides[j] = l.Strides[j] / g;
  }
  return x;
}

template <typename T, typename I> struct GatherNdBody {
  const T *X;
  T *Y;
  NdIndex<I> Index;
  HR_HD void operator()(int64_t e) const {
    int64_t t = e;
    int64_t i = takeCoord(t, Index.Slice, Index.Narrow);
    int64_t s = Index.offset(t);
    Y[e] = s < 0 ? T{} : X[s + i];
  }
};

template <typename T> struct GatherNdIndexApply {
  const KernelContext &Ctx;
  const NdLayout &L;
  int64_t G, Count;
  template <typename I> Error apply() const {
    forEach(Ctx, Count,
            GatherNdBody<T, I>{Ctx.Inputs[0].as<T>(), Ctx.Outputs[0].as<T>(),
                               ndIndex<I>(Ctx, L, G, Count)});
    return Error::success();
  }
};

struct GatherNdApply {
  const KernelContext &Ctx;
  const NdLayout &L;
  unsigned Bytes;
  template <typename T> Error apply() const {
    int64_t g = sizeof(T) / Bytes;
    return withIndexType(
        Ctx, 1,
        GatherNdIndexApply<T>{Ctx, L, g, Ctx.Outputs[0].numElements() / g});
  }
};

/// GatherND(data, indices) {batch_dims}: the slice at each index tuple.
Error gatherNdKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  auto l = ndLayout(ctx, x);
  if (!l)
    return l.takeError();
  if (Error e =
          kernels::checkNdSlices(ctx, "result", "is", y, x, l->SliceShape))
    return e;
  if (y.numElements() == 0)
    return Error::success();
  unsigned bytes = dtypeSize(x.Type);
  unsigned unit = widestUnit(bytes, {l->Slice}, {x.Data, y.Data});
  return withUnit(unit, GatherNdApply{ctx, *l, bytes});
}

template <typename T, typename I, typename Op> struct ScatterNdBody {
  const T *U;
  T *Y;
  NdIndex<I> Index;
  HR_HD void operator()(int64_t e) const {
    int64_t t = e;
    int64_t i = takeCoord(t, Index.Slice, Index.Narrow);
    int64_t s = Index.offset(t);
    if (s >= 0)
      Op()(Y + s + i, U[e]);
  }
};

template <typename T, typename Op> struct ScatterNdIndexApply {
  const KernelContext &Ctx;
  const NdLayout &L;
  int64_t G, Count;
  template <typename I> Error apply() const {
    forEach(Ctx, Count,
            ScatterNdBody<T, I, Op>{Ctx.Inputs[2].as<T>(),
                                    Ctx.Outputs[0].as<T>(),
                                    ndIndex<I>(Ctx, L, G, Count)});
    return Error::success();
  }
};

template <typename Op> struct ScatterNdApply {
  const KernelContext &Ctx;
  const NdLayout &L;
  template <typename T> Error apply() const {
    // Reduction "none" may move units wider than an element.
    int64_t g = sizeof(T) / dtypeSize(Ctx.Inputs[0].Type);
    return withIndexType(
        Ctx, 1,
        ScatterNdIndexApply<T, Op>{Ctx, L, g, Ctx.Inputs[2].numElements() / g});
  }
};

/// ScatterND(data, indices, updates) {reduction}: every element of the
/// slice at each index tuple.
Error scatterNdKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &u = ctx.Inputs[2], &y = ctx.Outputs[0];
  if (Error e = expectSameType(ctx, x, y))
    return e;
  auto l = ndLayout(ctx, x);
  if (!l)
    return l.takeError();
  if (Error e =
          kernels::checkNdSlices(ctx, "updates", "are", u, x, l->SliceShape))
    return e;
  unsigned unit = widestUnit(dtypeSize(x.Type), {l->Slice}, {y.Data, u.Data});
  return scatterWith<ScatterNdApply>(ctx, *l, unit);
}

//===----------------------------------------------------------------------===//
// Expand, Tile, Pad, Trilu
//===----------------------------------------------------------------------===//

enum PadMode : int { PadConstant, PadReflect, PadEdge, PadWrap };

/// Pad's result element e: the input element it copies (the CPU's
/// padSources, computed per element), or -1 for the fill.
struct PadIndex {
  int Rank = 0, Mode = PadConstant;
  bool Narrow = false;
  int64_t Out[kMaxDims] = {}, In[kMaxDims] = {}, Before[kMaxDims] = {},
          Stride[kMaxDims] = {};
  HR_HD int64_t source(int64_t e) const {
    int64_t off = 0;
    for (int d = Rank - 1; d >= 0; --d) {
      int64_t o = d > 0 ? takeCoord(e, Out[d], Narrow) : e;
      int64_t i = o - Before[d], n = In[d];
      if (i < 0 || i >= n) {
        if (Mode == PadConstant)
          return -1;
        if (Mode == PadWrap) { // opset 19: numpy.pad's wrap
          i = ((i % n) + n) % n;
        } else if (Mode == PadEdge || n == 1) {
          i = i < 0 ? 0 : n - 1;
        } else { // reflect without repeating the edge, as numpy.pad does
          int64_t period = 2 * (n - 1);
          i = ((i % period) + period) % period;
          i = i < n ? i : period - i;
        }
      }
      off += i * Stride[d];
    }
    return off;
  }
};

template <typename T> struct PadBody {
  const T *X;
  T *Y;
  const T *Fill; // or null for zeros
  PadIndex Index;
  HR_HD void operator()(int64_t e) const {
    int64_t s = Index.source(e);
    Y[e] = s >= 0 ? X[s] : (Fill ? *Fill : T{});
  }
};

struct PadApply {
  const KernelContext &Ctx;
  const PadIndex &Index;
  const void *Fill;
  template <typename T> Error apply() const {
    forEach(Ctx, Ctx.Outputs[0].numElements(),
            PadBody<T>{Ctx.Inputs[0].as<T>(), Ctx.Outputs[0].as<T>(),
                       static_cast<const T *>(Fill), Index});
    return Error::success();
  }
};

/// Pad(data, pads, constant_value?) {mode}. Negative pads crop. The fill
/// is read on the device (so it need not be a plan constant).
Error padKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  auto params = kernels::padParams(ctx);
  if (!params)
    return params.takeError();
  // The device's modes, in kernels::PadMode's order.
  static_assert(int(kernels::PadMode::Wrap) == PadWrap &&
                int(kernels::PadMode::Edge) == PadEdge &&
                int(kernels::PadMode::Reflect) == PadReflect);
  PadMode mode = PadMode(int(params->Mode));
  std::string modeName = ctx.attrString("mode", "constant");
  const std::vector<int64_t> *pads = &params->Pads;
  size_t rank = x.rank();
  Dims shape, xStrides = contiguousStrides(x.Shape);
  PadIndex index;
  index.Mode = mode;
  for (size_t d = 0; d < rank; ++d) {
    int64_t before = (*pads)[d], after = (*pads)[rank + d];
    shape.push_back(x.Shape[d] + before + after);
    if (mode != PadConstant && x.Shape[d] == 0 && shape.back() > 0)
      return ctx.unsupported("cannot pad an empty axis in mode '" + modeName +
                             "'");
    // Runs of unpadded axes merge into one (fewer divisions per element).
    int r = index.Rank;
    if (before == 0 && after == 0 && r > 0 && index.Before[r - 1] == 0 &&
        index.Out[r - 1] == index.In[r - 1]) {
      index.Out[r - 1] *= x.Shape[d];
      index.In[r - 1] *= x.Shape[d];
      index.Stride[r - 1] = xStrides[d];
      continue;
    }
    if (r == int(kMaxDims))
      return tooManyDims(ctx);
    index.Out[r] = shape.back();
    index.In[r] = x.Shape[d];
    index.Before[r] = before;
    index.Stride[r] = xStrides[d];
    ++index.Rank;
  }
  if (Error e = expectResultShape(ctx, y, shape))
    return e;
  if (y.numElements() == 0)
    return Error::success();
  index.Narrow = narrowCount(y.numElements());
  bool hasFill = hasOperand(ctx, 2) && ctx.Inputs[2].numElements() > 0;
  if (hasFill)
    if (Error e = expectSameType(ctx, x, ctx.Inputs[2]))
      return e;
  return withUnit(dtypeSize(x.Type),
                  PadApply{ctx, index, hasFill ? ctx.Inputs[2].Data : nullptr});
}

template <typename T> struct TriluBody {
  const T *X;
  T *Y;
  int64_t Rows, Cols, K;
  bool Upper, Narrow;
  HR_HD void operator()(int64_t i) const {
    int64_t r = i, col = takeCoord(r, Cols, Narrow);
    int64_t row = takeCoord(r, Rows, Narrow);
    // Columns [0, split) are zeroed (upper) or kept (lower).
    int64_t split = Upper ? row + K : row + K + 1;
    split = split < 0 ? 0 : (split > Cols ? Cols : split);
    bool keep = Upper ? col >= split : col < split;
    Y[i] = keep ? X[i] : T{};
  }
};

struct TriluApply {
  const KernelContext &Ctx;
  int64_t Rows, Cols, K;
  bool Upper;
  template <typename T> Error apply() const {
    int64_t n = Ctx.Outputs[0].numElements();
    forEach(Ctx, n,
            TriluBody<T>{Ctx.Inputs[0].as<T>(), Ctx.Outputs[0].as<T>(), Rows,
                         Cols, K, Upper, narrowCount(n)});
    return Error::success();
  }
};

/// Trilu(x, k?) {upper}: keeps, in each matrix of the last two axes, the
/// elements with col - row >= k (upper) or <= k (lower).
Error triluKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0];
  auto t = triluShape(ctx);
  if (!t)
    return t.takeError();
  int64_t rows = t->Rows, cols = t->Cols, k = t->K;
  bool upper = t->Upper;
  if (x.numElements() == 0)
    return Error::success();
  return withUnit(dtypeSize(x.Type), TriluApply{ctx, rows, cols, k, upper});
}

//===----------------------------------------------------------------------===//
// CumSum
//===----------------------------------------------------------------------===//

/// One thread per line along the axis, summing in order (the CPU's order,
/// so results agree to the bit in f32).
template <typename T> struct CumSumBody {
  const T *X;
  T *Y;
  int64_t N, Inner;
  bool Exclusive, Reverse;
  HR_HD void operator()(int64_t line) const {
    int64_t o = line / Inner, i = line % Inner;
    using C = typename Elem<T>::Compute;
    C acc = C(0);
    for (int64_t k = 0; k < N; ++k) {
      int64_t at = (o * N + (Reverse ? N - 1 - k : k)) * Inner + i;
      C next = wrapAdd(acc, C(ld(X, at)));
      st(Y, at, Exclusive ? acc : next);
      acc = next;
    }
  }
};

struct CumSumApply {
  const KernelContext &Ctx;
  int64_t Outer, N, Inner;
  bool Exclusive, Reverse;
  template <typename T> Error apply() const {
    forEach(Ctx, Outer * Inner,
            CumSumBody<T>{Ctx.Inputs[0].as<T>(), Ctx.Outputs[0].as<T>(), N,
                          Inner, Exclusive, Reverse});
    return Error::success();
  }
};

/// CumSum(x, axis) {exclusive, reverse}; the axis is a plan constant.
Error cumSumKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  if (x.type() != y.type())
    return ctx.unsupported("result " + y.type().str() + " differs from " +
                           x.type().str());
  auto axis = kernels::cumSumAxis(ctx);
  if (!axis)
    return axis.takeError();
  auto s = splitAtAxis(ctx, x, *axis);
  if (!s)
    return s.takeError();
  if (x.numElements() == 0)
    return Error::success();
  constexpr unsigned Num = kernels::FloatTypes | kernels::IntTypes;
  return dispatch<Num>(ctx, x.Type,
                       CumSumApply{ctx, s->Outer, s->N, s->Inner,
                                   ctx.attrInt("exclusive", 0) != 0,
                                   ctx.attrInt("reverse", 0) != 0});
}

//===----------------------------------------------------------------------===//
// ConstantOfShape, Range
//===----------------------------------------------------------------------===//

template <typename T> struct FillBody {
  T *Y;
  T V;
  HR_HD void operator()(int64_t i) const { Y[i] = V; }
};

struct FillApply {
  const KernelContext &Ctx;
  const uint8_t *Bytes;
  template <typename T> Error apply() const {
    FillBody<T> body{Ctx.Outputs[0].as<T>(), T{}};
    std::memcpy(&body.V, Bytes, sizeof(T));
    forEach(Ctx, Ctx.Outputs[0].numElements(), body);
    return Error::success();
  }
};

/// ConstantOfShape(shape) {value}: the fill is the one element of `value`
/// (default f32 0).
Error constantOfShapeKernel(const KernelContext &ctx) {
  const TensorView &y = ctx.Outputs[0];
  auto value = kernels::constantOfShapeFill(ctx);
  if (!value)
    return value.takeError();
  if (!*value) {
    fillZeroAsync(ctx, y.Data, y.sizeInBytes());
    return Error::success();
  }
  const std::vector<uint8_t> &bytes = (*value)->bytes();
  if (std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return !b; })) {
    fillZeroAsync(ctx, y.Data, y.sizeInBytes());
    return Error::success();
  }
  return withUnit(dtypeSize(y.Type), FillApply{ctx, bytes.data()});
}

/// Range's element i is start + i * delta (the ONNX spec's formula), in
/// double for floats and int64 for integers, as on the CPU.
template <typename T> struct RangeBody {
  using S = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
  T *Y;
  S Start, Delta;
  HR_HD void operator()(int64_t i) const {
    if constexpr (std::is_floating_point_v<T>) {
#if HR_ON_DEVICE
      // Rounded multiply, then add: no fused multiply-add, as on the CPU.
      Y[i] = T(__dadd_rn(Start, __dmul_rn(double(i), Delta)));
#else
      Y[i] = T(Start + double(i) * Delta);
#endif
    } else {
      Y[i] = T(Start + i * Delta);
    }
  }
};

template <typename T> Error range(const KernelContext &ctx) {
  const TensorView &y = ctx.Outputs[0];
  auto p = kernels::rangeParams<T>(
      ctx, [&](unsigned i, const char *name, T &v) -> Error {
        auto c = ctx.constant(i, name);
        if (!c)
          return c.takeError();
        std::memcpy(&v, (*c)->bytes().data(), sizeof(T));
        return Error::success();
      });
  if (!p)
    return p.takeError();
  T start = p->Start, delta = p->Delta;
  int64_t n = p->Count;
  using S = typename RangeBody<T>::S;
  forEach(ctx, n, RangeBody<T>{y.as<T>(), S(start), S(delta)});
  return Error::success();
}

Error rangeKernel(const KernelContext &ctx) {
  return kernels::dispatchRange(ctx, /*withI16=*/false, [&](auto zero) {
    return range<decltype(zero)>(ctx);
  });
}

} // namespace

void cuda::registerShapeKernels() {
  for (OpKind op :
       {OpKind::Reshape, OpKind::Flatten, OpKind::Squeeze, OpKind::Unsqueeze})
    registerKernel(op, copyKernel);
  registerKernel(OpKind::Transpose,
                 kernels::transposeKernelOf<KernelContext, Moves>);
  registerKernel(OpKind::Concat, kernels::concatKernelOf<KernelContext, Moves>);
  registerKernel(OpKind::Split, kernels::splitKernelOf<KernelContext, Moves>);
  registerKernel(OpKind::Slice, kernels::sliceKernelOf<KernelContext, Moves>);
  registerKernel(OpKind::SliceGrad,
                 kernels::sliceGradKernelOf<KernelContext, Moves>);
  registerKernel(OpKind::Gather, gatherKernel);
  registerKernel(OpKind::GatherGrad, gatherGradKernel);
  registerKernel(OpKind::GatherElements, gatherElementsKernel);
  registerKernel(OpKind::GatherElementsGrad, gatherElementsGradKernel);
  registerKernel(OpKind::ScatterElements, scatterElementsKernel);
  registerKernel(OpKind::GatherND, gatherNdKernel);
  registerKernel(OpKind::ScatterND, scatterNdKernel);
  registerKernel(OpKind::Expand, kernels::expandKernelOf<KernelContext, Moves>);
  registerKernel(OpKind::Tile, kernels::tileKernelOf<KernelContext, Moves>);
  registerKernel(OpKind::Pad, padKernel);
  registerKernel(OpKind::Trilu, triluKernel);
  registerKernel(OpKind::CumSum, cumSumKernel);
  registerKernel(OpKind::ConstantOfShape, constantOfShapeKernel);
  registerKernel(OpKind::Range, rangeKernel);
}

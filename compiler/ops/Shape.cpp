//===- Shape.cpp - The shape family's rules -------------------------------===//
#include "compiler/ops/Shape.h"

#include "llvm/ADT/Twine.h"

#include <algorithm>

using namespace headroom;
using llvm::ArrayRef;
using llvm::Expected;
using llvm::Optional;
using llvm::Twine;

static llvm::Error fail(const Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

ops::Dims ops::contiguousStrides(ArrayRef<int64_t> shape) {
  Dims s(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i)
    s[i] = s[i + 1] * shape[i + 1];
  return s;
}

int64_t ops::product(ArrayRef<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= d;
  return n;
}

Expected<int64_t> ops::normalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return fail("axis " + Twine(axis) + " is out of range for rank " +
                Twine(rank));
  return axis < 0 ? axis + rank : axis;
}

Expected<ops::SliceBox> ops::sliceBox(ArrayRef<int64_t> dataShape,
                                      ArrayRef<int64_t> starts,
                                      ArrayRef<int64_t> ends,
                                      Optional<ArrayRef<int64_t>> axes,
                                      Optional<ArrayRef<int64_t>> steps) {
  int64_t rank = dataShape.size();
  size_t n = starts.size();
  if (ends.size() != n || (axes && axes->size() != n) ||
      (steps && steps->size() != n))
    return fail("starts, ends, axes and steps differ in length");
  SliceBox box{Dims(rank, 0), Dims(rank, 1),
               Dims(dataShape.begin(), dataShape.end())};
  std::vector<bool> seen(rank, false);
  auto clampTo = [](int64_t v, int64_t dim, int64_t lo, int64_t hi) {
    return std::max(lo, std::min(v < 0 ? v + dim : v, hi));
  };
  for (size_t i = 0; i < n; ++i) {
    auto a = normalizeAxis(axes ? (*axes)[i] : int64_t(i), rank);
    if (!a)
      return a.takeError();
    int64_t step = steps ? (*steps)[i] : 1, dim = dataShape[*a];
    if (step == 0 || seen[*a])
      return fail("a step is 0 or an axis repeats");
    seen[*a] = true;
    int64_t b = step > 0 ? clampTo(starts[i], dim, 0, dim)
                         : clampTo(starts[i], dim, 0, dim - 1);
    int64_t e = step > 0 ? clampTo(ends[i], dim, 0, dim)
                         : clampTo(ends[i], dim, -1, dim - 1);
    int64_t len =
        step > 0 ? (e - b + step - 1) / step : (b - e + (-step) - 1) / -step;
    box.Begin[*a] = b;
    box.Step[*a] = step;
    box.Shape[*a] = std::max<int64_t>(0, len);
  }
  return box;
}

int64_t ops::boxLayout(const SliceBox &box, ArrayRef<int64_t> dataShape,
                       Dims &strides) {
  strides = contiguousStrides(dataShape);
  int64_t first = 0;
  for (size_t d = 0; d < strides.size(); ++d) {
    first += box.Begin[d] * strides[d];
    strides[d] *= box.Step[d];
  }
  return first;
}

ops::TransposeLayout ops::transposeLayout(ArrayRef<int64_t> shape,
                                          ArrayRef<int64_t> perm) {
  TransposeLayout l;
  Dims strides = contiguousStrides(shape);
  for (int64_t p : perm) {
    l.Shape.push_back(shape[p]);
    l.SourceStrides.push_back(strides[p]);
  }
  return l;
}

llvm::Error ops::checkSplitSizes(ArrayRef<int64_t> sizes, int64_t axis,
                                 const TensorType &x,
                                 ArrayRef<TensorType> results) {
  auto a = normalizeAxis(axis, x.rank());
  if (!a)
    return a.takeError();
  bool same = sizes.size() == results.size();
  for (size_t i = 0; same && i < sizes.size(); ++i)
    same = results[i].rank() == x.rank() && sizes[i] == results[i].dim(*a);
  if (!same)
    return fail("the split sizes do not match the result types");
  return llvm::Error::success();
}

Expected<ops::Dims> ops::transposePerm(Optional<ArrayRef<int64_t>> perm,
                                       int64_t rank) {
  Dims p;
  if (perm)
    p.assign(perm->begin(), perm->end());
  else
    for (int64_t d = rank - 1; d >= 0; --d)
      p.push_back(d);
  if (static_cast<int64_t>(p.size()) != rank)
    return fail("perm has " + Twine(p.size()) + " entries for rank " +
                Twine(rank));
  std::vector<bool> seen(rank, false);
  for (int64_t d : p) {
    if (d < 0 || d >= rank || seen[d])
      return fail("perm is not a permutation of 0.." + Twine(rank - 1));
    seen[d] = true;
  }
  return p;
}

Expected<int64_t> ops::joinAxis(int64_t axis, const TensorType &whole,
                                ArrayRef<TensorType> parts) {
  auto a = normalizeAxis(axis, whole.rank());
  if (!a)
    return a.takeError();
  int64_t total = 0;
  for (const TensorType &p : parts) {
    bool same = p.rank() == whole.rank() && p.dtype() == whole.dtype();
    for (int64_t d = 0; same && d < int64_t(p.rank()); ++d)
      same = d == *a || p.dim(d) == whole.dim(d);
    if (!same)
      return fail(p.str() + " and " + whole.str() + " differ off axis " +
                  Twine(*a));
    total += p.dim(*a);
  }
  if (total != whole.dim(*a))
    return fail("the parts' axis sizes sum to " + Twine(total) + ", expected " +
                Twine(whole.dim(*a)));
  return a;
}

Expected<ops::NdIndexing>
ops::ndIndexing(const TensorType &data, const TensorType &indices, int64_t b) {
  if (indices.rank() == 0)
    return fail("indices must have rank >= 1");
  if (b < 0 || b >= int64_t(indices.rank()) || b >= int64_t(data.rank()))
    return fail("batch_dims " + Twine(b) + " for indices " + indices.str() +
                " and " + data.str());
  for (int64_t d = 0; d < b; ++d)
    if (indices.dim(d) != data.dim(d))
      return fail("batch axis " + Twine(d) + " of indices " + indices.str() +
                  " differs from " + data.str());
  NdIndexing l;
  l.Batch = b;
  l.K = indices.shape().back();
  if (l.K < 1 || b + l.K > int64_t(data.rank()))
    return fail("index tuples of " + Twine(l.K) + " coordinates into " +
                data.str() + " after " + Twine(b) + " batch axes");
  l.Slice = product(data.shape().drop_front(b + l.K));
  l.BatchStride = product(data.shape().drop_front(b));
  l.PerBatch = product(indices.shape().drop_front(b).drop_back());
  l.SliceShape.assign(indices.shape().begin(), indices.shape().end() - 1);
  l.SliceShape.append(data.shape().begin() + b + l.K, data.shape().end());
  return l;
}

Expected<ops::Dims> ops::reshapeShape(const TensorType &t,
                                      ArrayRef<int64_t> request,
                                      bool allowZero) {
  ArrayRef<int64_t> x = t.shape();
  Dims shape;
  int inferred = -1;
  int64_t known = 1, count = product(x);
  for (size_t i = 0; i < request.size(); ++i) {
    int64_t d = request[i];
    if (d == 0 && !allowZero) {
      if (i >= x.size())
        return fail("Reshape copies dimension " + Twine(i) + " that " +
                    t.str() + " does not have");
      d = x[i];
    }
    if (d == -1) {
      if (inferred >= 0)
        return fail("Reshape shape has more than one -1");
      inferred = i;
      shape.push_back(1);
      continue;
    }
    if (d < 0)
      return fail("Reshape shape has negative dimension " + Twine(d));
    shape.push_back(d);
    known *= d;
  }
  if (inferred >= 0) {
    if (known == 0 || count % known)
      return fail("Reshape cannot infer -1 for " + t.str());
    shape[inferred] = count / known;
    known *= shape[inferred];
  }
  if (known != count)
    return fail("Reshape of " + t.str() + " to " + shapeString(shape) +
                " changes the element count");
  return shape;
}

Expected<ops::Dims> ops::unsqueezeShape(ArrayRef<int64_t> x,
                                        ArrayRef<int64_t> axes) {
  int64_t rank = x.size() + axes.size();
  std::vector<bool> inserted(rank, false);
  for (int64_t a : axes) {
    auto n = normalizeAxis(a, rank);
    if (!n || inserted[*n]) {
      llvm::consumeError(n.takeError());
      return fail("Unsqueeze axes are out of range or repeated");
    }
    inserted[*n] = true;
  }
  Dims shape;
  unsigned src = 0;
  for (int64_t d = 0; d < rank; ++d)
    shape.push_back(inserted[d] ? 1 : x[src++]);
  return shape;
}

Expected<ops::Dims> ops::squeezeShape(const TensorType &t,
                                      Optional<ArrayRef<int64_t>> axes) {
  ArrayRef<int64_t> x = t.shape();
  int64_t rank = x.size();
  std::vector<bool> drop(rank, false);
  if (axes) {
    for (int64_t a : *axes) {
      auto n = normalizeAxis(a, rank);
      if (!n || x[*n] != 1) {
        llvm::consumeError(n.takeError());
        return fail("Squeeze axis " + Twine(a) + " is not a size-1 axis of " +
                    t.str());
      }
      drop[*n] = true;
    }
  } else {
    for (int64_t d = 0; d < rank; ++d)
      drop[d] = x[d] == 1;
  }
  Dims shape;
  for (int64_t d = 0; d < rank; ++d)
    if (!drop[d])
      shape.push_back(x[d]);
  return shape;
}

Expected<ops::Dims> ops::reduceAxes(ArrayRef<int64_t> axes, int64_t rank,
                                    bool noopWithEmptyAxes) {
  Dims out;
  if (axes.empty() && !noopWithEmptyAxes) {
    for (int64_t d = 0; d < rank; ++d)
      out.push_back(d);
    return out;
  }
  for (int64_t a : axes) {
    auto n = normalizeAxis(a, rank);
    if (!n)
      return n.takeError();
    if (llvm::is_contained(out, *n))
      return fail("reduction axis " + Twine(a) + " is repeated");
    out.push_back(*n);
  }
  return out;
}

ops::Dims ops::reducedShape(ArrayRef<int64_t> x, ArrayRef<int64_t> axes,
                            bool keepDims) {
  Dims shape;
  for (int64_t d = 0; d < int64_t(x.size()); ++d) {
    if (!llvm::is_contained(axes, d))
      shape.push_back(x[d]);
    else if (keepDims)
      shape.push_back(1);
  }
  return shape;
}

ops::Dims ops::gatherShape(ArrayRef<int64_t> data, ArrayRef<int64_t> indices,
                           int64_t axis) {
  Dims shape(data.begin(), data.begin() + axis);
  shape.append(indices.begin(), indices.end());
  shape.append(data.begin() + axis + 1, data.end());
  return shape;
}

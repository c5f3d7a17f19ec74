//===- ConstantFolding.cpp - Evaluate ops on constant operands ------------===//
//
// Floats are computed in double and rounded once to the result type; integers
// in int64 (ONNX integer Div truncates toward zero, as C++ does). The code
// favours clarity over speed: folded tensors are small by construction.
//
//===----------------------------------------------------------------------===//
#include "compiler/ConstantFolding.h"
#include "compiler/ops/Shape.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

using namespace headroom;
using llvm::ArrayRef;
using llvm::Expected;
using llvm::Optional;
using Shape = llvm::SmallVector<int64_t, 4>;
using Results = Optional<std::vector<Tensor>>;

static llvm::Error err(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

static Results one(Tensor t) { return std::vector<Tensor>{std::move(t)}; }

/// Normalizes a possibly negative axis; None when out of [-rank, rank).
static Optional<int64_t> normAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return llvm::None;
  return axis < 0 ? axis + rank : axis;
}

static Shape stridesOf(ArrayRef<int64_t> shape) {
  Shape s(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i)
    s[i] = s[i + 1] * shape[i + 1];
  return s;
}

/// Flat index into `in` for output coordinates `coord` under broadcasting.
static int64_t broadcastIndex(ArrayRef<int64_t> coord, ArrayRef<int64_t> in) {
  size_t off = coord.size() - in.size();
  int64_t idx = 0, stride = 1;
  for (int i = static_cast<int>(in.size()) - 1; i >= 0; --i) {
    if (in[i] != 1)
      idx += coord[i + off] * stride;
    stride *= in[i];
  }
  return idx;
}

static void unflatten(int64_t flat, ArrayRef<int64_t> shape, Shape &coord) {
  coord.resize(shape.size());
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    coord[i] = shape[i] ? flat % shape[i] : 0;
    flat = shape[i] ? flat / shape[i] : 0;
  }
}

static bool tooBig(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return true;
    n *= d;
    if (n > kMaxFoldElements)
      return true;
  }
  return false;
}

using ElemFn =
    std::function<void(Tensor &out, int64_t o, ArrayRef<int64_t> inIdx)>;

/// Applies `fn` over the broadcast of `ins`, producing a `dtype` tensor.
static Expected<Results> broadcastMap(ArrayRef<const Tensor *> ins, DType dtype,
                                      const ElemFn &fn) {
  Shape shape(ins[0]->type().shape().begin(), ins[0]->type().shape().end());
  for (const Tensor *t : ins.drop_front()) {
    auto b = broadcastShapes(shape, t->type().shape());
    if (!b)
      return err("operand shapes " + ins[0]->type().str() + " and " +
                 t->type().str() + " do not broadcast");
    shape = *b;
  }
  if (tooBig(shape))
    return Results();
  Tensor out(TensorType(dtype, shape));
  Shape coord;
  llvm::SmallVector<int64_t, 3> idx(ins.size());
  for (int64_t o = 0; o < out.numElements(); ++o) {
    unflatten(o, shape, coord);
    for (size_t i = 0; i < ins.size(); ++i)
      idx[i] = broadcastIndex(coord, ins[i]->type().shape());
    fn(out, o, idx);
  }
  return one(std::move(out));
}

static Expected<Results> foldUnary(llvm::StringRef op, const Tensor &x) {
  DType t = x.type().dtype();
  std::function<double(double)> f;
  if (op == "Identity")
    return one(x);
  if (op == "Neg")
    f = [](double v) { return -v; };
  else if (op == "Abs")
    f = [](double v) { return std::fabs(v); };
  else if (op == "Not")
    f = [](double v) { return v == 0 ? 1.0 : 0.0; };
  else if (!isFloat(t))
    return Results();
  else if (op == "Sqrt")
    f = [](double v) { return std::sqrt(v); };
  else if (op == "Reciprocal")
    f = [](double v) { return 1.0 / v; };
  else if (op == "Exp")
    f = [](double v) { return std::exp(v); };
  else if (op == "Log")
    f = [](double v) { return std::log(v); };
  else if (op == "Floor")
    f = [](double v) { return std::floor(v); };
  else if (op == "Ceil")
    f = [](double v) { return std::ceil(v); };
  else if (op == "Sin")
    f = [](double v) { return std::sin(v); };
  else if (op == "Cos")
    f = [](double v) { return std::cos(v); };
  else
    return Results();
  Tensor out(x.type());
  for (int64_t i = 0; i < x.numElements(); ++i) {
    if (isFloat(t))
      out.setDouble(i, f(x.getDouble(i)));
    else // integer Neg/Abs/Not stay exact in int64
      out.setInt(i, op == "Neg"   ? -x.getInt(i)
                    : op == "Abs" ? std::abs(x.getInt(i))
                                  : !x.getInt(i));
  }
  return one(std::move(out));
}

static Expected<Results> foldBinary(llvm::StringRef op,
                                    ArrayRef<const Tensor *> ins) {
  DType t = ins[0]->type().dtype();
  bool fp = isFloat(t);
  bool compare = op == "Equal" || op == "Less" || op == "Greater" ||
                 op == "LessOrEqual" || op == "GreaterOrEqual";
  DType outType = compare ? DType::Bool : t;
  if (op == "Pow" && !fp)
    return Results();
  return broadcastMap(
      ins, outType, [&](Tensor &out, int64_t o, ArrayRef<int64_t> idx) {
        if (fp || compare) {
          double r = ins[0]->getDouble(idx[0]);
          for (size_t k = 1; k < ins.size(); ++k) {
            double b = ins[k]->getDouble(idx[k]);
            if (op == "Add" || op == "Sum")
              r += b;
            else if (op == "Sub")
              r -= b;
            else if (op == "Mul")
              r *= b;
            else if (op == "Div")
              r = fp ? r / b : (b ? std::trunc(r / b) : 0);
            else if (op == "Pow")
              r = std::pow(r, b);
            else if (op == "Max")
              // NaN propagates, as in the kernels (numpy), unlike fmax.
              r = std::isnan(r) || std::isnan(b) ? NAN : std::max(r, b);
            else if (op == "Min")
              r = std::isnan(r) || std::isnan(b) ? NAN : std::min(r, b);
            else if (op == "Equal")
              r = r == b;
            else if (op == "Less")
              r = r < b;
            else if (op == "Greater")
              r = r > b;
            else if (op == "LessOrEqual")
              r = r <= b;
            else if (op == "GreaterOrEqual")
              r = r >= b;
            else if (op == "And")
              r = r != 0 && b != 0;
            else if (op == "Or")
              r = r != 0 || b != 0;
          }
          out.setDouble(o, r);
          return;
        }
        int64_t r = ins[0]->getInt(idx[0]);
        for (size_t k = 1; k < ins.size(); ++k) {
          int64_t b = ins[k]->getInt(idx[k]);
          // Wrapping arithmetic through uint64 keeps overflow defined.
          if (op == "Add" || op == "Sum")
            r = int64_t(uint64_t(r) + uint64_t(b));
          else if (op == "Sub")
            r = int64_t(uint64_t(r) - uint64_t(b));
          else if (op == "Mul")
            r = int64_t(uint64_t(r) * uint64_t(b));
          else if (op == "Div")
            // As the kernels: x/0 is 0 and INT64_MIN/-1 wraps to INT64_MIN.
            r = b == 0 ? 0 : b == -1 ? int64_t(0 - uint64_t(r)) : r / b;
          else if (op == "Max")
            r = std::max(r, b);
          else if (op == "Min")
            r = std::min(r, b);
          else if (op == "And")
            r = r && b;
          else if (op == "Or")
            r = r || b;
        }
        out.setInt(o, r);
      });
}

/// Mod {fmod}: integers only (shape arithmetic: opset 23's Attention body
/// computes head groups with it). fmod=0 takes the divisor's sign (Python's
/// %), fmod=1 the dividend's (C's %); x mod 0 is 0, as the kernels' Div.
static Expected<Results> foldMod(const AttributeMap &attrs,
                                 ArrayRef<const Tensor *> ins) {
  // u64 is read as signed (getInt): its values past 2^63 would take the
  // wrong sign, so it is left to the kernels.
  DType t = ins[0]->type().dtype();
  if (ins.size() != 2 || !ins[1] || isFloat(t) || t == DType::U64 ||
      t != ins[1]->type().dtype())
    return Results();
  auto it = attrs.find("fmod");
  bool cStyle = it != attrs.end() && it->second.asInt() != 0;
  return broadcastMap(ins, ins[0]->type().dtype(),
                      [&](Tensor &out, int64_t o, ArrayRef<int64_t> idx) {
                        int64_t a = ins[0]->getInt(idx[0]);
                        int64_t b = ins[1]->getInt(idx[1]);
                        int64_t r = b == 0 || b == -1 ? 0 : a % b;
                        if (!cStyle && r != 0 && (r < 0) != (b < 0))
                          r += b;
                        out.setInt(o, r);
                      });
}

static Expected<Results> foldCast(const AttributeMap &attrs, const Tensor &x) {
  auto it = attrs.find("to");
  if (it == attrs.end() || it->second.kind() != Attribute::Kind::Type)
    return err("Cast needs a `to` element type attribute");
  DType to = it->second.asType();
  Tensor out(x.type().withDType(to));
  for (int64_t i = 0; i < x.numElements(); ++i) {
    if (isFloat(x.type().dtype()) && !isFloat(to) && to != DType::Bool)
      out.setInt(i, x.getInt(i)); // truncates toward zero
    else if (isFloat(to) || isFloat(x.type().dtype()))
      out.setDouble(i, x.getDouble(i));
    else
      out.setInt(i, x.getInt(i));
  }
  return one(std::move(out));
}

/// Copies the elements of `src` selected by `srcIndex(outFlat)` into a new
/// tensor of type `type`.
static Tensor gatherElements(const Tensor &src, TensorType type,
                             const std::function<int64_t(int64_t)> &srcIndex) {
  Tensor out(std::move(type));
  unsigned sz = dtypeSize(src.type().dtype());
  std::vector<uint8_t> bytes(out.type().sizeInBytes());
  for (int64_t o = 0; o < out.numElements(); ++o)
    std::memcpy(bytes.data() + o * sz, src.bytes().data() + srcIndex(o) * sz,
                sz);
  return Tensor(out.type(), std::move(bytes));
}

static Expected<Results> foldConcat(const AttributeMap &attrs,
                                    ArrayRef<const Tensor *> ins) {
  const TensorType &t0 = ins[0]->type();
  auto axis = normAxis(intAttr(attrs, "axis", 0), t0.rank());
  if (!axis)
    return err("Concat axis out of range for " + t0.str());
  Shape shape(t0.shape().begin(), t0.shape().end());
  shape[*axis] = 0;
  for (const Tensor *t : ins) {
    if (t->type().rank() != t0.rank() || t->type().dtype() != t0.dtype())
      return err("Concat operands " + t0.str() + " and " + t->type().str() +
                 " differ in rank or element type");
    for (unsigned d = 0; d < t0.rank(); ++d)
      if (d != *axis && t->type().dim(d) != t0.dim(d))
        return err("Concat operands " + t0.str() + " and " + t->type().str() +
                   " differ outside the axis");
    shape[*axis] += t->type().dim(*axis);
  }
  if (tooBig(shape))
    return Results();
  Shape coord;
  TensorType type(t0.dtype(), shape);
  Tensor out(type);
  for (int64_t o = 0; o < out.numElements(); ++o) {
    unflatten(o, shape, coord);
    int64_t c = coord[*axis];
    size_t k = 0;
    while (c >= ins[k]->type().dim(*axis))
      c -= ins[k++]->type().dim(*axis);
    coord[*axis] = c;
    Shape st = stridesOf(ins[k]->type().shape());
    int64_t src = 0;
    for (size_t d = 0; d < coord.size(); ++d)
      src += coord[d] * st[d];
    unsigned sz = dtypeSize(t0.dtype());
    std::memcpy(out.data() + o * sz, ins[k]->bytes().data() + src * sz, sz);
  }
  return one(std::move(out));
}

static Expected<Results> foldGather(const AttributeMap &attrs,
                                    const Tensor &data, const Tensor &indices) {
  const TensorType &dt = data.type();
  auto axis = normAxis(intAttr(attrs, "axis", 0), dt.rank());
  if (!axis)
    return err("Gather axis out of range for " + dt.str());
  Shape shape(dt.shape().begin(), dt.shape().begin() + *axis);
  shape.append(indices.type().shape().begin(), indices.type().shape().end());
  shape.append(dt.shape().begin() + *axis + 1, dt.shape().end());
  if (tooBig(shape))
    return Results();
  int64_t n = dt.dim(*axis);
  std::vector<int64_t> idx = indices.toInts();
  for (int64_t &i : idx) {
    if (i < -n || i >= n)
      return err("Gather index " + llvm::Twine(i) + " out of range for axis " +
                 llvm::Twine(*axis) + " of " + dt.str());
    if (i < 0)
      i += n;
  }
  Shape st = stridesOf(dt.shape());
  int64_t inner = st[*axis], numIdx = idx.size();
  return one(
      gatherElements(data, TensorType(dt.dtype(), shape), [&](int64_t o) {
        int64_t innerPos = o % inner;
        int64_t rest = o / inner;
        int64_t k = rest % numIdx, outer = rest / numIdx;
        return (outer * n + idx[k]) * inner + innerPos;
      }));
}

static Tensor reshaped(const Tensor &x, ArrayRef<int64_t> shape) {
  return Tensor(TensorType(x.type().dtype(), shape), x.bytes());
}

static Expected<Results> foldReshape(const AttributeMap &attrs, const Tensor &x,
                                     const Tensor &shapeT) {
  auto shape = ops::reshapeShape(x.type(), shapeT.toInts(),
                                 intAttr(attrs, "allowzero", 0) != 0);
  if (!shape)
    return shape.takeError();
  return one(reshaped(x, *shape));
}

static Expected<Results> foldUnsqueeze(const Tensor &x, const Tensor &axesT) {
  auto shape = ops::unsqueezeShape(x.type().shape(), axesT.toInts());
  if (!shape)
    return shape.takeError();
  return one(reshaped(x, *shape));
}

static Expected<Results> foldSqueeze(const Tensor &x, const Tensor *axesT) {
  std::vector<int64_t> axes = axesT ? axesT->toInts() : std::vector<int64_t>();
  auto shape =
      ops::squeezeShape(x.type(), axesT ? Optional<ArrayRef<int64_t>>(axes)
                                        : Optional<ArrayRef<int64_t>>());
  if (!shape)
    return shape.takeError();
  return one(reshaped(x, *shape));
}

static Expected<Results> foldSlice(ArrayRef<const Tensor *> ins) {
  const Tensor &x = *ins[0];
  int64_t rank = x.type().rank();
  std::vector<int64_t> ints[5];
  for (size_t i = 1; i < std::min<size_t>(ins.size(), 5); ++i)
    if (ins[i])
      ints[i] = ins[i]->toInts();
  auto given = [&](size_t i) {
    return i < ins.size() && ins[i] ? llvm::makeArrayRef(ints[i])
                                    : Optional<ArrayRef<int64_t>>();
  };
  auto box =
      ops::sliceBox(x.type().shape(), ints[1], ints[2], given(3), given(4));
  if (!box)
    return err("Slice: " + llvm::toString(box.takeError()));
  Shape begin(box->Begin.begin(), box->Begin.end()),
      step(box->Step.begin(), box->Step.end()),
      shape(box->Shape.begin(), box->Shape.end());
  if (tooBig(shape))
    return Results();
  Shape st = stridesOf(x.type().shape()), coord;
  return one(
      gatherElements(x, TensorType(x.type().dtype(), shape), [&](int64_t o) {
        unflatten(o, shape, coord);
        int64_t src = 0;
        for (int64_t d = 0; d < rank; ++d)
          src += (begin[d] + coord[d] * step[d]) * st[d];
        return src;
      }));
}

static Expected<Results> foldRange(ArrayRef<const Tensor *> ins) {
  for (const Tensor *t : ins)
    if (t->numElements() != 1)
      return err("Range operands must be scalars");
  DType t = ins[0]->type().dtype();
  double start = ins[0]->getDouble(0), limit = ins[1]->getDouble(0),
         delta = ins[2]->getDouble(0);
  if (delta == 0)
    return err("Range delta is 0");
  double count = std::ceil((limit - start) / delta);
  int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  if (n > kMaxFoldElements)
    return Results();
  Tensor out(TensorType(t, {n}));
  for (int64_t i = 0; i < n; ++i) {
    if (isFloat(t))
      out.setDouble(i, start + i * delta);
    else
      out.setInt(i, ins[0]->getInt(0) + i * ins[2]->getInt(0));
  }
  return one(std::move(out));
}

static Expected<Results> foldConstantOfShape(const AttributeMap &attrs,
                                             const Tensor &shapeT) {
  std::vector<int64_t> shape = shapeT.toInts();
  if (tooBig(shape))
    return Results();
  auto it = attrs.find("value");
  Tensor fill = Tensor::fromDoubles(DType::F32, {1}, {0.0});
  if (it != attrs.end()) {
    if (it->second.kind() != Attribute::Kind::Tensor ||
        it->second.asTensor().numElements() != 1)
      return err("ConstantOfShape value must be a one-element tensor");
    fill = it->second.asTensor();
  }
  return one(gatherElements(fill, TensorType(fill.type().dtype(), shape),
                            [](int64_t) { return 0; }));
}

static Expected<Results> foldExpand(const Tensor &x, const Tensor &shapeT) {
  auto shape = broadcastShapes(x.type().shape(), shapeT.toInts());
  if (!shape)
    return err("Expand of " + x.type().str() + " to " +
               shapeString(shapeT.toInts()) + " does not broadcast");
  if (tooBig(*shape))
    return Results();
  Shape coord;
  return one(
      gatherElements(x, TensorType(x.type().dtype(), *shape), [&](int64_t o) {
        unflatten(o, *shape, coord);
        return broadcastIndex(coord, x.type().shape());
      }));
}

static Expected<Results> foldTranspose(const AttributeMap &attrs,
                                       const Tensor &x) {
  int64_t rank = x.type().rank();
  std::vector<int64_t> perm;
  auto it = attrs.find("perm");
  if (it != attrs.end() && it->second.kind() == Attribute::Kind::Ints)
    perm = it->second.asInts();
  else
    for (int64_t d = rank - 1; d >= 0; --d)
      perm.push_back(d);
  if (static_cast<int64_t>(perm.size()) != rank)
    return err("Transpose perm does not match rank of " + x.type().str());
  Shape shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= rank)
      return err("Transpose perm entry out of range");
    shape.push_back(x.type().dim(p));
  }
  Shape st = stridesOf(x.type().shape()), coord;
  return one(
      gatherElements(x, TensorType(x.type().dtype(), shape), [&](int64_t o) {
        unflatten(o, shape, coord);
        int64_t src = 0;
        for (int64_t d = 0; d < rank; ++d)
          src += coord[d] * st[perm[d]];
        return src;
      }));
}

static Expected<Results> foldTrilu(const AttributeMap &attrs, const Tensor &x,
                                   const Tensor *kT) {
  if (x.type().rank() < 2)
    return err("Trilu needs rank >= 2, got " + x.type().str());
  int64_t k = kT ? kT->getInt(0) : 0;
  bool upper = intAttr(attrs, "upper", 1) != 0;
  int64_t rows = x.type().dim(x.type().rank() - 2),
          cols = x.type().dim(x.type().rank() - 1);
  Tensor out = x;
  for (int64_t o = 0; o < x.numElements(); ++o) {
    int64_t c = o % cols, r = (o / cols) % rows;
    bool keep = upper ? c - r >= k : c - r <= k;
    if (!keep)
      out.setInt(o, 0);
  }
  return one(std::move(out));
}

static const char *const kFoldable[] = {"Identity",    "Neg",
                                        "Abs",         "Not",
                                        "Sqrt",        "Reciprocal",
                                        "Exp",         "Log",
                                        "Floor",       "Ceil",
                                        "Sin",         "Cos",
                                        "Add",         "Sub",
                                        "Mul",         "Div",
                                        "Mod",         "Pow",
                                        "Max",         "Min",
                                        "Sum",         "Equal",
                                        "Less",        "Greater",
                                        "LessOrEqual", "GreaterOrEqual",
                                        "And",         "Or",
                                        "Where",       "Cast",
                                        "Concat",      "Gather",
                                        "Reshape",     "Unsqueeze",
                                        "Squeeze",     "Slice",
                                        "Range",       "ConstantOfShape",
                                        "Expand",      "Transpose",
                                        "Trilu",       "Constant"};

bool headroom::isFoldableOp(llvm::StringRef op) {
  return llvm::is_contained(kFoldable, op);
}

Expected<Results> headroom::foldConstantOp(llvm::StringRef op,
                                           const AttributeMap &attrs,
                                           ArrayRef<const Tensor *> ins) {
  if (!isFoldableOp(op))
    return Results();
  if (op == "Constant") {
    auto it = attrs.find("value");
    if (it == attrs.end() || it->second.kind() != Attribute::Kind::Tensor)
      return Results();
    return one(it->second.asTensor());
  }
  // Every remaining op needs its first operand.
  if (ins.empty() || !ins[0])
    return Results();
  auto need = [&](size_t n) {
    if (ins.size() < n)
      return false;
    for (size_t i = 0; i < n; ++i)
      if (!ins[i])
        return false;
    return true;
  };
  if (op == "Cast")
    return foldCast(attrs, *ins[0]);
  if (op == "Mod")
    return foldMod(attrs, ins);
  if (op == "Concat")
    return need(ins.size()) ? foldConcat(attrs, ins) : Results();
  if (op == "Gather")
    return need(2) ? foldGather(attrs, *ins[0], *ins[1]) : Results();
  if (op == "Reshape")
    return need(2) ? foldReshape(attrs, *ins[0], *ins[1]) : Results();
  if (op == "Unsqueeze")
    return need(2) ? foldUnsqueeze(*ins[0], *ins[1]) : Results();
  if (op == "Squeeze")
    return foldSqueeze(*ins[0], ins.size() > 1 ? ins[1] : nullptr);
  if (op == "Slice")
    return need(3) ? foldSlice(ins) : Results();
  if (op == "Range")
    return need(3) ? foldRange(ins) : Results();
  if (op == "ConstantOfShape")
    return foldConstantOfShape(attrs, *ins[0]);
  if (op == "Expand")
    return need(2) ? foldExpand(*ins[0], *ins[1]) : Results();
  if (op == "Transpose")
    return foldTranspose(attrs, *ins[0]);
  if (op == "Trilu")
    return foldTrilu(attrs, *ins[0], ins.size() > 1 ? ins[1] : nullptr);
  if (op == "Where") {
    if (!need(3))
      return Results();
    DType t = ins[1]->type().dtype();
    return broadcastMap(
        ins, t, [&](Tensor &out, int64_t o, ArrayRef<int64_t> idx) {
          const Tensor &src = ins[0]->getInt(idx[0]) ? *ins[1] : *ins[2];
          int64_t i = ins[0]->getInt(idx[0]) ? idx[1] : idx[2];
          if (isFloat(t))
            out.setDouble(o, src.getDouble(i));
          else
            out.setInt(o, src.getInt(i));
        });
  }
  if (ins.size() == 1 && op != "Max" && op != "Min" && op != "Sum")
    return foldUnary(op, *ins[0]);
  if (!need(ins.size()))
    return Results();
  for (const Tensor *t : ins)
    if (t->type().dtype() != ins[0]->type().dtype() && op != "Pow")
      return err(op + " operands " + ins[0]->type().str() + " and " +
                 t->type().str() + " differ in element type");
  return foldBinary(op, ins);
}

Optional<Tensor> headroom::foldTypeOp(llvm::StringRef op,
                                      const AttributeMap &attrs,
                                      const TensorType &x) {
  if (op == "Size")
    return Tensor::fromInts(DType::I64, {}, {x.numElements()});
  if (op != "Shape")
    return llvm::None;
  int64_t rank = x.rank();
  auto clampAxis = [&](int64_t a) {
    if (a < 0)
      a += rank;
    return std::max<int64_t>(0, std::min(a, rank));
  };
  int64_t start = clampAxis(intAttr(attrs, "start", 0));
  int64_t end = clampAxis(intAttr(attrs, "end", rank));
  std::vector<int64_t> dims;
  for (int64_t d = start; d < end; ++d)
    dims.push_back(x.dim(d));
  return Tensor::fromInts(DType::I64, {static_cast<int64_t>(dims.size())},
                          dims);
}

//===- ResultTypes.cpp - An op's result types from its operands -----------===//
#include "compiler/ops/ResultTypes.h"

#include "compiler/IR.h"
#include "compiler/MatMulShape.h"
#include "compiler/ops/Shape.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"

using namespace headroom;
using llvm::ArrayRef;
using llvm::Expected;
using llvm::Optional;
using Types = Optional<std::vector<TensorType>>;

namespace {

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

/// Operand `i`'s integers when it is a Constant; None when it is absent or
/// computed (`present` says which).
Optional<std::vector<int64_t>> constantInts(ArrayRef<Value *> operands,
                                            unsigned i, bool &present) {
  const Value *v = i < operands.size() ? operands[i] : nullptr;
  present = v != nullptr;
  return ops::constantInts(v);
}

std::vector<TensorType> one(DType t, ArrayRef<int64_t> shape) {
  return {TensorType(t, shape)};
}

bool isComparison(OpKind op) {
  return op == OpKind::Equal || op == OpKind::Less ||
         op == OpKind::LessOrEqual || op == OpKind::Greater ||
         op == OpKind::GreaterOrEqual;
}

bool isReduction(OpKind op) {
  return op == OpKind::ReduceSum || op == OpKind::ReduceMean ||
         op == OpKind::ReduceMax || op == OpKind::ReduceMin ||
         op == OpKind::ReduceProd;
}

Expected<Types> broadcastRule(OpKind op, ArrayRef<Value *> operands) {
  llvm::SmallVector<int64_t, 4> shape;
  bool first = true;
  for (const Value *v : operands) {
    if (!v)
      continue;
    if (first) {
      shape.assign(v->type().shape().begin(), v->type().shape().end());
      first = false;
      continue;
    }
    auto b = broadcastShapes(shape, v->type().shape());
    if (!b)
      return fail("operand shapes do not broadcast (" + shapeString(shape) +
                  " and " + shapeString(v->type().shape()) + ")");
    shape.assign(b->begin(), b->end());
  }
  DType t = isComparison(op)      ? DType::Bool
            : op == OpKind::Where ? operands[1]->type().dtype()
                                  : operands[0]->type().dtype();
  return Types(one(t, shape));
}

Expected<Types> reductionRule(ArrayRef<Value *> operands,
                              const AttributeMap &attrs) {
  const TensorType &x = operands[0]->type();
  std::vector<int64_t> axes;
  bool present = false;
  if (auto c = constantInts(operands, 1, present))
    axes = *c;
  else if (present)
    return Types(); // computed axes
  else if (const std::vector<int64_t> *a = intsAttr(attrs, "axes"))
    axes = *a;
  auto normalized = ops::reduceAxes(
      axes, x.rank(), intAttr(attrs, "noop_with_empty_axes", 0) != 0);
  if (!normalized)
    return normalized.takeError();
  return Types(
      one(x.dtype(), ops::reducedShape(x.shape(), *normalized,
                                       intAttr(attrs, "keepdims", 1))));
}

/// Reshape, Squeeze, Unsqueeze and Expand: a shape from a constant operand.
Expected<Types> reshapeFamily(OpKind op, ArrayRef<Value *> operands,
                              const AttributeMap &attrs) {
  const TensorType &x = operands[0]->type();
  bool present = false;
  Optional<std::vector<int64_t>> ints = constantInts(operands, 1, present);
  if (present && !ints)
    return Types(); // computed
  const std::vector<int64_t> *attrAxes = intsAttr(attrs, "axes");
  auto shape = [&]() -> Expected<ops::Dims> {
    switch (op) {
    case OpKind::Reshape:
      if (!ints)
        return fail("Reshape needs its shape operand");
      return ops::reshapeShape(x, *ints, intAttr(attrs, "allowzero", 0) != 0);
    case OpKind::Unsqueeze:
      if (!ints && !attrAxes)
        return fail("Unsqueeze needs axes");
      return ops::unsqueezeShape(x.shape(), ints ? *ints : *attrAxes);
    case OpKind::Squeeze:
      return ops::squeezeShape(x, ints ? Optional<ArrayRef<int64_t>>(*ints)
                                  : attrAxes
                                      ? Optional<ArrayRef<int64_t>>(*attrAxes)
                                      : Optional<ArrayRef<int64_t>>());
    default: { // Expand
      if (!ints)
        return fail("Expand needs its shape operand");
      auto b = broadcastShapes(x.shape(), *ints);
      if (!b)
        return fail("Expand of " + x.str() + " to " + shapeString(*ints) +
                    ": the shapes do not broadcast");
      return ops::Dims(b->begin(), b->end());
    }
    }
  }();
  if (!shape)
    return shape.takeError();
  return Types(one(x.dtype(), *shape));
}

Expected<Types> sliceRule(ArrayRef<Value *> operands) {
  const TensorType &x = operands[0]->type();
  Optional<std::vector<int64_t>> ints[5];
  for (unsigned i = 1; i < 5; ++i) {
    bool present = false;
    ints[i] = constantInts(operands, i, present);
    if (present && !ints[i])
      return Types(); // computed
  }
  if (!ints[1] || !ints[2])
    return fail("Slice needs starts and ends");
  auto given = [&](unsigned i) {
    return ints[i] ? Optional<ArrayRef<int64_t>>(*ints[i])
                   : Optional<ArrayRef<int64_t>>();
  };
  auto box = ops::sliceBox(x.shape(), *ints[1], *ints[2], given(3), given(4));
  if (!box)
    return box.takeError();
  return Types(one(x.dtype(), box->Shape));
}

Expected<Types> transposeRule(ArrayRef<Value *> operands,
                              const AttributeMap &attrs) {
  const TensorType &x = operands[0]->type();
  const std::vector<int64_t> *given = intsAttr(attrs, "perm");
  auto perm = ops::transposePerm(given ? Optional<ArrayRef<int64_t>>(*given)
                                       : Optional<ArrayRef<int64_t>>(),
                                 x.rank());
  if (!perm)
    return perm.takeError();
  ops::Dims shape;
  for (int64_t d : *perm)
    shape.push_back(x.dim(d));
  return Types(one(x.dtype(), shape));
}

/// The parts' sizes on the axis summed, then checked by Concat's one rule
/// (ops::joinAxis).
Expected<Types> concatRule(ArrayRef<Value *> operands,
                           const AttributeMap &attrs) {
  const TensorType &x = operands[0]->type();
  int64_t given = intAttr(attrs, "axis", 0);
  auto axis = ops::normalizeAxis(given, x.rank());
  if (!axis)
    return axis.takeError();
  ops::Dims shape(x.shape().begin(), x.shape().end());
  shape[*axis] = 0;
  std::vector<TensorType> parts;
  for (const Value *v : operands) {
    parts.push_back(v->type());
    if (*axis < v->type().rank())
      shape[*axis] += v->type().dim(*axis);
  }
  TensorType whole(x.dtype(), shape);
  if (auto checked = ops::joinAxis(given, whole, parts); !checked)
    return checked.takeError();
  return Types({whole});
}

Expected<Types> matMulRule(OpKind op, ArrayRef<Value *> operands,
                           const AttributeMap &attrs) {
  const TensorType &a = operands[0]->type(), &b = operands[1]->type();
  if (op == OpKind::Gemm && (a.rank() != 2 || b.rank() != 2))
    return fail("Gemm operands must be 2-D");
  auto s = matMulShape(a.shape(), b.shape(), intAttr(attrs, "transA", 0),
                       intAttr(attrs, "transB", 0));
  if (!s)
    return s.takeError();
  return Types(one(a.dtype(), s->Result));
}

Expected<Types> shapeRule(OpKind op, const TensorType &x,
                          const AttributeMap &attrs) {
  if (op == OpKind::Size)
    return Types(one(DType::I64, {}));
  int64_t rank = x.rank();
  auto clamp = [&](int64_t i) {
    i = i < 0 ? i + rank : i;
    return std::min(std::max<int64_t>(i, 0), rank);
  };
  int64_t start = clamp(intAttr(attrs, "start", 0)),
          end = clamp(intAttr(attrs, "end", rank));
  return Types(one(DType::I64, {std::max<int64_t>(end - start, 0)}));
}

} // namespace

Optional<std::vector<int64_t>> ops::constantInts(const Value *v) {
  const Node *def = v ? v->definingNode() : nullptr;
  if (!def || !def->is(OpKind::Constant) || !isInteger(v->type().dtype()))
    return llvm::None;
  const Attribute *a = def->attr("value");
  if (!a || a->kind() != Attribute::Kind::Tensor)
    return llvm::None;
  return a->asTensor().toInts();
}

bool ops::hasResultTypeRule(OpKind op) {
  const OpInfo &info = opInfo(op);
  if (info.has(opflags::Unary) || info.has(opflags::Broadcast) ||
      isReduction(op))
    return true;
  switch (op) {
  case OpKind::IsNaN:
  case OpKind::IsInf:
  case OpKind::Cast:
  case OpKind::MatMul:
  case OpKind::Gemm:
  case OpKind::Transpose:
  case OpKind::Concat:
  case OpKind::Slice:
  case OpKind::Reshape:
  case OpKind::Squeeze:
  case OpKind::Unsqueeze:
  case OpKind::Expand:
  case OpKind::Constant:
  case OpKind::Shape:
  case OpKind::Size:
    return true;
  default:
    return false;
  }
}

Expected<Types> ops::inferResultTypes(OpKind op, ArrayRef<Value *> operands,
                                      const AttributeMap &attrs) {
  if (!hasResultTypeRule(op))
    return Types();
  const OpInfo &info = opInfo(op);
  if (op != OpKind::Constant && (operands.empty() || !operands[0]))
    return fail(info.Name + " needs its first operand");
  if (info.has(opflags::Unary))
    return Types({operands[0]->type()});
  if (info.has(opflags::Broadcast))
    return broadcastRule(op, operands);
  if (isReduction(op))
    return reductionRule(operands, attrs);
  switch (op) {
  case OpKind::IsNaN:
  case OpKind::IsInf:
    return Types(one(DType::Bool, operands[0]->type().shape()));
  case OpKind::Cast: {
    auto it = attrs.find("to");
    if (it == attrs.end() || it->second.kind() != Attribute::Kind::Type)
      return fail("Cast needs an element type attribute 'to'");
    return Types({operands[0]->type().withDType(it->second.asType())});
  }
  case OpKind::MatMul:
  case OpKind::Gemm:
    return matMulRule(op, operands, attrs);
  case OpKind::Transpose:
    return transposeRule(operands, attrs);
  case OpKind::Concat:
    return concatRule(operands, attrs);
  case OpKind::Slice:
    return sliceRule(operands);
  case OpKind::Constant: {
    auto it = attrs.find("value");
    if (it == attrs.end() || it->second.kind() != Attribute::Kind::Tensor)
      return fail("Constant needs a tensor attribute 'value'");
    return Types({it->second.asTensor().type()});
  }
  case OpKind::Shape:
  case OpKind::Size:
    return shapeRule(op, operands[0]->type(), attrs);
  default:
    return reshapeFamily(op, operands, attrs);
  }
}

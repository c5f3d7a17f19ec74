//===- Verifier.cpp - IR invariants ---------------------------------------===//
#include "compiler/Verifier.h"
#include "compiler/ops/ConvPool.h"
#include "compiler/ops/Norm.h"
#include "compiler/ops/ResultTypes.h"
#include "compiler/ops/Shape.h"

#include "compiler/AttentionShape.h"
#include "compiler/Collectives.h"
#include "compiler/MatMulShape.h"
#include "compiler/OutputHeadShape.h"
#include "compiler/Pools.h"
#include "compiler/StateQuantization.h"

#include "llvm/ADT/SmallPtrSet.h"

using namespace headroom;

std::string headroom::describeNode(const Node &n) {
  unsigned index = 0;
  for (const Node &other : n.parent()->nodes()) {
    if (&other == &n)
      break;
    ++index;
  }
  std::string s = "node " + std::to_string(index) + " ('" + n.op() + "'";
  if (n.numResults() && !n.result(0)->name().empty())
    s += " defining %" + n.result(0)->name();
  if (!n.loc().empty())
    s += " from '" + n.loc() + "'";
  return s + ")";
}

namespace {
class Verifier {
public:
  llvm::Error verify(const Module &m);

private:
  llvm::Error verifyFunction(const Function &f);
  llvm::Error verifyNode(const Node &n);
  llvm::Error verifyArity(const Node &n);
  llvm::Error verifyStateOperands(const Node &n);
  llvm::Error verifyUpdate(const Node &n);
  llvm::Error verifyFlags(const Node &n);
  llvm::Error verifyOwnRules(const Node &n);
  llvm::Error verifyMatrixProduct(const Node &n);
  llvm::Error verifyAttention(const Node &n);
  llvm::Error verifyShapeFamily(const Node &n);
  llvm::Error verifyResultTypes(const Node &n);
  llvm::Error verifyWindowFamily(const Node &n);
  llvm::Error verifyNormFamily(const Node &n);
  llvm::Error verify8bitStates(const Node &n);
  llvm::Error fail(const Node &n, const llvm::Twine &msg) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "in @%s, %s: %s", n.parent()->name().c_str(),
                                   describeNode(n).c_str(), msg.str().c_str());
  }
  llvm::SmallPtrSet<const Value *, 32> Defined;
  llvm::SmallPtrSet<const StateSlot *, 32> States;
  unsigned Ranks = 1;
};
} // namespace

/// AdamW8bitUpdate's slots: an f32/bf16/f16 weight of the gradient's type,
/// u8 moments of its shape, f32 absmaxes of one element per kStateBlock.
llvm::Error Verifier::verify8bitStates(const Node &n) {
  const TensorType &w = n.state()->type();
  if (w.dtype() != DType::F32 && w.dtype() != DType::BF16 &&
      w.dtype() != DType::F16)
    return fail(n, "8-bit moments need an f32, bf16 or f16 weight, not " +
                       w.str());
  if (n.operand(0)->type() != w)
    return fail(n, "updates @" + n.state()->name() + " of type " + w.str() +
                       " with " + n.operand(0)->type().str());
  TensorType codes(DType::U8, w.shape()),
      absmax(DType::F32, {stateBlocks(w.numElements())});
  for (unsigned i = 1; i < 5; ++i) {
    const TensorType &want = i < 3 ? codes : absmax;
    if (n.states()[i]->type() != want)
      return fail(n, "state @" + n.states()[i]->name() + " is " +
                         n.states()[i]->type().str() + ", expected " +
                         want.str());
  }
  return llvm::Error::success();
}

/// Operand and result counts in the op's range; operands defined before.
llvm::Error Verifier::verifyArity(const Node &n) {
  const OpInfo &info = *n.info();
  int ops = n.numOperands(), res = n.numResults();
  if (ops < info.MinOperands ||
      (info.MaxOperands >= 0 && ops > info.MaxOperands))
    return fail(n,
                "has " + llvm::Twine(ops) + " operands, expected " +
                    llvm::Twine(info.MinOperands) + ".." +
                    (info.MaxOperands < 0 ? std::string("any")
                                          : std::to_string(info.MaxOperands)));
  if (res < info.MinResults || (info.MaxResults >= 0 && res > info.MaxResults))
    return fail(n, "has " + llvm::Twine(res) + " results, expected " +
                       llvm::Twine(info.MinResults) + ".." +
                       (info.MaxResults < 0 ? std::string("any")
                                            : std::to_string(info.MaxResults)));
  for (unsigned i = 0; i < n.numOperands(); ++i) {
    Value *v = n.operand(i);
    if (!v) {
      if (i == 0 && !info.has(opflags::Terminator))
        return fail(n, "operand 0 is absent");
      continue;
    }
    if (!Defined.count(v))
      return fail(n, "operand " + llvm::Twine(i) +
                         " is not defined before its use in this function");
  }

  return llvm::Error::success();
}

/// State operands: present exactly on ops that read or write state, in this
/// module, each once, of the type they move.
llvm::Error Verifier::verifyStateOperands(const Node &n) {
  const OpInfo &info = *n.info();
  bool wantsState =
      info.has(opflags::ReadsState) || info.has(opflags::WritesState);
  if (wantsState && !n.state())
    return fail(n, "needs a state operand");
  if (!wantsState && n.state())
    return fail(n, "may not refer to state @" + n.state()->name() +
                       " (only Read and update ops do)");
  unsigned wantStates = n.is(OpKind::AdamW8bitUpdate)  ? 5
                        : n.is(OpKind::AdamWUpdate)    ? 3
                        : n.is(OpKind::MomentumUpdate) ? 2
                                                       : wantsState;
  if (n.states().size() != wantStates)
    return fail(n, "has " + llvm::Twine(n.states().size()) +
                       " state operands, expected " + llvm::Twine(wantStates));
  for (const StateSlot *s : n.states()) {
    if (!States.count(s))
      return fail(n, "refers to state @" + s->name() +
                         " that is not in this module");
    if (llvm::count(n.states(), s) > 1)
      return fail(n, "writes @" + s->name() + " twice");
  }
  if (n.is(OpKind::Read) && n.result(0)->type() != n.state()->type())
    return fail(n, "reads @" + n.state()->name() + " of type " +
                       n.state()->type().str() + " as " +
                       n.result(0)->type().str());
  if (isCollective(n.kind())) {
    std::string why = collectiveError(n, Ranks);
    if (!why.empty())
      return fail(n, why);
  }
  if (info.has(opflags::WritesState) && n.numOperands() == 1 &&
      !n.is(OpKind::AllGatherState) &&
      n.operand(0)->type() != n.state()->type())
    return fail(n, "writes " + n.operand(0)->type().str() + " to @" +
                       n.state()->name() + " of type " +
                       n.state()->type().str());

  return llvm::Error::success();
}

/// Optimizer updates and Accumulate: moments of the weight's type (or f32),
/// scalar operands, the enabled flag.
llvm::Error Verifier::verifyUpdate(const Node &n) {
  bool optimizerUpdate =
      n.is(OpKind::SgdUpdate) || n.is(OpKind::MomentumUpdate) ||
      n.is(OpKind::AdamWUpdate) || n.is(OpKind::AdamW8bitUpdate);
  // The gradient has the weight's type; the moments (a MomentumUpdate's or
  // AdamWUpdate's further slots) too, or f32 for a bf16/f16 weight.
  DType weight = n.state() ? n.state()->type().dtype() : DType::F32;
  bool narrowWeight = weight == DType::BF16 || weight == DType::F16;
  if (n.is(OpKind::AdamW8bitUpdate)) {
    if (auto e = verify8bitStates(n))
      return e;
  } else if (optimizerUpdate || n.is(OpKind::Accumulate))
    for (const StateSlot *s : n.states()) {
      bool f32Moment =
          s != n.state() && narrowWeight &&
          s->type() == TensorType(DType::F32, n.operand(0)->type().shape());
      if (n.operand(0)->type() != s->type() && !f32Moment)
        return fail(n, "updates @" + s->name() + " of type " + s->type().str() +
                           " with " + n.operand(0)->type().str());
    }
  if (optimizerUpdate) {
    // Scalars of the moments' type (AdamW's step size and bias correction,
    // then the gradient's scale; SgdUpdate's: the weight's), then the
    // `enabled` flag.
    unsigned scalars =
        n.is(OpKind::AdamWUpdate) || n.is(OpKind::AdamW8bitUpdate) ? 3 : 1;
    DType t = n.states().back()->type().dtype();
    for (unsigned i = 1; i < n.numOperands(); ++i) {
      Value *v = n.operand(i);
      if (i > scalars) {
        if (!v || v->type() != TensorType(DType::Bool, {}))
          return fail(n, "enabled must be a bool scalar");
        continue;
      }
      if (!v || v->type() != TensorType(t, {}))
        return fail(n, "operand " + llvm::Twine(i) + " must be a " +
                           llvm::Twine(dtypeName(t)) + " scalar");
    }
  }
  return llvm::Error::success();
}

/// What the op's flags promise: Unary keeps the type, SameDType one element
/// type, Broadcast the broadcast shape.
llvm::Error Verifier::verifyFlags(const Node &n) {
  const OpInfo &info = *n.info();
  if (info.has(opflags::Unary) && n.result(0)->type() != n.operand(0)->type())
    return fail(n, "result type " + n.result(0)->type().str() +
                       " differs from operand type " +
                       n.operand(0)->type().str());
  if (info.has(opflags::SameDType)) {
    DType t = n.result(0)->type().dtype();
    for (Value *v : n.operands())
      if (v && v->type().dtype() != t)
        return fail(n, "operand type " + v->type().str() +
                           " has another element type than the result " +
                           n.result(0)->type().str());
  }
  if (info.has(opflags::Broadcast)) {
    llvm::SmallVector<int64_t, 4> shape(n.operand(0)->type().shape().begin(),
                                        n.operand(0)->type().shape().end());
    for (Value *v : n.operands().drop_front()) {
      auto b = broadcastShapes(shape, v->type().shape());
      if (!b)
        return fail(n, "operand shapes do not broadcast (" +
                           shapeString(shape) + " and " +
                           shapeString(v->type().shape()) + ")");
      shape = *b;
    }
    if (llvm::ArrayRef<int64_t>(shape) != n.result(0)->type().shape())
      return fail(n, "result shape " +
                         shapeString(n.result(0)->type().shape()) +
                         " is not the broadcast shape " + shapeString(shape));
  }
  return llvm::Error::success();
}

/// Constant, Cast, Nf4Dequantize and the fused output head: their own rules.
llvm::Error Verifier::verifyOwnRules(const Node &n) {
  if (n.is(OpKind::Constant)) {
    const Attribute *a = n.attr("value");
    if (!a || a->kind() != Attribute::Kind::Tensor)
      return fail(n, "needs a tensor attribute 'value'");
    if (a->asTensor().type() != n.result(0)->type())
      return fail(n, "value is " + a->asTensor().type().str() +
                         " but the result is " + n.result(0)->type().str());
  }
  if (n.is(OpKind::Cast)) {
    const Attribute *a = n.attr("to");
    if (!a || a->kind() != Attribute::Kind::Type)
      return fail(n, "needs an element type attribute 'to'");
    if (n.result(0)->type() != n.operand(0)->type().withDType(a->asType()))
      return fail(n, "result " + n.result(0)->type().str() +
                         " is not the operand cast to " +
                         dtypeName(a->asType()));
  }
  if (n.is(OpKind::Nf4Dequantize)) {
    std::vector<TensorType> types;
    for (const Value *v : n.operands())
      types.push_back(v->type());
    std::string why = nf4OperandError(types, n.result(0)->type());
    if (!why.empty())
      return fail(n, why);
  }
  if (n.is(OpKind::LinearCrossEntropy) ||
      n.is(OpKind::LinearCrossEntropyGrad)) {
    bool grad = n.is(OpKind::LinearCrossEntropyGrad);
    unsigned x = grad ? 1 : 0;
    auto s = outputHeadShape(n.operand(x)->type(), n.operand(x + 1)->type(),
                             n.operand(x + 2)->type(), n.intAttr("transB", 0));
    if (!s)
      return fail(n, llvm::toString(s.takeError()));
    TensorType rows(outputHeadLossType(n.operand(x)->type().dtype()), {s->N});
    if (!grad && n.result(0)->type() != rows)
      return fail(n, "result " + n.result(0)->type().str() + " should be " +
                         rows.str());
    if (grad && n.operand(0)->type() != rows)
      return fail(n, "dloss " + n.operand(0)->type().str() + " should be " +
                         rows.str());
    for (unsigned i = 0; grad && i < n.numResults(); ++i)
      if (n.result(i)->type() != n.operand(x + i)->type())
        return fail(n, "result " + llvm::Twine(i) + " " +
                           n.result(i)->type().str() + " should be " +
                           n.operand(x + i)->type().str());
  }
  return llvm::Error::success();
}

llvm::Error Verifier::verifyNode(const Node &n) {
  using Check = llvm::Error (Verifier::*)(const Node &);
  for (Check c : {&Verifier::verifyArity, &Verifier::verifyStateOperands,
                  &Verifier::verifyUpdate, &Verifier::verifyFlags,
                  &Verifier::verifyOwnRules})
    if (auto e = (this->*c)(n))
      return e;
  if (n.is(OpKind::MatMul) || n.is(OpKind::Gemm))
    if (auto e = verifyMatrixProduct(n))
      return e;
  if (n.is(OpKind::FusedAttention) || n.is(OpKind::FusedAttentionGrad))
    if (auto e = verifyAttention(n))
      return e;
  if (auto e = verifyShapeFamily(n))
    return e;
  if ((n.is(OpKind::Shape) || n.is(OpKind::Size)) &&
      n.result(0)->type().dtype() != DType::I64)
    return fail(n, "result must be i64");
  if (auto e = verifyWindowFamily(n))
    return e;
  if (auto e = verifyNormFamily(n))
    return e;
  return verifyResultTypes(n);
}

/// Conv, the pools and their gradients fit their windows
/// (compiler/ops/ConvPool.h), as the kernels check.
llvm::Error Verifier::verifyWindowFamily(const Node &n) {
  auto type = [&](Value *v) { return v->type(); };
  auto check = [&](llvm::Error e) -> llvm::Error {
    if (e)
      return fail(n, llvm::toString(std::move(e)));
    return llvm::Error::success();
  };
  auto conv = [&](const TensorType &x, const TensorType &w,
                  const TensorType &y) {
    auto s = ops::convShape(n.attrs(), x, w, y);
    return check(s ? llvm::Error::success() : s.takeError());
  };
  auto pool = [&](const TensorType &x, const TensorType &y) {
    auto w = ops::poolWindow(n.attrs(), x, y);
    return check(w ? llvm::Error::success() : w.takeError());
  };
  switch (n.kind()) {
  case OpKind::Conv: // (x, w, b?) -> y
    return conv(type(n.operand(0)), type(n.operand(1)), type(n.result(0)));
  case OpKind::ConvGradInput: // (dy, w) -> dx
    return conv(type(n.result(0)), type(n.operand(1)), type(n.operand(0)));
  case OpKind::ConvGradWeight: // (dy, x) -> dw
    return conv(type(n.operand(1)), type(n.result(0)), type(n.operand(0)));
  case OpKind::MaxPool:
  case OpKind::AveragePool: // x -> y
    return pool(type(n.operand(0)), type(n.result(0)));
  case OpKind::MaxPoolGrad: // (dy, x) -> dx
    return pool(type(n.operand(1)), type(n.operand(0)));
  case OpKind::AveragePoolGrad: // dy -> dx
    return pool(type(n.result(0)), type(n.operand(0)));
  default:
    return llvm::Error::success();
  }
}

/// LayerNormalization and BatchNormalization: the axis or channels their
/// input has (compiler/ops/Norm.h), parameters of one value per normalized
/// column or channel, and a result of the input's type.
llvm::Error Verifier::verifyNormFamily(const Node &n) {
  bool layer = n.is(OpKind::LayerNormalization);
  if (!layer && !n.is(OpKind::BatchNormalization))
    return llvm::Error::success();
  const TensorType &x = n.operand(0)->type();
  int64_t params = 0;
  if (layer) {
    auto rows = ops::layerNormRows(x.shape(), n.intAttr("axis", -1));
    if (!rows)
      return fail(n, llvm::toString(rows.takeError()));
    params = rows->Cols;
  } else {
    auto c = ops::channelShape(x.shape());
    if (!c)
      return fail(n, llvm::toString(c.takeError()));
    params = c->C;
  }
  for (unsigned i = 1; i < n.numOperands(); ++i)
    if (const Value *p = n.operand(i))
      if (auto e = ops::checkNormParam(i, p->type(), params,
                                       isFloat(p->type().dtype())))
        return fail(n, llvm::toString(std::move(e)));
  if (n.result(0)->type() != x)
    return fail(n, "result " + n.result(0)->type().str() + " should be " +
                       x.str());
  return llvm::Error::success();
}

/// Every op with a result-type rule (compiler/ops/ResultTypes.h) has the
/// types it gives.
llvm::Error Verifier::verifyResultTypes(const Node &n) {
  // What verifyFlags and the families' checks cover already (the verifier
  // runs after every pass: the rule is not run twice).
  const OpInfo &info = *n.info();
  bool covered =
      info.has(opflags::Unary) ||
      (info.has(opflags::Broadcast) && info.has(opflags::SameDType)) ||
      n.is(OpKind::Constant) || n.is(OpKind::Cast) || n.is(OpKind::MatMul) ||
      n.is(OpKind::Gemm) || n.is(OpKind::Transpose) || n.is(OpKind::Concat) ||
      n.is(OpKind::Slice);
  if (covered)
    return llvm::Error::success();
  auto inferred = ops::inferResultTypes(n.kind(), n.operands(), n.attrs());
  if (!inferred)
    return fail(n, llvm::toString(inferred.takeError()));
  if (!*inferred)
    return llvm::Error::success();
  if ((*inferred)->size() != n.numResults())
    return fail(n, "has " + llvm::Twine(n.numResults()) +
                       " results; its rule gives " +
                       llvm::Twine((*inferred)->size()));
  for (unsigned i = 0; i < n.numResults(); ++i)
    if (n.result(i)->type() != (**inferred)[i])
      return fail(n, "result " + llvm::Twine(i) + " is " +
                         n.result(i)->type().str() + " but its rule gives " +
                         (**inferred)[i].str());
  return llvm::Error::success();
}

/// The constant integers of operand `i` of `n` (a Constant's value), or
/// none when it is absent or computed.
static llvm::Optional<std::vector<int64_t>> constantInts(const Node &n,
                                                         unsigned i) {
  return ops::constantInts(i < n.numOperands() ? n.operand(i) : nullptr);
}

/// Transpose, Concat, Split, and Slice with constant operands give the
/// types their rules (compiler/ops/Shape.h) say, as the kernels check.
llvm::Error Verifier::verifyShapeFamily(const Node &n) {
  auto types = [](llvm::ArrayRef<Value *> values) {
    std::vector<TensorType> out;
    for (const Value *v : values)
      out.push_back(v->type());
    return out;
  };
  auto expect = [&](llvm::ArrayRef<int64_t> shape) -> llvm::Error {
    const TensorType &y = n.result(0)->type();
    if (y.shape() == shape && y.dtype() == n.operand(0)->type().dtype())
      return llvm::Error::success();
    return fail(n, "result " + y.str() + " should be " +
                       TensorType(n.operand(0)->type().dtype(), shape).str());
  };
  if (n.is(OpKind::Transpose)) {
    const Attribute *given = n.attr("perm");
    if (given && given->kind() != Attribute::Kind::Ints)
      return fail(n, "perm must be a list of integers");
    const TensorType &x = n.operand(0)->type();
    auto perm =
        ops::transposePerm(given ? llvm::makeArrayRef(given->asInts())
                                 : llvm::Optional<llvm::ArrayRef<int64_t>>(),
                           x.rank());
    if (!perm)
      return fail(n, llvm::toString(perm.takeError()));
    ops::Dims shape;
    for (int64_t d : *perm)
      shape.push_back(x.dim(d));
    return expect(shape);
  }
  if (n.is(OpKind::Concat) || n.is(OpKind::Split)) {
    bool concat = n.is(OpKind::Concat);
    auto axis =
        ops::joinAxis(n.intAttr("axis", 0),
                      concat ? n.result(0)->type() : n.operand(0)->type(),
                      types(concat ? n.operands() : n.results()));
    if (!axis)
      return fail(n, llvm::toString(axis.takeError()));
    if (auto sizes = concat ? llvm::None : constantInts(n, 1))
      if (auto e =
              ops::checkSplitSizes(*sizes, n.intAttr("axis", 0),
                                   n.operand(0)->type(), types(n.results())))
        return fail(n, llvm::toString(std::move(e)));
    return llvm::Error::success();
  }
  if (n.is(OpKind::Slice) && n.numOperands() >= 3) {
    llvm::Optional<std::vector<int64_t>> ints[5];
    for (unsigned i = 1; i < std::min(n.numOperands(), 5u); ++i) {
      if (!n.operand(i))
        continue;
      ints[i] = constantInts(n, i);
      if (!ints[i])
        return llvm::Error::success(); // computed: the kernel checks
    }
    if (!ints[1] || !ints[2])
      return llvm::Error::success();
    auto given = [&](unsigned i) {
      return ints[i] ? llvm::makeArrayRef(*ints[i])
                     : llvm::Optional<llvm::ArrayRef<int64_t>>();
    };
    auto box = ops::sliceBox(n.operand(0)->type().shape(), *ints[1], *ints[2],
                             given(3), given(4));
    if (!box)
      return fail(n, llvm::toString(box.takeError()));
    return expect(box->Shape);
  }
  return llvm::Error::success();
}

/// MatMul (numpy: batch dims broadcast, [M, K] x [K, N]; rank >= 2 here) and
/// Gemm ([M, K] x [K, N] after transA/transB) give the shape they declare.
llvm::Error Verifier::verifyMatrixProduct(const Node &n) {
  llvm::ArrayRef<int64_t> a = n.operand(0)->type().shape(),
                          b = n.operand(1)->type().shape(),
                          y = n.result(0)->type().shape();
  if (n.is(OpKind::Gemm) && (a.size() != 2 || b.size() != 2))
    return fail(n, "Gemm operands must be 2-D");
  auto s = matMulShape(a, b, n.intAttr("transA", 0), n.intAttr("transB", 0));
  if (!s)
    return fail(n, llvm::toString(s.takeError()));
  if (llvm::ArrayRef<int64_t>(s->Result) != y)
    return fail(n, "result shape " + shapeString(y) + " should be " +
                       shapeString(s->Result));
  return llvm::Error::success();
}

/// FusedAttention(q, k, v, bias?) -> (out, lse) and FusedAttentionGrad(dout,
/// q, k, v, out, lse, bias?) -> (dq, dk, dv): shapes by attentionShape, one
/// float type for q, k, v and out, lse in attentionLseType.
llvm::Error Verifier::verifyAttention(const Node &n) {
  bool grad = n.is(OpKind::FusedAttentionGrad);
  unsigned first = grad ? 1 : 0, biasAt = first + (grad ? 5 : 3);
  Value *q = n.operand(first), *k = n.operand(first + 1),
        *v = n.operand(first + 2);
  Value *bias = n.numOperands() > biasAt ? n.operand(biasAt) : nullptr;
  for (Value *x : {q, k, v})
    if (!x)
      return fail(n, "q, k and v are required");
  DType t = q->type().dtype();
  if (!isFloat(t) || k->type().dtype() != t || v->type().dtype() != t)
    return fail(n, "q, k and v must share a float element type, got " +
                       q->type().str() + ", " + k->type().str() + " and " +
                       v->type().str());
  if (bias && !isFloat(bias->type().dtype()))
    return fail(n,
                "the bias must be a float tensor, got " + bias->type().str());
  std::optional<llvm::ArrayRef<int64_t>> biasShape;
  if (bias)
    biasShape = bias->type().shape();
  auto s = attentionShape(q->type().shape(), k->type().shape(),
                          v->type().shape(), biasShape);
  if (!s)
    return fail(n, llvm::toString(s.takeError()));
  TensorType out(t, s->outShape()), lse(attentionLseType(t), s->lseShape());
  if (auto attrs = attentionAttrs(n.attrs(), *s); !attrs)
    return fail(n, llvm::toString(attrs.takeError()));
  auto expect = [&](Value *x, const TensorType &want,
                    const char *what) -> llvm::Error {
    if (!x || x->type() != want)
      return fail(n, llvm::Twine(what) + " must be " + want.str() + ", got " +
                         (x ? x->type().str() : std::string("nothing")));
    return llvm::Error::success();
  };
  if (!grad) {
    if (auto e = expect(n.result(0), out, "the output"))
      return e;
    return expect(n.result(1), lse, "lse");
  }
  if (auto e = expect(n.operand(0), out, "dout"))
    return e;
  if (auto e = expect(n.operand(4), out, "out"))
    return e;
  if (auto e = expect(n.operand(5), lse, "lse"))
    return e;
  for (unsigned i = 0; i < 3; ++i)
    if (auto e = expect(n.result(i), n.operand(1 + i)->type(),
                        i == 0   ? "dq"
                        : i == 1 ? "dk"
                                 : "dv"))
      return e;
  if (n.numResults() > 3) {
    if (!bias)
      return fail(n, "dbias needs a bias operand");
    if (auto e = expect(n.result(3), bias->type(), "dbias"))
      return e;
  }
  return llvm::Error::success();
}

llvm::Error Verifier::verifyFunction(const Function &f) {
  Defined.clear();
  for (Value *a : f.arguments())
    Defined.insert(a);
  if (f.nodes().empty() || !f.returnNode())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "function @%s does not end with 'return'",
                                   f.name().c_str());
  for (const Node &n : f.nodes()) {
    if (n.info()->has(opflags::Terminator) && &n != f.returnNode())
      return fail(n, "'return' must be the last node");
    if (auto e = verifyNode(n))
      return e;
    for (Value *r : n.results())
      Defined.insert(r);
  }
  return PoolAssignment(f).check();
}

llvm::Error headroom::checkByteCounts(const Module &m) {
  uint64_t total = 0;
  auto count = [&](const TensorType &t, auto describe) -> llvm::Error {
    auto bytes = t.checkedSizeInBytes();
    if (!bytes)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "%s has type %s: a negative dimension or more than 2^52 bytes (4 "
          "PiB)",
          describe().c_str(), t.str().c_str());
    total += *bytes;
    if (total > (uint64_t(1) << 60))
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "the module's tensors add up to more than 2^60 bytes (at %s, of "
          "type %s)",
          describe().c_str(), t.str().c_str());
    return llvm::Error::success();
  };
  for (const auto &s : m.states())
    if (auto e = count(s->type(), [&] { return "state @" + s->name(); }))
      return e;
  for (const auto &f : m.functions()) {
    for (Value *a : f->arguments())
      if (auto e = count(a->type(), [&] {
            return "argument %" + a->name() + " of @" + f->name();
          }))
        return e;
    for (const Node &n : f->nodes())
      for (Value *r : n.results())
        if (r)
          if (auto e = count(r->type(), [&] {
                return "in @" + f->name() + ", " + describeNode(n) +
                       ", result %" + r->name();
              }))
            return e;
  }
  return llvm::Error::success();
}

llvm::Error Verifier::verify(const Module &m) {
  if (auto e = checkByteCounts(m))
    return e;
  Ranks = m.ranks();
  for (const auto &s : m.states()) {
    States.insert(s.get());
    std::string why = shardedSlotError(*s, Ranks);
    if (!why.empty())
      return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s",
                                     why.c_str());
  }
  for (const auto &f : m.functions())
    if (auto e = verifyFunction(*f))
      return e;
  for (const DriverStep &d : m.driver()) {
    if (!d.Callee || d.Callee->parent() != &m)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "the driver calls a function of another "
                                     "module");
    if (d.Repeat == 0)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "the driver calls @%s 0 times",
                                     d.Callee->name().c_str());
    if (d.SameBatch && &d == &m.driver().front())
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "the driver's first call @%s has no "
                                     "batch before it to reuse",
                                     d.Callee->name().c_str());
    // Every call takes a batch of the same data.
    const Function &first = *m.driver().front().Callee;
    bool same = d.Callee->arguments().size() == first.arguments().size();
    for (size_t i = 0; same && i < first.arguments().size(); ++i)
      same = d.Callee->arguments()[i]->type() == first.arguments()[i]->type() &&
             d.Callee->arguments()[i]->name() == first.arguments()[i]->name();
    if (!same)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "the driver calls @%s and @%s, whose arguments differ",
          first.name().c_str(), d.Callee->name().c_str());
    if (d.SameBatch && d.Repeat != 1)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "the driver repeats @%s on the same "
                                     "batch",
                                     d.Callee->name().c_str());
  }
  return llvm::Error::success();
}

llvm::Error headroom::verifyModule(const Module &m) {
  return Verifier().verify(m);
}

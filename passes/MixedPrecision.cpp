//===- MixedPrecision.cpp - BF16/FP16 compute by a declared policy --------===//
//
// Puts the forward's math in a low-precision float type (bf16 or f16) where
// it is safe, like PyTorch's autocast: one table below says, per op, whether
// it runs low (matrix products and convolutions: the FLOPs), in f32
// (softmax, norms, reductions, Pow/Exp/Log/Erf, losses: what loses accuracy
// or overflows; a cross-entropy reads low logits as they are and computes in
// f32, so no f32 copy of them is kept), or follows its inputs (everything else:
// f32 when any activation input is f32, low when all are). Weights (values
// computed from parameters and constants alone) do not vote: they take the type
// of the activations they meet, as a bias does inside autocast's low-precision
// linear, which ONNX splits into MatMul + Add; an op on weights alone (an
// embedding's Gather) follows the weights. A Cast is inserted where
// a value crosses into another precision, once per value (a weight's low
// copy is made once per step, not per use); a Cast of a Cast back to the
// type it came from is the value itself. The kernels accumulate in f32
// (kernels/cpu/Kernel.h, runKernel).
//
// Autodiff, which runs after, makes the backward match: a MatMul's gradient
// is low like the MatMul, a Cast's gradient is the Cast back, so with master
// weights (the default) parameters stay f32 and their gradients reach the
// optimizer in f32 while the activations the backward keeps are low. With
// master=none the parameters themselves are stored low (LOMO's setting; the
// frozen ones too, such as LoRA's base):
// their Reads are low, their gradients too, and the optimizer updates them
// in f32 with one rounding (SgdUpdate). An NF4 weight (quantize-base) keeps
// its codes and scales and is dequantized straight into the low type.
//
// Requires: one function, the forward, before autodiff. Guarantees: every
// float value is f32 or the low type; the loss is f32.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "compiler/Protocol.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <map>

using namespace headroom;

namespace {

enum class Rule { Low, F32, Follow };

/// The policy: which ops run low, which in f32; the rest follow their
/// inputs.
Rule ruleOf(const Node &n) {
  switch (n.kind()) {
  case OpKind::MatMul:
  case OpKind::Gemm:
  case OpKind::Conv:
  case OpKind::FusedAttention:     // f32 inside, on low q, k and v
  case OpKind::Nf4Dequantize:      // a frozen NF4 weight, made in the low type
  case OpKind::LinearCrossEntropy: // low x and w, an f32 loss per row
    return Rule::Low;
  case OpKind::Softmax:
  case OpKind::LogSoftmax:
  case OpKind::LayerNormalization:
  case OpKind::BatchNormalization:
  case OpKind::ReduceMean:
  case OpKind::ReduceSum:
  case OpKind::ReduceMax:
  case OpKind::ReduceMin:
  case OpKind::ReduceProd:
  case OpKind::CumSum:
  case OpKind::Pow:
  case OpKind::Exp:
  case OpKind::Log:
  case OpKind::Erf:
  case OpKind::SoftmaxCrossEntropyLoss:
  case OpKind::NegativeLogLikelihoodLoss:
    return Rule::F32;
  default:
    return Rule::Follow;
  }
}

/// Operands that are not data: Dropout's ratio keeps its type, and so does
/// FusedAttention's additive bias (f32, added inside in f32).
bool isDataOperand(const Node &n, unsigned i) {
  return !n.is(OpKind::Nf4Dequantize) && // codes and scales, as stored
         !(n.is(OpKind::LinearCrossEntropy) && i == 2) && // labels
         !(n.is(OpKind::Dropout) && i > 0) &&
         !(n.is(OpKind::FusedAttention) && i > 2);
}

/// SoftmaxCrossEntropyLoss on logits already low, without class weights and
/// without its log_prob result: it keeps them low (an f32 loss).
bool readsLowLogits(const Node &n, DType low) {
  return n.is(OpKind::SoftmaxCrossEntropyLoss) &&
         n.operand(0)->type().dtype() == low &&
         (n.numOperands() < 3 || !n.operand(2)) &&
         (n.numResults() < 2 || !n.result(1)->hasUses());
}

/// Results of a fixed type: FusedAttention's lse is f32 whatever q's type.
bool followsOperands(const Node &n, unsigned result) {
  return !(n.is(OpKind::FusedAttention) && result > 0) &&
         !n.is(OpKind::LinearCrossEntropy);
}

class MixedPrecision : public Pass {
public:
  MixedPrecision(DType low, bool masterWeights)
      : Low(low), Master(masterWeights) {}
  llvm::StringRef name() const override { return "mixed-precision"; }
  llvm::Expected<bool> run(Module &m) override;

private:
  /// `v` in type `t`: itself, a Constant's value converted, or one Cast per
  /// (value, type), made before `before`.
  Value *as(Value *v, DType t, Function &f, Node *before);

  DType Low;
  bool Master;
  std::map<std::pair<const Value *, DType>, Value *> Converted;
};

} // namespace

Value *MixedPrecision::as(Value *v, DType t, Function &f, Node *before) {
  if (v->type().dtype() == t)
    return v;
  auto key = std::make_pair(static_cast<const Value *>(v), t);
  if (Value *c = Converted[key])
    return c;
  Builder b(f, before);
  Node *def = v->definingNode();
  b.setLoc(def ? def->loc() : before->loc());
  Value *out;
  if (def && def->is(OpKind::Constant)) {
    const Tensor &value = def->attr("value")->asTensor();
    std::vector<double> elems;
    for (int64_t i = 0; i < value.numElements(); ++i)
      elems.push_back(value.getDouble(i));
    out = b.constant(Tensor::fromDoubles(t, value.type().shape(), elems));
  } else if (def && def->is(OpKind::Cast) &&
             def->operand(0)->type().dtype() == t && isFloat(t) &&
             dtypeSize(t) < dtypeSize(v->type().dtype())) {
    // Cast(Cast(x: t -> wider) -> t) is x: widening is exact (narrowing is
    // not: a model's own rounding stays).
    out = def->operand(0);
  } else {
    AttributeMap attrs;
    attrs["to"] = Attribute::getType(t);
    out = b.apply("Cast", {v}, attrs);
  }
  Converted[key] = out;
  return out;
}

llvm::Expected<bool> MixedPrecision::run(Module &m) {
  auto forward = forwardOf(m, "mixed-precision");
  if (!forward)
    return forward.takeError();
  Function &f = **forward;
  // Without master weights the parameters are stored low, the frozen ones
  // too (LoRA's base, as PEFT and torchtune load it in bf16).
  if (!Master)
    for (const auto &s : m.states())
      if ((s->kind() == StateKind::Param || s->kind() == StateKind::Frozen) &&
          s->type().dtype() == DType::F32 && s->init() != StateInit::Nf4)
        s->setType(s->type().withDType(Low));
  std::vector<Node *> nodes;
  for (Node &n : f.nodes())
    nodes.push_back(&n);
  // Activations: values computed from a data argument.
  llvm::DenseSet<const Value *> activation(f.arguments().begin(),
                                           f.arguments().end());
  for (Node *n : nodes)
    if (llvm::any_of(n->operands(),
                     [&](Value *v) { return v && activation.count(v); }))
      activation.insert(n->results().begin(), n->results().end());
  for (Node *n : nodes) {
    if (n->is(OpKind::Read)) {
      n->result(0)->setType(n->state()->type());
      continue;
    }
    if (n->is(OpKind::Constant) || n->is(OpKind::Cast) ||
        n->info()->hasSideEffects())
      continue;
    // The type the node computes in: its activations' (its weights' when it
    // has no float activation: a Gather of a bf16 embedding is bf16).
    bool anyF32 = false, anyLow = false, anyActivation = false;
    for (unsigned i = 0; i < n->numOperands(); ++i) {
      Value *v = n->operand(i);
      anyActivation |= v && isDataOperand(*n, i) &&
                       isFloat(v->type().dtype()) && activation.count(v);
    }
    for (unsigned i = 0; i < n->numOperands(); ++i) {
      Value *v = n->operand(i);
      if (!v || !isDataOperand(*n, i) || !isFloat(v->type().dtype()) ||
          (anyActivation && !activation.count(v)))
        continue;
      anyF32 |= v->type().dtype() != Low;
      anyLow |= v->type().dtype() == Low;
    }
    // A cross-entropy on low logits reads them as they are and computes in
    // f32 (its kernels widen each element): the same loss and gradient as
    // from an f32 copy, without keeping that copy (the logits are the
    // largest activation of a language model: [tokens, vocabulary]).
    if (readsLowLogits(*n, Low)) {
      for (Value *r : n->results())
        if (isFloat(r->type().dtype()))
          r->setType(r->type().withDType(DType::F32));
      continue;
    }
    Rule rule = ruleOf(*n);
    DType t = rule == Rule::Low   ? Low
              : rule == Rule::F32 ? DType::F32
              : anyF32            ? DType::F32
              : anyLow            ? Low
                                  : DType::F32;
    for (unsigned i = 0; i < n->numOperands(); ++i) {
      Value *v = n->operand(i);
      if (v && isDataOperand(*n, i) && isFloat(v->type().dtype()) &&
          v->type().dtype() != t)
        n->setOperand(i, as(v, t, f, n));
    }
    // Float results computed from the operands take their type; results of
    // a fixed type (masks, indices, the statistics of an f32 norm) keep it.
    for (unsigned i = 0; i < n->numResults(); ++i) {
      Value *r = n->result(i);
      if (followsOperands(*n, i) && isFloat(r->type().dtype()) &&
          r->type().dtype() != t &&
          (r->type().dtype() == DType::F32 || r->type().dtype() == Low))
        r->setType(r->type().withDType(t));
    }
  }
  // The loss is f32 (the seed of the backward, what the step returns).
  Node *ret = f.returnNode();
  for (unsigned i = 0; i < ret->numOperands(); ++i)
    if (isFloat(ret->operand(i)->type().dtype()))
      ret->setOperand(i, as(ret->operand(i), DType::F32, f, ret));
  return true;
}

llvm::Expected<std::unique_ptr<Pass>>
headroom::createMixedPrecisionPass(llvm::StringRef options) {
  auto items = parsePassOptions("mixed-precision", options);
  if (!items)
    return items.takeError();
  DType low = DType::BF16;
  bool master = true;
  for (const auto &[key, value] : *items) {
    if (key == "precision" && (value == "bf16" || value == "fp16")) {
      low = value == "bf16" ? DType::BF16 : DType::F16;
    } else if (key == "master" && (value == "fp32" || value == "none")) {
      master = value == "fp32";
    } else {
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "mixed-precision: %s=%s: expected precision=bf16|fp16 and "
          "master=fp32|none",
          key.c_str(), value.c_str());
    }
  }
  return std::make_unique<MixedPrecision>(low, master);
}

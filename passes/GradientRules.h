//===- GradientRules.h - One gradient rule per op
//--------------------------===//
//
// The rule table of reverse-mode autodiff (passes/Autodiff.cpp). A rule sees
// one forward node and the gradients of its results, and builds the gradients
// of the operands that need one, using the helpers below. Rules never
// mutate the forward graph. An op without a rule is an error naming the op.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_PASSES_GRADIENTRULES_H
#define HEADROOM_PASSES_GRADIENTRULES_H

#include "compiler/IR.h"

#include "llvm/Support/Error.h"

namespace headroom {

class GradContext {
public:
  GradContext(Builder &b, const Node &n, llvm::ArrayRef<Value *> dOut,
              llvm::ArrayRef<bool> needs)
      : B(b), N(n), DOut(dOut), Needs(needs), DIn(n.numOperands(), nullptr) {}

  Builder &B;
  const Node &N;
  /// Gradient of each result; null where no gradient flows.
  llvm::ArrayRef<Value *> DOut;
  /// Whether operand i needs a gradient.
  llvm::ArrayRef<bool> Needs;
  /// Filled by the rule: the gradient of each operand (null for none).
  llvm::SmallVector<Value *, 4> DIn;

  Value *x(unsigned i) const { return N.operand(i); }
  Value *y(unsigned i = 0) const { return N.result(i); }
  Value *dy(unsigned i = 0) const { return DOut[i]; }
  bool needs(unsigned i) const { return i < Needs.size() && Needs[i]; }

  /// A node of `op` on `operands` whose result type is the broadcast of the
  /// operands (element type of the first).
  Value *ew(llvm::StringRef op, llvm::ArrayRef<Value *> operands,
            AttributeMap attrs = {});
  Value *add(Value *a, Value *b) { return ew("Add", {a, b}); }
  Value *sub(Value *a, Value *b) { return ew("Sub", {a, b}); }
  Value *mul(Value *a, Value *b) { return ew("Mul", {a, b}); }
  Value *div(Value *a, Value *b) { return ew("Div", {a, b}); }
  Value *neg(Value *a) { return ew("Neg", {a}); }
  /// A scalar constant of `like`'s element type.
  Value *scalar(double v, Value *like);
  /// An i64 tensor constant.
  Value *ints(llvm::ArrayRef<int64_t> v);
  /// `g` summed over the axes it was broadcast along, reshaped to `to`.
  Value *unbroadcast(Value *g, const TensorType &to);
  Value *reshape(Value *v, llvm::ArrayRef<int64_t> shape);
  Value *transpose(Value *v, llvm::ArrayRef<int64_t> perm);
  Value *reduceSum(Value *v, llvm::ArrayRef<int64_t> axes, bool keepdims);
  Value *zerosLike(const TensorType &t);
  llvm::Error fail(const llvm::Twine &msg) const;
};

using GradRule = llvm::Error (*)(GradContext &ctx);

/// The rule for `op`, or null.
GradRule lookupGradRule(OpKind op);
/// Ops that have a rule (for docs and tests).
std::vector<llvm::StringRef> opsWithGradRules();

} // namespace headroom

#endif // HEADROOM_PASSES_GRADIENTRULES_H

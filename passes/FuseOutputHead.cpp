//===- FuseOutputHead.cpp - The loss without the [tokens, vocab] logits ---===//
//
// A language model's last product and its cross-entropy,
//
//   y = MatMul(h [.., D], w {transB})      the logits [.., V]
//   [Reshape(y) to [N, V]]
//   loss = SoftmaxCrossEntropyLoss(y, labels [N]) {reduction mean|sum,
//                                                  ignore_index?}
//
// hold the whole [N, V] logits, and the backward their gradient beside
// them: with a vocabulary of 128256 and 4096 tokens, 1 GiB each in bf16,
// the largest tensors of the step. This pass replaces the chain with one
// LinearCrossEntropy (compiler/OutputHeadShape.h) whose kernels make the
// logits a chunk of rows at a time (forward, and again in the backward),
// and the reduction as graph ops: the rows' losses summed, over the count
// of labels that are not ignore_index for a mean (SoftmaxCrossEntropyLoss's
// meaning), so autodiff hands each row its share.
//
// Left whole when the logits fit in one chunk (without rows=: fusing would
// save nothing and cost the backward a second product). Declined: a loss
// with class weights or log_prob used, a
// reduction `none`, a product with transA or whose logits have other users,
// a loss of another type than outputHeadLossType's. Option rows=N: rows per
// chunk (default: as many as keep a chunk's logits within
// kOutputHeadChunkBytes).
//
// Requires: one function, the forward, canonicalized, before autodiff.
// Guarantees: the loss is computed from the same products and the same
// rounding of the logits (to x's type, as the product stored them).
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "compiler/Protocol.h"

#include "compiler/OutputHeadShape.h"

#include <optional>

using namespace headroom;

namespace {

struct HeadMatch {
  Node *Loss = nullptr, *Reshape = nullptr, *Product = nullptr;
};

bool onlyUse(const Value *v, const Node *user) {
  return v->users().size() == 1 && v->users().front() == user;
}

/// The chain ending at SoftmaxCrossEntropyLoss `n`, or none.
std::optional<HeadMatch> match(Node &n) {
  if (!n.is(OpKind::SoftmaxCrossEntropyLoss) || n.numOperands() > 2 ||
      (n.numResults() > 1 && n.result(1)->hasUses()) ||
      n.result(0)->type() !=
          TensorType(outputHeadLossType(n.operand(0)->type().dtype()), {}))
    return std::nullopt;
  std::string reduction = n.stringAttr("reduction", "mean");
  if (reduction != "mean" && reduction != "sum")
    return std::nullopt;
  HeadMatch m;
  m.Loss = &n;
  Value *logits = n.operand(0);
  Node *def = logits->definingNode();
  if (def && def->is(OpKind::Reshape) && onlyUse(logits, &n)) {
    m.Reshape = def;
    logits = def->operand(0);
    def = logits->definingNode();
  }
  if (!def || !def->is(OpKind::MatMul) || def->intAttr("transA", 0) ||
      !onlyUse(logits, m.Reshape ? m.Reshape : &n) ||
      def->operand(1)->type().rank() != 2)
    return std::nullopt;
  const TensorType &y = def->result(0)->type(), &scores = n.operand(0)->type();
  if (scores.rank() != 2 || y.rank() < 2 ||
      y.dim(y.rank() - 1) != scores.dim(1) ||
      y.numElements() != scores.numElements())
    return std::nullopt;
  m.Product = def;
  return m;
}

class FuseOutputHead : public Pass {
public:
  explicit FuseOutputHead(int64_t rows) : Rows(rows) {}
  llvm::StringRef name() const override { return "fuse-output-head"; }
  llvm::Expected<bool> run(Module &m) override;

private:
  int64_t Rows;
};

llvm::Expected<bool> FuseOutputHead::run(Module &m) {
  if (m.functions().empty())
    return false;
  auto forward = forwardOf(m, "fuse-output-head");
  if (!forward)
    return forward.takeError();
  Function &f = **forward;
  std::vector<HeadMatch> matches;
  for (Node &n : f.nodes())
    if (auto hm = match(n))
      matches.push_back(*hm);
  bool changed = false;
  for (const HeadMatch &hm : matches) {
    Node *ce = hm.Loss, *mm = hm.Product;
    Value *h = mm->operand(0), *w = mm->operand(1), *labels = ce->operand(1);
    bool transB = mm->intAttr("transB", 0) != 0;
    int64_t n = ce->operand(0)->type().dim(0),
            d = h->type().dim(h->type().rank() - 1);
    auto shape = outputHeadShape(TensorType(h->type().dtype(), {n, d}),
                                 w->type(), labels->type(), transB);
    if (!shape) { // not the head's shapes (a 1-D h, integer labels of rank 2)
      llvm::consumeError(shape.takeError());
      continue;
    }
    // Logits that fit in one default chunk are left whole: fusing would
    // save nothing and make them again in the backward.
    uint64_t logitBytes = uint64_t(n) * uint64_t(shape->V) *
                          dtypeSize(ce->operand(0)->type().dtype());
    if (Rows == 0 && logitBytes <= kOutputHeadChunkBytes)
      continue;
    Builder b(f, ce);
    b.setLoc(ce->loc());
    Value *x = h;
    if (h->type().rank() != 2)
      x = b.apply("Reshape",
                  {h, b.constant(Tensor::fromInts(DType::I64, {2}, {n, d}))});
    AttributeMap attrs;
    attrs["transB"] = Attribute::getInt(transB);
    if (const Attribute *ig = ce->attr("ignore_index"))
      attrs["ignore_index"] = *ig;
    if (Rows > 0)
      attrs["rows"] = Attribute::getInt(Rows);
    DType lossType = outputHeadLossType(x->type().dtype());
    Value *rows = b.createValue("LinearCrossEntropy", {x, w, labels},
                                TensorType(lossType, {n}), attrs);
    AttributeMap sum;
    sum["keepdims"] = Attribute::getInt(0);
    Value *loss = b.apply("ReduceSum", {rows}, sum);
    if (ce->stringAttr("reduction", "mean") == "mean") {
      Value *count;
      if (const Attribute *ig = ce->attr("ignore_index")) {
        // The labels that count: those that are not ignore_index.
        Value *ignore = b.constant(
            Tensor::fromInts(labels->type().dtype(), {}, {ig->asInt()}));
        Value *ignored = b.apply("Equal", {labels, ignore});
        Value *kept = b.apply("Not", {ignored});
        AttributeMap to;
        to["to"] = Attribute::getType(lossType);
        Value *ones = b.apply("Cast", {kept}, to);
        count = b.apply("ReduceSum", {ones}, sum);
      } else {
        count = b.constant(Tensor::fromDoubles(lossType, {}, {double(n)}));
      }
      loss = b.apply("Div", {loss, count});
    }
    loss->setName(ce->result(0)->name());
    ce->result(0)->replaceAllUsesWith(loss);
    ce->erase();
    if (hm.Reshape)
      hm.Reshape->erase();
    mm->erase();
    changed = true;
  }
  return changed;
}

} // namespace

llvm::Expected<std::unique_ptr<Pass>>
headroom::createFuseOutputHeadPass(llvm::StringRef options) {
  auto items = parsePassOptions("fuse-output-head", options);
  if (!items)
    return items.takeError();
  int64_t rows = 0;
  for (const auto &[key, value] : *items) {
    double v = 0;
    if (key != "rows" || llvm::StringRef(value).getAsDouble(v) || v < 1 ||
        v != double(int64_t(v)))
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "fuse-output-head: %s=%s: expected rows=N (a positive whole number)",
          key.c_str(), value.c_str());
    rows = int64_t(v);
  }
  return std::make_unique<FuseOutputHead>(rows);
}

//===- GradientRules.cpp - One gradient rule per op -----------------------===//
//
// Grouped by op family. Notation: x(i) is operand i, y(i) result i, dy(i) the
// gradient of result i; a rule sets DIn[i] for each operand i that needs(i).
// Elementwise rules are written with primitive ops so later passes (fusion,
// mixed precision) see through them; ops whose gradients are awkward in
// primitives have a gradient op with its own kernel (Ops.def, "Gradient ops").
// Every rule has a finite-difference test in test/unit/AutodiffTest.cpp.
//
//===----------------------------------------------------------------------===//
#include "passes/GradientRules.h"

#include "compiler/Verifier.h"

#include <algorithm>
#include <cmath>

using namespace headroom;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

Value *GradContext::ew(llvm::StringRef op, llvm::ArrayRef<Value *> operands,
                       AttributeMap attrs) {
  return B.apply(op, operands, std::move(attrs));
}

Value *GradContext::scalar(double v, Value *like) {
  return B.constant(
      Tensor::fromDoubles(like->type().dtype(), /*shape=*/{}, {v}));
}

Value *GradContext::ints(llvm::ArrayRef<int64_t> v) {
  return B.constant(
      Tensor::fromInts(DType::I64, {static_cast<int64_t>(v.size())}, v));
}

Value *GradContext::reshape(Value *v, llvm::ArrayRef<int64_t> shape) {
  if (v->type().shape() == shape)
    return v;
  return B.apply("Reshape", {v, ints(shape)});
}

Value *GradContext::transpose(Value *v, llvm::ArrayRef<int64_t> perm) {
  AttributeMap attrs;
  attrs["perm"] = Attribute::getInts(perm.vec());
  return B.apply("Transpose", {v}, attrs);
}

Value *GradContext::reduceSum(Value *v, llvm::ArrayRef<int64_t> axes,
                              bool keepdims) {
  if (axes.empty())
    return v;
  AttributeMap attrs;
  attrs["keepdims"] = Attribute::getInt(keepdims);
  return B.apply("ReduceSum", {v, ints(axes)}, attrs);
}

Value *GradContext::unbroadcast(Value *g, const TensorType &to) {
  unsigned extra = g->type().rank() - to.rank();
  llvm::SmallVector<int64_t, 4> axes;
  for (unsigned d = 0; d < g->type().rank(); ++d)
    if (d < extra || (to.dim(d - extra) == 1 && g->type().dim(d) != 1))
      axes.push_back(d);
  return reshape(reduceSum(g, axes, /*keepdims=*/false), to.shape());
}

Value *GradContext::zerosLike(const TensorType &t) {
  return B.constant(Tensor(t));
}

llvm::Error GradContext::fail(const llvm::Twine &msg) const {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "autodiff: %s: %s", describeNode(N).c_str(),
                                 msg.str().c_str());
}

static llvm::Error ok() { return llvm::Error::success(); }

/// Normalized axes of a Reduce* node (operand 1 for ReduceSum at opset 13,
/// attribute `axes` otherwise); empty means all axes.
static llvm::Expected<std::vector<int64_t>> reduceAxes(GradContext &c) {
  std::vector<int64_t> axes;
  int64_t rank = c.x(0)->type().rank();
  if (c.N.numOperands() > 1 && c.x(1)) {
    Node *def = c.x(1)->definingNode();
    if (!def || !def->is(OpKind::Constant))
      return c.fail("axes must be a constant");
    axes = def->attr("value")->asTensor().toInts();
  } else if (const Attribute *a = c.N.attr("axes")) {
    axes = a->asInts();
  }
  if (axes.empty() && c.N.intAttr("noop_with_empty_axes", 0))
    return axes;
  if (axes.empty())
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  for (int64_t &a : axes)
    if (a < 0)
      a += rank;
  return axes;
}

//===----------------------------------------------------------------------===//
// Elementwise arithmetic
//===----------------------------------------------------------------------===//

static llvm::Error gradAdd(GradContext &c) {
  for (unsigned i = 0; i < c.N.numOperands(); ++i)
    if (c.needs(i))
      c.DIn[i] = c.unbroadcast(c.dy(), c.x(i)->type());
  return ok();
}

static llvm::Error gradSub(GradContext &c) {
  if (c.needs(0))
    c.DIn[0] = c.unbroadcast(c.dy(), c.x(0)->type());
  if (c.needs(1))
    c.DIn[1] = c.unbroadcast(c.neg(c.dy()), c.x(1)->type());
  return ok();
}

static llvm::Error gradMul(GradContext &c) {
  if (c.needs(0))
    c.DIn[0] = c.unbroadcast(c.mul(c.dy(), c.x(1)), c.x(0)->type());
  if (c.needs(1))
    c.DIn[1] = c.unbroadcast(c.mul(c.dy(), c.x(0)), c.x(1)->type());
  return ok();
}

static llvm::Error gradDiv(GradContext &c) {
  Value *da = c.div(c.dy(), c.x(1)); // d(a/b)/da = 1/b
  if (c.needs(0))
    c.DIn[0] = c.unbroadcast(da, c.x(0)->type());
  if (c.needs(1)) // d(a/b)/db = -(a/b)/b
    c.DIn[1] = c.unbroadcast(c.neg(c.mul(da, c.y())), c.x(1)->type());
  return ok();
}

static llvm::Error gradPow(GradContext &c) {
  if (c.x(1)->type().dtype() != c.x(0)->type().dtype())
    return c.fail("Pow with an exponent of another element type");
  if (c.needs(0)) { // b * a^(b-1) = b * y / a would divide by zero at a = 0
    Value *bm1 = c.sub(c.x(1), c.scalar(1.0, c.x(1)));
    Value *d = c.mul(c.mul(c.dy(), c.x(1)), c.ew("Pow", {c.x(0), bm1}));
    c.DIn[0] = c.unbroadcast(d, c.x(0)->type());
  }
  if (c.needs(1)) {
    Value *d = c.mul(c.mul(c.dy(), c.y()), c.ew("Log", {c.x(0)}));
    c.DIn[1] = c.unbroadcast(d, c.x(1)->type());
  }
  return ok();
}

static llvm::Error gradSum(GradContext &c) { return gradAdd(c); }

static llvm::Error gradNeg(GradContext &c) {
  c.DIn[0] = c.neg(c.dy());
  return ok();
}

static llvm::Error gradIdentity(GradContext &c) {
  c.DIn[0] = c.dy();
  return ok();
}

static llvm::Error gradSqrt(GradContext &c) { // 0.5 / y
  c.DIn[0] = c.div(c.mul(c.dy(), c.scalar(0.5, c.y())), c.y());
  return ok();
}

static llvm::Error gradReciprocal(GradContext &c) { // -y^2
  c.DIn[0] = c.neg(c.mul(c.mul(c.dy(), c.y()), c.y()));
  return ok();
}

static llvm::Error gradExp(GradContext &c) {
  c.DIn[0] = c.mul(c.dy(), c.y());
  return ok();
}

static llvm::Error gradLog(GradContext &c) {
  c.DIn[0] = c.div(c.dy(), c.x(0));
  return ok();
}

static llvm::Error gradSin(GradContext &c) {
  c.DIn[0] = c.mul(c.dy(), c.ew("Cos", {c.x(0)}));
  return ok();
}

static llvm::Error gradCos(GradContext &c) {
  c.DIn[0] = c.neg(c.mul(c.dy(), c.ew("Sin", {c.x(0)})));
  return ok();
}

static llvm::Error gradErf(GradContext &c) { // 2/sqrt(pi) exp(-x^2)
  Value *e = c.ew("Exp", {c.neg(c.mul(c.x(0), c.x(0)))});
  c.DIn[0] = c.mul(c.mul(c.dy(), e), c.scalar(2.0 / std::sqrt(M_PI), c.x(0)));
  return ok();
}

static llvm::Error gradCast(GradContext &c) {
  if (!isFloat(c.x(0)->type().dtype()))
    return ok();
  AttributeMap attrs;
  attrs["to"] = Attribute::getType(c.x(0)->type().dtype());
  c.DIn[0] = c.B.apply("Cast", {c.dy()}, attrs);
  return ok();
}

//===----------------------------------------------------------------------===//
// Activations
//===----------------------------------------------------------------------===//

static llvm::Error gradTanh(GradContext &c) { // 1 - y^2
  Value *one = c.scalar(1.0, c.y());
  c.DIn[0] = c.mul(c.dy(), c.sub(one, c.mul(c.y(), c.y())));
  return ok();
}

static llvm::Error gradSigmoid(GradContext &c) { // y (1 - y)
  Value *one = c.scalar(1.0, c.y());
  c.DIn[0] = c.mul(c.mul(c.dy(), c.y()), c.sub(one, c.y()));
  return ok();
}

/// Where(x > 0, dy, otherwise), the shape of dy.
static Value *positiveMask(GradContext &c, Value *otherwise) {
  Value *zero = c.scalar(0.0, c.x(0));
  Value *pos = c.B.apply("Greater", {c.x(0), zero});
  return c.ew("Where", {pos, c.dy(), otherwise});
}

static llvm::Error gradRelu(GradContext &c) {
  c.DIn[0] = positiveMask(c, c.scalar(0.0, c.dy()));
  return ok();
}

static llvm::Error gradLeakyRelu(GradContext &c) {
  double alpha = c.N.floatAttr("alpha", 0.01);
  c.DIn[0] = positiveMask(c, c.mul(c.dy(), c.scalar(alpha, c.dy())));
  return ok();
}

static Value *both(GradContext &c, Value *a, Value *b) {
  if (!a || !b)
    return a ? a : b;
  return c.B.apply("And", {a, b});
}

/// Clip: dy where min < x < max, 0 elsewhere -- strict, as PyTorch's
/// hardtanh (what ReLU6 exports to) and like Relu at 0. The bounds get no
/// gradient (torch exports them as constants).
static llvm::Error gradClip(GradContext &c) {
  if (c.needs(1) || c.needs(2))
    return c.fail("Clip's min and max must be constants to be "
                  "differentiated (headroom gives them no gradient)");
  Value *above = nullptr, *below = nullptr;
  if (c.N.numOperands() > 1 && c.x(1))
    above = c.B.apply("Greater", {c.x(0), c.x(1)});
  if (c.N.numOperands() > 2 && c.x(2))
    below = c.B.apply("Less", {c.x(0), c.x(2)});
  Value *inside = both(c, above, below);
  c.DIn[0] =
      inside ? c.ew("Where", {inside, c.dy(), c.scalar(0.0, c.dy())}) : c.dy();
  return ok();
}

/// HardSigmoid: alpha*dy where 0 < alpha*x + beta < 1 (strict, as PyTorch's
/// hardsigmoid_backward), 0 elsewhere.
static llvm::Error gradHardSigmoid(GradContext &c) {
  double alpha = c.N.floatAttr("alpha", 0.2), beta = c.N.floatAttr("beta", 0.5);
  Value *z =
      c.add(c.mul(c.x(0), c.scalar(alpha, c.x(0))), c.scalar(beta, c.x(0)));
  Value *inside = both(c, c.B.apply("Greater", {z, c.scalar(0.0, z)}),
                       c.B.apply("Less", {z, c.scalar(1.0, z)}));
  c.DIn[0] = c.ew("Where", {inside, c.mul(c.dy(), c.scalar(alpha, c.dy())),
                            c.scalar(0.0, c.dy())});
  return ok();
}

static llvm::Error gradAbs(GradContext &c) { // sign(x), 0 at 0 as in PyTorch
  Value *zero = c.scalar(0.0, c.x(0));
  Value *neg = c.B.apply("Less", {c.x(0), zero});
  Value *inner = c.ew("Where", {neg, c.neg(c.dy()), zero});
  c.DIn[0] = positiveMask(c, inner);
  return ok();
}

static llvm::Error gradSoftmax(GradContext &c) { // y (dy - sum(dy y))
  int64_t axis = c.N.intAttr("axis", -1);
  if (axis < 0)
    axis += c.y()->type().rank();
  Value *s = c.reduceSum(c.mul(c.dy(), c.y()), {axis}, /*keepdims=*/true);
  c.DIn[0] = c.mul(c.y(), c.sub(c.dy(), s));
  return ok();
}

static llvm::Error gradLogSoftmax(GradContext &c) { // dy - exp(y) sum(dy)
  int64_t axis = c.N.intAttr("axis", -1);
  if (axis < 0)
    axis += c.y()->type().rank();
  Value *s = c.reduceSum(c.dy(), {axis}, /*keepdims=*/true);
  c.DIn[0] = c.sub(c.dy(), c.mul(c.ew("Exp", {c.y()}), s));
  return ok();
}

static llvm::Error gradDropout(GradContext &c) {
  if (c.N.numResults() < 2)
    return c.fail("training-mode Dropout without its mask result (autodiff "
                  "adds it; was the graph modified after?)");
  // The kernel drops nothing when training_mode is false at run time, so the
  // 1/(1-ratio) scale below is only right if the mode is known to be on.
  if (c.N.numOperands() > 2 && c.x(2)) {
    Node *mode = c.x(2)->definingNode();
    if (!mode || !mode->is(OpKind::Constant))
      return c.fail("Dropout's training_mode must be a constant to be "
                    "differentiated");
  }
  Value *mask = c.B.apply("Cast", {c.y(1)}, [&] {
    AttributeMap a;
    a["to"] = Attribute::getType(c.dy()->type().dtype());
    return a;
  }());
  Value *kept = c.mul(c.dy(), mask);
  Value *ratio = c.N.numOperands() > 1 && c.x(1) ? c.x(1) : nullptr;
  if (!ratio) // default ratio 0.5
    ratio = c.scalar(0.5, c.dy());
  // ONNX lets the ratio have its own float type (mixed precision keeps it
  // f32 on bf16 data): 1 - ratio in its type, then in dy's.
  Value *keep = c.sub(c.scalar(1.0, ratio), ratio);
  if (keep->type().dtype() != c.dy()->type().dtype()) {
    AttributeMap a;
    a["to"] = Attribute::getType(c.dy()->type().dtype());
    keep = c.B.apply("Cast", {keep}, a);
  }
  c.DIn[0] = c.div(kept, keep);
  return ok();
}

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

static llvm::Error gradMatMul(GradContext &c) {
  Value *a = c.x(0), *b = c.x(1), *dy = c.dy();
  unsigned ra = a->type().rank(), rb = b->type().rank();
  if (ra < 2 || rb < 2)
    return c.fail("MatMul with a 1-D operand has no gradient rule yet");
  bool ta = c.N.intAttr("transA", 0), tb = c.N.intAttr("transB", 0);
  // Products read their operands transposed through the flags, never
  // through a Transpose copy.
  auto matmul = [&](Value *l, Value *r, bool tl, bool tr) {
    AttributeMap attrs;
    if (tl)
      attrs["transA"] = Attribute::getInt(1);
    if (tr)
      attrs["transB"] = Attribute::getInt(1);
    return c.B.apply("MatMul", {l, r}, attrs);
  };
  // Y = op(A) op(B): d op(A) = dY op(B)^T, d op(B) = op(A)^T dY, each
  // transposed back when the operand was read transposed.
  if (c.needs(0))
    c.DIn[0] = c.unbroadcast(
        ta ? matmul(b, dy, tb, true) : matmul(dy, b, false, !tb), a->type());
  if (!c.needs(1))
    return ok();
  if (rb == 2 && ra > 2 && !ta) {
    // A shared weight: fold the batch into rows instead of materializing
    // one gradient per batch element and summing them.
    int64_t k = a->type().dim(ra - 1), n = dy->type().dim(ra - 1);
    Value *a2 = c.reshape(a, {a->type().numElements() / k, k});
    Value *dy2 = c.reshape(dy, {dy->type().numElements() / n, n});
    c.DIn[1] = tb ? matmul(dy2, a2, true, false) : matmul(a2, dy2, true, false);
    return ok();
  }
  c.DIn[1] = c.unbroadcast(
      tb ? matmul(dy, a, true, ta) : matmul(a, dy, !ta, false), b->type());
  return ok();
}

static llvm::Error gradGemm(GradContext &c) {
  double alpha = c.N.floatAttr("alpha", 1.0), beta = c.N.floatAttr("beta", 1.0);
  int64_t ta = c.N.intAttr("transA", 0), tb = c.N.intAttr("transB", 0);
  auto gemm = [&](Value *l, Value *r, int64_t tl, int64_t tr) {
    AttributeMap attrs;
    attrs["alpha"] = Attribute::getFloat(alpha);
    attrs["transA"] = Attribute::getInt(tl);
    attrs["transB"] = Attribute::getInt(tr);
    return c.B.apply("Gemm", {l, r}, attrs);
  };
  Value *a = c.x(0), *b = c.x(1), *dy = c.dy();
  if (c.needs(0)) // d op(A) = alpha dy op(B)^T
    c.DIn[0] = ta ? gemm(b, dy, tb, 1) : gemm(dy, b, 0, !tb);
  if (c.needs(1)) // d op(B) = alpha op(A)^T dy
    c.DIn[1] = tb ? gemm(dy, a, 1, ta) : gemm(a, dy, !ta, 0);
  if (c.needs(2)) {
    Value *g = beta == 1.0 ? dy : c.mul(dy, c.scalar(beta, dy));
    c.DIn[2] = c.unbroadcast(g, c.x(2)->type());
  }
  return ok();
}

//===----------------------------------------------------------------------===//
// Reductions, normalizations, losses
//===----------------------------------------------------------------------===//

/// dy broadcast back to x's shape (keeping reduced axes as size 1).
static llvm::Expected<Value *> expandReduced(GradContext &c) {
  auto axes = reduceAxes(c);
  if (!axes)
    return axes.takeError();
  llvm::SmallVector<int64_t, 4> kept;
  for (unsigned d = 0; d < c.x(0)->type().rank(); ++d)
    kept.push_back(llvm::is_contained(*axes, d) ? 1 : c.x(0)->type().dim(d));
  Value *g = c.reshape(c.dy(), kept);
  return c.B.apply("Expand", {g, c.ints(c.x(0)->type().shape())});
}

static llvm::Error gradReduceSum(GradContext &c) {
  auto g = expandReduced(c);
  if (!g)
    return g.takeError();
  c.DIn[0] = *g;
  return ok();
}

static llvm::Error gradReduceMean(GradContext &c) {
  auto g = expandReduced(c);
  if (!g)
    return g.takeError();
  double count = static_cast<double>(c.x(0)->type().numElements()) /
                 static_cast<double>(c.y()->type().numElements());
  c.DIn[0] = c.mul(*g, c.scalar(1.0 / count, *g));
  return ok();
}

static llvm::Error gradSoftmaxCrossEntropyLoss(GradContext &c) {
  if (c.N.numResults() > 1 && c.dy(1))
    return c.fail("the gradient of log_prob is not supported");
  llvm::SmallVector<Value *, 4> operands = {c.dy(), c.x(0), c.x(1)};
  if (c.N.numOperands() > 2 && c.x(2))
    operands.push_back(c.x(2));
  AttributeMap attrs;
  for (const char *name : {"reduction", "ignore_index"})
    if (const Attribute *a = c.N.attr(name))
      attrs[name] = *a;
  c.DIn[0] = c.B.createValue("SoftmaxCrossEntropyLossGrad", operands,
                             c.x(0)->type(), attrs);
  return ok();
}

static llvm::Error gradLayerNormalization(GradContext &c) {
  if ((c.N.numResults() > 1 && c.dy(1)) || (c.N.numResults() > 2 && c.dy(2)))
    return c.fail("gradients of Mean/InvStdDev are not supported");
  AttributeMap attrs;
  attrs["axis"] = Attribute::getInt(c.N.intAttr("axis", -1));
  attrs["epsilon"] = Attribute::getFloat(c.N.floatAttr("epsilon", 1e-5));
  Node *g = c.B.create("LayerNormalizationGrad", {c.dy(), c.x(0), c.x(1)},
                       {c.x(0)->type(), c.x(1)->type(), c.x(1)->type()}, attrs);
  c.DIn[0] = g->result(0);
  c.DIn[1] = g->result(1);
  if (c.N.numOperands() > 2 && c.x(2))
    c.DIn[2] = c.reshape(g->result(2), c.x(2)->type().shape());
  return ok();
}

static llvm::Error gradBatchNormalization(GradContext &c) {
  if (!c.N.intAttr("training_mode", 0)) {
    // Inference mode: an affine map with constant statistics.
    return c.fail("inference-mode BatchNormalization has no gradient rule "
                  "yet; export the model in training mode");
  }
  AttributeMap attrs;
  attrs["epsilon"] = Attribute::getFloat(c.N.floatAttr("epsilon", 1e-5));
  Node *g = c.B.create("BatchNormalizationGrad", {c.dy(), c.x(0), c.x(1)},
                       {c.x(0)->type(), c.x(1)->type(), c.x(2)->type()}, attrs);
  for (unsigned i = 0; i < 3; ++i)
    c.DIn[i] = g->result(i);
  return ok();
}

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

static llvm::Error gradConv(GradContext &c) {
  AttributeMap attrs = c.N.attrs();
  if (c.needs(0))
    c.DIn[0] = c.B.createValue("ConvGradInput", {c.dy(), c.x(1)},
                               c.x(0)->type(), attrs);
  if (c.needs(1))
    c.DIn[1] = c.B.createValue("ConvGradWeight", {c.dy(), c.x(0)},
                               c.x(1)->type(), attrs);
  if (c.needs(2)) {
    llvm::SmallVector<int64_t, 4> axes = {0};
    for (unsigned d = 2; d < c.dy()->type().rank(); ++d)
      axes.push_back(d);
    c.DIn[2] = c.reduceSum(c.dy(), axes, /*keepdims=*/false);
  }
  return ok();
}

static llvm::Error gradMaxPool(GradContext &c) {
  if (c.N.numResults() > 1 && c.dy(1))
    return c.fail("the gradient of MaxPool's Indices is not defined");
  c.DIn[0] = c.B.createValue("MaxPoolGrad", {c.dy(), c.x(0)}, c.x(0)->type(),
                             c.N.attrs());
  return ok();
}

static llvm::Error gradAveragePool(GradContext &c) {
  c.DIn[0] =
      c.B.createValue("AveragePoolGrad", {c.dy()}, c.x(0)->type(), c.N.attrs());
  return ok();
}

static llvm::Error gradGlobalAveragePool(GradContext &c) {
  Value *g = c.B.apply("Expand", {c.dy(), c.ints(c.x(0)->type().shape())});
  double count = static_cast<double>(c.x(0)->type().numElements()) /
                 static_cast<double>(c.y()->type().numElements());
  c.DIn[0] = c.mul(g, c.scalar(1.0 / count, g));
  return ok();
}

static llvm::Error gradPad(GradContext &c) {
  if (c.N.stringAttr("mode", "constant") != "constant")
    return c.fail("only constant-mode Pad has a gradient rule");
  Node *def = c.x(1)->definingNode();
  if (!def || !def->is(OpKind::Constant))
    return c.fail("pads must be a constant");
  std::vector<int64_t> pads = def->attr("value")->asTensor().toInts();
  unsigned rank = c.x(0)->type().rank();
  std::vector<int64_t> starts, ends;
  for (unsigned d = 0; d < rank; ++d) {
    if (pads[d] < 0 || pads[d + rank] < 0)
      return c.fail("negative pads (cropping) have no gradient rule yet");
    starts.push_back(pads[d]);
    ends.push_back(pads[d] + c.x(0)->type().dim(d));
  }
  c.DIn[0] = c.B.apply("Slice", {c.dy(), c.ints(starts), c.ints(ends)});
  return ok();
}

//===----------------------------------------------------------------------===//
// Shapes and data movement
//===----------------------------------------------------------------------===//

static llvm::Error gradReshapeLike(GradContext &c) {
  c.DIn[0] = c.reshape(c.dy(), c.x(0)->type().shape());
  return ok();
}

static llvm::Error gradTranspose(GradContext &c) {
  unsigned rank = c.x(0)->type().rank();
  std::vector<int64_t> perm;
  if (const Attribute *a = c.N.attr("perm"))
    perm = a->asInts();
  else
    for (int64_t d = rank - 1; d >= 0; --d)
      perm.push_back(d);
  std::vector<int64_t> inverse(rank);
  for (unsigned d = 0; d < rank; ++d)
    inverse[perm[d]] = d;
  c.DIn[0] = c.transpose(c.dy(), inverse);
  return ok();
}

static llvm::Error gradConcat(GradContext &c) {
  int64_t axis = c.N.intAttr("axis", 0);
  if (axis < 0)
    axis += c.y()->type().rank();
  std::vector<int64_t> sizes;
  llvm::SmallVector<TensorType, 4> types;
  for (Value *v : c.N.operands()) {
    sizes.push_back(v->type().dim(axis));
    types.push_back(v->type());
  }
  AttributeMap attrs;
  attrs["axis"] = Attribute::getInt(axis);
  Node *split = c.B.create("Split", {c.dy(), c.ints(sizes)}, types, attrs);
  for (unsigned i = 0; i < c.N.numOperands(); ++i)
    if (c.needs(i))
      c.DIn[i] = split->result(i);
  return ok();
}

static llvm::Error gradSplit(GradContext &c) {
  llvm::SmallVector<Value *, 4> parts;
  for (unsigned i = 0; i < c.N.numResults(); ++i)
    parts.push_back(c.dy(i) ? c.dy(i) : c.zerosLike(c.y(i)->type()));
  AttributeMap attrs;
  attrs["axis"] = Attribute::getInt(c.N.intAttr("axis", 0));
  c.DIn[0] = c.B.apply("Concat", parts, attrs);
  return ok();
}

static llvm::Error gradSlice(GradContext &c) {
  llvm::SmallVector<Value *, 5> operands = {c.dy()};
  for (unsigned i = 1; i < c.N.numOperands(); ++i)
    operands.push_back(c.x(i));
  c.DIn[0] = c.B.createValue("SliceGrad", operands, c.x(0)->type());
  return ok();
}

static llvm::Error gradGather(GradContext &c) {
  AttributeMap attrs;
  attrs["axis"] = Attribute::getInt(c.N.intAttr("axis", 0));
  c.DIn[0] =
      c.B.createValue("GatherGrad", {c.dy(), c.x(1)}, c.x(0)->type(), attrs);
  return ok();
}

/// GatherElements: d(data) = dy added into zeros at the indices (repeats
/// accumulate, as torch.gather's backward).
static llvm::Error gradGatherElements(GradContext &c) {
  AttributeMap attrs;
  attrs["axis"] = Attribute::getInt(c.N.intAttr("axis", 0));
  c.DIn[0] = c.B.createValue("GatherElementsGrad", {c.dy(), c.x(1)},
                             c.x(0)->type(), attrs);
  return ok();
}

/// ScatterElements (torch.scatter / scatter_add) and ScatterND, whose
/// gather is GatherElements / GatherND: d(data) is dy with the written
/// positions zeroed ("none") or dy itself ("add"); d(updates) is dy gathered
/// at the indices. "mul" has no rule. ScatterElements' axis carries over.
static llvm::Error gradScatter(GradContext &c, const char *gather) {
  std::string reduction = c.N.stringAttr("reduction", "none");
  if (reduction != "none" && reduction != "add")
    return c.fail(c.N.op() + " with reduction '" + reduction +
                  "' has no gradient rule");
  AttributeMap axis;
  if (c.N.is(OpKind::ScatterElements))
    axis["axis"] = Attribute::getInt(c.N.intAttr("axis", 0));
  if (c.needs(0))
    c.DIn[0] =
        reduction == "add"
            ? c.dy()
            : c.B.createValue(c.N.op(),
                              {c.dy(), c.x(1), c.zerosLike(c.x(2)->type())},
                              c.dy()->type(), axis);
  if (c.needs(2))
    c.DIn[2] = c.B.createValue(gather, {c.dy(), c.x(1)}, c.x(2)->type(), axis);
  return ok();
}
static llvm::Error gradScatterElements(GradContext &c) {
  return gradScatter(c, "GatherElements");
}
static llvm::Error gradScatterND(GradContext &c) {
  return gradScatter(c, "GatherND");
}

/// GatherND: d(data) = dy's slices added into zeros at the index tuples.
static llvm::Error gradGatherND(GradContext &c) {
  if (c.N.intAttr("batch_dims", 0) != 0)
    return c.fail("GatherND with batch_dims has no gradient rule");
  AttributeMap add;
  add["reduction"] = Attribute::getString("add");
  c.DIn[0] = c.B.createValue("ScatterND",
                             {c.zerosLike(c.x(0)->type()), c.x(1), c.dy()},
                             c.x(0)->type(), add);
  return ok();
}

static llvm::Error gradExpand(GradContext &c) {
  c.DIn[0] = c.unbroadcast(c.dy(), c.x(0)->type());
  return ok();
}

static llvm::Error gradWhere(GradContext &c) {
  Value *zero = c.scalar(0.0, c.dy());
  if (c.needs(1))
    c.DIn[1] =
        c.unbroadcast(c.ew("Where", {c.x(0), c.dy(), zero}), c.x(1)->type());
  if (c.needs(2))
    c.DIn[2] =
        c.unbroadcast(c.ew("Where", {c.x(0), zero, c.dy()}), c.x(2)->type());
  return ok();
}

static llvm::Error gradTrilu(GradContext &c) {
  llvm::SmallVector<Value *, 2> operands = {c.dy()};
  if (c.N.numOperands() > 1)
    operands.push_back(c.x(1));
  c.DIn[0] = c.B.apply("Trilu", operands, c.N.attrs());
  return ok();
}

/// CumSum: each x_k feeds every later (inclusive: and its own) running sum,
/// so dx is the running sum of dy the other way, as exclusive as y was.
static llvm::Error gradCumSum(GradContext &c) {
  AttributeMap attrs = c.N.attrs();
  attrs["reverse"] = Attribute::getInt(!c.N.intAttr("reverse", 0));
  c.DIn[0] = c.B.apply("CumSum", {c.dy(), c.x(1)}, std::move(attrs));
  return ok();
}

/// FusedAttention(q, k, v, bias?) -> (out, lse): one FusedAttentionGrad
/// recomputes the probabilities from lse (with the forward's attributes,
/// its `stream` among them, so that dropout draws the forward's mask), and
/// gives the bias's gradient too when the bias is trained.
static llvm::Error gradFusedAttention(GradContext &c) {
  if (c.dy(1))
    return c.fail("the gradient of lse is not supported");
  if (!c.dy(0))
    return ok();
  llvm::SmallVector<Value *, 7> operands = {c.dy(), c.x(0), c.x(1),
                                            c.x(2), c.y(0), c.y(1)};
  llvm::SmallVector<TensorType, 4> types = {c.x(0)->type(), c.x(1)->type(),
                                            c.x(2)->type()};
  bool bias = c.N.numOperands() > 3 && c.x(3);
  if (bias)
    operands.push_back(c.x(3));
  // A trained bias (T5's relative positions) gets d(bias): d(scores)
  // summed over the axes it broadcasts along.
  if (bias && c.needs(3))
    types.push_back(c.x(3)->type());
  Node *g = c.B.create("FusedAttentionGrad", operands, types, c.N.attrs());
  for (unsigned i = 0; i < g->numResults(); ++i)
    c.DIn[i] = g->result(i);
  return ok();
}

/// LinearCrossEntropy(x, w, labels) -> loss [N]: one LinearCrossEntropyGrad
/// makes each chunk's logits again, and gives dw too when w trains.
static llvm::Error gradLinearCrossEntropy(GradContext &c) {
  if (!c.dy(0))
    return ok();
  llvm::SmallVector<TensorType, 2> types = {c.x(0)->type()};
  if (c.needs(1))
    types.push_back(c.x(1)->type());
  Node *g = c.B.create("LinearCrossEntropyGrad",
                       {c.dy(), c.x(0), c.x(1), c.x(2)}, types, c.N.attrs());
  c.DIn[0] = g->result(0);
  if (c.needs(1))
    c.DIn[1] = g->result(1);
  return ok();
}

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

namespace {
struct RuleRow {
  OpKind Op;
  GradRule Rule;
};
} // namespace

/// Keyed by OpKind: a rule for an op that does not exist does not compile.
static llvm::ArrayRef<RuleRow> ruleRows() {
  static const RuleRow table[] = {
      // Elementwise arithmetic.
      {OpKind::Add, gradAdd},
      {OpKind::Sub, gradSub},
      {OpKind::Mul, gradMul},
      {OpKind::Div, gradDiv},
      {OpKind::Pow, gradPow},
      {OpKind::Sum, gradSum},
      {OpKind::Neg, gradNeg},
      {OpKind::Identity, gradIdentity},
      {OpKind::Sqrt, gradSqrt},
      {OpKind::Reciprocal, gradReciprocal},
      {OpKind::Exp, gradExp},
      {OpKind::Log, gradLog},
      {OpKind::Sin, gradSin},
      {OpKind::Cos, gradCos},
      {OpKind::Erf, gradErf},
      {OpKind::Cast, gradCast},
      // Activations.
      {OpKind::Tanh, gradTanh},
      {OpKind::Sigmoid, gradSigmoid},
      {OpKind::Relu, gradRelu},
      {OpKind::LeakyRelu, gradLeakyRelu},
      {OpKind::Clip, gradClip},
      {OpKind::HardSigmoid, gradHardSigmoid},
      {OpKind::Abs, gradAbs},
      {OpKind::Softmax, gradSoftmax},
      {OpKind::LogSoftmax, gradLogSoftmax},
      {OpKind::Dropout, gradDropout},
      {OpKind::FusedAttention, gradFusedAttention},
      {OpKind::LinearCrossEntropy, gradLinearCrossEntropy},
      // Linear algebra.
      {OpKind::MatMul, gradMatMul},
      {OpKind::Gemm, gradGemm},
      // Reductions, normalizations, losses.
      {OpKind::ReduceSum, gradReduceSum},
      {OpKind::ReduceMean, gradReduceMean},
      {OpKind::SoftmaxCrossEntropyLoss, gradSoftmaxCrossEntropyLoss},
      {OpKind::LayerNormalization, gradLayerNormalization},
      {OpKind::BatchNormalization, gradBatchNormalization},
      // Convolution and pooling.
      {OpKind::Conv, gradConv},
      {OpKind::MaxPool, gradMaxPool},
      {OpKind::AveragePool, gradAveragePool},
      {OpKind::GlobalAveragePool, gradGlobalAveragePool},
      {OpKind::Pad, gradPad},
      // Shapes and data movement.
      {OpKind::Reshape, gradReshapeLike},
      {OpKind::Flatten, gradReshapeLike},
      {OpKind::Squeeze, gradReshapeLike},
      {OpKind::Unsqueeze, gradReshapeLike},
      {OpKind::Transpose, gradTranspose},
      {OpKind::Concat, gradConcat},
      {OpKind::Split, gradSplit},
      {OpKind::Slice, gradSlice},
      {OpKind::Gather, gradGather},
      {OpKind::GatherElements, gradGatherElements},
      {OpKind::ScatterElements, gradScatterElements},
      {OpKind::GatherND, gradGatherND},
      {OpKind::ScatterND, gradScatterND},
      {OpKind::Expand, gradExpand},
      {OpKind::Where, gradWhere},
      {OpKind::Trilu, gradTrilu},
      {OpKind::CumSum, gradCumSum},
  };
  return table;
}

GradRule headroom::lookupGradRule(OpKind op) {
  static const std::vector<GradRule> byKind = [] {
    std::vector<GradRule> v(allOps().size(), nullptr);
    for (const RuleRow &r : ruleRows())
      v[static_cast<size_t>(r.Op)] = r.Rule;
    return v;
  }();
  return byKind[static_cast<size_t>(op)];
}

std::vector<llvm::StringRef> headroom::opsWithGradRules() {
  std::vector<llvm::StringRef> ops;
  for (const RuleRow &r : ruleRows())
    ops.push_back(opInfo(r.Op).Name);
  std::sort(ops.begin(), ops.end());
  return ops;
}

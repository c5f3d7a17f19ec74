//===- Optimizer.cpp - Turn parameter gradients into updates --------------===//
//
// Replaces every ParamGrad(@w, %g) with the update of @w:
//   sgd       w -= lr (g + wd w)
//   momentum  MomentumUpdate(@w, @w.momentum_buffer, %g): b = mu b + g';
//             w -= lr (nesterov ? g' + mu b : b)   (g' = g + wd w)
//   adamw     AdamWUpdate(@w, @w.exp_avg, @w.exp_avg_sq, %g, %step_size,
//             %sqrt_bc2): w *= 1 - lr wd;  m = b1 m + (1-b1) g;
//             v = b2 v + (1-b2) g^2;
//             w -= (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//             state=int8: AdamW8bitUpdate(@w, @w.exp_avg, @w.exp_avg_sq,
//             @w.exp_avg.absmax, @w.exp_avg_sq.absmax, ...) for parameters
//             of >= 4096 elements, the moments u8 codes with an f32 absmax
//             per 256 (bitsandbytes' AdamW8bit)
//   lomo      SgdUpdate(@w, %g): sgd's arithmetic in one in-place op
//   adalomo   Adafactor's factored second moment (row and column means of
//             g^2 + eps1 for matrices, the full g^2 + eps1 for vectors) with
//             beta2_t = 1 - t^-0.8; u = g / sqrt(v); u /= max(1, rms(u) /
//             clip_threshold); lr_t = lr max(eps2, rms(w)); w *= 1 - lr_t wd;
//             w -= lr_t u  (Lv et al. 2023, the authors' order of operations)
// sgd/momentum/adamw are torch.optim's arithmetic in its order of
// operations. sgd is written in primitive ops and Assign; momentum and adamw
// are one in-place op each, whose kernel reads and writes the weight and its
// moments in one pass: as primitive ops they were ~10 passes over
// parameter-sized temporaries. Moments are `optimizer` state slots named
// `<param>.momentum_buffer`, `.exp_avg`, `.exp_avg_sq`, `.exp_avg_sq_row`,
// `.exp_avg_sq_col`; step counts are `adamw.step` / `adalomo.step` (f64).
//
// lomo and adalomo are fused into the backward: each update depends on its
// own gradient only, so `schedule` runs it where the gradient is complete and
// the gradient dies there. Clipping needs the global norm before the first
// update: when the gradients are kept anyway (the accumulators of gradient
// accumulation), the norm is taken from them in the same function; otherwise
// the function is cloned into @grad_norm, which runs forward + backward and
// only stores the clip coefficient (state `clip.scale`), and the driver runs
// it on the same batch before the step -- LOMO's two backward passes.
//
// With clipping, every gradient is scaled by min(1, max_norm / (norm +
// 1e-6)), the norm summed in f32 in the order the gradients are complete, and
// the function computing the norm also returns it.
//
// Requires: autodiff has run (ParamGrad nodes at the end of the function).
// Guarantees: no ParamGrad remains; every trained parameter has one update.
//
//===----------------------------------------------------------------------===//
#include "passes/Optimizer.h"

#include "compiler/Protocol.h"
#include "compiler/StateQuantization.h"
#include "compiler/UpdateAnalysis.h"

#include "passes/Passes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <algorithm>
#include <cmath>

#include <limits>
#include <map>

using namespace headroom;

namespace {

/// `v` as element type `t` (itself when it has it).
Value *cast(Builder &b, Value *v, DType t) {
  if (v->type().dtype() == t)
    return v;
  AttributeMap a;
  a["to"] = Attribute::getType(t);
  return b.apply("Cast", {v}, a);
}

class Optimizer : public Pass {
public:
  explicit Optimizer(OptimizerOptions o) : O(o) {}
  llvm::StringRef name() const override { return "optimizer"; }
  llvm::Expected<bool> run(Module &m) override;

private:
  Value *scalar(Builder &b, double v, DType t) {
    return b.constant(Tensor::fromDoubles(t, {}, {v}));
  }
  llvm::Error updateFunction(Module &m, Function &f);
  llvm::Error addNormPass(Module &m, Function &f, Builder &b, StateSlot *offset,
                          Value *&coef, Value *&finite);
  llvm::Error checkWeightType(const std::string &name,
                              const TensorType &type) const;
  void updateLossScale(Builder &b, Value *finite, StateSlot *offset,
                       StateSlot *good);
  /// The loss scale 2^(16 + offset), f32.
  Value *scaleValue(Builder &b, StateSlot *offset);
  /// The update of `w` from `g`; `scale` (null: 1) multiplies g first and a
  /// false `enabled` (null: true) skips it.
  void update(Module &m, Builder &b, StateSlot *w, Value *g, Value *step,
              Value *scale, Value *enabled);
  void adalomo(Module &m, Builder &b, StateSlot *w, Value *g, Value *step);
  /// lr / (1 - b1^t) and sqrt(1 - b2^t), computed in f64 from the step count
  /// and rounded once to `t`; built once per element type and shared.
  std::pair<Value *, Value *> biasCorrections(Builder &b, Value *step, DType t);
  /// AdaLomo's beta2_t and 1 - beta2_t, in f64 rounded to `t`, shared.
  std::pair<Value *, Value *> adalomoDecay(Builder &b, Value *step, DType t);

  /// The slot `name` (see stateSlotFor). A slot of that name with another
  /// type or kind goes to Conflict, which the pass returns when it ends: the
  /// IR built meanwhile is never used.
  StateSlot *slot(Module &m, const std::string &name, const TensorType &type) {
    auto s = stateSlotFor(m, name, type, StateKind::Optimizer, "optimizer");
    if (s)
      return *s;
    if (!Conflict)
      Conflict = s.takeError();
    else
      llvm::consumeError(s.takeError());
    return m.lookupState(name);
  }

  std::map<DType, std::pair<Value *, Value *>> Corrections;
  /// Per function, the loss scale its backward was seeded with.
  llvm::DenseMap<const Function *, Value *> SeedScales;
  llvm::Error Conflict = llvm::Error::success();

  OptimizerOptions O;
};

/// The sum of the squares of every element of `gs`, in f32 whatever their
/// type: the square of the global L2 norm, and not finite when any element is
/// not.
Value *sumOfSquares(Builder &b, llvm::ArrayRef<Value *> gs) {
  Value *total = nullptr;
  for (Value *g : gs) {
    // Squares summed in f32 whatever the gradient's type (mixed precision
    // without master weights has bf16 gradients).
    if (g->type().dtype() != DType::F32 && g->type().dtype() != DType::F64)
      g = cast(b, g, DType::F32);
    // Pow(g, 2), not Mul(g, g): the constant exponent makes it part of the
    // update (compiler/UpdateAnalysis.h), so `schedule` squares each gradient
    // where it is complete.
    Value *sq = b.apply(
        "Pow",
        {g, b.constant(Tensor::fromDoubles(g->type().dtype(), {}, {2}))});
    AttributeMap keep;
    keep["keepdims"] = Attribute::getInt(0);
    Value *s = cast(b, b.apply("ReduceSum", {sq}, keep), DType::F32);
    total = total ? b.apply("Add", {total, s}) : s;
  }
  // The data-parallel pass sums every rank's shard of it.
  if (total && total->definingNode())
    total->definingNode()->setAttr("grad_norm_sq", Attribute::getInt(1));
  return total;
}

/// The global L2 norm (torch's clip_grad_norm_) from the sum of squares of
/// gradients scaled by `scale` (null: 1), and the clip coefficient
/// min(1, maxNorm / (norm + 1e-6)).
std::pair<Value *, Value *> clipCoefficient(Builder &b, Value *total,
                                            Value *scale, double maxNorm) {
  auto k = [&](double v) {
    return b.constant(Tensor::fromDoubles(DType::F32, {}, {v}));
  };
  Value *norm = b.apply("Sqrt", {total});
  if (scale)
    norm = b.apply("Div", {norm, scale});
  Value *coef = b.apply("Div", {k(maxNorm), b.apply("Add", {norm, k(1e-6)})});
  coef = b.apply("Min", {coef, k(1.0)});
  return {norm, coef};
}

/// Whether the step may update: `total` (the gradients' sum of squares,
/// not finite when any element is not) and f's loss are finite.
Value *finiteStep(Builder &b, Function &f, Value *total) {
  Value *inf = b.constant(Tensor::fromDoubles(
      DType::F32, {}, {std::numeric_limits<double>::infinity()}));
  Value *ok = b.apply("Less", {total, inf});
  Value *loss = f.loss();
  if (!loss || !isFloat(loss->type().dtype()) ||
      loss->type().numElements() != 1)
    return ok;
  Value *l = cast(b, loss, DType::F32);
  if (l->type().rank() != 0)
    l = b.apply("Reshape",
                {l, b.constant(Tensor::fromInts(DType::I64, {0}, {}))});
  Value *lossOk = b.apply("Less", {b.apply("Abs", {l}), inf});
  return b.apply("And", {ok, lossOk});
}

/// A skipped step writes every slot after `start` with its old value.
void wrapWrites(Function &f, Node *start, Value *finite) {
  std::vector<Node *> assigns;
  for (auto it = std::next(start->getIterator()); it != f.nodes().end(); ++it)
    if (it->is(OpKind::Assign))
      assigns.push_back(&*it);
  for (Node *n : assigns) {
    Builder wb(f, n);
    Value *now = n->operand(0);
    n->setOperand(0, wb.apply("Where", {finite, now, wb.read(n->state())}));
  }
}

/// The ParamGrad nodes of `f`, in the order their gradients are complete
/// (the order of the nodes defining them), which is the order the norm of
/// clipping sums them in: a fused update pass can then drop each gradient
/// right after adding its square.
std::vector<Node *> paramGrads(Function &f) {
  llvm::DenseMap<const Node *, int> position;
  std::vector<Node *> grads;
  for (Node &n : f.nodes()) {
    position[&n] = position.size();
    if (n.is(OpKind::ParamGrad))
      grads.push_back(&n);
  }
  auto completion = [&](Node *n) {
    Node *def = n->operand(0)->definingNode();
    return def ? position.lookup(def) : -1;
  };
  std::stable_sort(grads.begin(), grads.end(), [&](Node *a, Node *b) {
    return completion(a) < completion(b);
  });
  return grads;
}

/// Replaces f's `return` with one returning `extra` after its values.
void appendResult(Function &f, Value *extra) {
  Node *ret = f.returnNode();
  llvm::SmallVector<Value *, 2> results(ret->operands().begin(),
                                        ret->operands().end());
  results.push_back(extra);
  f.createNode("Return", results, {});
  ret->erase();
}

} // namespace

std::pair<Value *, Value *> Optimizer::biasCorrections(Builder &b, Value *step,
                                                       DType t) {
  auto it = Corrections.find(t);
  if (it != Corrections.end())
    return it->second;
  auto pow = [&](double base) {
    return b.apply("Pow", {scalar(b, base, DType::F64), step});
  };
  Value *one = scalar(b, 1.0, DType::F64);
  Value *bc1 = b.apply("Sub", {one, pow(O.Beta1)});
  Value *bc2 = b.apply("Sub", {one, pow(O.Beta2)});
  Value *stepSize = b.apply("Div", {scalar(b, O.Lr, DType::F64), bc1});
  Value *sqrtBc2 = b.apply("Sqrt", {bc2});
  // Two statements: the casts' order must not be the compiler's choice.
  Value *stepSizeT = cast(b, stepSize, t);
  auto result = std::make_pair(stepSizeT, cast(b, sqrtBc2, t));
  Corrections[t] = result;
  return result;
}

std::pair<Value *, Value *> Optimizer::adalomoDecay(Builder &b, Value *step,
                                                    DType t) {
  auto it = Corrections.find(t);
  if (it != Corrections.end())
    return it->second;
  Value *pow = b.apply("Pow", {step, scalar(b, O.DecayRate, DType::F64)});
  Value *beta2t = b.apply("Sub", {scalar(b, 1.0, DType::F64), pow});
  Value *rest = b.apply("Sub", {scalar(b, 1.0, DType::F64), beta2t});
  Value *beta2T = cast(b, beta2t, t);
  auto result = std::make_pair(beta2T, cast(b, rest, t));
  Corrections[t] = result;
  return result;
}

void Optimizer::adalomo(Module &m, Builder &b, StateSlot *s, Value *g,
                        Value *step) {
  DType t = g->type().dtype();
  auto k = [&](double v) { return scalar(b, v, t); };
  auto moment = [&](const char *suffix, TensorType type) {
    return slot(m, s->name() + "." + suffix, type);
  };
  auto mean = [&](Value *x, llvm::ArrayRef<int64_t> axes) {
    AttributeMap a;
    a["keepdims"] = Attribute::getInt(1);
    if (axes.empty())
      a["keepdims"] = Attribute::getInt(0);
    else
      a["axes"] = Attribute::getInts(axes);
    return b.apply("ReduceMean", {x}, a);
  };
  auto rsqrt = [&](Value *x) {
    return b.apply("Reciprocal", {b.apply("Sqrt", {x})});
  };
  // Exponential moving average in the authors' form v*beta2_t + x*(1-beta2_t).
  auto decay = adalomoDecay(b, step, t);
  Value *beta2t = decay.first, *rest = decay.second;
  auto average = [&](StateSlot *slot, Value *x) {
    Value *v = b.apply("Add", {b.apply("Mul", {b.read(slot), beta2t}),
                               b.apply("Mul", {x, rest})});
    b.create("Assign", {v}, {}, {}, slot);
    return v;
  };
  Value *u = b.apply("Add", {b.apply("Pow", {g, k(2.0)}), k(O.Eps1)});
  Value *upd;
  const TensorType &type = s->type();
  if (type.rank() > 1) {
    // Row and column means of u, kept with size-1 axes so they broadcast.
    Value *rowMean = mean(u, {-1}), *colMean = mean(u, {-2});
    Value *row = average(moment("exp_avg_sq_row", rowMean->type()), rowMean);
    Value *col = average(moment("exp_avg_sq_col", colMean->type()), colMean);
    Value *rowFactor = rsqrt(b.apply("Div", {row, mean(row, {-2})}));
    Value *factors = b.apply("Mul", {rowFactor, rsqrt(col)});
    upd = b.apply("Mul", {factors, g});
  } else {
    Value *v = average(moment("exp_avg_sq", type), u);
    upd = b.apply("Mul", {rsqrt(v), g});
  }
  auto rms = [&](Value *x) {
    return b.apply("Sqrt", {mean(b.apply("Mul", {x, x}), {})});
  };
  Value *over =
      b.apply("Max", {b.apply("Div", {rms(upd), k(O.ClipThreshold)}), k(1.0)});
  upd = b.apply("Div", {upd, over});
  Value *w = b.read(s);
  Value *lrT = b.apply("Mul", {k(O.Lr), b.apply("Max", {k(O.Eps2), rms(w)})});
  if (O.WeightDecay != 0)
    w = b.apply(
        "Mul",
        {w, b.apply("Sub", {k(1.0), b.apply("Mul", {lrT, k(O.WeightDecay)})})});
  b.create("Assign", {b.apply("Sub", {w, b.apply("Mul", {upd, lrT})})}, {}, {},
           s);
}

void Optimizer::update(Module &m, Builder &b, StateSlot *s, Value *g,
                       Value *step, Value *scale, Value *enabled) {
  DType t = g->type().dtype();
  auto k = [&](double v) { return scalar(b, v, t); };
  // A narrow weight's momentum and AdamW moments (and their scalars) are
  // f32: the update computes in f32 and rounds the weight once.
  bool narrow = t == DType::BF16 || t == DType::F16;
  // 8-bit moments compute in f32 whatever the weight (f32, bf16 or f16).
  bool int8 = O.int8Moments(s->type().numElements());
  DType mt = narrow || int8 ? DType::F32 : t;
  auto moment = [&](const char *suffix) {
    return slot(m, s->name() + "." + suffix, TensorType(mt, s->type().shape()));
  };
  auto lrAndDecay = [&] {
    AttributeMap a;
    a["lr"] = Attribute::getFloat(O.Lr);
    a["weight_decay"] = Attribute::getFloat(O.WeightDecay);
    return a;
  };
  // The fused updates and SgdUpdate take the scale, then the flag.
  auto fused = [&](llvm::StringRef op, llvm::SmallVector<Value *, 5> operands,
                   AttributeMap a, llvm::ArrayRef<StateSlot *> more) {
    DType st = more.empty() ? t : mt; // the scalars' type: the moments'
    if (scale || enabled)
      operands.push_back(scale ? cast(b, scale, st) : scalar(b, 1.0, st));
    if (enabled)
      operands.push_back(enabled);
    Node *n = b.create(op, operands, {}, a, s);
    for (StateSlot *ms : more)
      n->addState(ms);
  };
  // A parameter stored in bf16/f16 (mixed precision, no master weights) is
  // updated in f32 and rounded once by SgdUpdate's kernel, for sgd as for
  // lomo (so the two give the same weights).
  if (O.Kind == OptimizerOptions::Kind::Lomo ||
      (narrow && O.Kind == OptimizerOptions::Kind::Sgd))
    return fused("SgdUpdate", {g}, lrAndDecay(), {});
  // torch.optim's arithmetic in one pass over the weight and its moments
  // (kernels/cpu/Update.cpp), rounded as the same ops would round.
  if (O.Kind == OptimizerOptions::Kind::AdamW) {
    auto [stepSize, sqrtBc2] = biasCorrections(b, step, mt);
    // The factors the kernel multiplies by, each computed in double and
    // rounded once, as torch's Python scalars are (1 - beta1 from the f32
    // beta1 would differ in the last bit).
    AttributeMap a;
    if (O.WeightDecay != 0)
      a["decay"] = Attribute::getFloat(1.0 - O.Lr * O.WeightDecay);
    a["beta1"] = Attribute::getFloat(O.Beta1);
    a["one_minus_beta1"] = Attribute::getFloat(1.0 - O.Beta1);
    a["beta2"] = Attribute::getFloat(O.Beta2);
    a["one_minus_beta2"] = Attribute::getFloat(1.0 - O.Beta2);
    a["eps"] = Attribute::getFloat(O.Eps);
    if (!int8)
      return fused("AdamWUpdate", {g, stepSize, sqrtBc2}, a,
                   {moment("exp_avg"), moment("exp_avg_sq")});
    // bitsandbytes' layout: codes of the weight's shape, an absmax per block.
    auto codes = [&](const char *suffix) {
      return slot(m, s->name() + "." + suffix,
                  TensorType(DType::U8, s->type().shape()));
    };
    auto absmax = [&](const char *suffix) {
      return slot(
          m, s->name() + "." + suffix,
          TensorType(DType::F32, {stateBlocks(s->type().numElements())}));
    };
    return fused("AdamW8bitUpdate", {g, stepSize, sqrtBc2}, a,
                 {codes("exp_avg"), codes("exp_avg_sq"),
                  absmax("exp_avg.absmax"), absmax("exp_avg_sq.absmax")});
  }
  if (O.Kind == OptimizerOptions::Kind::Momentum) {
    AttributeMap a = lrAndDecay();
    a["momentum"] = Attribute::getFloat(O.Momentum);
    a["nesterov"] = Attribute::getInt(O.Nesterov);
    return fused("MomentumUpdate", {g}, a, {moment("momentum_buffer")});
  }
  if (scale)
    g = b.apply("Mul", {g, cast(b, scale, t)});
  if (O.Kind == OptimizerOptions::Kind::AdaLomo)
    return adalomo(m, b, s, g, step);
  Value *w = b.read(s);
  if (O.WeightDecay != 0)
    g = b.apply("Add", {g, b.apply("Mul", {w, k(O.WeightDecay)})});
  Value *newW = b.apply("Sub", {w, b.apply("Mul", {g, k(O.Lr)})});
  b.create("Assign", {newW}, {}, {}, s);
}

/// The norm-only pass: a copy of `f` that stores the clip coefficient (and
/// with loss scaling whether the gradients are finite) before any update,
/// called before `f` on the same batch; `coef` and `finite` read what it
/// stored (through `b`, in `f`).
llvm::Error Optimizer::addNormPass(Module &m, Function &f, Builder &b,
                                   StateSlot *offset, Value *&coef,
                                   Value *&finite) {
  TensorType f32s(DType::F32, {});
  bool check = O.LossScale || O.SkipNonFinite;
  // The norm-only pass: a copy of f that stores the clip coefficient (and
  // with loss scaling whether the gradients are finite) before any update.
  stampRandomStreams(f);
  Function *normPass = m.cloneFunction(f, freshFunctionName(m, "grad_norm"));
  std::vector<Node *> normGrads = paramGrads(*normPass);
  llvm::SmallVector<Value *, 16> ngs;
  for (Node *n : normGrads)
    ngs.push_back(n->operand(0));
  // It writes nothing else: the BatchNorm statistics are the update
  // pass's to advance, once per step.
  std::vector<Node *> writes;
  for (Node &n : normPass->nodes())
    if (n.info()->has(opflags::WritesState))
      writes.push_back(&n);
  for (Node *n : writes)
    n->erase();
  Builder nb(*normPass, normPass->returnNode());
  Value *total = sumOfSquares(nb, ngs);
  Value *normScale = O.LossScale ? scaleValue(nb, offset) : nullptr;
  if (check) {
    StateSlot *ok = slot(m, "step.finite", TensorType(DType::Bool, {}));
    nb.create("Assign", {finiteStep(nb, *normPass, total)}, {}, {}, ok);
    finite = b.read(ok);
  }
  if (O.ClipGradNorm > 0) {
    StateSlot *scale = slot(m, "clip.scale", f32s);
    auto [norm, c] = clipCoefficient(nb, total, normScale, O.ClipGradNorm);
    nb.create("Assign", {c}, {}, {}, scale);
    appendResult(*normPass, norm); // replaces the return: nb is done
    coef = b.read(scale);
  }
  // The driver: the norm pass, then this function on the same batch.
  std::vector<DriverStep> driver(m.driver().begin(), m.driver().end());
  if (driver.empty())
    driver.push_back({&f, 1, false});
  auto it = llvm::find_if(driver,
                          [&](const DriverStep &d) { return d.Callee == &f; });
  if (it == driver.end() || it->Repeat != 1)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "optimizer: clipping or loss scaling with %s needs @%s called once "
        "per step",
        O.kindName().str().c_str(), f.name().c_str());
  DriverStep normStep{normPass, 1, it->SameBatch};
  it->SameBatch = true;
  driver.insert(it, normStep);
  m.setDriver(std::move(driver));
  return llvm::Error::success();
}

/// Weights the update cannot take: AdaLomo on bf16/f16 storage, 8-bit
/// moments of an f64 weight.
llvm::Error Optimizer::checkWeightType(const std::string &name,
                                       const TensorType &type) const {
  DType pt = type.dtype();
  bool narrow = pt == DType::BF16 || pt == DType::F16;
  if (narrow && O.Kind == OptimizerOptions::Kind::AdaLomo)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "optimizer: @%s is stored in %s (--master-weights none): %s "
        "needs fp32 master weights; sgd, momentum, adamw and lomo update "
        "narrow weights",
        name.c_str(), dtypeName(pt).str().c_str(), O.kindName().str().c_str());
  if (pt == DType::F64 && O.int8Moments(type.numElements()))
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "optimizer: @%s is f64: 8-bit optimizer state quantizes the moments "
        "of f32, bf16 and f16 weights",
        name.c_str());
  return llvm::Error::success();
}

/// The loss scale: halved on a skipped step, doubled after 2000 finite ones.
void Optimizer::updateLossScale(Builder &b, Value *finite, StateSlot *offset,
                                StateSlot *good) {
  auto k = [&](double v) { return scalar(b, v, DType::F32); };
  Value *run =
      b.apply("Where", {finite, b.apply("Add", {b.read(good), k(1)}), k(0)});
  Value *grow = b.apply("GreaterOrEqual", {run, k(2000)});
  Value *delta =
      b.apply("Where", {grow, k(1), b.apply("Where", {finite, k(0), k(-1)})});
  b.create("Assign", {b.apply("Add", {b.read(offset), delta})}, {}, {}, offset);
  b.create("Assign", {b.apply("Where", {grow, k(0), run})}, {}, {}, good);
}

llvm::Error Optimizer::updateFunction(Module &m, Function &f) {
  std::vector<Node *> grads = paramGrads(f);
  llvm::SmallVector<Value *, 16> gs;
  bool kept = true; // every gradient is in an accumulator slot already
  for (Node *n : grads) {
    Value *g = n->operand(0);
    gs.push_back(g);
    Node *def = g->definingNode();
    if (def && !def->is(OpKind::Read))
      tagGradient(g, n->state());
    kept &= def && def->is(OpKind::Read) &&
            def->state()->kind() == StateKind::Gradient;
  }
  Builder b(f, f.returnNode());
  Value *coef = nullptr;   // f32: what each gradient is multiplied by
  Value *finite = nullptr; // bool: with loss scaling, whether to update
  Value *lossScale = nullptr;
  StateSlot *offset = nullptr, *good = nullptr;
  TensorType f32s(DType::F32, {});
  if (O.LossScale) {
    offset = slot(m, "loss_scale.log2_offset", f32s);
    good = slot(m, "loss_scale.good_steps", f32s);
    lossScale = SeedScales.lookup(&f);
    if (!lossScale) // a function without a seed of its own
      lossScale = scaleValue(b, offset);
  }
  bool check = O.LossScale || O.SkipNonFinite; // whether to update at all
  bool prePass = (O.ClipGradNorm > 0 || check) && O.fused() && !kept;
  if (prePass) {
    if (auto e = addNormPass(m, f, b, offset, coef, finite))
      return e;
  } else if (O.ClipGradNorm > 0 || check) {
    Value *total = sumOfSquares(b, gs);
    if (O.ClipGradNorm > 0) {
      auto [norm, c] = clipCoefficient(b, total, lossScale, O.ClipGradNorm);
      coef = c;
      appendResult(f, norm);
      b.setInsertionPoint(f.returnNode());
    }
    if (check)
      finite = finiteStep(b, f, total);
  }
  if (O.LossScale) {
    // Unscaled in the coefficient the update applies anyway.
    Value *inv = b.apply("Div", {scalar(b, 1.0, DType::F32), lossScale});
    coef = coef ? b.apply("Mul", {coef, inv}) : inv;
  }
  // Every state write after this point is an update: kept back on a
  // skipped step.
  Node *beforeUpdates = &*std::prev(f.returnNode()->getIterator());
  Value *step = nullptr;
  Corrections.clear();
  if (O.Kind == OptimizerOptions::Kind::AdamW ||
      O.Kind == OptimizerOptions::Kind::AdaLomo) {
    std::string name =
        O.Kind == OptimizerOptions::Kind::AdamW ? "adamw.step" : "adalomo.step";
    StateSlot *ss = slot(m, name, TensorType(DType::F64, {}));
    step = b.apply("Add", {b.read(ss), scalar(b, 1.0, DType::F64)});
    b.create("Assign", {step}, {}, {}, ss);
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    Value *g = gs[i];
    StateSlot *s = grads[i]->state();
    // A parameter stored in bf16/f16 (mixed precision, no master weights) is
    // updated in f32 and rounded once: SgdUpdate's kernel, for sgd as for
    // lomo (so the two give the same weights); MomentumUpdate and
    // AdamWUpdate with f32 moments. AdaLomo's arithmetic would round at
    // every op: refused.
    if (auto e = checkWeightType(s->name(), s->type()))
      return e;
    update(m, b, s, g, step, coef, finite);
  }
  for (Node *n : grads)
    n->erase();
  if (!finite)
    return llvm::Error::success();
  wrapWrites(f, beforeUpdates, finite);
  if (!O.LossScale)
    return llvm::Error::success();
  updateLossScale(b, finite, offset, good);
  return llvm::Error::success();
}

Value *Optimizer::scaleValue(Builder &b, StateSlot *offset) {
  Value *exponent =
      b.apply("Add", {b.read(offset), scalar(b, 16.0, DType::F32)});
  return b.apply("Pow", {scalar(b, 2.0, DType::F32), exponent});
}

llvm::Expected<bool> Optimizer::run(Module &m) {
  if (O.Int8State && O.Kind != OptimizerOptions::Kind::AdamW)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "optimizer: 8-bit state (state=int8) quantizes adamw's moments; %s "
        "has %s",
        O.kindName().str().c_str(),
        O.Kind == OptimizerOptions::Kind::Momentum
            ? "one buffer, kept in full precision: use adamw"
            : "no moments to quantize");
  // The norm pass adds functions: walk the ones there are now.
  std::vector<Function *> functions;
  for (const auto &f : m.functions())
    functions.push_back(f.get());
  bool changed = false;
  // Loss scaling seeds every backward (micro-steps too) with the scale.
  if (O.LossScale)
    for (Function *f : functions) {
      Node *seed = nullptr;
      for (Node &n : f->nodes())
        if (n.is(OpKind::Constant) && isLossSeed(n))
          seed = &n;
      if (!seed)
        continue;
      Builder b(*f, seed);
      b.setLoc(seed->loc());
      StateSlot *offset =
          slot(m, "loss_scale.log2_offset", TensorType(DType::F32, {}));
      Value *scale = scaleValue(b, offset);
      SeedScales[f] = scale; // the update unscales with the same value
      seed->result(0)->replaceAllUsesWith(
          cast(b, scale, seed->result(0)->type().dtype()));
      seed->erase();
      changed = true;
    }
  for (Function *f : functions) {
    if (llvm::none_of(f->nodes(),
                      [](const Node &n) { return n.is(OpKind::ParamGrad); }))
      continue;
    changed = true;
    if (auto e = updateFunction(m, *f))
      return e;
  }
  if (Conflict)
    return std::move(Conflict);
  return changed;
}

bool OptimizerOptions::int8Moments(int64_t elements) const {
  return Int8State && Kind == Kind::AdamW && elements >= Int8MinElements;
}

bool OptimizerOptions::fused() const {
  return Kind == Kind::Lomo || Kind == Kind::AdaLomo || FuseUpdate;
}

bool OptimizerOptions::keepsState() const {
  return Kind == Kind::Momentum || Kind == Kind::AdamW || Kind == Kind::AdaLomo;
}

llvm::StringRef OptimizerOptions::kindName() const {
  switch (Kind) {
  case OptimizerOptions::Kind::Sgd:
    return "sgd";
  case OptimizerOptions::Kind::Momentum:
    return "momentum";
  case OptimizerOptions::Kind::AdamW:
    return "adamw";
  case OptimizerOptions::Kind::Lomo:
    return "lomo";
  case OptimizerOptions::Kind::AdaLomo:
    return "adalomo";
  }
  llvm_unreachable("unknown optimizer kind");
}

llvm::Optional<enum OptimizerOptions::Kind>
headroom::parseOptimizerKind(llvm::StringRef name) {
  using K = enum OptimizerOptions::Kind;
  for (K k : {K::Sgd, K::Momentum, K::AdamW, K::Lomo, K::AdaLomo}) {
    OptimizerOptions o;
    o.Kind = k;
    if (o.kindName() == name)
      return k;
  }
  return llvm::None;
}

std::string headroom::optimizerOptionsText(const OptimizerOptions &o) {
  using K = enum OptimizerOptions::Kind;
  std::string s = "kind=" + o.kindName().str();
  auto add = [&](const char *key, double v) {
    s += std::string(" ") + key + "=" + shortestDecimal(v);
  };
  add("lr", o.Lr);
  add("weight_decay", o.WeightDecay);
  if (o.Kind == K::Momentum) {
    add("momentum", o.Momentum);
    s += o.Nesterov ? " nesterov=1" : " nesterov=0";
  }
  if (o.Kind == K::AdamW) {
    add("beta1", o.Beta1);
    add("beta2", o.Beta2);
    add("eps", o.Eps);
  }
  if (o.Kind == K::AdaLomo) {
    add("eps1", o.Eps1);
    add("eps2", o.Eps2);
    add("clip_threshold", o.ClipThreshold);
    add("decay_rate", o.DecayRate);
  }
  if (o.ClipGradNorm > 0)
    add("clip_grad_norm", o.ClipGradNorm);
  if (o.LossScale)
    s += " loss_scale=dynamic";
  if (o.SkipNonFinite)
    s += " skip_nonfinite=1";
  if (o.FuseUpdate)
    s += " fuse_update=1";
  if (o.Int8State)
    s += " state=int8 state_min=" + std::to_string(o.Int8MinElements);
  return s;
}

std::unique_ptr<Pass> headroom::createOptimizerPass(const OptimizerOptions &o) {
  return std::make_unique<Optimizer>(o);
}

llvm::Expected<OptimizerOptions>
headroom::parseOptimizerOptions(llvm::StringRef text) {
  auto items = parsePassOptions("optimizer", text);
  if (!items)
    return items.takeError();
  OptimizerOptions o;
  for (const auto &[key, value] : *items) {
    auto bad = [&, key = key, value = value](const char *what) {
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "optimizer: %s=%s: expected %s",
                                     key.c_str(), value.c_str(), what);
    };
    double d = 0;
    bool isNumber = !llvm::StringRef(value).getAsDouble(d);
    if (key == "kind") {
      auto kind = parseOptimizerKind(value);
      if (!kind)
        return bad("sgd, momentum, adamw, lomo or adalomo");
      o.Kind = *kind;
    } else if (key == "loss_scale") {
      if (value != "dynamic" && value != "none")
        return bad("dynamic or none");
      o.LossScale = value == "dynamic";
    } else if (key == "skip_nonfinite") {
      if (value != "0" && value != "1")
        return bad("0 or 1");
      o.SkipNonFinite = value == "1";
    } else if (key == "fuse_update") {
      if (value != "0" && value != "1")
        return bad("0 or 1");
      o.FuseUpdate = value == "1";
    } else if (key == "state") {
      if (value != "int8" && value != "full")
        return bad("full or int8");
      o.Int8State = value == "int8";
    } else if (key == "nesterov") {
      if (value != "0" && value != "1")
        return bad("0 or 1");
      o.Nesterov = value == "1";
    } else if (!isNumber) {
      return bad("a number");
    } else if (key == "lr") {
      o.Lr = d;
    } else if (key == "momentum") {
      o.Momentum = d;
    } else if (key == "weight_decay") {
      o.WeightDecay = d;
    } else if (key == "beta1") {
      o.Beta1 = d;
    } else if (key == "beta2") {
      o.Beta2 = d;
    } else if (key == "eps") {
      o.Eps = d;
    } else if (key == "state_min") {
      if (d < 0 || d != std::floor(d))
        return bad("a whole number of elements");
      o.Int8MinElements = int64_t(d);
    } else if (key == "clip_grad_norm") {
      o.ClipGradNorm = d;
    } else if (key == "eps1") {
      o.Eps1 = d;
    } else if (key == "eps2") {
      o.Eps2 = d;
    } else if (key == "clip_threshold") {
      o.ClipThreshold = d;
    } else if (key == "decay_rate") {
      o.DecayRate = d;
    } else {
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "optimizer: unknown option '%s' (kind, lr, momentum, nesterov, "
          "weight_decay, beta1, beta2, eps, clip_grad_norm, eps1, eps2, "
          "clip_threshold, decay_rate, loss_scale, skip_nonfinite, "
          "fuse_update, state, state_min)",
          key.c_str());
    }
  }
  return o;
}

llvm::Expected<std::unique_ptr<Pass>>
headroom::createOptimizerPassFromOptions(llvm::StringRef options) {
  auto o = parseOptimizerOptions(options);
  if (!o)
    return o.takeError();
  return createOptimizerPass(*o);
}

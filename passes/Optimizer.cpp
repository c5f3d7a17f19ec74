//===- Optimizer.cpp - Turn parameter gradients into updates --------------===//
//
// Replaces every ParamGrad(@w, %g) with the update of @w, written in
// primitive ops and Assign so that the memory planner and later passes see
// an ordinary dataflow graph:
//   sgd       w -= lr (g + wd w)
//   momentum  b = mu b + g';  w -= lr (nesterov ? g' + mu b : b)   (g' = g + wd
//   w) adamw     w *= 1 - lr wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//             w -= (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// which is torch.optim.SGD / AdamW's arithmetic in its order of operations.
// Moments are new `optimizer` state slots named `<param>.momentum_buffer`,
// `<param>.exp_avg`, `<param>.exp_avg_sq`; AdamW's step count is `adamw.step`
// (f64). With clipping, all gradients are scaled by
// min(1, max_norm / (norm + 1e-6)) first and @step also returns the norm.
//
// Requires: autodiff has run (ParamGrad nodes at the end of @step).
// Guarantees: no ParamGrad remains; every trained parameter has one Assign.
//
//===----------------------------------------------------------------------===//
#include "passes/Optimizer.h"

#include "passes/Passes.h"

#include "llvm/ADT/SmallVector.h"

#include <map>

using namespace headroom;

namespace {

class Optimizer : public Pass {
public:
  explicit Optimizer(OptimizerOptions o) : O(o) {}
  llvm::StringRef name() const override { return "optimizer"; }
  llvm::Expected<bool> run(Module &m) override;

private:
  /// Elementwise node whose result has `like`'s type.
  Value *ew(Builder &b, llvm::StringRef op, llvm::ArrayRef<Value *> xs,
            Value *like) {
    return b.createValue(op, xs, like->type());
  }
  Value *scalar(Builder &b, double v, DType t) {
    return b.constant(Tensor::fromDoubles(t, {}, {v}));
  }
  void update(Module &m, Builder &b, StateSlot *w, Value *g, Value *step);
  /// lr / (1 - b1^t) and sqrt(1 - b2^t), computed in f64 from the step count
  /// and rounded once to `t`; built once per element type and shared.
  std::pair<Value *, Value *> biasCorrections(Builder &b, Value *step, DType t);

  std::map<DType, std::pair<Value *, Value *>> Corrections;

  OptimizerOptions O;
};

} // namespace

std::pair<Value *, Value *> Optimizer::biasCorrections(Builder &b, Value *step,
                                                       DType t) {
  auto it = Corrections.find(t);
  if (it != Corrections.end())
    return it->second;
  TensorType f64s(DType::F64, {});
  auto pow = [&](double base) {
    return b.createValue("Pow", {scalar(b, base, DType::F64), step}, f64s);
  };
  Value *one = scalar(b, 1.0, DType::F64);
  Value *bc1 = b.createValue("Sub", {one, pow(O.Beta1)}, f64s);
  Value *bc2 = b.createValue("Sub", {one, pow(O.Beta2)}, f64s);
  Value *stepSize =
      b.createValue("Div", {scalar(b, O.Lr, DType::F64), bc1}, f64s);
  Value *sqrtBc2 = b.createValue("Sqrt", {bc2}, f64s);
  AttributeMap cast;
  cast["to"] = Attribute::getType(t);
  TensorType ts(t, {});
  auto result = std::make_pair(b.createValue("Cast", {stepSize}, ts, cast),
                               b.createValue("Cast", {sqrtBc2}, ts, cast));
  Corrections[t] = result;
  return result;
}

void Optimizer::update(Module &m, Builder &b, StateSlot *s, Value *g,
                       Value *step) {
  DType t = g->type().dtype();
  Value *w = b.read(s);
  auto k = [&](double v) { return scalar(b, v, t); };
  auto moment = [&](const char *suffix) {
    std::string name = s->name() + "." + suffix;
    StateSlot *slot = m.lookupState(name);
    if (!slot)
      slot = m.addState(name, s->type(), StateKind::Optimizer);
    return slot;
  };
  if (O.Kind == OptimizerOptions::Kind::AdamW) {
    if (O.WeightDecay != 0)
      w = ew(b, "Mul", {w, k(1.0 - O.Lr * O.WeightDecay)}, w);
    StateSlot *ms = moment("exp_avg"), *vs = moment("exp_avg_sq");
    Value *mNew = ew(b, "Add",
                     {ew(b, "Mul", {b.read(ms), k(O.Beta1)}, g),
                      ew(b, "Mul", {g, k(1.0 - O.Beta1)}, g)},
                     g);
    Value *vNew =
        ew(b, "Add",
           {ew(b, "Mul", {b.read(vs), k(O.Beta2)}, g),
            ew(b, "Mul", {ew(b, "Mul", {g, g}, g), k(1.0 - O.Beta2)}, g)},
           g);
    b.create("Assign", {mNew}, {}, {}, ms);
    b.create("Assign", {vNew}, {}, {}, vs);
    auto [stepSizeT, sqrtBc2T] = biasCorrections(b, step, t);
    Value *denom = ew(
        b, "Add",
        {ew(b, "Div", {ew(b, "Sqrt", {vNew}, g), sqrtBc2T}, g), k(O.Eps)}, g);
    Value *delta = ew(b, "Mul", {ew(b, "Div", {mNew, denom}, g), stepSizeT}, g);
    b.create("Assign", {ew(b, "Sub", {w, delta}, g)}, {}, {}, s);
    return;
  }
  if (O.WeightDecay != 0)
    g = ew(b, "Add", {g, ew(b, "Mul", {w, k(O.WeightDecay)}, g)}, g);
  if (O.Kind == OptimizerOptions::Kind::Momentum) {
    StateSlot *bs = moment("momentum_buffer");
    // torch starts the buffer at g on the first step: mu * 0 + g is that.
    Value *buf =
        ew(b, "Add", {ew(b, "Mul", {b.read(bs), k(O.Momentum)}, g), g}, g);
    b.create("Assign", {buf}, {}, {}, bs);
    g = O.Nesterov ? ew(b, "Add", {g, ew(b, "Mul", {buf, k(O.Momentum)}, g)}, g)
                   : buf;
  }
  Value *newW = ew(b, "Sub", {w, ew(b, "Mul", {g, k(O.Lr)}, g)}, g);
  b.create("Assign", {newW}, {}, {}, s);
}

llvm::Expected<bool> Optimizer::run(Module &m) {
  bool changed = false;
  for (const auto &f : m.functions()) {
    llvm::SmallVector<Node *, 16> grads;
    for (Node &n : f->nodes())
      if (n.op() == "ParamGrad")
        grads.push_back(&n);
    if (grads.empty())
      continue;
    changed = true;
    Node *ret = f->returnNode();
    Builder b(*f, ret);
    llvm::SmallVector<Value *, 16> gs;
    for (Node *n : grads)
      gs.push_back(n->operand(0));
    if (O.ClipGradNorm > 0) {
      // total = sqrt(sum of squares of all gradients), in f32 like torch.
      TensorType scalarF32(DType::F32, {});
      Value *total = nullptr;
      for (Value *g : gs) {
        Value *sq = b.createValue("Mul", {g, g}, g->type());
        AttributeMap keep;
        keep["keepdims"] = Attribute::getInt(0);
        Value *s = b.createValue("ReduceSum", {sq},
                                 TensorType(g->type().dtype(), {}), keep);
        if (g->type().dtype() != DType::F32) {
          AttributeMap cast;
          cast["to"] = Attribute::getType(DType::F32);
          s = b.createValue("Cast", {s}, scalarF32, cast);
        }
        total = total ? b.createValue("Add", {total, s}, scalarF32) : s;
      }
      Value *norm = b.createValue("Sqrt", {total}, scalarF32);
      Value *coef = b.createValue(
          "Div",
          {scalar(b, O.ClipGradNorm, DType::F32),
           b.createValue("Add", {norm, scalar(b, 1e-6, DType::F32)},
                         scalarF32)},
          scalarF32);
      coef =
          b.createValue("Min", {coef, scalar(b, 1.0, DType::F32)}, scalarF32);
      for (Value *&g : gs) {
        Value *c = coef;
        if (g->type().dtype() != DType::F32) {
          AttributeMap cast;
          cast["to"] = Attribute::getType(g->type().dtype());
          c = b.createValue("Cast", {coef}, TensorType(g->type().dtype(), {}),
                            cast);
        }
        g = b.createValue("Mul", {g, c}, g->type());
      }
      llvm::SmallVector<Value *, 2> results(ret->operands().begin(),
                                            ret->operands().end());
      results.push_back(norm);
      Node *newRet = f->createNode("Return", results, {});
      ret->erase();
      ret = newRet;
      b.setInsertionPoint(ret);
    }
    Value *step = nullptr;
    Corrections.clear();
    if (O.Kind == OptimizerOptions::Kind::AdamW) {
      StateSlot *ss = m.lookupState("adamw.step");
      if (!ss)
        ss = m.addState("adamw.step", TensorType(DType::F64, {}),
                        StateKind::Optimizer);
      step = b.createValue("Add", {b.read(ss), scalar(b, 1.0, DType::F64)},
                           ss->type());
      b.create("Assign", {step}, {}, {}, ss);
    }
    for (size_t i = 0; i < grads.size(); ++i)
      update(m, b, grads[i]->state(), gs[i], step);
    for (Node *n : grads)
      n->erase();
  }
  return changed;
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
      if (value == "sgd")
        o.Kind = OptimizerOptions::Kind::Sgd;
      else if (value == "momentum")
        o.Kind = OptimizerOptions::Kind::Momentum;
      else if (value == "adamw")
        o.Kind = OptimizerOptions::Kind::AdamW;
      else
        return bad("sgd, momentum or adamw");
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
    } else if (key == "clip_grad_norm") {
      o.ClipGradNorm = d;
    } else {
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "optimizer: unknown option '%s' (kind, lr, momentum, nesterov, "
          "weight_decay, beta1, beta2, eps, clip_grad_norm)",
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

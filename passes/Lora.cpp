//===- Lora.cpp - Low-rank adapters beside frozen weights -----------------===//
//
// LoRA (Hu et al. 2021) as Hugging Face PEFT applies it to a Linear layer:
// each targeted weight W keeps its value and stops training, and its
// product gains a low-rank path,
//
//   y = x W' + (alpha / rank) * (dropout(x) A^T) B^T
//
// with A = @<module>.lora_A.weight [rank, in] and B = @<module>.lora_B.weight
// [out, rank], PEFT's names (less its `base_model.model.` prefix) and
// shapes, both trained. The module of a weight is its state name less
// `.weight`; a target names modules as PEFT's target_modules do: a module
// matches when it is the target or ends with "." + the target; `all-linear`
// is every matrix product with a parameter except the output head (the
// last one in the forward). A weight is found in whichever form the
// exporter wrote: MatMul(x, W) with W [in, out], MatMul(x, W) {transB = 1}
// or MatMul(x, Transpose(W)) with W [out, in] (PyTorch's layout), Gemm with
// or without transB. Every other parameter is frozen too (PEFT's bias =
// "none"). B starts at zeros (the model computes what it computed), A is
// drawn from --seed as kaiming_uniform_(a=sqrt(5)) (StateInit).
//
// Options: rank= alpha= dropout= targets=NAME,NAME|all-linear. Runs first,
// before mixed precision and autodiff.
//
// quantize-base (QLoRA, `--base-weights nf4`) runs after it: every frozen
// matrix a product reads, but the output head's (as transformers'
// load_in_4bit leaves lm_head), is stored as NF4: the slot keeps its name
// and holds the 4-bit codes, three slots beside it the scales
// (compiler/StateQuantization.h), all quantized from the model's
// initializer when the run starts (StateInit::Nf4), and each Read of it
// becomes Nf4Dequantize of the four. Mixed precision dequantizes straight
// into the low type; rematerialize makes the weight again for the backward
// instead of keeping it, so one dequantized weight is alive at a time.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "compiler/Protocol.h"

#include "compiler/StateQuantization.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"

#include <cmath>
#include <map>
#include <set>

using namespace headroom;

namespace {

struct LoraOptions {
  int64_t Rank = 8;
  double Alpha = 8;
  double Dropout = 0;
  std::vector<std::string> Targets;
  bool AllLinear = false;
};

/// A matrix product with a parameter: y = x W (W [in, out]) or x W^T (W
/// [out, in]).
struct Product {
  Node *N;
  Value *X;
  StateSlot *W;
  bool Transposed; // W is [out, in]
};

llvm::Error err(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "lora: " + msg);
}

/// The 2-D slot of kind `kind` read by `v`, directly or through a Transpose
/// of its last two axes (`*swapped` set), or null.
StateSlot *paramOf(Value *v, bool *swapped, StateKind kind) {
  *swapped = false;
  Node *def = v ? v->definingNode() : nullptr;
  if (def && def->is(OpKind::Transpose) && def->result(0)->type().rank() == 2) {
    const Attribute *perm = def->attr("perm");
    if (perm && perm->kind() == Attribute::Kind::Ints &&
        perm->asInts() == std::vector<int64_t>{1, 0}) {
      *swapped = true;
      def = def->operand(0)->definingNode();
    }
  }
  if (!def || !def->is(OpKind::Read) || !def->state() ||
      def->state()->kind() != kind || def->state()->type().rank() != 2)
    return nullptr;
  return def->state();
}

int64_t intAttr(const Node &n, llvm::StringRef name) {
  const Attribute *a = n.attr(name);
  return a && a->kind() == Attribute::Kind::Int ? a->asInt() : 0;
}

/// Every matrix product of `f` with a 2-D slot of kind `kind` (parameters,
/// or after lora the frozen weights) as its right operand.
std::vector<Product> products(Function &f, StateKind kind = StateKind::Param) {
  std::vector<Product> out;
  for (Node &n : f.nodes()) {
    bool matmul = n.is(OpKind::MatMul), gemm = n.is(OpKind::Gemm);
    if ((!matmul && !gemm) || intAttr(n, "transA"))
      continue;
    bool swapped;
    StateSlot *w = paramOf(n.operand(1), &swapped, kind);
    if (!w)
      continue;
    out.push_back(
        {&n, n.operand(0), w, swapped != (intAttr(n, "transB") != 0)});
  }
  return out;
}

std::string moduleOf(const StateSlot &w) {
  llvm::StringRef name = w.name();
  name.consume_back(".weight");
  return name.str();
}

bool matches(llvm::StringRef module, llvm::StringRef target) {
  return module == target || module.endswith(("." + target).str());
}

class Lora : public Pass {
public:
  explicit Lora(LoraOptions o) : O(std::move(o)) {}
  llvm::StringRef name() const override { return "lora"; }
  llvm::Expected<bool> run(Module &m) override;

private:
  LoraOptions O;
};

llvm::Expected<bool> Lora::run(Module &m) {
  if (m.functions().empty())
    return false;
  auto forward = forwardOf(m, "lora");
  if (!forward)
    return forward.takeError();
  Function &f = **forward;
  std::vector<Product> all = products(f);
  std::vector<Product> chosen;
  std::set<std::string> modules;
  for (const Product &p : all)
    modules.insert(moduleOf(*p.W));
  for (size_t i = 0; i < all.size(); ++i) {
    std::string module = moduleOf(*all[i].W);
    bool take = O.AllLinear
                    ? i + 1 < all.size() // not the output head
                    : llvm::any_of(O.Targets, [&](const std::string &t) {
                        return matches(module, t);
                      });
    if (take)
      chosen.push_back(all[i]);
  }
  for (const std::string &t : O.Targets)
    if (llvm::none_of(
            modules, [&](const std::string &mod) { return matches(mod, t); })) {
      // The names a target can take: each module's last component.
      std::set<std::string> names;
      for (const std::string &mod : modules)
        names.insert(llvm::StringRef(mod).rsplit('.').second.empty()
                         ? mod
                         : llvm::StringRef(mod).rsplit('.').second.str());
      return err("target '" + t + "' matches no module; the modules with " +
                 "a matrix product are named " +
                 llvm::join(names.begin(), names.end(), ", ") + " (e.g. " +
                 *modules.begin() + ")");
    }
  if (chosen.empty())
    return err("no module to adapt (the model has no matrix product with a "
               "2-D parameter but its output head)");

  // Freeze every parameter; the adapters are what trains.
  for (const auto &s : m.states())
    if (s->kind() == StateKind::Param)
      s->setKind(StateKind::Frozen);
  std::map<const StateSlot *, std::pair<StateSlot *, StateSlot *>> adapters;
  double scale = O.Alpha / double(O.Rank);
  for (const Product &p : chosen) {
    const TensorType &wt = p.W->type();
    int64_t in = wt.dim(p.Transposed ? 1 : 0),
            out = wt.dim(p.Transposed ? 0 : 1);
    DType t = wt.dtype();
    auto &[a, b] = adapters[p.W];
    if (!a) {
      std::string module = moduleOf(*p.W);
      auto sa =
          stateSlotFor(m, module + ".lora_A.weight",
                       TensorType(t, {O.Rank, in}), StateKind::Param, "lora");
      if (!sa)
        return sa.takeError();
      auto sb =
          stateSlotFor(m, module + ".lora_B.weight",
                       TensorType(t, {out, O.Rank}), StateKind::Param, "lora");
      if (!sb)
        return sb.takeError();
      a = *sa;
      b = *sb;
      a->setInit(StateInit::KaimingUniform);
      b->setInit(StateInit::Zeros);
      m.addAdapter({p.W, a, b, O.Alpha, O.Dropout, p.Transposed});
    }
    Node *n = p.N;
    Value *y = n->result(0);
    Builder bld(f, &*std::next(n->getIterator()));
    bld.setLoc(n->loc() + "/lora");
    Value *x = p.X;
    if (O.Dropout > 0) {
      Node *d = bld.create(
          "Dropout",
          {x, bld.constant(Tensor::fromDoubles(t, {}, {O.Dropout})),
           bld.constant(Tensor::fromDoubles(DType::Bool, {}, {1.0}))},
          {x->type(), x->type().withDType(DType::Bool)});
      x = d->result(0);
    }
    AttributeMap transB;
    transB["transB"] = Attribute::getInt(1);
    Value *h = bld.apply("MatMul", {x, bld.read(a)}, transB);
    Value *z = bld.apply("MatMul", {h, bld.read(b)}, transB);
    Value *zs = bld.apply(
        "Mul", {z, bld.constant(Tensor::fromDoubles(t, {}, {scale}))});
    Value *sum = bld.apply("Add", {y, zs});
    Node *add = sum->definingNode();
    y->replaceAllUsesWith(sum);
    add->setOperand(0, y); // the sum itself keeps the base product
  }
  return true;
}

class QuantizeBase : public Pass {
public:
  llvm::StringRef name() const override { return "quantize-base"; }
  llvm::Expected<bool> run(Module &m) override;
};

llvm::Expected<bool> QuantizeBase::run(Module &m) {
  if (m.functions().empty())
    return false;
  auto forward = forwardOf(m, "quantize-base");
  if (!forward)
    return forward.takeError();
  Function &f = **forward;
  std::vector<Product> all = products(f, StateKind::Frozen);
  std::vector<StateSlot *> weights;
  for (size_t i = 0; i + 1 < all.size(); ++i) { // not the output head
    StateSlot *w = all[i].W;
    if (w->kind() == StateKind::Frozen && isFloat(w->type().dtype()) &&
        w->init() == StateInit::Model && !llvm::is_contained(weights, w))
      weights.push_back(w);
  }
  bool quantized = llvm::any_of(
      m.states(), [](const auto &s) { return s->init() == StateInit::Nf4; });
  if (weights.empty() && quantized)
    return false; // run before
  if (weights.empty())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "quantize-base: no frozen matrix to store as NF4 (it quantizes the "
        "base weights the lora pass froze; run lora first)");
  for (StateSlot *w : weights) {
    TensorType original = w->type();
    int64_t n = original.numElements();
    const TensorType scaleTypes[3] = {
        TensorType(DType::U8, {nf4Blocks(n)}),
        TensorType(DType::F32, {nf4NestedBlocks(n)}),
        TensorType(DType::F32, {1})};
    StateSlot *slots[4] = {w};
    for (unsigned k = 0; k < 3; ++k) {
      auto s = stateSlotFor(m, w->name() + kNf4ScaleSuffixes[k], scaleTypes[k],
                            StateKind::Frozen, "quantize-base");
      if (!s)
        return s.takeError();
      slots[k + 1] = *s;
      slots[k + 1]->setInit(StateInit::Nf4);
    }
    w->setType(TensorType(DType::U8, {nf4PackedBytes(n)}));
    w->setInit(StateInit::Nf4);
    std::vector<Node *> reads;
    for (Node &n : f.nodes())
      if (n.is(OpKind::Read) && n.state() == w)
        reads.push_back(&n);
    for (Node *read : reads) {
      Builder b(f, read);
      b.setLoc(read->loc());
      std::vector<Value *> operands;
      for (StateSlot *s : slots)
        operands.push_back(b.read(s));
      Value *weight = b.createValue("Nf4Dequantize", operands, original);
      weight->setName(read->result(0)->name());
      read->result(0)->replaceAllUsesWith(weight);
      read->erase();
    }
  }
  return true;
}

} // namespace

llvm::Expected<std::unique_ptr<Pass>>
headroom::createQuantizeBasePass(llvm::StringRef options) {
  auto items = parsePassOptions("quantize-base", options);
  if (!items)
    return items.takeError();
  for (const auto &[key, value] : *items)
    if (key != "format" || value != "nf4")
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "quantize-base: %s=%s: expected format=nf4", key.c_str(),
          value.c_str());
  return std::make_unique<QuantizeBase>();
}

llvm::Expected<std::unique_ptr<Pass>>
headroom::createLoraPass(llvm::StringRef options) {
  auto items = parsePassOptions("lora", options);
  if (!items)
    return items.takeError();
  LoraOptions o;
  for (const auto &[key, value] : *items) {
    double d = 0;
    bool isNumber = !llvm::StringRef(value).getAsDouble(d);
    if (key == "targets") {
      llvm::SmallVector<llvm::StringRef, 8> parts;
      llvm::StringRef(value).split(parts, ',', -1, false);
      for (llvm::StringRef t : parts)
        if (t == "all-linear")
          o.AllLinear = true;
        else
          o.Targets.push_back(t.str());
    } else if (!isNumber) {
      return err(key + "=" + value + ": expected a number");
    } else if (key == "rank") {
      if (d < 1 || d != std::floor(d))
        return err("rank=" + value + ": expected a positive whole number");
      o.Rank = int64_t(d);
    } else if (key == "alpha") {
      o.Alpha = d;
    } else if (key == "dropout") {
      if (d < 0 || d >= 1)
        return err("dropout=" + value + ": expected a probability in [0, 1)");
      o.Dropout = d;
    } else {
      return err("unknown option '" + key +
                 "' (rank, alpha, dropout, targets)");
    }
  }
  if (o.Targets.empty() && !o.AllLinear)
    return err("targets=NAME,... is required (modules such as q_proj,v_proj, "
               "or all-linear)");
  if (o.AllLinear && !o.Targets.empty())
    return err("targets=all-linear takes no other names");
  return std::make_unique<Lora>(std::move(o));
}

//===- FuseAttention.cpp - Attention without the s^2 tensors --------------===//
//
// Finds softmax(scale q kT + bias) v in the forward and replaces it with one
// FusedAttention node (compiler/AttentionShape.h), whose kernels never hold
// the [.., Sq, Sk] scores or probabilities: the backward recomputes them a
// block at a time from each row's log-sum-exp (docs/attention.md).
//
// The pattern, read up from each Softmax over the last axis and down from it:
//
//   MatMul(q, k {transB=1} | kT)            the scores; kT is un-transposed
//   [Cast] [Mul|Div by a scalar constant]*  the scale (products of them;
//                                           also those on q or k alone)
//   [Add(bias)]* [Where(mask, s, c) | Where(mask, c, s)]*   with c <= -1e4
//   [Reshape of the leading axes]*          masks added in another layout
//   Softmax(axis = -1)
//   [IsNaN + Where(isnan, 0, p)]            torch's all-masked rows -> 0
//   [Dropout(p, ratio, training)]           the same mask bits, fused
//   [Cast] MatMul(p, v)
//
// k and v repeated for grouped-query heads (Reshape(Expand(Unsqueeze(x))))
// are read as x; the dynamo exporter's 3-D transpose of k as k. A mask or
// bias that is a lower triangle (0 / True on and below the diagonal, <=
// -1e4 / False above; a constant or computed from constants, triangleOf)
// becomes `causal = 1` and needs no tensor; other masks become one additive
// f32 bias of the mask's own shape (a key-padding mask stays [b, 1, 1, s]).
// Every intermediate must have no other user. A match is declined, with the
// reason in the Softmax's `fuse_attention` attribute (printed by `opt`,
// summed up by `--stats`, counted by `report`), when something else reads
// the scores or probabilities, or when the shapes are not attention's. A
// trained bias (T5's relative positions) is fused: the gradient op gives
// its gradient too.
//
// Requires: one function, the forward, canonicalized, before autodiff.
// Guarantees: every matched chain is gone; each FusedAttention takes the
// Dropout's place in the random-stream numbering (passes/Passes.cpp).
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "compiler/Protocol.h"

#include "compiler/AttentionShape.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

#include <cmath>
#include <optional>

using namespace headroom;

namespace {

/// Masked scores are set to at most this (torch uses -inf, finfo.min or
/// -1e9 ... -1e4 in older models; all of those drown every real score).
constexpr double kMaskedAt = -1e4;

struct Match {
  Node *Scores = nullptr; // MatMul(q, k)
  Node *Softmax = nullptr;
  Node *Product = nullptr; // MatMul(p, v)
  Value *Q = nullptr, *K = nullptr, *V = nullptr;
  bool KTransposed = false, VTransposed = false;
  double Scale = 1;
  bool ZeroEmptyRows = false;
  std::optional<double> Dropout;
  /// Additive biases and boolean masks (keep where true) as found.
  llvm::SmallVector<Value *, 2> Biases;
  struct Mask {
    Value *Cond;
    bool KeepWhenTrue;
    double Fill;
  };
  llvm::SmallVector<Mask, 2> Masks;
  /// The leading (batch and head) axes the masks are written for, when the
  /// scores are reshaped around them (BART's legacy export: 3-D bmm, masks
  /// added in 4-D); empty: q's own.
  llvm::SmallVector<int64_t, 4> Lead;
  /// Whether q, k and v are viewed in Lead's layout (and the output back).
  bool Reshaped = false;
  /// Nodes to erase once the fused node replaces the product, last first.
  llvm::SmallVector<Node *, 12> Chain;
};

/// A scalar constant's value.
std::optional<double> scalarConstant(const Value *v) {
  if (!v || v->type().numElements() != 1)
    return std::nullopt;
  Node *def = v->definingNode();
  if (!def || !def->is(OpKind::Constant) || !isFloat(v->type().dtype()))
    return std::nullopt;
  return def->attr("value")->asTensor().getDouble(0);
}

/// Whether `x` is computed from a MatMul through the ops the scores' chain
/// may hold.
bool leadsToMatMul(const Value *x, int depth) {
  Node *def = x->definingNode();
  if (!def || depth > 16)
    return false;
  switch (def->kind()) {
  case OpKind::MatMul:
    return true;
  case OpKind::Cast:
  case OpKind::Reshape:
    return leadsToMatMul(def->operand(0), depth + 1);
  case OpKind::Mul:
  case OpKind::Div:
  case OpKind::Add:
    return leadsToMatMul(def->operand(0), depth + 1) ||
           leadsToMatMul(def->operand(1), depth + 1);
  case OpKind::Where:
    return leadsToMatMul(def->operand(1), depth + 1) ||
           leadsToMatMul(def->operand(2), depth + 1);
  default:
    return false;
  }
}

bool onlyUser(const Value *v, const Node *user) {
  return v->users().size() == 1 && v->users()[0] == user;
}

/// `v` without Mul/Div by scalar constants that only `user` reads, their
/// factors multiplied into `scale`.
Value *peelScale(Value *v, Node *user, double &scale) {
  for (;;) {
    Node *def = v->definingNode();
    if (!def || !onlyUser(v, user) ||
        !(def->is(OpKind::Mul) || def->is(OpKind::Div)))
      return v;
    auto c = scalarConstant(def->operand(1));
    unsigned data = 0;
    if (!c && def->is(OpKind::Mul)) {
      c = scalarConstant(def->operand(0));
      data = 1;
    }
    if (!c || def->operand(data)->type() != v->type())
      return v;
    scale *= def->is(OpKind::Div) ? 1 / *c : *c;
    user = def;
    v = def->operand(data);
  }
}

/// The constant integers of a value, or none.
std::optional<std::vector<int64_t>> constantInts(const Value *v) {
  Node *def = v ? v->definingNode() : nullptr;
  if (!def || !def->is(OpKind::Constant))
    return std::nullopt;
  return def->attr("value")->asTensor().toInts();
}

/// Llama's repeat_kv, Reshape(Expand(Unsqueeze(x, heads + 1), [.., Hkv, n,
/// S, D]), [.., Hkv n, S, D]): x itself, whose heads FusedAttention shares
/// among each group of n query heads without the copies.
Value *peelRepeatedHeads(Value *v) {
  Node *reshape = v->definingNode();
  if (!reshape || !reshape->is(OpKind::Reshape))
    return v;
  Node *expand = reshape->operand(0)->definingNode();
  if (!expand || !expand->is(OpKind::Expand))
    return v;
  Node *unsqueeze = expand->operand(0)->definingNode();
  if (!unsqueeze || !unsqueeze->is(OpKind::Unsqueeze))
    return v;
  Value *x = unsqueeze->operand(0);
  int64_t r = x->type().rank();
  auto axes = constantInts(unsqueeze->numOperands() > 1 ? unsqueeze->operand(1)
                                                        : nullptr);
  if (r < 3 || !axes || axes->size() != 1 ||
      ((*axes)[0] != r - 2 && (*axes)[0] != -3))
    return v;
  // The expanded shape is [.., Hkv, n, S, D]; the result [.., Hkv n, S, D].
  llvm::ArrayRef<int64_t> e = expand->result(0)->type().shape(),
                          out = v->type().shape(), in = x->type().shape();
  if (e.size() != size_t(r + 1) || out.size() != size_t(r))
    return v;
  for (int64_t d = 0; d < r; ++d) {
    int64_t want = d == r - 3 ? in[d] * e[r - 2] : in[d];
    if (out[d] != want || e[d < r - 2 ? d : d + 1] != in[d])
      return v;
  }
  return x;
}

class FuseAttention : public Pass {
public:
  llvm::StringRef name() const override { return "fuse-attention"; }
  llvm::Expected<bool> run(Module &m) override;

private:
  /// Why `softmax` is not the center of an attention, or "" with `m` filled.
  std::string match(Node &softmax, Match &m);
  std::string matchScores(Value *x, Match &m);
  std::string matchProduct(Value *p, Match &m);
  bool trained(Value *v);
  void rewrite(Function &f, Match &m);
  /// k as [.., Sk, D] from kT [.., D, Sk], made before `before`.
  Value *untranspose(Function &f, Value *kT, Node *before);
  /// Whether a constant mask (keep where true) or bias is causal.
  bool causalMask(const Value *cond, bool keepWhenTrue) const;
  bool causalBias(const Value *bias) const;

  llvm::DenseMap<const Value *, bool> Trained;
};

} // namespace

bool FuseAttention::trained(Value *v) {
  if (!v)
    return false;
  auto it = Trained.find(v);
  if (it != Trained.end())
    return it->second;
  Trained[v] = false; // no cycles in SSA; this only bounds the walk
  bool result = false;
  if (Node *def = v->definingNode()) {
    if (def->is(OpKind::Read))
      result = def->state()->kind() == StateKind::Param;
    for (Value *o : def->operands())
      result = result || trained(o);
  }
  Trained[v] = result;
  return result;
}

int64_t product(llvm::ArrayRef<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= d;
  return n;
}

/// Records the leading axes a mask is added at; false when another mask was
/// added at others.
bool sameLead(Match &m, const Value *scores) {
  llvm::ArrayRef<int64_t> lead = scores->type().shape().drop_back(2);
  if (m.Lead.empty()) {
    m.Lead.assign(lead.begin(), lead.end());
    return true;
  }
  return llvm::ArrayRef<int64_t>(m.Lead) == lead;
}

/// Walks up from the Softmax's input to the scores' MatMul.
std::string FuseAttention::matchScores(Value *x, Match &m) {
  Node *user = m.Softmax;
  for (;;) {
    Node *def = x->definingNode();
    if (!def)
      return "the softmax's input is not computed from a MatMul";
    if (!onlyUser(x, user))
      return "the scores (" + def->op() + ") have another user";
    m.Chain.push_back(def);
    user = def;
    if (def->is(OpKind::MatMul)) {
      if (def->intAttr("transA", 0))
        return "the scores' MatMul transposes q";
      m.Scores = def;
      m.Q = def->operand(0);
      m.K = def->operand(1);
      m.KTransposed = !def->intAttr("transB", 0);
      return "";
    }
    if (def->is(OpKind::Cast) && isFloat(def->operand(0)->type().dtype())) {
      x = def->operand(0);
      continue;
    }
    if (def->is(OpKind::Mul) || def->is(OpKind::Div)) {
      for (unsigned i = 0; i < 2; ++i) {
        auto c = scalarConstant(def->operand(1 - i));
        if (!c || (def->is(OpKind::Div) && i == 1))
          continue;
        m.Scale *= def->is(OpKind::Div) ? 1 / *c : *c;
        x = def->operand(i);
        break;
      }
      if (x == def->result(0))
        return "the scores are multiplied by a tensor, not a scalar constant";
      continue;
    }
    if (def->is(OpKind::Add)) {
      // The scores are the side computed from a MatMul through this chain.
      Value *a = def->operand(0), *b = def->operand(1);
      bool aIsScores = leadsToMatMul(a, 0);
      Value *scores = aIsScores ? a : b, *bias = aIsScores ? b : a;
      if (scores->type() != def->result(0)->type())
        return "an Add before the softmax broadcasts the scores";
      if (!sameLead(m, def->result(0)))
        return "masks are added at two different layouts";
      m.Biases.push_back(bias);
      x = scores;
      continue;
    }
    if (def->is(OpKind::Reshape)) {
      // Only the leading axes split or merge: the rows stay rows.
      llvm::ArrayRef<int64_t> in = def->operand(0)->type().shape(),
                              out = def->result(0)->type().shape();
      if (in.size() < 3 || out.size() < 3 ||
          in.take_back(2) != out.take_back(2) ||
          product(in.drop_back(2)) != product(out.drop_back(2)))
        return "the scores pass through a Reshape of their rows";
      x = def->operand(0);
      continue;
    }
    if (def->is(OpKind::Where)) {
      Value *cond = def->operand(0);
      for (unsigned i = 1; i < 3; ++i) {
        auto c = scalarConstant(def->operand(3 - i));
        if (!c || *c > kMaskedAt)
          continue;
        if (def->operand(i)->type() != def->result(0)->type())
          return "a Where before the softmax broadcasts the scores";
        if (!sameLead(m, def->result(0)))
          return "masks are added at two different layouts";
        m.Masks.push_back({cond, /*KeepWhenTrue=*/i == 1, *c});
        x = def->operand(i);
        break;
      }
      if (x == def->result(0))
        return "a Where before the softmax does not mask with a constant "
               "<= -1e4";
      continue;
    }
    return "the scores pass through " + def->op();
  }
}

/// Walks down from the Softmax's result to the product with v.
std::string FuseAttention::matchProduct(Value *p, Match &m) {
  for (;;) {
    if (p->users().empty())
      return "the probabilities are not used";
    // IsNaN(p) + Where(isnan, 0, p): exactly two users of p.
    if (p->users().size() == 2) {
      Node *isNan = p->users()[0], *where = p->users()[1];
      if (!isNan->is(OpKind::IsNaN))
        std::swap(isNan, where);
      auto zero = where->is(OpKind::Where) && where->numOperands() == 3
                      ? scalarConstant(where->operand(1))
                      : std::nullopt;
      if (!isNan->is(OpKind::IsNaN) || !where->is(OpKind::Where) || !zero ||
          *zero != 0 || where->operand(0) != isNan->result(0) ||
          where->operand(2) != p || !onlyUser(isNan->result(0), where))
        return "the probabilities have another user";
      m.ZeroEmptyRows = true;
      m.Chain.push_back(isNan);
      m.Chain.push_back(where);
      p = where->result(0);
      continue;
    }
    Node *use = p->users()[0];
    if (use->is(OpKind::Dropout)) {
      if (use->operand(0) != p || m.Dropout)
        return "the probabilities pass through two Dropouts";
      auto ratio = use->numOperands() > 1 ? scalarConstant(use->operand(1))
                                          : std::optional<double>(0.5);
      auto training = use->numOperands() > 2 && use->operand(2)
                          ? use->operand(2)->definingNode()
                          : nullptr;
      if (!ratio || !training || !training->is(OpKind::Constant) ||
          training->attr("value")->asTensor().getDouble(0) == 0)
        return "the Dropout's ratio or training mode is not a constant";
      if (use->numResults() > 1 && use->result(1)->hasUses())
        return "the Dropout's mask is used";
      m.Dropout = *ratio;
      m.Chain.push_back(use);
      p = use->result(0);
      continue;
    }
    if (use->is(OpKind::Cast) && isFloat(use->result(0)->type().dtype())) {
      m.Chain.push_back(use);
      p = use->result(0);
      continue;
    }
    if (use->is(OpKind::MatMul) && use->operand(0) == p &&
        use->operand(1) != p) {
      if (use->intAttr("transA", 0))
        return "the product with v transposes the probabilities";
      m.Product = use;
      m.V = use->operand(1);
      m.VTransposed = use->intAttr("transB", 0);
      return "";
    }
    return "the probabilities are used by " + use->op();
  }
}

std::string FuseAttention::match(Node &softmax, Match &m) {
  m.Softmax = &softmax;
  int64_t rank = softmax.operand(0)->type().rank();
  int64_t axis = softmax.intAttr("axis", -1);
  if (axis != -1 && axis != rank - 1)
    return "softmax over another axis than the last";
  if (rank < 3)
    return "scores of rank < 3";
  if (std::string why = matchScores(softmax.operand(0), m); !why.empty())
    return why;
  if (std::string why = matchProduct(softmax.result(0), m); !why.empty())
    return why;
  // Scalars on q or k alone (the dynamo exporter's sqrt(scale) on each).
  m.Q = peelScale(m.Q, m.Scores, m.Scale);
  m.K = peelScale(m.K, m.Scores, m.Scale);
  for (const Match::Mask &k : m.Masks)
    if (trained(k.Cond))
      return "the mask depends on a trained parameter";
  DType t = m.Q->type().dtype();
  if (m.K->type().dtype() != t || m.V->type().dtype() != t ||
      m.Product->result(0)->type().dtype() != t || !isFloat(t))
    return "q, k, v and the output differ in element type";
  // Shapes: k and v as the op takes them.
  auto swapLast = [](llvm::ArrayRef<int64_t> s) {
    llvm::SmallVector<int64_t, 4> r(s.begin(), s.end());
    if (r.size() >= 2)
      std::swap(r[r.size() - 1], r[r.size() - 2]);
    return r;
  };
  auto k = m.KTransposed
               ? swapLast(m.K->type().shape())
               : llvm::SmallVector<int64_t, 4>(m.K->type().shape().begin(),
                                               m.K->type().shape().end());
  auto v = m.VTransposed
               ? swapLast(m.V->type().shape())
               : llvm::SmallVector<int64_t, 4>(m.V->type().shape().begin(),
                                               m.V->type().shape().end());
  llvm::SmallVector<int64_t, 4> q(m.Q->type().shape().begin(),
                                  m.Q->type().shape().end());
  llvm::ArrayRef<int64_t> qLead = llvm::ArrayRef<int64_t>(q).drop_back(2);
  if (!m.Lead.empty() && llvm::ArrayRef<int64_t>(m.Lead) != qLead) {
    // The masks' layout: q, k and v are viewed in it (their leading axes
    // must hold the same rows).
    for (auto *x : {&q, &k, &v}) {
      if (x->size() < 3 ||
          product(llvm::ArrayRef<int64_t>(*x).drop_back(2)) != product(m.Lead))
        return "the masks' layout does not match q, k and v";
      llvm::SmallVector<int64_t, 4> viewed(m.Lead.begin(), m.Lead.end());
      viewed.append(x->end() - 2, x->end());
      *x = viewed;
    }
    m.Reshaped = true;
  }
  auto s = attentionShape(q, k, v);
  if (!s)
    return "not attention's shapes: " + llvm::toString(s.takeError());
  if (product(s->outShape()) != product(m.Product->result(0)->type().shape()) ||
      s->outShape().back() != m.Product->result(0)->type().shape().back())
    return "the product's shape is not attention's output";
  return "";
}

/// A value over the last two axes [i, j] that depends only on j - i: Le
/// where j - i <= K, Gt above (a constant ConstantOfShape has Le == Gt).
struct Triangle {
  int64_t K = 0;
  double Le = 0, Gt = 0;
};

/// The Triangle a value is, when it is computed from constants by the ops
/// masks are made of (a folded constant; ConstantOfShape, Trilu, Cast, Not,
/// Where, and arithmetic with scalar constants: the zoo's and HF's causal
/// masks, too large for canonicalize to fold), or none.
std::optional<Triangle> triangleOf(const Value *v, int depth = 0) {
  Node *def = v->definingNode();
  if (!def || depth > 16)
    return std::nullopt;
  auto scalar = [&](unsigned i) {
    return i < def->numOperands() && def->operand(i)
               ? scalarConstant(def->operand(i))
               : std::nullopt;
  };
  auto map = [&](const Value *x, auto f) -> std::optional<Triangle> {
    auto t = triangleOf(x, depth + 1);
    if (!t)
      return std::nullopt;
    return Triangle{t->K, f(t->Le), f(t->Gt)};
  };
  switch (def->kind()) {
  case OpKind::Constant: {
    const Tensor &t = def->attr("value")->asTensor();
    unsigned r = v->type().rank();
    if (t.numElements() == 1)
      return Triangle{0, t.getDouble(0), t.getDouble(0)};
    if (r < 2)
      return std::nullopt;
    int64_t rows = v->type().dim(r - 2), cols = v->type().dim(r - 1);
    Triangle tri{0, t.getDouble(0), cols > 1 ? t.getDouble(1) : 0};
    for (int64_t i = 0; i < t.numElements(); ++i) {
      int64_t row = (i / cols) % rows, col = i % cols;
      if (t.getDouble(i) != (col - row <= 0 ? tri.Le : tri.Gt))
        return std::nullopt;
    }
    return tri;
  }
  case OpKind::ConstantOfShape: {
    const Attribute *a = def->attr("value");
    double x = a ? a->asTensor().getDouble(0) : 0.0;
    return Triangle{0, x, x};
  }
  case OpKind::Trilu: {
    auto t = triangleOf(def->operand(0), depth + 1);
    auto k = def->numOperands() > 1 && def->operand(1)
                 ? llvm::Optional<int64_t>()
                 : llvm::Optional<int64_t>(0);
    if (!k) {
      Node *kd = def->operand(1)->definingNode();
      if (!kd || !kd->is(OpKind::Constant))
        return std::nullopt;
      k = int64_t(kd->attr("value")->asTensor().getDouble(0));
    }
    if (!t || t->Le != t->Gt)
      return std::nullopt;
    // Lower keeps j - i <= k; upper keeps j - i >= k, i.e. zeroes j - i <=
    // k - 1.
    if (def->intAttr("upper", 1))
      return Triangle{*k - 1, 0, t->Le};
    return Triangle{*k, t->Le, 0};
  }
  case OpKind::Cast: {
    DType to = def->attr("to")->asType();
    return map(def->operand(0), [&](double x) {
      return to == DType::Bool ? double(x != 0) : x;
    });
  }
  case OpKind::Not:
    return map(def->operand(0), [](double x) { return double(x == 0); });
  case OpKind::Where: {
    auto c = triangleOf(def->operand(0), depth + 1);
    auto a = triangleOf(def->operand(1), depth + 1),
         b = triangleOf(def->operand(2), depth + 1);
    if (!c || !a || !b || a->Le != a->Gt || b->Le != b->Gt)
      return std::nullopt;
    return Triangle{c->K, c->Le != 0 ? a->Le : b->Le,
                    c->Gt != 0 ? a->Le : b->Le};
  }
  case OpKind::Add:
  case OpKind::Sub:
  case OpKind::Mul: {
    // One side a scalar constant, the other a Triangle.
    for (unsigned i = 0; i < 2; ++i) {
      auto c = scalar(1 - i);
      if (!c)
        continue;
      double k = *c;
      OpKind op = def->kind();
      return map(def->operand(i), [&](double x) {
        if (op == OpKind::Add)
          return x + k;
        if (op == OpKind::Mul)
          return x * k;
        return i == 0 ? x - k : k - x;
      });
    }
    return std::nullopt;
  }
  default:
    return std::nullopt;
  }
}

/// Whether a square mask over the last two axes keeps exactly j <= i: a
/// boolean mask kept where true (or false), or an additive bias of 0 and
/// <= -1e4.
bool isSquare(const Value *v) {
  unsigned r = v->type().rank();
  return r >= 2 && v->type().dim(r - 2) == v->type().dim(r - 1) &&
         v->type().dim(r - 1) >= 2;
}

bool FuseAttention::causalMask(const Value *cond, bool keepWhenTrue) const {
  auto t = triangleOf(cond);
  if (!t || !isSquare(cond) || t->K != 0)
    return false;
  return ((t->Le != 0) == keepWhenTrue) && ((t->Gt != 0) != keepWhenTrue);
}

bool FuseAttention::causalBias(const Value *bias) const {
  auto t = triangleOf(bias);
  return t && isSquare(bias) && t->K == 0 && t->Le == 0 && t->Gt <= kMaskedAt;
}

Value *FuseAttention::untranspose(Function &f, Value *kT, Node *before) {
  Builder b(f, before);
  b.setLoc(before->loc());
  unsigned r = kT->type().rank();
  llvm::SmallVector<int64_t, 4> perm;
  for (unsigned d = 0; d < r; ++d)
    perm.push_back(d);
  std::swap(perm[r - 1], perm[r - 2]);
  // Reshape(Transpose(Reshape(x, [N, S, D]), [0, 2, 1]), [.., D, S]) (the
  // dynamo exporter's kT of a [.., S, D] x): x.
  if (Node *outer = kT->definingNode(); outer && outer->is(OpKind::Reshape)) {
    Node *t = outer->operand(0)->definingNode();
    Node *inner =
        t && t->is(OpKind::Transpose) && t->attr("perm") &&
                t->attr("perm")->asInts() == std::vector<int64_t>{0, 2, 1}
            ? t->operand(0)->definingNode()
            : nullptr;
    if (inner && inner->is(OpKind::Reshape)) {
      Value *x = inner->operand(0);
      llvm::ArrayRef<int64_t> xs = x->type().shape(), ks = kT->type().shape();
      bool same = xs.size() == r;
      for (unsigned d = 0; same && d + 2 < r; ++d)
        same = xs[d] == ks[d];
      if (same && xs[r - 2] == ks[r - 1] && xs[r - 1] == ks[r - 2])
        return x;
    }
  }
  Value *src = kT;
  // Transpose(x, p) then the swap is Transpose(x, p o swap).
  if (Node *def = kT->definingNode(); def && def->is(OpKind::Transpose)) {
    if (const Attribute *a = def->attr("perm")) {
      std::vector<int64_t> p = a->asInts();
      llvm::SmallVector<int64_t, 4> composed;
      for (int64_t d : perm)
        composed.push_back(p[d]);
      perm = composed;
      src = def->operand(0);
    }
  }
  bool identity = true;
  for (unsigned d = 0; d < r; ++d)
    identity &= perm[d] == d;
  if (identity)
    return src;
  AttributeMap attrs;
  attrs["perm"] =
      Attribute::getInts(std::vector<int64_t>(perm.begin(), perm.end()));
  return b.apply("Transpose", {src}, attrs);
}

void FuseAttention::rewrite(Function &f, Match &m) {
  Node *at = m.Product;
  Builder b(f, at);
  b.setLoc(m.Softmax->loc());
  DType t = m.Q->type().dtype(), lseType = attentionLseType(t);
  // Repeated heads may be repeated again (ONNX's Attention function repeats
  // what the exporter already repeated, by 1).
  auto shared = [](Value *x) {
    for (Value *y = peelRepeatedHeads(x); y != x; y = peelRepeatedHeads(x))
      x = y;
    return x;
  };
  Value *k = shared(m.KTransposed ? untranspose(f, m.K, at) : m.K);
  Value *v = shared(m.VTransposed ? untranspose(f, m.V, at) : m.V);
  Value *q = m.Q;
  auto view = [&](Value *x) {
    llvm::SmallVector<int64_t, 4> shape(m.Lead.begin(), m.Lead.end());
    shape.append(x->type().shape().end() - 2, x->type().shape().end());
    Value *dims = b.constant(
        Tensor::fromInts(DType::I64, {int64_t(shape.size())}, shape));
    return b.apply("Reshape", {x, dims});
  };
  if (m.Reshaped) {
    q = view(q);
    k = view(k);
    v = view(v);
  }
  bool causal = false;
  // One additive bias in lse's type: biases, then masks as Where(cond, 0,
  // fill); a causal constant is an attribute instead.
  Value *bias = nullptr;
  auto add = [&](Value *x) {
    if (x->type().dtype() != lseType) {
      AttributeMap a;
      a["to"] = Attribute::getType(lseType);
      x = b.apply("Cast", {x}, a);
    }
    if (!bias) {
      bias = x;
      return;
    }
    bias = b.apply("Add", {bias, x});
  };
  for (Value *x : m.Biases) {
    if (causalBias(x))
      causal = true;
    else
      add(x);
  }
  for (const Match::Mask &mask : m.Masks) {
    if (causalMask(mask.Cond, mask.KeepWhenTrue)) {
      causal = true;
      continue;
    }
    Value *zero = b.constant(Tensor::fromDoubles(lseType, {}, {0.0}));
    Value *fill = b.constant(Tensor::fromDoubles(lseType, {}, {mask.Fill}));
    Value *keep = mask.KeepWhenTrue ? zero : fill,
          *drop = mask.KeepWhenTrue ? fill : zero;
    add(b.apply("Where", {mask.Cond, keep, drop}));
  }
  AttributeMap attrs;
  attrs["scale"] = Attribute::getFloat(m.Scale);
  if (causal)
    attrs["causal"] = Attribute::getInt(1);
  if (m.ZeroEmptyRows)
    attrs["zero_empty_rows"] = Attribute::getInt(1);
  if (m.Dropout)
    attrs["dropout"] = Attribute::getFloat(*m.Dropout);
  llvm::SmallVector<Value *, 4> operands = {q, k, v};
  if (bias)
    operands.push_back(bias);
  auto s =
      *attentionShape(q->type().shape(), k->type().shape(), v->type().shape());
  Node *fused = b.create(
      "FusedAttention", operands,
      {TensorType(t, s.outShape()), TensorType(lseType, s.lseShape())}, attrs);
  Value *out = fused->result(0);
  if (m.Reshaped) {
    llvm::ArrayRef<int64_t> shape = m.Product->result(0)->type().shape();
    Value *dims = b.constant(
        Tensor::fromInts(DType::I64, {int64_t(shape.size())}, shape));
    out = b.apply("Reshape", {out, dims});
  }
  out->setName(m.Product->result(0)->name());
  m.Product->result(0)->replaceAllUsesWith(out);
  m.Chain.push_back(m.Product);
  llvm::SmallVector<Node *, 12> pending(m.Chain.begin(), m.Chain.end());
  pending.push_back(m.Softmax);
  // Erase repeatedly whatever has no users left until nothing changes.
  for (bool progress = true; progress;) {
    progress = false;
    for (Node *&n : pending) {
      if (!n)
        continue;
      bool used = false;
      for (Value *r : n->results())
        used |= r->hasUses();
      if (used)
        continue;
      n->erase();
      n = nullptr;
      progress = true;
    }
  }
}

llvm::Expected<bool> FuseAttention::run(Module &m) {
  auto forward = forwardOf(m, "fuse-attention");
  if (!forward)
    return forward.takeError();
  Function &f = **forward;
  llvm::SmallVector<Node *, 8> softmaxes;
  for (Node &n : f.nodes())
    if (n.is(OpKind::Softmax))
      softmaxes.push_back(&n);
  bool changed = false;
  for (Node *n : softmaxes) {
    Match match;
    std::string why = this->match(*n, match);
    if (!why.empty()) {
      // The reason is part of the module: writing it is a change.
      const Attribute *said = n->attr("fuse_attention");
      if (!said || said->kind() != Attribute::Kind::String ||
          said->asString() != why) {
        n->setAttr("fuse_attention", Attribute::getString(why));
        changed = true;
      }
      continue;
    }
    rewrite(f, match);
    changed = true;
  }
  return changed;
}

llvm::Expected<std::unique_ptr<Pass>>
headroom::createFuseAttentionPass(llvm::StringRef options) {
  if (auto e = checkNoOptions("fuse-attention", options))
    return e;
  return std::make_unique<FuseAttention>();
}

//===- Rematerialize.cpp - Recompute cheap values where they are used late ===//
//
// A value the forward computes and the backward reads again lives across
// everything between its uses. When it is cheap to compute (a cast, an
// elementwise op, a copy) from values that are live at the late use anyway,
// keeping it is waste: mixed precision's bf16 copy of a master weight lives
// from the forward to the backward next to the weight; its f32 copy of a
// bf16 residual lives through a whole layer's backward next to the bf16
// value it came from; a norm's x / rms lives there next to x; a SiLU's
// sigmoid and product live through the MLP's backward next to the gate
// they came from. This pass
// splits such a value's uses at the widest gap between two of them and
// gives the later uses a clone of its computation, placed just before the
// first of them (the torch partitioner's rematerialisation of pointwise
// ops, Chen et al.'s recomputation at the granularity of one op).
//
// At the late use P, each operand of the clone is either live there anyway
// (free), a Constant (free), kept alive until P when it dies inside the
// gap (costing its bytes from its death to P), or itself recomputed the
// same way (up to kMaxDepth ops deep) -- whichever costs fewer bytes. The
// split is made when the kept bytes are at most the value's and keep fewer
// byte-positions alive than the gap frees: then the bytes live at any
// point in the gap do not rise (where a kept value would have died its
// bytes replace the split value's), no other point changes, and the step's
// peak never rises. A Read is free to use later (it is the state slot, no
// arena bytes; the optimizer's write of the slot is ordered after every use
// of the Read): so mixed precision's bf16 copy of a master weight is cast
// again where the backward reads it instead of being kept through the step.
// Random ops (Dropout) are never cloned. Clones carry their originals'
// names, attributes and locations (the clone of a recompute clone is
// `recomputed = 1` too; the rest count as temporaries and their FLOPs as
// the step's, not as the recomputation policy's, which auto-fit ranks by);
// a clone's own uses may be split again further on. Values under 64 KiB
// (option min_bytes=N) are left alone.
//
// Requires: verified IR; runs after recompute and before schedule, on every
// function. Guarantees: the same results bit for bit (a clone computes what
// its original did, from the same values).
//
//===----------------------------------------------------------------------===//
#include "compiler/Protocol.h"
#include "passes/Passes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"

using namespace headroom;

namespace {

/// How many ops deep a clone may go to reach live values.
constexpr int kMaxDepth = 4;

/// Values smaller than this are left alone (option min_bytes): each clone
/// is one more kernel launch, and a few KiB are not worth one.
constexpr uint64_t kDefaultMinBytes = 64 * 1024;

/// Ops cheap enough to compute twice: elementwise math, casts and copies.
bool isCheap(const Node &n) {
  if (n.numResults() != 1 || n.state() || n.info()->hasSideEffects() ||
      randomStream(n.attrs()))
    return false;
  if (n.info()->has(opflags::Elementwise))
    return true;
  switch (n.kind()) {
  case OpKind::Cast:
  case OpKind::Reshape:
  case OpKind::Flatten:
  case OpKind::Squeeze:
  case OpKind::Unsqueeze:
  case OpKind::Transpose:
  case OpKind::Slice:
  case OpKind::Concat:
  case OpKind::Nf4Dequantize: // from frozen state: a weight made again
    return true;
  default:
    return false;
  }
}

class FunctionRemat {
public:
  FunctionRemat(Function &f, uint64_t minBytes) : F(f), MinBytes(minBytes) {
    double pos = 0;
    for (Node &n : f.nodes()) {
      Pos[&n] = pos;
      pos += 1;
    }
    End = pos;
    for (Node &n : f.nodes())
      for (Value *v : n.operands())
        if (v)
          noteUse(v, &n);
  }

  bool run() {
    bool changed = false;
    // Clones are inserted before later nodes: the walk reaches them too.
    for (Node &n : F.nodes())
      if (isCheap(n))
        changed |= split(n);
    return changed;
  }

private:
  double posOf(const Node *user) const {
    return user->info()->has(opflags::Terminator) ? End : Pos.lookup(user);
  }
  void noteUse(const Value *v, const Node *user) {
    double &last = LastUse[v];
    last = std::max(last, posOf(user));
  }
  bool liveAt(const Value *v, double p) const {
    const Node *d = v->definingNode();
    return (!d || Pos.lookup(d) < p) && LastUse.lookup(v) >= p;
  }

  /// The bytes it costs to have v at position p: 0 when it is live there
  /// or a Constant; else the cheaper of keeping it alive and recomputing it
  /// (noting which in `plan`); -1 when neither is possible.
  int64_t cost(Value *v, double p, double gapStart, int depth,
               llvm::DenseMap<Value *, bool> &plan,
               llvm::DenseSet<Value *> &kept) const {
    const Node *d = v->definingNode();
    if (liveAt(v, p) || (d && d->is(OpKind::Constant)) || kept.count(v))
      return 0;
    if (auto it = plan.find(v); it != plan.end())
      return 0; // already costed along another path
    // A Read is the state slot itself: using it later costs no arena bytes
    // (the optimizer's write of the slot is ordered after every use of the
    // Read, by the schedule as by the unscheduled order).
    if (d && d->is(OpKind::Read))
      return 0;
    // Kept alive longer only when it dies inside the gap: before it, the
    // value being split is still live and its bytes would add up.
    int64_t keep =
        LastUse.lookup(v) < gapStart ? -1 : int64_t(v->type().sizeInBytes());
    if (d && depth < kMaxDepth && isCheap(*d)) {
      llvm::DenseMap<Value *, bool> subPlan = plan;
      llvm::DenseSet<Value *> subKept = kept;
      int64_t sum = 0;
      for (Value *o : d->operands()) {
        if (!o)
          continue;
        int64_t c = cost(o, p, gapStart, depth + 1, subPlan, subKept);
        if (c < 0) {
          sum = -1;
          break;
        }
        sum += c;
      }
      if (sum >= 0 && (keep < 0 || sum < keep)) {
        plan = std::move(subPlan);
        kept = std::move(subKept);
        plan[v] = true;
        return sum;
      }
    }
    if (keep >= 0) {
      kept.insert(v);
      plan[v] = false;
    }
    return keep;
  }

  /// The clone of v before `before` by `plan` (v itself where kept).
  Value *materialize(Value *v, Node *before, double p,
                     const llvm::DenseMap<Value *, bool> &plan,
                     llvm::DenseMap<Value *, Value *> &made) {
    if (!plan.lookup(v))
      return v;
    if (Value *c = made.lookup(v))
      return c;
    Node *d = v->definingNode();
    llvm::SmallVector<Value *, 4> operands;
    for (Value *o : d->operands())
      operands.push_back(o ? materialize(o, before, p, plan, made) : nullptr);
    AttributeMap attrs = d->attrs(); // a recompute clone's stays one
    Node *c = F.createNode(d->op(), operands, {v->type()}, std::move(attrs),
                           nullptr, before);
    c->setLoc(d->loc());
    c->result(0)->setName(v->name());
    // Clones sit just before `before`, in the order they are made (a
    // split makes at most a few dozen).
    Pos[c] = p - 0.5 + 1e-4 * double(made.size() + 1);
    for (Value *o : operands)
      if (o)
        noteUse(o, c);
    made[v] = c->result(0);
    return c->result(0);
  }

  /// Gives the uses of n's result after its widest worthwhile gap a clone.
  bool split(Node &n) {
    Value *r = n.result(0);
    if (r->type().sizeInBytes() < MinBytes)
      return false;
    std::vector<Node *> users(r->users().begin(), r->users().end());
    llvm::sort(users, [&](const Node *a, const Node *b) {
      return posOf(a) < posOf(b);
    });
    users.erase(std::unique(users.begin(), users.end()), users.end());
    if (users.size() < 2 || users.back()->info()->has(opflags::Terminator))
      return false;
    int64_t bytes = int64_t(r->type().sizeInBytes());
    size_t best = 0;
    double bestGap = 1;
    llvm::DenseMap<Value *, bool> bestPlan;
    for (size_t j = 1; j < users.size(); ++j) {
      double gap = posOf(users[j]) - posOf(users[j - 1]);
      if (gap <= bestGap)
        continue;
      llvm::DenseMap<Value *, bool> plan;
      llvm::DenseSet<Value *> kept;
      double p = posOf(users[j]), start = posOf(users[j - 1]);
      int64_t sum = 0;
      for (Value *o : n.operands()) {
        if (!o)
          continue;
        int64_t c = cost(o, p, start, 1, plan, kept);
        if (c < 0) {
          sum = -1;
          break;
        }
        sum += c;
      }
      // Where the kept values would have died, their bytes replace the
      // split value's (no more than it); before, the gap is all gain.
      double extended = 0;
      for (Value *o : kept)
        extended += double(o->type().sizeInBytes()) * (p - LastUse.lookup(o));
      if (sum < 0 || sum > bytes || extended >= double(bytes) * gap)
        continue;
      best = j;
      bestGap = gap;
      bestPlan = std::move(plan);
    }
    if (!best)
      return false;
    Node *at = users[best];
    double p = posOf(at);
    bestPlan[r] = true;
    llvm::DenseMap<Value *, Value *> made;
    Value *clone = materialize(r, at, p, bestPlan, made);
    for (size_t j = best; j < users.size(); ++j)
      for (unsigned i = 0; i < users[j]->numOperands(); ++i)
        if (users[j]->operand(i) == r) {
          users[j]->setOperand(i, clone);
          noteUse(clone, users[j]);
        }
    LastUse[r] = posOf(users[best - 1]);
    return true;
  }

  Function &F;
  uint64_t MinBytes;
  llvm::DenseMap<const Node *, double> Pos;
  llvm::DenseMap<const Value *, double> LastUse;
  double End = 0;
};

class Rematerialize : public Pass {
public:
  explicit Rematerialize(uint64_t minBytes) : MinBytes(minBytes) {}
  llvm::StringRef name() const override { return "rematerialize"; }
  llvm::Expected<bool> run(Module &m) override {
    bool changed = false;
    for (const auto &f : m.functions())
      changed |= FunctionRemat(*f, MinBytes).run();
    return changed;
  }

private:
  uint64_t MinBytes;
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>>
headroom::createRematerializePass(llvm::StringRef options) {
  auto items = parsePassOptions("rematerialize", options);
  if (!items)
    return items.takeError();
  uint64_t minBytes = kDefaultMinBytes;
  for (const auto &[key, value] : *items) {
    if (key != "min_bytes")
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "rematerialize: unknown option '%s' (min_bytes)", key.c_str());
    if (llvm::StringRef(value).getAsInteger(10, minBytes))
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "rematerialize: min_bytes=%s: expected a whole number of bytes",
          value.c_str());
  }
  return std::make_unique<Rematerialize>(minBytes);
}

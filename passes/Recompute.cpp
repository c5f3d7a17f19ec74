//===- Recompute.cpp - Keep some activations, recompute the rest ----------===//
//
// The backward reads forward values ("saved activations"); keeping them all
// is what makes training memory grow with depth. This pass keeps some and
// recomputes the others in the backward: every backward use of a value that
// is not kept is rewritten to a clone of the forward nodes that compute it
// from kept values, placed just before the first backward node that needs
// it (so the clones of a segment appear when the backward reaches that
// segment, and die with it: Chen et al. 2016). Clones carry `recomputed = 1`
// (the memory report counts them) and their originals' locations; a
// Dropout's clone keeps its `stream`, so it draws the same mask.
//
// Always kept: data arguments, Reads and Constants (a Read is never cloned:
// with LOMO an update may already have written its slot), side inputs (values
// that depend on no argument, or live outside the repeated blocks and feed
// several of them: masks, RoPE tables), values the function returns, and the
// tail after the last kept cut point (the backward needs it at once). Casts
// and transposes of weights (mixed precision's bf16 copies) are side inputs
// that are recomputed: one cast per use in the backward instead of a second
// copy of the parameters kept through the step. Which
// of the rest are kept is the policy's (Recompute.h): cut points, block
// outputs, or everything but attention score chains.
//
// Requires: autodiff has run (the loss is the first returned value; the
// forward is the nodes up to it); runs after optimizer/accumulate, on every
// function (they make the same decisions: their forwards are the same), and
// before schedule. Guarantees: the same results bit for bit (clones compute
// what their originals did, from the same values).
//
//===----------------------------------------------------------------------===//
#include "passes/Recompute.h"

#include "compiler/Protocol.h"
#include "passes/Passes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"

#include <cmath>
#include <functional>
#include <map>

using namespace headroom;

namespace {

/// The first scope component of the form `name.N` (`/h.3/attn/MatMul` ->
/// family "h", index 3; `/bert/encoder/layer.2/...` -> "bert/encoder/layer").
bool scopeBlock(llvm::StringRef loc, std::string &family, int &index) {
  llvm::SmallVector<llvm::StringRef, 8> parts;
  loc.split(parts, '/', -1, /*KeepEmpty=*/false);
  std::string prefix;
  for (size_t i = 0; i + 1 < parts.size(); ++i) { // the last is the op's own
    auto [name, number] = parts[i].rsplit('.');
    unsigned n = 0;
    if (!name.empty() && name != parts[i] && !number.getAsInteger(10, n)) {
      family = prefix + name.str();
      index = static_cast<int>(n);
      return true;
    }
    prefix += parts[i].str() + "/";
  }
  return false;
}

/// The forward of `f` with what recomputation needs to know about it.
struct ForwardInfo {
  std::vector<Node *> Nodes; // up to and including the loss
  llvm::DenseMap<const Node *, int> Pos;
  llvm::DenseMap<const Node *, int> Block; // -1 outside the repeated blocks
  unsigned NumBlocks = 0;
  /// Values computed from the function's arguments (the rest -- Reads,
  /// Constants, weight casts, tables -- are side inputs).
  llvm::DenseSet<const Value *> FromArgument;
  llvm::DenseSet<const Value *> Side;
  /// Side values that only move or cast parameters (mixed precision's bf16
  /// copies of the weights): free to recompute from the Read.
  llvm::DenseSet<const Value *> WeightCopies;
  ForwardChain Chain;

  explicit ForwardInfo(const Function &f);
  bool isForward(const Value *v) const {
    return v->definingNode() && Pos.count(v->definingNode());
  }

private:
  bool blocksFromScopes();
  void blocksFromStructure(const Function &f);
  void findSideInputs(const Function &f);
  void findCutPoints();
  /// The forward nodes that compute from the arguments, in order: what the
  /// repeated blocks are made of.
  std::vector<Node *> dataNodes() const;
};

ForwardInfo::ForwardInfo(const Function &f) {
  const Node *loss = f.lossNode();
  if (!loss)
    return;
  for (const Node &n : f.nodes()) {
    Pos[&n] = Nodes.size();
    Nodes.push_back(const_cast<Node *>(&n));
    if (&n == loss)
      break;
  }
  for (Value *a : f.arguments())
    FromArgument.insert(a);
  for (Node *n : Nodes)
    for (Value *v : n->operands())
      if (v && FromArgument.count(v)) {
        for (Value *r : n->results())
          FromArgument.insert(r);
        break;
      }
  if (!blocksFromScopes())
    blocksFromStructure(f);
  findSideInputs(f);
  findCutPoints();
  Chain.NumBlocks = NumBlocks;
}

/// The repeated family: the one whose scopes name the most indices.
bool ForwardInfo::blocksFromScopes() {
  std::map<std::string, std::map<int, int>> families; // family -> index -> id
  for (Node *n : Nodes) {
    std::string family;
    int index = 0;
    if (scopeBlock(n->loc(), family, index))
      families[family].emplace(index, 0);
  }
  const std::map<int, int> *blocks = nullptr;
  std::string chosen;
  for (auto &[family, indices] : families)
    if (indices.size() >= 2 && (!blocks || indices.size() > blocks->size())) {
      blocks = &indices;
      chosen = family;
    }
  std::map<int, int> dense; // index -> 0..NumBlocks-1 in index order
  if (blocks)
    for (const auto &kv : *blocks)
      dense.emplace(kv.first, dense.size());
  NumBlocks = dense.size();
  for (Node *n : Nodes) {
    std::string family;
    int index = 0;
    Block[n] = scopeBlock(n->loc(), family, index) && family == chosen
                   ? dense[index]
                   : -1;
  }
  return NumBlocks > 0;
}

std::vector<Node *> ForwardInfo::dataNodes() const {
  std::vector<Node *> data;
  for (Node *n : Nodes)
    if (n->numResults() && FromArgument.count(n->result(0)))
      data.push_back(n);
  return data;
}

/// Without scopes, the blocks are the longest tandem repeat of the data
/// nodes' signatures (op, operand and result types: a layer's weights differ,
/// their types do not), cut at the residual stream. Every period p is tried;
/// a run of positions where node i matches node i + p spans
/// floor((run + p) / p) copies, and the repeat covering the most nodes wins
/// (the smallest period on a tie: two layers also repeat). The copies'
/// boundaries are then moved to the cut points: each block ends at the same
/// cut point of its copy, the one giving the most whole blocks (the earliest
/// on a tie), so a block is what lies between two residual cuts.
void ForwardInfo::blocksFromStructure(const Function &f) {
  for (Node *n : Nodes)
    Block[n] = -1;
  std::vector<Node *> data = dataNodes();
  std::map<std::string, int> ids;
  std::vector<int> sig;
  for (Node *n : data) {
    std::string s = n->op();
    for (Value *v : n->operands())
      s += v ? "|" + v->type().str() : "|-";
    s += "->";
    for (Value *v : n->results())
      s += "|" + v->type().str();
    sig.push_back(ids.emplace(s, ids.size()).first->second);
  }
  size_t n = sig.size(), bestPeriod = 0, bestStart = 0, bestCount = 0;
  constexpr size_t MinPeriod = 2;
  for (size_t p = MinPeriod; 2 * p <= n; ++p)
    for (size_t i = 0; i + p < n;) {
      if (sig[i] != sig[i + p]) {
        ++i;
        continue;
      }
      size_t a = i;
      while (i + p < n && sig[i] == sig[i + p])
        ++i;
      size_t count = (i - a + p) / p;
      if (count >= 2 && count * p > bestCount * bestPeriod) {
        bestPeriod = p;
        bestStart = a;
        bestCount = count;
      }
    }
  if (!bestCount)
    return;
  // Provisional blocks (the copies as found), for the side inputs and cut
  // points that place the final boundaries.
  auto assign = [&](size_t first, size_t count) {
    for (Node *d : data)
      Block[d] = -1;
    for (size_t i = first; i < first + count * bestPeriod && i < n; ++i)
      Block[data[i]] = (i - first) / bestPeriod;
    NumBlocks = count;
  };
  assign(bestStart, bestCount);
  findSideInputs(f);
  findCutPoints();
  llvm::DenseSet<const Node *> cuts;
  for (const Value *c : Chain.CutPoints)
    cuts.insert(c->definingNode());
  // With boundaries at offset r, block j is (c_j, c_j+1] for the boundary
  // nodes c_j = start + r - 1 + j p (c_0 may be the node just before the
  // repeat, its input, or the arguments), inside the repeat; whole when
  // both ends are cut points. The longest run of whole blocks over all
  // offsets wins.
  size_t end = bestStart + bestCount * bestPeriod; // one past the repeat
  size_t chosenFirst = 0, chosenCount = 0;
  for (size_t r = 0; r < bestPeriod; ++r) {
    size_t runFirst = 0, run = 0;
    // c + 1 is the boundary's next node: c = -1 is the function's arguments.
    for (size_t c1 = bestStart + r; c1 <= end; c1 += bestPeriod) {
      if (c1 > 0 && !cuts.count(data[c1 - 1])) {
        run = 0;
        continue;
      }
      if (run++ == 0)
        runFirst = c1;
      if (run - 1 > chosenCount) {
        chosenCount = run - 1;
        chosenFirst = runFirst;
      }
    }
  }
  // Fewer than two whole blocks: the repeat is not a chain of layers.
  assign(chosenFirst, chosenCount >= 2 ? chosenCount : 0);
}

void ForwardInfo::findSideInputs(const Function &f) {
  Side.clear();
  WeightCopies.clear();
  for (Value *a : f.arguments())
    Side.insert(a);
  for (Node *n : Nodes)
    for (Value *r : n->results()) {
      if (!FromArgument.count(r)) {
        Side.insert(r);
        continue;
      }
      if (Block.lookup(n) >= 0)
        continue;
      llvm::SmallSet<int, 4> usedBy;
      for (const Node *u : r->users())
        if (Pos.count(u) && Block.lookup(u) >= 0)
          usedBy.insert(Block.lookup(u));
      if (usedBy.size() >= 2)
        Side.insert(r);
    }

  for (Node *n : Nodes) {
    bool copy = n->is(OpKind::Cast) || n->is(OpKind::Transpose) ||
                n->is(OpKind::Reshape);
    for (Value *v : n->operands())
      copy &= v && v->definingNode() &&
              (v->definingNode()->is(OpKind::Read) || WeightCopies.count(v) ||
               v->definingNode()->is(OpKind::Constant));
    if (copy && n->numResults() == 1 && Side.count(n->result(0)))
      WeightCopies.insert(n->result(0));
  }
}

/// Cut points: the one non-side value live in the forward after its
/// definition.
void ForwardInfo::findCutPoints() {
  Chain = ForwardChain();
  std::vector<int> delta(Nodes.size() + 1, 0);
  llvm::DenseMap<const Value *, int> lastUse;
  for (Node *n : Nodes)
    for (Value *r : n->results()) {
      if (Side.count(r))
        continue;
      int last = -1;
      for (const Node *u : r->users())
        if (Pos.count(u))
          last = std::max(last, Pos.lookup(u));
      int def = Pos.lookup(n);
      if (last <= def)
        continue;
      lastUse[r] = last;
      ++delta[def];
      --delta[last];
    }
  int live = 0;
  for (Node *n : Nodes) {
    int p = Pos.lookup(n);
    live += delta[p];
    // The one value live is a result of n (of a Dropout, its output; the
    // mask only feeds the backward).
    const Value *cut = nullptr;
    for (Value *r : n->results())
      if (lastUse.count(r))
        cut = cut ? nullptr : r;
    if (live == 1 && cut) {
      Chain.CutPoints.push_back(cut);
      Chain.CutBlock.push_back(Block.lookup(n));
    }
  }
}

class Recompute : public Pass {
public:
  explicit Recompute(RecomputeOptions o) : O(std::move(o)) {}
  llvm::StringRef name() const override { return "recompute"; }
  llvm::Expected<bool> run(Module &m) override {
    bool changed = false;
    if (O.Kind == RecomputeOptions::Policy::None)
      return false;
    // A name to keep that no value has is a typo, not a choice.
    for (const std::string &name : O.Keep) {
      bool found = false;
      for (const auto &f : m.functions())
        for (const Node &n : f->nodes())
          for (const Value *r : n.results())
            found |= r->name() == name;
      if (!found)
        return llvm::createStringError(
            llvm::inconvertibleErrorCode(),
            "recompute: keep=%s: no value has that name (headroom opt "
            "--compile prints them)",
            name.c_str());
    }
    for (const auto &f : m.functions())
      changed |= recomputeFunction(*f);
    return changed;
  }

private:
  bool recomputeFunction(Function &f);
  /// The values of the forward that are kept, by the policy.
  llvm::DenseSet<const Value *> keptByPolicy(const ForwardInfo &fw) const;
  RecomputeOptions O;
};

/// Attention score chains (Korthikanti et al. 2022): the scores' matmul
/// QK^T and what follows it up to the Softmax (scale, mask), the Softmax,
/// and what follows it up to the matmul with V (dropout). Q, K, V and every
/// other matmul output stay kept.
llvm::DenseSet<const Value *> scoreChains(const ForwardInfo &fw) {
  llvm::DenseSet<const Value *> chain;
  auto isMatmul = [](const Node *n) {
    return n->is(OpKind::MatMul) || n->is(OpKind::Gemm);
  };
  for (Node *n : fw.Nodes) {
    if (!n->is(OpKind::Softmax))
      continue;
    llvm::SmallVector<Node *, 8> work = {n};
    while (!work.empty()) { // back to the scores' matmul, QK^T, included
      Node *w = work.pop_back_val();
      for (Value *r : w->results())
        chain.insert(r);
      if (isMatmul(w))
        continue;
      for (Value *v : w->operands())
        if (v && fw.isForward(v) && !fw.Side.count(v) && !chain.count(v))
          work.push_back(v->definingNode());
    }
    work = {n};
    while (!work.empty()) { // on to the matmul with V
      Node *w = work.pop_back_val();
      for (Value *r : w->results())
        for (Node *u : r->users())
          if (fw.Pos.count(u) && !isMatmul(u) && u->numResults() &&
              !u->info()->hasSideEffects() && !chain.count(u->result(0))) {
            for (Value *ur : u->results())
              chain.insert(ur);
            work.push_back(u);
          }
    }
  }
  return chain;
}

llvm::DenseSet<const Value *>
Recompute::keptByPolicy(const ForwardInfo &fw) const {
  using P = RecomputeOptions::Policy;
  llvm::DenseSet<const Value *> kept;
  const ForwardChain &c = fw.Chain;
  if (O.Kind == P::Selective) {
    llvm::DenseSet<const Value *> chain = scoreChains(fw);
    for (Node *n : fw.Nodes)
      for (Value *r : n->results())
        if (!chain.count(r))
          kept.insert(r);
    return kept;
  }
  // Cut points kept, by policy; then everything after the last of them.
  std::vector<const Value *> cuts;
  if (O.Kind == P::All)
    cuts = c.CutPoints;
  // Every stride-th cut point, and the last.
  auto strided = [&](size_t stride) {
    for (size_t i = 0; i < c.CutPoints.size(); ++i)
      if (i % stride == stride - 1 || i + 1 == c.CutPoints.size())
        cuts.push_back(c.CutPoints[i]);
  };
  if (O.Kind == P::Sqrt)
    strided(std::max<size_t>(
        1, static_cast<size_t>(std::lround(std::sqrt(c.CutPoints.size())))));
  // Without repeated blocks in the scopes, every N-th cut point.
  if (O.Kind == P::Every && c.NumBlocks == 0)
    strided(O.N);
  if (O.Kind == P::Every && c.NumBlocks > 0) {
    // The input of the first block, and the output of every N-th block (the
    // last cut point of each block).
    for (size_t i = 0; i < c.CutPoints.size(); ++i) {
      int b = c.CutBlock[i];
      bool lastOfBlock =
          b >= 0 && (i + 1 == c.CutPoints.size() || c.CutBlock[i + 1] != b);
      bool beforeBlocks =
          b < 0 && i + 1 < c.CutPoints.size() && c.CutBlock[i + 1] == 0;
      if (beforeBlocks || (lastOfBlock && (unsigned(b) + 1) % O.N == 0))
        cuts.push_back(c.CutPoints[i]);
      if (lastOfBlock && unsigned(b) + 1 == c.NumBlocks)
        cuts.push_back(c.CutPoints[i]); // the last block's output
    }
  }
  for (const Value *v : cuts)
    kept.insert(v);
  int lastCut = -1;
  for (const Value *v : cuts)
    lastCut = std::max(lastCut, fw.Pos.lookup(v->definingNode()));
  for (Node *n : fw.Nodes)
    if (fw.Pos.lookup(n) > lastCut)
      for (Value *r : n->results())
        kept.insert(r);
  // Blocks kept whole (the budget search's knob).
  for (Node *n : fw.Nodes) {
    int b = fw.Block.lookup(n);
    if (b >= 0 && llvm::is_contained(O.KeepBlocks, unsigned(b)))
      for (Value *r : n->results())
        kept.insert(r);
  }
  return kept;
}

bool Recompute::recomputeFunction(Function &f) {
  ForwardInfo fw(f);
  if (fw.Nodes.empty())
    return false;
  llvm::DenseSet<const Value *> kept = keptByPolicy(fw);
  for (Node *n : fw.Nodes)
    for (Value *r : n->results())
      if (llvm::is_contained(O.Keep, r->name()))
        kept.insert(r);
  for (Value *v : f.returnValues())
    kept.insert(v);
  auto mustKeep = [&](const Value *v) {
    if (!fw.isForward(v) || kept.count(v))
      return true;
    if (fw.Side.count(v) && !fw.WeightCopies.count(v))
      return true;
    const Node *d = v->definingNode();
    // Never clone a Read (an update may have written its slot since), a
    // Constant (free), or anything with effects.
    return d->is(OpKind::Read) || d->is(OpKind::Constant) ||
           d->info()->hasSideEffects();
  };

  llvm::DenseMap<const Value *, Value *> clones;
  std::function<Value *(Value *, Node *)> materialize = [&](Value *v,
                                                            Node *before) {
    if (mustKeep(v))
      return v;
    if (Value *c = clones.lookup(v))
      return c;
    Node *d = v->definingNode();
    llvm::SmallVector<Value *, 4> operands;
    for (Value *u : d->operands())
      operands.push_back(u ? materialize(u, before) : nullptr);
    llvm::SmallVector<TensorType, 2> types;
    for (Value *r : d->results())
      types.push_back(r->type());
    AttributeMap attrs = d->attrs();
    markRecomputed(attrs);
    Node *c = f.createNode(d->op(), operands, types, std::move(attrs),
                           d->state(), before);
    c->setLoc(d->loc());
    for (unsigned i = 0; i < d->numResults(); ++i) {
      c->result(i)->setName(d->result(i)->name());
      clones[d->result(i)] = c->result(i);
    }
    return clones.lookup(v);
  };

  std::vector<Node *> backward;
  bool after = false;
  for (Node &n : f.nodes()) {
    if (after && !n.info()->has(opflags::Terminator))
      backward.push_back(&n);
    after |= &n == fw.Nodes.back();
  }
  bool changed = false;
  for (Node *n : backward)
    for (unsigned i = 0; i < n->numOperands(); ++i) {
      Value *v = n->operand(i);
      if (!v || mustKeep(v))
        continue;
      n->setOperand(i, materialize(v, n));
      changed = true;
    }
  return changed;
}

} // namespace

ForwardChain headroom::analyzeForwardChain(const Function &f) {
  return ForwardInfo(f).Chain;
}

std::string RecomputeOptions::text() const {
  const char *names[] = {"none", "all", "every", "sqrt", "selective"};
  std::string s = std::string("policy=") + names[static_cast<int>(Kind)];
  if (Kind == Policy::Every)
    s += " n=" + std::to_string(N);
  if (!Keep.empty())
    s += " keep=" + llvm::join(Keep, ";");
  if (!KeepBlocks.empty()) {
    std::vector<std::string> blocks;
    for (unsigned b : KeepBlocks)
      blocks.push_back(std::to_string(b));
    s += " keep_blocks=" + llvm::join(blocks, ";");
  }
  return s;
}

llvm::Expected<RecomputeOptions>
headroom::parseRecomputeOptions(llvm::StringRef text) {
  auto items = parsePassOptions("recompute", text);
  if (!items)
    return items.takeError();
  RecomputeOptions o;
  using P = RecomputeOptions::Policy;
  for (const auto &[key, value] : *items) {
    auto bad = [&, key = key, value = value](const char *what) {
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "recompute: %s=%s: expected %s",
                                     key.c_str(), value.c_str(), what);
    };
    llvm::SmallVector<llvm::StringRef, 8> list;
    llvm::StringRef(value).split(list, ';', -1, /*KeepEmpty=*/false);
    if (key == "policy") {
      auto p = llvm::StringSwitch<llvm::Optional<P>>(value)
                   .Case("none", P::None)
                   .Case("all", P::All)
                   .Case("every", P::Every)
                   .Case("sqrt", P::Sqrt)
                   .Case("selective", P::Selective)
                   .Default(llvm::None);
      if (!p)
        return bad("none, all, every, sqrt or selective");
      o.Kind = *p;
    } else if (key == "n") {
      if (llvm::StringRef(value).getAsInteger(10, o.N) || o.N == 0)
        return bad("a number of blocks >= 1");
    } else if (key == "keep") {
      for (llvm::StringRef name : list)
        o.Keep.push_back(name.str());
    } else if (key == "keep_blocks") {
      for (llvm::StringRef b : list) {
        unsigned index = 0;
        if (b.getAsInteger(10, index))
          return bad("block indices separated by ';'");
        o.KeepBlocks.push_back(index);
      }
    } else {
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "recompute: unknown option '%s' (policy, n, keep, keep_blocks)",
          key.c_str());
    }
  }
  return o;
}

std::unique_ptr<Pass>
headroom::createRecomputePass(const RecomputeOptions &options) {
  return std::make_unique<Recompute>(options);
}

llvm::Expected<std::unique_ptr<Pass>>
headroom::createRecomputePassFromOptions(llvm::StringRef options) {
  auto o = parseRecomputeOptions(options);
  if (!o)
    return o.takeError();
  return createRecomputePass(*o);
}

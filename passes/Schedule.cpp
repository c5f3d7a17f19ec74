//===- Schedule.cpp - Order nodes to lower peak memory --------------------===//
//
// A list scheduler over each function's dependence graph. Dependences are the
// data edges plus the state order: a write of a slot comes after every use of
// an earlier read of it, and a read after an earlier write. Among ready
// nodes the urgent ones go first, then the rest in their original order.
// Urgent (compiler/UpdateAnalysis.h): updates -- state writes and the
// arithmetic computed from a parameter gradient (tagged `grad_of`) --, their
// work on state alone once the one gradient it meets is complete (an added
// edge; shared work only when scalar), and Reads and Constants, which cost no
// arena memory. The effect on a training step: each parameter is updated
// as soon as its gradient is complete and the forward values that read the
// old weight are no longer needed, so the gradient dies there instead of
// living to the end of the step -- LOMO's fused update. (With global-norm
// clipping in one pass every update needs every gradient, and they all
// live.)
//
// With overlap=1 (the cuda target's plans for several ranks: their
// collectives run on the copy stream, compiler/Streams.h) the order also
// lets communication overlap the compute:
//   - a reduction (AllReduce, ReduceScatter) is urgent: issued as soon as
//     its gradient is complete;
//   - what reads a reduction's result waits until the next reduction is
//     issued (or nothing else is ready): the compute stream does not stop
//     for a reduction it has just issued, and by then the copy stream is
//     joined anyway (at most two groups in flight);
//   - each AllGather of a shard (zero 3) is moved before the first reader
//     of the gather before it, with the Cast that feeds it: the next weight
//     is gathered while the current one is computed with (a prefetch of
//     one weight, whose bytes the planner sees live from there).
//
// Requires: verified IR. Guarantees: a topological order of the same nodes;
// results are bit-identical (only the order changes). Run it last, after
// canonicalize: the memory planner plans the order it finds.
//
//===----------------------------------------------------------------------===//
#include "compiler/Collectives.h"
#include "compiler/UpdateAnalysis.h"
#include "passes/Passes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <queue>

using namespace headroom;

namespace {

class Schedule : public Pass {
public:
  explicit Schedule(bool overlap) : Overlap(overlap) {}
  llvm::StringRef name() const override { return "schedule"; }
  llvm::Expected<bool> run(Module &m) override;

private:
  llvm::Expected<bool> scheduleFunction(Function &f) const;
  bool Overlap;
};

/// A function's nodes (the terminator excluded) and their dependences: data
/// edges and the state order.
struct DependenceGraph {
  explicit DependenceGraph(Function &f);
  void edge(int from, int to) {
    if (from == to)
      return;
    Succ[from].push_back(to);
    ++Preds[to];
  }
  std::vector<Node *> Nodes;
  llvm::DenseMap<const Node *, int> Index;
  std::vector<std::vector<int>> Succ;
  std::vector<int> Preds;
};

DependenceGraph::DependenceGraph(Function &f) {
  for (Node &n : f.nodes()) {
    if (n.info()->has(opflags::Terminator))
      continue;
    Index[&n] = Nodes.size();
    Nodes.push_back(&n);
  }
  size_t count = Nodes.size();
  Succ.resize(count);
  Preds.assign(count, 0);
  // State order: per slot, the last write and the reads since it.
  llvm::DenseMap<const StateSlot *, int> lastWrite;
  llvm::DenseMap<const StateSlot *, std::vector<int>> readsSinceWrite;
  for (size_t i = 0; i < count; ++i) {
    Node &n = *Nodes[i];
    for (Value *v : n.operands())
      if (v && v->definingNode())
        edge(Index[v->definingNode()], i);
    for (StateSlot *s : n.states()) {
      auto w = lastWrite.find(s);
      if (w != lastWrite.end())
        edge(w->second, i);
      if (n.info()->has(opflags::ReadsState)) {
        readsSinceWrite[s].push_back(i);
        continue;
      }
      // A write waits for every use of the reads before it.
      for (int r : readsSinceWrite[s])
        for (Node *user : Nodes[r]->result(0)->users())
          if (Index.count(user))
            edge(Index[user], i);
      readsSinceWrite[s].clear();
      lastWrite[s] = i;
    }
  }
}

bool isReduction(const Node &n) {
  return n.is(OpKind::AllReduce) || n.is(OpKind::ReduceScatter);
}

/// Zero 3's prefetch (overlap=1): each AllGather, with the Cast feeding it
/// alone, moves before the first reader of the gather before it, but after
/// what it reads. Positions after the gather's do not change.
void prefetchGathers(std::vector<int> &order, const DependenceGraph &graph) {
  const std::vector<Node *> &nodes = graph.Nodes;
  const llvm::DenseMap<const Node *, int> &index = graph.Index;
  auto indexOf = [&](const Value *v) {
    const Node *def = v ? v->definingNode() : nullptr;
    auto it = def ? index.find(def) : index.end();
    return it == index.end() ? -1 : it->second;
  };
  int previous = -1; // the last gather's node index
  for (size_t p = 0; p < order.size(); ++p) {
    const Node *g = nodes[order[p]];
    if (!g->is(OpKind::AllGather))
      continue;
    llvm::SmallVector<int, 2> unit = {order[p]};
    int cast = indexOf(g->operand(0));
    if (cast >= 0 && nodes[cast]->is(OpKind::Cast) &&
        g->operand(0)->users().size() == 1)
      unit.insert(unit.begin(), cast);
    int before = previous;
    previous = order[p];
    if (before < 0)
      continue;
    std::vector<int> rest;
    std::vector<int> at(nodes.size(), -1);
    for (int i : order)
      if (!llvm::is_contained(unit, i)) {
        at[i] = rest.size();
        rest.push_back(i);
      }
    size_t target = rest.size();
    for (const Node *user : nodes[before]->result(0)->users())
      if (index.count(user) && at[index.lookup(user)] >= 0)
        target = std::min<size_t>(target, at[index.lookup(user)]);
    for (int u : unit)
      for (const Value *v : nodes[u]->operands())
        if (int d = indexOf(v); d >= 0 && at[d] >= 0)
          target = std::max<size_t>(target, at[d] + 1);
    size_t first = llvm::find(order, unit.front()) - order.begin();
    if (target >= first) // already there: nothing to move
      continue;
    rest.insert(rest.begin() + target, unit.begin(), unit.end());
    order = std::move(rest);
  }
}

} // namespace

llvm::Expected<bool> Schedule::scheduleFunction(Function &f) const {
  DependenceGraph g(f);
  size_t count = g.Nodes.size();
  UpdateAnalysis updates(f);
  std::vector<bool> urgent(count, false);
  for (size_t k = 0; k < count; ++k) {
    const Node *n = g.Nodes[k];
    bool scalar =
        n->numResults() == 1 && n->result(0)->type().numElements() <= 1;
    urgent[k] =
        n->is(OpKind::Constant) || n->is(OpKind::Read) ||
        updates.Updates.count(n) ||
        (updates.Precompute.count(n) && (!updates.Shared.count(n) || scalar));
  }
  for (const auto &[n, grad] : updates.NeededGradient)
    if (grad->definingNode() && g.Index.count(grad->definingNode()))
      g.edge(g.Index[grad->definingNode()], g.Index[n]);
  if (Overlap)
    for (size_t k = 0; k < count; ++k)
      urgent[k] = urgent[k] || isReduction(*g.Nodes[k]);
  using Item = std::pair<int, int>; // (priority, original index): min first
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> ready;
  std::vector<int> order, deferred;
  std::vector<int> at(count, -1); // schedule positions
  int lastReduction = -1;         // the last reduction's position
  // Overlap: a reader of the reduction issued last waits for the next
  // reduction (gathers move after this, prefetchGathers).
  auto push = [&](int k) {
    int reduced = -1;
    if (Overlap)
      for (const Value *v : g.Nodes[k]->operands())
        if (v && v->definingNode() && isReduction(*v->definingNode()))
          reduced = std::max(reduced, at[g.Index[v->definingNode()]]);
    if (reduced >= 0 && reduced == lastReduction)
      deferred.push_back(k);
    else
      ready.push({urgent[k] ? 0 : 1, k});
  };
  auto release = [&] {
    for (int k : deferred)
      ready.push({urgent[k] ? 0 : 1, k});
    deferred.clear();
  };
  for (size_t i = 0; i < count; ++i)
    if (g.Preds[i] == 0)
      push(i);
  while (!ready.empty() || !deferred.empty()) {
    if (ready.empty())
      release();
    int i = ready.top().second;
    ready.pop();
    at[i] = order.size();
    order.push_back(i);
    if (Overlap && isReduction(*g.Nodes[i])) {
      lastReduction = at[i];
      release();
    }
    for (int s : g.Succ[i])
      if (--g.Preds[s] == 0)
        push(s);
  }
  if (Overlap)
    prefetchGathers(order, g);
  if (order.size() != count)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "schedule: @%s: the dependences of its state updates form a cycle "
        "(%zu of %zu nodes ordered)",
        f.name().c_str(), order.size(), count);
  bool changed = false;
  for (size_t k = 0; k < order.size(); ++k)
    changed |= order[k] != static_cast<int>(k);
  if (!changed)
    return false;
  Node *ret = f.returnNode();
  for (int i : order) {
    Node *n = g.Nodes[i];
    f.nodes().remove(n);
    f.nodes().insert(ret ? ret->getIterator() : f.nodes().end(), n);
  }
  return true;
}

llvm::Expected<bool> Schedule::run(Module &m) {
  bool changed = false;
  for (const auto &f : m.functions()) {
    auto c = scheduleFunction(*f);
    if (!c)
      return c.takeError();
    changed |= *c;
  }
  return changed;
}

llvm::Expected<std::unique_ptr<Pass>>
headroom::createSchedulePass(llvm::StringRef options) {
  auto items = parsePassOptions("schedule", options);
  if (!items)
    return items.takeError();
  bool overlap = false;
  for (const auto &[key, value] : *items) {
    if (key != "overlap" || (value != "0" && value != "1"))
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "schedule: %s=%s: expected overlap=0 or overlap=1", key.c_str(),
          value.c_str());
    overlap = value == "1";
  }
  return std::make_unique<Schedule>(overlap);
}

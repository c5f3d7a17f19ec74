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
// Requires: verified IR. Guarantees: a topological order of the same nodes;
// results are bit-identical (only the order changes). Run it last, after
// canonicalize: the memory planner plans the order it finds.
//
//===----------------------------------------------------------------------===//
#include "compiler/UpdateAnalysis.h"
#include "passes/Passes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <queue>

using namespace headroom;

namespace {

class Schedule : public Pass {
public:
  llvm::StringRef name() const override { return "schedule"; }
  llvm::Expected<bool> run(Module &m) override;

private:
  static llvm::Expected<bool> scheduleFunction(Function &f);
};

} // namespace

llvm::Expected<bool> Schedule::scheduleFunction(Function &f) {
  std::vector<Node *> nodes;
  llvm::DenseMap<const Node *, int> index;
  for (Node &n : f.nodes()) {
    if (n.info()->has(opflags::Terminator))
      continue;
    index[&n] = nodes.size();
    nodes.push_back(&n);
  }
  size_t count = nodes.size();
  std::vector<std::vector<int>> succ(count);
  std::vector<int> preds(count, 0);
  auto edge = [&](int from, int to) {
    if (from == to)
      return;
    succ[from].push_back(to);
    ++preds[to];
  };
  // State order: per slot, the last write and the reads since it.
  llvm::DenseMap<const StateSlot *, int> lastWrite;
  llvm::DenseMap<const StateSlot *, std::vector<int>> readsSinceWrite;
  for (size_t i = 0; i < count; ++i) {
    Node &n = *nodes[i];
    for (Value *v : n.operands())
      if (v && v->definingNode())
        edge(index[v->definingNode()], i);
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
        for (Node *user : nodes[r]->result(0)->users())
          if (index.count(user))
            edge(index[user], i);
      readsSinceWrite[s].clear();
      lastWrite[s] = i;
    }
  }
  UpdateAnalysis updates(f);
  std::vector<bool> urgent(count, false);
  for (size_t k = 0; k < count; ++k) {
    const Node *n = nodes[k];
    bool scalar =
        n->numResults() == 1 && n->result(0)->type().numElements() <= 1;
    urgent[k] =
        n->is(OpKind::Constant) || n->is(OpKind::Read) ||
        updates.Updates.count(n) ||
        (updates.Precompute.count(n) && (!updates.Shared.count(n) || scalar));
  }
  for (const auto &[n, g] : updates.NeededGradient)
    if (g->definingNode() && index.count(g->definingNode()))
      edge(index[g->definingNode()], index[n]);
  using Item = std::pair<int, int>; // (priority, original index): min first
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> ready;
  for (size_t i = 0; i < count; ++i)
    if (preds[i] == 0)
      ready.push({urgent[i] ? 0 : 1, i});
  std::vector<int> order;
  while (!ready.empty()) {
    int i = ready.top().second;
    ready.pop();
    order.push_back(i);
    for (int s : succ[i])
      if (--preds[s] == 0)
        ready.push({urgent[s] ? 0 : 1, s});
  }
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
    Node *n = nodes[i];
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
  if (auto e = checkNoOptions("schedule", options))
    return e;
  return std::make_unique<Schedule>();
}

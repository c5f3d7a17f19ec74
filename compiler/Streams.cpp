//===- Streams.cpp - The copy stream of a plan ----------------------------===//
#include "compiler/Streams.h"
#include "compiler/Collectives.h"

#include "llvm/ADT/DenseMap.h"

using namespace headroom;

bool headroom::runsOnCopyStream(const Node &n, const PoolAssignment &pools,
                                const Target &target) {
  return n.is(OpKind::ToHost) || n.is(OpKind::ToDevice) ||
         pools.runsOnHost(n) ||
         (isCollective(n.kind()) && target.overlapsCollective(n));
}

StreamSchedule headroom::scheduleStreams(llvm::ArrayRef<const Node *> calls,
                                         const PoolAssignment &pools,
                                         const Target &target) {
  int count = calls.size();
  StreamSchedule s;
  s.OnCopy.assign(count, false);
  s.WaitFor.assign(count, -1);
  s.JoinedAt.assign(count, count);
  llvm::DenseMap<const Node *, int> position;
  for (int p = 0; p < count; ++p) {
    position[calls[p]] = p;
    s.OnCopy[p] = runsOnCopyStream(*calls[p], pools, target);
  }
  auto wait = [&](int q, int k) { s.WaitFor[q] = std::max(s.WaitFor[q], k); };
  // Data: a compute call waits for the copy calls that made its operands,
  // for those that read (copied) a slot it writes, and for those that wrote
  // a slot it reads or writes (a collective on state).
  llvm::DenseMap<const StateSlot *, int> copiedSlot; // last copy call reading
  llvm::DenseMap<const StateSlot *, int> copyWrote;  // last copy call writing
  int lastCollective = -1; // the last collective on the copy stream
  for (int p = 0; p < count; ++p) {
    const Node &n = *calls[p];
    if (s.OnCopy[p]) {
      for (const Value *v : n.operands())
        if (v && v->definingNode() && v->definingNode()->is(OpKind::Read))
          copiedSlot[v->definingNode()->state()] = p;
      for (const StateSlot *slot : n.states()) {
        copiedSlot[slot] = p;
        if (n.info()->has(opflags::WritesState))
          copyWrote[slot] = p;
      }
      if (isCollective(n.kind()))
        lastCollective = p;
      continue;
    }
    for (const StateSlot *slot : n.states())
      if (auto it = copyWrote.find(slot); it != copyWrote.end())
        wait(p, it->second);
    // A collective in order waits for those on the copy stream: NCCL gives
    // no progress guarantee to two collectives of one communicator running
    // at once, so they run one at a time, in the order issued.
    if (isCollective(n.kind()) && lastCollective >= 0)
      wait(p, lastCollective);
    for (const Value *v : n.operands()) {
      const Node *def = v ? v->definingNode() : nullptr;
      auto at = def ? position.find(def) : position.end();
      if (at != position.end() && s.OnCopy[at->second])
        wait(p, at->second);
    }
    if (n.info()->has(opflags::WritesState))
      for (const StateSlot *slot : n.states())
        if (auto it = copiedSlot.find(slot); it != copiedSlot.end())
          wait(p, it->second);
  }
  // Groups of consecutive copy calls; group j is joined at the first
  // compute call after group j + 1.
  std::vector<std::pair<int, int>> groups; // [first, last]
  for (int p = 0; p < count; ++p)
    if (s.OnCopy[p]) {
      if (!groups.empty() && groups.back().second == p - 1)
        groups.back().second = p;
      else
        groups.push_back({p, p});
    }
  for (size_t j = 0; j + 1 < groups.size(); ++j)
    for (int q = groups[j + 1].second + 1; q < count; ++q)
      if (!s.OnCopy[q]) {
        wait(q, groups[j].second);
        break;
      }
  // Where each copy call is joined: the first compute call waiting for it
  // or a later one (the copy stream runs in order).
  int waited = -1;
  std::vector<int> joins(count, count);
  for (int q = 0; q < count; ++q) {
    if (s.OnCopy[q] || s.WaitFor[q] <= waited)
      continue;
    for (int k = waited + 1; k <= s.WaitFor[q]; ++k)
      joins[k] = q;
    waited = s.WaitFor[q];
  }
  for (int k = 0; k < count; ++k)
    if (s.OnCopy[k])
      s.JoinedAt[k] = joins[k];
  return s;
}

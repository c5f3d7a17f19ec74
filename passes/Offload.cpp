//===- Offload.cpp - State in the pinned host pool ------------------------===//
//
// `offload{state=optimizer,accumulators,parameters,activations}` moves
// state (and saved activations) to the plan's host pool and inserts the
// transfers the pool rule (compiler/Pools.h) then needs:
//   accumulators  every gradient accumulator (`grad` slots): each
//                 micro-step's gradient goes to the host as soon as it is
//                 complete (ToHost) and is added there; the last micro-step's
//                 update reads the sum back (ToDevice), per parameter.
//   optimizer     every optimizer slot (moments, momentum buffers, AdamW's
//                 step) and the parameters an update writes with them (the
//                 f32 master weights under --precision bf16): the update runs
//                 on the host, its gradient copied there; what the forward
//                 reads of a master weight (its Cast to bf16) is made on the
//                 host and copied to the device where it is used.
//   parameters    every parameter (and the state its update writes): the
//                 weights stream from the host, copied to the device right
//                 before each reader (the forward's, a recomputation's, the
//                 backward's), and are updated on the host from their
//                 gradient, copied there as soon as it is complete.
//   activations   every value the forward makes and the backward reads
//                 (min_bytes= or more, default 1 MiB): to the host as soon
//                 as it is made, back before its first reader after the
//                 loss. With recomputation, what is saved is the block
//                 inputs, and those are what moves.
// A node runs where its slots are, on the host when all its operands are
// there, else on the device. A device value a host node reads goes to the
// host once, before its first such reader; a host value goes to the device
// once per device reader, right before it (then one transfer earlier: see
// prefetch), so a streamed weight is on the device only while it is used.
// A widening Cast that only host
// nodes read runs on the host, so the narrow value crosses (a bf16
// gradient: half the bytes). Host nodes run the device kernels' code
// compiled for the host, so offloading changes no result bit.
//
// Requires: the optimizer and accumulate passes have run (offload moves
// their slots), before schedule, which orders the transfers with the rest.
// Guarantees: the module verifies (every operand where its reader runs).
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "compiler/Pools.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"

using namespace headroom;

namespace {

struct OffloadOptions {
  bool Optimizer = false, Accumulators = false, Parameters = false,
       Activations = false;
  /// Saved activations smaller than this stay on the device.
  uint64_t MinBytes = 1 << 20;
};

class Offload : public Pass {
public:
  explicit Offload(OffloadOptions o) : O(o) {}
  llvm::StringRef name() const override { return "offload"; }
  llvm::Expected<bool> run(Module &m) override;

private:
  bool moveSlots(Module &m) const;
  bool offloadActivations(Function &f) const;
  static void insertTransfers(Function &f);
  static void prefetch(Function &f);
  OffloadOptions O;
};

} // namespace

/// Marks the slots to offload; whether any moved.
bool Offload::moveSlots(Module &m) const {
  bool moved = false;
  auto move = [&](StateSlot *s) {
    moved |= !s->onHost();
    s->setOnHost(true);
  };
  for (const auto &s : m.states())
    if ((O.Accumulators && s->kind() == StateKind::Gradient) ||
        (O.Optimizer && s->kind() == StateKind::Optimizer) ||
        (O.Parameters && s->kind() == StateKind::Param))
      move(s.get());
  // An update runs where its slots are: the parameters updated with
  // optimizer state follow it, and the state of offloaded parameters.
  if (O.Optimizer || O.Parameters)
    for (const auto &f : m.functions())
      for (const Node &n : f->nodes())
        if (n.info()->has(opflags::WritesState) && touchesHostSlot(n))
          for (StateSlot *s : n.states())
            move(s);
  return moved;
}

/// A Cast that widens and that only nodes on host slots read: it runs on
/// the host, so its narrow operand crosses.
static bool hostCast(const Node &n) {
  return n.is(OpKind::Cast) && !n.result(0)->users().empty() &&
         n.result(0)->type().sizeInBytes() >
             n.operand(0)->type().sizeInBytes() &&
         llvm::all_of(n.result(0)->users(),
                      [](const Node *u) { return touchesHostSlot(*u); });
}

/// Gives every node its operands in the pool it runs in.
void Offload::insertTransfers(Function &f) {
  llvm::DenseSet<const Value *> host;
  llvm::DenseMap<Value *, Value *> copies[2]; // [1]: to the host, per value
  std::vector<Node *> nodes;
  for (Node &n : f.nodes())
    nodes.push_back(&n);
  for (Node *n : nodes) {
    if (n->is(OpKind::Constant))
      continue;
    bool transfer = n->is(OpKind::ToHost) || n->is(OpKind::ToDevice);
    bool terminator = n->info()->has(opflags::Terminator);
    bool onHost = n->is(OpKind::ToHost) ||
                  (!transfer && !terminator &&
                   (hostCast(*n) || runsOnHostByRule(*n, [&](const Value *v) {
                      return host.count(v) != 0;
                    })));
    bool operandsOnHost = n->is(OpKind::ToDevice) || (onHost && !transfer);
    for (unsigned i = 0; !transfer && i < n->operands().size(); ++i) {
      Value *v = n->operand(i);
      if (!v || isConstantValue(v) || bool(host.count(v)) == operandsOnHost)
        continue;
      // A value goes to the host once; to the device once per reader,
      // right before it, so a weight streamed from the host is on the
      // device only while it is used.
      Value *fresh = nullptr;
      Value *&copy = operandsOnHost ? copies[1][v] : fresh;
      if (!copy) {
        Builder b(f, n);
        b.setLoc(v->definingNode() ? v->definingNode()->loc() : n->loc());
        copy = b.apply(operandsOnHost ? "ToHost" : "ToDevice", {v});
        if (operandsOnHost)
          host.insert(copy);
      }
      n->setOperand(i, copy);
    }
    if (onHost)
      for (Value *r : n->results())
        host.insert(r);
  }
}

/// Every value the forward makes (before the loss) and the backward reads,
/// of MinBytes or more, goes to the host as soon as it is made and comes
/// back before its first reader after the loss; the forward's readers keep
/// the device value, which dies after the last of them.
bool Offload::offloadActivations(Function &f) const {
  const Node *loss = f.lossNode();
  if (!loss)
    return false;
  llvm::DenseMap<const Node *, int> position;
  for (const Node &n : f.nodes())
    position[&n] = position.size();
  int lossAt = position.lookup(loss);
  std::vector<Value *> saved;
  for (Node &n : f.nodes()) {
    if (position[&n] >= lossAt)
      break;
    if (n.is(OpKind::Read) || n.is(OpKind::Constant) || n.is(OpKind::ToHost) ||
        n.is(OpKind::ToDevice) || touchesHostSlot(n))
      continue;
    for (Value *r : n.results()) {
      if (!r || r->type().sizeInBytes() < O.MinBytes)
        continue;
      bool backward = false, returned = false;
      for (const Node *u : r->users()) {
        backward |= position.lookup(u) > lossAt;
        returned |= u->info()->has(opflags::Terminator);
      }
      if (backward && !returned)
        saved.push_back(r);
    }
  }
  for (Value *v : saved) {
    Node *def = v->definingNode();
    Builder after(f, &*std::next(Function::NodeList::iterator(def)));
    after.setLoc(def->loc());
    Value *h = after.apply("ToHost", {v});
    std::vector<Node *> readers;
    for (Node *u : v->users())
      if (position.lookup(u) > lossAt && !llvm::is_contained(readers, u))
        readers.push_back(u);
    llvm::sort(readers, [&](const Node *a, const Node *b) {
      return position.lookup(a) < position.lookup(b);
    });
    Builder back(f, readers.front());
    back.setLoc(def->loc());
    Value *d = back.apply("ToDevice", {h});
    for (Node *u : readers)
      for (unsigned i = 0; i < u->operands().size(); ++i)
        if (u->operand(i) == v)
          u->setOperand(i, d);
  }
  return !saved.empty();
}

/// Each copy to the device moves up to before the first reader of the copy
/// before it (when its operand is made by then): it runs on the copy stream
/// while that reader computes, one transfer ahead, and its buffer is in
/// flight that long (planned).
void Offload::prefetch(Function &f) {
  llvm::DenseMap<const Node *, int> position;
  std::vector<Node *> loads;
  for (Node &n : f.nodes()) {
    position[&n] = position.size();
    if (n.is(OpKind::ToDevice))
      loads.push_back(&n);
  }
  auto firstReader = [&](const Node *n) -> Node * {
    Node *first = nullptr;
    for (Node *u : n->result(0)->users())
      if (!first || position.lookup(u) < position.lookup(first))
        first = u;
    return first;
  };
  for (size_t i = 1; i < loads.size(); ++i) {
    Node *load = loads[i];
    Node *target = firstReader(loads[i - 1]);
    const Node *def = load->operand(0)->definingNode();
    if (!target || target->info()->has(opflags::Terminator) ||
        position.lookup(target) >= position.lookup(load) ||
        (def && position.lookup(def) >= position.lookup(target)))
      continue;
    f.nodes().remove(load);
    f.nodes().insert(target->getIterator(), load);
    // Positions between are off by one now; what the next load compares
    // (its own, its reader's predecessor) keeps its order.
    position[load] = position.lookup(target) - 1;
  }
}

llvm::Expected<bool> Offload::run(Module &m) {
  bool changed = moveSlots(m);
  for (const auto &f : m.functions()) {
    if (O.Activations)
      changed |= offloadActivations(*f);
    insertTransfers(*f);
    prefetch(*f);
  }
  return changed;
}

llvm::Expected<std::unique_ptr<Pass>>
headroom::createOffloadPass(llvm::StringRef options) {
  auto items = parsePassOptions("offload", options);
  if (!items)
    return items.takeError();
  OffloadOptions o;
  for (const auto &[key, value] : *items) {
    if (key == "min_bytes") {
      if (llvm::StringRef(value).getAsInteger(10, o.MinBytes))
        return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "offload: min_bytes=%s: expected a "
                                       "number of bytes",
                                       value.c_str());
      continue;
    }
    if (key != "state")
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "offload: %s=%s: expected state=optimizer,accumulators,parameters,"
          "activations (any of them) and min_bytes=N",
          key.c_str(), value.c_str());
    llvm::SmallVector<llvm::StringRef, 2> parts;
    llvm::StringRef(value).split(parts, ',', -1, false);
    for (llvm::StringRef p : parts) {
      if (p == "optimizer")
        o.Optimizer = true;
      else if (p == "parameters")
        o.Parameters = true;
      else if (p == "activations")
        o.Activations = true;
      else if (p == "accumulators")
        o.Accumulators = true;
      else
        return llvm::createStringError(
            llvm::inconvertibleErrorCode(),
            "offload: state=%s: '%s' is not offloadable state "
            "(optimizer, accumulators, parameters, activations)",
            value.c_str(), p.str().c_str());
    }
  }
  if (!o.Optimizer && !o.Accumulators && !o.Parameters && !o.Activations)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "offload: expected state=optimizer,accumulators,parameters,"
        "activations (any of them)");
  return std::make_unique<Offload>(o);
}

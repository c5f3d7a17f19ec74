//===- DataParallel.cpp - One step on N ranks, ZeRO stages 0-3 -----------===//
//
// `data-parallel{ranks=N zero=K}` makes the step one rank's part of a
// data-parallel step: every rank runs it on its own share of the batch, and
// the collectives this pass inserts (compiler/Collectives.h) make the ranks
// agree. What each stage keeps where (the ZeRO paper's stages, Rajbhandari
// et al. 2020; DeepSpeed's and FSDP's terms):
//   zero=0  every rank holds every slot (PyTorch DDP). Each gradient is
//           averaged over the ranks (AllReduce, op = mean) as soon as it is
//           complete; with accumulation, the accumulator is averaged in place
//           (AllReduceState) before the update reads it, once per step.
//   zero=1  each parameter's master slot and the optimizer state its update
//           writes are sharded: the slot holds this rank's 1/N of the
//           flattened tensor (StateSlot::shardOf). The update runs on the
//           shard, from the gradient's shard (ReduceScatter, op = mean: as
//           soon as it is complete, or once per step from a whole
//           accumulator), and the whole weight the model reads is a replica
//           slot (kind replica, in the type the model reads it in: bf16 under
//           mixed precision), gathered after each update (AllGatherState).
//   zero=2  zero=1, and the accumulators are sharded too: each micro-step's
//           gradient is reduce-scattered and added to the shard.
//   zero=3  zero=2, and no replica: parameters and frozen weights exist only
//           as shards; each reader gets the whole from an AllGather placed
//           before its first reader in the forward and again in the backward
//           (recomputation's readers included), freed after its last.
// On every stage: the returned loss is averaged over the ranks (what a user
// logs), global-norm clipping sums the squares of every rank's shard
// (AllReduce, op = sum, of the norm's total, tagged `grad_norm_sq` by the
// optimizer pass), and a buffer the model updates (BatchNorm's running
// statistics) takes rank 0's new value (Broadcast), as DDP's
// broadcast_buffers does: batch statistics stay per rank.
//
// Sharding an update changes the types of everything between the shards
// and the slots it writes ([s] instead of the weight's shape); only
// elementwise work and whole-tensor sums may lie between (SGD, momentum,
// AdamW, LOMO and the norm do). AdaLomo's factored moments and 8-bit
// moments' blocks need more than a flat shard and are refused by name.
//
// Requires: the optimizer pass has run; recompute and rematerialize too (the
// clones they make read weights, and get gathers). Runs before offload
// (which may then move the shards) and schedule.
// Guarantees: the module verifies; with ranks=1 it is left alone.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "compiler/Collectives.h"
#include "compiler/Protocol.h"
#include "compiler/Verifier.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"

using namespace headroom;

namespace {

struct DataParallelOptions {
  unsigned Ranks = 1;
  unsigned Zero = 0;
};

/// A use of a weight by the model (not by its update): operand `Index` of
/// `User`, which wants the whole weight in type `Type`.
struct WeightUse {
  Node *User;
  unsigned Index;
  DType Type;
};

class DataParallel : public Pass {
public:
  explicit DataParallel(DataParallelOptions o) : O(o) {}
  llvm::StringRef name() const override { return "data-parallel"; }
  llvm::Expected<bool> run(Module &m) override;

private:
  llvm::Error checkShardable(const Module &m) const;
  void chooseShards(Module &m);
  llvm::Error rewrite(Function &f);
  void classifyReads(Function &f);
  void reduceGradients(Function &f);
  void gatherWeights(Function &f);
  llvm::Error propagateShardTypes(Function &f);
  void gatherReplicas(Function &f);
  void agreeOnScalars(Function &f);
  Node *after(Node *n) { return &*std::next(n->getIterator()); }

  DataParallelOptions O;
  /// Sharded slots, with the type of the whole.
  llvm::MapVector<StateSlot *, TensorType> Shards;
  /// Each sharded parameter's replica (zero 1 and 2).
  llvm::DenseMap<StateSlot *, StateSlot *> Replicas;
  /// Per function: the model's uses of each sharded weight.
  llvm::MapVector<StateSlot *, std::vector<WeightUse>> Uses;
};

} // namespace

/// Updates whose arithmetic is elementwise in the parameter (what a flat
/// shard can run).
static bool isShardableUpdate(const Node &n) {
  return n.is(OpKind::SgdUpdate) || n.is(OpKind::MomentumUpdate) ||
         n.is(OpKind::AdamWUpdate) ||
         (n.is(OpKind::Assign) && n.state()->kind() == StateKind::Param);
}

static llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s",
                                 msg.str().c_str());
}

llvm::Error DataParallel::checkShardable(const Module &m) const {
  if (O.Zero == 0)
    return llvm::Error::success();
  for (const auto &s : m.states())
    if (llvm::StringRef(s->name()).endswith(".exp_avg_sq_row"))
      return fail("data-parallel: zero=" + llvm::Twine(O.Zero) +
                  " shards optimizer state, and adalomo's factored second "
                  "moment (@" +
                  s->name() +
                  ") is made of row and column means of the whole weight; "
                  "use zero=0 with adalomo");
  for (const auto &f : m.functions())
    for (const Node &n : f->nodes()) {
      if (n.is(OpKind::AdamW8bitUpdate))
        return fail("data-parallel: zero=" + llvm::Twine(O.Zero) +
                    " shards optimizer state, and 8-bit moments (@" +
                    n.state()->name() +
                    ") are quantized in blocks that a flat shard would cut; "
                    "use zero=0 with --optimizer-state int8");
      if (n.is(OpKind::ParamGrad))
        return fail("data-parallel: zero=" + llvm::Twine(O.Zero) +
                    " shards what an optimizer updates, and this step has "
                    "no optimizer (it reports gradients); use zero=0");
    }
  return llvm::Error::success();
}

/// Zero >= 1: every updated parameter and the optimizer slots its update
/// writes; zero >= 2 also its accumulator; zero 3 also frozen weights.
void DataParallel::chooseShards(Module &m) {
  if (O.Zero == 0)
    return;
  auto shard = [&](StateSlot *s) {
    if (!Shards.count(s))
      Shards.insert({s, s->type()});
  };
  for (const auto &f : m.functions())
    for (const Node &n : f->nodes())
      if (isShardableUpdate(n))
        for (StateSlot *s : n.states())
          if (s->type().numElements() == n.state()->type().numElements())
            shard(s);
  for (const auto &s : m.states())
    if ((O.Zero >= 2 && s->kind() == StateKind::Gradient) ||
        (O.Zero == 3 && s->kind() == StateKind::Frozen))
      shard(s.get());
}

/// The model's uses of each sharded weight in `f`: the users of its Reads
/// that are not its update's arithmetic (those keep the shard). A use
/// through a Cast counts as a use in the Cast's type (mixed precision reads
/// bf16 copies of f32 masters), so gathering moves the narrow type.
void DataParallel::classifyReads(Function &f) {
  Uses.clear();
  // Nodes on the update side: elementwise work whose every user is on the
  // update side or writes a sharded slot (a greatest fixed point).
  llvm::DenseSet<const Node *> update;
  for (const Node &n : f.nodes())
    if (n.info()->has(opflags::Elementwise) || n.is(OpKind::Cast))
      update.insert(&n);
  auto writesShard = [&](const Node *n) {
    return n->info()->has(opflags::WritesState) && Shards.count(n->state());
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (const Node &n : f.nodes()) {
      if (!update.count(&n))
        continue;
      for (Value *r : n.results())
        for (const Node *u : r->users())
          if (!update.count(u) && !writesShard(u)) {
            update.erase(&n);
            changed = true;
            break;
          }
    }
  }
  for (Node &n : f.nodes()) {
    if (!n.is(OpKind::Read) || !Shards.count(n.state()) ||
        n.state()->kind() == StateKind::Gradient)
      continue;
    StateSlot *s = n.state();
    DType own = s->type().dtype();
    for (Node *u : std::vector<Node *>(n.result(0)->users().begin(),
                                       n.result(0)->users().end())) {
      if (update.count(u) || writesShard(u))
        continue;
      bool cast = u->is(OpKind::Cast) && u->numResults() == 1;
      if (!cast) {
        for (unsigned i = 0; i < u->numOperands(); ++i)
          if (u->operand(i) == n.result(0))
            Uses[s].push_back({u, i, own});
        continue;
      }
      DType to = u->result(0)->type().dtype();
      for (Node *w : u->result(0)->users())
        for (unsigned i = 0; i < w->numOperands(); ++i)
          if (w->operand(i) == u->result(0))
            Uses[s].push_back({w, i, to});
    }
  }
}

/// Averages each gradient over the ranks where it is complete, or each
/// accumulator before its update reads it.
void DataParallel::reduceGradients(Function &f) {
  AttributeMap mean;
  mean["op"] = Attribute::getString("mean");
  std::vector<Value *> grads;
  for (Node &n : f.nodes())
    for (Value *g : taggedGradients(n))
      grads.push_back(g);
  auto reduce = [&](Builder &b, Value *v) {
    return O.Zero == 0 ? b.apply("AllReduce", {v}, mean)
                       : b.createValue("ReduceScatter", {v},
                                       shardType(v->type(), O.Ranks), mean);
  };
  for (Value *g : grads) {
    bool accumulated = llvm::any_of(
        g->users(), [](const Node *u) { return u->is(OpKind::Accumulate); });
    // Whole accumulators (zero 0 and 1) are reduced once, when read.
    if (accumulated && O.Zero < 2)
      continue;
    Node *def = g->definingNode();
    // A gradient widened from bf16/f16 (mixed precision's master weights)
    // is reduced before it is widened: half the bytes cross, as DDP and
    // DeepSpeed send the model's type.
    if (def->is(OpKind::Cast) && def->operand(0)->users().size() == 1 &&
        isFloat(def->operand(0)->type().dtype()) &&
        def->operand(0)->type().sizeInBytes() < g->type().sizeInBytes()) {
      Builder b(f, def);
      b.setLoc(def->loc());
      def->setOperand(0, reduce(b, def->operand(0)));
      continue;
    }
    Builder b(f, after(def));
    b.setLoc(def->loc());
    Value *r = reduce(b, g);
    g->replaceAllUsesWith(r);
    r->definingNode()->setOperand(0, g);
  }
  if (O.Zero >= 2)
    return;
  llvm::DenseSet<const StateSlot *> reduced;
  for (Node &n : llvm::make_early_inc_range(f.nodes())) {
    if (!n.is(OpKind::Read) || n.state()->kind() != StateKind::Gradient)
      continue;
    if (O.Zero == 0) {
      if (reduced.insert(n.state()).second)
        Builder(f, &n).create("AllReduceState", {}, {}, mean, n.state());
      continue;
    }
    Value *whole = n.result(0);
    Builder b(f, after(&n));
    Value *r = b.createValue("ReduceScatter", {whole},
                             shardType(whole->type(), O.Ranks), mean);
    whole->replaceAllUsesWith(r);
    r->definingNode()->setOperand(0, whole);
  }
}

/// Gives the model's readers of each sharded weight the whole: a Read of
/// its replica (zero 1 and 2), or an AllGather of the shard before the
/// first reader of each phase, forward and backward (zero 3).
void DataParallel::gatherWeights(Function &f) {
  llvm::DenseMap<const Node *, int> position;
  int at = 0;
  for (const Node &n : f.nodes())
    position[&n] = at++;
  int loss = INT32_MAX;
  if (const Node *l = f.lossNode())
    loss = position.lookup(l);
  for (auto &[slot, uses] : Uses) {
    const TensorType &whole = Shards.lookup(slot);
    if (StateSlot *replica = Replicas.lookup(slot)) {
      for (const WeightUse &u : uses) {
        Value *v = Builder(f, u.User).read(replica);
        if (v->type().dtype() != u.Type) {
          AttributeMap to;
          to["to"] = Attribute::getType(u.Type);
          v = Builder(f, u.User).apply("Cast", {v}, to);
        }
        u.User->setOperand(u.Index, v);
      }
      continue;
    }
    // One gather per (phase, type), before the phase's first reader.
    llvm::MapVector<std::pair<int, int>, std::vector<const WeightUse *>> groups;
    for (const WeightUse &u : uses)
      groups[{position.lookup(u.User) > loss, int(u.Type)}].push_back(&u);
    for (auto &[key, members] : groups) {
      Node *first = members.front()->User;
      for (const WeightUse *u : members)
        if (position.lookup(u->User) < position.lookup(first))
          first = u->User;
      Builder b(f, first);
      b.setLoc(first->loc());
      Value *shard = b.read(slot);
      DType type = members.front()->Type;
      if (type != slot->type().dtype()) {
        AttributeMap to;
        to["to"] = Attribute::getType(type);
        shard = b.apply("Cast", {shard}, to);
      }
      Value *g = b.createValue("AllGather", {shard}, whole.withDType(type));
      for (const WeightUse *u : members)
        u->User->setOperand(u->Index, g);
    }
  }
}

/// Retypes what lies between the shards and the slots they update: values
/// of the weight's shape become [s]. Only elementwise work and whole sums
/// may lie there.
llvm::Error DataParallel::propagateShardTypes(Function &f) {
  llvm::DenseSet<const Value *> sharded;
  for (Node &n : f.nodes()) {
    if (n.is(OpKind::Read) && Shards.count(n.state())) {
      n.result(0)->setType(n.state()->type());
      sharded.insert(n.result(0));
      continue;
    }
    if (n.is(OpKind::ReduceScatter)) {
      sharded.insert(n.result(0));
      continue;
    }
    bool touched = llvm::any_of(
        n.operands(), [&](const Value *v) { return v && sharded.count(v); });
    if (!touched || n.info()->has(opflags::WritesState) ||
        n.is(OpKind::AllGather))
      continue;
    bool wholeSum = (n.is(OpKind::ReduceSum) || n.is(OpKind::ReduceMean)) &&
                    n.numOperands() == 1 && !n.attr("axes") &&
                    n.intAttr("keepdims", 1) == 0;
    if (wholeSum)
      continue;
    if (n.is(OpKind::Cast)) {
      n.result(0)->setType(
          n.operand(0)->type().withDType(n.result(0)->type().dtype()));
      sharded.insert(n.result(0));
      continue;
    }
    if (!n.info()->has(opflags::Elementwise) || n.numResults() != 1)
      return fail("data-parallel: zero=" + llvm::Twine(O.Zero) + ": in @" +
                  f.name() + ", " + describeNode(n) +
                  " works on a sharded tensor but is neither elementwise "
                  "nor a sum of every element, so it cannot run on a shard");
    llvm::SmallVector<int64_t, 4> shape;
    for (const Value *v : n.operands()) {
      if (!v)
        continue;
      auto b = broadcastShapes(shape, v->type().shape());
      if (!b)
        return fail("data-parallel: zero=" + llvm::Twine(O.Zero) + ": in @" +
                    f.name() + ", " + describeNode(n) +
                    " combines a shard with " + v->type().str() +
                    ", which is not a scalar");
      shape.assign(b->begin(), b->end());
    }
    n.result(0)->setType(TensorType(n.result(0)->type().dtype(), shape));
    sharded.insert(n.result(0));
  }
  return llvm::Error::success();
}

/// Zero 1 and 2: after the last write of a sharded parameter, its replica
/// is gathered from every rank's updated shard.
void DataParallel::gatherReplicas(Function &f) {
  llvm::MapVector<StateSlot *, Node *> lastWrite;
  for (Node &n : f.nodes())
    if (n.info()->has(opflags::WritesState) && Replicas.count(n.state()))
      lastWrite[n.state()] = &n;
  for (auto &[slot, write] : lastWrite) {
    StateSlot *replica = Replicas.lookup(slot);
    Builder b(f, after(write));
    b.setLoc(write->loc());
    Value *shard = b.read(slot);
    if (replica->type().dtype() != slot->type().dtype()) {
      AttributeMap to;
      to["to"] = Attribute::getType(replica->type().dtype());
      shard = b.apply("Cast", {shard}, to);
    }
    b.create("AllGatherState", {shard}, {}, {}, replica);
  }
}

/// What every rank must agree on: the returned loss (averaged), the norm's
/// sum of squares over shards, and the buffers the model updates (rank 0's).
void DataParallel::agreeOnScalars(Function &f) {
  for (Node &n : llvm::make_early_inc_range(f.nodes())) {
    if (O.Zero >= 1 && n.attr("grad_norm_sq")) {
      AttributeMap sum;
      sum["op"] = Attribute::getString("sum");
      Value *total = n.result(0);
      Value *r = Builder(f, after(&n)).apply("AllReduce", {total}, sum);
      total->replaceAllUsesWith(r);
      r->definingNode()->setOperand(0, total);
    }
    if (n.is(OpKind::Assign) && n.state()->kind() == StateKind::Buffer) {
      AttributeMap root;
      root["root"] = Attribute::getInt(0);
      Builder b(f, &n);
      b.setLoc(n.loc());
      n.setOperand(0, b.apply("Broadcast", {n.operand(0)}, root));
    }
  }
  if (f.returnValues().empty())
    return;
  Value *loss = f.loss();
  if (!loss->definingNode() || loss->type() != TensorType(DType::F32, {}))
    return;
  AttributeMap mean;
  mean["op"] = Attribute::getString("mean");
  Builder b(f, after(loss->definingNode()));
  b.setLoc(loss->definingNode()->loc());
  f.returnNode()->setOperand(0, b.apply("AllReduce", {loss}, mean));
}

llvm::Error DataParallel::rewrite(Function &f) {
  classifyReads(f);
  reduceGradients(f);
  gatherWeights(f);
  if (auto e = propagateShardTypes(f))
    return e;
  gatherReplicas(f);
  agreeOnScalars(f);
  // The Reads (and their Casts) whose readers all moved to the replica or
  // a gather; backwards, so a Read's Cast goes first.
  std::vector<Node *> dead;
  for (Node &n : f.nodes())
    dead.push_back(&n);
  for (Node *n : llvm::reverse(dead))
    if ((n->is(OpKind::Read) || n->is(OpKind::Cast)) &&
        !n->result(0)->hasUses())
      n->erase();
  return llvm::Error::success();
}

llvm::Expected<bool> DataParallel::run(Module &m) {
  if (O.Ranks == 1)
    return false;
  if (m.ranks() != 1)
    return fail("data-parallel: the module already runs on " +
                llvm::Twine(m.ranks()) + " ranks");
  if (auto e = checkShardable(m))
    return e;
  chooseShards(m);
  // Zero 1 and 2 keep the whole of each sharded weight the model reads in
  // a replica, of the type the model reads it in.
  if (O.Zero == 1 || O.Zero == 2) {
    for (const auto &f : m.functions()) {
      classifyReads(*f);
      for (auto &[slot, uses] : Uses) {
        DType t = uses.front().Type;
        bool one =
            llvm::all_of(uses, [&](const WeightUse &u) { return u.Type == t; });
        if (!Replicas.count(slot)) {
          StateSlot *r =
              m.addState(slot->name() + ".replica",
                         slot->type().withDType(one ? t : slot->type().dtype()),
                         StateKind::Replica);
          r->setReplicaOf(slot);
          Replicas[slot] = r;
        } else if (!one || Replicas[slot]->type().dtype() != t) {
          Replicas[slot]->setType(slot->type());
        }
      }
    }
  }
  // Classification saw the whole types; each function is rewritten with
  // the shards' types from here on.
  std::vector<std::pair<StateSlot *, TensorType>> wholes(Shards.begin(),
                                                         Shards.end());
  m.setRanks(O.Ranks);
  for (auto &[slot, whole] : wholes) {
    slot->setShardOf(whole);
    slot->setType(shardType(whole, O.Ranks));
  }
  for (const auto &f : m.functions()) {
    // classifyReads looks at structure only: the shards' new types do not
    // change who uses what.
    if (auto e = rewrite(*f))
      return e;
  }
  return true;
}

llvm::Expected<std::unique_ptr<Pass>>
headroom::createDataParallelPass(llvm::StringRef options) {
  auto items = parsePassOptions("data-parallel", options);
  if (!items)
    return items.takeError();
  DataParallelOptions o;
  for (const auto &[key, value] : *items) {
    unsigned n = 0;
    bool bad = llvm::StringRef(value).getAsInteger(10, n);
    if (key == "ranks" && !bad && n >= 1 && n <= (1u << 20)) {
      o.Ranks = n;
      continue;
    }
    if (key == "zero" && !bad && n <= 3) {
      o.Zero = n;
      continue;
    }
    return fail("data-parallel: " + key + "=" + value +
                ": expected ranks=N (1 or more) and zero=0, 1, 2 or 3");
  }
  return std::make_unique<DataParallel>(o);
}

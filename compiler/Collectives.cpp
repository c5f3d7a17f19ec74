//===- Collectives.cpp - What data parallelism's ops mean ----------------===//
#include "compiler/Collectives.h"

using namespace headroom;

static bool shardOf(const TensorType &shard, int64_t wholeElements,
                    unsigned ranks) {
  return shard.shape().size() == 1 &&
         shard.shape()[0] == shardElements(wholeElements, ranks);
}

std::string headroom::collectiveError(const Node &n, unsigned ranks) {
  if (n.is(OpKind::AllReduce) || n.is(OpKind::ReduceScatter) ||
      n.is(OpKind::AllReduceState)) {
    std::string op = n.stringAttr("op", "");
    if (op != "sum" && op != "mean")
      return "needs op = \"sum\" or \"mean\"";
    const TensorType &t =
        n.numOperands() ? n.operand(0)->type() : n.state()->type();
    if (!isFloat(t.dtype()))
      return "reduces " + t.str() + " (floats only)";
  }
  if (n.is(OpKind::ReduceScatter)) {
    TensorType want = shardType(n.operand(0)->type(), ranks);
    if (n.result(0)->type() != want)
      return "result " + n.result(0)->type().str() + " should be " +
             want.str() + ", this rank's shard of " + std::to_string(ranks);
  }
  if (n.is(OpKind::AllGather)) {
    const TensorType &whole = n.result(0)->type();
    if (whole.dtype() != n.operand(0)->type().dtype() ||
        !shardOf(n.operand(0)->type(), whole.numElements(), ranks))
      return "gathers " + n.operand(0)->type().str() + " into " + whole.str() +
             ": not a shard of it over " + std::to_string(ranks) + " ranks";
  }
  if (n.is(OpKind::AllGatherState)) {
    const StateSlot &s = *n.state();
    if (s.kind() != StateKind::Replica)
      return "writes @" + s.name() + ", which is not a replica";
    if (n.operand(0)->type().dtype() != s.type().dtype() ||
        !shardOf(n.operand(0)->type(), s.type().numElements(), ranks))
      return "gathers " + n.operand(0)->type().str() + " into @" + s.name() +
             " of type " + s.type().str() + ": not a shard of it over " +
             std::to_string(ranks) + " ranks";
  }
  if (n.is(OpKind::Broadcast)) {
    int64_t root = n.intAttr("root", -1);
    if (root < 0 || root >= int64_t(ranks))
      return "root " + std::to_string(root) + " is not a rank (0.." +
             std::to_string(ranks - 1) + ")";
  }
  return "";
}

std::string headroom::shardedSlotError(const StateSlot &s, unsigned ranks) {
  if (const TensorType *whole = s.shardOf()) {
    if (s.type() != shardType(*whole, ranks))
      return "state @" + s.name() + " is a shard of " + whole->str() +
             " over " + std::to_string(ranks) + " ranks, so of type " +
             shardType(*whole, ranks).str() + ", not " + s.type().str();
    if (s.kind() == StateKind::Replica)
      return "state @" + s.name() + " is a replica and a shard";
  }
  if ((s.kind() == StateKind::Replica) != (s.replicaOf() != nullptr))
    return "state @" + s.name() +
           " must be a replica exactly when it names the shard it is "
           "gathered from";
  if (const StateSlot *src = s.replicaOf()) {
    if (!src->shardOf() || src->shardOf()->shape() != s.type().shape())
      return "replica @" + s.name() + " of type " + s.type().str() +
             " is not gathered from a shard of its shape (@" + src->name() +
             ")";
  }
  return "";
}

uint64_t headroom::collectiveBytes(const Node &n) {
  switch (n.kind()) {
  case OpKind::AllReduce:
    return 2 * n.operand(0)->type().sizeInBytes();
  case OpKind::ReduceScatter:
  case OpKind::Broadcast:
    return n.operand(0)->type().sizeInBytes();
  case OpKind::AllGather:
    return n.result(0)->type().sizeInBytes();
  case OpKind::AllGatherState:
    return n.state()->type().sizeInBytes();
  case OpKind::AllReduceState:
    return 2 * n.state()->type().sizeInBytes();
  default:
    return 0;
  }
}

static uint64_t align64(uint64_t n) { return (n + 63) & ~uint64_t(63); }

uint64_t headroom::hostCollectiveWorkspace(OpKind k, DType t, int64_t elements,
                                           unsigned ranks) {
  bool reduces = k == OpKind::AllReduce || k == OpKind::AllReduceState ||
                 k == OpKind::ReduceScatter;
  if (!reduces)
    return 0;
  uint64_t shard = uint64_t(shardElements(elements, ranks));
  bool wide = t == DType::F32 || t == DType::F64;
  if (wide)
    return k == OpKind::ReduceScatter ? 0 : align64(shard * dtypeSize(t));
  return align64(uint64_t(elements) * 4) + align64(shard * 4);
}

uint64_t headroom::hostCollectiveWorkspace(const Node &n, unsigned ranks) {
  const TensorType &t =
      n.numOperands() ? n.operand(0)->type() : n.state()->type();
  return hostCollectiveWorkspace(n.kind(), t.dtype(), t.numElements(), ranks);
}

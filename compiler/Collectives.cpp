//===- Collectives.cpp - What data parallelism's ops mean ----------------===//
#include "compiler/Collectives.h"

using namespace headroom;

static bool shardOf(const TensorType &shard, int64_t wholeElements,
                    unsigned ranks) {
  return shard.shape().size() == 1 &&
         shard.shape()[0] == shardElements(wholeElements, ranks);
}

std::string headroom::collectiveError(OpKind k, const AttributeMap &attrs,
                                      llvm::ArrayRef<TensorType> operands,
                                      llvm::ArrayRef<TensorType> results,
                                      const TensorType *state, unsigned ranks) {
  auto attr = [&](const char *name) -> const Attribute * {
    auto it = attrs.find(name);
    return it == attrs.end() ? nullptr : &it->second;
  };
  bool hasState = k == OpKind::AllReduceState || k == OpKind::AllGatherState;
  size_t wantOperands = k == OpKind::AllReduceState ? 0 : 1;
  size_t wantResults = hasState ? 0 : 1;
  if (operands.size() != wantOperands || results.size() != wantResults ||
      hasState != (state != nullptr))
    return "has the wrong number of operands, results or state slots";
  if (k == OpKind::AllReduce || k == OpKind::ReduceScatter ||
      k == OpKind::AllReduceState) {
    const Attribute *op = attr("op");
    if (!op || op->kind() != Attribute::Kind::String ||
        (op->asString() != "sum" && op->asString() != "mean"))
      return "needs op = \"sum\" or \"mean\"";
    const TensorType &t = operands.empty() ? *state : operands[0];
    if (!isFloat(t.dtype()))
      return "reduces " + t.str() + " (floats only)";
  }
  if ((k == OpKind::AllReduce || k == OpKind::Broadcast) &&
      results[0] != operands[0])
    return "result " + results[0].str() + " differs from operand type " +
           operands[0].str();
  if (k == OpKind::ReduceScatter) {
    TensorType want = shardType(operands[0], ranks);
    if (results[0] != want)
      return "result " + results[0].str() + " should be " + want.str() +
             ", this rank's shard of " + std::to_string(ranks);
  }
  if (k == OpKind::AllGather) {
    const TensorType &whole = results[0];
    if (whole.dtype() != operands[0].dtype() ||
        !shardOf(operands[0], whole.numElements(), ranks))
      return "gathers " + operands[0].str() + " into " + whole.str() +
             ": not a shard of it over " + std::to_string(ranks) + " ranks";
  }
  if (k == OpKind::AllGatherState &&
      (operands[0].dtype() != state->dtype() ||
       !shardOf(operands[0], state->numElements(), ranks)))
    return "gathers " + operands[0].str() + " into a slot of type " +
           state->str() + ": not a shard of it over " + std::to_string(ranks) +
           " ranks";
  if (k == OpKind::Broadcast) {
    const Attribute *root = attr("root");
    int64_t r =
        root && root->kind() == Attribute::Kind::Int ? root->asInt() : -1;
    if (r < 0 || r >= int64_t(ranks))
      return "root " + std::to_string(r) + " is not a rank (0.." +
             std::to_string(ranks - 1) + ")";
  }
  return "";
}

std::string headroom::collectiveError(const Node &n, unsigned ranks) {
  std::vector<TensorType> operands, results;
  for (const Value *v : n.operands())
    operands.push_back(v->type());
  for (const Value *v : n.results())
    results.push_back(v->type());
  if (n.is(OpKind::AllGatherState) && n.state()->kind() != StateKind::Replica)
    return "writes @" + n.state()->name() + ", which is not a replica";
  std::string why =
      collectiveError(n.kind(), n.attrs(), operands, results,
                      n.state() ? &n.state()->type() : nullptr, ranks);
  // The verifier names the slot.
  if (n.is(OpKind::AllGatherState) &&
      llvm::StringRef(why).startswith("gathers"))
    return "gathers " + operands[0].str() + " into @" + n.state()->name() +
           " of type " + n.state()->type().str() + ": not a shard of it over " +
           std::to_string(ranks) + " ranks";
  return why;
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

//===- Collectives.h - What data parallelism's ops mean ------------------===//
//
// The collectives the `data-parallel` pass inserts (Ops.def: AllReduce,
// ReduceScatter, AllGather, AllGatherState, Broadcast) in one place: the
// types they take and give, checked by the verifier, and the bytes each
// moves per rank, counted by the report. A tensor of n elements is split
// over N ranks in shards of s = ceil(n / N) elements (shardElements in
// compiler/IR.h): rank r holds elements [r s, r s + s) of it flattened, the
// last shard padded with zeros.
//
// Bytes moved follow the ZeRO paper's accounting (Rajbhandari et al. 2020,
// section 7): a reduce-scatter or an all-gather of a tensor of B bytes moves
// B per rank, an all-reduce (a reduce-scatter and an all-gather) 2B, a
// broadcast B. (A ring sends (N-1)/N of that; the paper's round figures
// are what users compare against.)
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_COLLECTIVES_H
#define HEADROOM_COMPILER_COLLECTIVES_H

#include "compiler/IR.h"

#include <string>

namespace headroom {

inline bool isCollective(OpKind k) {
  return k == OpKind::AllReduce || k == OpKind::AllReduceState ||
         k == OpKind::ReduceScatter || k == OpKind::AllGather ||
         k == OpKind::AllGatherState || k == OpKind::Broadcast;
}

/// The shard of `whole` each rank holds: [shardElements(numel, ranks)].
inline TensorType shardType(const TensorType &whole, unsigned ranks) {
  return TensorType(whole.dtype(), {shardElements(whole.numElements(), ranks)});
}

/// Why a collective of kind `k` with these attributes, operand and result
/// types (and the type of the slot it writes, or null) is malformed in a
/// module or plan of `ranks` ranks; empty when it is not. The verifier and
/// the plan reader ask it.
std::string collectiveError(OpKind k, const AttributeMap &attrs,
                            llvm::ArrayRef<TensorType> operands,
                            llvm::ArrayRef<TensorType> results,
                            const TensorType *state, unsigned ranks);
/// That of node `n`, naming its slot.
std::string collectiveError(const Node &n, unsigned ranks);
/// Why slot `s` of a module of `ranks` ranks is malformed as a shard or a
/// replica; empty when it is not (or when it is neither).
std::string shardedSlotError(const StateSlot &s, unsigned ranks);

/// Bytes node `n` (a collective) moves per rank, as the ZeRO paper counts.
uint64_t collectiveBytes(const Node &n);

/// The scratch a host implementation of a collective of kind `k` over a
/// tensor of `elements` elements of type `t` needs on `ranks` ranks
/// (runtime/Communicator.h runCollective): a reduction sums bf16/f16 in f32
/// (the widened tensor and its f32 shard), and AllReduce keeps its summed
/// shard before gathering it. Each part starts at 64 bytes.
uint64_t hostCollectiveWorkspace(OpKind k, DType t, int64_t elements,
                                 unsigned ranks);
/// That of node `n` of a module of `ranks` ranks.
uint64_t hostCollectiveWorkspace(const Node &n, unsigned ranks);

} // namespace headroom

#endif // HEADROOM_COMPILER_COLLECTIVES_H

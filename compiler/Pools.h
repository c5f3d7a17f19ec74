//===- Pools.h - Where values live: the device or the pinned host pool -*- C++
//-*-===//
//
// A plan with offloaded state has two memory pools: the device's and a
// pinned host pool (docs/offload.md). Which pool a value lives in, and so
// where the node making it runs, follows from the IR by one rule, so no
// pass has to write it down:
//   - function arguments and returned values are on the device;
//   - a Constant is in both (the executor keeps it on each side);
//   - ToHost's result is on the host, ToDevice's on the device: transfers,
//     issued on the device's stream;
//   - any other node runs on the host when it touches a slot that lives
//     there (StateSlot::onHost) or, touching no device slot, when all its
//     value operands (Constants aside, at least one) are on the host;
//     otherwise on the device, the device being where compute goes. Its
//     results live where it runs.
// A node whose operands are not all where it runs is malformed: the
// verifier refuses it, naming the operand and the transfer it lacks. The
// `offload` pass inserts those transfers; the lowering plans each pool's
// values in their own arena.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_POOLS_H
#define HEADROOM_COMPILER_POOLS_H

#include "compiler/IR.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"

namespace headroom {

class PoolAssignment {
public:
  explicit PoolAssignment(const Function &f);

  /// Whether `v` lives in the host pool (Constants: false, they are in both).
  bool onHost(const Value *v) const { return HostValues.count(v); }
  /// Whether `n` runs on the host (transfers run on the device's stream).
  bool runsOnHost(const Node &n) const { return HostNodes.count(&n); }
  /// Whether anything in the function lives on the host.
  bool any() const { return !HostValues.empty() || !HostNodes.empty(); }
  /// The first node whose operands are not all where it runs, or that
  /// touches slots of both pools: an error naming it and what it lacks.
  llvm::Error check() const;

private:
  const Function &F;
  llvm::DenseSet<const Value *> HostValues;
  llvm::DenseSet<const Node *> HostNodes;
};

/// Whether `n` touches a slot of the host pool, and one of the device's.
bool touchesHostSlot(const Node &n);
bool touchesDeviceSlot(const Node &n);
/// Whether `v` is a Constant's result (in both pools).
bool isConstantValue(const Value *v);
/// The rule for a node other than a transfer, Constant or `return`: on the
/// host when it touches a host slot, or, touching no device slot, when it
/// has value operands other than Constants and all of them satisfy
/// `onHost`. (The offload pass decides with it while it inserts transfers.)
bool runsOnHostByRule(const Node &n,
                      llvm::function_ref<bool(const Value *)> onHost);

} // namespace headroom

#endif // HEADROOM_COMPILER_POOLS_H

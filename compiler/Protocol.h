//===- Protocol.h - The attributes passes hand each other -------*- C++ -*-===//
//
// Passes and the lowering leave facts on nodes (and the lowering on kernel
// calls) for later passes, the executors and the report. Each is declared
// here, once, with its meaning and who writes and reads it; code goes
// through these accessors, never through the attribute's name.
//
//   grad_of     autodiff (and canonicalize, which keeps it) on the node
//               defining a parameter's complete gradient: per result, the
//               parameter's name or "". Read by UpdateAnalysis (the
//               schedule's and report's gradients) and data-parallel (what
//               to reduce).
//   loss_seed   autodiff on the Constant 1 that seeds the backward (dloss);
//               the optimizer pass scales it for fp16 loss scaling.
//   recomputed  recompute on the backward's clones of forward nodes; the
//               lowering passes it to their calls, the report counts their
//               bytes and FLOPs apart.
//   stream      assignRandomStreams on ops that draw random numbers: the
//               stream of their draws, so a recomputed clone draws the same
//               mask as its original; the executors seed from it.
//   copy        the lowering on a Read call whose slot is copied into an
//               arena buffer (it is overwritten while the value lives); the
//               executors copy, the cost model counts the bytes.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_PROTOCOL_H
#define HEADROOM_COMPILER_PROTOCOL_H

#include "compiler/IR.h"

#include "llvm/ADT/Optional.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <vector>

namespace headroom {

/// Tags `g` as the gradient of `param` (`grad_of` on its defining node;
/// nothing for a function argument).
void tagGradient(Value *g, const StateSlot *param);
/// The results of `n` tagged as parameter gradients.
std::vector<Value *> taggedGradients(const Node &n);
/// Whether some result of `n` is tagged.
inline bool hasGradientTag(const Node &n) { return n.attr("grad_of"); }
/// Moves `from`'s tags to `to` (a node that now computes the same values).
void copyGradientTags(const Node &from, Node &to);

inline bool isLossSeed(const Node &n) { return n.attr("loss_seed"); }

/// The forward that the passes before autodiff rewrite: the module's one
/// function, carrying none of autodiff's marks (a loss seed, a tagged
/// gradient, a ParamGrad). Otherwise an error, "`pass`: expected ...",
/// naming what it found: such a pass given a differentiated step would
/// rewrite its backward as if it were forward.
llvm::Expected<Function *> forwardOf(Module &m, llvm::StringRef pass);
inline void markLossSeed(Node &n) {
  n.setAttr("loss_seed", Attribute::getInt(1));
}

inline bool isRecomputed(const AttributeMap &attrs) {
  return attrs.count("recomputed");
}
inline void markRecomputed(AttributeMap &attrs) {
  attrs["recomputed"] = Attribute::getInt(1);
}

/// The random stream of a random op (none before assignRandomStreams).
inline llvm::Optional<int64_t> randomStream(const AttributeMap &attrs) {
  auto it = attrs.find("stream");
  if (it == attrs.end() || it->second.kind() != Attribute::Kind::Int)
    return llvm::None;
  return it->second.asInt();
}
inline void setRandomStream(Node &n, int64_t stream) {
  n.setAttr("stream", Attribute::getInt(stream));
}

/// Whether a Read call copies its slot into its own buffer.
inline bool readCopies(const AttributeMap &attrs) {
  return attrs.count("copy");
}
inline void markReadCopies(AttributeMap &attrs) {
  attrs["copy"] = Attribute::getInt(1);
}

} // namespace headroom

#endif // HEADROOM_COMPILER_PROTOCOL_H

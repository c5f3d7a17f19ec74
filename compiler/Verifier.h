//===- Verifier.h - IR invariants -----------------------------------------===//
//
// Checks what every pass may assume and must preserve: ops are registered and
// have the operand/result counts their OpInfo allows; every operand is defined
// earlier in the same function; each function ends in exactly one `return`;
// state is read only by Read and written only by update ops, with matching
// types; elementwise ops have consistent element types and broadcast shapes;
// Constant and Cast results match their attributes. The pass manager runs it
// between passes in tests and whenever asked (`headroom opt --verify-each`).
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_VERIFIER_H
#define HEADROOM_COMPILER_VERIFIER_H

#include "compiler/IR.h"

#include "llvm/Support/Error.h"

namespace headroom {

llvm::Error verifyModule(const Module &m);

/// Part of verifyModule: every type's byte count fits kMaxTensorBytes and
/// the module's all together fit 2^60, so that sizes, offsets and peaks
/// computed from a verified module never overflow 64 bits.
llvm::Error checkByteCounts(const Module &m);

/// A short description of a node for messages: `node 3 ('Add' defining %x)`.
std::string describeNode(const Node &n);

} // namespace headroom

#endif // HEADROOM_COMPILER_VERIFIER_H

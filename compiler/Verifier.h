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

/// A short description of a node for messages: `node 3 ('Add' defining %x)`.
std::string describeNode(const Node &n);

} // namespace headroom

#endif // HEADROOM_COMPILER_VERIFIER_H

//===- OpInfo.h - What the IR knows about each op -------------------------===//
//
// The registry is compiler/Ops.def; this header exposes its rows. Lookup is by
// name; an op that is not registered cannot be created, parsed or imported.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_OPINFO_H
#define HEADROOM_COMPILER_OPINFO_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace headroom {

namespace opflags {
enum : unsigned {
  Onnx = 1u << 0,
  Unary = 1u << 1,
  Broadcast = 1u << 2,
  SameDType = 1u << 3,
  ReadsState = 1u << 4,
  WritesState = 1u << 5,
  Terminator = 1u << 6,
  Elementwise = 1u << 7,
};
} // namespace opflags

/// Every registered op, one enumerator per Ops.def row, in its order: what
/// passes compare (`n.is(OpKind::ParamGrad)`), never the op's name.
enum class OpKind : uint16_t {
#define HR_OP(Name, MinOps, MaxOps, MinRes, MaxRes, Flags, Doc) Name,
#include "compiler/Ops.def"
};

struct OpInfo {
  OpKind Kind;
  llvm::StringRef Name;
  int MinOperands, MaxOperands; // MaxOperands < 0: variadic
  int MinResults, MaxResults;   // MaxResults < 0: variadic
  unsigned Flags;
  llvm::StringRef Doc;

  bool has(unsigned flag) const { return (Flags & flag) != 0; }
  /// Writes state or ends the function: never removed as dead code.
  bool hasSideEffects() const {
    return has(opflags::WritesState) || has(opflags::Terminator);
  }
};

/// The registered op named `name`, or null.
const OpInfo *lookupOp(llvm::StringRef name);
/// All registered ops, in Ops.def order.
llvm::ArrayRef<OpInfo> allOps();
/// The row of `op`.
inline const OpInfo &opInfo(OpKind op) {
  return allOps()[static_cast<int>(op)];
}

} // namespace headroom

#endif // HEADROOM_COMPILER_OPINFO_H

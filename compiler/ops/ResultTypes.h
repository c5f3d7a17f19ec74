//===- ResultTypes.h - An op's result types from its operands --*- C++ -*-===//
//
// The result types an op's rule gives: from the operands' types, the
// attributes and the values of constant operands, by the same rules the
// kernels and constant folding use (compiler/ops/Shape.h, MatMulShape.h).
// The builder uses them so a pass need not write a type it could get wrong
// (Builder::apply), and the verifier checks every node that has a rule
// against it. Ops without a rule here (losses, norms, convolutions,
// gathers, attention, updates: each has its own check in the verifier) give
// no types; so does a rule that needs an operand's value that is computed.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_OPS_RESULTTYPES_H
#define HEADROOM_COMPILER_OPS_RESULTTYPES_H

#include "compiler/Attribute.h"
#include "compiler/OpInfo.h"
#include "compiler/Types.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/Optional.h"
#include "llvm/Support/Error.h"

#include <vector>

namespace headroom {

class Value;

namespace ops {

/// The integers of `v` when a Constant defines it (none when `v` is null or
/// computed): what the rules read of shape operands.
llvm::Optional<std::vector<int64_t>> constantInts(const Value *v);

/// Whether `op` has a result-type rule here.
bool hasResultTypeRule(OpKind op);

/// The result types of `op` on `operands` (null: an absent optional one)
/// with `attrs`: None when `op` has no rule or its rule needs the value of
/// an operand that is not a Constant; an error saying what is wrong when the
/// operands do not fit the op ("operand shapes do not broadcast ([2, 3] and
/// [4])").
llvm::Expected<llvm::Optional<std::vector<TensorType>>>
inferResultTypes(OpKind op, llvm::ArrayRef<Value *> operands,
                 const AttributeMap &attrs);

} // namespace ops
} // namespace headroom

#endif // HEADROOM_COMPILER_OPS_RESULTTYPES_H

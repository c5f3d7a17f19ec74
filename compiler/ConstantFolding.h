//===- ConstantFolding.h - Evaluate ops on constant operands --------------===//
//
// A small interpreter for the ops that shape arithmetic is made of (Shape,
// Gather, Concat, Unsqueeze, Slice, Cast, integer Div, Range, ...). The ONNX
// importer uses it to make every shape static where ONNX's own shape inference
// gives up; canonicalize uses it to fold constants in the IR. Both share this
// one implementation so that they agree on semantics.
//
// Results larger than kMaxFoldElements are not folded: they would bloat the IR
// and are cheap to compute at run time (a causal mask, say).
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_CONSTANTFOLDING_H
#define HEADROOM_COMPILER_CONSTANTFOLDING_H

#include "compiler/Attribute.h"

#include "llvm/Support/Error.h"

namespace headroom {

constexpr int64_t kMaxFoldElements = 4096;

/// Evaluates `op` on constant operands (null entries are absent optional
/// inputs). Returns None when the folder does not evaluate this op (or this
/// form of it) or when a result would exceed kMaxFoldElements; an error when
/// the operands are invalid for the op (the message does not name the node;
/// callers add that).
llvm::Expected<llvm::Optional<std::vector<Tensor>>>
foldConstantOp(llvm::StringRef op, const AttributeMap &attrs,
               llvm::ArrayRef<const Tensor *> operands);

/// Folds ops that need only their operand's type: Shape (with start/end) and
/// Size. Returns None for any other op.
llvm::Optional<Tensor> foldTypeOp(llvm::StringRef op, const AttributeMap &attrs,
                                  const TensorType &operand);

/// True for ops foldConstantOp may evaluate.
bool isFoldableOp(llvm::StringRef op);

} // namespace headroom

#endif // HEADROOM_COMPILER_CONSTANTFOLDING_H

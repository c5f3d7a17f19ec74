//===- Plan.h - A lowered training step -----------------------------------===//
//
// The plan is what the executors run: state slots, typed buffers, and each
// function as a list of kernel calls that name their buffers by index. It is
// produced from a Module by lowerModule(). Buffers are values: for now each
// value has its own buffer; the memory planner will assign them offsets in
// one arena. Read results alias their state slot (no copy).
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_RUNTIME_PLAN_H
#define HEADROOM_RUNTIME_PLAN_H

#include "compiler/IR.h"

#include "llvm/Support/Error.h"

namespace headroom {

struct PlanState {
  std::string Name;
  TensorType Type;
  StateKind Kind;
};

struct KernelCall {
  std::string Op;
  AttributeMap Attrs;
  std::vector<int> Inputs;  // buffer indices; -1 for an absent operand
  std::vector<int> Outputs; // buffer indices
  int State = -1;           // state index for Read and update ops
  uint32_t Id = 0;          // position in the function, for seeds and errors
};

struct PlanFunction {
  std::string Name;
  std::vector<int> Args;    // buffers the caller fills
  std::vector<int> Results; // buffers returned
  std::vector<KernelCall> Calls;
};

struct Plan {
  std::vector<PlanState> States;
  std::vector<TensorType> Buffers;
  std::vector<PlanFunction> Functions;

  int stateIndex(llvm::StringRef name) const;
  const PlanFunction *function(llvm::StringRef name) const;
};

/// Lowers every function of a verified module.
llvm::Expected<Plan> lowerModule(const Module &m);

} // namespace headroom

#endif // HEADROOM_RUNTIME_PLAN_H

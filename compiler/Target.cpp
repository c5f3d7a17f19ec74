//===- Target.cpp - What lowering needs to know about a backend -----------===//
#include "compiler/Target.h"

using namespace headroom;

bool Target::runByExecutor(OpKind op) {
  switch (op) {
  case OpKind::Read:
  case OpKind::Assign:
  case OpKind::ParamGrad:
  case OpKind::Constant:
  case OpKind::Return:
  case OpKind::ToHost:
  case OpKind::ToDevice:
  case OpKind::AllReduce:
  case OpKind::AllReduceState:
  case OpKind::ReduceScatter:
  case OpKind::AllGather:
  case OpKind::AllGatherState:
  case OpKind::Broadcast:
    return true;
  default:
    return false;
  }
}

llvm::Error Target::checkFloatTypes(const Node &n,
                                    llvm::ArrayRef<DType> computed) {
  llvm::SmallVector<const Value *, 6> values(n.results().begin(),
                                             n.results().end());
  for (const Value *v : n.operands())
    if (v)
      values.push_back(v);
  for (const Value *v : values) {
    DType t = v->type().dtype();
    if (!isFloat(t) || llvm::is_contained(computed, t))
      continue;
    std::string names;
    for (DType c : computed)
      names += (names.empty() ? "" : ", ") + dtypeName(c).str();
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "computes no %s (%s only)",
                                   dtypeName(t).str().c_str(), names.c_str());
  }
  return llvm::Error::success();
}

bool Target::mayReuseOperand0(const Node &n) const {
  // Collectives that keep the shape run in place (NCCL, Gloo and MPI all
  // take the same buffer for input and output).
  if (n.is(OpKind::AllReduce) || n.is(OpKind::Broadcast))
    return true;
  return n.info()->has(opflags::Elementwise) && n.numResults() == 1 &&
         n.numOperands() <= 2 && n.operand(0) &&
         n.result(0)->type() == n.operand(0)->type();
}

//===- Executor.cpp - The executor of a plan's target ---------------------===//
#include "runtime/Executor.h"

using namespace headroom;

llvm::Expected<std::unique_ptr<Executor>>
headroom::createExecutor(Plan plan, const ExecutorOptions &options) {
  if (plan.TargetName == "cpu")
    return createCpuExecutor(std::move(plan), options);
  if (plan.TargetName == "cuda")
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "the plan is for --device cuda, and this headroom has no CUDA "
        "executor yet: plans for cuda can be compiled and reported, and run "
        "on the CPU when compiled with --device cpu");
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "the plan is for target '%s', which this "
                                 "headroom cannot run (it runs cpu plans)",
                                 plan.TargetName.c_str());
}

std::string headroom::defaultDevice() { return "cpu"; }

//===- Executor.cpp - The executor of a plan's target ---------------------===//
#include "runtime/Executor.h"

#include "compiler/ByteSize.h"
#include "runtime/Devices.h"

using namespace headroom;

llvm::Expected<std::unique_ptr<Executor>>
headroom::createExecutor(Plan plan, const ExecutorOptions &options) {
  if (plan.TargetName == "cpu") {
    // Refused before any allocation: a peak over the memory available now
    // would swap or be killed midway.
    uint64_t peak = plan.Report.PeakBytes(), available = availableCpuBytes();
    if (available && peak > available)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "the plan's peak of %s exceeds the %s of memory available here; "
          "`headroom report --memory-budget device` finds a step that fits",
          formatBytes(peak).c_str(), formatBytes(available).c_str());
    return createCpuExecutor(std::move(plan), options);
  }
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

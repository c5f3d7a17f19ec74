//===- Executor.cpp - The executor of a plan's target ---------------------===//
#include "runtime/Executor.h"

#include "compiler/ByteSize.h"
#include "runtime/Devices.h"
#include "runtime/cuda/CudaExecutor.h"

#include <cstdlib>

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
  if (plan.TargetName == "cuda") {
    if (const char *emulate = std::getenv("HEADROOM_CUDA_EMULATOR");
        emulate && std::string(emulate) == "1")
      return createEmulatedCudaExecutor(std::move(plan), options);
#ifdef HEADROOM_HAVE_CUDA
    return createCudaExecutor(std::move(plan), options);
#else
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "the plan is for --device cuda, and this headroom was built without "
        "the CUDA backend (nvcc was not found when it was built); compile "
        "with --device cpu to run it here");
#endif
  }
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "the plan is for target '%s', which this "
                                 "headroom cannot run (it runs cpu plans)",
                                 plan.TargetName.c_str());
}

std::string headroom::defaultDevice() {
  for (const DeviceInfo &d : listDevices())
    if (d.Backend == "cuda")
      return "cuda";
  return "cpu";
}

//===- Executor.cpp - The executor of a plan's target ---------------------===//
#include "runtime/Executor.h"

#include "runtime/Communicator.h"

#include "compiler/ByteSize.h"
#include "runtime/Devices.h"
#include "runtime/cuda/CudaExecutor.h"

#include <cstdlib>

using namespace headroom;

/// A cuda plan's pinned host pool must fit the memory available now: pinned
/// pages cannot be swapped, and running out midway would lose the run. The
/// error lists what the pool holds, so the user can keep some of it on the
/// device (fewer --offload kinds).
static llvm::Error checkHostPool(const Plan &plan) {
  uint64_t host = plan.Report.HostPeakBytes(), available = availableCpuBytes();
  if (!host || !available || host <= available)
    return llvm::Error::success();
  uint64_t bytes[3] = {0, 0, 0}; // optimizer state + masters, accumulators,
                                 // parameters without optimizer state
  bool optimizerOnHost = false;
  for (const PlanState &s : plan.States)
    optimizerOnHost |= s.Host && s.Kind == StateKind::Optimizer;
  for (const PlanState &s : plan.States) {
    if (!s.Host)
      continue;
    int k = s.Kind == StateKind::Gradient                    ? 1
            : s.Kind == StateKind::Param && !optimizerOnHost ? 2
                                                             : 0;
    bytes[k] += s.Type.sizeInBytes();
  }
  std::string holds;
  const char *names[3] = {"optimizer", "accumulators", "parameters"};
  for (int k = 0; k < 3; ++k)
    if (bytes[k])
      holds += std::string(holds.empty() ? "" : ", ") + names[k] + " " +
               formatBytes(bytes[k]);
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      "the plan's pinned host pool of %s (%s, and %s of host values) exceeds "
      "the %s of memory available here; offload fewer kinds of state "
      "(--offload), or run where the host has more memory",
      formatBytes(host).c_str(), holds.c_str(),
      formatBytes(plan.Report.HostArenaBytes + plan.Report.HostWorkspace)
          .c_str(),
      formatBytes(available).c_str());
}

llvm::Expected<std::unique_ptr<Executor>>
headroom::createExecutor(Plan plan, const ExecutorOptions &options) {
  if (plan.Ranks > 1 && (!options.Comm || options.Comm->size() != plan.Ranks))
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "the plan is one rank's part of a step on %u ranks, and this "
        "process is one of %u: launch it as `mpirun -np %u headroom ...` "
        "(or srun -n %u)",
        plan.Ranks, options.Comm ? options.Comm->size() : 1u, plan.Ranks,
        plan.Ranks);
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
    if (llvm::Error e = checkHostPool(plan))
      return e;
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

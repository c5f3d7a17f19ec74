//===- Compile.cpp - Model + options -> module and plan -------------------===//
#include "pipeline/Compile.h"

#include "kernels/cpu/CpuTarget.h"
#include "kernels/cuda/CudaTarget.h"
#include "passes/PassManager.h"

using namespace headroom;

llvm::Expected<const Target *> headroom::lookupTarget(llvm::StringRef name) {
  if (name == "cpu")
    return &cpuTarget();
  if (name == "cuda")
    return &cudaTarget();
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "--device %s: expected cpu or cuda",
                                 name.str().c_str());
}

/// The import bindings of one micro-batch: --batch and the leading
/// dimension of every --shape divided by --accum.
static llvm::Expected<ImportOptions> microBatchImport(const CompileOptions &o) {
  ImportOptions import = o.Import;
  if (o.Accumulate == 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--accum must be at least 1");
  if (o.Accumulate == 1)
    return import;
  if (import.Batch <= 0)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "--accum %u needs --batch: the step's batch is split into "
        "micro-batches",
        o.Accumulate);
  if (import.Batch % o.Accumulate)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "--batch %lld is not a multiple of --accum %u", (long long)import.Batch,
        o.Accumulate);
  import.Batch /= o.Accumulate;
  for (auto &[name, dims] : import.Shapes) {
    if (dims.empty())
      continue;
    if (dims[0] % o.Accumulate)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "--shape %s: %lld samples are not a multiple of --accum %u",
          name.c_str(), (long long)dims[0], o.Accumulate);
    dims[0] /= o.Accumulate;
  }
  return import;
}

llvm::Expected<Compiled> headroom::compile(llvm::StringRef modelPath,
                                           const CompileOptions &options) {
  auto import = microBatchImport(options);
  if (!import)
    return import.takeError();
  auto m = importOnnxFile(modelPath, *import);
  if (!m)
    return m.takeError();
  return compileModule(std::move(*m), options);
}

static llvm::Error runPasses(Module &m, llvm::StringRef pipeline) {
  PassManager pm;
  if (auto e = pm.addPipeline(pipeline))
    return e;
  return pm.run(m);
}

llvm::Expected<Compiled>
headroom::compileModule(std::unique_ptr<Module> m,
                        const CompileOptions &options) {
  auto target = lookupTarget(options.Target);
  if (!target)
    return target.takeError();
  bool fused = options.ApplyOptimizer && options.Optimizer.fused();
  if (fused && options.Schedule == ScheduleMode::Never)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "--schedule never contradicts --optimizer %s, whose updates are "
        "scheduled into the backward",
        options.Optimizer.kindName().str().c_str());
  std::string asBuiltPipeline = options.passPipeline(/*scheduled=*/false);
  if (auto e = runPasses(*m, asBuiltPipeline))
    return e;

  Compiled asBuilt;
  if (options.Schedule == ScheduleMode::Never ||
      (!fused && options.Schedule == ScheduleMode::Auto)) {
    // Auto lowers a copy as built: scheduling changes the module in place.
    bool keepBoth = options.Schedule == ScheduleMode::Auto;
    asBuilt.M = keepBoth ? m->clone() : std::move(m);
    auto plan = lowerModule(*asBuilt.M, **target);
    if (!plan)
      return plan.takeError();
    asBuilt.ThePlan = std::move(*plan);
    asBuilt.Pipeline = asBuiltPipeline;
    if (!keepBoth)
      return asBuilt;
  }
  if (auto e = runPasses(*m, "schedule"))
    return e;
  auto plan = lowerModule(*m, **target);
  if (!plan)
    return plan.takeError();
  // On a tie the step keeps PyTorch's order.
  if (asBuilt.M &&
      asBuilt.ThePlan.Report.PeakBytes() <= plan->Report.PeakBytes())
    return asBuilt;
  return Compiled{std::move(m), std::move(*plan),
                  options.passPipeline(/*scheduled=*/true)};
}

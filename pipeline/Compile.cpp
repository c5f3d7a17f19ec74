//===- Compile.cpp - Model + options -> module and plan -------------------===//
#include "pipeline/Compile.h"

#include "compiler/ByteSize.h"
#include "kernels/cpu/CpuTarget.h"
#include "kernels/cuda/CudaTarget.h"
#include "passes/PassManager.h"
#include "pipeline/AutoFit.h"

#include "llvm/Support/xxhash.h"

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

/// The import bindings of one micro-batch of one rank: --batch and the
/// leading dimension of every --shape divided by --ranks and --accum.
static llvm::Expected<ImportOptions> microBatchImport(const CompileOptions &o) {
  ImportOptions import = o.Import;
  if (o.Accumulate == 0 || o.Ranks == 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--accum and --ranks must be at least 1");
  uint64_t parts = uint64_t(o.Accumulate) * o.Ranks;
  if (parts == 1)
    return import;
  std::string split = o.Ranks == 1 ? "--accum " + std::to_string(o.Accumulate)
                      : o.Accumulate == 1
                          ? "--ranks " + std::to_string(o.Ranks)
                          : "--ranks " + std::to_string(o.Ranks) +
                                " x --accum " + std::to_string(o.Accumulate);
  if (import.Batch <= 0)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "%s needs --batch: the step's batch is split into micro-batches",
        split.c_str());
  if (import.Batch % parts)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--batch %lld is not a multiple of %s",
                                   (long long)import.Batch, split.c_str());
  import.Batch /= parts;
  for (auto &[name, dims] : import.Shapes) {
    if (dims.empty())
      continue;
    if (dims[0] % int64_t(parts))
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "--shape %s: %lld samples are not a multiple of %s", name.c_str(),
          (long long)dims[0], split.c_str());
    dims[0] /= parts;
  }
  return import;
}

static llvm::Error runPasses(Module &m, llvm::StringRef pipeline,
                             PassManagerOptions options = {}) {
  PassManager pm(options);
  if (auto e = pm.addPipeline(pipeline))
    return e;
  return pm.run(m);
}

llvm::Expected<std::unique_ptr<Module>>
headroom::importStep(llvm::StringRef modelPath, const CompileOptions &options) {
  auto import = microBatchImport(options);
  if (!import)
    return import.takeError();
  return importOnnxFile(modelPath, *import);
}

llvm::Expected<Compiled> headroom::compile(llvm::StringRef modelPath,
                                           const CompileOptions &options) {
  if (options.MemoryBudget) {
    auto fit = autoFit(modelPath, options);
    if (!fit)
      return fit.takeError();
    return std::move(fit->Best);
  }
  auto m = importStep(modelPath, options);
  if (!m)
    return m.takeError();
  return compileModule(std::move(*m), options);
}

/// Recomputes (when asked), rematerializes and lowers `m`, which the base
/// pipeline has built, scheduled or not as the options say.
static llvm::Expected<Compiled> lowerSteps(std::unique_ptr<Module> m,
                                           const CompileOptions &options,
                                           const Target &target);

static llvm::Expected<Compiled> finish(std::unique_ptr<Module> m,
                                       const CompileOptions &options,
                                       const Target &target) {
  auto c = lowerSteps(std::move(m), options, target);
  if (c)
    c->ThePlan.Report.HostBandwidth = options.HostBandwidth;
  return c;
}

/// finish() but the report's assumptions.
static llvm::Expected<Compiled> lowerSteps(std::unique_ptr<Module> m,
                                           const CompileOptions &options,
                                           const Target &target) {
  bool fused = options.ApplyOptimizer && options.Optimizer.fused();
  if (fused && options.Schedule == ScheduleMode::Never)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "--schedule never contradicts --optimizer %s, whose updates are "
        "scheduled into the backward",
        options.Optimizer.kindName().str().c_str());
  // One pass manager: the module (the base pipeline's output, verified) is
  // verified after each pass that changes it.
  PassManagerOptions verified;
  verified.InputVerified = true;
  PassManager pm(verified);
  if (options.Recompute.Kind != RecomputeOptions::Policy::None)
    pm.add(createRecomputePass(options.Recompute));
  if (auto e = pm.addPipeline(options.rematerializePass().substr(1)))
    return e;
  if (options.Ranks > 1)
    if (auto e = pm.addPipeline(options.dataParallelPass().substr(1)))
      return e;
  if (!options.Offload.empty())
    if (auto e = pm.addPipeline(options.offloadPass().substr(1)))
      return e;
  if (auto e = pm.run(*m))
    return e;
  Compiled asBuilt;
  if (options.Schedule == ScheduleMode::Never ||
      (!fused && options.Schedule == ScheduleMode::Auto)) {
    // Auto lowers a copy as built: scheduling changes the module in place.
    bool keepBoth = options.Schedule == ScheduleMode::Auto;
    asBuilt.M = keepBoth ? m->clone() : std::move(m);
    auto plan = lowerModule(*asBuilt.M, target);
    if (!plan)
      return plan.takeError();
    asBuilt.ThePlan = std::move(*plan);
    asBuilt.Pipeline = options.passPipeline(/*scheduled=*/false);
    if (!keepBoth)
      return asBuilt;
  }
  if (auto e = runPasses(*m, options.schedulePass().substr(1), verified))
    return e;
  auto plan = lowerModule(*m, target);
  if (!plan)
    return plan.takeError();
  // On a tie the step keeps PyTorch's order.
  if (asBuilt.M &&
      asBuilt.ThePlan.Report.PeakBytes() <= plan->Report.PeakBytes())
    return asBuilt;
  return Compiled{std::move(m), std::move(*plan),
                  options.passPipeline(/*scheduled=*/true)};
}

/// `built` (copied) compiled with recomputation choice `c`.
static llvm::Expected<Compiled> compileChoice(const Module &built,
                                              const CompileOptions &options,
                                              const RecomputeChoice &c,
                                              const Target &target) {
  CompileOptions o = options;
  o.RecomputeBudget = 0;
  c.applyTo(o.Recompute);
  return finish(built.clone(), o, target);
}

llvm::Expected<std::vector<Compiled>>
headroom::compileRecomputeCandidates(const Module &built,
                                     const CompileOptions &options,
                                     llvm::ArrayRef<RecomputeChoice> choices) {
  auto target = lookupTarget(options.Target);
  if (!target)
    return target.takeError();
  std::vector<Compiled> out;
  for (const RecomputeChoice &c : choices) {
    auto compiled = compileChoice(built, options, c, **target);
    if (!compiled)
      return compiled.takeError();
    out.push_back(std::move(*compiled));
  }
  return out;
}

/// `--recompute budget=SIZE`: of the candidates RecomputeSpace::search
/// visits, the fewest recomputed FLOPs whose planned peak fits (the lower
/// peak on a tie).
static llvm::Expected<Compiled> fitBudget(std::unique_ptr<Module> built,
                                          const CompileOptions &options) {
  auto target = lookupTarget(options.Target);
  if (!target)
    return target.takeError();
  llvm::Optional<Compiled> best, lowest;
  std::string lowestLabel;
  auto tryChoice = [&](const RecomputeChoice &c) -> llvm::Expected<bool> {
    auto compiled = compileChoice(*built, options, c, **target);
    if (!compiled)
      return compiled.takeError();
    const MemoryReport &r = compiled->ThePlan.Report;
    bool fits = r.PeakBytes() <= options.RecomputeBudget;
    if (fits) {
      const MemoryReport *b = best ? &best->ThePlan.Report : nullptr;
      if (!b || r.RecomputeFlops < b->RecomputeFlops ||
          (r.RecomputeFlops == b->RecomputeFlops &&
           r.PeakBytes() < b->PeakBytes()))
        best = std::move(*compiled);
    } else if (!lowest || r.PeakBytes() < lowest->ThePlan.Report.PeakBytes()) {
      lowest = std::move(*compiled);
      lowestLabel = c.Label;
    }
    return fits;
  };
  if (auto e = RecomputeSpace::of(*built).search(tryChoice, /*withNone=*/true))
    return e;
  if (!best)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "--recompute budget=%s: no recomputation fits; the smallest peak "
        "reachable is %s (--recompute %s)",
        formatBytes(options.RecomputeBudget).c_str(),
        formatBytes(lowest->ThePlan.Report.PeakBytes()).c_str(),
        lowestLabel.c_str());
  return std::move(*best);
}

llvm::Expected<std::unique_ptr<Module>>
headroom::runPipeline(std::unique_ptr<Module> m, llvm::StringRef pipeline,
                      PassManagerOptions options) {
  if (auto e = runPasses(*m, pipeline, options))
    return e;
  return m;
}

llvm::Expected<std::unique_ptr<Module>>
headroom::buildStep(llvm::StringRef modelPath, const CompileOptions &options) {
  auto m = importStep(modelPath, options);
  if (!m)
    return m.takeError();
  return runPipeline(std::move(*m), options.basePipeline());
}

llvm::Expected<Compiled>
headroom::compileModule(std::unique_ptr<Module> m,
                        const CompileOptions &options) {
  auto target = lookupTarget(options.Target);
  if (!target)
    return target.takeError();
  if (options.ApplyOptimizer && options.Optimizer.fused() &&
      options.Schedule == ScheduleMode::Never)
    return finish(std::move(m), options, **target); // its error, at once
  if (auto e = runPasses(*m, options.basePipeline()))
    return e;
  return compileBuilt(std::move(m), options);
}

llvm::Expected<Compiled> headroom::compileBuilt(std::unique_ptr<Module> built,
                                                const CompileOptions &options) {
  auto target = lookupTarget(options.Target);
  if (!target)
    return target.takeError();
  if (options.RecomputeBudget)
    return fitBudget(std::move(built), options);
  return finish(std::move(built), options, **target);
}

std::string headroom::buildKey(const CompileOptions &options) {
  return options.basePipeline() + "|" + importKey(options);
}

std::string headroom::importKey(const CompileOptions &options) {
  auto import = microBatchImport(options);
  if (!import) {
    llvm::consumeError(import.takeError());
    return "invalid";
  }
  std::string key = "batch=" + std::to_string(import->Batch);
  for (const auto &[name, dims] : import->Shapes) {
    key += "|" + name + "=";
    for (int64_t d : dims)
      key += std::to_string(d) + "x";
  }
  for (const std::string &f : import->Freeze)
    key += "|freeze=" + f;
  if (import->AllOutputs)
    key += "|all-outputs";
  for (const auto &[name, t] : import->ConstantInputs)
    key += "|" + name + ":" + t.type().str() + "#" +
           std::to_string(llvm::xxHash64(
               llvm::StringRef(reinterpret_cast<const char *>(t.bytes().data()),
                               t.bytes().size())));
  return key;
}

//===- Trainer.cpp - Compile a training step and run it -------------------===//
#include "runtime/Trainer.h"

#include "compiler/PassManager.h"
#include "passes/Passes.h"
#include "runtime/ModelIO.h"

using namespace headroom;

static void disableDropout(Module &m) {
  for (const auto &f : m.functions())
    for (Node &n : f->nodes()) {
      if (n.op() != "Dropout")
        continue;
      DType t = n.numOperands() > 1 && n.operand(1)
                    ? n.operand(1)->type().dtype()
                    : n.operand(0)->type().dtype();
      Value *zero = Builder(*f, &n).constant(Tensor::fromDoubles(t, {}, {0.0}));
      if (n.numOperands() > 1) // one operand: inference mode already
        n.setOperand(1, zero);
    }
}

llvm::Expected<std::unique_ptr<Module>>
headroom::buildTrainingStep(llvm::StringRef modelPath,
                            const TrainOptions &options) {
  ImportOptions import = options.Import;
  if (options.Accumulate == 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--accum must be at least 1");
  if (options.Accumulate > 1) {
    if (import.Batch <= 0)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "--accum %u needs --batch: the step's batch is split into "
          "micro-batches",
          options.Accumulate);
    if (import.Batch % options.Accumulate)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "--batch %lld is not a multiple of --accum %u",
          (long long)import.Batch, options.Accumulate);
    import.Batch /= options.Accumulate;
    // --shape gives a step's shapes too: its leading dimension is the batch.
    for (auto &[name, dims] : import.Shapes) {
      if (dims.empty())
        continue;
      if (dims[0] % options.Accumulate)
        return llvm::createStringError(
            llvm::inconvertibleErrorCode(),
            "--shape %s: %lld samples are not a multiple of --accum %u",
            name.c_str(), (long long)dims[0], options.Accumulate);
      dims[0] /= options.Accumulate;
    }
  }
  auto m = importOnnxFile(modelPath, import);
  if (!m)
    return m.takeError();
  if (options.DisableDropout)
    disableDropout(**m);
  PassManager pm;
  if (auto e = pm.addPipeline("canonicalize,autodiff"))
    return e;
  if (options.Accumulate > 1)
    if (auto e = pm.addPipeline(
            "accumulate{steps=" + std::to_string(options.Accumulate) + "}"))
      return e;
  if (options.ApplyOptimizer)
    pm.add(createOptimizerPass(options.Optimizer));
  if (auto e = pm.addPipeline("canonicalize"))
    return e;
  if (auto e = pm.run(**m))
    return e;
  return m;
}

llvm::Expected<Plan> headroom::lowerTrainingStep(Module &m,
                                                 const TrainOptions &options) {
  using Mode = TrainOptions::ScheduleMode;
  bool fused = options.ApplyOptimizer && options.Optimizer.fused();
  if (fused && options.Schedule == Mode::Never)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "--schedule never contradicts --optimizer %s, whose updates are "
        "scheduled into the backward",
        options.Optimizer.kindName().str().c_str());
  if (options.Schedule == Mode::Never)
    return lowerModule(m);
  llvm::Expected<Plan> asBuilt = Plan();
  if (!fused && options.Schedule == Mode::Auto)
    asBuilt = lowerModule(m);
  if (!asBuilt)
    return asBuilt.takeError();
  PassManager pm;
  if (auto e = pm.addPipeline("schedule"))
    return e;
  if (auto e = pm.run(m))
    return e;
  auto scheduled = lowerModule(m);
  if (!scheduled)
    return scheduled.takeError();
  if (fused || options.Schedule == Mode::Always ||
      scheduled->Report.PeakBytes() < asBuilt->Report.PeakBytes())
    return scheduled;
  return asBuilt;
}

llvm::Expected<std::unique_ptr<Trainer>>
Trainer::create(llvm::StringRef modelPath, const TrainOptions &options) {
  auto m = buildTrainingStep(modelPath, options);
  if (!m)
    return m.takeError();
  auto plan = lowerTrainingStep(**m, options);
  if (!plan)
    return plan.takeError();
  auto t = fromPlan(std::move(*plan), modelPath, options.Seed);
  if (t)
    (*t)->M = std::move(*m);
  return t;
}

llvm::Expected<std::unique_ptr<Trainer>>
Trainer::fromPlan(Plan plan, llvm::StringRef modelPath, uint64_t seed) {
  if (plan.Functions.empty() || plan.Driver.empty() ||
      !plan.function(plan.Driver.front().Function))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the plan has no function to run");
  auto t = std::unique_ptr<Trainer>(new Trainer());
  ExecutorOptions eo;
  eo.Seed = seed;
  auto exec = createCpuExecutor(std::move(plan), eo);
  if (!exec)
    return exec.takeError();
  t->Exec = std::move(*exec);
  auto loaded = loadInitialState(*t->Exec, modelPath);
  if (!loaded)
    return loaded.takeError();
  unsigned weights = 0;
  for (const PlanState &s : t->Exec->plan().States)
    weights += s.Kind != StateKind::Optimizer && s.Kind != StateKind::Gradient;
  if (*loaded < weights)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "%s: only %u of the plan's %u weights are initializers of this model; "
        "is it the model the plan was compiled from?",
        modelPath.str().c_str(), *loaded, weights);
  return t;
}

int64_t Trainer::microBatch() const {
  const PlanFunction &f = stepFunction();
  return f.Args.empty() ? 0 : Exec->plan().Buffers[f.Args[0]].dim(0);
}

int64_t Trainer::batch() const {
  return microBatch() * Exec->plan().microBatchesPerStep();
}

llvm::Error Trainer::checkData(const Dataset &data) const {
  const PlanFunction &f = stepFunction();
  std::vector<TensorType> types;
  for (int b : f.Args)
    types.push_back(Exec->plan().Buffers[b]);
  for (size_t i = 1; i < types.size(); ++i)
    if (types[i].rank() == 0 || types[i].dim(0) != types[0].dim(0))
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "data input '%s' is %s but '%s' is %s: every data input of a step "
          "must be a batch of the same number of samples",
          f.ArgNames[i].c_str(), types[i].str().c_str(), f.ArgNames[0].c_str(),
          types[0].str().c_str());
  if (auto e = checkDataset(data, f.ArgNames, types))
    return e;
  if (data.Samples < batch())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "the data has %lld samples, fewer than one step's batch of %lld",
        (long long)data.Samples, (long long)batch());
  return llvm::Error::success();
}

llvm::Expected<StepResult> Trainer::step(const Dataset &data,
                                         llvm::ArrayRef<int64_t> order,
                                         int64_t start) {
  const Plan &plan = Exec->plan();
  const PlanFunction &first = stepFunction();
  int64_t micro = microBatch();
  std::vector<Tensor> args;
  std::vector<const Tensor *> ptrs;
  auto gather = [&](int64_t at) {
    args.clear();
    ptrs.clear();
    for (size_t i = 0; i < first.Args.size(); ++i)
      args.push_back(gatherRows(data.Arrays.at(first.ArgNames[i]), order, at,
                                plan.Buffers[first.Args[i]].dim(0)));
    for (const Tensor &a : args)
      ptrs.push_back(&a);
  };
  StepResult r;
  double lossSum = 0;
  int64_t batches = 0;
  for (const DriverCall &d : plan.Driver)
    for (uint32_t k = 0; k < d.Repeat; ++k) {
      if (!d.SameBatch) {
        gather(start + batches * micro);
        ++batches;
        ++MicroBatches;
      }
      // Calls on the same batch draw the same dropout masks.
      Exec->setStep(MicroBatches - 1);
      auto results = Exec->run(d.Function, ptrs);
      if (!results)
        return results.takeError();
      if (!d.SameBatch)
        lossSum += (*results)[0].getDouble(0);
      if (results->size() > 1)
        r.GradNorm = (*results)[1].getDouble(0);
    }
  r.Loss = lossSum / std::max<int64_t>(batches, 1);
  return r;
}

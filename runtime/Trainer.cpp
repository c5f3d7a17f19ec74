//===- Trainer.cpp - Run a compiled training step over data ---------------===//
#include "runtime/Trainer.h"

#include "runtime/Communicator.h"
#include "runtime/ModelIO.h"

#include <cmath>

using namespace headroom;

/// splitmix64: the n-th draw of a stream, the same on every platform.
static uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

llvm::Expected<unsigned>
headroom::initializeNewState(Executor &exec, uint64_t seed, unsigned rank) {
  unsigned done = 0;
  for (const PlanState &s : exec.plan().States) {
    if (s.Init == StateInit::Model || s.Init == StateInit::Nf4)
      continue; // written by loadInitialState
    // A shard (data parallelism) is drawn whole and cut: every rank count
    // draws the same weights.
    const TensorType &type = s.ShardOf ? *s.ShardOf : s.Type;
    int64_t n = type.numElements();
    std::vector<double> values(size_t(n), 0.0);
    if (s.Init == StateInit::KaimingUniform) {
      // torch.nn.init.kaiming_uniform_(w, a=sqrt(5)): uniform in
      // +-sqrt(6 / ((1 + a^2) fan_in)) = +-1/sqrt(fan_in).
      int64_t fanIn = type.rank() ? type.dim(type.rank() - 1) : 1;
      double bound = 1.0 / std::sqrt(double(std::max<int64_t>(fanIn, 1)));
      uint64_t stream = seed;
      for (char c : s.Name) // FNV-1a of the name: one stream per slot
        stream = (stream ^ uint8_t(c)) * 0x100000001b3ull;
      for (int64_t i = 0; i < n; ++i) {
        double u = double(splitmix(stream + uint64_t(i)) >> 11) * 0x1p-53;
        values[size_t(i)] = (2 * u - 1) * bound;
      }
    }
    Tensor t = Tensor::fromDoubles(type.dtype(), type.shape(), values);
    if (s.ShardOf)
      t = shardOf(t, rank, exec.plan().Ranks);
    if (auto e = exec.writeState(s.Name, t))
      return e;
    ++done;
  }
  return done;
}

llvm::Expected<std::unique_ptr<Trainer>>
Trainer::create(Plan plan, llvm::StringRef modelPath, uint64_t seed,
                Communicator *comm) {
  if (plan.Functions.empty() || plan.Driver.empty() ||
      !plan.function(plan.Driver.front().Function))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the plan has no function to run");
  auto t = std::unique_ptr<Trainer>(new Trainer());
  unsigned rank = comm ? comm->rank() : 0;
  ExecutorOptions eo;
  // Rank 0 draws what a single process draws; the others their own.
  eo.Seed = seed + 0x9e3779b97f4a7c15ull * rank;
  eo.Comm = comm;
  // One GPU per rank of a machine (mpirun and srun start a machine's ranks
  // in order; CUDA_VISIBLE_DEVICES narrows what each sees).
  if (comm)
    eo.CudaDevice = int(comm->localRank());
  auto exec = createExecutor(std::move(plan), eo);
  if (!exec)
    return exec.takeError();
  t->Exec = std::move(*exec);
  t->Comm = comm;
  auto loaded = loadInitialState(*t->Exec, modelPath, rank);
  if (!loaded)
    return loaded.takeError();
  auto drawn = initializeNewState(*t->Exec, seed, rank);
  if (!drawn)
    return drawn.takeError();
  *loaded += *drawn;
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

int64_t Trainer::rankBatch() const {
  return microBatch() * Exec->plan().microBatchesPerStep();
}

int64_t Trainer::batch() const { return rankBatch() * Exec->plan().Ranks; }

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
  start += int64_t(Comm ? Comm->rank() : 0) * rankBatch();
  if (start < 0 || start + rankBatch() > int64_t(order.size()))
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "the step reads samples %lld to %lld of an order of %zu",
        (long long)start, (long long)(start + rankBatch()), order.size());
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

//===- CpuExecutor.cpp - The CPU backend ----------------------------------===//
//
// Every buffer is allocated when the executor is created; a run only calls
// kernels. Read results alias their state slot unless the lowering marked the
// Read as needing a copy (its value is used after the slot is overwritten).
//
//===----------------------------------------------------------------------===//
#include "kernels/cpu/Kernel.h"
#include "runtime/Executor.h"

#include <cstring>

using namespace headroom;
using namespace headroom::cpu;

namespace {

class CpuExecutor : public Executor {
public:
  CpuExecutor(Plan plan, const ExecutorOptions &options)
      : Executor(std::move(plan)), Options(options) {}
  llvm::Error allocate();

  llvm::Expected<std::vector<Tensor>>
  run(llvm::StringRef function, llvm::ArrayRef<const Tensor *> args) override;
  llvm::Expected<Tensor> readState(llvm::StringRef name) const override;
  llvm::Error writeState(llvm::StringRef name, const Tensor &value) override;
  const std::map<std::string, Tensor> &gradients() const override {
    return Gradients;
  }
  uint64_t allocatedBytes() const override { return Allocated; }
  void setStep(uint64_t step) override { Step = step; }

private:
  llvm::Error runCall(const PlanFunction &f, const KernelCall &call);
  TensorView view(int buffer) const {
    if (buffer < 0)
      return TensorView();
    const TensorType &t = ThePlan.Buffers[buffer];
    // A present but empty tensor still gets a non-null pointer: null means
    // an absent optional operand to kernels.
    static uint64_t emptyTensor = 0;
    void *data = Pointers[buffer] ? Pointers[buffer] : &emptyTensor;
    return TensorView{t.dtype(), t.shape(), data};
  }

  ExecutorOptions Options;
  std::vector<std::vector<uint8_t>> States;
  std::vector<std::vector<uint8_t>> Buffers;
  std::vector<void *> Pointers; // where each buffer's data is (may alias)
  std::map<std::string, Tensor> Gradients;
  uint64_t Allocated = 0;
  uint64_t Step = 0;
};

/// splitmix64: a seed per (run seed, step, call) with no visible structure.
uint64_t mixSeed(uint64_t seed, uint64_t step, uint64_t call) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (step * 1000003ull + call + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

} // namespace

llvm::Error CpuExecutor::allocate() {
  for (const PlanState &s : ThePlan.States) {
    States.emplace_back(s.Type.sizeInBytes(), 0);
    Allocated += s.Type.sizeInBytes();
  }
  Buffers.resize(ThePlan.Buffers.size());
  Pointers.resize(ThePlan.Buffers.size(), nullptr);
  // Buffers that Read results or arguments alias need no storage of their own.
  std::vector<bool> aliased(ThePlan.Buffers.size(), false);
  for (const PlanFunction &f : ThePlan.Functions) {
    for (int a : f.Args)
      aliased[a] = true;
    for (const KernelCall &c : f.Calls)
      if (c.Op == "Read" && !c.Attrs.count("copy"))
        aliased[c.Outputs[0]] = true;
  }
  for (size_t i = 0; i < ThePlan.Buffers.size(); ++i) {
    if (aliased[i])
      continue;
    Buffers[i].resize(ThePlan.Buffers[i].sizeInBytes());
    Pointers[i] = Buffers[i].data();
    Allocated += Buffers[i].size();
  }
  return llvm::Error::success();
}

llvm::Error CpuExecutor::runCall(const PlanFunction &f, const KernelCall &c) {
  if (c.Op == "Read") {
    std::vector<uint8_t> &s = States[c.State];
    if (c.Attrs.count("copy"))
      std::memcpy(Pointers[c.Outputs[0]], s.data(), s.size());
    else
      Pointers[c.Outputs[0]] = s.data();
    return llvm::Error::success();
  }
  if (c.Op == "Assign") {
    std::vector<uint8_t> &s = States[c.State];
    if (Pointers[c.Inputs[0]] != s.data())
      std::memmove(s.data(), Pointers[c.Inputs[0]], s.size());
    return llvm::Error::success();
  }
  if (c.Op == "ParamGrad") {
    const TensorType &t = ThePlan.Buffers[c.Inputs[0]];
    const auto *p = static_cast<const uint8_t *>(Pointers[c.Inputs[0]]);
    Gradients[ThePlan.States[c.State].Name] =
        Tensor(t, std::vector<uint8_t>(p, p + t.sizeInBytes()));
    return llvm::Error::success();
  }
  if (c.Op == "Constant") {
    const Tensor &t = c.Attrs.at("value").asTensor();
    std::memcpy(Pointers[c.Outputs[0]], t.bytes().data(), t.bytes().size());
    return llvm::Error::success();
  }
  KernelFn fn = lookupKernel(c.Op);
  if (!fn)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "@%s call %u: no CPU kernel for op '%s'",
                                   f.Name.c_str(), c.Id, c.Op.c_str());
  llvm::SmallVector<TensorView, 4> ins, outs;
  for (int b : c.Inputs)
    ins.push_back(view(b));
  for (int b : c.Outputs)
    outs.push_back(view(b));
  KernelContext ctx{c.Op, ins, outs, c.Attrs,
                    mixSeed(Options.Seed, Step, c.Id)};
  if (auto e = fn(ctx))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "@%s call %u: %s", f.Name.c_str(), c.Id,
                                   llvm::toString(std::move(e)).c_str());
  return llvm::Error::success();
}

llvm::Expected<std::vector<Tensor>>
CpuExecutor::run(llvm::StringRef function,
                 llvm::ArrayRef<const Tensor *> args) {
  const PlanFunction *f = ThePlan.function(function);
  if (!f)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the plan has no function @%s",
                                   function.str().c_str());
  if (args.size() != f->Args.size())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(), "@%s takes %zu arguments, got %zu",
        function.str().c_str(), f->Args.size(), args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const TensorType &want = ThePlan.Buffers[f->Args[i]];
    if (args[i]->type() != want)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "argument %zu of @%s is %s, expected %s", i, function.str().c_str(),
          args[i]->type().str().c_str(), want.str().c_str());
    // Kernels never write their inputs, so arguments are used in place.
    Pointers[f->Args[i]] = const_cast<uint8_t *>(args[i]->bytes().data());
  }
  Gradients.clear();
  for (const KernelCall &c : f->Calls)
    if (auto e = runCall(*f, c))
      return e;
  ++Step;
  std::vector<Tensor> results;
  for (int b : f->Results) {
    const TensorType &t = ThePlan.Buffers[b];
    const auto *p = static_cast<const uint8_t *>(Pointers[b]);
    results.emplace_back(t, std::vector<uint8_t>(p, p + t.sizeInBytes()));
  }
  return results;
}

llvm::Expected<Tensor> CpuExecutor::readState(llvm::StringRef name) const {
  int i = ThePlan.stateIndex(name);
  if (i < 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "no state slot @%s", name.str().c_str());
  return Tensor(ThePlan.States[i].Type, States[i]);
}

llvm::Error CpuExecutor::writeState(llvm::StringRef name, const Tensor &value) {
  int i = ThePlan.stateIndex(name);
  if (i < 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "no state slot @%s", name.str().c_str());
  if (value.type() != ThePlan.States[i].Type)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(), "state @%s is %s, got %s",
        name.str().c_str(), ThePlan.States[i].Type.str().c_str(),
        value.type().str().c_str());
  States[i] = value.bytes();
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<Executor>>
headroom::createCpuExecutor(Plan plan, const ExecutorOptions &options) {
  auto e = std::make_unique<CpuExecutor>(std::move(plan), options);
  if (auto err = e->allocate())
    return err;
  return std::unique_ptr<Executor>(std::move(e));
}

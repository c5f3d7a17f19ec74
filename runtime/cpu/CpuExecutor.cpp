//===- CpuExecutor.cpp - The CPU backend ----------------------------------===//
//
// State, one arena and the kernels' workspace are allocated when the
// executor is created, and every buffer's address is fixed then
// (runtime/Plan.h says where each lives); a run copies the arguments in and
// calls kernels, each given the workspace for its scratch. Nothing else is
// allocated, so allocatedBytes() is the plan's state + arena + workspace, its
// planned peak.
//
//===----------------------------------------------------------------------===//
#include "kernels/cpu/Kernel.h"
#include "runtime/Executor.h"

#include <algorithm>
#include <cstdlib>
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
  struct FreeDeleter {
    void operator()(uint8_t *p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, FreeDeleter> Arena;
  uint8_t *Workspace = nullptr; // kernel scratch, inside Arena's allocation
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

/// The random stream of a call: its `stream` attribute (autodiff gives every
/// Dropout one, so that copies of a function draw alike), else its position.
uint64_t randomStream(const KernelCall &c) {
  auto it = c.Attrs.find("stream");
  if (it != c.Attrs.end() && it->second.kind() == Attribute::Kind::Int)
    return static_cast<uint64_t>(it->second.asInt());
  return c.Id;
}

} // namespace

llvm::Error CpuExecutor::allocate() {
  for (const PlanState &st : ThePlan.States) {
    States.emplace_back(st.Type.sizeInBytes(), 0);
    Allocated += st.Type.sizeInBytes();
  }
  // One allocation for every transient buffer, 64-byte aligned like its
  // offsets, followed by the kernels' workspace at the next 64-byte boundary.
  uint64_t arenaAligned = (ThePlan.ArenaBytes + 63) & ~uint64_t(63);
  uint64_t workspaceAligned = (ThePlan.WorkspaceBytes + 63) & ~uint64_t(63);
  Arena.reset(static_cast<uint8_t *>(std::aligned_alloc(
      64, std::max<uint64_t>(64, arenaAligned + workspaceAligned))));
  if (!Arena)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "cannot allocate the %llu-byte arena and %llu-byte workspace",
        (unsigned long long)ThePlan.ArenaBytes,
        (unsigned long long)ThePlan.WorkspaceBytes);
  Allocated += ThePlan.ArenaBytes + ThePlan.WorkspaceBytes;
  if (ThePlan.WorkspaceBytes)
    Workspace = Arena.get() + arenaAligned;
  Pointers.resize(ThePlan.Buffers.size(), nullptr);
  for (size_t i = 0; i < ThePlan.Buffers.size(); ++i) {
    const Placement &p = ThePlan.Placements[i];
    switch (p.Where) {
    case Placement::Kind::Arena:
      Pointers[i] = Arena.get() + p.Offset;
      break;
    case Placement::Kind::State:
      Pointers[i] = States[p.Index].data();
      break;
    case Placement::Kind::Constant: {
      // Kernels never write their inputs: constants are used in place.
      const Tensor &t =
          ThePlan.Functions[p.Index].Calls[p.Call].Attrs.at("value").asTensor();
      Pointers[i] = const_cast<uint8_t *>(t.bytes().data());
      break;
    }
    }
  }
  return llvm::Error::success();
}

llvm::Error CpuExecutor::runCall(const PlanFunction &f, const KernelCall &c) {
  if (c.Op == "Read") {
    std::vector<uint8_t> &s = States[c.State];
    if (c.Attrs.count("copy") && !s.empty())
      std::memcpy(Pointers[c.Outputs[0]], s.data(), s.size());
    return llvm::Error::success();
  }
  if (c.Op == "Assign") {
    std::vector<uint8_t> &s = States[c.State];
    if (!s.empty() && Pointers[c.Inputs[0]] != s.data())
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
  if (c.Op == "Constant") // placed on its own bytes at allocation
    return llvm::Error::success();
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
  // Update ops (SgdUpdate, Accumulate) write their state slot in place.
  if (c.State >= 0) {
    const TensorType &t = ThePlan.States[c.State].Type;
    static uint64_t emptyState = 0;
    void *data = States[c.State].empty() ? static_cast<void *>(&emptyState)
                                         : States[c.State].data();
    outs.push_back(TensorView{t.dtype(), t.shape(), data});
  }
  KernelContext ctx{c.Op,
                    ins,
                    outs,
                    c.Attrs,
                    mixSeed(Options.Seed, Step, randomStream(c)),
                    Workspace,
                    ThePlan.WorkspaceBytes};
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
    // Arguments live in the arena like any value, so that the planned bytes
    // are the bytes used.
    if (!args[i]->bytes().empty())
      std::memcpy(Pointers[f->Args[i]], args[i]->bytes().data(),
                  args[i]->bytes().size());
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
  // Copy into the existing storage: buffer pointers refer to it.
  std::copy(value.bytes().begin(), value.bytes().end(), States[i].begin());
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<Executor>>
headroom::createCpuExecutor(Plan plan, const ExecutorOptions &options) {
  auto e = std::make_unique<CpuExecutor>(std::move(plan), options);
  if (auto err = e->allocate())
    return err;
  return std::unique_ptr<Executor>(std::move(e));
}

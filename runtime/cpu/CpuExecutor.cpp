//===- CpuExecutor.cpp - The CPU backend ----------------------------------===//
//
// State, the arena and the kernels' workspace are one allocation made when
// the executor is created (each part at the plan's alignment), and every
// buffer's address is fixed then (compiler/Plan.h says where each lives); a
// run copies the arguments in and calls kernels, each given the workspace
// for its scratch. Nothing else tensor-sized is allocated, so the memory of
// a step is the plan's state + arena + workspace, its planned peak (the
// e2e tests measure the allocation).
//
//===----------------------------------------------------------------------===//
#include "compiler/Protocol.h"
#include "kernels/cpu/Kernel.h"
#include "runtime/Executor.h"

#include "compiler/Collectives.h"
#include "runtime/Communicator.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

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
  llvm::Error readStateBytes(size_t index, uint64_t offset,
                             llvm::MutableArrayRef<uint8_t> out) const override;
  llvm::Error writeStateBytes(size_t index, uint64_t offset,
                              llvm::ArrayRef<uint8_t> bytes) override;
  const std::map<std::string, Tensor> &gradients() const override {
    return Gradients;
  }
  void setStep(uint64_t step) override { Step = step; }
  uint64_t deviceBytes() const override { return Total; }

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

  /// State slot i's bytes, inside Block (an empty slot still gets an
  /// address, which nothing reads).
  uint8_t *state(int i) const { return StateData[i]; }
  uint64_t stateBytes(int i) const {
    return ThePlan.States[i].Type.sizeInBytes();
  }

  ExecutorOptions Options;
  struct AlignedDeleter {
    std::align_val_t Alignment;
    void operator()(uint8_t *p) const { ::operator delete[](p, Alignment); }
  };
  /// State slots, then the arena, then the workspace.
  std::unique_ptr<uint8_t[], AlignedDeleter> Block{nullptr,
                                                   {std::align_val_t(64)}};
  std::vector<uint8_t *> StateData;
  uint8_t *Arena = nullptr;
  uint8_t *Workspace = nullptr; // kernel scratch
  std::vector<void *> Pointers; // where each buffer's data is (may alias)
  std::map<std::string, Tensor> Gradients;
  uint64_t Step = 0;
  uint64_t Total = 0;
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
  uint64_t align = ThePlan.Alignment;
  std::vector<uint64_t> stateOffsets = ThePlan.stateOffsets();
  uint64_t arenaOffset = stateOffsets.back();
  uint64_t workspaceOffset = arenaOffset + ThePlan.ArenaBytes;
  uint64_t total = std::max<uint64_t>(
      align, workspaceOffset + ThePlan.WorkspaceBytes + ThePlan.LibraryBytes);
  Block = std::unique_ptr<uint8_t[], AlignedDeleter>(
      new (std::align_val_t(align), std::nothrow) uint8_t[total],
      AlignedDeleter{std::align_val_t(align)});
  Total = total;
  if (!Block)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "cannot allocate the plan's %llu bytes (state, arena, workspace)",
        (unsigned long long)total);
  // Parameters and moments start zeroed (the caller loads initial values).
  std::memset(Block.get(), 0, arenaOffset);
  for (size_t i = 0; i < ThePlan.States.size(); ++i)
    StateData.push_back(Block.get() + stateOffsets[i]);
  Arena = Block.get() + arenaOffset;
  // Always an address: runKernel tells a planned workspace (even of 0
  // bytes) from none.
  Workspace = Block.get() + workspaceOffset;
  Pointers.resize(ThePlan.Buffers.size(), nullptr);
  for (size_t i = 0; i < ThePlan.Buffers.size(); ++i) {
    const Placement &p = ThePlan.Placements[i];
    switch (p.Where) {
    case Placement::Kind::Arena:
      Pointers[i] = Arena + p.Offset;
      break;
    case Placement::Kind::State:
      Pointers[i] = state(p.Index);
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
  switch (c.Kind) {
  case OpKind::Read:
    if (readCopies(c.Attrs) && stateBytes(c.State))
      std::memcpy(Pointers[c.Outputs[0]], state(c.State), stateBytes(c.State));
    return llvm::Error::success();
  case OpKind::Assign:
    if (stateBytes(c.State) && Pointers[c.Inputs[0]] != state(c.State))
      std::memmove(state(c.State), Pointers[c.Inputs[0]], stateBytes(c.State));
    return llvm::Error::success();
  case OpKind::ParamGrad: {
    const TensorType &t = ThePlan.Buffers[c.Inputs[0]];
    const auto *p = static_cast<const uint8_t *>(Pointers[c.Inputs[0]]);
    Gradients[ThePlan.States[c.State].Name] =
        Tensor(t, std::vector<uint8_t>(p, p + t.sizeInBytes()));
    return llvm::Error::success();
  }
  case OpKind::Constant: // placed on its own bytes at allocation
    return llvm::Error::success();
  default:
    break;
  }
  if (isCollective(c.Kind)) {
    if (!Options.Comm)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "@%s call %u: %s needs the run's ranks",
                                     f.Name.c_str(), c.Id, c.Op.c_str());
    CollectiveArgs a = collectiveArgs(
        ThePlan, c, [&](int i) -> void * { return state(i); },
        [&](int b) { return Pointers[b]; });
    if (auto e = runCollective(*Options.Comm, c, *a.InType, a.In, *a.OutType,
                               a.Out, Workspace))
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "@%s call %u (%s): %s", f.Name.c_str(),
                                     c.Id, c.Op.c_str(),
                                     llvm::toString(std::move(e)).c_str());
    return llvm::Error::success();
  }
  llvm::SmallVector<TensorView, 4> ins, outs;
  for (int b : c.Inputs)
    ins.push_back(view(b));
  for (int b : c.Outputs)
    outs.push_back(view(b));
  // Update ops (SgdUpdate, Accumulate, ...) write their state slots in
  // place: the slots are the outputs, in the node's order.
  if (c.State >= 0)
    for (int s :
         llvm::concat<const int>(llvm::makeArrayRef(c.State), c.MoreStates)) {
      const TensorType &t = ThePlan.States[s].Type;
      outs.push_back(TensorView{t.dtype(), t.shape(), state(s)});
    }
  KernelContext ctx{c.Op,
                    ins,
                    outs,
                    c.Attrs,
                    mixSeed(Options.Seed, Step, c.randomStream()),
                    Workspace,
                    ThePlan.WorkspaceBytes};
  if (auto e = runKernel(ctx))
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
  const uint8_t *p = state(i);
  return Tensor(ThePlan.States[i].Type,
                std::vector<uint8_t>(p, p + stateBytes(i)));
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
  std::copy(value.bytes().begin(), value.bytes().end(), state(i));
  return llvm::Error::success();
}

/// Whether [offset, offset + size) lies inside state slot `index`.
static llvm::Error checkStateRange(const Plan &plan, size_t index,
                                   uint64_t offset, uint64_t size) {
  if (index >= plan.States.size())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "no state slot %zu", index);
  uint64_t bytes = plan.States[index].Type.sizeInBytes();
  if (offset > bytes || size > bytes - offset)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "bytes [%llu, %llu) are outside state @%s (%llu bytes)",
        (unsigned long long)offset, (unsigned long long)(offset + size),
        plan.States[index].Name.c_str(), (unsigned long long)bytes);
  return llvm::Error::success();
}

llvm::Error
CpuExecutor::readStateBytes(size_t index, uint64_t offset,
                            llvm::MutableArrayRef<uint8_t> out) const {
  if (auto e = checkStateRange(ThePlan, index, offset, out.size()))
    return e;
  std::memcpy(out.data(), state(index) + offset, out.size());
  return llvm::Error::success();
}

llvm::Error CpuExecutor::writeStateBytes(size_t index, uint64_t offset,
                                         llvm::ArrayRef<uint8_t> bytes) {
  if (auto e = checkStateRange(ThePlan, index, offset, bytes.size()))
    return e;
  std::memcpy(state(index) + offset, bytes.data(), bytes.size());
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<Executor>>
headroom::createCpuExecutor(Plan plan, const ExecutorOptions &options) {
  auto e = std::make_unique<CpuExecutor>(std::move(plan), options);
  if (auto err = e->allocate())
    return err;
  return std::unique_ptr<Executor>(std::move(e));
}

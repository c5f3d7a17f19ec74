//===- Lower.cpp - Lowering a Module to a memory-planned Plan -------------===//
#include "compiler/Plan.h"

#include "compiler/Collectives.h"
#include "compiler/Cost.h"
#include "compiler/MemoryPlan.h"
#include "compiler/Pools.h"
#include "compiler/Protocol.h"
#include "compiler/Streams.h"
#include "compiler/Target.h"
#include "compiler/UpdateAnalysis.h"
#include "compiler/Verifier.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringSet.h"

using namespace headroom;

int Plan::stateIndex(llvm::StringRef name) const {
  for (size_t i = 0; i < States.size(); ++i)
    if (States[i].Name == name)
      return static_cast<int>(i);
  return -1;
}

std::vector<uint64_t> Plan::stateOffsets() const {
  std::vector<uint64_t> offsets;
  uint64_t at[2] = {0, 0}; // device, host
  for (const PlanState &s : States) {
    offsets.push_back(at[s.Host]);
    at[s.Host] += (s.Type.sizeInBytes() + Alignment - 1) & ~(Alignment - 1);
  }
  offsets.push_back(at[0]);
  return offsets;
}

uint64_t Plan::hostStateBytes() const {
  uint64_t at = 0;
  for (const PlanState &s : States)
    if (s.Host)
      at += (s.Type.sizeInBytes() + Alignment - 1) & ~(Alignment - 1);
  return at;
}

const PlanFunction *Plan::function(llvm::StringRef name) const {
  for (const PlanFunction &f : Functions)
    if (f.Name == name)
      return &f;
  return nullptr;
}

uint64_t Plan::microBatchesPerStep() const {
  uint64_t n = 0;
  for (const DriverCall &d : Driver)
    n += d.SameBatch ? 0 : d.Repeat;
  return n;
}

namespace {

/// Lowers one function, appending its buffers to the plan.
class FunctionLowering {
public:
  FunctionLowering(Plan &plan, const Function &f, int functionIndex,
                   const llvm::DenseMap<const StateSlot *, int> &stateIds,
                   const Target &target, const LowerOptions &o)
      : P(plan), F(f), FnIndex(functionIndex), StateIds(stateIds), T(target),
        O(o), Pools(f), Updates(f) {}

  llvm::Expected<PlanFunction> lower();
  /// Transient buffers of this function with their lifetimes.
  std::vector<int> ArenaBuffers;
  std::vector<BufferLife> Lives;
  /// The value each arena buffer was made for, and the node at each
  /// schedule position (the report's peak).
  std::vector<const Value *> ArenaValues;
  std::vector<const Node *> Calls;
  /// The report's category of each arena buffer.
  std::vector<Transient> Categories;
  /// FLOPs of the function, and of its recomputed nodes.
  uint64_t Flops = 0, RecomputeFlops = 0;
  /// Schedule position of the loss (-1: none).
  int LossPos = -1;
  /// Buffers that are another arena buffer's bytes under another shape (a
  /// Reshape of a dying value), with the index in ArenaBuffers of the buffer
  /// whose place they share.
  std::vector<std::pair<int, int>> Aliases;
  /// The host pool's transient buffers (offload) with their lifetimes, the
  /// scratch its calls need, and the bytes of each transfer direction.
  std::vector<int> HostBuffers;
  std::vector<BufferLife> HostLives;
  uint64_t HostWorkspace = 0, ToHostBytes = 0, ToDeviceBytes = 0;
  /// What its collectives move (compiler/Collectives.h).
  uint64_t CollectiveBytes = 0, CollectiveElements = 0;

private:
  llvm::Error analyzeLiveness();
  Transient categoryOf(const Value *v, int first, int last) const;
  int addTransient(const Value *v, int first);
  KernelCall makeCall(const Node &n, int pos);
  int assignResult(const Node &n, Value *r, int pos, KernelCall &call);
  bool readNeedsCopy(const Node &read) const;
  int newBuffer(const Value *v, Placement place) {
    int id = P.Buffers.size();
    P.Buffers.push_back(v->type());
    P.Placements.push_back(place);
    Buffers[v] = id;
    return id;
  }

  Plan &P;
  const Function &F;
  int FnIndex;
  const llvm::DenseMap<const StateSlot *, int> &StateIds;
  const Target &T;
  const LowerOptions &O;
  llvm::DenseMap<const Value *, int> Buffers;
  llvm::DenseMap<const Node *, int> Position;
  /// The nodes that write each state slot (update ops), in schedule order.
  llvm::DenseMap<const StateSlot *, llvm::SmallVector<const Node *, 2>> Writers;
  llvm::DenseMap<const Value *, int> LastUse;
  PoolAssignment Pools;
  UpdateAnalysis Updates;
  /// The copy stream's schedule (empty when everything is in order).
  StreamSchedule Streams;
  /// Arena buffer id -> its index in ArenaBuffers (a view: its target's).
  llvm::DenseMap<int, int> ArenaSlot;
};

} // namespace

/// Ops whose result is the operand's bytes as they lie, under another shape.
static bool isView(const Node &n) {
  return (n.is(OpKind::Reshape) || n.is(OpKind::Flatten) ||
          n.is(OpKind::Squeeze) || n.is(OpKind::Unsqueeze)) &&
         n.result(0)->type().sizeInBytes() ==
             n.operand(0)->type().sizeInBytes();
}

bool FunctionLowering::readNeedsCopy(const Node &read) const {
  auto writers = Writers.find(read.state());
  if (writers == Writers.end())
    return false;
  for (const Node *w : writers->second) {
    if (Position.lookup(w) < Position.lookup(&read))
      continue;
    for (const Node *user : read.result(0)->users()) {
      // `return` is not a call: it uses its operands after every call.
      int at = user->info()->has(opflags::Terminator) ? Position.size()
                                                      : Position.lookup(user);
      if (user != w && at > Position.lookup(w))
        return true;
    }
  }
  return false;
}

/// Liveness: each node's schedule position, the writers of each slot, each
/// value's last use (a function result lives to the end; a device value a
/// copy-stream call reads, until the compute stream joins that call,
/// compiler/Streams.h), the loss's position.
llvm::Error FunctionLowering::analyzeLiveness() {
  int calls = 0;
  for (const Node &n : F.nodes()) {
    if (!n.info()->has(opflags::Terminator)) {
      Position[&n] = calls++;
      Calls.push_back(&n);
    }
    if (n.info()->has(opflags::WritesState))
      for (const StateSlot *s : n.states())
        if (!llvm::is_contained(Writers[s], &n))
          Writers[s].push_back(&n);
  }
  for (const Node &n : F.nodes())
    for (Value *v : n.operands())
      if (v)
        LastUse[v] = n.info()->has(opflags::Terminator)
                         ? calls
                         : std::max(LastUse.lookup(v), Position[&n]);
  if (const Node *loss = F.lossNode())
    LossPos = Position.lookup(loss);
  if (Pools.any() && !T.hasHostPool())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "@%s keeps values in a host pool, which the %s target does not have "
        "(offload is for --device cuda)",
        F.name().c_str(), T.name().str().c_str());
  if (Pools.any() || llvm::any_of(Calls, [&](const Node *n) {
        return isCollective(n->kind()) && T.overlapsCollective(*n);
      })) {
    Streams = scheduleStreams(Calls, Pools, T);
    for (size_t k = 0; k < Calls.size(); ++k)
      if (Streams.OnCopy[k])
        for (Value *v : Calls[k]->operands())
          if (v && !Pools.onHost(v))
            LastUse[v] = std::max(LastUse.lookup(v), Streams.JoinedAt[k]);
  }
  return llvm::Error::success();
}

/// The report's category of a transient value alive over [first, last].
Transient FunctionLowering::categoryOf(const Value *v, int first,
                                       int last) const {
  const Node *def = v->definingNode();
  if (def && isRecomputed(def->attrs()))
    return Transient::Recomputed;
  if (first > LossPos)
    return Updates.isGradient(v) ? Transient::Gradient : Transient::Temporary;
  return last > LossPos ? Transient::Activation : Transient::Temporary;
}

/// A new transient buffer for `v`, born at `first`: in the host pool's
/// arena or the device's, with its lifetime and category.
int FunctionLowering::addTransient(const Value *v, int first) {
  int last = std::max(first, LastUse.lookup(v));
  if (Pools.onHost(v)) {
    Placement host;
    host.Host = true;
    int id = newBuffer(v, host);
    HostBuffers.push_back(id);
    HostLives.push_back({v->type().sizeInBytes(), first, last});
    return id;
  }
  int id = newBuffer(v, Placement());
  ArenaSlot[id] = ArenaBuffers.size();
  ArenaBuffers.push_back(id);
  Lives.push_back({v->type().sizeInBytes(), first, last});
  ArenaValues.push_back(v);
  Categories.push_back(categoryOf(v, first, last));
  return id;
}

/// The call of `n` at `pos` without its outputs; counts its FLOPs, transfers
/// and collective bytes.
KernelCall FunctionLowering::makeCall(const Node &n, int pos) {
  uint64_t flops = nodeFlops(n);
  Flops += flops;
  if (isRecomputed(n.attrs()))
    RecomputeFlops += flops;
  KernelCall call;
  call.Kind = n.kind();
  call.Op = n.op();
  call.Attrs = n.attrs();
  call.Id = pos;
  call.Host = Pools.runsOnHost(n);
  call.Flops = flops;
  if (!Streams.WaitFor.empty()) {
    call.WaitFor = Streams.WaitFor[pos];
    call.Overlapped = isCollective(n.kind()) && Streams.OnCopy[pos];
  }
  if (n.is(OpKind::ToHost))
    ToHostBytes += n.result(0)->type().sizeInBytes();
  if (n.is(OpKind::ToDevice))
    ToDeviceBytes += n.result(0)->type().sizeInBytes();
  if (isCollective(n.kind())) {
    CollectiveBytes += collectiveBytes(n);
    CollectiveElements +=
        collectiveBytes(n) / dtypeSize(n.numOperands()
                                           ? n.operand(0)->type().dtype()
                                           : n.state()->type().dtype());
  }
  for (Value *v : n.operands())
    call.Inputs.push_back(v ? Buffers.lookup(v) : -1);
  if (n.state())
    call.State = StateIds.lookup(n.state());
  for (const StateSlot *s : n.states().drop_front(n.state() ? 1 : 0))
    call.MoreStates.push_back(StateIds.lookup(s));
  return call;
}

/// Buffer assignment of result `r` of `n` (at `pos`): its slot (a Read that
/// need not copy), the plan's constants, the dying operand's place (in
/// place, or a view of the same bytes), or a new transient buffer.
int FunctionLowering::assignResult(const Node &n, Value *r, int pos,
                                   KernelCall &call) {
  if (n.is(OpKind::Read)) {
    if (readNeedsCopy(n)) {
      markReadCopies(call.Attrs);
      return addTransient(r, pos);
    }
    Placement p;
    p.Where = Placement::Kind::State;
    p.Index = call.State;
    p.Host = n.state()->onHost();
    return newBuffer(r, p);
  }
  if (n.is(OpKind::Constant)) {
    Placement p;
    p.Where = Placement::Kind::Constant;
    p.Index = FnIndex;
    p.Call = pos;
    return newBuffer(r, p);
  }
  Value *first = n.operand(0);
  bool dying = O.InPlace && r == n.result(0) && !Pools.onHost(r) &&
               LastUse.lookup(first) == pos &&
               ArenaSlot.count(Buffers[first]) &&
               !llvm::is_contained(F.arguments(), first);
  // The dying operand's place in the arena now holds r: extend its life.
  auto takeOver = [&](int slot) {
    BufferLife &life = Lives[slot];
    life.Last = std::max<int64_t>(life.Last, LastUse.lookup(r));
    if (life.Last > LossPos && life.First <= LossPos)
      Categories[slot] = Transient::Activation;
    // A gradient summed into a partial one's buffer (a weight used
    // twice) is a gradient from here on.
    else if (life.First > LossPos && Updates.isGradient(r))
      Categories[slot] = Transient::Gradient;
  };
  if (dying && T.mayReuseOperand0(n)) {
    int id = Buffers[first];
    Buffers[r] = id;
    takeOver(ArenaSlot[id]);
    return id;
  }
  if (dying && isView(n)) {
    // The same bytes under another shape: a buffer of r's type at the
    // operand's place, so the kernel's copy is skipped.
    int slot = ArenaSlot[Buffers[first]];
    int id = newBuffer(r, Placement());
    ArenaSlot[id] = slot;
    Aliases.push_back({id, slot});
    takeOver(slot);
    return id;
  }
  return addTransient(r, pos);
}

llvm::Expected<PlanFunction> FunctionLowering::lower() {
  if (auto e = analyzeLiveness())
    return e;
  PlanFunction pf;
  pf.Name = F.name();
  for (Value *a : F.arguments()) {
    pf.Args.push_back(addTransient(a, 0));
    pf.ArgNames.push_back(a->name());
  }
  for (const Node &n : F.nodes()) {
    if (n.info()->has(opflags::Terminator)) {
      for (Value *v : n.operands())
        pf.Results.push_back(Buffers.lookup(v));
      continue;
    }
    if (auto e = T.checkSupported(n))
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(), "in @%s, %s: the %s target %s",
          F.name().c_str(), describeNode(n).c_str(), T.name().str().c_str(),
          llvm::toString(std::move(e)).c_str());
    int pos = Position[&n];
    KernelCall call = makeCall(n, pos);
    for (Value *r : n.results())
      call.Outputs.push_back(assignResult(n, r, pos, call));
    if (call.Host)
      HostWorkspace = std::max(HostWorkspace, T.workspaceBytes(n));
    else
      P.WorkspaceBytes = std::max(P.WorkspaceBytes, T.workspaceBytes(n));
    pf.Calls.push_back(std::move(call));
  }
  return pf;
}

/// The call at schedule position `peak` and the largest values live after
/// it, into r.
static void describePeak(const FunctionLowering &fl, int64_t peak,
                         MemoryReport &r) {
  r.PeakPosition = peak;
  r.PeakValues.clear();
  r.PeakOp.clear();
  r.PeakLoc.clear();
  if (peak < 0)
    return;
  if (size_t(peak) < fl.Calls.size()) {
    r.PeakOp = fl.Calls[peak]->op();
    r.PeakLoc = fl.Calls[peak]->loc();
  }
  std::vector<size_t> live;
  for (size_t i = 0; i < fl.Lives.size(); ++i)
    if (fl.Lives[i].First <= peak && peak <= fl.Lives[i].Last)
      live.push_back(i);
  llvm::stable_sort(live, [&](size_t a, size_t b) {
    return fl.Lives[a].Size > fl.Lives[b].Size;
  });
  if (live.size() > MemoryReport::kPeakValues)
    live.resize(MemoryReport::kPeakValues);
  for (size_t i : live) {
    const Value *v = fl.ArenaValues[i];
    PeakValue pv;
    pv.Name = v->name();
    pv.Op = "argument";
    if (const Node *def = v->definingNode()) {
      pv.Op = def->op();
      pv.Loc = def->loc();
    }
    pv.Bytes = fl.Lives[i].Size;
    pv.Category = fl.Categories[i];
    r.PeakValues.push_back(std::move(pv));
  }
}

/// The plan's state slots and the report's counts of them; `ids` gets each
/// slot's index.
static void lowerStates(const Module &m, Plan &plan,
                        llvm::DenseMap<const StateSlot *, int> &ids) {
  MemoryReport &r = plan.Report;
  for (const auto &s : m.states()) {
    ids[s.get()] = plan.States.size();
    PlanState ps{s->name(),   s->type(),  s->kind(), s->init(),
                 s->onHost(), llvm::None, -1};
    if (s->shardOf())
      ps.ShardOf = *s->shardOf();
    if (s->replicaOf())
      ps.ReplicaOf = ids.lookup(s->replicaOf());
    plan.States.push_back(std::move(ps));
    uint64_t bytes = s->type().sizeInBytes();
    if (s->shardOf()) {
      r.ShardBytes += bytes;
      r.ShardWholeBytes += s->shardOf()->sizeInBytes();
    }
    if (s->replicaOf())
      r.ReplicaBytes += bytes;
    if (s->onHost())
      r.HostState += bytes;
    switch (s->kind()) {
    case StateKind::Param:
    case StateKind::Replica:
      r.Parameters += bytes;
      r.LargestParameter = std::max(r.LargestParameter, bytes);
      break;
    case StateKind::Frozen:
      r.Frozen += bytes;
      break;
    case StateKind::Buffer:
      r.Buffers += bytes;
      break;
    case StateKind::Optimizer:
      r.OptimizerState += bytes;
      break;
    case StateKind::Gradient:
      r.GradientState += bytes;
      break;
    }
  }
}

/// Places a lowered function's transient buffers in the device and host
/// arenas; returns the device arena's assignment.
static ArenaAssignment placeArenas(const FunctionLowering &fl, Plan &plan) {
  ArenaAssignment a = planArena(fl.Lives, plan.Alignment);
  for (size_t i = 0; i < fl.ArenaBuffers.size(); ++i)
    plan.Placements[fl.ArenaBuffers[i]].Offset = a.Offsets[i];
  for (auto [id, slot] : fl.Aliases)
    plan.Placements[id].Offset = a.Offsets[slot];
  ArenaAssignment host = planArena(fl.HostLives, plan.Alignment);
  for (size_t i = 0; i < fl.HostBuffers.size(); ++i)
    plan.Placements[fl.HostBuffers[i]].Offset = host.Offsets[i];
  plan.HostArenaBytes = std::max(plan.HostArenaBytes, host.ArenaBytes);
  plan.HostWorkspaceBytes = std::max(plan.HostWorkspaceBytes, fl.HostWorkspace);
  return a;
}

/// Live bytes of a lowered function at each position, by category (aligned
/// sizes).
static std::vector<std::array<uint64_t, kTransientKinds>>
transientTimeline(const FunctionLowering &fl, uint64_t alignment) {
  int64_t positions = 0;
  for (const BufferLife &b : fl.Lives)
    positions = std::max(positions, b.Last + 1);
  std::vector<std::array<uint64_t, kTransientKinds>> timeline(positions,
                                                              {0, 0, 0, 0});
  for (size_t i = 0; i < fl.Lives.size(); ++i)
    for (int64_t p = fl.Lives[i].First; p <= fl.Lives[i].Last; ++p)
      timeline[p][index(fl.Categories[i])] +=
          (fl.Lives[i].Size + alignment - 1) & ~(alignment - 1);
  return timeline;
}

/// The report's picture of the function whose arena is the plan's: its
/// timeline, where transient memory peaks and what lives there, where the
/// loss and the updates are.
static void describeArena(const FunctionLowering &fl,
                          std::vector<std::array<uint64_t, kTransientKinds>> t,
                          MemoryReport &r) {
  r.Timeline = std::move(t);
  uint64_t best = 0;
  int64_t peak = -1;
  for (size_t p = 0; p < r.Timeline.size(); ++p) {
    const auto &at = r.Timeline[p];
    uint64_t total = at[0] + at[1] + at[2] + at[3];
    if (total > best) {
      best = total;
      peak = int64_t(p);
      r.Activations = at[index(Transient::Activation)];
      r.Gradients = at[index(Transient::Gradient)];
      r.Temporaries = at[index(Transient::Temporary)];
      r.Recomputed = at[index(Transient::Recomputed)];
    }
  }
  describePeak(fl, peak, r);
  r.LossPosition = fl.LossPos;
  r.UpdatePositions.clear();
  for (size_t pos = 0; pos < fl.Calls.size(); ++pos) {
    const Node &n = *fl.Calls[pos];
    bool update =
        n.is(OpKind::SgdUpdate) || n.is(OpKind::MomentumUpdate) ||
        n.is(OpKind::AdamWUpdate) || n.is(OpKind::AdamW8bitUpdate) ||
        (n.is(OpKind::Assign) && n.state()->kind() == StateKind::Param);
    if (update)
      r.UpdatePositions.push_back(int64_t(pos));
  }
}

llvm::Expected<Plan> headroom::lowerModule(const Module &m,
                                           const Target &target,
                                           const LowerOptions &o) {
  Plan plan;
  plan.TargetName = target.name().str();
  plan.Alignment = target.alignment();
  plan.LibraryBytes = target.libraryBytes();
  MemoryReport &r = plan.Report;
  if (m.ranks() > 1) {
    r.CollectiveLibraryBytes = target.collectiveLibraryBytes();
    plan.LibraryBytes += r.CollectiveLibraryBytes;
  }
  plan.Ranks = m.ranks();
  r.Ranks = m.ranks();
  llvm::DenseMap<const StateSlot *, int> stateIds;
  lowerStates(m, plan, stateIds);
  for (const LoraAdapter &a : m.adapters())
    plan.Adapters.push_back({a.Base->name(), a.A->name(), a.B->name(), a.Alpha,
                             a.Dropout, a.OutIn});
  if (m.driver().empty() && !m.functions().empty())
    plan.Driver.push_back({m.functions().front()->name(), 1, false});
  for (const DriverStep &d : m.driver())
    plan.Driver.push_back({d.Callee->name(), d.Repeat, d.SameBatch});
  r.PassesPerStep = 0;
  for (const DriverCall &d : plan.Driver)
    r.PassesPerStep += d.Repeat;
  for (const auto &f : m.functions()) {
    FunctionLowering fl(plan, *f, plan.Functions.size(), stateIds, target, o);
    auto pf = fl.lower();
    if (!pf)
      return pf.takeError();
    plan.Functions.push_back(std::move(*pf));
    uint64_t calls = 0; // per step
    for (const DriverCall &d : plan.Driver)
      calls += d.Function == f->name() ? d.Repeat : 0;
    r.StepFlops += calls * fl.Flops;
    r.RecomputeFlops += calls * fl.RecomputeFlops;
    r.ToHostBytes += calls * fl.ToHostBytes;
    r.ToDeviceBytes += calls * fl.ToDeviceBytes;
    r.CollectiveBytes += calls * fl.CollectiveBytes;
    r.CollectiveElements += calls * fl.CollectiveElements;
    ArenaAssignment a = placeArenas(fl, plan);
    // The most gradient bytes over every function, the timeline of the
    // largest arena.
    auto timeline = transientTimeline(fl, plan.Alignment);
    for (const auto &t : timeline)
      r.GradientsMaxLive =
          std::max(r.GradientsMaxLive, t[index(Transient::Gradient)]);
    if (fl.LossPos >= 0 && size_t(fl.LossPos) < timeline.size())
      r.SavedActivations =
          std::max(r.SavedActivations,
                   timeline[fl.LossPos][index(Transient::Activation)]);
    // Functions run one at a time: they share the arena.
    if (a.ArenaBytes < plan.ArenaBytes)
      continue;
    plan.ArenaBytes = a.ArenaBytes;
    r.ArenaBytes = a.ArenaBytes;
    r.ArenaLowerBound = a.LowerBound;
    describeArena(fl, std::move(timeline), r);
  }
  for (const PlanFunction &pf : plan.Functions)
    for (const KernelCall &c : pf.Calls)
      if (c.Kind == OpKind::Constant)
        r.Constants += c.Attrs.at("value").asTensor().bytes().size();
  r.Workspace = plan.WorkspaceBytes;
  r.LibraryBytes = plan.LibraryBytes;
  r.StatePadding = plan.stateOffsets().back() - r.DeviceStateBytes();
  r.HostStatePadding = plan.hostStateBytes() - r.HostState;
  r.HostArenaBytes = plan.HostArenaBytes;
  r.HostWorkspace = plan.HostWorkspaceBytes;
  return plan;
}

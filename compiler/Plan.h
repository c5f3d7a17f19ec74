//===- Plan.h - A lowered, memory-planned training step -------------------===//
//
// The plan is what the executors run: state slots, typed buffers with a fixed
// place each, and every function as a list of kernel calls naming buffers by
// index. lowerModule() builds it from a Module for one Target
// (compiler/Target.h) and plans its memory:
//   - a Read's result is the state slot itself (copied only when the slot is
//     overwritten while the read value is still needed);
//   - a Constant's result is the constant's own bytes in the plan;
//   - every other value lives in one arena at an offset planned from the
//     schedule's liveness (compiler/MemoryPlan.h), aligned as the target
//     says; a result may reuse its first operand's buffer when that operand
//     dies there and the target allows it;
//   - kernel scratch is one workspace, the largest any call declares to the
//     target, shared by all calls; the target's libraries add fixed bytes.
// So the memory of a step is exactly: state + arena + workspace + library
// bytes (+ the plan's constants), known before anything runs; the report
// says how it splits.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_RUNTIME_PLAN_H
#define HEADROOM_RUNTIME_PLAN_H

#include "compiler/IR.h"
#include "compiler/Protocol.h"

#include "llvm/Support/Error.h"

#include <array>

namespace headroom {

struct PlanState {
  std::string Name;
  TensorType Type;
  StateKind Kind;
  StateInit Init = StateInit::Model;
  bool Host = false; // in the pinned host pool (compiler/Pools.h)
  /// Data parallelism: a shard of a tensor of this type (StateSlot::
  /// shardOf), or a replica gathered from the shard at this state index.
  llvm::Optional<TensorType> ShardOf;
  int ReplicaOf = -1;
};

/// Where a buffer's bytes are.
struct Placement {
  enum class Kind { Arena, State, Constant };
  Kind Where = Kind::Arena;
  /// Arena: the host pool's arena instead of the device's.
  bool Host = false;
  uint64_t Offset = 0; // Arena: byte offset
  int Index = -1;      // State: state index; Constant: function index
  int Call = -1;       // Constant: the Constant call within that function
};

struct KernelCall {
  OpKind Kind = OpKind::Identity;
  std::string Op; // the op's name, as Ops.def spells it
  AttributeMap Attrs;
  std::vector<int> Inputs;     // buffer indices; -1 for an absent operand
  std::vector<int> Outputs;    // buffer indices
  int State = -1;              // state index for Read and update ops
  std::vector<int> MoreStates; // further slots a fused update writes
  uint32_t Id = 0;             // position in the function, for seeds and errors
  /// Runs on the CPU over host-pool buffers (compiler/Pools.h): the
  /// device kernel's code compiled for the host.
  bool Host = false;
  /// A compute-stream call first waits for the copy-stream call at this
  /// position of the function (compiler/Streams.h); -1: none.
  int WaitFor = -1;
  /// Its floating-point operations (compiler/Cost.h): the step estimate's
  /// compute time.
  uint64_t Flops = 0;
  /// A collective the target runs on the copy stream, overlapping the
  /// compute (Target::overlapsCollective).
  bool Overlapped = false;
  /// The stream its random draws come from: its `stream` (compiler/
  /// Protocol.h: copies of a node draw alike), else its position.
  uint64_t randomStream() const {
    return uint64_t(headroom::randomStream(Attrs).getValueOr(Id));
  }
  /// Whether it runs on the copy stream: transfers, host calls and
  /// overlapped collectives.
  bool onCopyStream() const {
    return Host || Overlapped || Kind == OpKind::ToHost ||
           Kind == OpKind::ToDevice;
  }
};

struct PlanFunction {
  std::string Name;
  std::vector<int> Args;             // buffers the caller fills
  std::vector<std::string> ArgNames; // the model's input names, per argument
  std::vector<int> Results;          // buffers returned
  std::vector<KernelCall> Calls;
};

/// What a transient (arena) value is, for the report (MemoryReport says
/// how each is decided); the timeline's columns, in this order.
enum class Transient : uint8_t {
  Activation = 0, ///< computed up to the loss, live after it
  Gradient = 1,   ///< after the loss, serving only state updates
  Temporary = 2,  ///< everything else
  Recomputed = 3, ///< the backward's clones (the recompute pass)
};
constexpr size_t kTransientKinds = 4;
inline size_t index(Transient t) { return static_cast<size_t>(t); }
/// "activation", "gradient", "temporary", "recomputed".
inline const char *transientName(Transient t) {
  static const char *const names[kTransientKinds] = {"activation", "gradient",
                                                     "temporary", "recomputed"};
  return names[index(t)];
}

/// A value live where transient memory peaks (the report names the
/// largest).
struct PeakValue {
  std::string Name, Op, Loc; // the value, its defining op and location
  uint64_t Bytes = 0;
  Transient Category = Transient::Temporary;
};

/// Bytes by category; what `headroom report` prints. Categories of transient
/// buffers: a value computed up to the loss and still live after it is an
/// activation saved for backward; a value computed after the loss that only
/// serves state updates (compiler/UpdateAnalysis.h) is a gradient -- the
/// parameter gradients and the optimizer's arithmetic on them; every other
/// value (activation gradients, forward scratch) is a temporary.
struct MemoryReport {
  uint64_t Parameters = 0, Frozen = 0, Buffers = 0, OptimizerState = 0;
  /// Gradients kept across calls: the accumulators of gradient accumulation.
  uint64_t GradientState = 0;
  uint64_t Constants = 0;
  /// The most gradient bytes live at any point of any function, and the
  /// largest parameter (LOMO's gradients approach it from above).
  uint64_t GradientsMaxLive = 0, LargestParameter = 0;
  /// Forward + backward passes over the data one optimizer step makes: the
  /// micro-batches of accumulation, plus LOMO's norm pass with clipping.
  uint64_t PassesPerStep = 1;
  uint64_t ArenaBytes = 0;      // planned peak of transient buffers
  uint64_t ArenaLowerBound = 0; // max bytes of transient buffers live at once
  // At the schedule position where transient memory peaks:
  uint64_t Activations = 0, Gradients = 0, Temporaries = 0;
  /// Values the backward recomputes (clones of the `recompute` pass).
  uint64_t Recomputed = 0;
  /// The forward values kept for the backward, live when the loss is
  /// computed (the most over the functions): what recomputation reduces.
  uint64_t SavedActivations = 0;
  /// Floating-point operations of one optimizer step (every call of the
  /// driver, compiler/Cost.h), and those of recomputed values among them.
  uint64_t StepFlops = 0, RecomputeFlops = 0;
  /// The pinned host pool (offload; docs/offload.md): the slots kept there
  /// (also counted in their categories above), the padding between them,
  /// the arena of host values, and the scratch of host calls.
  uint64_t HostState = 0, HostStatePadding = 0, HostArenaBytes = 0,
           HostWorkspace = 0;
  /// Bytes copied each way per optimizer step (ToHost, ToDevice).
  uint64_t ToHostBytes = 0, ToDeviceBytes = 0;
  /// Data parallelism: the ranks the step runs on (every figure here is
  /// one rank's), the bytes and elements each rank's collectives move per
  /// optimizer step (compiler/Collectives.h: the ZeRO paper's accounting),
  /// the bytes of the sharded slots (this rank's shards) and what they
  /// would be whole, and the replicas' bytes.
  uint64_t Ranks = 1;
  uint64_t CollectiveBytes = 0, CollectiveElements = 0;
  uint64_t ShardBytes = 0, ShardWholeBytes = 0, ReplicaBytes = 0;
  /// Of LibraryBytes, what the collective library holds (NCCL's buffers).
  uint64_t CollectiveLibraryBytes = 0;
  /// The host <-> device bytes per second the step estimate assumes
  /// (`--host-bandwidth`; the compile pipeline sets it).
  double HostBandwidth = 25e9;
  uint64_t Workspace = 0;    // kernel scratch declared by the backend
  uint64_t LibraryBytes = 0; // held by the backend's libraries (cuBLASLt)
  /// Bytes between state slots that start each at the target's alignment.
  uint64_t StatePadding = 0;
  uint64_t StateBytes() const {
    return Parameters + Frozen + Buffers + OptimizerState + GradientState;
  }
  uint64_t WorkspaceBytes() const { return Workspace + LibraryBytes; }
  /// State on the device.
  uint64_t DeviceStateBytes() const { return StateBytes() - HostState; }
  /// What the executor allocates on the device: state (aligned), arena,
  /// workspace.
  uint64_t PeakBytes() const {
    return DeviceStateBytes() + StatePadding + ArenaBytes + WorkspaceBytes();
  }
  uint64_t LowerBoundBytes() const {
    return DeviceStateBytes() + StatePadding + ArenaLowerBound +
           WorkspaceBytes();
  }
  /// What it allocates in pinned host memory (0 without offload).
  uint64_t HostPeakBytes() const {
    return HostState + HostStatePadding + HostArenaBytes + HostWorkspace;
  }
  /// Live transient bytes after each call of the main function, by category
  /// (activations, gradients, temporaries, recomputed): the report's
  /// timeline.
  std::vector<std::array<uint64_t, kTransientKinds>> Timeline;
  /// The call after which transient memory peaks (its position in the
  /// function of the timeline, op and location) and the largest values
  /// live there, largest first (at most kPeakValues).
  int64_t PeakPosition = -1;
  std::string PeakOp, PeakLoc;
  std::vector<PeakValue> PeakValues;
  static constexpr size_t kPeakValues = 10;
  /// The timeline's phases: where its function computes the loss (the
  /// forward ends there; -1: no loss) and where it updates parameters (the
  /// optimizer's update ops and Assigns to parameters).
  int64_t LossPosition = -1;
  std::vector<int64_t> UpdatePositions;
  uint64_t transientAtPeak() const {
    return Activations + Gradients + Temporaries + Recomputed;
  }
};

/// One entry of the driver loop: run a function Repeat times, each call on
/// the next micro-batch of the step's batch, or on the batch of the call
/// before it (SameBatch).
struct DriverCall {
  std::string Function;
  uint32_t Repeat = 1;
  bool SameBatch = false;
};

/// A LoRA adapter (compiler/IR.h LoraAdapter) by its states' names: what
/// saving the adapters (PEFT's files, or merged into the base) needs.
struct PlanAdapter {
  std::string Base, A, B;
  double Alpha = 0, Dropout = 0;
  bool OutIn = true;
};

struct Plan {
  /// The backend the plan was made for (Target::name()) and its alignment.
  std::string TargetName = "cpu";
  uint64_t Alignment = 64;
  /// The processes that run the plan together (data parallelism), each
  /// with its own shards and share of every batch.
  unsigned Ranks = 1;
  std::vector<PlanState> States;
  std::vector<PlanAdapter> Adapters;
  std::vector<TensorType> Buffers;
  std::vector<Placement> Placements; // one per buffer
  std::vector<PlanFunction> Functions;
  /// What one optimizer step runs, in order (compiler/IR.h, DriverStep).
  std::vector<DriverCall> Driver;
  uint64_t ArenaBytes = 0;
  /// Scratch shared by every kernel call: the largest any call declares.
  uint64_t WorkspaceBytes = 0;
  /// The host pool's arena and the scratch of host calls (offload).
  uint64_t HostArenaBytes = 0, HostWorkspaceBytes = 0;
  /// What the target's libraries hold (Target::libraryBytes()).
  uint64_t LibraryBytes = 0;
  MemoryReport Report;

  int stateIndex(llvm::StringRef name) const;
  /// Where each state slot starts in its pool's allocation: slot after
  /// slot, each at the alignment, the device's slots in one region and the
  /// host pool's in another. The last entry is where the device arena
  /// starts (the device state region's size); the workspace follows the
  /// arena.
  std::vector<uint64_t> stateOffsets() const;
  /// The host pool's state region (where the host arena starts); its
  /// workspace follows the host arena.
  uint64_t hostStateBytes() const;
  const PlanFunction *function(llvm::StringRef name) const;
  /// Calls per step that take a new micro-batch.
  uint64_t microBatchesPerStep() const;
};

class Target;

struct LowerOptions {
  /// Let results reuse a dying first operand's buffer where the target
  /// allows it.
  bool InPlace = true;
};

/// Lowers every function of a verified module for `target` and plans its
/// memory. A node the target cannot run is an error naming it.
llvm::Expected<Plan> lowerModule(const Module &m, const Target &target,
                                 const LowerOptions &o = {});

} // namespace headroom

#endif // HEADROOM_RUNTIME_PLAN_H

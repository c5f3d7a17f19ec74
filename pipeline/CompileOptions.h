//===- CompileOptions.h - How a training step is compiled -----------------===//
//
// Every choice that shapes a compiled step, in one struct: the import
// bindings, accumulation, the optimizer, the schedule, the target. The
// training flags (`--batch 8 --optimizer adamw ...`) are parsed into it in
// one place, here, whether they come from the command line (tools/ registers
// one cl option per row of compileFlags() and hands over what was given) or
// from a plan file's record of them; flags() prints them back, so a plan
// records exactly what made it. passPipeline() is the same choice as the
// pass pipeline `headroom opt --passes=` takes.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_PIPELINE_COMPILEOPTIONS_H
#define HEADROOM_PIPELINE_COMPILEOPTIONS_H

#include "compiler/OnnxImport.h"
#include "passes/Optimizer.h"
#include "passes/Recompute.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <utility>
#include <vector>

namespace headroom {

/// Whether the `schedule` pass orders the step. Auto lowers the step both
/// ways and keeps the lower peak (the pass is a heuristic; the plan's peak
/// is the truth); lomo and adalomo always schedule, fusing the updates into
/// the backward is what they are. Never keeps PyTorch's order.
enum class ScheduleMode { Auto, Always, Never };

/// What a step whose loss is NaN or infinite does: stop training with an
/// error (the default), skip (the step changes no state: the optimizer's
/// skip_nonfinite), or continue (train on, with a warning).
enum class NanPolicy { Stop, Skip, Continue };

struct CompileOptions {
  /// Import bindings; Import.Batch is the batch of a whole optimizer step.
  ImportOptions Import;
  /// Gradient accumulation: each step runs Accumulate micro-batches of
  /// Batch / Accumulate samples (the `accumulate` pass).
  unsigned Accumulate = 1;
  /// Data parallelism (the `data-parallel` pass): the processes one step
  /// runs on, each on Batch / Ranks samples, and the ZeRO stage (what is
  /// sharded over them: 0 nothing, 1 master weights and optimizer state, 2
  /// also accumulators, 3 also weights).
  unsigned Ranks = 1;
  unsigned Zero = 0;
  /// Without an optimizer the step only reports gradients (ParamGrad).
  bool ApplyOptimizer = true;
  OptimizerOptions Optimizer;
  ScheduleMode Schedule = ScheduleMode::Auto;
  /// Mixed precision (the `mixed-precision` pass): the float type the
  /// matmuls compute in (F32: none), and whether parameters keep an f32
  /// master copy (false: stored in Precision, updated with one rounding).
  DType Precision = DType::F32;
  bool MasterWeights = true;
  /// Activation recomputation (the `recompute` pass). With RecomputeBudget
  /// set, compile() searches the policies for the fewest recomputed FLOPs
  /// whose planned peak fits the budget instead (`--recompute budget=SIZE`).
  RecomputeOptions Recompute;
  uint64_t RecomputeBudget = 0;
  /// Auto-fit (pipeline/AutoFit.h): compile() searches the techniques for
  /// the cheapest mix whose peak fits; the optimizer may change only to
  /// these.
  uint64_t MemoryBudget = 0;
  std::vector<enum OptimizerOptions::Kind> AllowOptimizers;
  NanPolicy OnNan = NanPolicy::Stop;
  /// Sets every Dropout's ratio to 0 (to reproduce references computed
  /// without dropout; the trained model is then not the one described).
  bool DisableDropout = false;
  /// LoRA (the `lora` pass's options, "rank=8 alpha=16 dropout=0
  /// targets=q_proj,v_proj"); empty: every parameter trains.
  std::string Lora;
  /// With MemoryBudget: auto-fit may train LoRA adapters instead of every
  /// weight (`--allow lora`), ranked after every technique that trains all
  /// weights.
  bool AllowLora = false;
  /// `--allow qlora`: auto-fit may also store LoRA's frozen base as NF4.
  bool AllowQlora = false;
  /// `--allow-offload`: auto-fit may offload state (cuda), and ranks the
  /// candidates of a setting by estimated step time (compiler/Cost.h).
  bool AllowOffload = false;
  /// With AllowOffload: a candidate's pinned host pool must fit this
  /// (`--host-memory-budget`; the tools default it to this machine's
  /// available memory); 0: no limit.
  uint64_t HostMemoryBudget = 0;
  /// With Lora: the frozen matrices stored as NF4 (`--base-weights nf4`, the
  /// `quantize-base` pass; QLoRA).
  bool BaseNf4 = false;
  /// Attention as one FusedAttention op (the `fuse-attention` pass; exact up
  /// to rounding, no [seq, seq] tensors); false keeps the graph's own
  /// MatMul/Softmax (`--attention unfused`).
  bool FuseAttention = true;
  /// The output head and its cross-entropy as one LinearCrossEntropy (the
  /// `fuse-output-head` pass; `--output-head fused`): no [tokens, vocab]
  /// logits.
  bool FuseOutputHead = true;
  /// Rows per chunk of the fused head (0: the kernels' default).
  unsigned OutputHeadRows = 0;
  /// The `rematerialize` pass leaves values under this many bytes alone
  /// (its min_bytes; tests set 0 to exercise it on small models).
  uint64_t RematerializeMinBytes = 64 * 1024;
  /// The backend the plan is for (compiler/Target.h): "cpu" or "cuda".
  std::string Target = "cpu";
  /// State kept in the pinned host pool (the `offload` pass's state=,
  /// "optimizer,accumulators,parameters,activations" or some of them, in
  /// that order; empty: none; cuda only).
  std::string Offload;
  /// Saved activations under this many bytes stay on the device (the
  /// `offload` pass's min_bytes; tests set 0 for the small models).
  static constexpr uint64_t kDefaultOffloadMinBytes = 1 << 20;
  uint64_t OffloadMinBytes = kDefaultOffloadMinBytes;
  /// Host <-> device bytes per second the report's step estimate assumes
  /// (`--host-bandwidth`, in GB/s on the command line).
  static constexpr double kDefaultHostBandwidth = 25e9;
  double HostBandwidth = kDefaultHostBandwidth;

  /// The training flags that give these options, defaults filled in, as a
  /// command line: compileOptionsFromFlags(splitFlags(flags())) gives these
  /// options back.
  std::string flags() const;
  /// The passes that build the step, `headroom opt --passes=` syntax; with
  /// `scheduled`, the `schedule` pass last.
  std::string passPipeline(bool scheduled) const;
  /// The passes before recomputation and scheduling: gradientPipeline(),
  /// then updatePipeline().
  std::string basePipeline() const;
  /// The forward's rewrites (adapters, precision, fusions) and autodiff.
  std::string gradientPipeline() const;
  /// Accumulation (with --accum), the optimizer, a last canonicalize.
  std::string updatePipeline() const;
  /// ",rematerialize" with its options, as passPipeline appends it.
  std::string rematerializePass() const;
  /// ",data-parallel{ranks=N zero=K}" with --ranks, else "".
  std::string dataParallelPass() const;
  /// ",offload{state=...}" when state is offloaded, else "".
  std::string offloadPass() const;
  /// ",schedule", with overlap=1 where the collectives run on the copy
  /// stream (the cuda target, several ranks).
  std::string schedulePass() const;
};

/// One training flag as given: its name without dashes and its value ("1"
/// for a switch such as --nesterov). Repeatable flags (--shape, --freeze)
/// appear once per occurrence.
using FlagList = std::vector<std::pair<std::string, std::string>>;

struct FlagInfo {
  const char *Name;
  /// What the value looks like in --help; null for a switch.
  const char *ValueName;
  const char *Help;
  /// Given more than once, each occurrence counts (--shape, --freeze).
  bool Repeats = false;
  /// An import binding: `headroom opt` takes it too.
  bool Import = false;
};

/// Every training flag, in the order flags() prints them.
llvm::ArrayRef<FlagInfo> compileFlags();

/// The options the flags give; what was not given takes its default, which
/// may depend on another flag (adamw's lr is 1e-3). A bad value, an unknown
/// flag or a missing --batch/--shape is an error naming the flag.
/// `autoDevice` is what `--device auto` (the default) means: compiling
/// never looks at the machine, the caller does (runtime's defaultDevice()).
llvm::Expected<CompileOptions>
compileOptionsFromFlags(const FlagList &flags,
                        llvm::StringRef autoDevice = "cpu");
/// Only the import flags (`headroom opt`); others are an error.
llvm::Expected<ImportOptions> importOptionsFromFlags(const FlagList &flags);

/// Splits a command line as flags() writes it ("--batch 8 --nesterov ...").
llvm::Expected<FlagList> splitFlags(llvm::StringRef text);

} // namespace headroom

#endif // HEADROOM_PIPELINE_COMPILEOPTIONS_H

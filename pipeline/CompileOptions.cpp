//===- CompileOptions.cpp - How a training step is compiled ---------------===//
#include "pipeline/CompileOptions.h"

#include "compiler/Attribute.h"
#include "compiler/ByteSize.h"
#include "passes/Passes.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"

#include <cmath>

using namespace headroom;

static const FlagInfo kFlags[] = {
    {"batch", "N",
     "Samples per optimizer step: binds the leading dimension of every data "
     "input",
     false, true},
    {"shape", "NAME=DIMS", "Bind the full shape of a data input", true, true},
    {"freeze", "NAME,...", "Keep these initializers constant", true, true},
    {"optimizer", "sgd|momentum|adamw|lomo|adalomo|none",
     "Optimizer (default sgd; none: the step only computes gradients)"},
    {"lr", "LR", "Learning rate (default 0.01; adamw, adalomo 0.001)"},
    {"momentum", "M", "Momentum factor (default 0.9)"},
    {"nesterov", nullptr, "Nesterov momentum"},
    {"weight-decay", "WD", "Weight decay (default 0; adamw 0.01)"},
    {"betas", "B1,B2", "AdamW betas (default 0.9,0.999)"},
    {"eps", "EPS", "AdamW epsilon (default 1e-08)"},
    {"clip-grad-norm", "MAX", "Clip the global gradient norm (0: no clipping)"},
    {"fuse-update", nullptr,
     "sgd, momentum, adamw: update each parameter in the backward as soon as "
     "its gradient is complete, as lomo does (clipping and fp16's overflow "
     "check by a norm pass first)"},
    {"optimizer-state", "full|int8[,min=N]",
     "adamw's moments: full precision (default; f32 beside bf16/fp16 "
     "weights) or int8, bitsandbytes' block-wise 8-bit state for parameters "
     "of N+ elements (default 4096; an approximation of AdamW)"},
    {"accum", "K",
     "Gradient accumulation: split each step's --batch into K micro-batches"},
    {"ranks", "N",
     "Data parallelism (docs/distributed.md): the step runs on N processes, "
     "each on --batch / N samples of every batch; every figure is per rank"},
    {"zero", "0|1|2|3",
     "With --ranks: what is sharded over the ranks (ZeRO): 0 nothing (DDP; "
     "the default), 1 master weights and optimizer state, 2 also gradient "
     "accumulators, 3 also parameters and frozen weights"},
    {"schedule", "auto|always|never",
     "Order of the step: auto (the lower peak of PyTorch's order and updates "
     "fused into the backward), always, never (PyTorch's order)"},
    {"precision", "fp32|bf16|fp16",
     "Compute matmuls and convolutions in bf16 or fp16 (f32 where it is "
     "needed; fp16 scales the loss dynamically; default fp32)"},
    {"master-weights", "fp32|none",
     "With --precision bf16/fp16: keep f32 master weights (default) or "
     "store the parameters in bf16/fp16, updated in f32 (all but adalomo)"},
    {"recompute", "none|all|sqrt|selective|every=N|budget=SIZE",
     "Activation recomputation: which saved activations are recomputed in "
     "the backward (default none; budget=SIZE: the fewest recomputed FLOPs "
     "whose peak fits SIZE)"},
    {"recompute-keep", "NAME,...",
     "Values never recomputed (their names in the IR)", true},
    {"memory-budget", "SIZE|device",
     "Search precision, accumulation, recomputation (and with "
     "--allow-optimizer the optimizer) for the cheapest step that fits SIZE "
     "(device: the target's free memory now)"},
    {"allow", "lora,qlora",
     "With --memory-budget: auto-fit may train LoRA adapters (rank 8, alpha "
     "16, all-linear) instead of every weight, after everything else; qlora "
     "also stores their frozen base as NF4"},
    {"allow-offload", nullptr,
     "With --memory-budget and --device cuda: auto-fit may keep state in "
     "pinned host memory (--offload), ranking every candidate by its "
     "estimated step time (recomputed FLOPs and transfers on one scale)"},
    {"host-memory-budget", "SIZE",
     "With --allow-offload: the pinned host memory a candidate may take "
     "(default: the memory available on this machine now)"},
    {"allow-optimizer", "NAME,...",
     "With --memory-budget: optimizers it may switch to (lomo, adalomo)"},
    {"on-nan", "stop|skip|continue",
     "A step whose loss is NaN or infinite: stop with an error (default), "
     "skip it (no state changes), or continue"},
    {"lora", "rank=R,alpha=A,dropout=P,targets=NAME;NAME|all-linear",
     "Train low-rank adapters beside frozen weights (PEFT's LoRA): the "
     "targeted modules (e.g. targets=q_proj;v_proj) gain A [R, in] and B "
     "[out, R] scaled by A/R; every other parameter is frozen"},
    {"base-weights", "nf4",
     "With --lora: store every frozen matrix but the output head as NF4 "
     "(QLoRA; bitsandbytes' 4-bit NormalFloat with double quantization), "
     "dequantized in the compute type where it is used"},
    {"disable-dropout", nullptr,
     "Train with every Dropout ratio set to 0 (to reproduce references "
     "computed without dropout)"},
    {"output-head", "fused[,rows=N]|unfused",
     "The last product and its cross-entropy as one op that makes the "
     "[tokens, vocabulary] logits a chunk of rows at a time (fused; rows per "
     "chunk default to 32 MiB of logits; exact up to rounding; the default) "
     "or as the graph's own MatMul and loss (unfused)"},
    {"attention", "fused|unfused",
     "Attention as one fused op without the [seq, seq] scores (default "
     "fused; exact up to rounding) or as the graph's own "
     "MatMul/Softmax/MatMul (unfused)"},
    {"offload", "optimizer,accumulators,parameters,activations",
     "--device cuda: keep this state in pinned host memory (docs/offload.md): "
     "optimizer, the optimizer's state and the master weights it updates, "
     "updated on the CPU; accumulators, the gradient accumulators of --accum; "
     "parameters, every weight, copied to the device where it is used and "
     "updated on the CPU; activations, what the forward saves for the "
     "backward (1 MiB or more), copied back before the backward reads it"},
    {"host-bandwidth", "GB/s",
     "The host-device bandwidth the report's step-time estimate assumes "
     "(default 25, PCIe 4.0 x16 as measured)"},
    {"device", "cpu|cuda|auto",
     "The backend the plan is for (default auto: this machine's)"},
};

llvm::ArrayRef<FlagInfo> headroom::compileFlags() { return kFlags; }

static const FlagInfo *lookupFlag(llvm::StringRef name) {
  for (const FlagInfo &f : kFlags)
    if (name == f.Name)
      return &f;
  return nullptr;
}

static llvm::Error flagError(llvm::StringRef name, llvm::StringRef value,
                             const llvm::Twine &expected) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "--%s %s: expected %s", name.str().c_str(),
                                 value.str().c_str(), expected.str().c_str());
}

static llvm::Expected<double> number(llvm::StringRef name,
                                     llvm::StringRef value) {
  double d = 0;
  if (value.trim().getAsDouble(d) || !std::isfinite(d))
    return flagError(name, value, "a finite number");
  return d;
}

/// `--offload WHAT,...` into o.Offload (in the pass's order), refused
/// where the state it names does not exist or cannot move.
static llvm::Error parseOffload(llvm::StringRef value, CompileOptions &o) {
  auto fail = [](const llvm::Twine &msg) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--offload " + msg.str());
  };
  llvm::SmallVector<llvm::StringRef, 4> items;
  value.split(items, ',', -1, /*KeepEmpty=*/false);
  bool optimizer = false, accumulators = false, parameters = false,
       activations = false;
  for (llvm::StringRef w : items) {
    w = w.trim();
    if (w == "optimizer")
      optimizer = true;
    else if (w == "accumulators")
      accumulators = true;
    else if (w == "parameters")
      parameters = true;
    else if (w == "activations")
      activations = true;
    else
      return flagError("offload", w,
                       "optimizer, accumulators, parameters and/or "
                       "activations");
  }
  if (!optimizer && !accumulators && !parameters && !activations)
    return flagError("offload", value,
                     "optimizer, accumulators, parameters and/or activations");
  if (o.Target != "cuda")
    return fail(value + " needs --device cuda: the cpu target has one memory "
                        "and nothing to offload to");
  if (accumulators && o.Accumulate < 2)
    return fail("accumulators needs --accum K with K >= 2: one micro-batch "
                "per step keeps no accumulators");
  if (optimizer && (!o.ApplyOptimizer || !o.Optimizer.keepsState()))
    return fail("optimizer: --optimizer " +
                (o.ApplyOptimizer ? o.Optimizer.kindName().str()
                                  : std::string("none")) +
                " keeps no optimizer state (momentum, adamw and adalomo do)");
  std::vector<std::string> what;
  if (optimizer)
    what.push_back("optimizer");
  if (accumulators)
    what.push_back("accumulators");
  if (parameters)
    what.push_back("parameters");
  if (activations)
    what.push_back("activations");
  o.Offload = llvm::join(what, ",");
  return llvm::Error::success();
}

/// Applies one import flag to `o`.
static llvm::Error applyImportFlag(ImportOptions &o, llvm::StringRef name,
                                   llvm::StringRef value) {
  if (name == "batch") {
    if (value.getAsInteger(10, o.Batch) || o.Batch <= 0)
      return flagError(name, value, "a positive number of samples");
    return llvm::Error::success();
  }
  if (name == "shape") {
    auto [input, dims] = value.split('=');
    if (input.empty() || dims.empty())
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "--shape expects NAME=DIMS, got '%s'",
                                     value.str().c_str());
    auto parsed = parseShapeSpec(dims);
    if (!parsed)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(), "--shape %s: %s", value.str().c_str(),
          llvm::toString(parsed.takeError()).c_str());
    o.Shapes[input.str()] = *parsed;
    return llvm::Error::success();
  }
  assert(name == "freeze" && "not an import flag");
  llvm::SmallVector<llvm::StringRef, 4> names;
  value.split(names, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef n : names)
    o.Freeze.push_back(n.trim().str());
  return llvm::Error::success();
}

llvm::Expected<ImportOptions>
headroom::importOptionsFromFlags(const FlagList &flags) {
  ImportOptions o;
  for (const auto &[name, value] : flags) {
    const FlagInfo *info = lookupFlag(name);
    if (!info)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "unknown flag --%s", name.c_str());
    if (!info->Import)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "--%s is a training flag; `headroom opt` takes it with --compile",
          name.c_str());
    if (auto e = applyImportFlag(o, name, value))
      return e;
  }
  return o;
}

namespace {

/// The training flags of one command line, read group by group into a
/// CompileOptions (in this order, so the first wrong flag is the one
/// named). The last occurrence of a flag that does not repeat wins, as with
/// cl; --recompute-keep repeats.
class TrainingFlags {
public:
  TrainingFlags(const FlagList &flags, CompileOptions &o)
      : Flags(flags), O(o) {}
  /// Refuses unknown flags, applies the import flags, keeps the rest.
  llvm::Error collect();
  llvm::Error optimizer();
  llvm::Error steps();
  llvm::Error recompute();
  llvm::Error precision();
  llvm::Error budgets();
  llvm::Error run();
  llvm::Error adapters();
  llvm::Error fusion();
  llvm::Error device(llvm::StringRef autoDevice);

private:
  bool has(llvm::StringRef name) const { return Given.count(name) != 0; }
  llvm::StringRef get(llvm::StringRef name) const {
    auto it = Given.find(name);
    return it == Given.end() ? llvm::StringRef() : it->second;
  }
  /// A switch: given, and not 0 or false.
  bool sw(llvm::StringRef name) const {
    return has(name) && get(name) != "0" && get(name) != "false";
  }

  const FlagList &Flags;
  CompileOptions &O;
  llvm::StringMap<std::string> Given;
};

llvm::Error TrainingFlags::collect() {
  for (const auto &[name, value] : Flags) {
    const FlagInfo *info = lookupFlag(name);
    if (!info)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "unknown flag --%s", name.c_str());
    if (info->Import) {
      if (auto e = applyImportFlag(O.Import, name, value))
        return e;
      continue;
    }
    Given[name] = value;
  }
  if (O.Import.Batch <= 0 && O.Import.Shapes.empty())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "--batch N is required: the number of samples per step");
  return llvm::Error::success();
}

/// The optimizer and its hyperparameters.
llvm::Error TrainingFlags::optimizer() {
  CompileOptions &o = O;
  using K = enum OptimizerOptions::Kind;
  OptimizerOptions &opt = o.Optimizer;
  if (has("optimizer")) {
    if (get("optimizer") == "none") {
      o.ApplyOptimizer = false;
    } else if (auto kind = parseOptimizerKind(get("optimizer"))) {
      opt.Kind = *kind;
    } else {
      return flagError("optimizer", get("optimizer"),
                       "sgd, momentum, adamw, lomo, adalomo or none");
    }
  }
  // Defaults depend on the optimizer; a given value is always used (and
  // checked), even a negative one.
  bool adaptive = opt.Kind == K::AdamW || opt.Kind == K::AdaLomo;
  opt.Lr = adaptive ? 1e-3 : 0.01;
  opt.WeightDecay = opt.Kind == K::AdamW ? 0.01 : 0.0;
  struct {
    const char *Name;
    double *Field;
  } numbers[] = {{"lr", &opt.Lr},
                 {"momentum", &opt.Momentum},
                 {"weight-decay", &opt.WeightDecay},
                 {"eps", &opt.Eps},
                 {"clip-grad-norm", &opt.ClipGradNorm}};
  for (const auto &n : numbers) {
    if (!has(n.Name))
      continue;
    auto v = number(n.Name, get(n.Name));
    if (!v)
      return v.takeError();
    *n.Field = *v;
  }
  opt.Nesterov = sw("nesterov");
  opt.FuseUpdate = sw("fuse-update");
  if (opt.FuseUpdate && (opt.Kind == K::Lomo || opt.Kind == K::AdaLomo))
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "--fuse-update is for sgd, momentum and adamw: %s updates in the "
        "backward already",
        opt.kindName().str().c_str());
  if (has("optimizer-state")) {
    auto [v, min] = get("optimizer-state").split(',');
    if ((v != "full" && v != "int8") || (v == "full" && !min.empty()) ||
        (!min.empty() && (!min.consume_front("min=") ||
                          min.getAsInteger(10, opt.Int8MinElements) ||
                          opt.Int8MinElements < 0)))
      return flagError("optimizer-state", get("optimizer-state"),
                       "full, int8 or int8,min=N");
    opt.Int8State = v == "int8"; // the optimizer pass refuses other kinds
  }
  if (has("betas")) {
    auto [b1, b2] = get("betas").split(',');
    if (b1.trim().getAsDouble(opt.Beta1) || b2.trim().getAsDouble(opt.Beta2) ||
        !std::isfinite(opt.Beta1) || !std::isfinite(opt.Beta2))
      return flagError("betas", get("betas"), "two numbers B1,B2");
  }
  if (opt.WeightDecay < 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--weight-decay must not be negative");
  if (opt.Lr <= 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--lr must be positive");
  if (opt.ClipGradNorm < 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--clip-grad-norm must not be negative");

  return llvm::Error::success();
}

/// Accumulation, data parallelism, the schedule.
llvm::Error TrainingFlags::steps() {
  CompileOptions &o = O;
  if (has("accum") &&
      (get("accum").getAsInteger(10, o.Accumulate) || o.Accumulate == 0))
    return flagError("accum", get("accum"), "a number of micro-batches >= 1");
  if (has("ranks") && (get("ranks").getAsInteger(10, o.Ranks) || o.Ranks == 0 ||
                       o.Ranks > (1u << 20)))
    return flagError("ranks", get("ranks"), "a number of processes >= 1");
  if (has("zero") && (get("zero").getAsInteger(10, o.Zero) || o.Zero > 3))
    return flagError("zero", get("zero"), "0, 1, 2 or 3");
  if (has("zero") && o.Ranks < 2)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "--zero %u shards state over the ranks and needs --ranks 2 or more",
        o.Zero);
  if (has("schedule")) {
    llvm::StringRef s = get("schedule");
    if (s == "auto")
      o.Schedule = ScheduleMode::Auto;
    else if (s == "always")
      o.Schedule = ScheduleMode::Always;
    else if (s == "never")
      o.Schedule = ScheduleMode::Never;
    else
      return flagError("schedule", s, "auto, always or never");
  }
  return llvm::Error::success();
}

/// --recompute and --recompute-keep.
llvm::Error TrainingFlags::recompute() {
  CompileOptions &o = O;
  if (has("recompute")) {
    llvm::StringRef r = get("recompute");
    using P = RecomputeOptions::Policy;
    auto [policy, arg] = r.split('=');
    RecomputeOptions &rc = o.Recompute;
    if (policy == "none" && arg.empty())
      rc.Kind = P::None;
    else if (policy == "all" && arg.empty())
      rc.Kind = P::All;
    else if (policy == "sqrt" && arg.empty())
      rc.Kind = P::Sqrt;
    else if (policy == "selective" && arg.empty())
      rc.Kind = P::Selective;
    else if (policy == "every" && !arg.getAsInteger(10, rc.N) && rc.N > 0)
      rc.Kind = P::Every;
    else if (policy == "budget") {
      auto bytes = parseByteSize(arg);
      if (!bytes || *bytes == 0) {
        if (!bytes)
          llvm::consumeError(bytes.takeError());
        return flagError("recompute", r, "budget=SIZE such as 24GiB");
      }
      o.RecomputeBudget = *bytes;
    } else {
      return flagError("recompute", r,
                       "none, all, sqrt, selective, every=N or budget=SIZE");
    }
  }
  for (const auto &[name, value] : Flags) {
    if (name != "recompute-keep")
      continue;
    llvm::SmallVector<llvm::StringRef, 4> names;
    llvm::StringRef(value).split(names, ',', -1, /*KeepEmpty=*/false);
    for (llvm::StringRef n : names)
      o.Recompute.Keep.push_back(n.trim().str());
  }
  return llvm::Error::success();
}

/// Precision and master weights (fp16 scales the loss).
llvm::Error TrainingFlags::precision() {
  CompileOptions &o = O;
  if (has("precision")) {
    llvm::StringRef p = get("precision");
    if (p == "fp32")
      o.Precision = DType::F32;
    else if (p == "bf16")
      o.Precision = DType::BF16;
    else if (p == "fp16")
      o.Precision = DType::F16;
    else
      return flagError("precision", p, "fp32, bf16 or fp16");
  }
  if (has("master-weights")) {
    llvm::StringRef w = get("master-weights");
    if (w != "fp32" && w != "none")
      return flagError("master-weights", w, "fp32 or none");
    if (o.Precision == DType::F32 && w == "none")
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "--master-weights none needs --precision bf16 or fp16: in fp32 "
          "the weights are their own master copy");
    o.MasterWeights = w == "fp32";
  }
  // fp16's range needs the loss scaled (torch's GradScaler).
  o.Optimizer.LossScale = o.Precision == DType::F16;
  return llvm::Error::success();
}

/// The memory budgets and what auto-fit may choose.
llvm::Error TrainingFlags::budgets() {
  CompileOptions &o = O;
  if (has("memory-budget")) {
    auto bytes = parseByteSize(get("memory-budget"));
    if (!bytes || *bytes == 0) {
      if (!bytes)
        llvm::consumeError(bytes.takeError());
      return flagError("memory-budget", get("memory-budget"),
                       "a size such as 24GiB");
    }
    o.MemoryBudget = *bytes;
    for (const char *technique :
         {"precision", "master-weights", "recompute", "accum"})
      if (has(technique))
        return llvm::createStringError(
            llvm::inconvertibleErrorCode(),
            "--memory-budget chooses --%s itself: give one or the other",
            technique);
  }
  o.AllowOffload = sw("allow-offload");
  if (o.AllowOffload && !o.MemoryBudget)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--allow-offload needs --memory-budget");
  if (has("host-memory-budget")) {
    if (!o.AllowOffload)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "--host-memory-budget needs --allow-offload");
    auto bytes = parseByteSize(get("host-memory-budget"));
    if (!bytes || *bytes == 0) {
      if (!bytes)
        llvm::consumeError(bytes.takeError());
      return flagError("host-memory-budget", get("host-memory-budget"),
                       "a size such as 64GiB");
    }
    o.HostMemoryBudget = *bytes;
  }
  if (has("allow-optimizer")) {
    if (!o.MemoryBudget)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "--allow-optimizer needs --memory-budget");
    llvm::SmallVector<llvm::StringRef, 4> names;
    get("allow-optimizer").split(names, ',', -1, /*KeepEmpty=*/false);
    for (llvm::StringRef n : names) {
      auto kind = parseOptimizerKind(n.trim());
      if (!kind)
        return flagError("allow-optimizer", n,
                         "sgd, momentum, adamw, lomo or adalomo");
      o.AllowOptimizers.push_back(*kind);
    }
  }
  return llvm::Error::success();
}

/// What a step does on non-finite values, and dropout.
llvm::Error TrainingFlags::run() {
  CompileOptions &o = O;
  if (has("on-nan")) {
    llvm::StringRef v = get("on-nan");
    if (v == "stop")
      o.OnNan = NanPolicy::Stop;
    else if (v == "skip")
      o.OnNan = NanPolicy::Skip;
    else if (v == "continue")
      o.OnNan = NanPolicy::Continue;
    else
      return flagError("on-nan", v, "stop, skip or continue");
  }
  o.Optimizer.SkipNonFinite = o.OnNan == NanPolicy::Skip;
  o.DisableDropout = sw("disable-dropout");
  return llvm::Error::success();
}

/// LoRA, QLoRA and what auto-fit may add.
llvm::Error TrainingFlags::adapters() {
  CompileOptions &o = O;
  if (has("lora")) {
    // rank=8,alpha=16,targets=q_proj;v_proj -> the pass's "rank=8 alpha=16
    // targets=q_proj,v_proj"; checked by the pass's own parser.
    llvm::SmallVector<llvm::StringRef, 4> items;
    get("lora").split(items, ',', -1, false);
    std::vector<std::string> words;
    for (llvm::StringRef item : items) {
      std::string w = item.trim().str();
      std::replace(w.begin(), w.end(), ';', ',');
      words.push_back(w);
    }
    o.Lora = llvm::join(words, " ");
    if (auto p = createPassByName("lora", o.Lora); !p)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "--lora: %s",
                                     llvm::toString(p.takeError()).c_str());
  }
  if (has("allow")) {
    llvm::SmallVector<llvm::StringRef, 2> what;
    get("allow").split(what, ',', -1, /*KeepEmpty=*/false);
    for (llvm::StringRef w : what) {
      w = w.trim();
      if (w == "qlora")
        o.AllowQlora = true;
      else if (w != "lora")
        return flagError("allow", w, "lora or qlora");
    }
    if (!o.MemoryBudget)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "--allow needs --memory-budget");
    if (!o.Lora.empty())
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "--allow lora with --lora: --lora trains adapters in every "
          "candidate already; give one or the other");
    o.AllowLora = true;
  }
  if (has("base-weights")) {
    if (get("base-weights") != "nf4")
      return flagError("base-weights", get("base-weights"), "nf4");
    if (o.Lora.empty())
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "--base-weights nf4 needs --lora: NF4 stores the frozen base that "
          "LoRA's adapters train beside");
    o.BaseNf4 = true;
  }
  return llvm::Error::success();
}

/// The fused output head and attention.
llvm::Error TrainingFlags::fusion() {
  CompileOptions &o = O;
  if (has("output-head")) {
    auto [a, rows] = get("output-head").split(',');
    unsigned n = 0;
    if ((a != "fused" && a != "unfused") ||
        (!rows.empty() && (a != "fused" || !rows.consume_front("rows=") ||
                           rows.getAsInteger(10, n) || n == 0)))
      return flagError("output-head", get("output-head"),
                       "fused, fused,rows=N or unfused");
    o.FuseOutputHead = a == "fused";
    o.OutputHeadRows = n;
  }
  if (has("attention")) {
    llvm::StringRef a = get("attention");
    if (a != "fused" && a != "unfused")
      return flagError("attention", a, "fused or unfused");
    o.FuseAttention = a == "fused";
  }
  return llvm::Error::success();
}

/// The target, its host link, offload.
llvm::Error TrainingFlags::device(llvm::StringRef autoDevice) {
  CompileOptions &o = O;
  o.Target = has("device") ? get("device").str() : "auto";
  if (o.Target == "auto")
    o.Target = autoDevice.str();
  if (o.Target != "cpu" && o.Target != "cuda")
    return flagError("device", o.Target, "cpu, cuda or auto");
  if (has("host-bandwidth")) {
    auto gbs = number("host-bandwidth", get("host-bandwidth"));
    if (!gbs)
      return gbs.takeError();
    if (!(*gbs > 0) || !std::isfinite(*gbs))
      return flagError("host-bandwidth", get("host-bandwidth"),
                       "a positive number of GB/s");
    o.HostBandwidth = *gbs * 1e9;
  }
  if (has("offload"))
    if (auto e = parseOffload(get("offload"), o))
      return e;
  if (o.AllowOffload && o.Target != "cuda")
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "--allow-offload needs --device cuda: the cpu target has one memory");
  return llvm::Error::success();
}

} // namespace

llvm::Expected<CompileOptions>
headroom::compileOptionsFromFlags(const FlagList &flags,
                                  llvm::StringRef autoDevice) {
  CompileOptions o;
  TrainingFlags t(flags, o);
  using Group = llvm::Error (TrainingFlags::*)();
  for (Group g :
       {&TrainingFlags::collect, &TrainingFlags::optimizer,
        &TrainingFlags::steps, &TrainingFlags::recompute,
        &TrainingFlags::precision, &TrainingFlags::budgets, &TrainingFlags::run,
        &TrainingFlags::adapters, &TrainingFlags::fusion})
    if (llvm::Error e = (t.*g)())
      return e;
  if (llvm::Error e = t.device(autoDevice))
    return e;
  return o;
}

/// A value as a command line carries it: quoted when it has a space, a
/// quote or a backslash, or is empty.
static std::string quoteValue(llvm::StringRef v) {
  if (!v.empty() && v.find_first_of(" \t\"\\") == llvm::StringRef::npos)
    return v.str();
  std::string s = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\')
      s += '\\';
    s += c;
  }
  return s + "\"";
}

/// The --recompute value of a policy (budget aside).
static std::string recomputeFlag(const RecomputeOptions &r) {
  using P = RecomputeOptions::Policy;
  switch (r.Kind) {
  case P::None:
    return "none";
  case P::All:
    return "all";
  case P::Sqrt:
    return "sqrt";
  case P::Selective:
    return "selective";
  case P::Every:
    return "every=" + std::to_string(r.N);
  }
  llvm_unreachable("unknown recompute policy");
}

std::string CompileOptions::flags() const {
  using K = enum OptimizerOptions::Kind;
  std::vector<std::string> out;
  auto add = [&](const char *name, const std::string &value) {
    out.push_back(std::string("--") + name);
    if (!value.empty())
      out.back() += " " + quoteValue(value);
  };
  if (Import.Batch > 0)
    add("batch", std::to_string(Import.Batch));
  for (const auto &[name, dims] : Import.Shapes)
    add("shape", name + "=" + shapeString(dims));
  if (!Import.Freeze.empty())
    add("freeze", llvm::join(Import.Freeze, ","));
  const OptimizerOptions &o = Optimizer;
  if (!ApplyOptimizer) {
    add("optimizer", "none");
  } else {
    add("optimizer", o.kindName().str());
    add("lr", shortestDecimal(o.Lr));
    add("weight-decay", shortestDecimal(o.WeightDecay));
    if (o.Kind == K::Momentum) {
      add("momentum", shortestDecimal(o.Momentum));
      if (o.Nesterov)
        add("nesterov", "");
    }
    if (o.Kind == K::AdamW) {
      add("betas", shortestDecimal(o.Beta1) + "," + shortestDecimal(o.Beta2));
      add("eps", shortestDecimal(o.Eps));
    }
    if (o.ClipGradNorm > 0)
      add("clip-grad-norm", shortestDecimal(o.ClipGradNorm));
    if (o.FuseUpdate)
      add("fuse-update", "");
    if (o.Int8State)
      add("optimizer-state", "int8,min=" + std::to_string(o.Int8MinElements));
  }
  if (Precision != DType::F32) {
    add("precision", Precision == DType::BF16 ? "bf16" : "fp16");
    add("master-weights", MasterWeights ? "fp32" : "none");
  }
  if (Accumulate > 1)
    add("accum", std::to_string(Accumulate));
  if (Ranks > 1) {
    add("ranks", std::to_string(Ranks));
    add("zero", std::to_string(Zero));
  }
  if (RecomputeBudget)
    add("recompute", "budget=" + std::to_string(RecomputeBudget));
  else if (Recompute.Kind != RecomputeOptions::Policy::None)
    add("recompute", recomputeFlag(Recompute));
  if (!Recompute.Keep.empty())
    add("recompute-keep", llvm::join(Recompute.Keep, ","));
  if (Schedule == ScheduleMode::Always)
    add("schedule", "always");
  if (Schedule == ScheduleMode::Never)
    add("schedule", "never");
  if (MemoryBudget)
    add("memory-budget", std::to_string(MemoryBudget));
  if (!AllowOptimizers.empty()) {
    std::vector<std::string> names;
    for (auto k : AllowOptimizers) {
      OptimizerOptions n;
      n.Kind = k;
      names.push_back(n.kindName().str());
    }
    add("allow-optimizer", llvm::join(names, ","));
  }
  if (AllowLora)
    add("allow", AllowQlora ? "lora,qlora" : "lora");
  if (AllowOffload)
    add("allow-offload", "");
  if (HostMemoryBudget)
    add("host-memory-budget", std::to_string(HostMemoryBudget));
  if (OnNan != NanPolicy::Stop)
    add("on-nan", OnNan == NanPolicy::Skip ? "skip" : "continue");
  if (DisableDropout)
    add("disable-dropout", "");
  if (!Lora.empty()) {
    std::string flag = Lora;
    std::replace(flag.begin(), flag.end(), ',', ';');
    std::replace(flag.begin(), flag.end(), ' ', ',');
    add("lora", flag);
    if (BaseNf4)
      add("base-weights", "nf4");
  }
  if (!FuseAttention)
    add("attention", "unfused");
  if (!FuseOutputHead)
    add("output-head", "unfused");
  else if (OutputHeadRows)
    add("output-head", "fused,rows=" + std::to_string(OutputHeadRows));
  if (!Offload.empty())
    add("offload", Offload);
  if (HostBandwidth != kDefaultHostBandwidth)
    add("host-bandwidth", shortestDecimal(HostBandwidth / 1e9));
  add("device", Target);
  return llvm::join(out, " ");
}

std::string CompileOptions::basePipeline() const {
  return gradientPipeline() + "," + updatePipeline();
}

std::string CompileOptions::gradientPipeline() const {
  std::vector<std::string> passes;
  if (!Lora.empty())
    passes.push_back("lora{" + Lora + "}");
  if (!Lora.empty() && BaseNf4)
    passes.push_back("quantize-base{format=nf4}");
  if (DisableDropout)
    passes.push_back("disable-dropout");
  if (Precision != DType::F32)
    passes.push_back(std::string("mixed-precision{precision=") +
                     (Precision == DType::BF16 ? "bf16" : "fp16") +
                     " master=" + (MasterWeights ? "fp32" : "none") + "}");
  passes.push_back("canonicalize");
  if (FuseAttention)
    passes.push_back("fuse-attention");
  if (FuseOutputHead)
    passes.push_back(OutputHeadRows ? "fuse-output-head{rows=" +
                                          std::to_string(OutputHeadRows) + "}"
                                    : std::string("fuse-output-head"));
  passes.push_back("autodiff");
  return llvm::join(passes, ",");
}

std::string CompileOptions::updatePipeline() const {
  std::vector<std::string> passes;
  if (Accumulate > 1)
    passes.push_back("accumulate{steps=" + std::to_string(Accumulate) + "}");
  if (ApplyOptimizer)
    passes.push_back("optimizer{" + optimizerOptionsText(Optimizer) + "}");
  passes.push_back("canonicalize");
  return llvm::join(passes, ",");
}

std::string CompileOptions::rematerializePass() const {
  if (RematerializeMinBytes == 64 * 1024)
    return ",rematerialize";
  return ",rematerialize{min_bytes=" + std::to_string(RematerializeMinBytes) +
         "}";
}

std::string CompileOptions::dataParallelPass() const {
  if (Ranks == 1)
    return "";
  return ",data-parallel{ranks=" + std::to_string(Ranks) +
         " zero=" + std::to_string(Zero) + "}";
}

std::string CompileOptions::offloadPass() const {
  if (Offload.empty())
    return "";
  std::string s = ",offload{state=" + Offload;
  if (OffloadMinBytes != kDefaultOffloadMinBytes)
    s += " min_bytes=" + std::to_string(OffloadMinBytes);
  return s + "}";
}

std::string CompileOptions::passPipeline(bool scheduled) const {
  std::string s = basePipeline();
  if (Recompute.Kind != RecomputeOptions::Policy::None)
    s += ",recompute{" + Recompute.text() + "}";
  s += rematerializePass();
  s += dataParallelPass();
  s += offloadPass();
  if (scheduled)
    s += schedulePass();
  return s;
}

std::string CompileOptions::schedulePass() const {
  return Ranks > 1 && Target == "cuda" ? ",schedule{overlap=1}" : ",schedule";
}

llvm::Expected<FlagList> headroom::splitFlags(llvm::StringRef text) {
  // Words, with "..." quoting (backslash escapes inside).
  std::vector<std::string> words;
  for (size_t i = 0; i < text.size();) {
    if (text[i] == ' ' || text[i] == '\t') {
      ++i;
      continue;
    }
    std::string word;
    bool quoted = false;
    while (i < text.size() && (quoted || (text[i] != ' ' && text[i] != '\t'))) {
      char c = text[i++];
      if (c == '"') {
        quoted = !quoted;
        continue;
      }
      if (quoted && c == '\\' && i < text.size())
        c = text[i++];
      word += c;
    }
    if (quoted)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "unterminated quote in '%s'",
                                     text.str().c_str());
    words.push_back(std::move(word));
  }
  FlagList flags;
  for (size_t i = 0; i < words.size(); ++i) {
    llvm::StringRef w = words[i];
    if (!w.consume_front("--"))
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "expected a flag, got '%s'",
                                     words[i].c_str());
    auto [name, inlineValue] = w.split('=');
    const FlagInfo *info = lookupFlag(name);
    if (!info)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "unknown flag --%s", name.str().c_str());
    if (w.contains('=')) {
      flags.emplace_back(name.str(), inlineValue.str());
      continue;
    }
    if (!info->ValueName) {
      flags.emplace_back(name.str(), "1");
      continue;
    }
    if (i + 1 == words.size())
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "--%s needs a value (%s)",
                                     name.str().c_str(), info->ValueName);
    flags.emplace_back(name.str(), words[++i]);
  }
  return flags;
}

//===- CompileTest.cpp - pipeline/: options, flags, compile() -------------===//
//
// The training flags parse into CompileOptions in one place and print back
// to the same options; the pass pipeline a compile records rebuilds its
// step; the module compile() returns is the one its plan was lowered from,
// whichever schedule won; targets refuse what their backend cannot run at
// compile time, naming the node.
//
//===----------------------------------------------------------------------===//
#include "pipeline/Compile.h"
#include "pipeline/AutoFit.h"

#include "CompileUtil.h"
#include "compiler/ByteSize.h"
#include "compiler/OutputHeadShape.h"
#include "compiler/Parser.h"
#include "compiler/Printer.h"
#include "compiler/Zoo.h"
#include "kernels/cpu/CpuTarget.h"
#include "kernels/cuda/CudaTarget.h"
#include "passes/PassManager.h"
#include "passes/Passes.h"
#include "runtime/Executor.h"

using namespace headroom;

namespace {

CompileOptions fromText(const std::string &text) {
  auto flags = takeOrFail(splitFlags(text));
  return takeOrFail(compileOptionsFromFlags(flags));
}

std::string flagError(const std::string &text) {
  auto flags = splitFlags(text);
  if (!flags)
    return llvm::toString(flags.takeError());
  return errorOf(compileOptionsFromFlags(*flags));
}

TEST(CompileOptionsTest, FlagsRoundTrip) {
  for (const char *text :
       {"--batch 8", "--batch 8 --optimizer adamw --lr 3e-4 --betas 0.8,0.95",
        "--batch 8 --optimizer momentum --momentum 0.5 --nesterov "
        "--weight-decay 1e-4 --clip-grad-norm 0.7 --accum 4",
        "--shape x=4x16 --shape y=4 --freeze fc1.weight,fc1.bias --optimizer "
        "lomo --schedule always --disable-dropout --device cuda",
        "--batch 2 --optimizer none --schedule never",
        "--batch 2 --attention unfused",
        "--batch 2 --freeze \"a name\" --optimizer adalomo",
        "--batch 8 --recompute every=2 --recompute-keep h.0.attn.Softmax,x",
        "--batch 8 --recompute budget=1.5MiB --optimizer lomo",
        "--batch 8 --recompute selective --accum 2",
        "--batch 8 --precision fp16 --optimizer lomo --clip-grad-norm 1",
        "--batch 8 --precision bf16 --master-weights none",
        "--batch 8 --lora rank=4,alpha=8,targets=wq;wv --base-weights nf4",
        "--batch 8 --memory-budget 1GiB --allow lora,qlora",
        "--batch 8 --output-head fused",
        "--batch 8 --output-head fused,rows=5"}) {
    CompileOptions o = fromText(text);
    std::string printed = o.flags();
    CompileOptions again = fromText(printed);
    EXPECT_EQ(again.flags(), printed) << text;
    EXPECT_EQ(again.passPipeline(true), o.passPipeline(true)) << text;
  }
}

TEST(CompileOptionsTest, DefaultsFollowTheOptimizer) {
  CompileOptions sgd = fromText("--batch 4");
  EXPECT_EQ(sgd.Optimizer.Lr, 0.01);
  EXPECT_EQ(sgd.Optimizer.WeightDecay, 0.0);
  EXPECT_EQ(sgd.Target, "cpu");
  CompileOptions adamw = fromText("--batch 4 --optimizer=adamw");
  EXPECT_EQ(adamw.Optimizer.Lr, 1e-3);
  EXPECT_EQ(adamw.Optimizer.WeightDecay, 0.01);
  EXPECT_EQ(adamw.flags(), "--batch 4 --optimizer adamw --lr 0.001 "
                           "--weight-decay 0.01 --betas 0.9,0.999 --eps 1e-08 "
                           "--device cpu");
  EXPECT_EQ(adamw.passPipeline(false),
            "canonicalize,fuse-attention,fuse-output-head,autodiff,"
            "optimizer{kind=adamw lr=0.001 weight_decay=0.01 beta1=0.9 "
            "beta2=0.999 eps=1e-08},canonicalize,rematerialize");
  CompileOptions none = fromText("--batch 4 --optimizer none");
  EXPECT_FALSE(none.ApplyOptimizer);
  EXPECT_EQ(none.passPipeline(true),
            "canonicalize,fuse-attention,fuse-output-head,autodiff,"
            "canonicalize,rematerialize,schedule");
  CompileOptions unfused =
      fromText("--batch 4 --attention unfused --output-head unfused");
  EXPECT_FALSE(unfused.FuseAttention);
  EXPECT_FALSE(unfused.FuseOutputHead);
  EXPECT_EQ(unfused.passPipeline(false),
            "canonicalize,autodiff,optimizer{kind=sgd lr=0.01 "
            "weight_decay=0},canonicalize,rematerialize");
  CompileOptions accum =
      fromText("--batch 8 --accum 2 --disable-dropout --clip-grad-norm 1");
  EXPECT_EQ(accum.passPipeline(false),
            "disable-dropout,canonicalize,fuse-attention,fuse-output-head,"
            "autodiff,accumulate{steps=2},"
            "optimizer{kind=sgd lr=0.01 weight_decay=0 clip_grad_norm=1},"
            "canonicalize,rematerialize");
  // What --device auto means is the caller's (the tool asks the runtime).
  auto flags = takeOrFail(splitFlags("--batch 4 --device auto"));
  EXPECT_EQ(takeOrFail(compileOptionsFromFlags(flags, "cuda")).Target, "cuda");
}

TEST(CompileOptionsTest, BadFlagsNameTheFlag) {
  EXPECT_EQ(flagError("--batch 2 --attention flash"),
            "--attention flash: expected fused or unfused");
  EXPECT_EQ(flagError("--optimizer sgd"),
            "--batch N is required: the number of samples per step");
  EXPECT_EQ(flagError("--batch 0"),
            "--batch 0: expected a positive number of samples");
  EXPECT_EQ(flagError("--batch 4 --lr fast"),
            "--lr fast: expected a finite number");
  EXPECT_EQ(flagError("--batch 4 --lr nan"),
            "--lr nan: expected a finite number");
  EXPECT_EQ(flagError("--batch 4 --lr inf"),
            "--lr inf: expected a finite number");
  EXPECT_EQ(flagError("--batch 4 --lr -1"), "--lr must be positive");
  EXPECT_EQ(flagError("--batch 4 --betas 0.9"),
            "--betas 0.9: expected two numbers B1,B2");
  EXPECT_EQ(flagError("--batch 4 --schedule sometimes"),
            "--schedule sometimes: expected auto, always or never");
  EXPECT_EQ(flagError("--batch 4 --device tpu"),
            "--device tpu: expected cpu, cuda or auto");
  EXPECT_EQ(flagError("--batch 4 --colour blue"), "unknown flag --colour");
  EXPECT_EQ(flagError("--batch"), "--batch needs a value (N)");
  EXPECT_EQ(flagError("batch 4"), "expected a flag, got 'batch'");
  EXPECT_EQ(flagError("--batch 4 --freeze \"a"),
            "unterminated quote in '--batch 4 --freeze \"a'");
  EXPECT_EQ(flagError("--batch 4 --shape x"),
            "--shape expects NAME=DIMS, got 'x'");
  FlagList opt = {{"batch", "2"}, {"optimizer", "adamw"}};
  EXPECT_EQ(errorOf(importOptionsFromFlags(opt)),
            "--optimizer is a training flag; `headroom opt` takes it with "
            "--compile");
}

/// The call ops of every function: what two plans of the same step share.
std::vector<std::string> callOps(const Plan &p) {
  std::vector<std::string> ops;
  for (const PlanFunction &f : p.Functions) {
    ops.push_back("@" + f.Name);
    for (const KernelCall &c : f.Calls)
      ops.push_back(c.Op);
  }
  return ops;
}

/// compile() returns the module its plan was lowered from, scheduled or not
/// (lowering it again gives the same plan), and its pipeline text rebuilds
/// that module from the imported model.
TEST(CompileTest, TheModuleAndPipelineAreThePlans) {
  for (const char *model : {"mlp", "lenet", "gpt"})
    for (const char *flags :
         {"--batch 8", "--batch 8 --optimizer lomo --clip-grad-norm 1",
          "--batch 8 --optimizer adamw --schedule never",
          "--batch 8 --optimizer momentum --accum 2"}) {
      CompileOptions o = fromText(flags);
      std::string path = modelPath(std::string(model) + ".onnx");
      auto c = compile(path, o);
      ASSERT_TRUE(static_cast<bool>(c)) << llvm::toString(c.takeError());
      std::string what = std::string(model) + " " + flags;
      Plan again = takeOrFail(lowerModule(*c->M, cpuTarget()));
      EXPECT_EQ(callOps(again), callOps(c->ThePlan)) << what;
      EXPECT_EQ(again.Report.PeakBytes(), c->ThePlan.Report.PeakBytes())
          << what;

      ImportOptions import = o.Import;
      import.Batch /= o.Accumulate;
      auto m = takeOrFail(importOnnxFile(path, import));
      ASSERT_TRUE(m);
      PassManager pm;
      ASSERT_EQ(errorOf(pm.addPipeline(c->Pipeline)), "") << what;
      ASSERT_EQ(errorOf(pm.run(*m)), "") << what;
      Plan rebuilt = takeOrFail(lowerModule(*m, cpuTarget()));
      EXPECT_EQ(callOps(rebuilt), callOps(c->ThePlan)) << what;
      EXPECT_EQ(rebuilt.Report.PeakBytes(), c->ThePlan.Report.PeakBytes())
          << what;
    }
}

void printToString(const Module &m, std::string &out) {
  llvm::raw_string_ostream os(out);
  printModule(m, os);
}

/// The pass manager verifies only after a pass that says it changed the
/// module: every pass, run with its defaults on models at three stages (as
/// imported, built fp32, built bf16 with accumulation) and on a forward
/// whose Softmax fuse-attention declines (writing why), leaves the module's
/// text as it was whenever it says it changed nothing.
TEST(CompileTest, PassesThatChangeNothingSaySo) {
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> stages;
  for (const char *model : {"mlp", "lenet", "gpt", "llama"}) {
    std::string path = modelPath(std::string(model) + ".onnx");
    for (const char *flags : {"", "--optimizer adamw",
                              "--precision bf16 --accum 2 --optimizer lomo"}) {
      CompileOptions o = fromText(std::string("--batch 4 ") + flags);
      auto stage = *flags ? buildStep(path, o) : importStep(path, o);
      auto m = takeOrFail(std::move(stage));
      ASSERT_TRUE(m);
      stages.emplace_back(std::string(model) + " " + flags, std::move(m));
    }
  }
  auto declined =
      takeOrFail(parseModule("state @w : f32[8, 8] param\n"
                             "func @forward(%x: f32[2, 8]) {\n"
                             "  %w = Read(@w) : f32[8, 8]\n"
                             "  %s = MatMul(%x, %w) : f32[2, 8]\n"
                             "  %p = Softmax(%s) {axis = -1} : f32[2, 8]\n"
                             "  %loss = ReduceSum(%p) {keepdims = 0} : f32[]\n"
                             "  return %loss\n"
                             "}\n"));
  ASSERT_TRUE(declined);
  stages.emplace_back("a lone softmax", std::move(declined));

  // The options a pass cannot do without.
  const std::map<llvm::StringRef, const char *> needs = {
      {"lora", "targets=all-linear"},
      {"accumulate", "steps=2"},
      {"offload", "state=optimizer,activations"}};
  unsigned unchanged = 0, changed = 0;
  for (const auto &[label, m] : stages) {
    for (const PassInfo &info : allPasses()) {
      auto it = needs.find(info.Name);
      const char *options = it == needs.end() ? "" : it->second;
      auto pass = takeOrFail(createPassByName(info.Name, options));
      ASSERT_TRUE(pass) << info.Name.str();
      std::unique_ptr<Module> copy = m->clone();
      std::string before, after;
      printToString(*copy, before);
      auto ran = pass->run(*copy);
      if (!ran) { // options or input this pass needs: not this test's
        llvm::consumeError(ran.takeError());
        continue;
      }
      printToString(*copy, after);
      if (!*ran) {
        EXPECT_EQ(after, before)
            << label << ": " << info.Name.str() << " changed the module";
      }
      ++(*ran ? changed : unchanged);
    }
  }
  EXPECT_GT(unchanged, 20u);
  EXPECT_GT(changed, 20u);
}

/// With --schedule auto the plan is the lower peak of both orders: never
/// above either one alone.
TEST(CompileTest, AutoScheduleKeepsTheLowerPeak) {
  for (const char *model : {"mlp", "lenet", "gpt", "llama"}) {
    std::string path = modelPath(std::string(model) + ".onnx");
    uint64_t peak[3];
    const char *modes[] = {"auto", "always", "never"};
    for (int i = 0; i < 3; ++i)
      peak[i] =
          compilePlan(path,
                      fromText(std::string("--batch 8 --schedule ") + modes[i]))
              .Report.PeakBytes();
    EXPECT_EQ(peak[0], std::min(peak[1], peak[2])) << model;
  }
}

TEST(CompileOptionsTest, RecomputeFlags) {
  CompileOptions o = fromText("--batch 8 --recompute every=3");
  EXPECT_EQ(o.Recompute.Kind, RecomputeOptions::Policy::Every);
  EXPECT_EQ(o.Recompute.N, 3u);
  EXPECT_EQ(o.passPipeline(true),
            "canonicalize,fuse-attention,fuse-output-head,autodiff,"
            "optimizer{kind=sgd lr=0.01 weight_decay=0},canonicalize,"
            "recompute{policy=every n=3},rematerialize,schedule");
  EXPECT_EQ(fromText("--batch 8 --recompute budget=2GiB").RecomputeBudget,
            2ull << 30);
  EXPECT_EQ(flagError("--batch 8 --recompute every=0"),
            "--recompute every=0: expected none, all, sqrt, selective, "
            "every=N or budget=SIZE");
  EXPECT_EQ(flagError("--batch 8 --recompute budget=lots"),
            "--recompute budget=lots: expected budget=SIZE such as 24GiB");
  CompileOptions fp16 = fromText("--batch 8 --precision fp16");
  EXPECT_TRUE(fp16.Optimizer.LossScale);
  EXPECT_NE(fp16.passPipeline(false).find("loss_scale=dynamic"),
            std::string::npos);
  EXPECT_FALSE(fromText("--batch 8 --precision bf16").Optimizer.LossScale);
  CompileOptions fused = fromText("--batch 8 --optimizer adamw --fuse-update");
  EXPECT_TRUE(fused.Optimizer.FuseUpdate && fused.Optimizer.fused());
  EXPECT_NE(fused.flags().find("--fuse-update"), std::string::npos);
  EXPECT_NE(fused.passPipeline(true).find("fuse_update=1"), std::string::npos);
  EXPECT_EQ(flagError("--batch 8 --optimizer lomo --fuse-update"),
            "--fuse-update is for sgd, momentum and adamw: lomo updates in the "
            "backward already");
  CompileOptions fp16None =
      fromText("--batch 8 --precision fp16 --master-weights none");
  EXPECT_FALSE(fp16None.MasterWeights);
  EXPECT_TRUE(fp16None.Optimizer.LossScale);
  EXPECT_EQ(flagError("--batch 8 --master-weights none"),
            "--master-weights none needs --precision bf16 or fp16: in fp32 "
            "the weights are their own master copy");
  EXPECT_EQ(takeOrFail(parseByteSize("1.5 KiB")), 1536u);
  EXPECT_EQ(takeOrFail(parseByteSize("24GB")), 24ull << 30);
  EXPECT_EQ(errorOf(parseByteSize("12 parsecs")),
            "'12 parsecs' is not a byte count");
}

/// budget=SIZE keeps the candidate with the fewest recomputed FLOPs among
/// those that fit (of every candidate, though the search compiles fewer); a
/// budget nothing fits names the smallest peak and how.
TEST(CompileTest, RecomputeBudgetPicksTheCheapestFit) {
  std::string path = modelPath("gpt.onnx");
  CompileOptions o = fromText("--batch 8 --optimizer adamw");
  auto built = takeOrFail(buildStep(path, o));
  ASSERT_TRUE(built);
  std::vector<RecomputeChoice> choices = RecomputeSpace::of(*built).all();
  auto all = takeOrFail(compileRecomputeCandidates(*built, o, choices));
  ASSERT_EQ(all.size(), choices.size());
  EXPECT_EQ(choices.front().Label, "none");
  uint64_t none = all.front().ThePlan.Report.PeakBytes(), lowest = none;
  for (const Compiled &c : all)
    lowest = std::min(lowest, c.ThePlan.Report.PeakBytes());
  ASSERT_LT(lowest, none);
  for (uint64_t budget : {none, (none + lowest) / 2, lowest}) {
    CompileOptions b = o;
    b.RecomputeBudget = budget;
    Plan plan = compilePlan(path, b);
    EXPECT_LE(plan.Report.PeakBytes(), budget);
    for (const Compiled &c : all) {
      if (c.ThePlan.Report.PeakBytes() <= budget) {
        EXPECT_LE(plan.Report.RecomputeFlops, c.ThePlan.Report.RecomputeFlops)
            << budget;
      }
    }
  }
  CompileOptions tight = o;
  tight.RecomputeBudget = lowest - 1;
  std::string error = errorOf(compile(path, tight));
  EXPECT_NE(error.find("no recomputation fits; the smallest peak reachable "
                       "is " +
                       formatBytes(lowest)),
            std::string::npos)
      << error;
}

/// --memory-budget: the cheapest candidate that fits, exact techniques
/// first, fewest recomputed FLOPs, then fewest micro-steps; an impossible
/// budget names the smallest peak reachable.
TEST(AutoFitTest, PicksTheCheapestFit) {
  std::string path = modelPath("gpt.onnx");
  CompileOptions o = fromText("--batch 8 --optimizer adamw");
  uint64_t plain = compilePlan(path, o).Report.PeakBytes();
  // Room for the plain step: it is the winner, nothing recomputed.
  o.MemoryBudget = plain;
  auto fit = takeOrFail(autoFit(path, o));
  ASSERT_FALSE(fit.Tried.empty());
  EXPECT_TRUE(fit.Tried.front().Fits);
  EXPECT_EQ(fit.Tried.front().Rank, 0);
  EXPECT_EQ(fit.Tried.front().RecomputeFlops, 0u);
  EXPECT_EQ(fit.Tried.front().Options.Accumulate, 1u);
  EXPECT_EQ(fit.Best.ThePlan.Report.PeakBytes(), plain);
  // Less room: still exact (recomputation or accumulation), within budget,
  // and no fitting exact candidate recomputes fewer FLOPs.
  o.MemoryBudget = plain * 3 / 4;
  fit = takeOrFail(autoFit(path, o));
  const FitCandidate &w = fit.Tried.front();
  EXPECT_TRUE(w.Fits);
  EXPECT_EQ(w.Rank, 0);
  EXPECT_LE(fit.Best.ThePlan.Report.PeakBytes(), o.MemoryBudget);
  for (const FitCandidate &c : fit.Tried)
    if (c.Fits && c.Rank == 0) {
      EXPECT_LE(w.RecomputeFlops, c.RecomputeFlops) << c.Label;
      if (w.RecomputeFlops == c.RecomputeFlops) {
        EXPECT_LE(w.Options.Accumulate, c.Options.Accumulate) << c.Label;
      }
    }
  EXPECT_FALSE(fit.Why.empty());
  // compile() takes the same winner.
  EXPECT_EQ(compilePlan(path, o).Report.PeakBytes(),
            fit.Best.ThePlan.Report.PeakBytes());
  // Below the state itself: nothing fits, and the error says how close.
  o.MemoryBudget = 1024;
  std::string error = errorOf(autoFit(path, o));
  EXPECT_NE(error.find("--memory-budget 1.00 KiB: nothing fits; the smallest "
                       "peak reachable is "),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("--allow-optimizer lomo"), std::string::npos) << error;
  EXPECT_EQ(flagError("--batch 8 --memory-budget 1GiB --recompute all"),
            "--memory-budget chooses --recompute itself: give one or the "
            "other");
  EXPECT_EQ(flagError("--batch 8 --allow-optimizer lomo"),
            "--allow-optimizer needs --memory-budget");
}

/// A wide, shallow llama (6 layers, d 256, vocab 1000, no weights) for the
/// auto-fit tests: its state dominates its activations. "" if not written.
std::string autofitZoo(const std::string &name) {
  ZooConfig z;
  z.Arch = "llama";
  z.Layers = 6, z.DModel = 256, z.Heads = 4, z.Ffn = 1024, z.Vocab = 1000;
  z.Seq = 8;
  z.Weights = ZooConfig::Weights::None;
  std::string path = testing::TempDir() + "/" + name + ".onnx";
  auto written = writeZooModel(z, path);
  if (!written) {
    ADD_FAILURE() << llvm::toString(written.takeError());
    return "";
  }
  return path;
}

/// With an optimizer allowed, a budget only a fused optimizer meets is met
/// by it: a model whose AdamW state alone, even in 8 bits, exceeds the
/// budget.
TEST(AutoFitTest, ChangesTheOptimizerOnlyWhenAllowed) {
  std::string path = autofitZoo("autofit_llama");
  ASSERT_FALSE(path.empty());
  CompileOptions o = fromText("--batch 2 --optimizer adamw");
  uint64_t adamwState = compilePlan(path, o).Report.StateBytes();
  uint64_t lean =
      compilePlan(path, fromText("--batch 2 --optimizer lomo --precision bf16 "
                                 "--master-weights none --recompute every=1"))
          .Report.PeakBytes();
  ASSERT_LT(lean, adamwState);
  // AdamW's f32 moments do not fit beside bf16 weights: 8-bit ones do, an
  // approximation ranked after every exact mix.
  uint64_t bf16State =
      compilePlan(path, fromText("--batch 2 --optimizer adamw --precision "
                                 "bf16 --master-weights none"))
          .Report.StateBytes();
  ASSERT_LT(bf16State, adamwState);
  o.MemoryBudget = bf16State - 1;
  auto int8 = takeOrFail(autoFit(path, o));
  EXPECT_TRUE(int8.Tried.front().Options.Optimizer.Int8State);
  EXPECT_EQ(int8.Tried.front().Rank, 3);
  EXPECT_NE(int8.Why.find("8 bits"), std::string::npos) << int8.Why;
  // Below 8-bit AdamW's state, only another optimizer fits.
  uint64_t int8State =
      compilePlan(path, fromText("--batch 2 --optimizer adamw --precision "
                                 "bf16 --master-weights none "
                                 "--optimizer-state int8"))
          .Report.StateBytes();
  ASSERT_LT(lean, int8State);
  o.MemoryBudget = int8State - 1;
  std::string error = errorOf(autoFit(path, o));
  EXPECT_NE(error.find("nothing fits"), std::string::npos) << error;
  o.AllowOptimizers = {OptimizerOptions::Kind::Lomo};
  auto fit = takeOrFail(autoFit(path, o));
  ASSERT_FALSE(fit.Tried.empty());
  EXPECT_EQ(fit.Tried.front().Options.Optimizer.Kind,
            OptimizerOptions::Kind::Lomo);
  EXPECT_GE(fit.Tried.front().Rank, 4);
  EXPECT_LE(fit.Best.ThePlan.Report.PeakBytes(), o.MemoryBudget);
}

/// Clipping keeps every gradient to the end of the backward; when nothing
/// else fits, auto-fit frees each at its update with --fuse-update (exact,
/// the same weights) and counts its norm pass as extra FLOPs.
TEST(AutoFitTest, FusesUpdatesWhenClippingKeepsGradients) {
  std::string path = autofitZoo("autofit_fuse");
  ASSERT_FALSE(path.empty());
  const char *base = "--batch 2 --optimizer adamw --clip-grad-norm 1 "
                     "--precision bf16 --master-weights none";
  uint64_t fused =
      compilePlan(path, fromText(std::string(base) + " --fuse-update"))
          .Report.PeakBytes();
  uint64_t unfused =
      compilePlan(path, fromText(std::string(base) + " --recompute every=1"))
          .Report.PeakBytes();
  ASSERT_LT(fused, unfused);
  CompileOptions o = fromText("--batch 2 --optimizer adamw --clip-grad-norm 1");
  o.MemoryBudget = fused;
  auto fit = takeOrFail(autoFit(path, o));
  const FitCandidate &winner = fit.Tried.front();
  EXPECT_TRUE(winner.Options.Optimizer.FuseUpdate) << winner.Label;
  EXPECT_FALSE(winner.Options.Optimizer.Int8State) << winner.Label;
  EXPECT_EQ(winner.Rank, 2);
  // The norm pass: about one more forward and backward.
  EXPECT_GT(winner.ExtraFlops, winner.StepFlops / 3);
  EXPECT_LE(fit.Best.ThePlan.Report.PeakBytes(), o.MemoryBudget);
}

/// --allow lora: adapters instead of every weight, only when allowed and
/// only when nothing that trains every weight fits (rank 7).
TEST(AutoFitTest, TrainsLoraOnlyWhenAllowed) {
  std::string path = autofitZoo("autofit_lora");
  ASSERT_FALSE(path.empty());
  const char *lean = "--batch 2 --precision bf16 --master-weights none "
                     "--recompute every=1";
  // The leanest mix that trains every weight with AdamW: 8-bit moments.
  uint64_t int8 =
      compilePlan(path, fromText(std::string(lean) + " --optimizer adamw "
                                                     "--optimizer-state int8"))
          .Report.PeakBytes();
  uint64_t lora =
      compilePlan(path, fromText(std::string(lean) +
                                 " --optimizer adamw --lora "
                                 "rank=8,alpha=16,targets=all-linear"))
          .Report.PeakBytes();
  ASSERT_LT(lora, int8 * 3 / 4); // recomputing more lowers int8's little
  CompileOptions o = fromText("--batch 2 --optimizer adamw");
  o.MemoryBudget = (lora + int8) / 2;
  o.AllowOptimizers = {OptimizerOptions::Kind::Momentum};
  std::string error = errorOf(autoFit(path, o));
  EXPECT_NE(error.find("--allow lora lets it train LoRA adapters"),
            std::string::npos)
      << error;
  o.AllowLora = true;
  auto fit = takeOrFail(autoFit(path, o));
  const FitCandidate &winner = fit.Tried.front();
  EXPECT_EQ(winner.Rank, 7);
  EXPECT_EQ(winner.Options.Lora,
            "rank=8 alpha=16 dropout=0 targets=all-linear");
  EXPECT_NE(fit.Why.find("LoRA trains adapters"), std::string::npos) << fit.Why;
  EXPECT_LE(fit.Best.ThePlan.Report.PeakBytes(), o.MemoryBudget);
  EXPECT_FALSE(fit.Best.ThePlan.Adapters.empty());
  EXPECT_EQ(flagError("--batch 2 --memory-budget 1GiB --allow lora --lora "
                      "rank=4,targets=wq"),
            "--allow lora with --lora: --lora trains adapters in every "
            "candidate already; give one or the other");
}

/// --allow qlora: the same adapters on an NF4 base, ranked after LoRA on
/// bf16 weights (rank 8), only when that does not fit either.
TEST(AutoFitTest, StoresTheBaseInNf4OnlyWhenAllowed) {
  std::string path = autofitZoo("autofit_qlora");
  ASSERT_FALSE(path.empty());
  std::string lean = "--batch 2 --precision bf16 --master-weights none "
                     "--recompute every=1 --optimizer adamw --lora "
                     "rank=8,alpha=16,targets=all-linear";
  uint64_t lora = compilePlan(path, fromText(lean)).Report.PeakBytes();
  uint64_t qlora = compilePlan(path, fromText(lean + " --base-weights nf4"))
                       .Report.PeakBytes();
  ASSERT_LT(qlora, lora * 3 / 4);
  CompileOptions o = fromText("--batch 2 --optimizer adamw");
  o.MemoryBudget = (lora + qlora) / 2;
  o.AllowOptimizers = {OptimizerOptions::Kind::Momentum};
  o.AllowLora = true;
  std::string error = errorOf(autoFit(path, o));
  EXPECT_NE(error.find("--allow qlora also stores their base as NF4"),
            std::string::npos)
      << error;
  o.AllowQlora = true;
  auto fit = takeOrFail(autoFit(path, o));
  const FitCandidate &winner = fit.Tried.front();
  EXPECT_EQ(winner.Rank, 8);
  EXPECT_TRUE(winner.Options.BaseNf4);
  EXPECT_NE(fit.Why.find("QLoRA stores the frozen base as NF4"),
            std::string::npos)
      << fit.Why;
  EXPECT_LE(fit.Best.ThePlan.Report.PeakBytes(), o.MemoryBudget);
  EXPECT_EQ(flagError("--batch 2 --memory-budget 1GiB --allow qlora"), "");
}

/// --allow-offload: a budget the exact setting meets only with state on the
/// host is met by offloading (exact, rank 0), the candidates of a setting
/// ranked by estimated step time; the explanation names the host pool, the
/// estimate, and the fastest fit without offload. Without the flag nothing
/// offloads.
TEST(AutoFitTest, OffloadsOnlyWhenAllowedAndSaysWhatItCosts) {
  std::string path = autofitZoo("autofit_offload");
  ASSERT_FALSE(path.empty());
  std::string flags = "--batch 4 --device cuda --optimizer adamw";
  // The f32 state and cuBLASLt's workspace alone: no f32 step fits on the
  // device, a bf16 one without master weights does.
  MemoryReport f32 = compilePlan(path, fromText(flags)).Report;
  CompileOptions o = fromText(flags);
  o.MemoryBudget = f32.StateBytes() + f32.LibraryBytes;
  auto plain = takeOrFail(autoFit(path, o));
  EXPECT_GT(plain.Tried.front().Rank, 0);
  for (const FitCandidate &c : plain.Tried)
    EXPECT_EQ(c.Options.Offload, "") << c.Label;
  o.AllowOffload = true;
  auto fit = takeOrFail(autoFit(path, o));
  const FitCandidate &winner = fit.Tried.front();
  EXPECT_EQ(winner.Rank, 0) << winner.Label;
  EXPECT_NE(winner.Options.Offload, "") << winner.Label;
  EXPECT_LE(winner.PeakBytes, o.MemoryBudget);
  EXPECT_GT(winner.HostPeakBytes, 0u);
  EXPECT_EQ(fit.Best.ThePlan.Report.HostPeakBytes(), winner.HostPeakBytes);
  for (const FitCandidate &c : fit.Tried) {
    if (c.Fits && c.Rank == 0) {
      EXPECT_GE(c.StepSeconds, winner.StepSeconds) << c.Label;
    }
  }
  EXPECT_NE(fit.Why.find("--offload " + winner.Options.Offload),
            std::string::npos)
      << fit.Why;
  EXPECT_NE(fit.Why.find("an estimated"), std::string::npos) << fit.Why;
  EXPECT_NE(fit.Why.find("without offload the fastest fit is"),
            std::string::npos)
      << fit.Why;
  // A host too small for any pool: nothing offloads; with a device budget
  // only offloading meets, the error says which limit binds.
  o.HostMemoryBudget = 4096;
  auto small = takeOrFail(autoFit(path, o));
  EXPECT_EQ(small.Tried.front().Options.Offload, "");
  EXPECT_GT(small.Tried.front().Rank, 0);
  const FitCandidate *leanest = &fit.Tried.front();
  for (const FitCandidate &c : fit.Tried)
    if (c.PeakBytes < leanest->PeakBytes)
      leanest = &c;
  ASSERT_NE(leanest->Options.Offload, "") << leanest->Label;
  o.MemoryBudget = leanest->PeakBytes;
  std::string hostError = errorOf(autoFit(path, o));
  EXPECT_NE(hostError.find("offloading fits the device"), std::string::npos)
      << hostError;
  EXPECT_NE(hostError.find("exceeds the host memory budget of 4.00 KiB"),
            std::string::npos)
      << hostError;
  EXPECT_NE(flagError("--batch 2 --device cuda --memory-budget 1GiB "
                      "--host-memory-budget 1GiB")
                .find("--host-memory-budget needs --allow-offload"),
            std::string::npos);
  EXPECT_NE(flagError("--batch 2 --device cuda --allow-offload")
                .find("--allow-offload needs --memory-budget"),
            std::string::npos);
  EXPECT_NE(flagError("--batch 2 --device cpu --memory-budget 1GiB "
                      "--allow-offload")
                .find("--allow-offload needs --device cuda"),
            std::string::npos);
}

/// --output-head fused plans no [tokens, vocabulary] logits: with a
/// vocabulary large next to the model (32000, d 64), the saved activations
/// lose the logits and the peak loses the logits and their gradient; the
/// workspace holds one chunk (32 MiB of logits at most, or `rows` rows).
TEST(OutputHeadTest, PlansNoWholeLogits) {
  ZooConfig z;
  z.Arch = "llama";
  z.Layers = 1, z.DModel = 64, z.Heads = 2, z.Ffn = 128, z.Vocab = 32000;
  z.Seq = 256;
  z.Weights = ZooConfig::Weights::None;
  std::string path = testing::TempDir() + "/output_head.onnx";
  ASSERT_EQ(errorOf(writeZooModel(z, path)), "");
  const char *flags = "--batch 4 --optimizer adamw --precision bf16 "
                      "--master-weights none --device cuda";
  MemoryReport unfused =
      compilePlan(path, fromText(std::string(flags) + " --output-head unfused"))
          .Report;
  MemoryReport fused = compilePlan(path, fromText(flags)).Report; // default
  MemoryReport rows =
      compilePlan(path,
                  fromText(std::string(flags) + " --output-head fused,rows=64"))
          .Report;
  uint64_t logits = 4 * 256 * uint64_t(32000) * 2; // bf16 [1024, 32000]
  // (Less the f32 losses of the rows, [1024], kept for the sum.)
  EXPECT_GE(unfused.SavedActivations - fused.SavedActivations,
            logits - 1024 * 4);
  // The logits and their gradient, for the workspace's chunks (here the
  // default chunk is half the logits: what the peak loses shows with 64
  // rows a chunk).
  EXPECT_LT(fused.PeakBytes(), unfused.PeakBytes());
  EXPECT_GE(unfused.PeakBytes() - rows.PeakBytes(), 3 * logits / 2);
  // Forward one chunk; backward the chunk and its gradient.
  uint64_t chunk = uint64_t(kOutputHeadChunkBytes / (32000 * 2)) * 32000 * 2;
  EXPECT_EQ(fused.Workspace, 2 * chunk);
  EXPECT_EQ(rows.Workspace, 2 * uint64_t(64) * 32000 * 2);
}

TEST(TargetTest, PlansRecordTheirTarget) {
  CompileOptions o = fromText("--batch 8 --optimizer adamw");
  Plan cpu = compilePlan(modelPath("gpt.onnx"), o);
  o.Target = "cuda";
  Plan cuda = compilePlan(modelPath("gpt.onnx"), o);
  EXPECT_EQ(cpu.TargetName, "cpu");
  EXPECT_EQ(cpu.Alignment, 64u);
  EXPECT_EQ(cpu.LibraryBytes, 0u);
  EXPECT_EQ(cuda.TargetName, "cuda");
  EXPECT_EQ(cuda.Alignment, 256u);
  EXPECT_EQ(cuda.LibraryBytes, kCublasLtWorkspaceBytes);
  for (const Plan *p : {&cpu, &cuda})
    for (size_t b = 0; b < p->Buffers.size(); ++b)
      if (p->Placements[b].Where == Placement::Kind::Arena) {
        EXPECT_EQ(p->Placements[b].Offset % p->Alignment, 0u)
            << p->TargetName << " buffer " << b;
      }
  EXPECT_EQ(cuda.Report.Parameters, cpu.Report.Parameters);
  EXPECT_GE(cuda.Report.ArenaBytes, cpu.Report.ArenaBytes);
  // The cuda kernels' workspace: the loss's mean over the targets splits
  // across blocks (kernels/cuda/Workspace.h).
  EXPECT_GT(cuda.Report.Workspace, 0u);
  EXPECT_EQ(cuda.Report.PeakBytes(),
            cuda.Report.StateBytes() + cuda.Report.StatePadding +
                cuda.Report.ArenaBytes + cuda.Report.Workspace +
                kCublasLtWorkspaceBytes);
  // The states' padding is what the executor's layout adds.
  EXPECT_EQ(cuda.stateOffsets().back(),
            cuda.Report.StateBytes() + cuda.Report.StatePadding);
  EXPECT_EQ(errorOf(lookupTarget("tpu")), "--device tpu: expected cpu or cuda");
}

/// Lowers textual IR for `target`; returns the error ("" when it lowers).
std::string lowerError(const char *text, const Target &target) {
  auto m = takeOrFail(parseModule(text));
  if (!m)
    return "unparsed";
  return errorOf(lowerModule(*m, target));
}

TEST(TargetTest, WhatTheBackendLacksIsRefusedAtCompileTime) {
  const char *bf16MatMul = "func @f(%a: bf16[2, 3], %b: bf16[3, 4]) {\n"
                           "  %c = MatMul(%a, %b) : bf16[2, 4]\n"
                           "  return %c\n}\n";
  EXPECT_EQ(lowerError(bf16MatMul, cpuTarget()), "");
  EXPECT_EQ(lowerError(bf16MatMul, cudaTarget()), "");
  const char *f64MatMul = "func @f(%a: f64[2, 3], %b: f64[3, 4]) {\n"
                          "  %c = MatMul(%a, %b) : f64[2, 4] loc(\"/mm\")\n"
                          "  return %c\n}\n";
  EXPECT_EQ(lowerError(f64MatMul, cpuTarget()), "");
  EXPECT_EQ(lowerError(f64MatMul, cudaTarget()),
            "in @f, node 0 ('MatMul' defining %c from '/mm'): the cuda "
            "target computes no f64 (f32, bf16, f16 only)");
  // Elementwise kernels compute every float type on the CPU.
  const char *f16Add = "func @f(%a: f16[4], %b: f16[4]) {\n"
                       "  %c = Add(%a, %b) : f16[4]\n"
                       "  return %c\n}\n";
  EXPECT_EQ(lowerError(f16Add, cpuTarget()), "");
  // Shape is folded by canonicalize; the CUDA backend has no kernel for it.
  const char *shape = "func @f(%x: f32[4]) {\n"
                      "  %s = Shape(%x) : i64[1]\n"
                      "  return %s\n}\n";
  EXPECT_EQ(lowerError(shape, cpuTarget()), "");
  EXPECT_EQ(lowerError(shape, cudaTarget()),
            "in @f, node 0 ('Shape' defining %s): the cuda target has no "
            "kernel for op 'Shape'");
}

/// The CPU runs bf16 and f16 through its f32 kernels: operands widened in
/// the planned workspace, f32 accumulation, each result rounded once.
TEST(TargetTest, CpuWidensNarrowFloatsInThePlannedWorkspace) {
  for (const char *type : {"bf16", "f16"}) {
    std::string text = std::string("func @f(%a: ") + type +
                       "[3, 5], %b: " + type +
                       "[5, 2]) {\n  %c = MatMul(%a, %b) : " + type +
                       "[3, 2]\n  return %c\n}\n";
    auto m = takeOrFail(parseModule(text));
    ASSERT_TRUE(m);
    Plan plan = takeOrFail(lowerModule(*m, cpuTarget()));
    // a, b and c widened: 64-byte rounded f32 copies.
    EXPECT_EQ(plan.WorkspaceBytes, 64u + 64u + 64u) << type;
    // A plan that understates it is refused at the call, never overrun.
    Plan understated = plan;
    understated.WorkspaceBytes = 64;
    understated.Report.Workspace = 64;
    auto small = takeOrFail(createCpuExecutor(std::move(understated)));
    ASSERT_TRUE(small);
    DType st = std::string(type) == "bf16" ? DType::BF16 : DType::F16;
    Tensor za(TensorType(st, {3, 5})), zb(TensorType(st, {5, 2}));
    std::string error = errorOf(small->run("f", {&za, &zb}));
    EXPECT_NE(error.find("MatMul: the planned workspace of 64 bytes is "
                         "smaller than the 192 bytes this call needs"),
              std::string::npos)
        << error;
    auto exec = takeOrFail(createCpuExecutor(std::move(plan)));
    ASSERT_TRUE(exec);
    DType t = std::string(type) == "bf16" ? DType::BF16 : DType::F16;
    std::vector<double> av, bv;
    for (int i = 0; i < 15; ++i)
      av.push_back(0.1 * i - 0.7);
    for (int i = 0; i < 10; ++i)
      bv.push_back(0.3 * i - 1.1);
    Tensor a = Tensor::fromDoubles(t, {3, 5}, av);
    Tensor b = Tensor::fromDoubles(t, {5, 2}, bv);
    auto r = takeOrFail(exec->run("f", {&a, &b}));
    ASSERT_EQ(r.size(), 1u);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 2; ++j) {
        float sum = 0; // the stored (rounded) inputs, summed in f32
        for (int k = 0; k < 5; ++k)
          sum += float(a.getDouble(i * 5 + k)) * float(b.getDouble(k * 2 + j));
        Tensor want = Tensor::fromDoubles(t, {}, {sum}); // one rounding
        EXPECT_EQ(r[0].getDouble(i * 2 + j), want.getDouble(0))
            << type << " [" << i << ", " << j << "]";
      }
  }
}

TEST(TargetTest, InPlaceIsTheTargetsChoice) {
  auto m = takeOrFail(parseModule("func @f(%x: f32[64]) {\n"
                                  "  %a = Neg(%x) : f32[64]\n"
                                  "  %b = Exp(%a) : f32[64]\n"
                                  "  %c = Softmax(%b) {axis = 0} : f32[64]\n"
                                  "  return %c\n}\n"));
  ASSERT_TRUE(m);
  Plan p = takeOrFail(lowerModule(*m, cpuTarget()));
  const PlanFunction &f = p.Functions[0];
  ASSERT_EQ(f.Calls.size(), 3u);
  // Exp reuses Neg's buffer (elementwise); Softmax reads its whole row
  // before writing, and is not elementwise: a buffer of its own.
  EXPECT_EQ(f.Calls[1].Outputs[0], f.Calls[0].Outputs[0]);
  EXPECT_NE(f.Calls[2].Outputs[0], f.Calls[1].Outputs[0]);
}

} // namespace

/// The recomputation search visits none, the leanest three, selective and
/// then bisects the block chain for the most blocks kept whole that fit.
TEST(CompileTest, RecomputeSearchBisectsTheBlockChain) {
  RecomputeSpace space(32);
  EXPECT_EQ(space.all().size(), 2u + 31u + 6u + 2u);
  for (unsigned fitting : {0u, 1u, 7u, 30u, 31u}) {
    std::vector<std::string> tried;
    unsigned most = 0;
    auto tryChoice = [&](const RecomputeChoice &c) -> llvm::Expected<bool> {
      tried.push_back(c.Label);
      if (c.Options.Kind == RecomputeOptions::Policy::None)
        return false;
      unsigned kept = c.Options.KeepBlocks.size();
      bool fits = kept <= fitting;
      if (fits)
        most = std::max(most, kept);
      return fits;
    };
    ASSERT_FALSE(bool(space.search(tryChoice, /*withNone=*/true)));
    ASSERT_GE(tried.size(), 5u);
    EXPECT_EQ(tried[0], "none");
    EXPECT_EQ(tried[1], "every=1");
    EXPECT_EQ(tried[2], "all");
    EXPECT_EQ(tried[3], "sqrt");
    EXPECT_EQ(tried[4], "selective");
    EXPECT_EQ(most, fitting) << "with " << fitting << " blocks fitting";
    EXPECT_LE(tried.size(), 5u + 5u); // log2(31) bisection steps
  }
  // Nothing lean fits: every=2, 4, ... until one does, then nothing else.
  std::vector<std::string> tried;
  auto onlyEvery4 = [&](const RecomputeChoice &c) -> llvm::Expected<bool> {
    tried.push_back(c.Label);
    return c.Label == "every=4";
  };
  ASSERT_FALSE(bool(space.search(onlyEvery4, /*withNone=*/false)));
  EXPECT_EQ(tried, (std::vector<std::string>{"every=1", "all", "sqrt",
                                             "every=2", "every=4"}));
}

//===- PlanFileTest.cpp - Plans on disk -----------------------------------===//
//
// A plan survives the file exactly (every field, tensor attributes and the
// report included) and runs to the same weights; every prefix of a plan
// file, every one-byte corruption and random bytes are refused with an error
// (never a crash); so are a version skew, indices out of range and a source
// model that changed.
//
//===----------------------------------------------------------------------===//
#include "runtime/PlanFile.h"

#include "CompileUtil.h"
#include "compiler/Collectives.h"
#include "runtime/plan.pb.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"

#include <cstdint>
#include <fstream>
#include <numeric>
#include <random>
#include <set>

using namespace headroom;
namespace pb = headroom::planfile;

namespace {

constexpr uint64_t kSeed = 5;

CompileOptions gptOptions() {
  CompileOptions o;
  o.Import.Batch = 8;
  o.Optimizer.Kind = OptimizerOptions::Kind::AdamW;
  o.Optimizer.Lr = 1e-3;
  o.Optimizer.WeightDecay = 0.01;
  o.Optimizer.ClipGradNorm = 1.0;
  return o;
}

Plan compileTest(const std::string &model, const CompileOptions &o) {
  return compilePlan(modelPath(model), o);
}

PlanRecipe recipeFor(const Plan &plan) {
  PlanRecipe r;
  r.Flags = "--batch 8 --optimizer adamw";
  r.Lr = 1e-3;
  (void)plan;
  return r;
}

std::string serialize(const Plan &plan, const std::string &model) {
  PlanSource source = takeOrFail(describePlanSource(modelPath(model)));
  return takeOrFail(serializePlanFile(plan, source, recipeFor(plan)));
}

void expectSamePlan(const Plan &a, const Plan &b) {
  ASSERT_EQ(a.States.size(), b.States.size());
  for (size_t i = 0; i < a.States.size(); ++i) {
    EXPECT_EQ(a.States[i].Name, b.States[i].Name);
    EXPECT_EQ(a.States[i].Type, b.States[i].Type);
    EXPECT_EQ(a.States[i].Kind, b.States[i].Kind);
  }
  ASSERT_EQ(a.Buffers, b.Buffers);
  ASSERT_EQ(a.Placements.size(), b.Placements.size());
  for (size_t i = 0; i < a.Placements.size(); ++i) {
    EXPECT_EQ(a.Placements[i].Where, b.Placements[i].Where) << "buffer " << i;
    EXPECT_EQ(a.Placements[i].Offset, b.Placements[i].Offset) << "buffer " << i;
    EXPECT_EQ(a.Placements[i].Index, b.Placements[i].Index) << "buffer " << i;
    EXPECT_EQ(a.Placements[i].Call, b.Placements[i].Call) << "buffer " << i;
  }
  ASSERT_EQ(a.Functions.size(), b.Functions.size());
  for (size_t f = 0; f < a.Functions.size(); ++f) {
    const PlanFunction &fa = a.Functions[f], &fb = b.Functions[f];
    EXPECT_EQ(fa.Name, fb.Name);
    EXPECT_EQ(fa.Args, fb.Args);
    EXPECT_EQ(fa.ArgNames, fb.ArgNames);
    EXPECT_EQ(fa.Results, fb.Results);
    ASSERT_EQ(fa.Calls.size(), fb.Calls.size());
    for (size_t c = 0; c < fa.Calls.size(); ++c) {
      const KernelCall &ca = fa.Calls[c], &cb = fb.Calls[c];
      EXPECT_EQ(ca.Op, cb.Op) << "call " << c;
      EXPECT_TRUE(ca.Attrs == cb.Attrs) << "call " << c << " (" << ca.Op << ")";
      EXPECT_EQ(ca.Inputs, cb.Inputs) << "call " << c;
      EXPECT_EQ(ca.Outputs, cb.Outputs) << "call " << c;
      EXPECT_EQ(ca.State, cb.State) << "call " << c;
      EXPECT_EQ(ca.Id, cb.Id) << "call " << c;
      EXPECT_EQ(ca.Host, cb.Host) << "call " << c;
      EXPECT_EQ(ca.WaitFor, cb.WaitFor) << "call " << c;
      EXPECT_EQ(ca.Overlapped, cb.Overlapped) << "call " << c;
    }
  }
  EXPECT_EQ(a.ArenaBytes, b.ArenaBytes);
  EXPECT_EQ(a.WorkspaceBytes, b.WorkspaceBytes);
  const MemoryReport &ra = a.Report, &rb = b.Report;
  EXPECT_EQ(ra.Parameters, rb.Parameters);
  EXPECT_EQ(ra.Frozen, rb.Frozen);
  EXPECT_EQ(ra.Buffers, rb.Buffers);
  EXPECT_EQ(ra.OptimizerState, rb.OptimizerState);
  EXPECT_EQ(ra.Constants, rb.Constants);
  EXPECT_EQ(ra.ArenaBytes, rb.ArenaBytes);
  EXPECT_EQ(ra.Workspace, rb.Workspace);
  EXPECT_EQ(ra.ArenaLowerBound, rb.ArenaLowerBound);
  EXPECT_EQ(ra.Activations, rb.Activations);
  EXPECT_EQ(ra.Gradients, rb.Gradients);
  EXPECT_EQ(ra.Temporaries, rb.Temporaries);
  EXPECT_EQ(ra.Workspace, rb.Workspace);
  EXPECT_EQ(ra.Timeline, rb.Timeline);
}

std::string tempPath(const std::string &name) {
  return testing::TempDir() + "/PlanFileTest-" + name;
}

/// A plan file around `body`, with a correct checksum: what a bug in the
/// writer (or a hand-made file) could hold.
std::string wrap(const pb::Plan &body, uint32_t version = kPlanFormatVersion) {
  pb::PlanFile file;
  file.set_magic("headroom plan");
  file.set_format_version(version);
  body.SerializeToString(file.mutable_body());
  auto digest = llvm::SHA256::hash(llvm::arrayRefFromStringRef(file.body()));
  file.set_body_sha256(digest.data(), digest.size());
  return file.SerializeAsString();
}

pb::Plan bodyOf(const std::string &bytes) {
  pb::PlanFile file;
  EXPECT_TRUE(file.ParseFromString(bytes));
  pb::Plan body;
  EXPECT_TRUE(body.ParseFromString(file.body()));
  return body;
}

TEST(PlanFileTest, LeNetRoundTripKeepsTheWorkspace) {
  Plan plan = compileTest("lenet.onnx", gptOptions());
  EXPECT_GT(plan.WorkspaceBytes, 0u); // Conv's im2col columns
  PlanSource source = takeOrFail(describePlanSource(modelPath("lenet.onnx")));
  std::string path = tempPath("lenet.plan");
  ASSERT_EQ(errorOf(writePlanFile(plan, source, recipeFor(plan), path)), "");
  LoadedPlan loaded = takeOrFail(readPlanFile(path));
  expectSamePlan(plan, loaded.ThePlan);
}

TEST(PlanFileTest, GptRoundTrip) {
  Plan plan = compileTest("gpt.onnx", gptOptions());
  ASSERT_FALSE(plan.Functions.empty());
  // The attributes the compiler made: one of each kind, to cover the rest.
  KernelCall &c = plan.Functions.front().Calls.front();
  c.Attrs["t.float"] = Attribute::getFloat(0.1);
  c.Attrs["t.floats"] = Attribute::getFloats({1.5, -0.0, 1e-30});
  c.Attrs["t.ints"] = Attribute::getInts({-1, 0, INT64_MAX});
  c.Attrs["t.string"] = Attribute::getString(std::string("a\0b\xff", 4));
  c.Attrs["t.strings"] = Attribute::getStrings({"", "x"});
  c.Attrs["t.type"] = Attribute::getType(DType::BF16);
  c.Attrs["t.tensor"] =
      Attribute::getTensor(Tensor::fromDoubles(DType::F16, {2, 0}, {}));
  unsigned tensors = 0;
  for (const KernelCall &k : plan.Functions.front().Calls)
    for (const auto &[name, a] : k.Attrs)
      tensors += a.kind() == Attribute::Kind::Tensor;
  EXPECT_GT(tensors, 1u);

  PlanSource source = takeOrFail(describePlanSource(modelPath("gpt.onnx")));
  EXPECT_TRUE(llvm::sys::path::is_absolute(source.ModelPath));
  EXPECT_EQ(source.Sha256.size(), 64u);
  PlanRecipe recipe = recipeFor(plan);
  std::string path = tempPath("gpt.plan");
  ASSERT_EQ(errorOf(writePlanFile(plan, source, recipe, path)), "");
  LoadedPlan loaded = takeOrFail(readPlanFile(path));
  expectSamePlan(plan, loaded.ThePlan);
  EXPECT_EQ(loaded.Source.ModelPath, source.ModelPath);
  EXPECT_EQ(loaded.Source.Sha256, source.Sha256);
  EXPECT_EQ(loaded.Recipe.Flags, recipe.Flags);
  EXPECT_EQ(loaded.Recipe.Lr, recipe.Lr);
  ASSERT_EQ(loaded.ThePlan.Driver.size(), 1u);
  EXPECT_EQ(loaded.ThePlan.Driver[0].Function, plan.Functions.front().Name);
  EXPECT_EQ(loaded.ThePlan.Driver[0].Repeat, 1u);
  EXPECT_FALSE(loaded.ThePlan.Driver[0].SameBatch);
  EXPECT_EQ(errorOf(checkPlanSource(loaded.Source, path)), "");
}

/// A LOMO plan with accumulation and clipping: three functions, a driver
/// with a repeat and a call on the same batch, accumulators of kind grad.
TEST(PlanFileTest, DriverAndAccumulatorsRoundTrip) {
  CompileOptions o;
  o.Import.Batch = 8;
  o.Accumulate = 4;
  o.Optimizer.Kind = OptimizerOptions::Kind::Lomo;
  o.Optimizer.ClipGradNorm = 1.0;
  Plan plan = compileTest("gpt.onnx", o);
  ASSERT_EQ(plan.Driver.size(), 3u);
  EXPECT_EQ(plan.Driver[1].Repeat, 2u);
  EXPECT_EQ(plan.microBatchesPerStep(), 4u);
  EXPECT_EQ(plan.Report.PassesPerStep, 4u); // the accumulators hold the norm
  EXPECT_EQ(plan.Report.GradientState, plan.Report.Parameters);
  PlanSource source = takeOrFail(describePlanSource(modelPath("gpt.onnx")));
  std::string path = tempPath("lomo.plan");
  ASSERT_EQ(errorOf(writePlanFile(plan, source, recipeFor(plan), path)), "");
  LoadedPlan loaded = takeOrFail(readPlanFile(path));
  expectSamePlan(plan, loaded.ThePlan);
  ASSERT_EQ(loaded.ThePlan.Driver.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(loaded.ThePlan.Driver[i].Function, plan.Driver[i].Function);
    EXPECT_EQ(loaded.ThePlan.Driver[i].Repeat, plan.Driver[i].Repeat);
    EXPECT_EQ(loaded.ThePlan.Driver[i].SameBatch, plan.Driver[i].SameBatch);
  }
  EXPECT_EQ(loaded.ThePlan.Report.GradientState, plan.Report.GradientState);
  EXPECT_EQ(loaded.ThePlan.Report.GradientsMaxLive,
            plan.Report.GradientsMaxLive);
  EXPECT_EQ(loaded.ThePlan.Report.PassesPerStep, 4u);
  int grad = plan.stateIndex("lm_head.weight.grad");
  ASSERT_GE(grad, 0);
  EXPECT_EQ(loaded.ThePlan.States[grad].Kind, StateKind::Gradient);

  // Without accumulation, clipping adds the norm pass on the same batch.
  o.Accumulate = 1;
  Plan twoPass = compileTest("gpt.onnx", o);
  ASSERT_EQ(twoPass.Driver.size(), 2u);
  EXPECT_EQ(twoPass.Driver[0].Function, "grad_norm");
  EXPECT_TRUE(twoPass.Driver[1].SameBatch);
  EXPECT_EQ(twoPass.microBatchesPerStep(), 1u);
  EXPECT_EQ(twoPass.Report.PassesPerStep, 2u);
}

TEST(PlanFileTest, ShardsAndReplicasRoundTrip) {
  CompileOptions o = gptOptions();
  o.Import.Batch = 8;
  o.Ranks = 4;
  o.Zero = 1;
  o.Optimizer.Kind = OptimizerOptions::Kind::AdamW;
  Plan plan = compileTest("gpt.onnx", o);
  EXPECT_EQ(plan.Ranks, 4u);
  EXPECT_GT(plan.Report.ShardBytes, 0u);
  EXPECT_GT(plan.Report.CollectiveBytes, 0u);
  PlanSource source = takeOrFail(describePlanSource(modelPath("gpt.onnx")));
  std::string path = tempPath("zero1.plan");
  ASSERT_EQ(errorOf(writePlanFile(plan, source, recipeFor(plan), path)), "");
  LoadedPlan loaded = takeOrFail(readPlanFile(path));
  expectSamePlan(plan, loaded.ThePlan);
  EXPECT_EQ(loaded.ThePlan.Ranks, 4u);
  EXPECT_EQ(loaded.ThePlan.Report.CollectiveBytes, plan.Report.CollectiveBytes);
  EXPECT_EQ(loaded.ThePlan.Report.ShardWholeBytes, plan.Report.ShardWholeBytes);
  int w = plan.stateIndex("wte.weight"),
      r = plan.stateIndex("wte.weight.replica");
  ASSERT_GE(w, 0);
  ASSERT_GE(r, 0);
  const PlanState &shard = loaded.ThePlan.States[w];
  ASSERT_TRUE(shard.ShardOf.hasValue());
  EXPECT_EQ(*shard.ShardOf, *plan.States[w].ShardOf);
  EXPECT_EQ(shard.Type.numElements(), (shard.ShardOf->numElements() + 3) / 4);
  EXPECT_EQ(loaded.ThePlan.States[r].ReplicaOf, w);
  EXPECT_EQ(loaded.ThePlan.States[r].Kind, StateKind::Replica);
}

/// On cuda the collectives run on the copy stream: every compute call
/// that reads a value one made, or a slot one wrote (zero 0's accumulators,
/// zero 1's replicas), has waited for it; the plan file keeps the marks.
TEST(PlanFileTest, OverlappedCollectivesRoundTrip) {
  for (unsigned zero : {0u, 1u, 3u}) {
    CompileOptions o = gptOptions();
    o.Import.Batch = 8;
    o.Accumulate = zero == 0 ? 2 : 1;
    o.Ranks = 4;
    o.Zero = zero;
    o.Target = "cuda";
    o.Optimizer.Kind = OptimizerOptions::Kind::AdamW;
    o.Schedule = ScheduleMode::Always;
    Plan plan = compileTest("gpt.onnx", o);
    std::set<OpKind> kinds;
    for (const PlanFunction &f : plan.Functions) {
      int waited = -1;
      std::vector<int> madeBy(plan.Buffers.size(), -1),
          wrote(plan.States.size(), -1);
      for (size_t i = 0; i < f.Calls.size(); ++i) {
        const KernelCall &c = f.Calls[i];
        if (c.Overlapped) {
          kinds.insert(c.Kind);
          EXPECT_TRUE(c.onCopyStream());
          EXPECT_TRUE(isCollective(c.Kind)) << c.Op;
          for (int b : c.Outputs)
            madeBy[b] = i;
          if (c.State >= 0 && c.Kind != OpKind::Read)
            wrote[c.State] = i;
          continue;
        }
        if (c.onCopyStream())
          continue;
        waited = std::max(waited, c.WaitFor); // the compute stream is in order
        for (int b : c.Inputs) {
          if (b >= 0 && madeBy[b] >= 0) {
            EXPECT_GE(waited, madeBy[b]) << c.Op << " call " << i;
          }
        }
        if (c.State >= 0 && wrote[c.State] >= 0) {
          EXPECT_GE(waited, wrote[c.State]) << c.Op << " call " << i;
        }
      }
    }
    EXPECT_TRUE(kinds.count(zero == 0   ? OpKind::AllReduceState
                            : zero == 1 ? OpKind::AllGatherState
                                        : OpKind::AllGather))
        << "zero " << zero;
    PlanSource source = takeOrFail(describePlanSource(modelPath("gpt.onnx")));
    std::string path = tempPath("overlapped-cuda.plan");
    ASSERT_EQ(errorOf(writePlanFile(plan, source, recipeFor(plan), path)), "");
    LoadedPlan loaded = takeOrFail(readPlanFile(path));
    expectSamePlan(plan, loaded.ThePlan);
  }
}

TEST(PlanFileTest, Deterministic) {
  std::string a = serialize(compileTest("gpt.onnx", gptOptions()), "gpt.onnx");
  std::string b = serialize(compileTest("gpt.onnx", gptOptions()), "gpt.onnx");
  EXPECT_TRUE(a == b);
}

/// A Trainer from the plan file steps to the same bits as one compiled from
/// the model (`headroom run` vs `headroom train`).
TEST(PlanFileTest, RunsLikeTheCompiledStep) {
  CompileOptions o = gptOptions();
  std::string path = tempPath("gpt-run.plan");
  Plan plan = compileTest("gpt.onnx", o);
  PlanSource source = takeOrFail(describePlanSource(modelPath("gpt.onnx")));
  ASSERT_EQ(errorOf(writePlanFile(plan, source, recipeFor(plan), path)), "");
  LoadedPlan loaded = takeOrFail(readPlanFile(path));
  auto fromFile = takeOrFail(Trainer::create(std::move(loaded.ThePlan),
                                             loaded.Source.ModelPath, kSeed));
  auto compiled = takeOrFail(compileTrainer(modelPath("gpt.onnx"), o, kSeed));
  ASSERT_TRUE(fromFile && compiled);
  Dataset data = takeOrFail(loadDataset(modelPath("gpt.train.npz")));
  std::vector<int64_t> order(data.Samples);
  std::iota(order.begin(), order.end(), 0);
  for (int64_t s = 0; s < 2; ++s) {
    auto a = takeOrFail(fromFile->step(data, order, s * fromFile->batch()));
    auto b = takeOrFail(compiled->step(data, order, s * compiled->batch()));
    EXPECT_EQ(a.Loss, b.Loss);
  }
  for (const PlanState &st : compiled->executor().plan().States) {
    Tensor a = takeOrFail(fromFile->executor().readState(st.Name));
    Tensor b = takeOrFail(compiled->executor().readState(st.Name));
    EXPECT_TRUE(a == b) << st.Name;
  }
}

TEST(PlanFileTest, EveryPrefixIsRefused) {
  CompileOptions o = gptOptions();
  o.Import.Batch = 4;
  std::string bytes = serialize(compileTest("mlp.onnx", o), "mlp.onnx");
  ASSERT_EQ(errorOf(parsePlanFile(bytes, "mlp.plan")), "");
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_EQ(errorOf(parsePlanFile(llvm::StringRef(bytes).take_front(n),
                                    "mlp.plan")),
              "mlp.plan: not a valid headroom plan (the data is malformed or "
              "truncated)")
        << n << " of " << bytes.size() << " bytes";
}

TEST(PlanFileTest, EveryCorruptByteIsRefused) {
  CompileOptions o = gptOptions();
  o.Import.Batch = 4;
  std::string bytes = serialize(compileTest("mlp.onnx", o), "mlp.onnx");
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] ^= 0x5a;
    EXPECT_NE(errorOf(parsePlanFile(bad, "mlp.plan")), "") << "byte " << i;
  }
}

TEST(PlanFileTest, RandomBytesAreRefused) {
  std::mt19937_64 rng(42);
  for (int i = 0; i < 500; ++i) {
    std::string bytes(rng() % 4096, '\0');
    for (char &c : bytes)
      c = static_cast<char>(rng());
    EXPECT_NE(errorOf(parsePlanFile(bytes, "x.plan")), "");
  }
  EXPECT_EQ(errorOf(readPlanFile(tempPath("missing.plan"))),
            tempPath("missing.plan") + ": cannot read: No such file or "
                                       "directory");
}

TEST(PlanFileTest, VersionSkew) {
  CompileOptions o = gptOptions();
  o.Import.Batch = 4;
  std::string bytes = serialize(compileTest("mlp.onnx", o), "mlp.onnx");
  EXPECT_EQ(errorOf(parsePlanFile(wrap(bodyOf(bytes), 7), "model.plan")),
            "model.plan: plan format version 7 is not the version this "
            "headroom reads (3); compile again");
  EXPECT_EQ(errorOf(parsePlanFile(wrap(bodyOf(bytes)), "model.plan")), "");
}

/// Bodies with a valid checksum but contents the executor cannot trust.
TEST(PlanFileTest, InvalidContentsAreRefused) {
  CompileOptions o = gptOptions();
  o.Import.Batch = 4;
  const pb::Plan good =
      bodyOf(serialize(compileTest("mlp.onnx", o), "mlp.onnx"));
  auto check = [&](const char *what, llvm::function_ref<void(pb::Plan &)> edit,
                   const std::string &want) {
    pb::Plan body = good;
    edit(body);
    std::string error = errorOf(parsePlanFile(wrap(body), "m.plan"));
    EXPECT_NE(error.find("m.plan: invalid plan: "), std::string::npos)
        << what << ": " << error;
    EXPECT_NE(error.find(want), std::string::npos) << what << ": " << error;
  };
  const pb::Function &f0 = good.functions(0);
  int addCall = -1, readCall = -1, adamCall = -1, constantBuffer = -1,
      stateBuffer = -1;
  for (int i = 0; i < f0.calls_size(); ++i) {
    if (adamCall < 0 && f0.calls(i).op() == "AdamWUpdate")
      adamCall = i;
    if (addCall < 0 && f0.calls(i).inputs_size() == 2)
      addCall = i;
    if (readCall < 0 && f0.calls(i).op() == "Read")
      readCall = i;
  }
  for (int i = 0; i < good.buffers_size(); ++i) {
    if (constantBuffer < 0 && good.buffers(i).has_constant())
      constantBuffer = i;
    if (stateBuffer < 0 && good.buffers(i).place_case() == pb::Buffer::kState)
      stateBuffer = i;
  }
  ASSERT_GE(addCall, 0);
  ASSERT_GE(readCall, 0);
  ASSERT_GE(adamCall, 0);
  ASSERT_EQ(f0.calls(adamCall).more_states_size(), 2);
  ASSERT_GE(constantBuffer, 0);
  ASSERT_GE(stateBuffer, 0);
  auto call = [&](pb::Plan &p, int i) {
    return p.mutable_functions(0)->mutable_calls(i);
  };

  check(
      "input", [&](pb::Plan &p) { call(p, addCall)->set_inputs(0, 1000000); },
      "input buffer 1000000 is out of range");
  check(
      "output", [&](pb::Plan &p) { call(p, addCall)->set_outputs(0, -1); },
      "output buffer -1 is out of range");
  check(
      "arity", [&](pb::Plan &p) { call(p, addCall)->clear_inputs(); },
      "do not fit the op");
  check(
      "op", [&](pb::Plan &p) { call(p, addCall)->set_op("Launch"); },
      "not an op this headroom runs");
  check(
      "state", [&](pb::Plan &p) { call(p, readCall)->set_state(99); },
      "state 99 is out of range");
  check(
      "overlapped on cpu",
      [&](pb::Plan &p) { call(p, addCall)->set_overlapped(true); },
      "is marked to run on the copy stream, which only --device cuda's "
      "collectives do");
  check(
      "moments", [&](pb::Plan &p) { call(p, adamCall)->clear_more_states(); },
      "names 1 state slots, the op writes 3");
  check(
      "moment is the weight",
      [&](pb::Plan &p) {
        call(p, adamCall)
            ->set_more_states(1, p.functions(0).calls(adamCall).state());
      },
      "is out of range, repeated or of another type");
  check(
      "fused update's state out of range",
      [&](pb::Plan &p) { call(p, adamCall)->set_state(99999); },
      "state 99999 is out of range");
  check(
      "moments on a stateless op",
      [&](pb::Plan &p) { call(p, addCall)->add_more_states(0); },
      "names a state slot but the op has none");
  check(
      "moment out of range",
      [&](pb::Plan &p) { call(p, adamCall)->set_more_states(0, 12345); },
      "state 12345 is out of range, repeated or of another type");
  check(
      "argument", [&](pb::Plan &p) { p.mutable_functions(0)->set_args(0, -3); },
      "argument: buffer -3 is out of range");
  check(
      "result",
      [&](pb::Plan &p) { p.mutable_functions(0)->set_results(0, 1 << 30); },
      "is out of range");
  check(
      "arena",
      [&](pb::Plan &p) {
        p.mutable_buffers(p.functions(0).args(0))
            ->set_arena_offset(p.arena_bytes());
      },
      "lie outside the");
  check(
      "read elsewhere",
      [&](pb::Plan &p) {
        int out = p.functions(0).calls(readCall).outputs(0);
        p.mutable_buffers(out)->set_arena_offset(0);
      },
      "a Read's result must be its own state slot");
  check(
      "too large together",
      [&](pb::Plan &p) {
        // Two slots of 2^49 bytes each: each within bounds, not together.
        for (int i = 0; i < 2; ++i) {
          p.mutable_states(i)->mutable_type()->clear_dims();
          p.mutable_states(i)->mutable_type()->add_dims(int64_t(1) << 47);
        }
      },
      "state, arena and workspace together exceed");
  check(
      "placed state",
      [&](pb::Plan &p) { p.mutable_buffers(stateBuffer)->set_state(-2); },
      "state -2 is out of range");
  check(
      "constant",
      [&](pb::Plan &p) {
        p.mutable_buffers(constantBuffer)->mutable_constant()->set_call(0);
      },
      "is not a Constant");
  check(
      "placement", [&](pb::Plan &p) { p.mutable_buffers(0)->clear_place(); },
      "no placement");
  check(
      "element type",
      [&](pb::Plan &p) {
        p.mutable_buffers(0)->mutable_type()->set_element_type(
            static_cast<pb::ElementType>(99));
      },
      "unknown element type 99");
  check(
      "dims",
      [&](pb::Plan &p) {
        auto *t = p.mutable_states(0)->mutable_type();
        t->add_dims(INT64_MAX / 2);
        t->add_dims(INT64_MAX / 2);
      },
      "dimensions out of range");
  check(
      "tensor",
      [&](pb::Plan &p) {
        for (pb::Call &c : *p.mutable_functions(0)->mutable_calls())
          for (pb::Attribute &a : *c.mutable_attributes())
            if (a.has_tensor_value())
              a.mutable_tensor_value()->mutable_type()->add_dims(2);
      },
      "bytes of data for a tensor of type");
  check(
      "driver", [&](pb::Plan &p) { p.mutable_driver(0)->set_function("x"); },
      "the driver calls @x");
  check(
      "no driver", [&](pb::Plan &p) { p.clear_driver(); },
      "the driver loop is empty");
  check(
      "same batch first",
      [&](pb::Plan &p) { p.mutable_driver(0)->set_same_batch(true); },
      "the driver's first call has no batch before it to reuse");
}

TEST(PlanFileTest, ChangedSourceIsRefused) {
  std::string model = tempPath("source.onnx");
  ASSERT_FALSE(llvm::sys::fs::copy_file(modelPath("mlp.onnx"), model));
  PlanSource source = takeOrFail(describePlanSource(model));
  EXPECT_EQ(errorOf(checkPlanSource(source, "m.plan")), "");
  {
    std::ofstream os(model, std::ios::app | std::ios::binary);
    os << 'x';
  }
  std::string error = errorOf(checkPlanSource(source, "m.plan"));
  EXPECT_EQ(error.rfind("m.plan: the source model " + source.ModelPath +
                            " changed since the plan was compiled (sha256 " +
                            source.Sha256.substr(0, 12) + "... now ",
                        0),
            0u)
      << error;
  EXPECT_NE(error.find("); compile again"), std::string::npos) << error;
  ASSERT_FALSE(llvm::sys::fs::remove(model));
  EXPECT_EQ(errorOf(checkPlanSource(source, "m.plan")),
            "m.plan: cannot read the source model " + source.ModelPath +
                " (No such file or directory); the plan takes its initial "
                "weights from it");
}

} // namespace

//===- PlanTest.cpp - Lowering hazards: in-place reuse and state aliasing -===//
#include "compiler/Plan.h"
#include "TestUtil.h"
#include "compiler/Cost.h"
#include "compiler/Parser.h"
#include "compiler/Streams.h"
#include "kernels/cpu/CpuTarget.h"
#include "kernels/cuda/CudaTarget.h"
#include "passes/PassManager.h"
#include "runtime/Devices.h"
#include "runtime/Executor.h"

using namespace headroom;

namespace {

/// Runs @f of `text` on `args` and returns its results.
std::vector<Tensor> runText(const char *text, std::vector<Tensor> args,
                            const std::map<std::string, Tensor> &state = {}) {
  auto m = takeOrFail(parseModule(text));
  if (!m)
    return {};
  auto exec = takeOrFail(createCpuExecutor(*lowerModule(*m, cpuTarget())));
  if (!exec)
    return {};
  for (const auto &[name, t] : state)
    EXPECT_EQ(errorOf(exec->writeState(name, t)), "");
  std::vector<const Tensor *> ptrs;
  for (const Tensor &t : args)
    ptrs.push_back(&t);
  return takeOrFail(exec->run("f", ptrs));
}

/// Conv and both gradients count the same products, from the window
/// ops::convShape reads (grouped, strided, dilated, padded): 2 x N x M x
/// outputs x (C/G x taps).
TEST(PlanTest, ConvFlopsComeFromItsWindow) {
  auto m = takeOrFail(parseModule(
      "func @f(%x: f32[2, 4, 9, 9], %w: f32[6, 2, 3, 3], %dy: f32[2, 6, 4, "
      "4]) {\n"
      "  %y = Conv(%x, %w) {group = 2, strides = [2, 2], dilations = [2, 1], "
      "pads = [1, 0, 1, 0]} : f32[2, 6, 4, 4]\n"
      "  %dx = ConvGradInput(%dy, %w) {group = 2, strides = [2, 2], "
      "dilations = [2, 1], pads = [1, 0, 1, 0]} : f32[2, 4, 9, 9]\n"
      "  %dw = ConvGradWeight(%dy, %x) {group = 2, strides = [2, 2], "
      "dilations = [2, 1], pads = [1, 0, 1, 0]} : f32[6, 2, 3, 3]\n"
      "  return %y, %dx, %dw\n"
      "}\n"));
  ASSERT_TRUE(m);
  uint64_t expected = 2 * 2 * 6 * (4 * 4) * (2 * 3 * 3);
  unsigned convs = 0;
  for (const Node &n : m->functions()[0]->nodes())
    if (llvm::StringRef(n.op()).startswith("Conv")) {
      EXPECT_EQ(nodeFlops(n), expected) << n.op();
      ++convs;
    }
  EXPECT_EQ(convs, 3u);
}

TEST(PlanTest, VariadicSumWithARepeatedDyingOperandIsNotInPlace) {
  // %a dies at the Sum and is its first operand; the kernel writes the output
  // before it reads operand 2 (%a again), so sharing would give 2(a+b).
  auto r = runText("func @f(%x: f32[3], %b: f32[3]) {\n"
                   "  %a = Neg(%x) : f32[3]\n"
                   "  %s = Sum(%a, %b, %a) : f32[3]\n"
                   "  return %s\n}\n",
                   {Tensor::fromDoubles(DType::F32, {3}, {1, 2, 3}),
                    Tensor::fromDoubles(DType::F32, {3}, {10, 20, 30})});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].getDouble(0), 8.0); // -1 + 10 - 1
  EXPECT_EQ(r[0].getDouble(2), 24.0);
}

TEST(PlanTest, AReturnedReadIsTheValueBeforeTheWrite) {
  auto r = runText("state @w : f32[2] param\n"
                   "func @f(%x: f32[2]) {\n"
                   "  %w = Read(@w) : f32[2]\n"
                   "  %n = Add(%w, %x) : f32[2]\n"
                   "  Assign(@w, %n)\n"
                   "  return %w\n}\n",
                   {Tensor::fromDoubles(DType::F32, {2}, {1, 1})},
                   {{"w", Tensor::fromDoubles(DType::F32, {2}, {5, 6})}});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].getDouble(0), 5.0);
  EXPECT_EQ(r[0].getDouble(1), 6.0);
}

/// The same when the slot is a fused update's second: the momentum buffer
/// read before MomentumUpdate writes it is returned as it was.
TEST(PlanTest, AReadOfAMomentIsTheValueBeforeTheFusedUpdate) {
  auto r = runText("state @w : f32[2] param\n"
                   "state @b : f32[2] optimizer\n"
                   "func @f(%g: f32[2]) {\n"
                   "  %b = Read(@b) : f32[2]\n"
                   "  MomentumUpdate(@w, @b, %g) {lr = 0.5, momentum = 0.5}\n"
                   "  return %b\n}\n",
                   {Tensor::fromDoubles(DType::F32, {2}, {1, 1})},
                   {{"b", Tensor::fromDoubles(DType::F32, {2}, {5, 6})}});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].getDouble(0), 5.0);
  EXPECT_EQ(r[0].getDouble(1), 6.0);
}

TEST(PlanTest, ElementwiseChainsShareOneBuffer) {
  auto m = takeOrFail(parseModule("func @f(%x: f32[256]) {\n"
                                  "  %a = Neg(%x) : f32[256]\n"
                                  "  %b = Exp(%a) : f32[256]\n"
                                  "  %c = Tanh(%b) : f32[256]\n"
                                  "  return %c\n}\n"));
  ASSERT_TRUE(m);
  auto plan = takeOrFail(lowerModule(*m, cpuTarget()));
  // x (an argument) and one buffer for a, b and c in turn.
  EXPECT_EQ(plan.ArenaBytes, 2u * 1024u);
}

} // namespace

namespace {

/// A weight used twice: its gradient is the sum of two partial ones, which
/// lowering computes in place in the first partial's buffer. The report still
/// counts it as a gradient: with LOMO the most gradient bytes live at once
/// are at least the parameter's.
TEST(PlanTest, TiedWeightGradientIsCountedAsAGradient) {
  auto m =
      takeOrFail(parseModule("state @w : f32[64, 64] param\n"
                             "func @forward(%x: f32[8, 64]) {\n"
                             "  %w = Read(@w) : f32[64, 64]\n"
                             "  %h = MatMul(%x, %w) : f32[8, 64]\n"
                             "  %a = Tanh(%h) : f32[8, 64]\n"
                             "  %y = MatMul(%a, %w) : f32[8, 64]\n"
                             "  %loss = ReduceSum(%y) {keepdims = 0} : f32[]\n"
                             "  return %loss\n}\n"));
  ASSERT_TRUE(m);
  PassManager pm;
  ASSERT_EQ(errorOf(pm.addPipeline(
                "autodiff,optimizer{kind=lomo},canonicalize,schedule")),
            "");
  ASSERT_EQ(errorOf(pm.run(*m)), "");
  Plan plan = takeOrFail(lowerModule(*m, cpuTarget()));
  EXPECT_EQ(plan.Report.LargestParameter, 64u * 64 * 4);
  EXPECT_GE(plan.Report.GradientsMaxLive, plan.Report.LargestParameter);
}

} // namespace

namespace {

// OpenBLAS's AVX-512 kernels where the CPU has AVX-512 and the core OpenBLAS
// chose has none (tools/headroom.cpp re-runs itself with them); nothing to
// change otherwise.
TEST(Devices, BetterOpenBlasCore) {
  EXPECT_EQ(betterOpenBlasCoreFor(true, "Prescott"), "SKYLAKEX");
  EXPECT_EQ(betterOpenBlasCoreFor(true, "Haswell"), "SKYLAKEX");
  EXPECT_EQ(betterOpenBlasCoreFor(true, "Zen"), "SKYLAKEX");
  EXPECT_EQ(betterOpenBlasCoreFor(true, "SkylakeX"), "");
  EXPECT_EQ(betterOpenBlasCoreFor(true, "Cooperlake"), "");
  EXPECT_EQ(betterOpenBlasCoreFor(true, "SapphireRapids"), "");
  EXPECT_EQ(betterOpenBlasCoreFor(false, "Haswell"), "");
  EXPECT_EQ(betterOpenBlasCoreFor(false, "Prescott"), "");
  EXPECT_FALSE(openBlasCore().empty());
}

} // namespace

namespace {

/// `f`'s nodes in order, the terminator excluded (what the lowering calls).
static std::vector<const Node *> callsOf(const Function &f) {
  std::vector<const Node *> calls;
  for (const Node &n : f.nodes())
    if (!n.info()->has(opflags::Terminator))
      calls.push_back(&n);
  return calls;
}

/// The copy stream (compiler/Streams.h): transfers and host calls run on
/// it; a group of them is joined by the compute stream at its first call
/// after the next group, and the gradient a group copies lives, in the plan,
/// until that join (two gradients in flight, not one).
TEST(StreamsTest, GroupsAreJoinedAfterTheNextGroup) {
  auto m = takeOrFail(parseModule("state @w : f32[64] param\n"
                                  "state @v : f32[64] param\n"
                                  "state @w.grad : f32[64] grad host\n"
                                  "state @v.grad : f32[64] grad host\n"
                                  "func @step(%x: f32[64]) {\n"
                                  "  %w = Read(@w) : f32[64]\n"
                                  "  %v = Read(@v) : f32[64]\n"
                                  "  %g = Mul(%x, %w) : f32[64]\n"
                                  "  %h = ToHost(%g) : f32[64]\n"
                                  "  Accumulate(@w.grad, %h) {first = 0, "
                                  "scale = 1.0}\n"
                                  "  %k = Mul(%x, %v) : f32[64]\n"
                                  "  %kh = ToHost(%k) : f32[64]\n"
                                  "  Accumulate(@v.grad, %kh) {first = 0, "
                                  "scale = 1.0}\n"
                                  "  %t = Mul(%x, %x) : f32[64]\n"
                                  "  %u = Add(%t, %x) : f32[64]\n"
                                  "  return %u\n"
                                  "}\n"));
  const Function &f = *m->functions().front();
  std::vector<const Node *> calls = callsOf(f);
  PoolAssignment pools(f);
  StreamSchedule s = scheduleStreams(calls, pools, cudaTarget());
  std::vector<bool> copy = {false, false, false, true,  true,
                            false, true,  true,  false, false};
  EXPECT_EQ(s.OnCopy, copy);
  // %t, the first compute call after the second group, joins the first.
  EXPECT_EQ(s.WaitFor[8], 4);
  EXPECT_EQ(s.WaitFor[9], -1);
  EXPECT_EQ(s.WaitFor[5], -1);
  EXPECT_EQ(s.JoinedAt[3], 8);
  EXPECT_EQ(s.JoinedAt[4], 8);
  EXPECT_EQ(s.JoinedAt[6], 10); // the function's end
  // Lowered: %g lives until the join, past %k's birth, so the two do not
  // share a place.
  Plan plan = takeOrFail(lowerModule(*m, cudaTarget()));
  const PlanFunction &pf = plan.Functions.front();
  const Placement &g = plan.Placements[pf.Calls[2].Outputs[0]];
  const Placement &k = plan.Placements[pf.Calls[5].Outputs[0]];
  EXPECT_NE(g.Offset, k.Offset);
  EXPECT_EQ(pf.Calls[8].WaitFor, 4);
  EXPECT_TRUE(pf.Calls[3].onCopyStream());
}

/// Collectives on cuda: one of values or state runs on the copy stream; a
/// compute call waits for the collective that made its operand or wrote a
/// slot it reads; one padded through the workspace runs in order, after
/// the copy stream's collectives (NCCL runs one at a time); on the cpu
/// target everything is in order.
TEST(StreamsTest, CollectivesOverlapOnCuda) {
  auto m = takeOrFail(parseModule("ranks 2\n"
                                  "state @acc : f32[4] grad\n"
                                  "func @f(%x: f32[4], %y: f32[3]) {\n"
                                  "  %a = ReduceScatter(%x) {op = \"mean\"} "
                                  ": f32[2]\n"
                                  "  AllReduceState(@acc) {op = \"mean\"}\n"
                                  "  %n = Neg(%a) : f32[2]\n"
                                  "  %r = Read(@acc) : f32[4]\n"
                                  "  %b = ReduceScatter(%y) {op = \"mean\"} "
                                  ": f32[2]\n"
                                  "  return %n, %r, %b\n"
                                  "}\n"));
  const Function &f = *m->functions().front();
  std::vector<const Node *> calls = callsOf(f);
  PoolAssignment pools(f);
  StreamSchedule s = scheduleStreams(calls, pools, cudaTarget());
  EXPECT_EQ(s.OnCopy, (std::vector<bool>{true, true, false, false, false}));
  EXPECT_EQ(s.WaitFor[2], 0); // %n reads %a
  EXPECT_EQ(s.WaitFor[3], 1); // the Read of @acc, which AllReduceState wrote
  EXPECT_EQ(s.WaitFor[4], 1); // the padded ReduceScatter, in order
  StreamSchedule cpu = scheduleStreams(calls, pools, cpuTarget());
  EXPECT_EQ(cpu.OnCopy, std::vector<bool>(5, false));
  Plan plan = takeOrFail(lowerModule(*m, cudaTarget()));
  const PlanFunction &pf = plan.Functions.front();
  EXPECT_TRUE(pf.Calls[0].Overlapped);
  EXPECT_TRUE(pf.Calls[1].Overlapped);
  EXPECT_FALSE(pf.Calls[4].Overlapped);
  EXPECT_EQ(pf.Calls[4].WaitFor, 1);
}

} // namespace

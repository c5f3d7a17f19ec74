//===- AutodiffTest.cpp - Finite-difference checks of every gradient rule -===//
//
// Each case is a small float64 function of parameters. The harness appends
// loss = sum(out * W) for a fixed random W, runs the autodiff pass, executes
// the step on the CPU backend, and compares every parameter's gradient with
// central differences of the loss (eps 1e-6). In float64 the truncation error
// is O(eps^2) ~ 1e-12 and the rounding error ~ 1e-16 / eps ~ 1e-10, so
// |ad - fd| <= 1e-7 + 1e-6 |fd| leaves two orders of margin and still catches
// any wrong rule (a wrong factor or sign is off by O(1)).
//
//===----------------------------------------------------------------------===//
#include "RecurrentModels.h"
#include "TestUtil.h"
#include "compiler/OnnxImport.h"
#include "compiler/Parser.h"
#include "compiler/Printer.h"
#include "kernels/cpu/CpuTarget.h"
#include "passes/GradientRules.h"
#include "passes/PassManager.h"
#include "runtime/Executor.h"

#include <cmath>
#include <random>
#include <set>

using namespace headroom;

namespace {

struct GradCase {
  const char *Name;
  const char *Decls;     // state slots (params to check; frozen ones are not)
  const char *Body;      // lines of @forward, defining %out
  const char *OutType;   // the type of %out
  bool Positive = false; // initialize parameters in [0.5, 1.5]
};

const GradCase kCases[] = {
    // Elementwise arithmetic.
    {"Add", "state @a : f64[3, 4] param\nstate @b : f64[4] param\n",
     "%a = Read(@a) : f64[3, 4]\n%b = Read(@b) : f64[4]\n"
     "%out = Add(%a, %b) : f64[3, 4]\n",
     "f64[3, 4]"},
    {"Sub", "state @a : f64[3, 1] param\nstate @b : f64[1, 4] param\n",
     "%a = Read(@a) : f64[3, 1]\n%b = Read(@b) : f64[1, 4]\n"
     "%out = Sub(%a, %b) : f64[3, 4]\n",
     "f64[3, 4]"},
    {"Mul", "state @a : f64[2, 3, 4] param\nstate @b : f64[3, 1] param\n",
     "%a = Read(@a) : f64[2, 3, 4]\n%b = Read(@b) : f64[3, 1]\n"
     "%out = Mul(%a, %b) : f64[2, 3, 4]\n",
     "f64[2, 3, 4]"},
    {"Div", "state @a : f64[3, 4] param\nstate @b : f64[4] param\n",
     "%a = Read(@a) : f64[3, 4]\n%b = Read(@b) : f64[4]\n"
     "%out = Div(%a, %b) : f64[3, 4]\n",
     "f64[3, 4]", true},
    {"Pow", "state @a : f64[5] param\nstate @b : f64[5] param\n",
     "%a = Read(@a) : f64[5]\n%b = Read(@b) : f64[5]\n"
     "%out = Pow(%a, %b) : f64[5]\n",
     "f64[5]", true},
    {"PowConstantExponent", "state @a : f64[5] param\n",
     "%a = Read(@a) : f64[5]\n"
     "%two = Constant() {value = dense<f64[]> 2.0} : f64[]\n"
     "%out = Pow(%a, %two) : f64[5]\n",
     "f64[5]"},
    {"Sum", "state @a : f64[3, 4] param\nstate @b : f64[4] param\n",
     "%a = Read(@a) : f64[3, 4]\n%b = Read(@b) : f64[4]\n"
     "%out = Sum(%a, %b, %a) : f64[3, 4]\n",
     "f64[3, 4]"},
    {"Neg", "state @a : f64[6] param\n",
     "%a = Read(@a) : f64[6]\n%out = Neg(%a) : f64[6]\n", "f64[6]"},
    {"Identity", "state @a : f64[6] param\n",
     "%a = Read(@a) : f64[6]\n%out = Identity(%a) : f64[6]\n", "f64[6]"},
    {"Sqrt", "state @a : f64[6] param\n",
     "%a = Read(@a) : f64[6]\n%out = Sqrt(%a) : f64[6]\n", "f64[6]", true},
    {"Reciprocal", "state @a : f64[6] param\n",
     "%a = Read(@a) : f64[6]\n%out = Reciprocal(%a) : f64[6]\n", "f64[6]",
     true},
    {"Exp", "state @a : f64[6] param\n",
     "%a = Read(@a) : f64[6]\n%out = Exp(%a) : f64[6]\n", "f64[6]"},
    {"Log", "state @a : f64[6] param\n",
     "%a = Read(@a) : f64[6]\n%out = Log(%a) : f64[6]\n", "f64[6]", true},
    {"Sin", "state @a : f64[6] param\n",
     "%a = Read(@a) : f64[6]\n%out = Sin(%a) : f64[6]\n", "f64[6]"},
    {"Cos", "state @a : f64[6] param\n",
     "%a = Read(@a) : f64[6]\n%out = Cos(%a) : f64[6]\n", "f64[6]"},
    {"Erf", "state @a : f64[6] param\n",
     "%a = Read(@a) : f64[6]\n%out = Erf(%a) : f64[6]\n", "f64[6]"},
    {"Cast", "state @a : f64[6] param\n",
     "%a = Read(@a) : f64[6]\n%out = Cast(%a) {to = f64} : f64[6]\n", "f64[6]"},
    // Activations.
    {"Tanh", "state @a : f64[6] param\n",
     "%a = Read(@a) : f64[6]\n%out = Tanh(%a) : f64[6]\n", "f64[6]"},
    {"Sigmoid", "state @a : f64[6] param\n",
     "%a = Read(@a) : f64[6]\n%out = Sigmoid(%a) : f64[6]\n", "f64[6]"},
    {"Relu", "state @a : f64[3, 4] param\n",
     "%a = Read(@a) : f64[3, 4]\n%out = Relu(%a) : f64[3, 4]\n", "f64[3, 4]"},
    {"LeakyRelu", "state @a : f64[3, 4] param\n",
     "%a = Read(@a) : f64[3, 4]\n"
     "%out = LeakyRelu(%a) {alpha = 0.2} : f64[3, 4]\n",
     "f64[3, 4]"},
    {"Clip", "state @a : f64[3, 4] param\n",
     "%a = Read(@a) : f64[3, 4]\n"
     "%lo = Constant() {value = dense<f64[]> -0.3} : f64[]\n"
     "%hi = Constant() {value = dense<f64[]> 0.4} : f64[]\n"
     "%out = Clip(%a, %lo, %hi) : f64[3, 4]\n",
     "f64[3, 4]"},
    {"ClipMaxOnly", "state @a : f64[3, 4] param\n",
     "%a = Read(@a) : f64[3, 4]\n"
     "%hi = Constant() {value = dense<f64[]> 0.2} : f64[]\n"
     "%out = Clip(%a, none, %hi) : f64[3, 4]\n",
     "f64[3, 4]"},
    {"ClipUnbounded", "state @a : f64[3, 4] param\n",
     "%a = Read(@a) : f64[3, 4]\n%out = Clip(%a) : f64[3, 4]\n", "f64[3, 4]"},
    {"HardSigmoid", "state @a : f64[3, 4] param\n",
     "%a = Read(@a) : f64[3, 4]\n"
     "%out = HardSigmoid(%a) {alpha = 0.9, beta = 0.4} : f64[3, 4]\n",
     "f64[3, 4]"},
    {"GatherElements", "state @a : f64[3, 4] param\n",
     "%a = Read(@a) : f64[3, 4]\n"
     "%i = Constant() {value = dense<i64[2, 4]> [0, 2, 1, 2, 1, 0, -1, 2]} : "
     "i64[2, 4]\n"
     "%out = GatherElements(%a, %i) {axis = 0} : f64[2, 4]\n",
     "f64[2, 4]"},
    {"ScatterElements",
     "state @a : f64[3, 4] param\nstate @u : f64[2, 4] param\n",
     "%a = Read(@a) : f64[3, 4]\n%u = Read(@u) : f64[2, 4]\n"
     "%i = Constant() {value = dense<i64[2, 4]> [2, 0, 1, 0, 0, 1, 2, 2]} : "
     "i64[2, 4]\n"
     "%out = ScatterElements(%a, %i, %u) {axis = 0} : f64[3, 4]\n",
     "f64[3, 4]"},
    {"ScatterElementsAdd",
     "state @a : f64[3, 4] param\nstate @u : f64[3, 2] param\n",
     "%a = Read(@a) : f64[3, 4]\n%u = Read(@u) : f64[3, 2]\n"
     "%i = Constant() {value = dense<i64[3, 2]> [0, 0, 3, 1, 2, 2]} : "
     "i64[3, 2]\n"
     "%out = ScatterElements(%a, %i, %u) {axis = 1, reduction = \"add\"} : "
     "f64[3, 4]\n",
     "f64[3, 4]"},
    // GatherND: slices (rows) with a repeated and a negative index, and
    // single elements (k = rank).
    {"GatherND", "state @a : f64[3, 4] param\n",
     "%a = Read(@a) : f64[3, 4]\n"
     "%i = Constant() {value = dense<i64[3, 1]> [2, 0, -1]} : i64[3, 1]\n"
     "%out = GatherND(%a, %i) : f64[3, 4]\n",
     "f64[3, 4]"},
    {"GatherNDElements", "state @a : f64[3, 4] param\n",
     "%a = Read(@a) : f64[3, 4]\n"
     "%i = Constant() {value = dense<i64[2, 2]> [1, 3, 2, 0]} : i64[2, 2]\n"
     "%out = GatherND(%a, %i) : f64[2]\n",
     "f64[2]"},
    {"ScatterND", "state @a : f64[3, 4] param\nstate @u : f64[2, 4] param\n",
     "%a = Read(@a) : f64[3, 4]\n%u = Read(@u) : f64[2, 4]\n"
     "%i = Constant() {value = dense<i64[2, 1]> [2, 0]} : i64[2, 1]\n"
     "%out = ScatterND(%a, %i, %u) : f64[3, 4]\n",
     "f64[3, 4]"},
    {"ScatterNDAdd", "state @a : f64[3, 4] param\nstate @u : f64[3] param\n",
     "%a = Read(@a) : f64[3, 4]\n%u = Read(@u) : f64[3]\n"
     "%i = Constant() {value = dense<i64[3, 2]> [0, 1, 2, 3, 0, 1]} : "
     "i64[3, 2]\n"
     "%out = ScatterND(%a, %i, %u) {reduction = \"add\"} : f64[3, 4]\n",
     "f64[3, 4]"},
    {"Abs", "state @a : f64[3, 4] param\n",
     "%a = Read(@a) : f64[3, 4]\n%out = Abs(%a) : f64[3, 4]\n", "f64[3, 4]"},
    {"Softmax", "state @a : f64[2, 3, 4] param\n",
     "%a = Read(@a) : f64[2, 3, 4]\n"
     "%out = Softmax(%a) {axis = 1} : f64[2, 3, 4]\n",
     "f64[2, 3, 4]"},
    {"LogSoftmax", "state @a : f64[3, 5] param\n",
     "%a = Read(@a) : f64[3, 5]\n%out = LogSoftmax(%a) : f64[3, 5]\n",
     "f64[3, 5]"},
    {"Dropout", "state @a : f64[3, 4] param\n",
     "%a = Read(@a) : f64[3, 4]\n"
     "%r = Constant() {value = dense<f64[]> 0.3} : f64[]\n"
     "%t = Constant() {value = dense<bool[]> 1} : bool[]\n"
     "%out = Dropout(%a, %r, %t) : f64[3, 4]\n",
     "f64[3, 4]"},
    // Fused attention: grouped-query heads, a key-padding bias, dropout with
    // a causal mask (the backward must draw the forward's mask).
    {"FusedAttention",
     "state @q : f64[2, 2, 3, 4] param\nstate @k : f64[2, 1, 5, 4] param\n"
     "state @v : f64[2, 1, 5, 3] param\nstate @b : f64[2, 1, 1, 5] frozen\n",
     "%q = Read(@q) : f64[2, 2, 3, 4]\n%k = Read(@k) : f64[2, 1, 5, 4]\n"
     "%v = Read(@v) : f64[2, 1, 5, 3]\n%b = Read(@b) : f64[2, 1, 1, 5]\n"
     "%out, %lse = FusedAttention(%q, %k, %v, %b) {scale = 0.7} : "
     "f64[2, 2, 3, 3], f64[2, 2, 3]\n",
     "f64[2, 2, 3, 3]"},
    {"FusedAttentionCausalDropout",
     "state @q : f64[1, 2, 6, 4] param\nstate @k : f64[1, 2, 6, 4] param\n"
     "state @v : f64[1, 2, 6, 5] param\n",
     "%q = Read(@q) : f64[1, 2, 6, 4]\n%k = Read(@k) : f64[1, 2, 6, 4]\n"
     "%v = Read(@v) : f64[1, 2, 6, 5]\n"
     "%out, %lse = FusedAttention(%q, %k, %v) {causal = 1, dropout = 0.3, "
     "scale = 0.5} : f64[1, 2, 6, 5], f64[1, 2, 6]\n",
     "f64[1, 2, 6, 5]"},
    // A trained bias (T5's relative positions), shared by the batch.
    {"FusedAttentionTrainedBias",
     "state @q : f64[2, 2, 3, 4] param\nstate @k : f64[2, 2, 3, 4] param\n"
     "state @v : f64[2, 2, 3, 2] param\nstate @b : f64[1, 2, 3, 3] param\n",
     "%q = Read(@q) : f64[2, 2, 3, 4]\n%k = Read(@k) : f64[2, 2, 3, 4]\n"
     "%v = Read(@v) : f64[2, 2, 3, 2]\n%b = Read(@b) : f64[1, 2, 3, 3]\n"
     "%out, %lse = FusedAttention(%q, %k, %v, %b) {causal = 1, dropout = 0.2, "
     "scale = 0.6} : f64[2, 2, 3, 2], f64[2, 2, 3]\n",
     "f64[2, 2, 3, 2]"},
    // Linear algebra.
    {"MatMulSharedWeight",
     "state @a : f64[2, 3, 4] param\nstate @b : f64[4, 5] param\n",
     "%a = Read(@a) : f64[2, 3, 4]\n%b = Read(@b) : f64[4, 5]\n"
     "%out = MatMul(%a, %b) : f64[2, 3, 5]\n",
     "f64[2, 3, 5]"},
    {"MatMulBatched",
     "state @a : f64[2, 3, 4] param\nstate @b : f64[2, 4, 5] param\n",
     "%a = Read(@a) : f64[2, 3, 4]\n%b = Read(@b) : f64[2, 4, 5]\n"
     "%out = MatMul(%a, %b) : f64[2, 3, 5]\n",
     "f64[2, 3, 5]"},
    {"MatMulBroadcastLeft",
     "state @a : f64[3, 4] param\nstate @b : f64[2, 4, 5] param\n",
     "%a = Read(@a) : f64[3, 4]\n%b = Read(@b) : f64[2, 4, 5]\n"
     "%out = MatMul(%a, %b) : f64[2, 3, 5]\n",
     "f64[2, 3, 5]"},
    // headroom's transposed operands, every combination of flags, batched,
    // broadcast and shared weights.
    {"MatMulTransA",
     "state @a : f64[2, 4, 3] param\nstate @b : f64[2, 4, 5] param\n",
     "%a = Read(@a) : f64[2, 4, 3]\n%b = Read(@b) : f64[2, 4, 5]\n"
     "%out = MatMul(%a, %b) {transA = 1} : f64[2, 3, 5]\n",
     "f64[2, 3, 5]"},
    {"MatMulTransB",
     "state @a : f64[2, 3, 4] param\nstate @b : f64[5, 4] param\n",
     "%a = Read(@a) : f64[2, 3, 4]\n%b = Read(@b) : f64[5, 4]\n"
     "%out = MatMul(%a, %b) {transB = 1} : f64[2, 3, 5]\n",
     "f64[2, 3, 5]"},
    {"MatMulTransBoth",
     "state @a : f64[4, 3] param\nstate @b : f64[2, 5, 4] param\n",
     "%a = Read(@a) : f64[4, 3]\n%b = Read(@b) : f64[2, 5, 4]\n"
     "%out = MatMul(%a, %b) {transA = 1, transB = 1} : f64[2, 3, 5]\n",
     "f64[2, 3, 5]"},
    {"MatMulTransASharedWeight",
     "state @a : f64[2, 4, 3] param\nstate @b : f64[4, 5] param\n",
     "%a = Read(@a) : f64[2, 4, 3]\n%b = Read(@b) : f64[4, 5]\n"
     "%out = MatMul(%a, %b) {transA = 1} : f64[2, 3, 5]\n",
     "f64[2, 3, 5]"},
    {"Gemm",
     "state @a : f64[3, 4] param\nstate @b : f64[5, 4] param\nstate @c : "
     "f64[5] param\n",
     "%a = Read(@a) : f64[3, 4]\n%b = Read(@b) : f64[5, 4]\n"
     "%c = Read(@c) : f64[5]\n"
     "%out = Gemm(%a, %b, %c) {alpha = 0.5, beta = 2.0, transB = 1} : f64[3, "
     "5]\n",
     "f64[3, 5]"},
    {"GemmTransA", "state @a : f64[4, 3] param\nstate @b : f64[4, 5] param\n",
     "%a = Read(@a) : f64[4, 3]\n%b = Read(@b) : f64[4, 5]\n"
     "%out = Gemm(%a, %b) {transA = 1} : f64[3, 5]\n",
     "f64[3, 5]"},
    {"GemmTransBoth",
     "state @a : f64[4, 3] param\nstate @b : f64[5, 4] param\n",
     "%a = Read(@a) : f64[4, 3]\n%b = Read(@b) : f64[5, 4]\n"
     "%out = Gemm(%a, %b) {transA = 1, transB = 1} : f64[3, 5]\n",
     "f64[3, 5]"},
    // Reductions, normalizations, losses.
    {"ReduceSum", "state @a : f64[2, 3, 4] param\n",
     "%a = Read(@a) : f64[2, 3, 4]\n"
     "%axes = Constant() {value = dense<i64[1]> [1]} : i64[1]\n"
     "%out = ReduceSum(%a, %axes) {keepdims = 0} : f64[2, 4]\n",
     "f64[2, 4]"},
    {"ReduceMean", "state @a : f64[2, 3, 4] param\n",
     "%a = Read(@a) : f64[2, 3, 4]\n"
     "%out = ReduceMean(%a) {axes = [0, 2], keepdims = 1} : f64[1, 3, 1]\n",
     "f64[1, 3, 1]"},
    {"SoftmaxCrossEntropyLossMean",
     "state @s : f64[4, 5] param\nstate @w : f64[5] frozen\n",
     "%s = Read(@s) : f64[4, 5]\n%w = Read(@w) : f64[5]\n"
     "%y = Constant() {value = dense<i64[4]> [1, 4, -1, 0]} : i64[4]\n"
     "%out = SoftmaxCrossEntropyLoss(%s, %y, %w) {ignore_index = -1, "
     "reduction = \"mean\"} : f64[]\n",
     "f64[]", true},
    {"SoftmaxCrossEntropyLossSum", "state @s : f64[2, 3, 2] param\n",
     "%s = Read(@s) : f64[2, 3, 2]\n"
     "%y = Constant() {value = dense<i64[2, 2]> [0, 2, 1, 1]} : i64[2, 2]\n"
     "%out = SoftmaxCrossEntropyLoss(%s, %y) {reduction = \"sum\"} : f64[]\n",
     "f64[]"},
    {"SoftmaxCrossEntropyLossNone", "state @s : f64[3, 4] param\n",
     "%s = Read(@s) : f64[3, 4]\n"
     "%y = Constant() {value = dense<i64[3]> [3, 0, 2]} : i64[3]\n"
     "%out = SoftmaxCrossEntropyLoss(%s, %y) {reduction = \"none\"} : f64[3]\n",
     "f64[3]"},
    // The fused output head: w [V, D] (transB) and [D, V], chunks of 2 rows
    // (dw summed over three), an ignored label; a frozen head gets no dw.
    {"LinearCrossEntropy",
     "state @x : f64[5, 3] param\nstate @w : f64[4, 3] param\n",
     "%x = Read(@x) : f64[5, 3]\n%w = Read(@w) : f64[4, 3]\n"
     "%y = Constant() {value = dense<i64[5]> [1, 3, -1, 0, 2]} : i64[5]\n"
     "%out = LinearCrossEntropy(%x, %w, %y) {ignore_index = -1, rows = 2, "
     "transB = 1} : f64[5]\n",
     "f64[5]"},
    {"LinearCrossEntropyFrozenHead",
     "state @x : f64[4, 3] param\nstate @w : f64[3, 6] frozen\n",
     "%x = Read(@x) : f64[4, 3]\n%w = Read(@w) : f64[3, 6]\n"
     "%y = Constant() {value = dense<i64[4]> [5, 0, 2, 2]} : i64[4]\n"
     "%out = LinearCrossEntropy(%x, %w, %y) {rows = 3} : f64[4]\n",
     "f64[4]"},
    {"LayerNormalization",
     "state @x : f64[2, 3, 4] param\nstate @g : f64[4] param\nstate @b : "
     "f64[4] param\n",
     "%x = Read(@x) : f64[2, 3, 4]\n%g = Read(@g) : f64[4]\n"
     "%b = Read(@b) : f64[4]\n"
     "%out = LayerNormalization(%x, %g, %b) {axis = -1, epsilon = 1e-05} : "
     "f64[2, 3, 4]\n",
     "f64[2, 3, 4]"},
    {"BatchNormalization",
     "state @x : f64[4, 3, 2, 2] param\nstate @g : f64[3] param\n"
     "state @b : f64[3] param\nstate @m : f64[3] frozen\nstate @v : f64[3] "
     "frozen\n",
     "%x = Read(@x) : f64[4, 3, 2, 2]\n%g = Read(@g) : f64[3]\n"
     "%b = Read(@b) : f64[3]\n%m = Read(@m) : f64[3]\n%v = Read(@v) : f64[3]\n"
     "%out, %rm, %rv = BatchNormalization(%x, %g, %b, %m, %v) {epsilon = "
     "1e-05, "
     "momentum = 0.9, training_mode = 1} : f64[4, 3, 2, 2], f64[3], f64[3]\n",
     "f64[4, 3, 2, 2]", true},
    // Convolution and pooling.
    {"Conv",
     "state @x : f64[1, 4, 5, 5] param\nstate @w : f64[4, 2, 3, 3] param\n"
     "state @b : f64[4] param\n",
     "%x = Read(@x) : f64[1, 4, 5, 5]\n%w = Read(@w) : f64[4, 2, 3, 3]\n"
     "%b = Read(@b) : f64[4]\n"
     "%out = Conv(%x, %w, %b) {group = 2, kernel_shape = [3, 3], pads = [1, 1, "
     "1, 1], strides = [2, 2]} : f64[1, 4, 3, 3]\n",
     "f64[1, 4, 3, 3]"},
    {"ConvDilated",
     "state @x : f64[2, 2, 6, 6] param\nstate @w : f64[3, 2, 2, 2] param\n",
     "%x = Read(@x) : f64[2, 2, 6, 6]\n%w = Read(@w) : f64[3, 2, 2, 2]\n"
     "%out = Conv(%x, %w) {dilations = [2, 2], pads = [0, 1, 0, 1]} : "
     "f64[2, 3, 4, 6]\n",
     "f64[2, 3, 4, 6]"},
    {"MaxPool", "state @x : f64[1, 2, 5, 5] param\n",
     "%x = Read(@x) : f64[1, 2, 5, 5]\n"
     "%out = MaxPool(%x) {kernel_shape = [3, 3]} : f64[1, 2, 3, 3]\n",
     "f64[1, 2, 3, 3]"},
    {"AveragePool", "state @x : f64[1, 2, 5, 5] param\n",
     "%x = Read(@x) : f64[1, 2, 5, 5]\n"
     "%out = AveragePool(%x) {kernel_shape = [3, 3], pads = [1, 1, 1, 1], "
     "strides = [2, 2]} : f64[1, 2, 3, 3]\n",
     "f64[1, 2, 3, 3]"},
    {"GlobalAveragePool", "state @x : f64[2, 3, 2, 3] param\n",
     "%x = Read(@x) : f64[2, 3, 2, 3]\n"
     "%out = GlobalAveragePool(%x) : f64[2, 3, 1, 1]\n",
     "f64[2, 3, 1, 1]"},
    {"Pad", "state @x : f64[1, 1, 3, 3] param\n",
     "%x = Read(@x) : f64[1, 1, 3, 3]\n"
     "%p = Constant() {value = dense<i64[8]> [0, 0, 1, 2, 0, 0, 1, 0]} : "
     "i64[8]\n"
     "%out = Pad(%x, %p) {mode = \"constant\"} : f64[1, 1, 5, 5]\n",
     "f64[1, 1, 5, 5]"},
    // Shapes and data movement.
    {"Reshape", "state @x : f64[2, 6] param\n",
     "%x = Read(@x) : f64[2, 6]\n"
     "%s = Constant() {value = dense<i64[3]> [3, 2, 2]} : i64[3]\n"
     "%out = Reshape(%x, %s) : f64[3, 2, 2]\n",
     "f64[3, 2, 2]"},
    {"Flatten", "state @x : f64[2, 3, 2] param\n",
     "%x = Read(@x) : f64[2, 3, 2]\n%out = Flatten(%x) : f64[2, 6]\n",
     "f64[2, 6]"},
    {"Squeeze", "state @x : f64[2, 1, 3] param\n",
     "%x = Read(@x) : f64[2, 1, 3]\n"
     "%a = Constant() {value = dense<i64[1]> [1]} : i64[1]\n"
     "%out = Squeeze(%x, %a) : f64[2, 3]\n",
     "f64[2, 3]"},
    {"Unsqueeze", "state @x : f64[2, 3] param\n",
     "%x = Read(@x) : f64[2, 3]\n"
     "%a = Constant() {value = dense<i64[1]> [0]} : i64[1]\n"
     "%out = Unsqueeze(%x, %a) : f64[1, 2, 3]\n",
     "f64[1, 2, 3]"},
    {"Transpose", "state @x : f64[2, 3, 4] param\n",
     "%x = Read(@x) : f64[2, 3, 4]\n"
     "%out = Transpose(%x) {perm = [1, 2, 0]} : f64[3, 4, 2]\n",
     "f64[3, 4, 2]"},
    {"Concat", "state @a : f64[2, 3] param\nstate @b : f64[2, 2] param\n",
     "%a = Read(@a) : f64[2, 3]\n%b = Read(@b) : f64[2, 2]\n"
     "%out = Concat(%a, %b, %a) {axis = 1} : f64[2, 8]\n",
     "f64[2, 8]"},
    {"Split", "state @x : f64[4, 6] param\n",
     "%x = Read(@x) : f64[4, 6]\n"
     "%s = Constant() {value = dense<i64[2]> [2, 4]} : i64[2]\n"
     "%out, %rest = Split(%x, %s) {axis = 1} : f64[4, 2], f64[4, 4]\n",
     "f64[4, 2]"},
    {"Slice", "state @x : f64[4, 6] param\n",
     "%x = Read(@x) : f64[4, 6]\n"
     "%st = Constant() {value = dense<i64[2]> [1, 5]} : i64[2]\n"
     "%en = Constant() {value = dense<i64[2]> [4, 0]} : i64[2]\n"
     "%ax = Constant() {value = dense<i64[2]> [0, 1]} : i64[2]\n"
     "%sp = Constant() {value = dense<i64[2]> [1, -2]} : i64[2]\n"
     "%out = Slice(%x, %st, %en, %ax, %sp) : f64[3, 3]\n",
     "f64[3, 3]"},
    {"Gather", "state @t : f64[5, 3] param\n",
     "%t = Read(@t) : f64[5, 3]\n"
     "%i = Constant() {value = dense<i64[2, 2]> [1, 3, 1, -1]} : i64[2, 2]\n"
     "%out = Gather(%t, %i) : f64[2, 2, 3]\n",
     "f64[2, 2, 3]"},
    {"Expand", "state @x : f64[3, 1] param\n",
     "%x = Read(@x) : f64[3, 1]\n"
     "%s = Constant() {value = dense<i64[3]> [2, 3, 4]} : i64[3]\n"
     "%out = Expand(%x, %s) : f64[2, 3, 4]\n",
     "f64[2, 3, 4]"},
    {"Where", "state @a : f64[3, 4] param\nstate @b : f64[4] param\n",
     "%a = Read(@a) : f64[3, 4]\n%b = Read(@b) : f64[4]\n"
     "%c = Constant() {value = dense<bool[3, 4]> [1, 0, 0, 1, 1, 1, 0, 0, 0, "
     "1, 0, 1]} : bool[3, 4]\n"
     "%out = Where(%c, %a, %b) : f64[3, 4]\n",
     "f64[3, 4]"},
    {"Trilu", "state @x : f64[4, 4] param\n",
     "%x = Read(@x) : f64[4, 4]\n%out = Trilu(%x) {upper = 0} : f64[4, 4]\n",
     "f64[4, 4]"},
    {"CumSum", "state @x : f64[3, 4, 2] param\n",
     "%x = Read(@x) : f64[3, 4, 2]\n"
     "%a = Constant() {value = dense<i64[]> 1} : i64[]\n"
     "%out = CumSum(%x, %a) : f64[3, 4, 2]\n",
     "f64[3, 4, 2]"},
    {"CumSumExclusiveReverse", "state @x : f64[3, 4] param\n",
     "%x = Read(@x) : f64[3, 4]\n"
     "%a = Constant() {value = dense<i64[1]> [-1]} : i64[1]\n"
     "%out = CumSum(%x, %a) {exclusive = 1, reverse = 1} : f64[3, 4]\n",
     "f64[3, 4]"},
};

/// `f64[2, 3]` -> element count.
int64_t countOf(llvm::StringRef type) {
  auto dims = type.split('[').second.split(']').first;
  int64_t n = 1;
  llvm::SmallVector<llvm::StringRef, 4> parts;
  dims.split(parts, ',', -1, false);
  for (llvm::StringRef p : parts) {
    int64_t d = 0;
    p.trim().getAsInteger(10, d);
    n *= d;
  }
  return n;
}

std::string moduleText(const GradCase &c, std::mt19937 &rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::string w = "dense<" + std::string(c.OutType) + "> [";
  for (int64_t i = 0, n = countOf(c.OutType); i < n; ++i)
    w += (i ? ", " : "") + std::to_string(u(rng));
  w += "]";
  std::string type = c.OutType;
  std::string text = std::string(c.Decls) + "func @forward() {\n" + c.Body;
  text += "%__w = Constant() {value = " + w + "} : " + type + "\n";
  text += "%__p = Mul(%out, %__w) : " + type + "\n";
  text += "%__loss = ReduceSum(%__p) {keepdims = 0} : f64[]\n";
  text += "return %__loss\n}\n";
  return text;
}

class GradientRule : public ::testing::TestWithParam<GradCase> {};

/// Runs the autodiff pipeline on `m` (whose @forward returns the loss),
/// fills its state with random values and compares every parameter's
/// gradient with central differences of the loss.
void expectGradientsMatchFiniteDifferences(Module &m, std::mt19937 &rng,
                                           bool positive) {
  PassManager pm;
  ASSERT_EQ(errorOf(pm.addPipeline("autodiff")), "");
  ASSERT_EQ(errorOf(pm.run(m)), "") << moduleToString(m);
  auto plan = lowerModule(m, cpuTarget());
  ASSERT_TRUE(static_cast<bool>(plan));
  auto exec = takeOrFail(createCpuExecutor(std::move(*plan)));
  ASSERT_TRUE(exec);
  std::uniform_real_distribution<double> u(positive ? 0.5 : -1.0,
                                           positive ? 1.5 : 1.0);
  for (const auto &s : m.states()) {
    Tensor t(s->type());
    for (int64_t i = 0; i < t.numElements(); ++i)
      t.setDouble(i, u(rng));
    ASSERT_EQ(errorOf(exec->writeState(s->name(), t)), "");
  }
  auto loss = [&]() {
    exec->setStep(0); // the same random numbers every run
    auto r = exec->run("step", {});
    EXPECT_TRUE(static_cast<bool>(r))
        << (r ? "" : llvm::toString(r.takeError()));
    return r ? (*r)[0].getDouble(0) : 0.0;
  };
  loss();
  std::map<std::string, Tensor> grads = exec->gradients();
  const double eps = 1e-6;
  unsigned checked = 0;
  for (const auto &s : m.states()) {
    if (s->kind() != StateKind::Param)
      continue;
    ASSERT_TRUE(grads.count(s->name())) << "no gradient for @" << s->name();
    const Tensor &g = grads.at(s->name());
    Tensor x = *exec->readState(s->name());
    for (int64_t i = 0; i < x.numElements(); ++i) {
      double orig = x.getDouble(i);
      x.setDouble(i, orig + eps);
      ASSERT_EQ(errorOf(exec->writeState(s->name(), x)), "");
      double plus = loss();
      x.setDouble(i, orig - eps);
      ASSERT_EQ(errorOf(exec->writeState(s->name(), x)), "");
      double minus = loss();
      x.setDouble(i, orig);
      ASSERT_EQ(errorOf(exec->writeState(s->name(), x)), "");
      double fd = (plus - minus) / (2 * eps), ad = g.getDouble(i);
      EXPECT_NEAR(ad, fd, 1e-7 + 1e-6 * std::fabs(fd))
          << "@" << s->name() << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 0u);
}

TEST_P(GradientRule, MatchesFiniteDifferences) {
  const GradCase &c = GetParam();
  std::mt19937 rng(1234);
  auto m = takeOrFail(parseModule(moduleText(c, rng), c.Name));
  ASSERT_TRUE(m);
  expectGradientsMatchFiniteDifferences(*m, rng, c.Positive);
}

INSTANTIATE_TEST_SUITE_P(Rules, GradientRule, ::testing::ValuesIn(kCases),
                         [](const auto &info) { return info.param.Name; });

/// Every op with a rule has a case above (so every rule is checked).
TEST(AutodiffTest, EveryRuleHasAFiniteDifferenceCase) {
  std::set<std::string> tested;
  for (const GradCase &c : kCases) {
    llvm::StringRef body(c.Body);
    for (llvm::StringRef op : opsWithGradRules())
      if (body.contains((" = " + op + "(").str()) ||
          body.contains((", %out = " + op + "(").str()))
        tested.insert(op.str());
  }
  for (llvm::StringRef op : opsWithGradRules())
    EXPECT_TRUE(tested.count(op.str())) << op.str() << " has no case";
}

TEST(AutodiffTest, OpWithoutRuleIsAClearError) {
  auto m = takeOrFail(parseModule(
      "state @a : f64[4] param\nfunc @forward() {\n"
      "  %a = Read(@a) : f64[4]\n"
      "  %m = ReduceMax(%a) {keepdims = 0} : f64[]\n  return %m\n}\n"));
  ASSERT_TRUE(m);
  PassManager pm;
  ASSERT_EQ(errorOf(pm.addPipeline("autodiff")), "");
  EXPECT_EQ(errorOf(pm.run(*m)),
            "autodiff: node 1 ('ReduceMax' defining %m): no gradient rule for "
            "op 'ReduceMax' (docs/autodiff.md lists the ops that have one)");
}

TEST(AutodiffTest, IntegerEdgesAreCut) {
  // The loss depends on @t only through Gather's data; the integer indices
  // (a data input) carry no gradient, and the table's is a scatter-add.
  auto m = takeOrFail(parseModule(
      "state @t : f64[4, 2] param\nfunc @forward(%i: i64[3]) {\n"
      "  %t = Read(@t) : f64[4, 2]\n"
      "  %g = Gather(%t, %i) : f64[3, 2]\n"
      "  %l = ReduceSum(%g) {keepdims = 0} : f64[]\n  return %l\n}\n"));
  ASSERT_TRUE(m);
  PassManager pm;
  ASSERT_EQ(errorOf(pm.addPipeline("autodiff")), "");
  ASSERT_EQ(errorOf(pm.run(*m)), "");
  std::string text = moduleToString(*m);
  EXPECT_NE(text.find("GatherGrad"), std::string::npos) << text;
  EXPECT_NE(text.find("ParamGrad(@t"), std::string::npos) << text;
}

/// LSTM, GRU (both linear_before_reset) and RNN as the importer unrolls
/// them, differentiated through time as a whole: small bidirectional f64
/// layers whose X, W, R, B and initial states are all parameters, with
/// loss = sum(Y * U) + sum(Y_h * V) (+ sum(Y_c * S)) for fixed random U, V,
/// S.
TEST(AutodiffTest, UnrolledRecurrentLayersMatchFiniteDifferences) {
  // Name, op, direction, steps, batch, inputs, hidden, B, initial_h,
  // initial_c, linear_before_reset, RNN activation, element type.
  const RecurrentSpec cases[] = {
      {"Lstm", "LSTM", "bidirectional", 3, 2, 3, 2, true, true, true, 0,
       nullptr, DType::F64},
      {"Gru", "GRU", "bidirectional", 3, 2, 3, 2, true, true, false, 0, nullptr,
       DType::F64},
      {"GruLinearBeforeReset", "GRU", "bidirectional", 3, 2, 3, 2, true, true,
       false, 1, nullptr, DType::F64},
      {"Rnn", "RNN", "bidirectional", 3, 2, 3, 2, true, true, false, 0, nullptr,
       DType::F64},
  };
  for (const RecurrentSpec &s : cases) {
    SCOPED_TRACE(s.Name);
    std::mt19937 rng(99);
    RecurrentOperands o = randomOperands(s, rng);
    onnx::ModelProto proto;
    onnx::NodeProto *n = recurrentModel(proto, s, o, /*asInitializers=*/true);
    onnx::GraphProto *g = proto.mutable_graph();
    std::vector<std::string> outputs(n->output().begin(), n->output().end());
    std::string loss;
    for (size_t k = 0; k < outputs.size(); ++k) {
      int64_t d = s.dirs();
      std::vector<int64_t> shape = {d, s.Batch, s.Hidden};
      if (k == 0)
        shape.insert(shape.begin(), s.Steps);
      auto add = [&](const char *op, std::vector<std::string> ins) {
        onnx::NodeProto *m = g->add_node();
        m->set_op_type(op);
        for (const auto &i : ins)
          m->add_input(i);
        m->add_output(outputs[k] + "_" + op);
        return m;
      };
      onnx::NodeProto *c = add("Constant", {});
      onnx::AttributeProto *a = c->add_attribute();
      a->set_name("value");
      a->set_type(onnx::AttributeProto::TENSOR);
      *a->mutable_t() = tensorToProto(randomTensor(s.Type, shape, rng), "");
      add("Mul", {outputs[k], c->output(0)});
      onnx::NodeProto *sum = add("ReduceSum", {outputs[k] + "_Mul"});
      a = sum->add_attribute();
      a->set_name("keepdims");
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(0);
      if (loss.empty()) {
        loss = sum->output(0);
        continue;
      }
      onnx::NodeProto *plus = add("Add", {loss, sum->output(0)});
      loss = plus->output(0);
    }
    onnx::NodeProto *last = g->mutable_node(g->node_size() - 1);
    last->set_output(0, "loss");
    setValueInfo(g->add_output(), "loss", TensorType(s.Type, {}));
    auto m =
        takeOrFail(importOnnxBuffer(proto.SerializeAsString(), s.Name, "", {}));
    ASSERT_TRUE(m);
    expectGradientsMatchFiniteDifferences(*m, rng, /*positive=*/false);
  }
}

} // namespace

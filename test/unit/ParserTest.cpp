//===- ParserTest.cpp - Textual IR parsing, printing and errors -----------===//
#include "compiler/Parser.h"
#include "TestUtil.h"
#include "compiler/Printer.h"
#include "compiler/Verifier.h"

#include <cmath>

using namespace headroom;

namespace {

const char *kSample = R"(state @fc1.weight : f32[3, 2] param
state @"onnx::Mask_7" : f32[3] frozen
state @fc1.weight.momentum_buffer : f32[3, 2] optimizer

func @forward(%x: f32[4, 2], %y: i64[4]) {
  %w = Read(@fc1.weight) : f32[3, 2] loc("/fc1/Gemm")
  %0 = Gemm(%x, %w, none) {alpha = 1.0, transB = 1} : f32[4, 3] loc("/fc1/Gemm")
  %c = Constant() {value = dense<i64[2]> [4, -1]} : i64[2]
  %s = Constant() {value = dense<f32[2, 2]> 0.5} : f32[2, 2]
  %h = Constant() {value = dense<f16[3]> [1.0, -inf, 0.1]} : f16[3]
  %t = Constant() {value = dense<f64[]> 1e-300} : f64[]
  %1, %2 = Split(%0) {axis = 1, names = ["a", "b\n\"c\""], ratios = [0.25, 1e-05], split = [1, 2]} : f32[4, 1], f32[4, 2]
  %3 = Cast(%1) {to = bf16} : bf16[4, 1]
  %loss = SoftmaxCrossEntropyLoss(%0, %y) {reduction = "mean"} : f32[]
  Assign(@fc1.weight, %w) loc("a \"quoted\" name")
  MomentumUpdate(@fc1.weight, @fc1.weight.momentum_buffer, %w) {lr = 0.1, momentum = 0.9}
  return %loss
}
)";

TEST(ParserTest, RoundTripsExactly) {
  auto m = takeOrFail(parseModule(kSample, "sample.hr"));
  ASSERT_TRUE(m);
  EXPECT_EQ(errorOf(verifyModule(*m)), "");
  std::string printed = moduleToString(*m);
  EXPECT_EQ(printed, kSample);
  auto again = takeOrFail(parseModule(printed));
  ASSERT_TRUE(again);
  EXPECT_EQ(moduleToString(*again), printed);
}

TEST(ParserTest, KeepsValuesAndAttributes) {
  auto m = takeOrFail(parseModule(kSample));
  ASSERT_TRUE(m);
  Function *f = m->lookupFunction("forward");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->arguments()[1]->type(), TensorType(DType::I64, {4}));
  const Node &gemm = *std::next(f->nodes().begin());
  EXPECT_EQ(gemm.op(), "Gemm");
  EXPECT_TRUE(gemm.is(OpKind::Gemm));
  EXPECT_EQ(gemm.loc(), "/fc1/Gemm");
  EXPECT_EQ(std::next(f->nodes().begin(), 9)->loc(), "a \"quoted\" name");
  EXPECT_EQ(std::next(f->nodes().begin(), 2)->loc(), "");
  EXPECT_EQ(gemm.operand(2), nullptr);
  EXPECT_EQ(gemm.intAttr("transB", 0), 1);
  EXPECT_EQ(m->lookupState("onnx::Mask_7")->kind(), StateKind::Frozen);
  const Node &half = *std::next(f->nodes().begin(), 4);
  const Tensor &t = half.attr("value")->asTensor();
  EXPECT_TRUE(std::isinf(t.getDouble(1)));
  EXPECT_EQ(t.getDouble(2),
            static_cast<double>(halfToFloat(floatToHalf(0.1f))));
}

/// Parses `text` and returns the error message.
std::string parseError(const char *text) {
  return errorOf(parseModule(text, "t.hr"));
}

TEST(ParserTest, ErrorsNameTheLocation) {
  EXPECT_EQ(parseError("func @f(%x: f32[2]) {\n  %y = Neg(%x : f32[2]\n}"),
            "t.hr:2:15: expected ',' between operands");
  EXPECT_EQ(parseError("func @f(%x: f32[2]) {\n  %y = Nope(%x) : f32[2]\n}"),
            "t.hr:2:8: unknown op 'Nope'");
  EXPECT_EQ(parseError("func @f(%x: f32[2]) {\n  %y = Neg(%z) : f32[2]\n}"),
            "t.hr:2:12: use of undefined value %z");
  EXPECT_EQ(
      parseError("func @f(%x: q32[2]) {\n}"),
      "t.hr:1:13: expected an element type (f32, i64, bool, ...), got 'q32'");
  EXPECT_EQ(parseError("func @f(%x: f32[2]) {\n  %y = Neg(%x)\n  return %y\n}"),
            "t.hr:2:8: expected 1 result type(s) after ':', got 0");
  EXPECT_EQ(parseError("func @f(%x: f32[2]) {\n  %x = Neg(%x) : f32[2]\n"),
            "t.hr:2:3: value %x is defined twice");
  EXPECT_EQ(parseError("func @f(%x: f32[2]) {\n  %y = Neg(%x) : f32[2]\n"),
            "t.hr:3:1: expected '}' to close function @f");
  EXPECT_EQ(parseError("state @w : f32[2] param\nfunc @f(%x: f32[2]) {\n"
                       "  Assign(%x, @w)\n}"),
            "t.hr:3:14: state operands must come before value operands");
  EXPECT_EQ(parseError("state @w : f32[2] weights\n"),
            "t.hr:1:19: expected a state kind (param, frozen, buffer, "
            "optimizer, grad or replica)");
  EXPECT_EQ(
      parseError("func @f() {\n  %c = Constant() {value = dense<i64[3]> "
                 "[1, 2]} : i64[3]\n  return %c\n}"),
      "t.hr:2:48: tensor literal has 2 elements, its type i64[3] needs 3");
  EXPECT_EQ(parseError("func @f(%x: f32[4294967296, 4294967296]) {\n}"),
            "t.hr:1:39: type f32[4294967296, 4294967296] has more than 2^52 "
            "bytes (4 PiB)");
  EXPECT_EQ(parseError("func @f(%x: f32[99999999999999999999]) {\n}"),
            "t.hr:1:17: expected a non-negative dimension");
  EXPECT_EQ(parseError("func @f() {\n  %c = Constant() {value = dense<f32["
                       "65536, 65536]> 0.0} : f32[65536, 65536]\n}"),
            "t.hr:2:56: tensor literal of type f32[65536, 65536] is larger "
            "than 1 GiB");
  EXPECT_EQ(parseError("func @f(%x: f32[2]) {\n  %y = Neg(%\"x) : f32[2]\n}"),
            "t.hr:2:12: unterminated or malformed quoted name");
  EXPECT_EQ(parseError("bogus"),
            "t.hr:1:1: expected 'ranks', 'state', 'lora', 'func' or 'driver'");
  EXPECT_EQ(parseError("func @f(%x: f32[2]) {\n  %y = Neg(%x) : f32[2]\n}"),
            "t.hr:3:1: function @f does not end with 'return'");
  EXPECT_EQ(parseError("func @f(%x: f32[2]) {\n  %y = Neg(%x) : f32[2] "
                       "loc(a)\n  return %y\n}"),
            "t.hr:2:29: expected a quoted location in loc(...)");
  EXPECT_EQ(parseError("func @f(%x: f32[2]) {\n  %y = Neg(%x) : f32[2] "
                       "loc(\"a\"\n  return %y\n}"),
            "t.hr:3:3: expected ')' after the location");
}

TEST(ParserTest, CommentsAreSkipped) {
  auto m =
      takeOrFail(parseModule("// RUN: whatever\nfunc @f(%x: f32[]) { // c\n"
                             "  return %x // done\n}\n"));
  ASSERT_TRUE(m);
  EXPECT_EQ(moduleToString(*m), "func @f(%x: f32[]) {\n  return %x\n}\n");
}

} // namespace

namespace {

TEST(ParserTest, DriverRoundTripsAndErrorsNameTheLocation) {
  const char *text = "func @a(%x: f32[2]) {\n  return %x\n}\n"
                     "\n"
                     "func @b(%x: f32[2]) {\n  return %x\n}\n"
                     "\n"
                     "driver @a, @b repeat 2, @a same_batch\n";
  auto m = parseModule(text, "t.hr");
  ASSERT_TRUE(static_cast<bool>(m)) << llvm::toString(m.takeError());
  ASSERT_EQ((*m)->driver().size(), 3u);
  EXPECT_EQ((*m)->driver()[1].Repeat, 2u);
  EXPECT_TRUE((*m)->driver()[2].SameBatch);
  EXPECT_EQ(moduleToString(**m), text);

  std::string funcs = "func @a(%x: f32[2]) {\n  return %x\n}\n";
  EXPECT_EQ(parseError((funcs + "driver @nope\n").c_str()),
            "t.hr:4:8: the driver calls @nope, which is not defined above it");
  EXPECT_EQ(parseError((funcs + "driver @a same_batch\n").c_str()),
            "t.hr:4:11: the driver's first call has no batch before it to "
            "reuse");
  EXPECT_EQ(parseError((funcs + "driver @a repeat 0\n").c_str()),
            "t.hr:4:18: expected a repeat count of at least 1");
  EXPECT_EQ(parseError((funcs + "driver @a\ndriver @a\n").c_str()),
            "t.hr:5:1: the module already has a driver");
}

} // namespace

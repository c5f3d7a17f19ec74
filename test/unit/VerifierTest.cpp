//===- VerifierTest.cpp - Each invariant the verifier enforces ------------===//
#include "compiler/Verifier.h"
#include "TestUtil.h"
#include "compiler/Parser.h"

using namespace headroom;

namespace {

/// Parses `text` (which must parse) and returns the verifier's message.
std::string verifyError(const char *text) {
  auto m = parseModule(text);
  if (!m)
    return "parse error: " + llvm::toString(m.takeError());
  return errorOf(verifyModule(**m));
}

TEST(VerifierTest, AcceptsValidIR) {
  EXPECT_EQ(verifyError("state @w : f32[2] param\n"
                        "func @f(%x: f32[3, 2]) {\n"
                        "  %w = Read(@w) : f32[2]\n"
                        "  %y = Add(%x, %w) : f32[3, 2]\n"
                        "  %b = Less(%x, %w) : bool[3, 2]\n"
                        "  %z = Where(%b, %x, %y) : f32[3, 2]\n"
                        "  Assign(@w, %w)\n"
                        "  return %z\n}\n"),
            "");
}

TEST(VerifierTest, ChecksShardsReplicasAndCollectives) {
  const char *head = "ranks 2\n"
                     "state @w : f32[3] param shard f32[5]\n"
                     "state @w.replica : bf16[5] replica @w\n";
  auto withBody = [&](const char *body) {
    return verifyError(
        (std::string(head) + "func @f(%x: f32[5]) {\n" + body + "}\n").c_str());
  };
  EXPECT_EQ(withBody("  %s = Read(@w) : f32[3]\n"
                     "  %g = AllGather(%s) : f32[5]\n"
                     "  %r = ReduceScatter(%x) {op = \"mean\"} : f32[3]\n"
                     "  %a = AllReduce(%x) {op = \"sum\"} : f32[5]\n"
                     "  %b = Broadcast(%a) {root = 1} : f32[5]\n"
                     "  %c = Cast(%s) {to = bf16} : bf16[3]\n"
                     "  AllGatherState(@w.replica, %c)\n"
                     "  return %g\n"),
            "");
  EXPECT_EQ(withBody("  %r = ReduceScatter(%x) {op = \"mean\"} : f32[2]\n"
                     "  return %x\n"),
            "in @f, node 0 ('ReduceScatter' defining %r): result f32[2] "
            "should be f32[3], this rank's shard of 2");
  EXPECT_EQ(withBody("  %a = AllReduce(%x) {op = \"max\"} : f32[5]\n"
                     "  return %x\n"),
            "in @f, node 0 ('AllReduce' defining %a): needs op = \"sum\" or "
            "\"mean\"");
  EXPECT_EQ(withBody("  %b = Broadcast(%x) {root = 2} : f32[5]\n"
                     "  return %x\n"),
            "in @f, node 0 ('Broadcast' defining %b): root 2 is not a rank "
            "(0..1)");
  EXPECT_EQ(withBody("  %s = Read(@w) : f32[3]\n"
                     "  AllGatherState(@w.replica, %s)\n"
                     "  return %x\n"),
            "in @f, node 1 ('AllGatherState'): gathers f32[3] into "
            "@w.replica of type bf16[5]: not a shard of it over 2 ranks");
  EXPECT_EQ(verifyError("ranks 2\nstate @w : f32[2] param shard f32[5]\n"),
            "state @w is a shard of f32[5] over 2 ranks, so of type f32[3], "
            "not f32[2]");
  EXPECT_EQ(verifyError("ranks 2\nstate @w : f32[3] param shard f32[5]\n"
                        "state @v : f32[4] replica @w\n"),
            "replica @v of type f32[4] is not gathered from a shard of its "
            "shape (@w)");
}

/// The shape family's rules (compiler/ops/Shape.h), the kernels' too: the
/// verifier names the node where the kernel would have failed at run time.
TEST(VerifierTest, ChecksTheShapeFamily) {
  auto body = [](const char *text) {
    return verifyError(
        (std::string("func @f(%x: f32[4, 6]) {\n") + text + "}\n").c_str());
  };
  EXPECT_EQ(body("  %t = Transpose(%x) : f32[6, 4]\n"
                 "  %c = Concat(%x, %x) {axis = 1} : f32[4, 12]\n"
                 "  %a, %b = Split(%x) {axis = -1} : f32[4, 2], f32[4, 4]\n"
                 "  %s0 = Constant() {value = dense<i64[1]> 1} : i64[1]\n"
                 "  %e0 = Constant() {value = dense<i64[1]> 100} : i64[1]\n"
                 "  %s = Slice(%x, %s0, %e0) : f32[3, 6]\n"
                 "  return %t\n"),
            "");
  EXPECT_EQ(body("  %t = Transpose(%x) {perm = [0, 0]} : f32[4, 4]\n"
                 "  return %t\n"),
            "in @f, node 0 ('Transpose' defining %t): perm is not a "
            "permutation of 0..1");
  EXPECT_EQ(body("  %t = Transpose(%x) {perm = [1, 0]} : f32[4, 6]\n"
                 "  return %t\n"),
            "in @f, node 0 ('Transpose' defining %t): result f32[4, 6] should "
            "be f32[6, 4]");
  EXPECT_EQ(body("  %c = Concat(%x, %x) {axis = 0} : f32[8, 5]\n"
                 "  return %c\n"),
            "in @f, node 0 ('Concat' defining %c): f32[4, 6] and f32[8, 5] "
            "differ off axis 0");
  EXPECT_EQ(body("  %a, %b = Split(%x) {axis = 1} : f32[4, 2], f32[4, 2]\n"
                 "  return %a\n"),
            "in @f, node 0 ('Split' defining %a): the parts' axis sizes sum to "
            "4, expected 6");
  EXPECT_EQ(body("  %n = Constant() {value = dense<i64[2]> [3, 3]} : i64[2]\n"
                 "  %a, %b = Split(%x, %n) {axis = 1} : f32[4, 2], f32[4, 4]\n"
                 "  return %a\n"),
            "in @f, node 1 ('Split' defining %a): the split sizes do not "
            "match the result types");
  EXPECT_EQ(body("  %s0 = Constant() {value = dense<i64[1]> 1} : i64[1]\n"
                 "  %e0 = Constant() {value = dense<i64[1]> 3} : i64[1]\n"
                 "  %s = Slice(%x, %s0, %e0) : f32[3, 6]\n"
                 "  return %s\n"),
            "in @f, node 2 ('Slice' defining %s): result f32[3, 6] should be "
            "f32[2, 6]");
  EXPECT_EQ(body("  %s0 = Constant() {value = dense<i64[2]> [1, 1]} : i64[2]\n"
                 "  %e0 = Constant() {value = dense<i64[1]> 3} : i64[1]\n"
                 "  %s = Slice(%x, %s0, %e0) : f32[2, 6]\n"
                 "  return %s\n"),
            "in @f, node 2 ('Slice' defining %s): starts, ends, axes and steps "
            "differ in length");
}

/// Every op with a result-type rule (compiler/ops/ResultTypes.h) has the
/// types the rule gives: comparisons are bool, reductions drop or keep their
/// axes, Reshape/Squeeze/Unsqueeze/Expand follow their constant shapes.
TEST(VerifierTest, ChecksResultTypesByRule) {
  auto body = [](const char *text) {
    return verifyError(
        (std::string("func @f(%x: f32[4, 6]) {\n") + text + "}\n").c_str());
  };
  EXPECT_EQ(body("  %l = Less(%x, %x) : bool[4, 6]\n"
                 "  %n = IsNaN(%x) : bool[4, 6]\n"
                 "  %ax = Constant() {value = dense<i64[1]> -1} : i64[1]\n"
                 "  %s = ReduceSum(%x, %ax) {keepdims = 0} : f32[4]\n"
                 "  %m = ReduceMean(%x) : f32[1, 1]\n"
                 "  %sh = Constant() {value = dense<i64[3]> [0, 3, -1]} : "
                 "i64[3]\n"
                 "  %r = Reshape(%x, %sh) : f32[4, 3, 2]\n"
                 "  %z = Constant() {value = dense<i64[1]> 0} : i64[1]\n"
                 "  %u = Unsqueeze(%x, %z) : f32[1, 4, 6]\n"
                 "  %q = Squeeze(%u, %z) : f32[4, 6]\n"
                 "  %e3 = Constant() {value = dense<i64[3]> [2, 1, 6]} : "
                 "i64[3]\n"
                 "  %e = Expand(%x, %e3) : f32[2, 4, 6]\n"
                 "  %w = Where(%l, %x, %x) : f32[4, 6]\n"
                 "  return %s\n"),
            "");
  EXPECT_EQ(body("  %l = Less(%x, %x) : f32[4, 6]\n"
                 "  return %l\n"),
            "in @f, node 0 ('Less' defining %l): result 0 is f32[4, 6] but its "
            "rule gives bool[4, 6]");
  EXPECT_EQ(body("  %s = ReduceSum(%x) {keepdims = 0} : f32[4]\n"
                 "  return %s\n"),
            "in @f, node 0 ('ReduceSum' defining %s): result 0 is f32[4] but "
            "its rule gives f32[]");
  EXPECT_EQ(body("  %ax = Constant() {value = dense<i64[1]> 2} : i64[1]\n"
                 "  %s = ReduceSum(%x, %ax) : f32[4, 6]\n"
                 "  return %s\n"),
            "in @f, node 1 ('ReduceSum' defining %s): axis 2 is out of range "
            "for rank 2");
  EXPECT_EQ(body("  %sh = Constant() {value = dense<i64[2]> [5, -1]} : "
                 "i64[2]\n"
                 "  %r = Reshape(%x, %sh) : f32[5, 5]\n"
                 "  return %r\n"),
            "in @f, node 1 ('Reshape' defining %r): Reshape cannot infer -1 "
            "for f32[4, 6]");
  EXPECT_EQ(body("  %z = Constant() {value = dense<i64[1]> 0} : i64[1]\n"
                 "  %q = Squeeze(%x, %z) : f32[6]\n"
                 "  return %q\n"),
            "in @f, node 1 ('Squeeze' defining %q): Squeeze axis 0 is not a "
            "size-1 axis of f32[4, 6]");
  EXPECT_EQ(body("  %e3 = Constant() {value = dense<i64[1]> 3} : i64[1]\n"
                 "  %e = Expand(%x, %e3) : f32[4, 6]\n"
                 "  return %e\n"),
            "in @f, node 1 ('Expand' defining %e): Expand of f32[4, 6] to 3: "
            "the shapes do not broadcast");
  // A shape computed at run time: no rule applies, the kernel checks.
  EXPECT_EQ(body("  %s = Shape(%x) : i64[2]\n"
                 "  %r = Reshape(%x, %s) : f32[4, 6]\n"
                 "  return %r\n"),
            "");
}

/// Conv, the pools and the norms fit their rules (compiler/ops/ConvPool.h,
/// Norm.h), as the kernels check.
TEST(VerifierTest, ChecksWindowsAndNorms) {
  auto body = [](const char *args, const char *text) {
    return verifyError(
        (std::string("func @f(") + args + ") {\n" + text + "}\n").c_str());
  };
  const char *image = "%x: f32[1, 2, 5, 5], %w: f32[3, 2, 3, 3]";
  EXPECT_EQ(body(image, "  %y = Conv(%x, %w) : f32[1, 3, 3, 3]\n"
                        "  %p = MaxPool(%x) {kernel_shape = [2, 2]} : "
                        "f32[1, 2, 4, 4]\n"
                        "  return %y\n"),
            "");
  EXPECT_EQ(body(image, "  %y = Conv(%x, %w) : f32[1, 3, 4, 4]\n"
                        "  return %y\n")
                .rfind("in @f, node 0 ('Conv' defining %y): ", 0),
            0u);
  EXPECT_EQ(body(image, "  %p = MaxPool(%x) {kernel_shape = [2, 2]} : "
                        "f32[1, 2, 5, 5]\n"
                        "  return %p\n")
                .rfind("in @f, node 0 ('MaxPool' defining %p): ", 0),
            0u);
  const char *rows = "%x: f32[2, 4], %g: f32[4], %h: f32[3]";
  EXPECT_EQ(body(rows, "  %n = LayerNormalization(%x, %g) : f32[2, 4]\n"
                       "  return %n\n"),
            "");
  EXPECT_NE(body(rows, "  %n = LayerNormalization(%x, %h) : f32[2, 4]\n"
                       "  return %n\n")
                .find("in @f, node 0 ('LayerNormalization' defining %n): "),
            std::string::npos);
  EXPECT_EQ(body(rows, "  %n = LayerNormalization(%x, %g) {axis = 2} : "
                       "f32[2, 4]\n"
                       "  return %n\n"),
            "in @f, node 0 ('LayerNormalization' defining %n): axis 2 is out "
            "of range for rank 2");
  EXPECT_EQ(body("%x: bf16[2, 4], %g: f32[4]",
                 "  %n = LayerNormalization(%x, %g) : f32[2, 4]\n"
                 "  return %n\n"),
            "in @f, node 0 ('LayerNormalization' defining %n): result f32[2, "
            "4] should be bf16[2, 4]");
  EXPECT_NE(body("%x: f32[2, 3, 4], %s: f32[2]",
                 "  %y = BatchNormalization(%x, %s, %s, %s, %s) : "
                 "f32[2, 3, 4]\n"
                 "  return %y\n")
                .find("('BatchNormalization' defining %y)"),
            std::string::npos);
}

TEST(VerifierTest, RejectsByteCountsThatCouldOverflow) {
  // (The parser refuses such types itself: built with the API here.)
  auto argument = [](std::vector<int64_t> shape) {
    Module m;
    Function *f = m.addFunction("f");
    Value *x = f->addArgument(TensorType(DType::F32, shape), "x");
    f->createNode("Return", {x}, {});
    return errorOf(verifyModule(m));
  };
  // 2^50 f32 elements = 2^52 bytes: the largest tensor allowed.
  EXPECT_EQ(argument({1048576, 1073741824}), "");
  EXPECT_EQ(argument({1048576, 1073741825}),
            "argument %x of @f has type f32[1048576, 1073741825]: a negative "
            "dimension or more than 2^52 bytes (4 PiB)");
  // Each dimension fits int64, the product does not.
  EXPECT_EQ(argument({4294967296, 4294967296, 3}),
            "argument %x of @f has type f32[4294967296, 4294967296, 3]: a "
            "negative dimension or more than 2^52 bytes (4 PiB)");
  EXPECT_NE(argument({-1, 3}), "");

  Module m;
  Function *f = m.addFunction("f");
  TensorType big(DType::F32, {262144, 1073741824}); // 2^50 bytes
  Value *x = f->addArgument(big, "x");
  Builder b(*f);
  Value *y = b.createValue("Neg", {x}, big);
  f->createNode("Return", {y}, {});
  EXPECT_EQ(errorOf(verifyModule(m)), "");
  // 2^11 tensors of 2^50 bytes: each allowed, the sum is not.
  for (int i = 0; i < 1100; ++i)
    b.createValue("Neg", {x}, big);
  std::string e = errorOf(verifyModule(m));
  EXPECT_EQ(e.rfind("the module's tensors add up to more than 2^60 bytes", 0),
            0u)
      << e;
}

TEST(VerifierTest, RejectsBrokenInvariants) {
  EXPECT_EQ(verifyError("func @f(%x: f32[3]) {\n  %y = Add(%x) : f32[3]\n"
                        "  return %y\n}\n"),
            "in @f, node 0 ('Add' defining %y): has 1 operands, expected 2..2");
  EXPECT_EQ(
      verifyError("func @f(%x: f32[3], %z: i64[3]) {\n"
                  "  %y = Add(%x, %z) : f32[3]\n  return %y\n}\n"),
      "in @f, node 0 ('Add' defining %y): operand type i64[3] has another "
      "element type than the result f32[3]");
  EXPECT_EQ(
      verifyError("func @f(%x: f32[3], %z: f32[4]) {\n"
                  "  %y = Mul(%x, %z) : f32[3]\n  return %y\n}\n"),
      "in @f, node 0 ('Mul' defining %y): operand shapes do not broadcast "
      "(3 and 4)");
  EXPECT_EQ(verifyError("func @f(%x: f32[3], %z: f32[1]) {\n"
                        "  %y = Mul(%x, %z) : f32[1]\n  return %y\n}\n"),
            "in @f, node 0 ('Mul' defining %y): result shape 1 is not the "
            "broadcast shape 3");
  EXPECT_EQ(
      verifyError("func @f(%x: f32[3]) {\n  %y = Neg(%x) : f32[2]\n"
                  "  return %y\n}\n"),
      "in @f, node 0 ('Neg' defining %y): result type f32[2] differs from "
      "operand type f32[3]");
  EXPECT_EQ(verifyError("state @w : f32[2] param\n"
                        "func @f(%x: f32[3]) {\n  %w = Read(@w) : f32[3]\n"
                        "  return %w\n}\n"),
            "in @f, node 0 ('Read' defining %w): reads @w of type f32[2] as "
            "f32[3]");
  EXPECT_EQ(
      verifyError("state @w : f32[2] param\n"
                  "func @f(%x: f32[3]) {\n  %y = Neg(@w, %x) : f32[3]\n"
                  "  return %y\n}\n"),
      "in @f, node 0 ('Neg' defining %y): may not refer to state @w (only "
      "Read and update ops do)");
  EXPECT_EQ(verifyError("state @w : f32[3] param\nstate @m : f32[3] optimizer\n"
                        "func @f(%g: f32[3]) {\n  MomentumUpdate(@w, %g)\n"
                        "  return %g\n}\n"),
            "in @f, node 0 ('MomentumUpdate'): has 1 state operands, "
            "expected 2");
  EXPECT_EQ(verifyError("state @w : f32[3] param\nstate @m : f32[2] optimizer\n"
                        "func @f(%g: f32[3]) {\n  MomentumUpdate(@w, @m, %g)\n"
                        "  return %g\n}\n"),
            "in @f, node 0 ('MomentumUpdate'): updates @m of type f32[2] with "
            "f32[3]");
  EXPECT_EQ(verifyError("state @w : f32[3] param\nstate @m : f32[3] optimizer\n"
                        "func @f(%g: f32[3]) {\n"
                        "  AdamWUpdate(@w, @m, @m, %g, %g, %g)\n"
                        "  return %g\n}\n"),
            "in @f, node 0 ('AdamWUpdate'): writes @m twice");
  EXPECT_EQ(verifyError("state @w : f32[3] param\nstate @m : f32[3] optimizer\n"
                        "state @v : f32[3] optimizer\nfunc @f(%g: f32[3]) {\n"
                        "  AdamWUpdate(@w, @m, @v, %g, %g, %g)\n"
                        "  return %g\n}\n"),
            "in @f, node 0 ('AdamWUpdate'): operand 1 must be a f32 scalar");
  // A bf16 weight's moments may be f32 (no master weights), not f64, and its
  // fused update's scalars are then f32.
  EXPECT_EQ(
      verifyError("state @w : bf16[3] param\nstate @m : f64[3] optimizer\n"
                  "func @f(%g: bf16[3]) {\n  MomentumUpdate(@w, @m, %g)\n"
                  "  return %g\n}\n"),
      "in @f, node 0 ('MomentumUpdate'): updates @m of type f64[3] with "
      "bf16[3]");
  EXPECT_EQ(
      verifyError("state @w : bf16[3] param\nstate @m : f32[3] optimizer\n"
                  "func @f(%g: bf16[3], %s: bf16[]) {\n"
                  "  MomentumUpdate(@w, @m, %g, %s)\n  return %g\n}\n"),
      "in @f, node 0 ('MomentumUpdate'): operand 1 must be a f32 scalar");
  EXPECT_EQ(
      verifyError("state @w : bf16[3] param\nstate @m : f32[3] optimizer\n"
                  "func @f(%g: bf16[3], %s: f32[]) {\n"
                  "  MomentumUpdate(@w, @m, %g, %s)\n  return %g\n}\n"),
      "");
  // 8-bit moments: u8 codes of the weight's shape, an f32 absmax per 256.
  auto int8Module = [](int blocks, const std::string &grad) {
    return "state @w : bf16[300] param\nstate @m : u8[300] optimizer\n"
           "state @v : u8[300] optimizer\nstate @ma : f32[2] optimizer\n"
           "state @va : f32[" +
           std::to_string(blocks) + "] optimizer\nfunc @f(%g: " + grad +
           "[300], %s: f32[]) {\n  AdamW8bitUpdate(@w, @m, @v, @ma, @va, %g, "
           "%s, %s)\n  return %g\n}\n";
  };
  EXPECT_EQ(verifyError(int8Module(2, "bf16").c_str()), "");
  EXPECT_EQ(verifyError(int8Module(3, "bf16").c_str()),
            "in @f, node 0 ('AdamW8bitUpdate'): state @va is f32[3], "
            "expected f32[2]");
  EXPECT_EQ(verifyError(int8Module(2, "f32").c_str()),
            "in @f, node 0 ('AdamW8bitUpdate'): updates @w of type bf16[300] "
            "with f32[300]");
  // An NF4 weight of 130 elements: 65 bytes of codes, 3 absmax codes, one
  // nested absmax, the offset.
  auto nf4Module = [](const std::string &codes, const std::string &result) {
    return "state @w : " + codes +
           " frozen init nf4\nstate @a : u8[3] frozen init nf4\n"
           "state @n : f32[1] frozen init nf4\nstate @o : f32[1] frozen init "
           "nf4\nfunc @f(%x: f32[2]) {\n  %c = Read(@w) : " +
           codes +
           "\n  %a = Read(@a) : u8[3]\n  %n = Read(@n) : f32[1]\n"
           "  %o = Read(@o) : f32[1]\n  %w = Nf4Dequantize(%c, %a, %n, %o) "
           ": " +
           result + "\n  return %x\n}\n";
  };
  EXPECT_EQ(verifyError(nf4Module("u8[65]", "bf16[10, 13]").c_str()), "");
  EXPECT_EQ(verifyError(nf4Module("u8[64]", "bf16[10, 13]").c_str()),
            "in @f, node 4 ('Nf4Dequantize' defining %w): codes u8[64] should "
            "be u8[65] for bf16[10, 13]");
  EXPECT_EQ(verifyError(nf4Module("u8[65]", "i64[10, 13]").c_str()),
            "in @f, node 4 ('Nf4Dequantize' defining %w): result i64[10, 13] "
            "is not f32, bf16 or f16");
  EXPECT_EQ(verifyError("state @w : f32[3] param\nstate @m : f32[3] optimizer\n"
                        "func @f(%g: f32[3]) {\n  Assign(@w, @m, %g)\n"
                        "  return %g\n}\n"),
            "in @f, node 0 ('Assign'): has 2 state operands, expected 1");
  EXPECT_EQ(verifyError("state @w : f32[2] param\n"
                        "func @f(%x: f32[3]) {\n  Assign(@w, %x)\n"
                        "  return %x\n}\n"),
            "in @f, node 0 ('Assign'): writes f32[3] to @w of type f32[2]");
  EXPECT_EQ(verifyError("func @f(%x: f32[3]) {\n  %c = Cast(%x) {to = i64} : "
                        "i32[3]\n  return %c\n}\n"),
            "in @f, node 0 ('Cast' defining %c): result i32[3] is not the "
            "operand cast to i64");
  EXPECT_EQ(verifyError("func @f(%x: f32[3]) {\n  %c = Constant() {value = "
                        "dense<i64[2]> 0} : i64[3]\n  return %c\n}\n"),
            "in @f, node 0 ('Constant' defining %c): value is i64[2] but the "
            "result is i64[3]");
}

TEST(VerifierTest, RejectsReturnBeforeTheEnd) {
  Module m;
  Function *f = m.addFunction("f");
  Value *x = f->addArgument(TensorType(DType::F32, {2}), "x");
  f->createNode("Return", {x}, {});
  Value *y = Builder(*f).createValue("Neg", {x}, x->type());
  f->createNode("Return", {y}, {});
  EXPECT_EQ(errorOf(verifyModule(m)),
            "in @f, node 0 ('Return'): 'return' must be the last node");
}

TEST(VerifierTest, ChecksMatrixProductShapes) {
  EXPECT_EQ(verifyError("func @f(%a: f32[2, 3], %b: f32[3, 3]) {\n"
                        "  %y = MatMul(%a, %b) : f32[3, 3]\n  return %y\n}\n"),
            "in @f, node 0 ('MatMul' defining %y): result shape 3x3 should be "
            "2x3");
  EXPECT_EQ(verifyError("func @f(%a: f32[4, 2], %b: f32[3, 4]) {\n"
                        "  %y = Gemm(%a, %b) {transA = 1, transB = 1} : "
                        "f32[2, 3]\n  return %y\n}\n"),
            "");
  EXPECT_EQ(
      verifyError("func @f(%a: f32[2, 3, 4], %b: f32[5, 2]) {\n"
                  "  %y = MatMul(%a, %b) : f32[2, 3, 2]\n  return %y\n}\n"),
      "in @f, node 0 ('MatMul' defining %y): inner dimensions differ (4 "
      "vs 5)");
  // headroom's transA/transB swap the last two axes of that operand.
  EXPECT_EQ(verifyError("func @f(%a: f32[2, 4, 3], %b: f32[5, 4]) {\n"
                        "  %y = MatMul(%a, %b) {transA = 1, transB = 1} : "
                        "f32[2, 3, 5]\n  return %y\n}\n"),
            "");
  EXPECT_EQ(
      verifyError("func @f(%a: f32[2, 4, 3], %b: f32[4, 5]) {\n"
                  "  %y = MatMul(%a, %b) {transA = 1} : f32[2, 4, 5]\n"
                  "  return %y\n}\n"),
      "in @f, node 0 ('MatMul' defining %y): result shape 2x4x5 should be "
      "2x3x5");
  EXPECT_EQ(verifyError("func @f(%a: f32[4], %b: f32[4, 5]) {\n"
                        "  %y = MatMul(%a, %b) {transA = 1} : f32[5]\n"
                        "  return %y\n}\n"),
            "in @f, node 0 ('MatMul' defining %y): a transposed operand must "
            "have rank >= 2");
}

TEST(VerifierTest, RejectsUseBeforeDefinition) {
  Module m;
  Function *f = m.addFunction("f");
  Value *x = f->addArgument(TensorType(DType::F32, {2}), "x");
  Node *ret = f->createNode("Return", {x}, {});
  Builder b(*f, ret);
  Value *a = b.createValue("Neg", {x}, x->type());
  Value *c = b.createValue("Neg", {a}, x->type());
  ret->setOperand(0, c);
  // Make the first Neg use the second: a cycle, so a use before definition.
  a->definingNode()->setOperand(0, c);
  EXPECT_EQ(errorOf(verifyModule(m)),
            "in @f, node 0 ('Neg'): operand 0 is not defined before its use in "
            "this function");
  a->definingNode()->setOperand(0, x); // untangle so teardown is clean
}

} // namespace

namespace {

TEST(VerifierTest, DriverCallsFunctionsOfOneSignature) {
  const char *funcs = "func @a(%x: f32[2]) {\n  return %x\n}\n"
                      "func @b(%x: f32[2]) {\n  return %x\n}\n"
                      "func @c(%y: f32[3]) {\n  return %y\n}\n";
  auto with = [&](const char *driver) {
    return verifyError((std::string(funcs) + driver).c_str());
  };
  EXPECT_EQ(with("driver @a, @b repeat 3, @a same_batch\n"), "");
  EXPECT_EQ(with("driver @a, @c\n"),
            "the driver calls @a and @c, whose arguments differ");
  EXPECT_EQ(with("driver @a, @b repeat 2 same_batch\n"),
            "the driver repeats @b on the same batch");
}

} // namespace

//===- OnnxImportTest.cpp - Importing the test models and bad inputs ------===//
#include "compiler/OnnxImport.h"
#include "TestUtil.h"
#include "compiler/Parser.h"
#include "compiler/Printer.h"
#include "compiler/Verifier.h"

#include "llvm/Support/MemoryBuffer.h"

#include <onnx/onnx_pb.h>

#include <random>

using namespace headroom;

namespace {

ImportOptions batch(int64_t b) {
  ImportOptions o;
  o.Batch = b;
  return o;
}

class TestModel : public ::testing::TestWithParam<const char *> {};

TEST_P(TestModel, ImportsVerifiesAndRoundTrips) {
  auto m = takeOrFail(importOnnxFile(modelPath(GetParam()), batch(4)));
  ASSERT_TRUE(m);
  EXPECT_EQ(errorOf(verifyModule(*m)), "");
  std::string printed = moduleToString(*m);
  auto reparsed = takeOrFail(parseModule(printed, GetParam()));
  ASSERT_TRUE(reparsed);
  EXPECT_EQ(moduleToString(*reparsed), printed);
  EXPECT_EQ(errorOf(verifyModule(*reparsed)), "");
  Function *f = m->lookupFunction("forward");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(f->returnValues().size(), 1u);
  EXPECT_EQ(f->returnValues()[0]->type(), TensorType(DType::F32, {}));
  for (Value *a : f->arguments())
    EXPECT_EQ(a->type().dim(0), 4);
}

INSTANTIATE_TEST_SUITE_P(Models, TestModel,
                         ::testing::Values("mlp.onnx", "lenet.onnx", "gpt.onnx",
                                           "llama.onnx"));

TEST(OnnxImportTest, ParametersBecomeStateAndFreezeKeepsThemConstant) {
  ImportOptions o = batch(2);
  o.Freeze = {"fc1.bias"};
  auto m = takeOrFail(importOnnxFile(modelPath("mlp.onnx"), o));
  ASSERT_TRUE(m);
  ASSERT_EQ(m->states().size(), 6u);
  EXPECT_EQ(m->lookupState("fc1.weight")->type(),
            TensorType(DType::F32, {32, 16}));
  EXPECT_EQ(m->lookupState("fc1.weight")->kind(), StateKind::Param);
  EXPECT_EQ(m->lookupState("fc1.bias")->kind(), StateKind::Frozen);
}

TEST(OnnxImportTest, ShapeSpecBindsInputs) {
  ImportOptions o;
  o.Shapes["x"] = {3, 16};
  o.Shapes["y"] = {3};
  auto m = takeOrFail(importOnnxFile(modelPath("mlp.onnx"), o));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->functions()[0]->arguments()[0]->type(),
            TensorType(DType::F32, {3, 16}));
}

TEST(OnnxImportTest, GptAttentionShapesBecomeStatic) {
  // ONNX's own inference cannot see through `C // n_head`; the importer folds
  // it, so the head reshape has a static shape.
  auto m = takeOrFail(importOnnxFile(modelPath("gpt.onnx"), batch(3)));
  ASSERT_TRUE(m);
  bool sawHeads = false;
  for (const Node &n : m->functions()[0]->nodes())
    if (n.op() == "Softmax")
      sawHeads = n.result(0)->type() == TensorType(DType::F32, {3, 2, 16, 16});
  EXPECT_TRUE(sawHeads);
}

std::string importError(const ImportOptions &o, const std::string &file) {
  return errorOf(importOnnxFile(modelPath(file), o));
}

TEST(OnnxImportTest, UserErrorsAreClear) {
  EXPECT_EQ(importError({}, "mlp.onnx"),
            modelPath("mlp.onnx") +
                ": input 'x' has dynamic dimension 0 ('batch'); bind it with "
                "--batch N or --shape x=DIMS");
  ImportOptions o;
  o.Shapes["x"] = {4, 15};
  o.Shapes["y"] = {4};
  EXPECT_EQ(importError(o, "mlp.onnx"),
            modelPath("mlp.onnx") +
                ": --shape x=4x15 contradicts the model: dimension 1 of input "
                "'x' is 16");
  o.Shapes = {{"z", {4}}};
  o.Batch = 4;
  EXPECT_EQ(importError(o, "mlp.onnx"),
            modelPath("mlp.onnx") +
                ": --shape names 'z', which is not a data input of the model");
  ImportOptions f = batch(4);
  f.Freeze = {"nope"};
  EXPECT_EQ(importError(f, "mlp.onnx"),
            modelPath("mlp.onnx") +
                ": --freeze names 'nope', which is not an initializer of the "
                "model");
  EXPECT_NE(importError(batch(4), "missing.onnx").find("cannot read"),
            std::string::npos);
}

/// Every unsupported op of a model is named in one error (the first node of
/// each and how many there are), not only the first.
TEST(OnnxImportTest, EveryUnsupportedOpIsNamedAtOnce) {
  auto buf =
      llvm::MemoryBuffer::getFile(modelPath("cases/unsupported_op.onnx"));
  ASSERT_TRUE(bool(buf));
  onnx::ModelProto m;
  ASSERT_TRUE(
      m.ParseFromArray((*buf)->getBufferStart(), int((*buf)->getBufferSize())));
  std::string x = m.graph().input(0).name();
  auto add = [&](const char *op, const char *name) {
    onnx::NodeProto *n = m.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name);
    n->add_input(x);
    n->add_output(std::string(name) + "_out");
  };
  add("Round", "round0");
  add("Hardmax", "hardmax1");
  add("Round", "round1");
  add("Hardmax", "hardmax2");
  std::string bytes = m.SerializeAsString();
  EXPECT_EQ(errorOf(importOnnxBuffer(bytes, "m.onnx", "", batch(4))),
            "m.onnx: unsupported operators: Hardmax (3 nodes, the first node "
            "'hardmax0' (op 'Hardmax')), Round (2 nodes, the first node "
            "'round0' (op 'Round')); headroom supports the ops listed in "
            "docs/ops.md");
}

/// Inputs that once crashed the importer (fuzz/regressions/onnx_import/)
/// are refused with an error.
TEST(OnnxImportTest, FuzzRegressionsAreErrors) {
  std::string dir =
      std::string(HEADROOM_SOURCE_DIR) + "/fuzz/regressions/onnx_import/";
  // ONNX 1.12's LayerNormalization inference indexed a rank-0 input.
  auto buf = llvm::MemoryBuffer::getFile(dir + "layernorm-rank0-input");
  ASSERT_TRUE(bool(buf));
  EXPECT_EQ(
      errorOf(importOnnxBuffer((*buf)->getBuffer(), "m.onnx", "", batch(2))),
      "m.onnx: shape inference failed: [ShapeInferenceError] Shape "
      "inference error(s): (op_type:LayerNormalization): "
      "[ShapeInferenceError] LayerNormalization: axis -1 is out of "
      "range for an input of rank 0");
}

/// Every prefix of a real model, and random bytes, must give an error (or,
/// for a prefix that happens to be a complete message, a valid import) and
/// never crash. The ASan/UBSan build runs this too.
TEST(OnnxImportTest, TruncatedAndRandomInputsNeverCrash) {
  auto buf = llvm::MemoryBuffer::getFile(modelPath("mlp.onnx"));
  ASSERT_TRUE(static_cast<bool>(buf));
  llvm::StringRef bytes = (*buf)->getBuffer();
  unsigned errors = 0;
  for (size_t len = 0; len < bytes.size(); len += 97) {
    auto m = importOnnxBuffer(bytes.take_front(len), "cut.onnx", ".", batch(2));
    if (!m) {
      ++errors;
      llvm::consumeError(m.takeError());
    }
  }
  EXPECT_GT(errors, 0u);
  std::mt19937 rng(42);
  for (int trial = 0; trial < 200; ++trial) {
    std::string junk(1 + rng() % 512, '\0');
    for (char &c : junk)
      c = static_cast<char>(rng());
    auto m = importOnnxBuffer(junk, "junk.onnx", ".", batch(2));
    EXPECT_FALSE(static_cast<bool>(m));
    if (!m)
      llvm::consumeError(m.takeError());
  }
  // Flip bytes of a valid model: each result must be an error or valid IR.
  for (int trial = 0; trial < 200; ++trial) {
    std::string mutated = bytes.str();
    for (int k = 0; k < 4; ++k)
      mutated[rng() % mutated.size()] = static_cast<char>(rng());
    auto m = importOnnxBuffer(mutated, "mutated.onnx", ".", batch(2));
    if (m)
      EXPECT_EQ(errorOf(verifyModule(**m)), "");
    else
      llvm::consumeError(m.takeError());
  }
}

} // namespace

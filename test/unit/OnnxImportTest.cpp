//===- OnnxImportTest.cpp - Importing the test models and bad inputs ------===//
#include "compiler/OnnxImport.h"
#include "RecurrentModels.h"
#include "TestUtil.h"
#include "compiler/OnnxTensor.h"
#include "compiler/OpInfo.h"
#include "compiler/Parser.h"
#include "compiler/Printer.h"
#include "compiler/Verifier.h"
#include "kernels/cpu/CpuTarget.h"
#include "runtime/Executor.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

#include <onnx/onnx_pb.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <random>
#include <set>

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
      "m.onnx: shape inference failed: [ShapeInferenceError] Inference "
      "error(s): (op_type:LayerNormalization): "
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

/// Every IR op at every opset headroom reads: the versions it refuses are
/// exactly these (each changed its contract after opset 17 in a way the
/// importer does not rewrite). A new ONNX library that adds one fails here.
TEST(OnnxImportTest, RefusedOpVersionsAreKnown) {
  std::set<std::string> refused;
  for (const OpInfo &op : allOps())
    for (int opset = kMinOpset; opset <= kMaxOpset; ++opset) {
      std::string why = opVersionProblem(op.Name, opset);
      if (!why.empty())
        refused.insert(why.substr(why.find(" gives ") + 7,
                                  why.find(',') - why.find(" gives ") - 7));
    }
  EXPECT_EQ(llvm::join(refused, " "), "");
}

/// A model `y = sum(x * w)` whose f32[4] weight `w` is external data at
/// `location` (relative to the model's folder).
std::string externalWeightModel(const std::string &location,
                                int64_t offset = 0) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  onnx::GraphProto *g = m.mutable_graph();
  g->set_name("external");
  auto *x = g->add_input();
  x->set_name("x");
  x->mutable_type()->mutable_tensor_type()->set_elem_type(1);
  x->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->add_dim()
      ->set_dim_value(4);
  onnx::TensorProto *w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(1);
  w->add_dims(4);
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto entry = [&](const char *k, const std::string &v) {
    auto *e = w->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  entry("location", location);
  entry("offset", std::to_string(offset));
  entry("length", "16");
  auto *mul = g->add_node();
  mul->set_op_type("Mul");
  mul->add_input("x");
  mul->add_input("w");
  mul->add_output("xw");
  auto *sum = g->add_node();
  sum->set_op_type("ReduceSum");
  sum->add_input("xw");
  sum->add_output("loss");
  sum->add_attribute()->set_name("keepdims");
  sum->mutable_attribute(0)->set_type(onnx::AttributeProto::INT);
  sum->mutable_attribute(0)->set_i(0);
  auto *out = g->add_output();
  out->set_name("loss");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(1);
  out->mutable_type()->mutable_tensor_type()->mutable_shape();
  return m.SerializeAsString();
}

/// External data must stay inside the model's folder (ONNX's
/// CVE-2024-27318): `..`, absolute locations and links out are refused
/// before anything is read; a short data file is named too.
TEST(OnnxImportTest, ExternalDataStaysInsideTheModelsFolder) {
  llvm::SmallString<128> root;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("hr-ext", root));
  std::string dir = (root + "/model").str(), secret = (root + "/secret").str();
  ASSERT_FALSE(llvm::sys::fs::create_directory(dir));
  auto write = [](const std::string &path, size_t bytes) {
    std::ofstream(path, std::ios::binary) << std::string(bytes, '\x3f');
  };
  write(secret, 64);
  write(dir + "/w.data", 32);
  ASSERT_FALSE(llvm::sys::fs::create_link("../secret", dir + "/link.data"));
  ASSERT_FALSE(llvm::sys::fs::create_directory(dir + "/sub"));
  write(dir + "/sub/w.data", 16);
  auto importAt = [&](const std::string &location, int64_t offset = 0) {
    return errorOf(
        importOnnxBuffer(externalWeightModel(location, offset), "m.onnx", dir));
  };
  EXPECT_EQ(importAt("w.data"), "");
  EXPECT_EQ(importAt("w.data", 16), "");
  EXPECT_EQ(importAt("sub/w.data"), "");
  EXPECT_EQ(importAt("./sub/../w.data"),
            "m.onnx: tensor 'w': external data location './sub/../w.data' "
            "leaves the model's folder through '..' (external data must be a "
            "file inside the model's folder)");
  EXPECT_EQ(importAt("../secret"),
            "m.onnx: tensor 'w': external data location '../secret' leaves "
            "the model's folder through '..' (external data must be a file "
            "inside the model's folder)");
  EXPECT_EQ(importAt(secret),
            "m.onnx: tensor 'w': external data location '" + secret +
                "' is an absolute path (external data must be a file inside "
                "the model's folder)");
  std::string link = importAt("link.data");
  EXPECT_NE(link.find("is a link to '"), std::string::npos) << link;
  EXPECT_NE(link.find("secret', outside the folder"), std::string::npos)
      << link;
  EXPECT_EQ(importAt("sub"),
            "m.onnx: tensor 'w': external data location 'sub' is not a "
            "regular file (external data must be a file inside the model's "
            "folder)");
  EXPECT_EQ(importAt("w.data", 24),
            "m.onnx: tensor 'w' needs 16 bytes at offset 24 of external data "
            "file '" +
                dir +
                "/w.data', which has 32 (truncated or the wrong "
                "file?)");
  EXPECT_NE(importAt("missing.data").find("cannot open external data file"),
            std::string::npos);
  // The runtime's reader shares the check: the weight is never read.
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(externalWeightModel("../secret")));
  EXPECT_NE(errorOf(tensorFromProto(m.graph().initializer(0), dir))
                .find("leaves the model's folder"),
            std::string::npos);
  llvm::sys::fs::remove_directories(root);
}

/// The dynamo GPT-2 as a ModelProto (test/models/dynamo), external data
/// beside it.
onnx::ModelProto dynamoGpt2() {
  onnx::ModelProto m;
  auto buf = llvm::MemoryBuffer::getFile(modelPath("dynamo/gpt2.onnx"));
  EXPECT_TRUE(static_cast<bool>(buf));
  EXPECT_TRUE(m.ParseFromString((*buf)->getBuffer().str()));
  return m;
}

std::string importProto(const onnx::ModelProto &m) {
  ImportOptions o = batch(2);
  return errorOf(importOnnxBuffer(m.SerializeAsString(), "m.onnx",
                                  modelPath("dynamo"), o));
}

/// Dynamo files that lost what headroom relies on, or were made to break
/// it, are refused in one line (the fuzz target finds the rest).
TEST(OnnxImportTest, BrokenDynamoFilesAreRefused) {
  EXPECT_EQ(importProto(dynamoGpt2()), "");
  // A tool dropped the value_info metadata: nothing would train.
  onnx::ModelProto noRoles = dynamoGpt2();
  for (auto &v : *noRoles.mutable_graph()->mutable_value_info())
    v.clear_metadata_props();
  EXPECT_EQ(importProto(noRoles),
            "m.onnx: the file's graph signature "
            "(pkg.torch.export.graph_signature) marks no initializer as a "
            "PARAMETER, so nothing would train (was its value_info metadata "
            "dropped by a tool?)");
  // A SequenceAt whose position is not one integer.
  onnx::ModelProto badPos = dynamoGpt2();
  for (auto &n : *badPos.mutable_graph()->mutable_node()) {
    if (n.op_type() != "SequenceAt")
      continue;
    onnx::NodeProto *c = badPos.mutable_graph()->add_node();
    c->set_op_type("Constant");
    c->add_output("empty_position");
    auto *a = c->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    *a->mutable_t() =
        tensorToProto(Tensor::fromInts(DType::I64, {0}, {}), "empty");
    n.set_input(1, "empty_position");
    break;
  }
  // (The Constant is appended after its user: moved to the front.)
  auto *nodes = badPos.mutable_graph()->mutable_node();
  for (int k = nodes->size() - 1; k > 0; --k)
    nodes->SwapElements(k, k - 1);
  std::string pos = importProto(badPos);
  EXPECT_NE(pos.find("position must be one integer"), std::string::npos) << pos;
  // An initializer whose dimensions overflow a byte count.
  onnx::ModelProto huge = dynamoGpt2();
  onnx::TensorProto *t = huge.mutable_graph()->add_initializer();
  t->set_name("huge");
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(3);
  t->add_dims(6148914691236517206);
  t->set_raw_data(std::string(16, '\0')); // what the wrapped size asks for
  std::string overflow = importProto(huge);
  EXPECT_EQ(overflow, "m.onnx: tensor 'huge' has dimensions "
                      "3x6148914691236517206 whose size overflows");
  // A model read from memory has no folder for external data.
  EXPECT_NE(errorOf(importOnnxBuffer(dynamoGpt2().SerializeAsString(), "m.onnx",
                                     "", batch(2)))
                .find("cannot be resolved: the model was not read from a "
                      "file"),
            std::string::npos);
}

//===----------------------------------------------------------------------===//
// LSTM, GRU and RNN: unrolled at import, run on the CPU, against the
// reference of test/unit/RecurrentModels.h.
//===----------------------------------------------------------------------===//

/// Imports a recurrent model (operands as data inputs, every output
/// returned) and runs it on the CPU executor.
llvm::Expected<std::vector<Tensor>> runRecurrent(const RecurrentSpec &s,
                                                 const RecurrentOperands &o) {
  onnx::ModelProto proto;
  recurrentModel(proto, s, o);
  ImportOptions options;
  options.AllOutputs = true;
  auto m = importOnnxBuffer(proto.SerializeAsString(), s.Name, "", options);
  if (!m)
    return m.takeError();
  auto plan = lowerModule(**m, cpuTarget());
  if (!plan)
    return plan.takeError();
  auto exec = createCpuExecutor(std::move(*plan));
  if (!exec)
    return exec.takeError();
  std::vector<const Tensor *> args;
  for (Value *a : (*m)->functions()[0]->arguments())
    for (const auto &[name, t] : o.named())
      if (name == a->name())
        args.push_back(t);
  return (*exec)->run("forward", args);
}

/// "" when `got` equals `want` within 1e-5, else the first difference.
std::string within1e5(const Tensor &got, const Tensor &want) {
  if (got.type() != want.type())
    return "type " + got.type().str() + ", expected " + want.type().str();
  for (int64_t i = 0; i < want.numElements(); ++i)
    if (!(std::fabs(got.getDouble(i) - want.getDouble(i)) <= 1e-5))
      return "element " + std::to_string(i) + " is " +
             std::to_string(got.getDouble(i)) + ", expected " +
             std::to_string(want.getDouble(i));
  return "";
}

// Name, op, direction, steps, batch, inputs, hidden, B, initial_h,
// initial_c, linear_before_reset, RNN activation.
const RecurrentSpec kRecurrentCases[] = {
    {"LstmForward", "LSTM", "forward", 4, 2, 3, 5, true, true, true},
    {"LstmReverse", "LSTM", "reverse", 4, 2, 3, 5, true, true, true},
    {"LstmBidirectional", "LSTM", "bidirectional", 5, 3, 2, 3, true, true,
     true},
    {"LstmBidirectionalDefaults", "LSTM", "bidirectional", 3, 2, 3, 4},
    {"LstmReverseOneStep", "LSTM", "reverse", 1, 2, 3, 4, true},
    {"GruForward", "GRU", "forward", 4, 2, 3, 5, true, true},
    {"GruReverse", "GRU", "reverse", 4, 2, 3, 5, true, true},
    {"GruBidirectional", "GRU", "bidirectional", 5, 3, 2, 3, true, true},
    {"GruDefaults", "GRU", "forward", 3, 2, 3, 4},
    {"GruLinearBeforeReset", "GRU", "forward", 4, 2, 3, 5, true, true, false,
     1},
    {"GruLinearBeforeResetReverse", "GRU", "reverse", 4, 2, 3, 5, true, true,
     false, 1},
    {"GruLinearBeforeResetBidirectional", "GRU", "bidirectional", 5, 3, 2, 3,
     true, true, false, 1},
    {"GruLinearBeforeResetNoBias", "GRU", "bidirectional", 3, 2, 3, 4, false,
     false, false, 1},
    {"GruOneStep", "GRU", "reverse", 1, 2, 3, 4, true, false, false, 1},
    {"RnnForward", "RNN", "forward", 4, 2, 3, 5, true, true},
    {"RnnReverse", "RNN", "reverse", 4, 2, 3, 5, true, true},
    {"RnnBidirectional", "RNN", "bidirectional", 5, 3, 2, 3, true, true},
    {"RnnDefaults", "RNN", "forward", 3, 2, 3, 4},
    {"RnnReluBidirectional", "RNN", "bidirectional", 4, 2, 3, 5, true, true,
     false, 0, "Relu"},
};

class OnnxImportRecurrent : public ::testing::TestWithParam<RecurrentSpec> {};

TEST_P(OnnxImportRecurrent, MatchesReference) {
  const RecurrentSpec &s = GetParam();
  std::mt19937 rng(7);
  RecurrentOperands o = randomOperands(s, rng);
  auto got = takeOrFail(runRecurrent(s, o));
  std::vector<Tensor> want = referenceRecurrent(s, o);
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k)
    EXPECT_EQ(within1e5(got[k], want[k]), "") << "output " << k;
}

INSTANTIATE_TEST_SUITE_P(OnnxImportRecurrentCases, OnnxImportRecurrent,
                         ::testing::ValuesIn(kRecurrentCases),
                         [](const auto &info) { return info.param.Name; });

/// The slice `index` of `t` along `axis`, which keeps size 1.
Tensor sliceAt(const Tensor &t, unsigned axis, int64_t index) {
  std::vector<int64_t> shape(t.type().shape().begin(), t.type().shape().end());
  int64_t outer = 1, inner = 1;
  for (unsigned i = 0; i < axis; ++i)
    outer *= shape[i];
  for (unsigned i = axis + 1; i < shape.size(); ++i)
    inner *= shape[i];
  int64_t size = shape[axis];
  shape[axis] = 1;
  Tensor out(TensorType(t.type().dtype(), shape));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i)
      out.setDouble(o * inner + i, t.getDouble((o * size + index) * inner + i));
  return out;
}

/// `t` with axis 0 (time) reversed.
Tensor reverseTime(const Tensor &t) {
  int64_t steps = t.type().dim(0), inner = t.numElements() / steps;
  Tensor out(t.type());
  for (int64_t s = 0; s < steps; ++s)
    for (int64_t i = 0; i < inner; ++i)
      out.setDouble(s * inner + i, t.getDouble((steps - 1 - s) * inner + i));
  return out;
}

/// A bidirectional layer's directions, and a reverse-only layer, are forward
/// layers: direction 0 runs on X with its weights, the reverse direction on
/// X reversed in time with its own weights, its Y re-reversed. The expected
/// values come from the reference's forward path only.
TEST(OnnxImportRecurrent, ReverseDirectionIsForwardOnReversedTime) {
  std::mt19937 rng(11);
  for (const char *op : {"LSTM", "GRU", "RNN"}) {
    for (int64_t lbr : {0, 1}) {
      if (lbr && std::string(op) != "GRU")
        continue;
      for (const char *direction : {"bidirectional", "reverse"}) {
        RecurrentSpec s = {"Layer", op,   direction, 4,    2,  3,
                           3,       true, true,      true, lbr};
        s.InitialC = s.states() == 2;
        SCOPED_TRACE(std::string(op) + " " + direction +
                     " linear_before_reset=" + std::to_string(lbr));
        RecurrentOperands o = randomOperands(s, rng);
        auto got = takeOrFail(runRecurrent(s, o));
        ASSERT_EQ(got.size(), size_t(1 + s.states()));
        for (int d = 0; d < s.dirs(); ++d) {
          bool reverse = std::string(direction) == "reverse" || d == 1;
          RecurrentSpec f = s;
          f.Direction = "forward";
          RecurrentOperands fo;
          fo.X = reverse ? reverseTime(o.X) : o.X;
          fo.W = sliceAt(o.W, 0, d);
          fo.R = sliceAt(o.R, 0, d);
          fo.B = sliceAt(o.B, 0, d);
          fo.InitialH = sliceAt(o.InitialH, 0, d);
          if (s.InitialC)
            fo.InitialC = sliceAt(o.InitialC, 0, d);
          std::vector<Tensor> want = referenceRecurrent(f, fo);
          if (reverse)
            want[0] = reverseTime(want[0]);
          EXPECT_EQ(within1e5(sliceAt(got[0], 1, d), want[0]), "")
              << "Y of direction " << d;
          for (int k = 1; k <= s.states(); ++k)
            EXPECT_EQ(within1e5(sliceAt(got[k], 0, d), want[k]), "")
                << "output " << k << " of direction " << d;
        }
      }
    }
  }
}

/// What torch does not emit is refused with one line naming the node.
TEST(OnnxImportRecurrent, UnsupportedFormsAreRefusedInOneLine) {
  std::mt19937 rng(3);
  auto importOf =
      [&](RecurrentSpec s,
          const std::function<void(onnx::ModelProto &, onnx::NodeProto &)>
              &edit) {
        RecurrentOperands o = randomOperands(s, rng);
        onnx::ModelProto m;
        onnx::NodeProto *n = recurrentModel(m, s, o);
        edit(m, *n);
        ImportOptions options;
        options.AllOutputs = true;
        return errorOf(
            importOnnxBuffer(m.SerializeAsString(), "m.onnx", "", options));
      };
  auto attr = [](onnx::NodeProto &n, const char *name) {
    onnx::AttributeProto *a = n.add_attribute();
    a->set_name(name);
    return a;
  };
  auto intAttr = [&](const char *name, int64_t v) {
    return [=](onnx::ModelProto &, onnx::NodeProto &n) {
      onnx::AttributeProto *a = attr(n, name);
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(v);
    };
  };
  auto strings = [&](const char *name, std::vector<std::string> v) {
    return [=](onnx::ModelProto &, onnx::NodeProto &n) {
      onnx::AttributeProto *a = attr(n, name);
      a->set_type(onnx::AttributeProto::STRINGS);
      for (const auto &s : v)
        a->add_strings(s);
    };
  };
  auto floats = [&](const char *name, bool one) {
    return [=](onnx::ModelProto &, onnx::NodeProto &n) {
      onnx::AttributeProto *a = attr(n, name);
      if (one) {
        a->set_type(onnx::AttributeProto::FLOAT);
        a->set_f(0.5f);
        return;
      }
      a->set_type(onnx::AttributeProto::FLOATS);
      a->add_floats(0.5f);
      a->add_floats(0.5f);
    };
  };
  // An extra graph input of `type` as the node's input `index`.
  auto input = [&](int index, const char *name, TensorType type) {
    return [=](onnx::ModelProto &m, onnx::NodeProto &n) {
      setValueInfo(m.mutable_graph()->add_input(), name, type);
      while (n.input_size() <= index)
        n.add_input("");
      n.set_input(index, name);
    };
  };
  RecurrentSpec gru = {"Gru", "GRU", "forward", 3, 2, 3, 4, true};
  RecurrentSpec lstm = {"Lstm", "LSTM", "forward", 3, 2, 3, 4, true};
  RecurrentSpec rnn = {"Rnn", "RNN", "bidirectional", 3, 2, 3, 4, true};
  const std::string gruAt = "m.onnx: node 'GRU0' (op 'GRU'): GRU ";
  EXPECT_EQ(importOf(gru, intAttr("layout", 1)),
            gruAt + "layout 1 is not supported");
  EXPECT_EQ(importOf(gru, floats("clip", true)),
            gruAt + "clip is not supported");
  EXPECT_EQ(importOf(gru, floats("activation_alpha", false)),
            gruAt + "activation_alpha is not supported");
  EXPECT_EQ(importOf(gru, strings("activations", {"HardSigmoid", "Tanh"})),
            gruAt + "activation 'HardSigmoid' is not supported (Sigmoid, "
                    "Tanh and Relu are)");
  EXPECT_EQ(importOf(gru, input(4, "lens", TensorType(DType::I32, {2}))),
            gruAt + "sequence_lens is not supported");
  EXPECT_EQ(importOf(gru, intAttr("linear_before_reset", 2)),
            gruAt + "linear_before_reset must be 0 or 1, not 2");
  EXPECT_EQ(importOf(gru,
                     [](onnx::ModelProto &m, onnx::NodeProto &n) {
                       for (auto &a : *n.mutable_attribute())
                         if (a.name() == "hidden_size")
                           a.set_i(5);
                     }),
            gruAt + "W must be f32[1, 15, 3] for hidden_size 5, not "
                    "f32[1, 12, 3]");
  const std::string lstmAt = "m.onnx: node 'LSTM0' (op 'LSTM'): LSTM ";
  EXPECT_EQ(importOf(lstm, intAttr("input_forget", 1)),
            lstmAt + "input_forget is not supported");
  EXPECT_EQ(importOf(lstm, input(7, "P", TensorType(DType::F32, {1, 12}))),
            lstmAt + "peepholes (P) are not supported");
  // Activations are matched in any case (onnxruntime's spelling).
  EXPECT_EQ(importOf(rnn, strings("activations", {"relu", "TANH"})), "");
  EXPECT_EQ(importOf(rnn, strings("activations", {"Tanh"})),
            "m.onnx: node 'RNN0' (op 'RNN'): RNN direction 'bidirectional' "
            "takes 2 activations, not 1");
}

} // namespace

//===- ZooTest.cpp - Zoo models import, verify and train ----------------===//
//
// `headroom zoo` graphs at small sizes: they import with a bound batch and
// verify, have the parameters of the architecture's formula, are written
// deterministically, keep `--weights none` data sparse and unread, and
// train (the loss falls on a small fixed data set).
//
//===----------------------------------------------------------------------===//
#include "compiler/Zoo.h"
#include "CompileUtil.h"
#include "TestUtil.h"
#include "compiler/OnnxImport.h"
#include "compiler/Verifier.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

#include <onnx/onnx_pb.h>

#include <gtest/gtest.h>
#include <numeric>
#include <random>
#include <sys/stat.h>

using namespace headroom;

namespace {

ZooConfig smallConfig(const std::string &arch) {
  ZooConfig c;
  c.Arch = arch;
  c.Layers = 2, c.DModel = 32, c.Heads = 4, c.Ffn = 64, c.Vocab = 50, c.Seq = 8;
  return c;
}

/// The parameter count written out per architecture (GPT-2 ties lm_head to
/// wte; LLaMA has no biases and an untied lm_head).
int64_t expectedParameters(const ZooConfig &c) {
  int64_t d = c.DModel, f = c.Ffn;
  if (c.Arch == "gpt2")
    return c.Vocab * d + c.Seq * d + 2 * d +
           c.Layers *
               (4 * d + 3 * d * d + 3 * d + d * d + d + d * f + f + f * d + d);
  int64_t kv = d / c.Heads * c.kvHeads(); // k_proj, v_proj outputs
  return 2 * c.Vocab * d + d +
         c.Layers * (2 * d + 2 * d * d + 2 * d * kv + 3 * d * f);
}

std::string tempPath(const std::string &name) {
  return testing::TempDir() + "/zoo_" + name;
}

std::unique_ptr<Module> importBatch(const std::string &path, int64_t batch) {
  ImportOptions o;
  o.Batch = batch;
  return takeOrFail(importOnnxFile(path, o));
}

int64_t stateElements(const Module &m) {
  int64_t n = 0;
  for (const auto &s : m.states())
    n += s->type().numElements();
  return n;
}

std::string fileBytes(const std::string &path) {
  auto buf = llvm::MemoryBuffer::getFile(path);
  return buf ? (*buf)->getBuffer().str() : "";
}

class ZooArch : public ::testing::TestWithParam<const char *> {};

TEST_P(ZooArch, ImportsVerifiesAndCountsParameters) {
  ZooConfig c = smallConfig(GetParam());
  std::string path = tempPath(c.Arch + ".onnx");
  auto summary = takeOrFail(writeZooModel(c, path));
  EXPECT_EQ(summary.Parameters, expectedParameters(c));
  EXPECT_EQ(zooParameterCount(c), expectedParameters(c));
  EXPECT_EQ(summary.DataPath, "");
  auto m = importBatch(path, 2);
  ASSERT_TRUE(m);
  EXPECT_EQ(errorOf(verifyModule(*m)), "");
  EXPECT_EQ(stateElements(*m), expectedParameters(c));
  for (const auto &s : m->states())
    EXPECT_EQ(s->kind(), StateKind::Param) << s->name();
  Function *f = m->lookupFunction("forward");
  ASSERT_NE(f, nullptr);
  for (Value *a : f->arguments())
    EXPECT_EQ(a->type(), TensorType(DType::I64, {2, c.Seq}));
  EXPECT_EQ(f->returnValues()[0]->type(), TensorType(DType::F32, {}));
}

TEST_P(ZooArch, WeightsAreDeterministicFromTheSeed) {
  ZooConfig c = smallConfig(GetParam());
  std::string a = tempPath(c.Arch + "_a.onnx"),
              b = tempPath(c.Arch + "_b.onnx");
  ASSERT_TRUE(takeOrFail(writeZooModel(c, a)).Nodes > 0);
  ASSERT_TRUE(takeOrFail(writeZooModel(c, b)).Nodes > 0);
  EXPECT_EQ(fileBytes(a), fileBytes(b));
  c.Seed = 1;
  ASSERT_TRUE(takeOrFail(writeZooModel(c, b)).Nodes > 0);
  EXPECT_NE(fileBytes(a), fileBytes(b));
}

TEST_P(ZooArch, NoWeightsIsSparseAndNeverRead) {
  ZooConfig c = smallConfig(GetParam());
  c.Weights = ZooConfig::Weights::None;
  std::string path = tempPath(c.Arch + "_none.onnx");
  auto summary = takeOrFail(writeZooModel(c, path));
  ASSERT_EQ(summary.DataPath, path + ".data");
  struct stat st;
  ASSERT_EQ(::stat(summary.DataPath.c_str(), &st), 0);
  EXPECT_EQ(uint64_t(st.st_size), summary.DataBytes);
  // Sparse: (almost) no data blocks, whatever the file system.
  EXPECT_LE(st.st_blocks * 512, 65536) << "the side file has data blocks";

  // Every initializer is an aligned, disjoint range of the side file.
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(fileBytes(path)));
  uint64_t end = 0;
  for (const onnx::TensorProto &t : model.graph().initializer()) {
    ASSERT_EQ(t.data_location(), onnx::TensorProto::EXTERNAL) << t.name();
    std::map<std::string, std::string> kv;
    for (const auto &e : t.external_data())
      kv[e.key()] = e.value();
    EXPECT_EQ(kv["location"], "zoo_" + c.Arch + "_none.onnx.data");
    uint64_t offset = std::stoull(kv["offset"]),
             length = std::stoull(kv["length"]);
    EXPECT_EQ(offset % 4096, 0u) << t.name();
    EXPECT_GE(offset, end) << t.name();
    end = offset + length;
  }
  EXPECT_LE(end, summary.DataBytes);

  auto m = importBatch(path, 2);
  ASSERT_TRUE(m);
  EXPECT_EQ(stateElements(*m), expectedParameters(c));
  ASSERT_EQ(::stat(summary.DataPath.c_str(), &st), 0);
  EXPECT_LE(st.st_blocks * 512, 65536);
}

/// 8 fixed random sequences; targets are the inputs shifted by one.
Dataset randomTokens(const ZooConfig &c, int64_t samples) {
  std::mt19937_64 rng(7);
  std::vector<int64_t> ids(samples * c.Seq), targets(samples * c.Seq);
  for (int64_t s = 0; s < samples; ++s) {
    std::vector<int64_t> row(c.Seq + 1);
    for (int64_t &t : row)
      t = int64_t(rng() % uint64_t(c.Vocab));
    for (int64_t t = 0; t < c.Seq; ++t) {
      ids[s * c.Seq + t] = row[t];
      targets[s * c.Seq + t] = row[t + 1];
    }
  }
  Dataset data;
  data.Source = "random tokens";
  data.Samples = samples;
  data.Arrays["input_ids"] =
      Tensor::fromInts(DType::I64, {samples, c.Seq}, ids);
  data.Arrays["targets"] =
      Tensor::fromInts(DType::I64, {samples, c.Seq}, targets);
  return data;
}

TEST_P(ZooArch, TrainingLowersTheLoss) {
  ZooConfig c = smallConfig(GetParam());
  std::string path = tempPath(c.Arch + "_train.onnx");
  ASSERT_TRUE(takeOrFail(writeZooModel(c, path)).Nodes > 0);
  CompileOptions o;
  o.Import.Batch = 4;
  o.Optimizer.Kind = OptimizerOptions::Kind::AdamW;
  o.Optimizer.Lr = 1e-2;
  o.DisableDropout = true;
  auto trainer = takeOrFail(compileTrainer(path, o));
  ASSERT_TRUE(trainer);
  Dataset data = randomTokens(c, 8);
  ASSERT_EQ(errorOf(trainer->checkData(data)), "");
  std::vector<int64_t> order(data.Samples);
  std::iota(order.begin(), order.end(), 0);
  std::vector<double> losses;
  for (int64_t s = 0; s < 30; ++s) {
    auto r = takeOrFail(trainer->step(data, order, (s % 2) * 4));
    losses.push_back(r.Loss);
  }
  double first = (losses[0] + losses[1]) / 2;
  double last = (losses[28] + losses[29]) / 2;
  EXPECT_NEAR(first, std::log(double(c.Vocab)), 0.3) << "initial loss";
  EXPECT_LT(last, 0.75 * first) << "first " << first << ", last " << last;
}

INSTANTIATE_TEST_SUITE_P(Archs, ZooArch, ::testing::Values("gpt2", "llama"));

/// Grouped-query heads (--kv-heads): k_proj and v_proj are [d, d / heads *
/// kv], repeated to every query head as transformers' repeat_kv; the
/// fuse-attention pass shares them without the copies, and the losses are
/// the unfused attention's.
TEST(ZooTest, GroupedQueryHeads) {
  ZooConfig c = smallConfig("llama");
  c.Heads = 4, c.KvHeads = 2;
  std::string path = tempPath("gqa.onnx");
  auto summary = takeOrFail(writeZooModel(c, path));
  EXPECT_EQ(summary.Parameters, expectedParameters(c));
  EXPECT_EQ(summary.OpCounts["Expand"], 2 * c.Layers);
  auto m = importBatch(path, 2);
  ASSERT_TRUE(m);
  EXPECT_EQ(stateElements(*m), expectedParameters(c));
  ASSERT_NE(m->lookupState("model.layers.0.self_attn.k_proj.weight"), nullptr);
  EXPECT_EQ(
      m->lookupState("model.layers.0.self_attn.k_proj.weight")->type().shape(),
      llvm::ArrayRef<int64_t>({32, 16}));
  Dataset data = randomTokens(c, 8);
  std::vector<int64_t> order(data.Samples);
  std::iota(order.begin(), order.end(), 0);
  std::vector<double> losses[2];
  for (bool fused : {true, false}) {
    CompileOptions o;
    o.Import.Batch = 4;
    o.Optimizer.Kind = OptimizerOptions::Kind::AdamW;
    o.Optimizer.Lr = 1e-2;
    o.DisableDropout = true;
    o.FuseAttention = fused;
    auto trainer = takeOrFail(compileTrainer(path, o));
    ASSERT_TRUE(trainer);
    unsigned attentions = 0;
    for (const PlanFunction &f : trainer->executor().plan().Functions)
      for (const KernelCall &k : f.Calls)
        attentions += k.Kind == OpKind::FusedAttention;
    EXPECT_EQ(attentions > 0, fused);
    for (int64_t s = 0; s < 20; ++s)
      losses[fused].push_back(
          takeOrFail(trainer->step(data, order, (s % 2) * 4)).Loss);
  }
  for (size_t s = 0; s < losses[0].size(); ++s)
    EXPECT_NEAR(losses[1][s], losses[0][s], 1e-4 * losses[0][s]) << s;
  EXPECT_LT(losses[1].back(), 0.75 * losses[1].front());
  c.KvHeads = 3;
  EXPECT_EQ(errorOf(validateZooConfig(c)),
            "--heads 4 is not divisible by --kv-heads 3");
}

TEST(ZooTest, DefaultsAreGpt2SmallAndLlama7B) {
  auto gpt2 = takeOrFail(defaultZooConfig("gpt2"));
  EXPECT_EQ(zooParameterCount(gpt2), 124439808);
  auto llama = takeOrFail(defaultZooConfig("llama"));
  EXPECT_EQ(zooParameterCount(llama), 6738415616);
  EXPECT_EQ(errorOf(defaultZooConfig("bert")),
            "unknown architecture 'bert': expected gpt2, llama or a preset "
            "(llama2-7b, llama2-13b, llama2-70b, llama-65b, llama3.1-8b)");
}

/// The presets have the published models' parameter counts.
TEST(ZooTest, PresetsHaveThePublishedSizes) {
  std::pair<const char *, int64_t> want[] = {{"llama2-7b", 6738415616},
                                             {"llama2-13b", 13015864320},
                                             {"llama2-70b", 68976648192},
                                             {"llama-65b", 65285660672},
                                             {"llama3.1-8b", 8030261248}};
  for (auto [name, params] : want) {
    ZooConfig c = takeOrFail(defaultZooConfig(name));
    EXPECT_EQ(c.Arch, "llama") << name;
    EXPECT_EQ(zooParameterCount(c), params) << name;
    c.Weights = ZooConfig::Weights::None;
    EXPECT_EQ(errorOf(validateZooConfig(c)), "") << name;
  }
  EXPECT_EQ(takeOrFail(defaultZooConfig("llama3.1-8b")).RopeTheta, 500000);
  EXPECT_EQ(zooPresets().size(), std::size(want));
}

TEST(ZooTest, Llama7BWithoutWeightsImports) {
  auto c = takeOrFail(defaultZooConfig("llama"));
  c.Weights = ZooConfig::Weights::None;
  std::string path = tempPath("llama7b.onnx");
  auto summary = takeOrFail(writeZooModel(c, path));
  EXPECT_GE(summary.DataBytes, 4 * uint64_t(summary.Parameters));
  auto m = importBatch(path, 1);
  ASSERT_TRUE(m);
  EXPECT_EQ(stateElements(*m), 6738415616);
  llvm::sys::fs::remove(summary.DataPath);
}

TEST(ZooTest, BadConfigsSayWhatIsWrong) {
  ZooConfig c = smallConfig("gpt2");
  c.Heads = 5;
  EXPECT_EQ(errorOf(validateZooConfig(c)),
            "--d-model 32 is not divisible by --heads 5");
  c = smallConfig("llama");
  c.Heads = 32; // head dimension 1
  EXPECT_EQ(errorOf(validateZooConfig(c)),
            "llama needs an even head dimension for its rotary embedding; "
            "--d-model 32 / --heads 32 = 1");
  c = smallConfig("llama");
  c.Layers = 0;
  EXPECT_EQ(errorOf(validateZooConfig(c)), "--layers 0: must be positive");
  c = takeOrFail(defaultZooConfig("llama"));
  EXPECT_EQ(errorOf(validateZooConfig(c)),
            "random weights take 26.95 GB, more than one ONNX file can hold "
            "(2 GiB); use --weights none to compile and report without them");
  std::string missing = testing::TempDir() + "/no/such/dir/m.onnx";
  EXPECT_NE(errorOf(writeZooModel(smallConfig("gpt2"), missing))
                .find("m.onnx: cannot create a temporary file next to it"),
            std::string::npos);
}

} // namespace

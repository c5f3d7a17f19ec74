//===- TrainingTest.cpp - Training runs against PyTorch references --------===//
//
// test/models/make_references.py trained each test model with PyTorch 1.13
// (4 steps of batch 8 over <model>.train.npz, dropout off) and saved the
// final weights per optimizer config, the first batch's gradients, and the
// per-step losses. Here headroom trains the same ONNX model from the same
// initial weights on the same batches and must match: |got - want| <=
// 1e-5 + 1e-4 |want| for every weight, buffer, gradient and loss.
//
// One allowance: a parameter whose gradient is exactly zero in exact
// arithmetic gets float32 rounding noise as its gradient in both
// implementations, and AdamW turns any noise into steps of up to lr. Two
// such parameters exist here: LeNet's conv1.bias (the BatchNorm after it
// subtracts it again; the reference lists it) and the key part of GPT's
// c_attn.bias (elements [32, 64): adding b to every key adds q.b to every
// score of a row, which softmax ignores). For exactly those elements (and the
// running mean conv1.bias feeds) AdamW results are compared with atol =
// steps * lr, the most such noise can move them; every other element, and
// every other optimizer, is held to the full tolerance.
//
//===----------------------------------------------------------------------===//
#include "../unit/CompileUtil.h"
#include "../unit/TestUtil.h"
#include "kernels/cpu/CpuTarget.h"
#include "runtime/Adapters.h"
#include "runtime/Devices.h"
#include "runtime/ModelIO.h"
#include "runtime/PlanFile.h"

#include "llvm/ADT/Sequence.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <onnx/checker.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <malloc.h>
#include <numeric>
#include <set>

using namespace headroom;

// Every C++ heap allocation of this test binary is counted, so that a test
// can measure the memory a training step allocates beyond the plan. Not under
// AddressSanitizer, which replaces the allocator itself.
// (__SANITIZE_ADDRESS__ is gcc's macro, __has_feature clang's.)
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HEADROOM_UNDER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(HEADROOM_UNDER_ASAN)
#define HEADROOM_COUNT_HEAP 0
#else
#define HEADROOM_COUNT_HEAP 1
#endif
static std::atomic<int64_t> LiveHeap{0}, PeakHeap{0};
/// Aligned allocations (what executors make their one block with): how many
/// and the bytes the last one asked for.
static std::atomic<int64_t> AlignedRequests{0}, LastAlignedBytes{0};
#if HEADROOM_COUNT_HEAP
static void *countedAlloc(size_t n, size_t alignment = 0) {
  void *p = alignment ? std::aligned_alloc(alignment, (n + alignment - 1) /
                                                          alignment * alignment)
                      : std::malloc(n ? n : 1);
  if (!p)
    std::abort();
  if (alignment) {
    ++AlignedRequests;
    LastAlignedBytes = n;
  }
  int64_t live = LiveHeap += malloc_usable_size(p);
  int64_t peak = PeakHeap.load();
  while (live > peak && !PeakHeap.compare_exchange_weak(peak, live))
    ;
  return p;
}
static void countedFree(void *p) {
  if (!p)
    return;
  LiveHeap -= malloc_usable_size(p);
  std::free(p);
}
void *operator new(size_t n) { return countedAlloc(n); }
void *operator new[](size_t n) { return countedAlloc(n); }
void operator delete(void *p) noexcept { countedFree(p); }
void operator delete[](void *p) noexcept { countedFree(p); }
void operator delete(void *p, size_t) noexcept { countedFree(p); }
void operator delete[](void *p, size_t) noexcept { countedFree(p); }
void *operator new[](size_t n, std::align_val_t a,
                     const std::nothrow_t &) noexcept {
  return countedAlloc(n, size_t(a));
}
void *operator new(size_t n, std::align_val_t a) {
  return countedAlloc(n, size_t(a));
}
void *operator new[](size_t n, std::align_val_t a) {
  return countedAlloc(n, size_t(a));
}
void operator delete(void *p, std::align_val_t) noexcept { countedFree(p); }
void operator delete[](void *p, std::align_val_t) noexcept { countedFree(p); }
void operator delete(void *p, size_t, std::align_val_t) noexcept {
  countedFree(p);
}
void operator delete[](void *p, size_t, std::align_val_t) noexcept {
  countedFree(p);
}
#endif

namespace {

struct Reference {
  llvm::json::Value Json = nullptr;
  const llvm::json::Object &root() const { return *Json.getAsObject(); }
};

Reference loadReference(const std::string &model) {
  auto buf = llvm::MemoryBuffer::getFile(modelPath(model + ".ref.json"));
  EXPECT_TRUE(static_cast<bool>(buf));
  auto parsed = llvm::json::parse((*buf)->getBuffer());
  EXPECT_TRUE(static_cast<bool>(parsed));
  return Reference{std::move(*parsed)};
}

std::vector<int64_t> identityOrder(int64_t n) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  return order;
}

/// Compares every array of `want` with `got(name)`; returns mismatches.
unsigned compareArrays(
    const std::map<std::string, Tensor> &want,
    const std::function<llvm::Expected<Tensor>(const std::string &)> &got,
    const std::function<double(const std::string &, int64_t)> &atol,
    const std::string &what) {
  unsigned bad = 0;
  for (const auto &[name, ref] : want) {
    auto t = got(name);
    if (!t) {
      ADD_FAILURE() << what << ": " << llvm::toString(t.takeError());
      ++bad;
      continue;
    }
    if (t->type() != ref.type()) {
      ADD_FAILURE() << what << ": " << name << " is " << t->type().str()
                    << ", PyTorch's is " << ref.type().str();
      ++bad;
      continue;
    }
    for (int64_t i = 0; i < ref.numElements(); ++i) {
      double g = t->getDouble(i), w = ref.getDouble(i), a = atol(name, i);
      if (std::fabs(g - w) <= a + 1e-4 * std::fabs(w))
        continue;
      ADD_FAILURE() << what << ": " << name << "[" << i << "] = " << g
                    << ", PyTorch has " << w;
      ++bad;
      break;
    }
  }
  return bad;
}

struct Config {
  const char *Model, *Name;
  /// headroom's optimizer when it is not the reference's: "lomo" must give
  /// SGD's weights (with clipping, weight decay, accumulation).
  const char *Optimizer = nullptr;
  /// Micro-batches when the reference has none: accumulating 4 micro-batches
  /// of 2 must give plain batch-8 training's weights (models without
  /// BatchNorm, whose statistics do depend on the batch).
  unsigned Accum = 0;
  /// The target: "cuda" runs kernels/cuda and the CUDA executor on the
  /// emulator (runtime/cuda/CudaExecutor.h).
  const char *Device = "cpu";
};

/// Makes createExecutor run cuda plans on the emulator: this binary runs
/// where there is no GPU (test/gpu runs the same cases on one).
void useCudaEmulator() { setenv("HEADROOM_CUDA_EMULATOR", "1", 1); }

class TrainingMatchesPyTorch : public ::testing::TestWithParam<Config> {};

TEST_P(TrainingMatchesPyTorch, WeightsAndLosses) {
  const Config &c = GetParam();
  Reference ref = loadReference(c.Model);
  const llvm::json::Object *cfg =
      ref.root().getObject("configs")->getObject(c.Name);
  ASSERT_NE(cfg, nullptr);
  const llvm::json::Object *hp = cfg->getObject("hyperparameters");
  CompileOptions o;
  o.Import.Batch = *ref.root().getInteger("batch");
  o.DisableDropout = true;
  o.Target = c.Device;
  useCudaEmulator();
  std::string opt = cfg->getString("optimizer")->str();
  o.Optimizer.Kind = opt == "AdamW"        ? OptimizerOptions::Kind::AdamW
                     : opt == "AdaLomo"    ? OptimizerOptions::Kind::AdaLomo
                     : hp->get("momentum") ? OptimizerOptions::Kind::Momentum
                                           : OptimizerOptions::Kind::Sgd;
  if (c.Optimizer) {
    ASSERT_EQ(std::string(c.Optimizer), "lomo");
    ASSERT_EQ(o.Optimizer.Kind, OptimizerOptions::Kind::Sgd);
    o.Optimizer.Kind = OptimizerOptions::Kind::Lomo;
  }
  o.Accumulate = c.Accum ? c.Accum : cfg->getInteger("accum").getValueOr(1);
  if (const llvm::json::Array *eps = hp->getArray("eps")) { // AdaLomo
    o.Optimizer.Eps1 = *(*eps)[0].getAsNumber();
    o.Optimizer.Eps2 = *(*eps)[1].getAsNumber();
    o.Optimizer.ClipThreshold = *hp->getNumber("clip_threshold");
    o.Optimizer.DecayRate = *hp->getNumber("decay_rate");
  }
  o.Optimizer.Lr = *hp->getNumber("lr");
  o.Optimizer.Momentum = hp->getNumber("momentum").getValueOr(0.0);
  o.Optimizer.Nesterov = hp->getBoolean("nesterov").getValueOr(false);
  o.Optimizer.WeightDecay = hp->getNumber("weight_decay").getValueOr(0.0);
  if (const llvm::json::Array *betas = hp->getArray("betas")) {
    o.Optimizer.Beta1 = *(*betas)[0].getAsNumber();
    o.Optimizer.Beta2 = *(*betas)[1].getAsNumber();
  }
  if (!hp->getArray("eps"))
    o.Optimizer.Eps = hp->getNumber("eps").getValueOr(1e-8);
  if (const llvm::json::Object *clip = cfg->getObject("clip_grad_norm"))
    o.Optimizer.ClipGradNorm = *clip->getNumber("max_norm");

  auto trainer =
      takeOrFail(compileTrainer(modelPath(std::string(c.Model) + ".onnx"), o));
  ASSERT_TRUE(trainer);
  auto data =
      takeOrFail(loadDataset(modelPath(std::string(c.Model) + ".train.npz")));
  ASSERT_EQ(errorOf(trainer->checkData(data)), "");
  std::vector<int64_t> order = identityOrder(data.Samples);
  const llvm::json::Array &losses = *cfg->getArray("losses");
  const llvm::json::Array *norms = cfg->getArray("grad_norms");
  int64_t steps = *ref.root().getInteger("steps");
  for (int64_t s = 0; s < steps; ++s) {
    auto r = takeOrFail(trainer->step(data, order, s * trainer->batch()));
    double want = *losses[s].getAsNumber();
    EXPECT_NEAR(r.Loss, want, 1e-5 + 1e-4 * std::fabs(want)) << "step " << s;
    if (norms) {
      ASSERT_TRUE(r.GradNorm.hasValue());
      double wn = *(*norms)[s].getAsNumber();
      EXPECT_NEAR(*r.GradNorm, wn, 1e-5 + 1e-4 * wn) << "grad norm, step " << s;
    }
  }

  // Element ranges whose true gradient is zero (see the file comment).
  std::map<std::string, std::pair<int64_t, int64_t>> noisy;
  if (opt == "AdamW" || opt == "AdaLomo") {
    if (const llvm::json::Array *z =
            ref.root().getArray("zero_gradient_parameters"))
      for (const auto &v : *z) {
        noisy[v.getAsString()->str()] = {0, INT64_MAX};
        noisy["bn1.running_mean"] = {0, INT64_MAX};
      }
    if (std::string(c.Model) == "gpt")
      for (const char *p : {"h.0.attn.c_attn.bias", "h.1.attn.c_attn.bias"})
        // AdaLomo normalizes each parameter's update by its RMS, which the
        // noise in [32, 64) enters: the whole bias moves by it.
        noisy[p] = opt == "AdaLomo" ? std::make_pair<int64_t, int64_t>(0, 96)
                                    : std::make_pair<int64_t, int64_t>(32, 64);
  }
  double allowance = steps * o.Optimizer.Lr;
  auto want = takeOrFail(readArrays(modelPath(cfg->getString("file")->str())));
  EXPECT_EQ(compareArrays(
                want,
                [&](const std::string &n) {
                  return trainer->executor().readState(n);
                },
                [&](const std::string &n, int64_t i) {
                  auto it = noisy.find(n);
                  return it != noisy.end() && i >= it->second.first &&
                                 i < it->second.second
                             ? allowance
                             : 1e-5;
                },
                std::string(c.Model) + "/" + c.Name),
            0u);
}

INSTANTIATE_TEST_SUITE_P(
    Models, TrainingMatchesPyTorch,
    ::testing::ValuesIn(std::vector<Config>{{"mlp", "sgd"},
                                            {"mlp", "momentum"},
                                            {"mlp", "momentum_nesterov"},
                                            {"mlp", "adamw"},
                                            {"mlp", "sgd_clip"},
                                            {"mlp", "sgd_wd"},
                                            {"lenet", "sgd"},
                                            {"lenet", "momentum"},
                                            {"lenet", "adamw"},
                                            {"lenet", "sgd_clip"},
                                            {"gpt", "sgd"},
                                            {"gpt", "momentum"},
                                            {"gpt", "momentum_nesterov"},
                                            {"gpt", "adamw"},
                                            {"gpt", "sgd_clip"},
                                            {"gpt", "sgd_wd"},
                                            {"llama", "sgd"},
                                            {"llama", "momentum"},
                                            {"llama", "adamw"},
                                            {"llama", "sgd_clip"},
                                            {"llama", "sgd_wd"}}),
    [](const auto &info) {
      return std::string(info.param.Model) + "_" + info.param.Name;
    });

// LOMO against SGD's references, gradient accumulation against PyTorch
// accumulating over micro-batches, AdaLomo against the published update.
static std::vector<Config> lomoAccumulationAdaLomo() {
  std::vector<Config> out;
  for (const char *m : {"mlp", "lenet", "gpt", "llama"}) {
    for (const char *name :
         {"sgd", "sgd_clip", "sgd_wd", "sgd_accum", "sgd_clip_accum"})
      out.push_back({m, name, "lomo"});
    out.push_back({m, "sgd_accum"});
    out.push_back({m, "sgd_clip_accum"});
    out.push_back({m, "adalomo"});
    out.push_back({m, "adalomo_wd"});
    if (std::string(m) != "lenet") {
      out.push_back({m, "sgd", nullptr, 4});
      out.push_back({m, "sgd", "lomo", 4});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(
    Lomo, TrainingMatchesPyTorch,
    ::testing::ValuesIn(lomoAccumulationAdaLomo()), [](const auto &info) {
      return std::string(info.param.Model) + "_" + info.param.Name +
             (info.param.Optimizer ? std::string("_") + info.param.Optimizer
                                   : std::string()) +
             (info.param.Accum ? "_accum" + std::to_string(info.param.Accum)
                               : std::string());
    });

// The CUDA backend (emulated here) against the same references.
static std::vector<Config> onCuda() {
  std::vector<Config> out;
  for (const char *m : {"mlp", "lenet", "gpt", "llama"}) {
    for (const char *name : {"sgd", "momentum", "adamw", "sgd_clip", "sgd_wd",
                             "sgd_accum", "adalomo"})
      out.push_back({m, name, nullptr, 0, "cuda"});
    out.push_back({m, "sgd_clip", "lomo", 0, "cuda"});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cuda, TrainingMatchesPyTorch,
                         ::testing::ValuesIn(onCuda()), [](const auto &info) {
                           return std::string(info.param.Model) + "_" +
                                  info.param.Name +
                                  (info.param.Optimizer ? "_lomo" : "");
                         });

// Models made with torchvision's and transformers' own classes
// (test/models/hub/make_hub_models.py: ResNet, MobileNetV2, ViT, BERT, GPT-2,
// Llama, T5, BART), exported as users export them, trained 2 steps of SGD
// by PyTorch and here, on the cpu and on cuda (emulated). Buffers torch
// exports as initializers (BART's final_logits_bias) are frozen, as a user
// must (--freeze).
struct HubCase {
  const char *Model, *Device;
};

class HubModelsMatchPyTorch : public ::testing::TestWithParam<HubCase> {};

TEST_P(HubModelsMatchPyTorch, WeightsAndLosses) {
  const HubCase &c = GetParam();
  std::string base = "hub/" + std::string(c.Model);
  Reference ref = loadReference(base);
  CompileOptions o;
  o.Import.Batch = *ref.root().getInteger("batch");
  o.Optimizer.Kind = OptimizerOptions::Kind::Sgd;
  o.Optimizer.Lr = *ref.root().getNumber("lr");
  o.Target = c.Device;
  useCudaEmulator();
  for (const auto &b : *ref.root().getArray("buffers"))
    o.Import.Freeze.push_back(b.getAsString()->str());
  auto trainer = takeOrFail(compileTrainer(modelPath(base + ".onnx"), o));
  ASSERT_TRUE(trainer);
  auto data = takeOrFail(loadDataset(modelPath(base + ".train.npz")));
  std::vector<int64_t> order = identityOrder(data.Samples);
  const llvm::json::Array &losses = *ref.root().getArray("losses");
  for (size_t s = 0; s < losses.size(); ++s) {
    auto r = takeOrFail(trainer->step(data, order, s * trainer->batch()));
    double want = *losses[s].getAsNumber();
    EXPECT_NEAR(r.Loss, want, 1e-5 + 1e-4 * std::fabs(want)) << "step " << s;
  }
  auto want = takeOrFail(readArrays(modelPath(base + ".ref.npz")));
  EXPECT_EQ(compareArrays(
                want,
                [&](const std::string &n) {
                  return trainer->executor().readState(n);
                },
                [](const std::string &, int64_t) { return 1e-5; }, base),
            0u);
}

INSTANTIATE_TEST_SUITE_P(Hub, HubModelsMatchPyTorch, ::testing::ValuesIn([] {
                           std::vector<HubCase> out;
                           for (const char *m :
                                {"resnet", "mobilenet_v2", "vit", "bert",
                                 "gpt2", "llama", "t5", "bart"})
                             for (const char *d : {"cpu", "cuda"})
                               out.push_back({m, d});
                           return out;
                         }()),
                         [](const auto &info) {
                           return std::string(info.param.Model) + "_" +
                                  info.param.Device;
                         });

// Models exported by PyTorch 2.15's default (dynamo) exporter with
// optimize=False (test/models/dynamo/make_dynamo_models.py: GPT-2, Llama
// with sdpa attention, BERT with a padding mask, BART, ViT, MobileNetV2,
// LSTM), trained 2 steps of SGD and of AdamW by PyTorch and here. Nothing is
// frozen by hand: the file's graph signature says what is a parameter.
struct DynamoCase {
  const char *Model, *Optimizer, *Device;
};

class DynamoModelsMatchPyTorch : public ::testing::TestWithParam<DynamoCase> {};

TEST_P(DynamoModelsMatchPyTorch, WeightsAndLosses) {
  const DynamoCase &c = GetParam();
  // llama.opset23 is llama exported at opset 23 (ONNX's Attention op,
  // expanded from its function body): the same model, the same references.
  std::string file = "dynamo/" + std::string(c.Model);
  std::string base = file.substr(0, file.find('.'));
  Reference ref = loadReference(base);
  const llvm::json::Object *hp = ref.root().getObject(c.Optimizer);
  ASSERT_TRUE(hp);
  CompileOptions o;
  o.Import.Batch = *ref.root().getInteger("batch");
  bool adamw = std::string(c.Optimizer) == "adamw";
  o.Optimizer.Kind =
      adamw ? OptimizerOptions::Kind::AdamW : OptimizerOptions::Kind::Sgd;
  o.Optimizer.Lr = *hp->getNumber("lr");
  if (adamw) {
    o.Optimizer.Beta1 = *(*hp->getArray("betas"))[0].getAsNumber();
    o.Optimizer.Beta2 = *(*hp->getArray("betas"))[1].getAsNumber();
    o.Optimizer.Eps = *hp->getNumber("eps");
    o.Optimizer.WeightDecay = *hp->getNumber("weight_decay");
  }
  o.Target = c.Device;
  useCudaEmulator();
  auto trainer = takeOrFail(compileTrainer(modelPath(file + ".onnx"), o));
  ASSERT_TRUE(trainer);
  auto data = takeOrFail(loadDataset(modelPath(base + ".train.npz")));
  std::vector<int64_t> order = identityOrder(data.Samples);
  const llvm::json::Array &losses =
      *ref.root().getObject("losses")->getArray(c.Optimizer);
  for (size_t s = 0; s < losses.size(); ++s) {
    auto r = takeOrFail(trainer->step(data, order, s * trainer->batch()));
    double want = *losses[s].getAsNumber();
    EXPECT_NEAR(r.Loss, want, 1e-5 + 1e-4 * std::fabs(want)) << "step " << s;
  }
  auto want = takeOrFail(readArrays(
      modelPath(base + ".ref." + std::string(c.Optimizer) + ".npz")));
  if (!adamw) {
    EXPECT_EQ(compareArrays(
                  want,
                  [&](const std::string &n) {
                    return trainer->executor().readState(n);
                  },
                  [](const std::string &, int64_t) { return 1e-5; }, base),
              0u);
    return;
  }
  // AdamW divides each gradient by its own magnitude, so where a gradient
  // is only float32 rounding noise (ViT's key bias, as the header says) or
  // where two steps' gradients nearly cancel in the first moment (a few of
  // the tiny Llama's q/k weights, whose gradients are ~1e-5 at init and
  // agree with PyTorch's to 7e-8), rounding moves the update by a good part
  // of lr in both implementations. The SGD cases check the gradients at full
  // tolerance; here every element must be within the full tolerance except
  // at most one in twenty of each tensor, and those within steps * lr: an
  // error in the update itself moves every element.
  // MobileNetV2's projection BatchNorm biases (features.N.conv.2/3.bias)
  // feed a 1x1 convolution and another BatchNorm, which subtracts them
  // again: their gradient is zero in exact arithmetic (as LeNet's
  // conv1.bias in the header), so every element is noise, and so is the
  // part of the next BatchNorm's running mean they feed.
  auto allNoise = [&](llvm::StringRef name) {
    return std::string(c.Model) == "cnn" &&
           ((name.endswith(".bias") &&
             (name.contains(".conv.2.") || name.contains(".conv.3."))) ||
            name.endswith(".conv.0.1.running_mean"));
  };
  double noise = losses.size() * o.Optimizer.Lr;
  for (const auto &[name, ref] : want) {
    auto got = trainer->executor().readState(name);
    ASSERT_TRUE(static_cast<bool>(got)) << llvm::toString(got.takeError());
    ASSERT_EQ(got->type(), ref.type()) << name;
    int64_t loose = 0;
    for (int64_t i = 0; i < ref.numElements(); ++i) {
      double g = got->getDouble(i), w = ref.getDouble(i);
      if (std::fabs(g - w) <= 1e-5 + 1e-4 * std::fabs(w))
        continue;
      ++loose;
      EXPECT_LE(std::fabs(g - w), noise + 1e-5)
          << base << ": " << name << "[" << i << "] = " << g << ", PyTorch has "
          << w;
    }
    if (!allNoise(name)) {
      EXPECT_LE(loose, 1 + ref.numElements() / 20)
          << base << ": " << name << " differs in " << loose << " elements";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dynamo, DynamoModelsMatchPyTorch,
                         ::testing::ValuesIn([] {
                           std::vector<DynamoCase> out;
                           for (const char *m :
                                {"gpt2", "llama", "llama.opset23", "bert",
                                 "bart", "vit", "cnn", "lstm"})
                             for (const char *opt : {"sgd", "adamw"})
                               for (const char *d : {"cpu", "cuda"})
                                 out.push_back({m, opt, d});
                           return out;
                         }()),
                         [](const auto &info) {
                           std::string m = info.param.Model;
                           std::replace(m.begin(), m.end(), '.', '_');
                           return m + "_" + info.param.Optimizer + "_" +
                                  info.param.Device;
                         });

class GradientsMatchPyTorch : public ::testing::TestWithParam<const char *> {};

TEST_P(GradientsMatchPyTorch, FirstBatch) {
  std::string model = GetParam();
  Reference ref = loadReference(model);
  CompileOptions o;
  o.Import.Batch = *ref.root().getInteger("batch");
  o.DisableDropout = true;
  o.ApplyOptimizer = false;
  auto trainer = takeOrFail(compileTrainer(modelPath(model + ".onnx"), o));
  ASSERT_TRUE(trainer);
  auto data = takeOrFail(loadDataset(modelPath(model + ".train.npz")));
  auto r = takeOrFail(trainer->step(data, identityOrder(data.Samples), 0));
  double wantLoss = *ref.root().getObject("grads")->getNumber("loss");
  EXPECT_NEAR(r.Loss, wantLoss, 1e-5 + 1e-4 * wantLoss);
  auto want = takeOrFail(readArrays(modelPath(model + ".ref.grads.npz")));
  const auto &grads = trainer->executor().gradients();
  EXPECT_EQ(
      compareArrays(
          want,
          [&](const std::string &n) -> llvm::Expected<Tensor> {
            auto it = grads.find(n);
            if (it == grads.end())
              return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                             "no gradient for %s", n.c_str());
            return it->second;
          },
          [](const std::string &, int64_t) { return 1e-5; }, model + " grads"),
      0u);
}

INSTANTIATE_TEST_SUITE_P(Models, GradientsMatchPyTorch,
                         ::testing::Values("mlp", "lenet", "gpt", "llama"));

TEST(SavedModel, IsValidOnnxWithTrainedWeights) {
  CompileOptions o;
  o.Import.Batch = 8;
  o.Optimizer.Lr = 0.05;
  auto trainer = takeOrFail(compileTrainer(modelPath("mlp.onnx"), o));
  ASSERT_TRUE(trainer);
  auto data = takeOrFail(loadDataset(modelPath("mlp.train.npz")));
  ASSERT_TRUE(static_cast<bool>(trainer->step(data, identityOrder(32), 0)));
  std::string out = testing::TempDir() + "/mlp.trained.onnx";
  ASSERT_EQ(errorOf(saveTrainedModel(trainer->executor(), modelPath("mlp.onnx"),
                                     out)),
            "");
  EXPECT_NO_THROW(onnx::checker::check_model(out));
  // Loading the saved model gives the trained weights back.
  CompileOptions again = o;
  auto reloaded = takeOrFail(compileTrainer(out, again));
  ASSERT_TRUE(reloaded);
  for (const char *name : {"fc1.weight", "fc3.bias"}) {
    Tensor a = *trainer->executor().readState(name);
    Tensor b = *reloaded->executor().readState(name);
    EXPECT_EQ(a, b) << name;
  }
}

} // namespace

namespace {

/// Whether buffers `a` and `b` are one's bytes handed to the other by a view
/// (a Reshape whose operand dies there): the same place, and the only call
/// where both live reads one and writes the other.
bool isViewHandOff(const Plan &plan, const PlanFunction &f, int a, int b,
                   int64_t at) {
  const Placement &pa = plan.Placements[a], &pb = plan.Placements[b];
  if (pa.Offset != pb.Offset ||
      plan.Buffers[a].sizeInBytes() != plan.Buffers[b].sizeInBytes() ||
      at < 0 || size_t(at) >= f.Calls.size())
    return false;
  const KernelCall &c = f.Calls[at];
  bool view = c.Kind == OpKind::Reshape || c.Kind == OpKind::Flatten ||
              c.Kind == OpKind::Squeeze || c.Kind == OpKind::Unsqueeze;
  auto is = [](const std::vector<int> &v, int x) {
    return v.size() >= 1 && v[0] == x;
  };
  return view && ((is(c.Inputs, a) && is(c.Outputs, b)) ||
                  (is(c.Inputs, b) && is(c.Outputs, a)));
}

/// No two arena buffers of `f` whose lifetimes overlap share a byte (but
/// for a view's hand-off); each lies inside the arena at an aligned offset.
void expectFunctionKeepsTheInvariants(const Plan &plan, const PlanFunction &f,
                                      const char *model) {
  std::map<int, std::pair<int64_t, int64_t>> life; // buffer -> [first, last]
  auto touch = [&](int b, int64_t pos) {
    ASSERT_GE(b, 0);
    ASSERT_LT(static_cast<size_t>(b), plan.Placements.size());
    if (plan.Placements[b].Where != Placement::Kind::Arena)
      return;
    auto [it, inserted] = life.try_emplace(b, std::make_pair(pos, pos));
    it->second.first = std::min(it->second.first, pos);
    it->second.second = std::max(it->second.second, pos);
  };
  for (int a : f.Args)
    touch(a, 0);
  for (size_t c = 0; c < f.Calls.size(); ++c) {
    for (int b : f.Calls[c].Inputs)
      if (b >= 0)
        touch(b, c);
    for (int b : f.Calls[c].Outputs)
      touch(b, c);
  }
  for (int b : f.Results)
    touch(b, f.Calls.size());
  std::vector<std::pair<int, std::pair<int64_t, int64_t>>> bufs(life.begin(),
                                                                life.end());
  for (size_t i = 0; i < bufs.size(); ++i) {
    const Placement &pi = plan.Placements[bufs[i].first];
    uint64_t si = plan.Buffers[bufs[i].first].sizeInBytes();
    EXPECT_LE(pi.Offset + si, plan.ArenaBytes) << model << " @" << f.Name;
    EXPECT_EQ(pi.Offset % plan.Alignment, 0u) << model << " @" << f.Name;
    for (size_t j = i + 1; j < bufs.size(); ++j) {
      const Placement &pj = plan.Placements[bufs[j].first];
      uint64_t sj = plan.Buffers[bufs[j].first].sizeInBytes();
      bool time = bufs[i].second.first <= bufs[j].second.second &&
                  bufs[j].second.first <= bufs[i].second.second;
      bool space =
          si && sj && pi.Offset < pj.Offset + sj && pj.Offset < pi.Offset + si;
      int64_t lastI = bufs[i].second.second, lastJ = bufs[j].second.second;
      bool handOff =
          (lastI == bufs[j].second.first || lastJ == bufs[i].second.first) &&
          isViewHandOff(plan, f, bufs[i].first, bufs[j].first,
                        std::min(lastI, lastJ));
      EXPECT_FALSE(time && space && !handOff)
          << model << " @" << f.Name << ": buffers " << bufs[i].first << " and "
          << bufs[j].first << " overlap";
    }
  }
}

/// What creating an executor really allocates, measured by the counting
/// allocator of this binary: its one aligned block is exactly the plan's
/// peak, and everything else it keeps is bookkeeping (a pointer per buffer).
void expectAllocationIsThePlannedPeak(const Plan &plan, const char *what) {
  if (!HEADROOM_COUNT_HEAP)
    return;
  uint64_t peak = plan.Report.PeakBytes();
  size_t bookkeeping = 16 * (plan.Buffers.size() + plan.States.size()) + 8192;
  Plan copy = plan; // made before measuring: the executor keeps it
  int64_t requests = AlignedRequests, live = LiveHeap;
  auto exec = takeOrFail(createExecutor(std::move(copy)));
  ASSERT_TRUE(exec) << what;
  EXPECT_EQ(AlignedRequests - requests, 1) << what;
  EXPECT_EQ(uint64_t(LastAlignedBytes), peak) << what;
  int64_t measured = LiveHeap - live;
  EXPECT_GE(measured, int64_t(peak)) << what;
  // The block rounds up to malloc's granules (to pages when mmapped).
  EXPECT_LE(measured, int64_t(peak + bookkeeping + 4096)) << what;
}

/// The executor allocates exactly what the plan says.
TEST(PlannedMemory, AllocatedBytesEqualPlannedPeak) {
  if (!HEADROOM_COUNT_HEAP)
    GTEST_SKIP() << "the sanitizer's allocator cannot be counted";
  for (const char *model : {"mlp", "lenet", "gpt", "llama"}) {
    CompileOptions o;
    o.Import.Batch = 8;
    o.Optimizer.Kind = OptimizerOptions::Kind::AdamW;
    Plan plan = compilePlan(modelPath(std::string(model) + ".onnx"), o);
    expectAllocationIsThePlannedPeak(plan, model);
    const MemoryReport &r = plan.Report;
    EXPECT_GE(r.PeakBytes(), r.LowerBoundBytes()) << model;
    EXPECT_EQ(r.OptimizerState, 2 * r.Parameters + 8) << model; // m, v, step
    EXPECT_GT(r.Activations, 0u) << model;
    // Conv's im2col columns are declared workspace; no other model's
    // kernels declare any (gpt's and llama's logits are too small for the
    // output head to be fused).
    EXPECT_EQ(r.Workspace, plan.WorkspaceBytes) << model;
    EXPECT_EQ(r.Workspace > 0, std::string(model) == "lenet") << model;
  }
}

/// The invariants of a real plan, in every function of the driver (LOMO
/// with clipping and accumulation has three): every value has a place;
/// arena buffers lie inside the arena at aligned offsets; no two whose
/// lifetimes overlap share a byte.
TEST(PlannedMemory, RealPlansKeepTheInvariants) {
  for (const char *model : {"lenet", "gpt", "llama"})
    for (bool lomo : {false, true}) {
      CompileOptions o;
      o.Import.Batch = 4;
      o.Optimizer.Kind = lomo ? OptimizerOptions::Kind::Lomo
                              : OptimizerOptions::Kind::Momentum;
      o.Optimizer.ClipGradNorm = lomo ? 1.0 : 0.0;
      o.Accumulate = lomo ? 4 : 1;
      Plan plan = compilePlan(modelPath(std::string(model) + ".onnx"), o);
      EXPECT_EQ(plan.Functions.size(), lomo ? 3u : 1u) << model;
      for (const PlanFunction &f : plan.Functions)
        expectFunctionKeepsTheInvariants(plan, f, model);
      EXPECT_GE(plan.Report.PeakBytes(), plan.Report.LowerBoundBytes());
    }
}

/// What a step allocates on the heap beyond the plan's state, arena and
/// workspace: kernels keep their other scratch to O(rows) vectors, never
/// tensor-sized ones, so the measured memory of a step is the planned peak.
/// (OpenBLAS's own buffers come from its allocator and are not counted here.)
TEST(PlannedMemory, AStepAllocatesNothingBeyondThePlan) {
  if (!HEADROOM_COUNT_HEAP)
    GTEST_SKIP() << "the sanitizer's allocator cannot be counted";
  for (const char *model : {"mlp", "lenet", "gpt", "llama"}) {
    CompileOptions o;
    o.Import.Batch = 8;
    o.Optimizer.Kind = OptimizerOptions::Kind::AdamW;
    auto trainer =
        takeOrFail(compileTrainer(modelPath(std::string(model) + ".onnx"), o));
    ASSERT_TRUE(trainer);
    auto data =
        takeOrFail(loadDataset(modelPath(std::string(model) + ".train.npz")));
    std::vector<int64_t> order = identityOrder(data.Samples);
    const Plan &plan = trainer->executor().plan();
    std::vector<Tensor> args;
    for (size_t i = 0; i < plan.Functions[0].Args.size(); ++i)
      args.push_back(gatherRows(data.Arrays.at(plan.Functions[0].ArgNames[i]),
                                order, 0, 8));
    std::vector<const Tensor *> ptrs;
    for (const Tensor &t : args)
      ptrs.push_back(&t);
    ASSERT_TRUE(static_cast<bool>(trainer->executor().run("step", ptrs)));
    int64_t before = LiveHeap.load();
    PeakHeap = before;
    ASSERT_TRUE(static_cast<bool>(trainer->executor().run("step", ptrs)));
    int64_t extra = PeakHeap.load() - before;
    // The loss result and a few small vectors: far below 1% of the arena.
    EXPECT_LT(extra, int64_t(plan.ArenaBytes / 100 + 4096))
        << model << ": a step allocated " << extra << " bytes beyond the plan";
  }
}

/// LOMO, its norm pass and accumulation: the executor allocates the plan; no
/// optimizer state but the clip coefficient; accumulators are one copy of
/// the parameters; LOMO holds far fewer gradient bytes than PyTorch's order
/// and at least the largest gradient; a whole step (every function of the
/// driver) allocates nothing tensor-sized beyond the plan.
TEST(PlannedMemory, LomoAndAccumulation) {
  for (const char *model : {"mlp", "lenet", "gpt", "llama"}) {
    using K = decltype(OptimizerOptions::Kind);
    using S = ScheduleMode;
    auto make = [&](K kind, double clip, unsigned accum, S mode) {
      CompileOptions o;
      o.Import.Batch = 8;
      o.Optimizer.Kind = kind;
      o.Optimizer.ClipGradNorm = clip;
      o.Accumulate = accum;
      o.Schedule = mode;
      return takeOrFail(
          compileTrainer(modelPath(std::string(model) + ".onnx"), o));
    };
    auto torch = make(K::Sgd, 0, 1, S::Never);
    auto lomo = make(K::Lomo, 0, 1, S::Auto);
    auto clipped = make(K::Lomo, 1.0, 1, S::Auto);
    auto accum = make(K::Lomo, 0, 4, S::Auto);
    auto ada = make(K::AdaLomo, 0, 1, S::Auto);
    ASSERT_TRUE(torch && lomo && clipped && accum && ada);
    for (Trainer *t : {lomo.get(), clipped.get(), accum.get(), ada.get()})
      expectAllocationIsThePlannedPeak(t->executor().plan(), model);
    const MemoryReport &tr = torch->executor().plan().Report,
                       &lr = lomo->executor().plan().Report;
    EXPECT_EQ(lr.OptimizerState, 0u) << model;
    EXPECT_EQ(clipped->executor().plan().Report.OptimizerState, 4u) << model;
    EXPECT_EQ(clipped->executor().plan().Report.PassesPerStep, 2u) << model;
    EXPECT_EQ(accum->executor().plan().Report.GradientState, lr.Parameters)
        << model;
    EXPECT_EQ(accum->batch(), 8) << model;
    EXPECT_EQ(accum->microBatch(), 2) << model;
    EXPECT_GE(lr.GradientsMaxLive, lr.LargestParameter) << model;
    EXPECT_LT(lr.GradientsMaxLive, tr.GradientsMaxLive) << model;
    EXPECT_GE(tr.GradientsMaxLive, tr.Parameters) << model;
    if (std::string(model) == "gpt" || std::string(model) == "llama") {
      EXPECT_LE(lr.GradientsMaxLive, tr.GradientsMaxLive / 4) << model;
    }

    if (!HEADROOM_COUNT_HEAP)
      continue;
    auto data =
        takeOrFail(loadDataset(modelPath(std::string(model) + ".train.npz")));
    std::vector<int64_t> order = identityOrder(data.Samples);
    for (Trainer *t : {clipped.get(), accum.get(), ada.get()}) {
      ASSERT_TRUE(static_cast<bool>(t->step(data, order, 0)));
      int64_t before = LiveHeap.load();
      PeakHeap = before;
      ASSERT_TRUE(static_cast<bool>(t->step(data, order, 8)));
      // The batches the trainer gathers, the results and a few vectors.
      int64_t extra = PeakHeap.load() - before;
      EXPECT_LT(extra, int64_t(t->executor().plan().ArenaBytes / 10 + 4096))
          << model << ": a step allocated " << extra
          << " bytes beyond the plan";
    }
  }
}

/// In-place reuse and the arena change no result: the same step with and
/// without in-place reuse gives bit-identical weights.
TEST(PlannedMemory, InPlaceReuseKeepsResultsIdentical) {
  CompileOptions o;
  o.Import.Batch = 8;
  o.DisableDropout = true;
  auto compiled = compile(modelPath("gpt.onnx"), o);
  ASSERT_TRUE(static_cast<bool>(compiled));
  const Module *m = compiled->M.get();
  LowerOptions inPlace, separate;
  separate.InPlace = false;
  auto a =
      takeOrFail(createCpuExecutor(*lowerModule(*m, cpuTarget(), inPlace)));
  auto b =
      takeOrFail(createCpuExecutor(*lowerModule(*m, cpuTarget(), separate)));
  ASSERT_TRUE(a && b);
  // In-place results share their operand's buffer, so there are fewer
  // arena buffers (the peak itself need not drop: it can fall where nothing
  // runs in place).
  auto arenaBuffers = [](const Plan &p) {
    return std::count_if(
        p.Placements.begin(), p.Placements.end(),
        [](const Placement &pl) { return pl.Where == Placement::Kind::Arena; });
  };
  EXPECT_LT(arenaBuffers(a->plan()), arenaBuffers(b->plan()));
  EXPECT_LE(a->plan().ArenaBytes, b->plan().ArenaBytes);
  for (auto *e : {a.get(), b.get()})
    ASSERT_TRUE(static_cast<bool>(loadInitialState(*e, modelPath("gpt.onnx"))));
  auto data = takeOrFail(loadDataset(modelPath("gpt.train.npz")));
  std::vector<int64_t> order = identityOrder(data.Samples);
  for (int64_t s = 0; s < 2; ++s) {
    std::vector<Tensor> args;
    for (Value *v : m->functions()[0]->arguments())
      args.push_back(gatherRows(data.Arrays.at(v->name()), order, s * 8, 8));
    std::vector<const Tensor *> ptrs;
    for (const Tensor &t : args)
      ptrs.push_back(&t);
    ASSERT_TRUE(static_cast<bool>(a->run("step", ptrs)));
    ASSERT_TRUE(static_cast<bool>(b->run("step", ptrs)));
  }
  for (const PlanState &s : a->plan().States)
    EXPECT_EQ(*a->readState(s.Name), *b->readState(s.Name)) << s.Name;
}

} // namespace

namespace {

/// Recomputation changes where values live, never what they are: every
/// policy trains every test model to bit-identical weights (dropout on: the
/// clones draw the same masks), with sgd, adamw, lomo (clipped too) and
/// accumulation, and the policies that recompute report the FLOPs.
TEST(Recompute, TrainsToBitIdenticalWeights) {
  using K = enum OptimizerOptions::Kind;
  using P = RecomputeOptions::Policy;
  struct Opt {
    K Kind;
    double Clip;
    unsigned Accum;
  };
  const Opt opts[] = {{K::Sgd, 0, 1},
                      {K::AdamW, 0, 1},
                      {K::Lomo, 0, 1},
                      {K::Lomo, 1.0, 1},
                      {K::Sgd, 0, 4}};
  const std::pair<P, unsigned> policies[] = {{P::All, 1},
                                             {P::Sqrt, 1},
                                             {P::Every, 1},
                                             {P::Every, 2},
                                             {P::Selective, 1}};
  // bf16 too: the bf16 weight copies are recomputed from their Reads.
  struct Precision {
    DType Type;
    bool Master;
  };
  const Precision precisions[] = {
      {DType::F32, true}, {DType::BF16, true}, {DType::BF16, false}};
  for (const char *model : {"mlp", "lenet", "gpt", "llama"}) {
    std::string path = modelPath(std::string(model) + ".onnx");
    auto data =
        takeOrFail(loadDataset(modelPath(std::string(model) + ".train.npz")));
    std::vector<int64_t> order = identityOrder(data.Samples);
    for (const Precision &pr : precisions)
      for (const Opt &opt : opts) {
        if (!pr.Master && opt.Kind == K::AdamW)
          continue; // AdamW needs master weights
        CompileOptions o;
        o.Import.Batch = 8;
        o.Precision = pr.Type;
        o.MasterWeights = pr.Master;
        o.Optimizer.Kind = opt.Kind;
        o.Optimizer.ClipGradNorm = opt.Clip;
        o.Accumulate = opt.Accum;
        auto train = [&](const CompileOptions &c) {
          auto t = takeOrFail(compileTrainer(path, c, /*seed=*/3));
          for (int64_t s = 0; t && s < 2; ++s)
            EXPECT_TRUE(static_cast<bool>(t->step(data, order, s * 8)));
          return t;
        };
        auto base = train(o);
        ASSERT_TRUE(base) << model;
        for (const auto &[policy, n] : policies) {
          CompileOptions r = o;
          r.Recompute.Kind = policy;
          r.Recompute.N = n;
          auto t = train(r);
          ASSERT_TRUE(t) << model;
          std::string what = std::string(model) + " " + r.flags();
          for (const PlanState &s : base->executor().plan().States)
            EXPECT_TRUE(*base->executor().readState(s.Name) ==
                        *t->executor().readState(s.Name))
                << what << ": " << s.Name;
          // The transformers' blocks are recomputed, for a lower peak.
          const MemoryReport &rep = t->executor().plan().Report;
          if (policy == P::Every && n == 1 &&
              (std::string(model) == "gpt" || std::string(model) == "llama")) {
            EXPECT_GT(rep.RecomputeFlops, 0u) << what;
            EXPECT_LT(rep.PeakBytes(),
                      base->executor().plan().Report.PeakBytes())
                << what;
          }
        }
      }
  }
}

/// The fuse-attention pass (on by default) against the unfused graph: the
/// same model trained 3 steps (dropout on, so the fused op must draw the
/// Dropout's mask) gives the same losses and weights up to rounding, on the
/// CPU and on the emulated cuda target, in fp32 and bf16; the fused plan has
/// no Softmax left and no tensor of [seq, seq] elements per head.
TEST(FusedAttention, TrainsAsTheUnfusedGraph) {
  struct Case {
    const char *Model;
    DType Precision;
    const char *Target;
  };
  const Case cases[] = {
      {"gpt", DType::F32, "cpu"},          {"llama", DType::F32, "cpu"},
      {"gpt", DType::BF16, "cpu"},         {"gpt", DType::F32, "cuda"},
      {"llama", DType::BF16, "cuda"},      {"hub/bert", DType::F32, "cpu"},
      {"dynamo/llama", DType::F32, "cpu"}, {"dynamo/bert", DType::F32, "cuda"}};
  useCudaEmulator();
  for (const Case &c : cases) {
    std::string model = c.Model;
    auto data = takeOrFail(loadDataset(modelPath(model + ".train.npz")));
    std::vector<int64_t> order = identityOrder(data.Samples);
    auto train = [&](bool fused, std::vector<double> &losses) {
      CompileOptions o;
      o.Import.Batch = 4;
      // SGD: a key's bias has a gradient of exactly 0 (softmax ignores a
      // shift of a row), which AdamW would turn into +-lr steps of rounding
      // noise that differs between any two summation orders.
      o.Optimizer.Kind = OptimizerOptions::Kind::Sgd;
      o.Optimizer.Lr = 0.1;
      o.Precision = c.Precision;
      o.Target = c.Target;
      o.FuseAttention = fused;
      auto t = takeOrFail(compileTrainer(modelPath(model + ".onnx"), o, 5));
      for (int64_t s = 0; t && s < 3; ++s) {
        auto r = takeOrFail(t->step(data, order, s * 4));
        losses.push_back(r.Loss);
      }
      return t;
    };
    std::vector<double> fusedLosses, unfusedLosses;
    auto fused = train(true, fusedLosses),
         unfused = train(false, unfusedLosses);
    ASSERT_TRUE(fused && unfused) << model;
    std::string what = model + " " + fused->executor().plan().TargetName +
                       (c.Precision == DType::BF16 ? " bf16" : "");
    unsigned fusedOps = 0, softmaxes = 0;
    for (const PlanFunction &f : fused->executor().plan().Functions)
      for (const KernelCall &call : f.Calls) {
        fusedOps += call.Kind == OpKind::FusedAttention;
        softmaxes += call.Kind == OpKind::Softmax;
      }
    EXPECT_GT(fusedOps, 0u) << what;
    EXPECT_EQ(softmaxes, 0u) << what;
    double tol = c.Precision == DType::BF16 ? 2e-2 : 1e-5;
    for (size_t s = 0; s < fusedLosses.size(); ++s)
      EXPECT_NEAR(fusedLosses[s], unfusedLosses[s],
                  tol * std::fabs(unfusedLosses[s]))
          << what << " step " << s;
    for (const PlanState &s : unfused->executor().plan().States) {
      if (s.Kind != StateKind::Param)
        continue;
      auto a = takeOrFail(fused->executor().readState(s.Name));
      auto b = takeOrFail(unfused->executor().readState(s.Name));
      // Relative, but a key's bias starts at 0 (BERT) and its gradient is 0
      // up to rounding: there the difference is absolute noise.
      double diff = 0, norm = 0;
      for (int64_t i = 0; i < b.numElements(); ++i) {
        diff += std::pow(a.getDouble(i) - b.getDouble(i), 2);
        norm += std::pow(b.getDouble(i), 2);
      }
      EXPECT_LE(std::sqrt(diff),
                tol * std::sqrt(norm) + 1e-6 * std::sqrt(b.numElements()))
          << what << ": " << s.Name;
    }
  }
}

} // namespace

namespace {

/// bf16 with fp32 master weights against the forward under PyTorch's CPU
/// autocast (test/models/make_references.py, configs *_bf16): the two
/// policies round different values (torch 1.13 runs softmax and norms on
/// bf16 inputs in bf16, headroom in f32), so this is a tolerance test: every
/// step's loss within 3%, every tensor within 2e-2 (relative L2), and the
/// bf16 step is not the fp32 one.
class Bf16MatchesAutocast
    : public ::testing::TestWithParam<std::pair<const char *, const char *>> {};

double relativeL2(const Tensor &got, const Tensor &want) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < want.numElements(); ++i) {
    double d = got.getDouble(i) - want.getDouble(i);
    diff += d * d;
    norm += want.getDouble(i) * want.getDouble(i);
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

/// `got` (widened to f32) against a reference run's weight: relative L2
/// within `tol`. Under AdamW, whose steps are normalised to about lr, two
/// runs move a weight whose true gradient is zero by rounding noise of up to
/// lr a step, possibly in opposite directions: there each element is held
/// to 2 steps lr instead -- a tensor that starts at zero (`initial`), and
/// the key part of GPT's c_attn.bias, elements 32..63 (softmax ignores a
/// shift of a row).
void expectWeightNear(Tensor got, const Tensor &want, const Tensor *initial,
                      const std::string &what, bool adamw, double lr,
                      int64_t steps, double tol) {
  if (adamw && initial &&
      llvm::all_of(llvm::seq<int64_t>(0, initial->numElements()),
                   [&](int64_t i) { return initial->getDouble(i) == 0; })) {
    for (int64_t i = 0; i < want.numElements(); ++i)
      EXPECT_NEAR(got.getDouble(i), want.getDouble(i), 2 * steps * lr)
          << what << "[" << i << "]";
    return;
  }
  if (adamw && llvm::StringRef(what).startswith("gpt ") &&
      llvm::StringRef(what).endswith("attn.c_attn.bias"))
    for (int64_t i = 32; i < 64; ++i) {
      EXPECT_NEAR(got.getDouble(i), want.getDouble(i), 2 * steps * lr)
          << what << "[" << i << "]";
      got.setDouble(i, want.getDouble(i));
    }
  EXPECT_LE(relativeL2(got, want), tol) << what;
}

TEST_P(Bf16MatchesAutocast, LossesAndWeights) {
  auto [model, config] = GetParam();
  Reference ref = loadReference(model);
  const llvm::json::Object *cfg =
      ref.root().getObject("configs")->getObject(config);
  ASSERT_NE(cfg, nullptr) << config;
  const llvm::json::Object *hp = cfg->getObject("hyperparameters");
  CompileOptions o;
  o.Import.Batch = *ref.root().getInteger("batch");
  o.DisableDropout = true;
  o.Precision = DType::BF16;
  bool adamw = cfg->getString("optimizer")->str() == "AdamW";
  o.Optimizer.Kind =
      adamw ? OptimizerOptions::Kind::AdamW : OptimizerOptions::Kind::Sgd;
  o.Optimizer.Lr = *hp->getNumber("lr");
  o.Optimizer.WeightDecay = hp->getNumber("weight_decay").getValueOr(0.0);
  std::string path = modelPath(std::string(model) + ".onnx");
  auto trainer = takeOrFail(compileTrainer(path, o));
  CompileOptions f32 = o;
  f32.Precision = DType::F32;
  auto full = takeOrFail(compileTrainer(path, f32));
  ASSERT_TRUE(trainer && full);
  std::map<std::string, Tensor> full0; // the initial weights
  for (const PlanState &st : full->executor().plan().States)
    full0[st.Name] = *full->executor().readState(st.Name);
  auto data =
      takeOrFail(loadDataset(modelPath(std::string(model) + ".train.npz")));
  std::vector<int64_t> order = identityOrder(data.Samples);
  const llvm::json::Array &losses = *cfg->getArray("losses");
  bool differs = false;
  for (int64_t s = 0; s < *ref.root().getInteger("steps"); ++s) {
    auto r = takeOrFail(trainer->step(data, order, s * trainer->batch()));
    auto r32 = takeOrFail(full->step(data, order, s * full->batch()));
    double want = *losses[s].getAsNumber();
    EXPECT_NEAR(r.Loss, want, 0.03 * std::fabs(want)) << model << " step " << s;
    differs |= r.Loss != r32.Loss;
  }
  EXPECT_TRUE(differs) << model << ": the bf16 step computed the fp32 losses";
  auto want = takeOrFail(readArrays(modelPath(cfg->getString("file")->str())));
  int64_t steps = *ref.root().getInteger("steps");
  for (const auto &[name, w] : want) {
    auto got = trainer->executor().readState(name);
    ASSERT_TRUE(static_cast<bool>(got)) << name;
    EXPECT_EQ(got->type(), w.type()) << name; // master weights stay f32
    auto init = full0.find(name);
    expectWeightNear(*got, w, init == full0.end() ? nullptr : &init->second,
                     std::string(model) + " " + name, adamw, o.Optimizer.Lr,
                     steps, 2e-2);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, Bf16MatchesAutocast,
    ::testing::Values(std::make_pair("mlp", "sgd_bf16"),
                      std::make_pair("mlp", "adamw_bf16"),
                      std::make_pair("lenet", "sgd_bf16"),
                      std::make_pair("lenet", "adamw_bf16"),
                      std::make_pair("gpt", "sgd_bf16"),
                      std::make_pair("gpt", "adamw_bf16"),
                      std::make_pair("llama", "sgd_bf16"),
                      std::make_pair("llama", "adamw_bf16")),
    [](const auto &info) {
      return std::string(info.param.first) + "_" + info.param.second;
    });

/// Without master weights the parameters are bf16, updated in f32 with one
/// rounding: LOMO's fused updates give SGD's weights bit for bit (dropout
/// on), clipped and accumulated too; the saved model is f32 again.
TEST(MixedPrecision, LomoEqualsSgdWithoutMasterWeights) {
  for (const char *model : {"mlp", "lenet", "gpt", "llama"}) {
    std::string path = modelPath(std::string(model) + ".onnx");
    auto data =
        takeOrFail(loadDataset(modelPath(std::string(model) + ".train.npz")));
    std::vector<int64_t> order = identityOrder(data.Samples);
    for (double clip : {0.0, 1.0}) {
      auto train = [&](enum OptimizerOptions::Kind kind) {
        CompileOptions o;
        o.Import.Batch = 8;
        o.Precision = DType::BF16;
        o.MasterWeights = false;
        o.Optimizer.Kind = kind;
        o.Optimizer.ClipGradNorm = clip;
        auto t = takeOrFail(compileTrainer(path, o, /*seed=*/5));
        for (int64_t s = 0; t && s < 3; ++s)
          EXPECT_TRUE(static_cast<bool>(t->step(data, order, s * 8)));
        return t;
      };
      auto sgd = train(OptimizerOptions::Kind::Sgd);
      auto lomo = train(OptimizerOptions::Kind::Lomo);
      ASSERT_TRUE(sgd && lomo) << model;
      for (const PlanState &s : sgd->executor().plan().States) {
        if (s.Kind == StateKind::Param) {
          EXPECT_EQ(s.Type.dtype(), DType::BF16) << model << " " << s.Name;
        }
        EXPECT_TRUE(*sgd->executor().readState(s.Name) ==
                    *lomo->executor().readState(s.Name))
            << model << " clip " << clip << ": " << s.Name;
      }
      if (clip == 0) {
        std::string out = testing::TempDir() + "/" + model + ".bf16.onnx";
        ASSERT_EQ(errorOf(saveTrainedModel(lomo->executor(), path, out)), "");
        auto again = takeOrFail(compileTrainer(out, CompileOptions([&] {
                                                 CompileOptions o;
                                                 o.Import.Batch = 8;
                                                 return o;
                                               }())));
        ASSERT_TRUE(again);
        const PlanState &first = again->executor().plan().States.front();
        EXPECT_EQ(first.Type.dtype(), DType::F32);
        // f32 holds every bf16 value: the reloaded weight is the trained one.
        EXPECT_TRUE(
            again->executor().readState(first.Name)->convertedTo(DType::BF16) ==
            *lomo->executor().readState(first.Name))
            << model;
      }
    }
  }
}

/// bf16 keeps the low-precision activations: less memory at the loss.
TEST(MixedPrecision, Bf16KeepsFewerActivationBytes) {
  for (const char *model : {"lenet", "gpt", "llama"}) {
    CompileOptions o;
    o.Import.Batch = 8;
    Plan f32 = compilePlan(modelPath(std::string(model) + ".onnx"), o);
    o.Precision = DType::BF16;
    Plan bf16 = compilePlan(modelPath(std::string(model) + ".onnx"), o);
    EXPECT_LT(bf16.Report.SavedActivations, f32.Report.SavedActivations)
        << model;
    EXPECT_EQ(bf16.Report.Parameters, f32.Report.Parameters) << model;
    o.MasterWeights = false;
    Plan none = compilePlan(modelPath(std::string(model) + ".onnx"), o);
    EXPECT_EQ(2 * none.Report.Parameters, f32.Report.Parameters) << model;
  }
}

} // namespace

namespace {

/// fp16 loss scaling (torch's GradScaler rule): an overflowing step changes
/// no parameter, moment or step count and halves the scale; 2000 finite
/// steps double it; with lomo the check runs before any update (its norm
/// pass, or the accumulators in the last micro-step); with master weights
/// and without (fp16 parameters).
TEST(MixedPrecision, Fp16OverflowSkipsTheStepAndHalvesTheScale) {
  using K = enum OptimizerOptions::Kind;
  struct Case {
    const char *Model;
    K Kind;
    unsigned Accum;
    bool Master = true;
  };
  for (const Case &c :
       {Case{"gpt", K::Sgd, 1}, Case{"gpt", K::AdamW, 1},
        Case{"llama", K::Lomo, 1}, Case{"llama", K::Lomo, 2},
        Case{"lenet", K::Momentum, 1}, Case{"llama", K::Lomo, 1, false},
        Case{"gpt", K::Sgd, 1, false}}) {
    CompileOptions o;
    o.Import.Batch = 8;
    o.Precision = DType::F16;
    o.MasterWeights = c.Master;
    o.Optimizer.LossScale = true; // what --precision fp16 sets
    o.Optimizer.Kind = c.Kind;
    o.Accumulate = c.Accum;
    std::string what = std::string(c.Model) + " " + o.flags();
    auto t = takeOrFail(
        compileTrainer(modelPath(std::string(c.Model) + ".onnx"), o));
    ASSERT_TRUE(t) << what;
    auto data =
        takeOrFail(loadDataset(modelPath(std::string(c.Model) + ".train.npz")));
    std::vector<int64_t> order = identityOrder(data.Samples);
    Executor &e = t->executor();
    auto scalarState = [&](const char *name) {
      return e.readState(name)->getDouble(0);
    };
    auto setScalar = [&](const char *name, double v) {
      ASSERT_EQ(
          errorOf(e.writeState(name, Tensor::fromDoubles(DType::F32, {}, {v}))),
          "");
    };
    // A finite step first: the scale starts at 2^16 (offset 0).
    ASSERT_TRUE(static_cast<bool>(t->step(data, order, 0))) << what;
    EXPECT_EQ(scalarState("loss_scale.log2_offset"), 0) << what;
    EXPECT_EQ(scalarState("loss_scale.good_steps"), 1) << what;
    // 2^(16 + 200) is infinite in f32: every gradient overflows.
    setScalar("loss_scale.log2_offset", 200);
    std::map<std::string, Tensor> before;
    for (const PlanState &s : e.plan().States)
      before[s.Name] = *e.readState(s.Name);
    ASSERT_TRUE(static_cast<bool>(t->step(data, order, 8))) << what;
    for (const PlanState &s : e.plan().States) {
      if (llvm::StringRef(s.Name).startswith("loss_scale.") ||
          s.Kind == StateKind::Gradient || s.Name == "clip.scale" ||
          s.Name == "step.finite")
        continue;
      if (s.Kind == StateKind::Buffer)
        continue; // BatchNorm statistics advance with the forward, as torch's
      EXPECT_TRUE(*e.readState(s.Name) == before[s.Name])
          << what << ": the skipped step changed " << s.Name;
    }
    EXPECT_EQ(scalarState("loss_scale.log2_offset"), 199) << what;
    EXPECT_EQ(scalarState("loss_scale.good_steps"), 0) << what;
    // Back to a finite scale, one step short of growing it: it doubles.
    setScalar("loss_scale.log2_offset", 0);
    setScalar("loss_scale.good_steps", 1999);
    ASSERT_TRUE(static_cast<bool>(t->step(data, order, 16))) << what;
    EXPECT_EQ(scalarState("loss_scale.log2_offset"), 1) << what;
    EXPECT_EQ(scalarState("loss_scale.good_steps"), 0) << what;
    bool moved = false;
    for (const PlanState &s : e.plan().States)
      moved |= s.Kind == StateKind::Param &&
               !(*e.readState(s.Name) == before[s.Name]);
    EXPECT_TRUE(moved) << what << ": a finite step must update";
  }
}

} // namespace

namespace {

/// --on-nan skip: a batch whose loss is NaN changes no parameter, moment,
/// step count or accumulator-fed update; LOMO learns it before its first
/// fused update (the norm pass). The next finite batch trains as usual.
TEST(OnNan, SkipLeavesEveryWeightUnchanged) {
  using K = enum OptimizerOptions::Kind;
  for (auto [kind, accum] :
       {std::make_pair(K::Sgd, 1u), std::make_pair(K::AdamW, 1u),
        std::make_pair(K::Lomo, 1u), std::make_pair(K::Lomo, 2u),
        std::make_pair(K::AdaLomo, 1u)}) {
    CompileOptions o;
    o.Import.Batch = 8;
    o.Optimizer.Kind = kind;
    o.Optimizer.SkipNonFinite = true; // what --on-nan skip sets
    o.Accumulate = accum;
    std::string what = o.flags();
    auto t = takeOrFail(compileTrainer(modelPath("gpt.onnx"), o));
    ASSERT_TRUE(t) << what;
    auto data = takeOrFail(loadDataset(modelPath("gpt.train.npz")));
    std::vector<int64_t> order = identityOrder(data.Samples);
    ASSERT_TRUE(static_cast<bool>(t->step(data, order, 0))) << what;
    // GPT's inputs are token ids, which cannot be NaN: one weight the loss
    // reads is made NaN instead, so the next loss and gradients are.
    Executor &e = t->executor();
    std::map<std::string, Tensor> before;
    for (const PlanState &s : e.plan().States)
      before[s.Name] = *e.readState(s.Name);
    Tensor w = before.at("ln_f.weight");
    w.setDouble(0, std::nan(""));
    ASSERT_EQ(errorOf(e.writeState("ln_f.weight", w)), "");
    before["ln_f.weight"] = w;
    auto r = takeOrFail(t->step(data, order, 8));
    EXPECT_TRUE(std::isnan(r.Loss)) << what;
    for (const PlanState &s : e.plan().States) {
      if (s.Kind == StateKind::Gradient || s.Name == "step.finite" ||
          s.Name == "clip.scale")
        continue;
      Tensor now = *e.readState(s.Name);
      // Compared as bytes: the NaN weight must stay that NaN.
      EXPECT_TRUE(now.bytes() == before[s.Name].bytes())
          << what << ": the skipped step changed " << s.Name;
    }
  }
}

} // namespace

namespace {

/// `model` compiled from training flags as the command line takes them
/// (`adjust` sets what no flag does) and trained `steps` steps over its
/// data in order; each step's loss is appended to `losses`.
std::unique_ptr<Trainer>
trainFromFlags(const std::string &model, const std::string &flags,
               int64_t steps, std::vector<double> &losses, uint64_t seed = 0,
               llvm::function_ref<void(CompileOptions &)> adjust = {}) {
  auto data = takeOrFail(loadDataset(modelPath(model + ".train.npz")));
  CompileOptions o =
      takeOrFail(compileOptionsFromFlags(takeOrFail(splitFlags(flags))));
  if (adjust)
    adjust(o);
  auto t = takeOrFail(compileTrainer(modelPath(model + ".onnx"), o, seed));
  std::vector<int64_t> order = identityOrder(data.Samples);
  for (int64_t s = 0; t && s < steps; ++s)
    losses.push_back(takeOrFail(t->step(data, order, s * t->batch())).Loss);
  return t;
}

/// Every state of `a` equals `b`'s, bit for bit (`b` may have more: a norm
/// pass's clip.scale and step.finite).
void expectSameStates(Trainer &a, Trainer &b, const std::string &what) {
  for (const PlanState &s : a.executor().plan().States)
    EXPECT_TRUE(*a.executor().readState(s.Name) ==
                *b.executor().readState(s.Name))
        << what << ": " << s.Name;
}

/// The per-step losses of `config` in <model>.ref.fp16.json
/// (test/models/make_fp16_references.py).
std::vector<double> torchLosses(const std::string &model, const char *config) {
  std::vector<double> out;
  auto buf = llvm::MemoryBuffer::getFile(modelPath(model + ".ref.fp16.json"));
  EXPECT_TRUE(static_cast<bool>(buf)) << model;
  if (!buf)
    return out;
  auto json = llvm::json::parse((*buf)->getBuffer());
  EXPECT_TRUE(static_cast<bool>(json)) << llvm::toString(json.takeError());
  const llvm::json::Object *ref =
      json ? json->getAsObject()->getObject(config) : nullptr;
  EXPECT_NE(ref, nullptr) << model << " " << config;
  if (ref)
    for (const llvm::json::Value &v : *ref->getArray("losses"))
      out.push_back(*v.getAsNumber());
  return out;
}

/// The rematerialize pass changes where values are computed, never what:
/// with every value eligible (min_bytes 0; the default skips the test
/// models' small ones), training gives the same losses and weights bit for
/// bit, on the cpu and the (emulated) cuda target, in bf16 (the copies it
/// re-casts) and with recomputation, and the peak does not rise.
TEST(Rematerialize, SameBitsAndNoHigherPeak) {
  struct Case {
    const char *Model;
    DType Precision;
    const char *Target;
    const char *Recompute;
    const char *Optimizer = "adamw";
  };
  const Case cases[] = {{"gpt", DType::BF16, "cpu", "none"},
                        {"gpt", DType::BF16, "cpu", "none", "lomo"},
                        {"llama", DType::BF16, "cpu", "every=1"},
                        {"llama", DType::F32, "cpu", "none"},
                        {"gpt", DType::BF16, "cuda", "every=1"},
                        {"llama", DType::BF16, "cuda", "none"}};
  useCudaEmulator();
  for (const Case &c : cases) {
    std::string model = c.Model;
    std::string what = model + " " + c.Target + " recompute " + c.Recompute;
    std::string flags = std::string("--batch 4 --optimizer ") + c.Optimizer +
                        " --recompute " + c.Recompute;
    auto train = [&](uint64_t minBytes, std::vector<double> &losses) {
      return trainFromFlags(model, flags, 3, losses, 5, [&](CompileOptions &o) {
        o.Precision = c.Precision;
        o.Target = c.Target;
        o.RematerializeMinBytes = minBytes;
      });
    };
    std::vector<double> withLosses, withoutLosses;
    auto with = train(0, withLosses);
    auto without = train(UINT64_MAX, withoutLosses);
    ASSERT_TRUE(with && without) << what;
    const Plan &p = with->executor().plan(), &q = without->executor().plan();
    EXPECT_GT(p.Functions.front().Calls.size(),
              q.Functions.front().Calls.size())
        << what << ": nothing rematerialized";
    EXPECT_LE(p.Report.PeakBytes(), q.Report.PeakBytes()) << what;
    // Clones read weights through their Reads: never after an update wrote
    // the slot (which would copy the weight).
    auto copies = [](const Plan &plan) {
      unsigned n = 0;
      for (const PlanFunction &f : plan.Functions)
        for (const KernelCall &call : f.Calls)
          n += call.Kind == OpKind::Read && call.Attrs.count("copy");
      return n;
    };
    EXPECT_EQ(copies(p), copies(q)) << what;
    EXPECT_EQ(withLosses, withoutLosses) << what;
    expectSameStates(*with, *without, what);
  }
}

} // namespace

namespace {

/// fp16 without master weights (--precision fp16 --master-weights none, the
/// LOMO paper's setting) against PyTorch 2.15 doing the same
/// (test/models/make_fp16_references.py: float16 parameters, the forward
/// under CPU autocast in float16, GradScaler's loss scale, each update in
/// f32 rounded once): losses within 0.3%, weights within 0.5% (relative
/// L2; measured: at most 0.18%);
/// the parameters are f16 state, and LOMO's fused updates give SGD's
/// weights bit for bit.
TEST(MixedPrecision, Fp16WithoutMasterWeightsMatchesTorch) {
  for (const char *model : {"mlp", "gpt", "llama"}) {
    std::string name = model;
    std::vector<double> want = torchLosses(name, "sgd_fp16none");
    ASSERT_FALSE(want.empty()) << name;
    std::string flags = "--batch 8 --precision fp16 --master-weights none "
                        "--lr 0.05 --disable-dropout --optimizer ";
    std::vector<double> sgdLosses, lomoLosses;
    auto sgd = trainFromFlags(name, flags + "sgd", want.size(), sgdLosses);
    auto lomo = trainFromFlags(name, flags + "lomo", want.size(), lomoLosses);
    ASSERT_TRUE(sgd && lomo) << name;
    for (size_t s = 0; s < want.size(); ++s)
      EXPECT_NEAR(sgdLosses[s], want[s], 3e-3 * std::fabs(want[s]))
          << name << " step " << s;
    EXPECT_EQ(sgdLosses, lomoLosses) << name;
    expectSameStates(*sgd, *lomo, name + ": lomo is not sgd");
    auto weights =
        takeOrFail(readArrays(modelPath(name + ".ref.sgd_fp16none.npz")));
    for (const auto &[param, w] : weights) {
      auto got = sgd->executor().readState(param);
      ASSERT_TRUE(static_cast<bool>(got)) << name << " " << param;
      EXPECT_EQ(got->type().dtype(), DType::F16) << name << " " << param;
      EXPECT_LE(relativeL2(got->convertedTo(DType::F32), w), 5e-3)
          << name << " " << param;
    }
  }
}

} // namespace

namespace {

/// --fuse-update: sgd, momentum and adamw updated in the backward as lomo
/// is give the unfused optimizer's weights bit for bit (clipped: the norm
/// pass computes the same gradients, dropout masks included; fp16: the
/// overflow check comes from that pass too), and with clipping no gradient
/// outlives its update.
TEST(FuseUpdate, SameWeightsAsTheUnfusedOptimizer) {
  for (const char *model : {"gpt", "llama"})
    for (const char *flags :
         {"--optimizer adamw", "--optimizer adamw --clip-grad-norm 1",
          "--optimizer momentum --nesterov --clip-grad-norm 0.5",
          "--optimizer sgd --clip-grad-norm 1",
          "--optimizer adamw --precision fp16 --clip-grad-norm 1"}) {
      std::string what = std::string(model) + " " + flags;
      std::string base = std::string("--batch 8 ") + flags;
      std::vector<double> fusedLosses, unfusedLosses;
      auto fused =
          trainFromFlags(model, base + " --fuse-update", 3, fusedLosses, 3);
      auto unfused = trainFromFlags(model, base, 3, unfusedLosses, 3);
      ASSERT_TRUE(fused && unfused) << what;
      EXPECT_EQ(fusedLosses, unfusedLosses) << what;
      expectSameStates(*unfused, *fused, what);
      const MemoryReport &f = fused->executor().plan().Report,
                         &u = unfused->executor().plan().Report;
      if (llvm::StringRef(flags).contains("clip")) {
        EXPECT_LT(f.GradientsMaxLive, u.GradientsMaxLive) << what;
        EXPECT_EQ(f.PassesPerStep, 2u) << what;
      }
    }
}

} // namespace

namespace {

/// AdamW and momentum on bf16 parameters without master copies
/// (--precision bf16 --master-weights none; torchtune's full fine-tune
/// setting): f32 moments, the update in f32 and the weight rounded once.
/// AdamW against PyTorch 2.15 doing the same (make_fp16_references.py:
/// bfloat16 parameters, CPU autocast in bfloat16, f32 moments): losses
/// within 0.3%, weights within 2e-2 (relative L2; a tensor that starts at
/// zero within 2 steps of lr per element, as in Bf16MatchesAutocast); the
/// moments are f32 state, and --fuse-update gives the same bits.
TEST(MixedPrecision, AdamWWithoutMasterWeightsMatchesTorch) {
  for (const char *model : {"mlp", "gpt", "llama"}) {
    std::string name = model;
    std::vector<double> want = torchLosses(name, "adamw_bf16none");
    ASSERT_FALSE(want.empty()) << name;
    std::string flags = "--batch 8 --precision bf16 --master-weights none "
                        "--optimizer adamw --lr 1e-3 --weight-decay 0.01 "
                        "--disable-dropout";
    std::vector<double> got, fusedLosses, none;
    auto adamw = trainFromFlags(name, flags, want.size(), got);
    auto fused = trainFromFlags(name, flags + " --fuse-update", want.size(),
                                fusedLosses);
    // The initial weights: a plain step's state before it runs.
    auto start = trainFromFlags(name, "--batch 8", 0, none);
    ASSERT_TRUE(adamw && fused && start) << name;
    for (size_t s = 0; s < want.size(); ++s)
      EXPECT_NEAR(got[s], want[s], 3e-3 * std::fabs(want[s]))
          << name << " step " << s;
    EXPECT_EQ(got, fusedLosses) << name;
    expectSameStates(*adamw, *fused, name + " --fuse-update");
    for (const PlanState &s : adamw->executor().plan().States) {
      llvm::StringRef n = s.Name;
      if (n.endswith(".exp_avg") || n.endswith(".exp_avg_sq")) {
        EXPECT_EQ(s.Type.dtype(), DType::F32) << name << " " << s.Name;
      }
    }
    auto weights =
        takeOrFail(readArrays(modelPath(name + ".ref.adamw_bf16none.npz")));
    for (const auto &[param, w] : weights) {
      auto got = adamw->executor().readState(param);
      auto initial = start->executor().readState(param);
      ASSERT_TRUE(got && initial) << name << " " << param;
      EXPECT_EQ(got->type().dtype(), DType::BF16) << name << " " << param;
      expectWeightNear(got->convertedTo(DType::F32), w, &*initial,
                       name + " " + param, /*adamw=*/true, 1e-3, want.size(),
                       2e-2);
    }
  }
}

/// --optimizer-state int8 against bitsandbytes' AdamW8bit on the same
/// batches (test/models/make_int8_references.py: bitsandbytes 0.50.2 with
/// its CUDA kernel's quantizer): the losses, the 8-bit slots where
/// min_8bit_size puts them, and weights 50 times nearer bitsandbytes' than
/// AdamW with 32-bit moments is to it; --fuse-update gives the same bits.
TEST(OptimizerState, Int8MatchesBitsandbytes) {
  for (const char *model : {"gpt", "llama"}) {
    std::string name = model;
    auto buf = llvm::MemoryBuffer::getFile(modelPath(name + ".ref.int8.json"));
    ASSERT_TRUE(static_cast<bool>(buf)) << name;
    auto json = llvm::json::parse((*buf)->getBuffer());
    ASSERT_TRUE(static_cast<bool>(json)) << llvm::toString(json.takeError());
    const llvm::json::Object &ref = *json->getAsObject();
    std::vector<double> want;
    for (const llvm::json::Value &v : *ref.getArray("losses"))
      want.push_back(*v.getAsNumber());
    std::set<std::string> quantized;
    for (const llvm::json::Value &v : *ref.getArray("quantized"))
      quantized.insert(v.getAsString()->str());
    double fullAdamW = *ref.getNumber("max_weight_diff_vs_32bit_adamw");
    std::string flags =
        "--batch 8 --optimizer adamw --lr 1e-3 --weight-decay 0.01 "
        "--disable-dropout --optimizer-state int8,min=" +
        std::to_string(*ref.getInteger("min_8bit_size"));
    std::vector<double> got, fusedLosses;
    auto int8 = trainFromFlags(name, flags, want.size(), got);
    auto fused = trainFromFlags(name, flags + " --fuse-update", want.size(),
                                fusedLosses);
    ASSERT_TRUE(int8 && fused) << name;
    for (size_t s = 0; s < want.size(); ++s)
      EXPECT_NEAR(got[s], want[s], 1e-5 * std::fabs(want[s]))
          << name << " step " << s;
    EXPECT_EQ(got, fusedLosses) << name;
    expectSameStates(*int8, *fused, name + " --fuse-update");
    const Plan &plan = int8->executor().plan();
    for (const PlanState &s : plan.States) {
      llvm::StringRef n = s.Name;
      if (!n.consume_back(".exp_avg") && !n.consume_back(".exp_avg_sq"))
        continue;
      EXPECT_EQ(s.Type.dtype(),
                quantized.count(n.str()) ? DType::U8 : DType::F32)
          << name << " " << s.Name;
    }
    auto weights =
        takeOrFail(readArrays(modelPath(name + ".ref.adamw8bit.npz")));
    double worst = 0;
    std::string where;
    // Elements further than a fiftieth of 32-bit AdamW's distance: codes
    // flipped at a bucket boundary (below).
    int flipped = 0;
    for (const auto &[param, w] : weights) {
      auto mine = int8->executor().readState(param);
      ASSERT_TRUE(static_cast<bool>(mine)) << name << " " << param;
      // GPT-2's key bias (c_attn.bias[32, 64)) has a zero gradient up to
      // rounding, which AdamW normalizes into whole steps of either sign:
      // as in expectWeightNear, those move by at most lr a step.
      bool keyBias =
          name == "gpt" && llvm::StringRef(param).endswith("attn.c_attn.bias");
      for (int64_t i = 0; i < w.numElements(); ++i) {
        double d = std::fabs(mine->getDouble(i) - w.getDouble(i));
        if (keyBias && i >= 32 && i < 64) {
          EXPECT_LE(d, 2 * 1e-3 * double(want.size())) << param << i;
          continue;
        }
        flipped += d > fullAdamW / 50;
        if (d > worst) {
          worst = d;
          where = param + "[" + std::to_string(i) + "]";
        }
      }
    }
    // Every weight is within a fiftieth of 32-bit AdamW's distance but the
    // few whose 8-bit code flipped at a bucket boundary: the last bits of a
    // matmul (OpenBLAS picks its kernel by CPU, AVX2 or AVX-512) decide
    // those, and a flip moves the weight by about 1e-5 here (gpt 9.2e-6 on
    // an AVX-512 machine; llama 1.1e-5 with OPENBLAS_CORETYPE=Haswell).
    EXPECT_LE(flipped, 2) << name << " at " << where;
    EXPECT_LT(worst, fullAdamW / 10) << name << " at " << where;
    std::cerr << name << ": largest weight difference from bitsandbytes "
              << worst << " at " << where << " (32-bit AdamW's: " << fullAdamW
              << "); " << flipped << " beyond a fiftieth of it\n";
  }
}

/// --lora: the base weights stay bit for bit what they were, the adapters
/// train (B from zeros, so the first loss is the base model's), the
/// parameters are the adapters' bytes, and A is drawn from the seed.
TEST(Lora, TrainsAdaptersBesideFrozenWeights) {
  const std::string flags = "--batch 8 --optimizer adamw --lr 1e-2 "
                            "--disable-dropout --lora "
                            "rank=4,alpha=8,targets=wq;wv";
  std::vector<double> losses, plain, other;
  auto lora = trainFromFlags("llama", flags, 4, losses);
  auto base = trainFromFlags("llama", "--batch 8 --disable-dropout", 1, plain);
  auto seeded = trainFromFlags("llama", flags, 0, other, /*seed=*/7);
  ASSERT_TRUE(lora && base && seeded);
  EXPECT_EQ(losses[0], plain[0]); // B = 0: the base model's loss
  auto initial = trainFromFlags("llama", flags, 0, other);
  const Plan &plan = lora->executor().plan();
  unsigned adapters = 0, frozen = 0;
  uint64_t adapterBytes = 0;
  for (const PlanState &s : plan.States) {
    auto now = lora->executor().readState(s.Name);
    auto before = initial->executor().readState(s.Name);
    ASSERT_TRUE(static_cast<bool>(now) && static_cast<bool>(before));
    if (s.Kind == StateKind::Frozen) {
      ++frozen;
      EXPECT_TRUE(*now == *before) << s.Name << " moved";
      continue;
    }
    if (s.Kind != StateKind::Param)
      continue;
    ++adapters;
    adapterBytes += s.Type.sizeInBytes();
    llvm::StringRef name = s.Name;
    EXPECT_TRUE(name.endswith(".lora_A.weight") ||
                name.endswith(".lora_B.weight"))
        << s.Name;
    EXPECT_FALSE(*now == *before) << s.Name << " did not train";
    auto drawn = seeded->executor().readState(s.Name);
    ASSERT_TRUE(static_cast<bool>(drawn));
    if (name.endswith(".lora_A.weight")) {
      // kaiming_uniform_(a=sqrt(5)): within +-1/sqrt(in), seeded.
      double bound = 1 / std::sqrt(double(s.Type.dim(1)));
      for (int64_t i = 0; i < before->numElements(); ++i)
        ASSERT_LE(std::fabs(before->getDouble(i)), bound);
      EXPECT_FALSE(*drawn == *before) << "another seed draws another A";
    } else {
      for (int64_t i = 0; i < before->numElements(); ++i)
        ASSERT_EQ(before->getDouble(i), 0.0);
    }
  }
  EXPECT_EQ(adapters, 8u); // wq and wv of two layers, A and B each
  EXPECT_EQ(frozen, 21u);  // every weight of the model
  EXPECT_EQ(plan.Report.Parameters, adapterBytes);
}

/// --lora against Hugging Face PEFT (test/models/make_lora_references.py:
/// peft 0.21 on torch 2.15): from PEFT's own initial adapters
/// (--lora-init test/models/llama.lora_init, written by save_pretrained),
/// AdamW on the adapters gives PEFT's losses and adapters; saving them
/// (PEFT's files) and loading them back gives the same tensors; the merged
/// model computes what the adapted one does.
/// The llama model saved with `t`'s four adapters merged (as --save does)
/// into TempDir()/`file`, and its loss on the first batch without adapters.
double mergedModelLoss(Trainer &t, const std::string &file, const Dataset &data,
                       const std::vector<int64_t> &order) {
  std::string merged = testing::TempDir() + "/" + file;
  auto weights = takeOrFail(mergedWeights(t.executor()));
  EXPECT_EQ(weights.size(), 4u);
  EXPECT_EQ(errorOf(saveTrainedModel(t.executor(), modelPath("llama.onnx"),
                                     merged, &weights)),
            "");
  CompileOptions plain = takeOrFail(compileOptionsFromFlags(takeOrFail(
      splitFlags("--batch 8 --optimizer sgd --lr 1e-30 --disable-dropout"))));
  auto base = takeOrFail(compileTrainer(merged, plain, 0));
  return takeOrFail(base->step(data, order, 0)).Loss;
}

TEST(Lora, MatchesPeft) {
  auto buf = llvm::MemoryBuffer::getFile(modelPath("llama.ref.lora.json"));
  ASSERT_TRUE(static_cast<bool>(buf));
  auto json = llvm::json::parse((*buf)->getBuffer());
  ASSERT_TRUE(static_cast<bool>(json)) << llvm::toString(json.takeError());
  std::vector<double> want;
  for (const llvm::json::Value &v : *json->getAsObject()->getArray("losses"))
    want.push_back(*v.getAsNumber());
  std::vector<double> got;
  std::string initDir = modelPath("llama.lora_init");
  auto lora = trainFromFlags(
      "llama",
      "--batch 8 --optimizer adamw --lr 1e-2 --weight-decay 0.01 "
      "--disable-dropout --lora rank=4,alpha=8,targets=wq;wv",
      0, got);
  ASSERT_TRUE(lora);
  ASSERT_EQ(errorOf(loadAdapter(lora->executor(), initDir)), "");
  auto data = takeOrFail(loadDataset(modelPath("llama.train.npz")));
  std::vector<int64_t> order = identityOrder(data.Samples);
  for (size_t s = 0; s < want.size(); ++s)
    got.push_back(takeOrFail(lora->step(data, order, s * lora->batch())).Loss);
  for (size_t s = 0; s < want.size(); ++s)
    EXPECT_NEAR(got[s], want[s], 1e-5 * std::fabs(want[s])) << "step " << s;
  auto ref = takeOrFail(readArrays(modelPath("llama.ref.lora.npz")));
  ASSERT_EQ(ref.size(), 8u);
  for (const auto &[name, w] : ref) {
    auto mine = lora->executor().readState(name);
    ASSERT_TRUE(static_cast<bool>(mine)) << name;
    EXPECT_LE(relativeL2(*mine, w), 1e-5) << name; // measured <= 1.5e-6
  }
  // PEFT's files out and back in: the same tensors.
  std::string dir = testing::TempDir() + "/lora_saved";
  ASSERT_EQ(errorOf(saveAdapter(lora->executor(), dir)), "");
  std::vector<double> none;
  auto reloaded = trainFromFlags(
      "llama",
      "--batch 8 --optimizer adamw --lr 1e-2 --disable-dropout --lora "
      "rank=4,alpha=8,targets=wq;wv",
      0, none, /*seed=*/5);
  ASSERT_EQ(errorOf(loadAdapter(reloaded->executor(), dir)), "");
  for (const auto &entry : ref)
    EXPECT_TRUE(*lora->executor().readState(entry.first) ==
                *reloaded->executor().readState(entry.first))
        << entry.first;
  // Merged (W + (alpha / r) B A) into the model: without adapters, the
  // same loss on a batch.
  double mergedLoss = mergedModelLoss(*lora, "lora_merged.onnx", data, order);
  double adaptedLoss = takeOrFail(reloaded->step(data, order, 0)).Loss;
  EXPECT_NEAR(mergedLoss, adaptedLoss, 1e-5 * adaptedLoss);
}

} // namespace

namespace {

/// QLoRA's reference (test/models/make_qlora_references.py: bitsandbytes
/// 0.50 and peft 0.21 on torch 2.15): the llama model with every linear
/// layer but the output head as bitsandbytes' Linear4bit (NF4, double
/// quantization), PEFT's adapters on wq and wv from llama.lora_init.
const char *const kQloraFlags =
    "--batch 8 --optimizer adamw --lr 1e-2 --weight-decay 0.01 "
    "--disable-dropout --lora rank=4,alpha=8,targets=wq;wv --base-weights nf4";

/// The weights --base-weights nf4 stores hold bitsandbytes' codes for the
/// same initializers bit for bit (the 4-bit codes, the absmaxes' 8-bit
/// codes). The offset is the absmaxes' mean, which torch sums in f32 in its
/// own vectorized order and headroom in f64: they may differ in the last
/// bit (4 of these 14 weights), and the nested absmax (the largest
/// |absmax - offset|) by as much.
TEST(Qlora, QuantizesAsBitsandbytes) {
  std::vector<double> none;
  auto qlora = trainFromFlags("llama", kQloraFlags, 0, none);
  ASSERT_TRUE(qlora);
  auto ref = takeOrFail(readArrays(modelPath("llama.ref.qlora.npz")));
  unsigned weights = 0;
  for (const auto &[key, want] : ref) {
    llvm::StringRef name(key);
    if (name.contains(".lora_"))
      continue;
    std::string slot = name.endswith(".codes")
                           ? name.drop_back(strlen(".codes")).str()
                           : name.str();
    weights += name.endswith(".codes");
    auto mine = qlora->executor().readState(slot);
    ASSERT_TRUE(static_cast<bool>(mine)) << slot;
    ASSERT_EQ(mine->type(), want.type()) << slot;
    if (mine->type().dtype() == DType::U8) {
      EXPECT_TRUE(*mine == want) << slot;
      continue;
    }
    // Within 2 ulp of the offset (the nested absmax is a difference from it).
    std::string base = slot.substr(0, slot.rfind(".nested_"));
    double offset = ref.at(base + ".nested_offset").getDouble(0);
    for (int64_t i = 0; i < want.numElements(); ++i)
      EXPECT_NEAR(mine->getDouble(i), want.getDouble(i),
                  2.4e-7 * std::fabs(offset))
          << slot << "[" << i << "]";
  }
  EXPECT_EQ(weights, 14u); // wq wk wv wo w1 w2 w3 of two layers
}

/// Adapters trained 4 steps on the NF4 base from PEFT's initial values:
/// PEFT + bitsandbytes' losses and adapters; the merged model (the
/// dequantized base plus the adapters' product) computes what the adapted
/// one does.
TEST(Qlora, MatchesPeftWithBitsandbytes) {
  auto buf = llvm::MemoryBuffer::getFile(modelPath("llama.ref.qlora.json"));
  ASSERT_TRUE(static_cast<bool>(buf));
  auto json = llvm::json::parse((*buf)->getBuffer());
  ASSERT_TRUE(static_cast<bool>(json)) << llvm::toString(json.takeError());
  std::vector<double> want, got;
  for (const llvm::json::Value &v : *json->getAsObject()->getArray("losses"))
    want.push_back(*v.getAsNumber());
  auto qlora = trainFromFlags("llama", kQloraFlags, 0, got);
  ASSERT_TRUE(qlora);
  ASSERT_EQ(
      errorOf(loadAdapter(qlora->executor(), modelPath("llama.lora_init"))),
      "");
  auto data = takeOrFail(loadDataset(modelPath("llama.train.npz")));
  std::vector<int64_t> order = identityOrder(data.Samples);
  double firstLoss = 0;
  for (size_t s = 0; s < want.size(); ++s) {
    got.push_back(
        takeOrFail(qlora->step(data, order, s * qlora->batch())).Loss);
    firstLoss = s ? firstLoss : got[0];
  }
  for (size_t s = 0; s < want.size(); ++s)
    EXPECT_NEAR(got[s], want[s], 1e-5 * std::fabs(want[s])) << "step " << s;
  auto ref = takeOrFail(readArrays(modelPath("llama.ref.qlora.npz")));
  unsigned adapters = 0;
  for (const auto &[name, w] : ref) {
    if (!llvm::StringRef(name).contains(".lora_"))
      continue;
    ++adapters;
    auto mine = qlora->executor().readState(name);
    ASSERT_TRUE(static_cast<bool>(mine)) << name;
    EXPECT_LE(relativeL2(*mine, w), 1e-5) << name;
  }
  EXPECT_EQ(adapters, 8u);
  // Merged: every NF4 weight dequantized, the adapted ones plus B A.
  double mergedLoss = mergedModelLoss(*qlora, "qlora_merged.onnx", data, order);
  // The adapted model's loss on batch 0: the trained adapters saved as
  // PEFT's files and loaded into a fresh run, whose first step reports the
  // loss before it updates.
  std::string dir = testing::TempDir() + "/qlora_adapter";
  ASSERT_EQ(errorOf(saveAdapter(qlora->executor(), dir)), "");
  std::vector<double> none;
  auto reloaded = trainFromFlags("llama", kQloraFlags, 0, none, /*seed=*/5);
  ASSERT_EQ(errorOf(loadAdapter(reloaded->executor(), dir)), "");
  double adaptedLoss = takeOrFail(reloaded->step(data, order, 0)).Loss;
  EXPECT_NEAR(mergedLoss, adaptedLoss, 1e-5 * adaptedLoss);
  EXPECT_NE(firstLoss, adaptedLoss); // training moved it
}

} // namespace

namespace {

/// The fused output head trains what the unfused head trains: the same losses
/// and weights up to summation order (the rows' losses summed in the graph,
/// dw over chunks), with one chunk and with several (rows=7 of 128 rows),
/// in f32 and with bf16 compute, a frozen head (LoRA) that gets no dw, and
/// on the emulated CUDA backend (its own kernels in the same chunk loop),
/// on an NF4 base too.
TEST(OutputHead, FusedTrainsWhatTheUnfusedTrains) {
  useCudaEmulator();
  struct Case {
    const char *Model, *Flags;
    double Tol;
  } cases[] = {
      {"llama", "--optimizer adamw --lr 1e-2", 1e-5},
      {"gpt", "--optimizer momentum --lr 0.05 --momentum 0.9", 1e-5},
      // (Not AdamW: it makes rounding noise in gradients that are 0 in exact
      // arithmetic, such as attention's key bias, full-size steps.)
      {"gpt", "--optimizer momentum --lr 0.05 --momentum 0.9 --precision bf16",
       2e-3},
      {"llama", "--optimizer adamw --lr 1e-2 --lora rank=4,targets=wq;wv",
       1e-5},
      // The CUDA backend (emulated): its own MatMul and loss kernels in the
      // same chunk loop, on an NF4 base too.
      {"llama", "--optimizer adamw --lr 1e-2 --device cuda", 1e-5},
      {"llama",
       "--optimizer adamw --lr 1e-2 --device cuda --lora rank=4,targets=wq;wv "
       "--base-weights nf4",
       1e-5},
  };
  for (const Case &c : cases) {
    std::string flags = std::string("--batch 8 --disable-dropout ") + c.Flags;
    std::vector<double> plain, one, chunked;
    auto a =
        trainFromFlags(c.Model, flags + " --output-head unfused", 4, plain);
    auto b = trainFromFlags(c.Model, flags + " --output-head fused,rows=128", 4,
                            one); // one chunk
    auto d = trainFromFlags(c.Model, flags + " --output-head fused,rows=7", 4,
                            chunked);
    ASSERT_TRUE(a && b && d) << c.Flags;
    for (size_t s = 0; s < plain.size(); ++s) {
      EXPECT_NEAR(one[s], plain[s], c.Tol * plain[s]) << c.Flags << s;
      EXPECT_NEAR(chunked[s], plain[s], c.Tol * plain[s]) << c.Flags << s;
    }
    for (const PlanState &s : a->executor().plan().States) {
      if (s.Kind != StateKind::Param)
        continue;
      auto want = takeOrFail(a->executor().readState(s.Name));
      for (Trainer *t : {b.get(), d.get()})
        EXPECT_LE(relativeL2(takeOrFail(t->executor().readState(s.Name)), want),
                  c.Tol)
            << c.Flags << " " << s.Name;
    }
  }
}

} // namespace

namespace {

/// Offload (docs/offload.md) moves state to the pinned host pool and runs
/// its updates there with the device kernels compiled for the host: on the
/// emulated cuda target every case trains to the same losses and weights,
/// bit for bit, as the same flags without offload; the executor's host pool
/// is the planned host peak, the device peak falls, and a plan file keeps
/// the pools.
TEST(Offload, TrainsToBitIdenticalWeights) {
  struct Case {
    const char *Model, *Flags, *Offload;
  };
  const Case cases[] = {
      {"gpt",
       "--optimizer lomo --precision bf16 --master-weights none "
       "--accum 2",
       "accumulators"},
      {"llama", "--optimizer adamw --precision bf16 --accum 2",
       "optimizer,accumulators"},
      {"gpt", "--optimizer momentum --precision bf16", "optimizer"},
      {"llama", "--optimizer adamw --recompute every=1", "parameters"},
      {"gpt",
       "--optimizer lomo --precision bf16 --master-weights none "
       "--recompute every=1 --clip-grad-norm 1",
       "parameters"},
      {"llama", "--optimizer sgd --accum 4 --clip-grad-norm 0.5",
       "accumulators,parameters"},
      {"gpt", "--optimizer adamw --precision bf16", "activations"},
      {"llama", "--optimizer lomo --recompute every=1 --accum 2",
       "accumulators,activations"},
  };
  useCudaEmulator();
  for (const Case &c : cases) {
    std::string what =
        std::string(c.Model) + " " + c.Flags + " --offload " + c.Offload;
    std::string flags =
        std::string("--batch 8 --device cuda --lr 0.01 ") + c.Flags;
    std::vector<double> withLosses, withoutLosses;
    auto with = trainFromFlags(c.Model, flags + " --offload " + c.Offload, 3,
                               withLosses, 7, [](CompileOptions &o) {
                                 o.OffloadMinBytes = 0; // the small models
                               });
    auto without = trainFromFlags(c.Model, flags, 3, withoutLosses, 7);
    ASSERT_TRUE(with && without) << what;
    EXPECT_EQ(withLosses, withoutLosses) << what;
    expectSameStates(*with, *without, what);
    const Plan &p = with->executor().plan(), &q = without->executor().plan();
    EXPECT_GT(p.Report.HostState + p.Report.HostArenaBytes, 0u) << what;
    EXPECT_EQ(with->executor().hostPoolBytes(), p.Report.HostPeakBytes())
        << what;
    EXPECT_EQ(without->executor().hostPoolBytes(), 0u) << what;
    EXPECT_LT(p.Report.PeakBytes(), q.Report.PeakBytes()) << what;
    EXPECT_GT(p.Report.ToHostBytes, 0u) << what;
    // The plan file keeps both pools and where each call runs.
    PlanSource source = takeOrFail(
        describePlanSource(modelPath(std::string(c.Model) + ".onnx")));
    PlanRecipe recipe;
    recipe.Flags = flags;
    std::string bytes = takeOrFail(serializePlanFile(p, source, recipe));
    LoadedPlan loaded = takeOrFail(parsePlanFile(bytes, "offload.plan"));
    const Plan &l = loaded.ThePlan;
    EXPECT_EQ(l.Report.HostPeakBytes(), p.Report.HostPeakBytes()) << what;
    EXPECT_EQ(l.Report.PeakBytes(), p.Report.PeakBytes()) << what;
    EXPECT_EQ(l.Report.ToDeviceBytes, p.Report.ToDeviceBytes) << what;
    EXPECT_EQ(l.HostArenaBytes, p.HostArenaBytes) << what;
    for (size_t i = 0; i < p.States.size(); ++i)
      EXPECT_EQ(l.States[i].Host, p.States[i].Host) << what;
    for (size_t f = 0; f < p.Functions.size(); ++f)
      for (size_t k = 0; k < p.Functions[f].Calls.size(); ++k)
        EXPECT_EQ(l.Functions[f].Calls[k].Host, p.Functions[f].Calls[k].Host)
            << what;
  }
}

} // namespace

namespace {

/// A cuda plan whose pinned host pool exceeds the memory available here is
/// refused before anything is allocated, with what the pool holds.
TEST(Offload, RefusesAHostPoolLargerThanTheHost) {
  if (!availableCpuBytes())
    GTEST_SKIP() << "MemAvailable is unknown here";
  Plan plan;
  plan.TargetName = "cuda";
  plan.Alignment = 256;
  TensorType huge(DType::F32, {int64_t(1) << 42}); // 16 TiB
  plan.States.push_back({"w.exp_avg", huge, StateKind::Optimizer,
                         StateInit::Zeros, true, llvm::None, -1});
  plan.Report.OptimizerState = plan.Report.HostState = huge.sizeInBytes();
  auto e = createExecutor(std::move(plan));
  ASSERT_FALSE(static_cast<bool>(e));
  std::string msg = llvm::toString(e.takeError());
  EXPECT_NE(msg.find("pinned host pool of 16.00 TiB (optimizer 16.00 TiB"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("offload fewer kinds of state"), std::string::npos) << msg;
}

} // namespace

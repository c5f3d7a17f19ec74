//===- GpuTest.cpp - The CUDA backend on a GPU ----------------------------===//
//
// The GPU suite (ctest label `gpu`, the binary headroom_gputests). Without
// a GPU it prints one line and skips everything. With one:
//
//  - every kernel case of test/unit/kernels/Cuda*Test.cpp runs the nvcc
//    build of kernels/cuda on the GPU against kernels/cpu (those files are
//    compiled into this binary a second time, see CudaKernelTestUtil.h);
//  - every ONNX node test the CPU passes runs through the CUDA executor;
//  - the test models train on the CUDA executor (CUDA graphs) and on the
//    CPU executor from the same weights on the same batches, with dropout
//    on (the masks are equal bit for bit), SGD, AdamW, clipping, LOMO,
//    accumulation and bf16, and must agree;
//  - the device memory a step takes, measured by cudaMemGetInfo around
//    creating the executor and running a step, is the executor's one
//    allocation, which is the planned peak plus the plan's constants; and
//    the executor calls cudaMalloc exactly once (counted by wrapping it).
//
//===----------------------------------------------------------------------===//
#include "../unit/CompileUtil.h"
#include "../unit/NodeTests.h"
#include "compiler/OnnxTensor.h"
#include "kernels/cuda/CublasLt.h"
#include "kernels/cuda/CudaTarget.h"
#include "runtime/Data.h"
#include "runtime/cuda/CudaExecutor.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <numeric>

using namespace headroom;

// Every cudaMalloc the libraries linked into this binary make (the link
// wraps the symbol: -Wl,--wrap=cudaMalloc).
static std::atomic<int> Mallocs{0};
extern "C" cudaError_t __real_cudaMalloc(void **p, size_t bytes);
extern "C" cudaError_t __wrap_cudaMalloc(void **p, size_t bytes) {
  ++Mallocs;
  return __real_cudaMalloc(p, bytes);
}

namespace {

bool HaveGpu = false;

class GpuEnvironment : public ::testing::Environment {
public:
  void SetUp() override {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    HaveGpu = e == cudaSuccess && count > 0;
    if (!HaveGpu) {
      std::cout << "test/gpu: no CUDA device ("
                << (e == cudaSuccess ? "none found" : cudaGetErrorString(e))
                << "); the GPU suite is skipped\n";
      GTEST_SKIP();
    }
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    std::cout << "test/gpu: " << p.name << ", sm_" << p.major << p.minor
              << "\n";
  }
};

std::string modelFile(const std::string &name) {
  // The checkout's test models; HEADROOM_SOURCE_DIR in the environment
  // names another checkout (a prebuilt binary, bench/gpu-bundle.sh).
  const char *env = std::getenv("HEADROOM_SOURCE_DIR");
  return std::string(env && *env ? env : HEADROOM_SOURCE_DIR) +
         "/test/models/" + name;
}

//===----------------------------------------------------------------------===//
// ONNX node tests through the CUDA executor
//===----------------------------------------------------------------------===//

std::string compareOutputs(const Tensor &got, const Tensor &want) {
  if (got.type() != want.type())
    return "type " + got.type().str() + ", expected " + want.type().str();
  DType t = want.type().dtype();
  bool lowp = t == DType::F16 || t == DType::BF16;
  double atol = lowp ? 1e-2 : 1e-5, rtol = lowp ? 1e-2 : 1e-4;
  for (int64_t i = 0; i < want.numElements(); ++i) {
    if (isFloat(t)) {
      double g = got.getDouble(i), w = want.getDouble(i);
      if (std::isnan(w)
              ? std::isnan(g)
              : (g == w || std::fabs(g - w) <= atol + rtol * std::fabs(w)))
        continue;
      return "element " + std::to_string(i) + " is " + std::to_string(g) +
             ", expected " + std::to_string(w);
    }
    if (got.getInt(i) != want.getInt(i))
      return "element " + std::to_string(i) + " differs";
  }
  return "";
}

TEST(GpuNodeTest, CudaExecutorMatchesOnnxOutputs) {
  std::vector<NodeTestCase> cases = loadNodeTests();
  if (cases.empty())
    GTEST_SKIP() << "libonnx-testdata is not installed";
  unsigned passed = 0, refused = 0;
  for (const NodeTestCase &c : cases) {
    if (!whyNotAccepted(c).empty())
      continue;
    std::map<std::string, Tensor> constants;
    auto m = importNodeTest(c, constants);
    if (!m) {
      llvm::consumeError(m.takeError());
      continue;
    }
    auto plan = lowerModule(**m, cudaTarget());
    if (!plan) {
      llvm::consumeError(plan.takeError());
      ++refused;
      continue;
    }
    // A test the emulator does not pass (listed in test/unit's exception
    // lists) is not the GPU's to pass.
    auto emulated = createEmulatedCudaExecutor(*plan);
    auto gpu = createCudaExecutor(std::move(*plan));
    ASSERT_TRUE(static_cast<bool>(gpu)) << llvm::toString(gpu.takeError());
    ASSERT_TRUE(static_cast<bool>(emulated));
    auto sets = loadNodeTestData(c);
    ASSERT_TRUE(static_cast<bool>(sets));
    const Function &f = *(*m)->functions()[0];
    std::string error;
    for (const NodeTestData &d : *sets) {
      std::vector<const Tensor *> args;
      for (Value *a : f.arguments()) {
        int index = 0;
        for (const auto &in : c.Proto.graph().input()) {
          if (in.name() == a->name())
            break;
          ++index;
        }
        args.push_back(&d.Inputs[index]);
      }
      auto want = (*emulated)->run("forward", args);
      bool emulatorPasses = static_cast<bool>(want);
      if (!want)
        llvm::consumeError(want.takeError());
      for (size_t k = 0; emulatorPasses && k < want->size(); ++k)
        emulatorPasses = compareOutputs((*want)[k], d.Outputs[k]).empty();
      if (!emulatorPasses) {
        error = "skip";
        break;
      }
      auto got = (*gpu)->run("forward", args);
      if (!got) {
        error = llvm::toString(got.takeError());
        break;
      }
      for (size_t k = 0; k < got->size() && error.empty(); ++k)
        error = compareOutputs((*got)[k], d.Outputs[k]);
    }
    if (error == "skip")
      continue;
    EXPECT_EQ(error, "") << c.Name;
    passed += error.empty();
  }
  std::cout << "[ cuda kernels, GPU ] " << passed << " node tests pass, "
            << refused << " refused by the cuda target\n";
}

//===----------------------------------------------------------------------===//
// Training on the GPU against the CPU
//===----------------------------------------------------------------------===//

using OptimizerKind = decltype(OptimizerOptions::Kind);

struct TrainCase {
  const char *Model, *Name;
  OptimizerKind Optimizer;
  unsigned Accum = 1;
  double Clip = 0;
  DType Precision = DType::F32;
  bool Dropout = false;
};

std::vector<int64_t> order(int64_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

class GpuTraining : public ::testing::TestWithParam<TrainCase> {};

TEST_P(GpuTraining, MatchesTheCpu) {
  const TrainCase &c = GetParam();
  CompileOptions o;
  o.Import.Batch = 8;
  o.Optimizer.Kind = c.Optimizer;
  o.Optimizer.Lr = c.Optimizer == OptimizerOptions::Kind::AdamW ? 1e-3 : 0.05;
  o.Optimizer.ClipGradNorm = c.Clip;
  o.Accumulate = c.Accum;
  o.Precision = c.Precision;
  o.DisableDropout = !c.Dropout;
  std::string model = modelFile(std::string(c.Model) + ".onnx");
  auto data = loadDataset(modelFile(std::string(c.Model) + ".train.npz"));
  ASSERT_TRUE(static_cast<bool>(data)) << llvm::toString(data.takeError());
  o.Target = "cpu";
  auto cpu = compileTrainer(model, o, 7);
  o.Target = "cuda";
  auto gpu = compileTrainer(model, o, 7);
  ASSERT_TRUE(static_cast<bool>(cpu)) << llvm::toString(cpu.takeError());
  ASSERT_TRUE(static_cast<bool>(gpu)) << llvm::toString(gpu.takeError());
  bool lowp = c.Precision != DType::F32;
  double rtol = lowp ? 2e-2 : 2e-4, atol = lowp ? 2e-3 : 2e-5;
  std::vector<int64_t> ord = order(data->Samples);
  for (int64_t s = 0; s < 4; ++s) {
    int64_t start = (s * (*cpu)->batch()) % data->Samples;
    auto a = (*cpu)->step(*data, ord, start);
    auto b = (*gpu)->step(*data, ord, start);
    ASSERT_TRUE(static_cast<bool>(a)) << llvm::toString(a.takeError());
    ASSERT_TRUE(static_cast<bool>(b)) << llvm::toString(b.takeError());
    EXPECT_NEAR(b->Loss, a->Loss, atol + rtol * std::fabs(a->Loss))
        << "step " << s;
  }
  // Adaptive optimizers turn rounding noise in a (near) zero gradient into
  // a step of up to lr (test/e2e/TrainingTest.cpp says where such
  // gradients are): their weights may differ by steps * lr there.
  if (c.Optimizer == OptimizerKind::AdamW ||
      c.Optimizer == OptimizerKind::AdaLomo)
    atol += 4 * o.Optimizer.Lr;
  const Plan &plan = (*cpu)->executor().plan();
  for (const PlanState &st : plan.States) {
    if (st.Kind != StateKind::Param)
      continue;
    Tensor a = *(*cpu)->executor().readState(st.Name);
    Tensor b = *(*gpu)->executor().readState(st.Name);
    for (int64_t i = 0; i < a.numElements(); ++i) {
      double x = a.getDouble(i), y = b.getDouble(i);
      ASSERT_NEAR(y, x, atol + rtol * std::fabs(x))
          << st.Name << "[" << i << "]";
    }
  }
}

std::vector<TrainCase> trainCases() {
  using K = OptimizerKind;
  std::vector<TrainCase> out;
  for (const char *m : {"mlp", "lenet", "gpt", "llama"}) {
    out.push_back({m, "sgd", K::Sgd});
    out.push_back({m, "adamw", K::AdamW});
    out.push_back({m, "momentum_clip", K::Momentum, 1, 1.0});
    out.push_back({m, "lomo", K::Lomo});
    out.push_back({m, "adalomo", K::AdaLomo});
    out.push_back({m, "sgd_accum2", K::Sgd, 2});
    out.push_back({m, "adamw_bf16", K::AdamW, 1, 0, DType::BF16});
    out.push_back({m, "sgd_dropout", K::Sgd, 1, 0, DType::F32, true});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Models, GpuTraining, ::testing::ValuesIn(trainCases()),
                         [](const auto &info) {
                           return std::string(info.param.Model) + "_" +
                                  info.param.Name;
                         });

//===----------------------------------------------------------------------===//
// Device memory
//===----------------------------------------------------------------------===//

TEST(GpuMemory, AStepTakesThePlannedBytes) {
  for (const char *m : {"mlp", "gpt", "llama"}) {
    CompileOptions o;
    o.Import.Batch = 8;
    o.Optimizer.Kind = OptimizerOptions::Kind::AdamW;
    o.Target = "cuda";
    auto c = compile(modelFile(std::string(m) + ".onnx"), o);
    ASSERT_TRUE(static_cast<bool>(c)) << llvm::toString(c.takeError());
    const Plan plan = c->ThePlan;
    uint64_t constants = 0;
    for (size_t i = 0; i < plan.Buffers.size(); ++i)
      if (plan.Placements[i].Where == Placement::Kind::Constant)
        constants += (plan.Buffers[i].sizeInBytes() + 255) / 256 * 256;
    cudaFree(nullptr); // the context exists before measuring
    size_t freeBefore = 0, freeAfter = 0, total = 0;
    cudaMemGetInfo(&freeBefore, &total);
    int mallocs = Mallocs;
    auto trainer = Trainer::create(std::move(c->ThePlan),
                                   modelFile(std::string(m) + ".onnx"));
    ASSERT_TRUE(static_cast<bool>(trainer))
        << llvm::toString(trainer.takeError());
    auto data = loadDataset(modelFile(std::string(m) + ".train.npz"));
    ASSERT_TRUE(static_cast<bool>(data));
    ASSERT_TRUE(
        static_cast<bool>((*trainer)->step(*data, order(data->Samples), 0)));
    cudaMemGetInfo(&freeAfter, &total);
    uint64_t allocated = (*trainer)->executor().deviceBytes();
    EXPECT_EQ(allocated, plan.Report.PeakBytes() + constants + 256) << m;
    EXPECT_EQ(Mallocs - mallocs, 1) << m << ": the executor's one allocation";
    // cudaMemGetInfo counts whole 2 MiB pages; the instantiated graph and
    // the cuBLASLt kernels loaded on first use take a few more.
    int64_t measured = int64_t(freeBefore) - int64_t(freeAfter);
    std::cout << "[ gpu memory ] " << m << ": planned peak "
              << plan.Report.PeakBytes() << " B, allocated " << allocated
              << " B, measured " << measured << " B\n";
    EXPECT_GE(measured, int64_t(allocated)) << m;
    EXPECT_LE(measured, int64_t(allocated) + (16 << 20)) << m;
  }
}

//===----------------------------------------------------------------------===//
// Offload (docs/offload.md)
//===----------------------------------------------------------------------===//

/// On the GPU, offloaded state gives the weights of the same flags without
/// offload bit for bit (host calls run the device kernels' code compiled
/// for the host, products rounded on their own; copies are exact), in a
/// CUDA graph with host nodes, and the executor's pinned pool is the
/// planned host peak.
TEST(GpuOffload, SameBitsAsOnTheDevice) {
  struct Case {
    const char *Model;
    OptimizerKind Optimizer;
    unsigned Accum;
    DType Precision;
    bool MasterWeights;
    const char *Offload;
  };
  using K = OptimizerKind;
  const Case cases[] = {
      {"gpt", K::Lomo, 2, DType::BF16, false, "accumulators"},
      {"llama", K::AdamW, 2, DType::BF16, true, "optimizer,accumulators"},
      {"gpt", K::Momentum, 1, DType::F32, true, "parameters"},
      {"llama", K::AdamW, 1, DType::BF16, true, "activations"},
  };
  for (const Case &c : cases) {
    std::string what = std::string(c.Model) + " " + c.Offload;
    CompileOptions o;
    o.Import.Batch = 8;
    o.Optimizer.Kind = c.Optimizer;
    o.Optimizer.Lr = c.Optimizer == K::AdamW ? 1e-3 : 0.05;
    o.Accumulate = c.Accum;
    o.Precision = c.Precision;
    o.MasterWeights = c.MasterWeights;
    o.DisableDropout = true;
    o.Target = "cuda";
    o.OffloadMinBytes = 0;
    std::string model = modelFile(std::string(c.Model) + ".onnx");
    auto data = loadDataset(modelFile(std::string(c.Model) + ".train.npz"));
    ASSERT_TRUE(static_cast<bool>(data)) << llvm::toString(data.takeError());
    auto plain = compileTrainer(model, o, 7);
    o.Offload = c.Offload;
    auto offloaded = compileTrainer(model, o, 7);
    ASSERT_TRUE(static_cast<bool>(plain)) << llvm::toString(plain.takeError());
    ASSERT_TRUE(static_cast<bool>(offloaded))
        << llvm::toString(offloaded.takeError());
    std::vector<int64_t> ord = order(data->Samples);
    for (int64_t s = 0; s < 3; ++s) {
      int64_t start = (s * (*plain)->batch()) % data->Samples;
      auto a = (*plain)->step(*data, ord, start);
      auto b = (*offloaded)->step(*data, ord, start);
      ASSERT_TRUE(static_cast<bool>(a)) << llvm::toString(a.takeError());
      ASSERT_TRUE(static_cast<bool>(b)) << llvm::toString(b.takeError());
      EXPECT_EQ(a->Loss, b->Loss) << what << " step " << s;
    }
    const Executor &e = (*offloaded)->executor();
    EXPECT_EQ(e.hostPoolBytes(), e.plan().Report.HostPeakBytes()) << what;
    for (const PlanState &st : (*plain)->executor().plan().States)
      EXPECT_TRUE(*(*plain)->executor().readState(st.Name) ==
                  *e.readState(st.Name))
          << what << ": " << st.Name;
  }
}

/// The trained weights of a saved model, by name.
std::map<std::string, Tensor> savedWeights(const std::string &path) {
  std::map<std::string, Tensor> out;
  std::ifstream in(path, std::ios::binary);
  onnx::ModelProto m;
  if (!m.ParseFromIstream(&in)) {
    ADD_FAILURE() << path << ": cannot read the saved model";
    return out;
  }
  for (const auto &init : m.graph().initializer())
    if (auto t = tensorFromProto(init, ""))
      out[init.name()] = std::move(*t);
    else
      llvm::consumeError(t.takeError());
  return out;
}

/// Two ranks on two GPUs (NCCL, ZeRO 0 and 3) train to one GPU's weights.
/// Runs `mpirun -np 2 headroom train` (HEADROOM_BINARY in the environment
/// names another binary).
TEST(GpuDataParallel, TwoRanksOnNcclMatchOneGpu) {
  int count = 0;
  cudaGetDeviceCount(&count);
  if (count < 2)
    GTEST_SKIP() << "data parallelism on GPUs needs 2 (this machine has "
                 << count << ")";
  const char *env = std::getenv("HEADROOM_BINARY");
  std::string headroom = env && *env ? env : HEADROOM_BINARY;
  std::string dir = ::testing::TempDir();
  std::string common = " train " + modelFile("gpt.onnx") + " --data " +
                       modelFile("gpt.train.npz") +
                       " --batch 8 --steps 3 --optimizer sgd --lr 0.05 "
                       "--disable-dropout --device cuda";
  ASSERT_EQ(std::system((headroom + common + " --save " + dir + "one.onnx" +
                         " > /dev/null 2>&1")
                            .c_str()),
            0);
  std::map<std::string, Tensor> one = savedWeights(dir + "one.onnx");
  for (int zero : {0, 3}) {
    std::string out = dir + "two" + std::to_string(zero) + ".onnx";
    std::string cmd = "OMPI_ALLOW_RUN_AS_ROOT=1 "
                      "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 " +
                      headroom + common + " --ranks 2 --zero " +
                      std::to_string(zero) + " --save " + out +
                      " > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::map<std::string, Tensor> two = savedWeights(out);
    for (const auto &[name, w] : one) {
      ASSERT_TRUE(two.count(name)) << name;
      for (int64_t i = 0; i < w.numElements(); ++i)
        ASSERT_NEAR(two.at(name).getDouble(i), w.getDouble(i),
                    1e-5 + 1e-4 * std::fabs(w.getDouble(i)))
            << "zero " << zero << ": " << name << "[" << i << "]";
    }
  }
}

TEST(GpuErrors, NoCudaPlanOnCpuExecutor) {
  CompileOptions o;
  o.Import.Batch = 2;
  o.Target = "cpu";
  auto c = compile(modelFile("mlp.onnx"), o);
  ASSERT_TRUE(static_cast<bool>(c));
  auto e = createCudaExecutor(std::move(c->ThePlan));
  ASSERT_FALSE(static_cast<bool>(e));
  EXPECT_NE(llvm::toString(e.takeError()).find("not cuda"), std::string::npos);
}

} // namespace

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // headroom loads cuBLASLt itself (kernels/cuda/CublasLt.h); that needs no
  // device, so every machine with the toolkit checks it.
  std::string why;
  if (!headroom::cuda::cublasLt(&why)) {
    std::cerr << "test/gpu: " << why << "\n";
    return 1;
  }
  ::testing::AddGlobalTestEnvironment(new GpuEnvironment);
  return RUN_ALL_TESTS();
}

//===- DistributedTest.cpp - Data parallelism end to end on MPI ranks ----===//
//
// Runs under `mpirun -np N` (ctest runs it with 2 and with 3 ranks): every
// rank runs every test, and the tests' collectives pair up because every
// rank makes the same calls in the same order. What must hold (issue 26):
//   - N ranks training on a global batch give the weights of one process
//     on that batch: PyTorch's reference weights (the suites of
//     TrainingTest.cpp, batch 8: 2 ranks) and headroom's single-process
//     run (any N; the CUDA executor too, on its emulator), for every ZeRO
//     stage, SGD, momentum, AdamW, LOMO,
//     clipping, weight decay, accumulation and bf16;
//   - every rank ends with the same bits, and a rerun gives them again.
// Rank 0 prints gtest's report; the others print their failures only, each
// with its rank. The job fails when any rank does.
//
//===----------------------------------------------------------------------===//
#include "../unit/CompileUtil.h"
#include "../unit/TestUtil.h"
#include "runtime/Communicator.h"
#include "runtime/ModelIO.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/xxhash.h"

#include <cmath>
#include <numeric>

using namespace headroom;

namespace {

Communicator *World = nullptr;

unsigned ranks() { return World->size(); }

std::vector<int64_t> identityOrder(int64_t n) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  return order;
}

/// A trainer of `model` with `o` as one of the world's ranks (o.Ranks set
/// to the world's size) or, with `alone`, as a single process.
std::unique_ptr<Trainer> trainer(const std::string &model, CompileOptions o,
                                 bool alone) {
  if (!alone)
    o.Ranks = ranks();
  auto c = compile(modelPath(model + ".onnx"), o);
  if (!c) {
    ADD_FAILURE() << llvm::toString(c.takeError());
    return nullptr;
  }
  return takeOrFail(Trainer::create(std::move(c->ThePlan),
                                    modelPath(model + ".onnx"), 0,
                                    alone ? nullptr : World));
}

/// Trains `steps` steps (as many as the data has, at most) on the model's
/// data from its first sample; the losses.
std::vector<double> train(Trainer &t, const std::string &model, int64_t steps) {
  auto data = takeOrFail(loadDataset(modelPath(model + ".train.npz")));
  std::vector<int64_t> order = identityOrder(data.Samples);
  steps = std::min(steps, data.Samples / std::max<int64_t>(1, t.batch()));
  std::vector<double> losses;
  for (int64_t s = 0; s < steps; ++s) {
    auto r = takeOrFail(t.step(data, order, s * t.batch()));
    losses.push_back(r.Loss);
  }
  return losses;
}

/// Every weight (trained or not) whole: sharded slots gathered.
std::map<std::string, Tensor> wholeWeights(Trainer &t) {
  std::map<std::string, Tensor> out;
  for (const PlanState &s : t.executor().plan().States)
    if (s.Kind == StateKind::Param || s.Kind == StateKind::Frozen ||
        s.Kind == StateKind::Buffer)
      out[s.Name] =
          takeOrFail(readWholeState(t.executor(), t.communicator(), s.Name));
  return out;
}

//===----------------------------------------------------------------------===//
// Against PyTorch (2 ranks: the references' batch of 8 split in two)
//===----------------------------------------------------------------------===//

struct ReferenceCase {
  const char *Model, *Config;
  unsigned Zero;
  /// "lomo" trains where the reference ran SGD (the same weights).
  const char *Optimizer = nullptr;
};

std::ostream &operator<<(std::ostream &os, const ReferenceCase &c) {
  return os << c.Model << "/" << c.Config << " zero " << c.Zero
            << (c.Optimizer ? " lomo" : "");
}

class MatchesPyTorch : public ::testing::TestWithParam<ReferenceCase> {};

TEST_P(MatchesPyTorch, WeightsAndLosses) {
  if (ranks() != 2)
    GTEST_SKIP() << "the references' batch of 8 is split over 2 ranks";
  const ReferenceCase &c = GetParam();
  auto buf = llvm::MemoryBuffer::getFile(
      modelPath(std::string(c.Model) + ".ref.json"));
  ASSERT_TRUE(static_cast<bool>(buf));
  auto ref = llvm::json::parse((*buf)->getBuffer());
  ASSERT_TRUE(static_cast<bool>(ref));
  const llvm::json::Object &root = *ref->getAsObject();
  const llvm::json::Object *cfg =
      root.getObject("configs")->getObject(c.Config);
  ASSERT_NE(cfg, nullptr);
  const llvm::json::Object *hp = cfg->getObject("hyperparameters");
  CompileOptions o;
  o.Import.Batch = *root.getInteger("batch");
  o.DisableDropout = true;
  o.Zero = c.Zero;
  bool adamw = cfg->getString("optimizer")->str() == "AdamW";
  o.Optimizer.Kind = adamw                 ? OptimizerOptions::Kind::AdamW
                     : hp->get("momentum") ? OptimizerOptions::Kind::Momentum
                     : c.Optimizer         ? OptimizerOptions::Kind::Lomo
                                           : OptimizerOptions::Kind::Sgd;
  o.Accumulate = cfg->getInteger("accum").getValueOr(1);
  o.Optimizer.Lr = *hp->getNumber("lr");
  o.Optimizer.Momentum = hp->getNumber("momentum").getValueOr(0.0);
  o.Optimizer.Nesterov = hp->getBoolean("nesterov").getValueOr(false);
  o.Optimizer.WeightDecay = hp->getNumber("weight_decay").getValueOr(0.0);
  if (const llvm::json::Array *betas = hp->getArray("betas")) {
    o.Optimizer.Beta1 = *(*betas)[0].getAsNumber();
    o.Optimizer.Beta2 = *(*betas)[1].getAsNumber();
  }
  o.Optimizer.Eps = hp->getNumber("eps").getValueOr(1e-8);
  if (const llvm::json::Object *clip = cfg->getObject("clip_grad_norm"))
    o.Optimizer.ClipGradNorm = *clip->getNumber("max_norm");
  auto t = trainer(c.Model, o, /*alone=*/false);
  ASSERT_TRUE(t);
  int64_t steps = *root.getInteger("steps");
  std::vector<double> losses = train(*t, c.Model, steps);
  const llvm::json::Array &want = *cfg->getArray("losses");
  for (int64_t s = 0; s < steps && s < int64_t(losses.size()); ++s) {
    double w = *want[s].getAsNumber();
    EXPECT_NEAR(losses[s], w, 1e-5 + 1e-4 * std::fabs(w)) << "step " << s;
  }
  std::map<std::string, Tensor> got = wholeWeights(*t);
  auto arrays =
      takeOrFail(readArrays(modelPath(cfg->getString("file")->str())));
  for (const auto &[name, w] : arrays) {
    auto it = got.find(name);
    if (it == got.end())
      continue; // optimizer state in the reference file
    ASSERT_EQ(it->second.type(), w.type()) << name;
    // GPT's key bias (c_attn.bias 32..63) has a zero true gradient: AdamW
    // moves it by rounding noise of up to lr a step (TrainingTest.cpp).
    bool noisy = adamw && std::string(c.Model) == "gpt" &&
                 llvm::StringRef(name).endswith("attn.c_attn.bias");
    for (int64_t i = 0; i < w.numElements(); ++i) {
      double g = it->second.getDouble(i), r = w.getDouble(i);
      double tol = noisy && i >= 32 && i < 64 ? steps * o.Optimizer.Lr : 1e-5;
      if (std::fabs(g - r) <= tol + 1e-4 * std::fabs(r))
        continue;
      ADD_FAILURE() << name << "[" << i << "] = " << g << ", PyTorch has " << r;
      break;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, MatchesPyTorch,
    ::testing::Values(
        ReferenceCase{"gpt", "sgd", 0}, ReferenceCase{"gpt", "sgd", 1},
        ReferenceCase{"gpt", "sgd", 3}, ReferenceCase{"gpt", "momentum", 2},
        ReferenceCase{"gpt", "momentum_nesterov", 1},
        ReferenceCase{"gpt", "adamw", 0}, ReferenceCase{"gpt", "adamw", 3},
        ReferenceCase{"gpt", "sgd_clip", 0},
        ReferenceCase{"gpt", "sgd_clip", 3}, ReferenceCase{"gpt", "sgd_wd", 2},
        ReferenceCase{"gpt", "sgd_accum", 0},
        ReferenceCase{"gpt", "sgd_accum", 2},
        ReferenceCase{"gpt", "sgd_clip_accum", 1},
        ReferenceCase{"gpt", "sgd_clip_accum", 3},
        ReferenceCase{"gpt", "sgd", 3, "lomo"},
        ReferenceCase{"gpt", "sgd_clip", 2, "lomo"},
        ReferenceCase{"llama", "adamw", 1}, ReferenceCase{"llama", "sgd", 3},
        ReferenceCase{"llama", "sgd_clip_accum", 2},
        ReferenceCase{"mlp", "adamw", 3}, ReferenceCase{"mlp", "momentum", 0}),
    [](const ::testing::TestParamInfo<ReferenceCase> &i) {
      return std::string(i.param.Model) + "_" + i.param.Config + "_zero" +
             std::to_string(i.param.Zero) + (i.param.Optimizer ? "_lomo" : "");
    });

//===----------------------------------------------------------------------===//
// Against one process (any number of ranks)
//===----------------------------------------------------------------------===//

struct SameCase {
  const char *Model;
  const char *Flags; // what differs from SGD ("cuda": the CUDA emulator)
  unsigned Zero, Accum;
};

class SameAsOneProcess : public ::testing::TestWithParam<SameCase> {};

TEST_P(SameAsOneProcess, Weights) {
  const SameCase &c = GetParam();
  CompileOptions o;
  o.Import.Batch = 2 * ranks() * c.Accum;
  o.Accumulate = c.Accum;
  o.DisableDropout = true;
  o.Zero = c.Zero;
  llvm::StringRef flags(c.Flags);
  bool bf16 = flags.contains("bf16");
  if (flags.contains("cuda"))
    o.Target = "cuda"; // the emulator: HEADROOM_CUDA_EMULATOR=1 (main)
  if (flags.contains("adamw")) {
    o.Optimizer.Kind = OptimizerOptions::Kind::AdamW;
    o.Optimizer.Lr = 1e-3;
  }
  if (flags.contains("lomo"))
    o.Optimizer.Kind = OptimizerOptions::Kind::Lomo;
  if (flags.contains("clip"))
    o.Optimizer.ClipGradNorm = 0.5;
  if (bf16) {
    o.Precision = DType::BF16;
    o.MasterWeights = !flags.contains("none");
  }
  auto many = trainer(c.Model, o, /*alone=*/false);
  auto one = trainer(c.Model, o, /*alone=*/true);
  ASSERT_TRUE(many && one);
  std::vector<double> lm = train(*many, c.Model, 3),
                      lo = train(*one, c.Model, 3);
  for (size_t s = 0; s < lo.size() && s < lm.size(); ++s)
    EXPECT_NEAR(lm[s], lo[s], (bf16 ? 1e-2 : 1e-5) * (1 + std::fabs(lo[s])))
        << "step " << s;
  std::map<std::string, Tensor> a = wholeWeights(*many), b = wholeWeights(*one);
  ASSERT_EQ(a.size(), b.size());
  for (const auto &[name, w] : b) {
    const Tensor &g = a.at(name);
    ASSERT_EQ(g.type(), w.type()) << name;
    // bf16: each rank rounds its share of the gradient to bf16 before the
    // sum (one process rounds the sum): within a few bf16 ulps of a step.
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < w.numElements(); ++i) {
      double d = g.getDouble(i) - w.getDouble(i);
      diff = std::max(diff, std::fabs(d));
      norm = std::max(norm, std::fabs(w.getDouble(i)));
    }
    EXPECT_LE(diff, bf16 ? 1e-2 * (1 + norm) : 1e-5 + 1e-4 * norm) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, SameAsOneProcess,
    ::testing::Values(
        SameCase{"gpt", "sgd", 0, 1}, SameCase{"gpt", "sgd", 3, 2},
        SameCase{"gpt", "lomo clip", 3, 1},
        SameCase{"llama", "adamw clip", 1, 2}, SameCase{"llama", "adamw", 3, 1},
        SameCase{"llama", "adamw bf16", 2, 1},
        SameCase{"gpt", "lomo bf16 none", 3, 1}, SameCase{"mlp", "sgd", 2, 2},
        SameCase{"gpt", "lomo clip cuda", 1, 1},
        SameCase{"llama", "adamw bf16 cuda", 3, 2}),
    [](const ::testing::TestParamInfo<SameCase> &i) {
      std::string flags = i.param.Flags;
      std::replace(flags.begin(), flags.end(), ' ', '_');
      return std::string(i.param.Model) + "_" + flags + "_zero" +
             std::to_string(i.param.Zero) + "_accum" +
             std::to_string(i.param.Accum);
    });

//===----------------------------------------------------------------------===//
// Every rank the same bits; a rerun the same again
//===----------------------------------------------------------------------===//

/// A hash of every slot a rank holds whole (shards differ by design).
std::string replicatedHash(Trainer &t) {
  uint64_t h = 0;
  for (const PlanState &s : t.executor().plan().States) {
    if (s.ShardOf)
      continue;
    Tensor v = takeOrFail(t.executor().readState(s.Name));
    h = llvm::xxHash64(llvm::toStringRef(v.bytes())) ^ (h * 0x100000001b3ull);
  }
  return std::to_string(h);
}

TEST(DataParallel, RanksEndBitIdenticalAndRerunsRepeat) {
  for (unsigned zero : {0u, 1u, 3u}) {
    CompileOptions o;
    o.Import.Batch = 2 * ranks();
    o.Optimizer.Kind = OptimizerOptions::Kind::AdamW;
    o.Optimizer.Lr = 1e-3;
    o.Zero = zero;
    std::string hashes[2];
    for (std::string &hash : hashes) {
      auto t = trainer("gpt", o, /*alone=*/false); // with dropout
      ASSERT_TRUE(t);
      train(*t, "gpt", 3);
      hash = replicatedHash(*t);
      auto all = takeOrFail(World->allGatherStrings(hash));
      for (size_t r = 1; r < all.size(); ++r)
        EXPECT_EQ(all[r], all[0]) << "zero " << zero << ": rank " << r
                                  << " holds other bits than rank 0";
    }
    EXPECT_EQ(hashes[0], hashes[1]) << "zero " << zero << ": a rerun differs";
  }
}

/// Rank > 0: each failure as one line naming the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult &r) override {
    if (r.failed())
      std::fprintf(stderr, "rank %u: %s:%d: %s\n", World->rank(),
                   r.file_name() ? r.file_name() : "?", r.line_number(),
                   r.summary());
  }
};

} // namespace

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // cuda plans run on the emulator: the CUDA executor's collectives then go
  // through the host's (test/gpu runs them with NCCL).
  setenv("HEADROOM_CUDA_EMULATOR", "1", 1);
  auto world = joinMpiWorld();
  if (!world) {
    std::fprintf(stderr, "%s\n", llvm::toString(world.takeError()).c_str());
    return 1;
  }
  World = *world;
  if (World->rank() != 0) {
    auto &listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter);
  }
  return RUN_ALL_TESTS();
}

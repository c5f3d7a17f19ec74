//===- CheckpointTest.cpp - Checkpoint files and atomic writes ------------===//
//
// A checkpoint holds every state slot byte for byte and restores it into a
// fresh executor; every prefix of the file, every byte flipped (the padding
// included) and random bytes are refused with an error, never a crash or a
// partial restore; slots that are not the plan's are refused before a byte
// is written. AtomicFile leaves the old file whole until commit and no
// temporary behind.
//
//===----------------------------------------------------------------------===//
#include "runtime/Checkpoint.h"

#include "CompileUtil.h"
#include "compiler/AtomicFile.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <random>

using namespace headroom;

namespace {

std::string tempDir(const std::string &name) {
  return testing::TempDir() + "/CheckpointTest-" + name;
}

std::string readAll(const std::string &path) {
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  if (!buf) {
    ADD_FAILURE() << path << ": " << buf.getError().message();
    return "";
  }
  return (*buf)->getBuffer().str();
}

CompileOptions mlpOptions() {
  CompileOptions o;
  o.Import.Batch = 4;
  o.Optimizer.Kind = OptimizerOptions::Kind::AdamW;
  o.Optimizer.Lr = 1e-3;
  return o;
}

std::vector<uint8_t> stateBytes(const Executor &exec, size_t i) {
  std::vector<uint8_t> out(exec.plan().States[i].Type.sizeInBytes());
  EXPECT_EQ(errorOf(exec.readStateBytes(i, 0, out)), "");
  return out;
}

CheckpointInfo someInfo() {
  CheckpointInfo info;
  info.PlanSha256 = "plan";
  info.ModelPath = "mlp.onnx";
  info.ModelSha256 = "model";
  info.Step = 7;
  info.RandomStep = 28;
  info.Seed = 3;
  info.Shuffle = 11;
  info.DataSamples = 64;
  info.DataPath = "data.npz";
  return info;
}

/// The bytes of a checkpoint of an AdamW step on mlp after its state was
/// perturbed (so no slot is all zeros).
std::string mlpCheckpoint(Trainer &t) {
  Executor &exec = t.executor();
  for (size_t i = 0; i < exec.plan().States.size(); ++i) {
    std::vector<uint8_t> b = stateBytes(exec, i);
    for (size_t k = 0; k < b.size(); ++k)
      b[k] ^= uint8_t(k * 31 + i);
    EXPECT_EQ(errorOf(exec.writeStateBytes(i, 0, b)), "");
  }
  std::string dir = tempDir("mlp");
  EXPECT_EQ(errorOf(writeCheckpoint(dir, someInfo(), exec)), "");
  return readAll(checkpointPath(dir));
}

TEST(CheckpointTest, RoundTrip) {
  auto t = takeOrFail(compileTrainer(modelPath("mlp.onnx"), mlpOptions()));
  ASSERT_TRUE(t);
  std::string bytes = mlpCheckpoint(*t);
  auto parsed = takeOrFail(parseCheckpoint(bytes, "ck"));
  const CheckpointInfo &info = parsed.Info;
  EXPECT_EQ(info.PlanSha256, "plan");
  EXPECT_EQ(info.ModelPath, "mlp.onnx");
  EXPECT_EQ(info.ModelSha256, "model");
  EXPECT_EQ(info.Step, 7);
  EXPECT_EQ(info.RandomStep, 28u);
  EXPECT_EQ(info.Seed, 3u);
  EXPECT_EQ(info.Shuffle, 11);
  EXPECT_EQ(info.DataSamples, 64);
  EXPECT_EQ(info.DataPath, "data.npz");

  const Executor &exec = t->executor();
  const Plan &plan = exec.plan();
  ASSERT_EQ(parsed.Slots.size(), plan.States.size());
  for (size_t i = 0; i < plan.States.size(); ++i) {
    EXPECT_EQ(parsed.Slots[i].Name, plan.States[i].Name);
    EXPECT_EQ(parsed.Slots[i].Type, plan.States[i].Type.str());
    std::vector<uint8_t> want = stateBytes(exec, i);
    EXPECT_EQ(parsed.Slots[i].Bytes, llvm::toStringRef(want)) << i;
  }

  // Into a fresh executor of the same plan: every slot equal.
  auto fresh = takeOrFail(compileTrainer(modelPath("mlp.onnx"), mlpOptions()));
  ASSERT_TRUE(fresh);
  ASSERT_EQ(errorOf(restoreState(parsed, fresh->executor(), "d")), "");
  for (size_t i = 0; i < plan.States.size(); ++i)
    EXPECT_EQ(stateBytes(fresh->executor(), i), stateBytes(exec, i)) << i;
}

TEST(CheckpointTest, EveryPrefixIsRefused) {
  auto t = takeOrFail(compileTrainer(modelPath("mlp.onnx"), mlpOptions()));
  ASSERT_TRUE(t);
  std::string bytes = mlpCheckpoint(*t);
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_NE(
        errorOf(parseCheckpoint(llvm::StringRef(bytes).take_front(n), "ck")),
        "")
        << n << " of " << bytes.size() << " bytes";
}

TEST(CheckpointTest, EveryFlippedByteIsRefused) {
  auto t = takeOrFail(compileTrainer(modelPath("mlp.onnx"), mlpOptions()));
  ASSERT_TRUE(t);
  std::string bytes = mlpCheckpoint(*t);
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] ^= 0x01;
    EXPECT_NE(errorOf(parseCheckpoint(bad, "ck")), "") << "byte " << i;
  }
}

TEST(CheckpointTest, RandomBytesAreRefused) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 500; ++i) {
    std::string bytes(rng() % 4096, '\0');
    for (char &c : bytes)
      c = static_cast<char>(rng());
    if (i % 2 == 0 && bytes.size() > 32) // past the magic check
      bytes.replace(0, 24,
                    llvm::StringRef("headroom checkpoint\n\1\0\0\0", 24));
    EXPECT_NE(errorOf(parseCheckpoint(bytes, "ck")), "");
  }
}

TEST(CheckpointTest, OtherPlansSlotsAreRefusedBeforeAnyWrite) {
  auto t = takeOrFail(compileTrainer(modelPath("mlp.onnx"), mlpOptions()));
  ASSERT_TRUE(t);
  std::string bytes = mlpCheckpoint(*t);
  auto parsed = takeOrFail(parseCheckpoint(bytes, "ck"));

  // SGD has no moments: fewer slots.
  CompileOptions sgd = mlpOptions();
  sgd.Optimizer.Kind = OptimizerOptions::Kind::Sgd;
  auto other = takeOrFail(compileTrainer(modelPath("mlp.onnx"), sgd));
  ASSERT_TRUE(other);
  std::vector<uint8_t> before = stateBytes(other->executor(), 0);
  EXPECT_NE(errorOf(restoreState(parsed, other->executor(), "d")), "");
  EXPECT_EQ(stateBytes(other->executor(), 0), before);

  // The same slots with the last one renamed: nothing written either.
  parsed.Slots.back().Name += "x";
  auto same = takeOrFail(compileTrainer(modelPath("mlp.onnx"), mlpOptions()));
  ASSERT_TRUE(same);
  before = stateBytes(same->executor(), 0);
  std::string e = errorOf(restoreState(parsed, same->executor(), "d"));
  EXPECT_NE(e.find("the plan's is @"), std::string::npos) << e;
  EXPECT_EQ(stateBytes(same->executor(), 0), before);
}

TEST(CheckpointTest, ResumableNamesTheDifference) {
  CheckpointInfo saved = someInfo(), now = someInfo();
  EXPECT_EQ(errorOf(checkResumable(saved, now, "d")), "");
  now.Seed = 4;
  EXPECT_EQ(errorOf(checkResumable(saved, now, "d")),
            "cannot resume from d/checkpoint.hrc: it was written with --seed "
            "3; this run has --seed 4");
  now = someInfo();
  now.Shuffle = -1;
  EXPECT_EQ(errorOf(checkResumable(saved, now, "d")),
            "cannot resume from d/checkpoint.hrc: it was written with "
            "--shuffle 11; this run has no --shuffle");
  now = someInfo();
  now.DataSamples = 65;
  EXPECT_EQ(errorOf(checkResumable(saved, now, "d")),
            "cannot resume from d/checkpoint.hrc: it was written reading 64 "
            "samples (data.npz); this data has 65");
  now = someInfo();
  now.PlanSha256 = "other";
  EXPECT_NE(errorOf(checkResumable(saved, now, "d")).find("another plan"),
            std::string::npos);
}

TEST(AtomicFileTest, OldFileStaysWholeUntilCommit) {
  std::string dir = tempDir("atomic");
  llvm::sys::fs::create_directories(dir);
  std::string path = dir + "/out.bin";
  ASSERT_EQ(errorOf(writeFileAtomically(path, "old")), "");
  {
    auto f = AtomicFile::create(path);
    ASSERT_TRUE(bool(f)) << llvm::toString(f.takeError());
    ASSERT_EQ(errorOf(f->write("new bytes")), "");
    EXPECT_EQ(readAll(path), "old");
    // Destroyed without commit: the temporary goes, the old file stays.
  }
  EXPECT_EQ(readAll(path), "old");
  auto f = AtomicFile::create(path);
  ASSERT_TRUE(bool(f)) << llvm::toString(f.takeError());
  ASSERT_EQ(errorOf(f->write("new bytes")), "");
  EXPECT_EQ(f->size(), 9u);
  ASSERT_EQ(errorOf(f->commit()), "");
  EXPECT_EQ(readAll(path), "new bytes");

  // What a killed writer leaves behind is cleared; nothing else is.
  ASSERT_EQ(errorOf(writeFileAtomically(path + ".tmp-abc123", "x")), "");
  ASSERT_EQ(errorOf(writeFileAtomically(dir + "/keep.bin", "y")), "");
  removeStaleTemporaries(path);
  std::error_code ec;
  std::vector<std::string> left;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec))
    left.push_back(llvm::sys::path::filename(it->path()).str());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"keep.bin", "out.bin"}));
}

TEST(AtomicFileTest, UnwritableFolderIsAnError) {
  std::string e = errorOf(
      writeFileAtomically(tempDir("no-such-folder") + "/deeper/out.bin", "x"));
  EXPECT_NE(e.find("out.bin"), std::string::npos) << e;
}

} // namespace

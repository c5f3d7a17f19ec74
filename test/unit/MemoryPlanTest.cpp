//===- MemoryPlanTest.cpp - The arena planner's invariants ----------------===//
//
// Tested by invariants, not pinned offsets (STYLE.md): no two buffers whose
// lifetimes overlap share bytes; every offset is aligned; the arena is at
// least the lower bound; on simple cases it reaches it.
//
//===----------------------------------------------------------------------===//
#include "compiler/MemoryPlan.h"

#include <gtest/gtest.h>

#include <random>

using namespace headroom;

namespace {

void checkInvariants(llvm::ArrayRef<BufferLife> bufs, const ArenaAssignment &a,
                     uint64_t align) {
  ASSERT_EQ(a.Offsets.size(), bufs.size());
  for (size_t i = 0; i < bufs.size(); ++i) {
    EXPECT_EQ(a.Offsets[i] % align, 0u);
    uint64_t si = (bufs[i].Size + align - 1) / align * align;
    EXPECT_LE(a.Offsets[i] + si, a.ArenaBytes);
    for (size_t j = i + 1; j < bufs.size(); ++j) {
      if (!bufs[i].Size || !bufs[j].Size)
        continue;
      bool timeOverlap =
          bufs[i].First <= bufs[j].Last && bufs[j].First <= bufs[i].Last;
      uint64_t sj = (bufs[j].Size + align - 1) / align * align;
      bool spaceOverlap =
          a.Offsets[i] < a.Offsets[j] + sj && a.Offsets[j] < a.Offsets[i] + si;
      EXPECT_FALSE(timeOverlap && spaceOverlap)
          << "buffers " << i << " and " << j << " overlap";
    }
  }
  EXPECT_GE(a.ArenaBytes, a.LowerBound);
}

TEST(MemoryPlanTest, ChainReusesMemory) {
  // A chain a -> b -> c -> d: at most two live at once.
  std::vector<BufferLife> bufs = {
      {1024, 0, 1}, {1024, 1, 2}, {1024, 2, 3}, {1024, 3, 4}};
  ArenaAssignment a = planArena(bufs);
  checkInvariants(bufs, a, 64);
  EXPECT_EQ(a.LowerBound, 2048u);
  EXPECT_EQ(a.ArenaBytes, 2048u);
}

TEST(MemoryPlanTest, FillsGapsBestFit) {
  // A large long-lived buffer, then small ones that fit beside others.
  std::vector<BufferLife> bufs = {
      {4096, 0, 10}, {2048, 0, 3}, {1024, 4, 6}, {1024, 5, 8}, {2048, 7, 10}};
  ArenaAssignment a = planArena(bufs);
  checkInvariants(bufs, a, 64);
  EXPECT_EQ(a.ArenaBytes, a.LowerBound);
}

TEST(MemoryPlanTest, AlignmentAndEmptyBuffers) {
  std::vector<BufferLife> bufs = {{1, 0, 0}, {0, 0, 5}, {65, 0, 1}, {3, 1, 2}};
  ArenaAssignment a = planArena(bufs, 64);
  checkInvariants(bufs, a, 64);
  EXPECT_EQ(a.LowerBound, 64u + 128u);
}

TEST(MemoryPlanTest, RandomLivenessSetsKeepInvariants) {
  std::mt19937_64 rng(7);
  double worst = 1.0;
  for (int trial = 0; trial < 200; ++trial) {
    int n = 1 + rng() % 120;
    std::vector<BufferLife> bufs;
    for (int i = 0; i < n; ++i) {
      int64_t first = rng() % 200, len = rng() % 40;
      uint64_t size =
          (rng() % 4 == 0) ? (1 + rng() % (1 << 20)) : 1 + rng() % 5000;
      bufs.push_back({size, first, first + len});
    }
    ArenaAssignment a = planArena(bufs);
    checkInvariants(bufs, a, 64);
    worst = std::max(worst, double(a.ArenaBytes) / double(a.LowerBound));
  }
  // Greedy by size is not optimal, but on random sets it stays close.
  EXPECT_LT(worst, 1.6);
}

} // namespace

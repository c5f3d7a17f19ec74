//===- MemoryPlan.cpp - Static offsets for transient buffers --------------===//
#include "compiler/MemoryPlan.h"

#include <algorithm>
#include <numeric>

using namespace headroom;

uint64_t headroom::liveLowerBound(llvm::ArrayRef<BufferLife> buffers) {
  // Sweep over interval ends: +size at First, -size after Last.
  std::vector<std::pair<int64_t, int64_t>> events; // (position, delta)
  for (const BufferLife &b : buffers) {
    events.push_back({b.First * 2, static_cast<int64_t>(b.Size)});
    events.push_back({b.Last * 2 + 1, -static_cast<int64_t>(b.Size)});
  }
  std::sort(events.begin(), events.end());
  int64_t live = 0, peak = 0;
  for (const auto &e : events) {
    live += e.second;
    peak = std::max(peak, live);
  }
  return static_cast<uint64_t>(peak);
}

ArenaAssignment headroom::planArena(llvm::ArrayRef<BufferLife> buffers,
                                    uint64_t alignment) {
  auto aligned = [&](uint64_t n) {
    return (n + alignment - 1) & ~(alignment - 1);
  };
  std::vector<BufferLife> sized(buffers.begin(), buffers.end());
  for (BufferLife &b : sized)
    b.Size = aligned(b.Size);

  ArenaAssignment a;
  a.Offsets.assign(sized.size(), 0);
  a.LowerBound = liveLowerBound(sized);
  std::vector<size_t> order(sized.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first; ties by earlier start, then index, so plans are stable.
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    if (sized[x].Size != sized[y].Size)
      return sized[x].Size > sized[y].Size;
    return sized[x].First < sized[y].First;
  });
  // The buffers placed so far, kept sorted by their [offset, end) (ties in
  // placement order): the ones that overlap b in time come out of a scan
  // already in order. Each record holds what the scan reads, contiguously.
  struct Placed {
    uint64_t Lo, Hi;
    int64_t First, Last;
  };
  std::vector<Placed> placed;
  std::vector<std::pair<uint64_t, uint64_t>> busy; // [offset, end) of overlaps
  for (size_t i : order) {
    const BufferLife &b = sized[i];
    if (b.Size == 0)
      continue;
    busy.clear();
    for (const Placed &p : placed)
      if (p.First <= b.Last && b.First <= p.Last)
        busy.push_back({p.Lo, p.Hi});
    // Best fit: the smallest gap between busy ranges that holds b.
    uint64_t best = UINT64_MAX, bestGap = UINT64_MAX, cursor = 0;
    for (const auto &[lo, hi] : busy) {
      if (lo > cursor && lo - cursor >= b.Size && lo - cursor < bestGap) {
        best = cursor;
        bestGap = lo - cursor;
      }
      cursor = std::max(cursor, hi);
    }
    a.Offsets[i] = best != UINT64_MAX ? best : cursor;
    a.ArenaBytes = std::max(a.ArenaBytes, a.Offsets[i] + b.Size);
    Placed record{a.Offsets[i], a.Offsets[i] + b.Size, b.First, b.Last};
    placed.insert(std::upper_bound(placed.begin(), placed.end(), record,
                                   [](const Placed &x, const Placed &y) {
                                     return std::make_pair(x.Lo, x.Hi) <
                                            std::make_pair(y.Lo, y.Hi);
                                   }),
                  record);
  }
  return a;
}

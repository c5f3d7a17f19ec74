//===- Parallel.cpp - Splitting a CPU kernel's loop across threads --------===//
//
// One pool per process, started on first use: workers wait on a condition
// variable for a job (a body, its chunk count, a generation number), take
// chunks under the mutex while the job is still the one they woke for, and
// the caller takes chunks too, then waits until every taken chunk is done.
// Kernels run one at a time (the executor's order), so one job is in flight
// at a time; a second mutex makes that hold for concurrent callers too.
//
//===----------------------------------------------------------------------===//
#include "kernels/cpu/Parallel.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

using namespace headroom;
using namespace headroom::cpu;

namespace {

unsigned threadsFromEnvironment() {
  for (const char *name : {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"})
    if (const char *v = std::getenv(name)) {
      int n = std::atoi(v);
      if (n > 0)
        return std::min(n, 256);
    }
  return std::max(1u, std::thread::hardware_concurrency());
}

class Pool {
public:
  explicit Pool(unsigned threads) {
    for (unsigned i = 1; i < threads; ++i)
      Workers.emplace_back([this] { work(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(M);
      Stop = true;
    }
    Wake.notify_all();
    for (std::thread &t : Workers)
      t.join();
  }
  unsigned threads() const { return Workers.size() + 1; }

  void run(int64_t n, int64_t chunks,
           llvm::function_ref<void(int64_t, int64_t)> body) {
    std::lock_guard<std::mutex> serial(Serial);
    uint64_t generation;
    {
      std::lock_guard<std::mutex> lock(M);
      Body = body;
      N = n;
      Chunks = chunks;
      Next = 0;
      Pending = chunks;
      generation = ++Generation;
    }
    Wake.notify_all();
    takeChunks(generation);
    std::unique_lock<std::mutex> lock(M);
    Done.wait(lock, [&] { return Pending == 0; });
  }

private:
  /// Runs chunks of job `generation` until none is left (or another job
  /// has started: a worker that woke late).
  void takeChunks(uint64_t generation) {
    for (;;) {
      llvm::function_ref<void(int64_t, int64_t)> body;
      int64_t begin, end;
      {
        std::lock_guard<std::mutex> lock(M);
        if (Generation != generation || Next >= Chunks)
          return;
        int64_t c = Next++;
        begin = N * c / Chunks, end = N * (c + 1) / Chunks;
        body = Body;
      }
      body(begin, end);
      std::lock_guard<std::mutex> lock(M);
      if (--Pending == 0)
        Done.notify_one();
    }
  }
  void work() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(M);
        Wake.wait(lock, [&] { return Stop || Generation != seen; });
        if (Stop)
          return;
        seen = Generation;
      }
      takeChunks(seen);
    }
  }

  std::vector<std::thread> Workers;
  std::mutex M, Serial;
  std::condition_variable Wake, Done;
  bool Stop = false;
  uint64_t Generation = 0;
  llvm::function_ref<void(int64_t, int64_t)> Body;
  int64_t N = 0, Chunks = 0, Pending = 0, Next = 0;
};

Pool &pool() {
  static Pool p(threadsFromEnvironment());
  return p;
}

} // namespace

unsigned headroom::cpu::kernelThreads() { return pool().threads(); }

void headroom::cpu::parallelFor(
    int64_t n, int64_t grain, llvm::function_ref<void(int64_t, int64_t)> body) {
  if (n < 2 * grain) {
    if (n > 0)
      body(0, n);
    return;
  }
  Pool &p = pool();
  int64_t chunks = std::min<int64_t>(p.threads(), n / grain);
  if (chunks < 2) {
    body(0, n);
    return;
  }
  p.run(n, chunks, body);
}

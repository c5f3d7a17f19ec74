//===- Devices.cpp - What hardware the runtime can use --------------------===//
#include "runtime/Devices.h"

#include "llvm/ADT/StringRef.h"

#ifdef HEADROOM_HAVE_CUDA
#include "runtime/cuda/CudaDevice.h"
#endif

#include <cblas.h>
#include <cstdlib>
#include <fstream>
#include <thread>
#include <unistd.h>

using namespace headroom;

bool headroom::cudaBackendBuilt() {
#ifdef HEADROOM_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

std::string headroom::openBlasCore() {
  const char *name = openblas_get_corename();
  return name ? name : "";
}

std::string headroom::betterOpenBlasCoreFor(bool avx512, llvm::StringRef core) {
  // The cores OpenBLAS 0.3.21 has AVX-512 kernels for.
  std::string lower = core.lower();
  bool hasAvx512Core =
      lower == "skylakex" || lower == "cooperlake" || lower == "sapphirerapids";
  return avx512 && !hasAvx512Core ? "SKYLAKEX" : "";
}

std::string headroom::betterOpenBlasCore() {
  bool avx512 = false;
#if defined(__x86_64__)
  __builtin_cpu_init();
  avx512 =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#endif
  return betterOpenBlasCoreFor(avx512, openBlasCore());
}

static std::string cpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos)
        return line.substr(pos + 2);
    }
  return "cpu";
}

/// MemAvailable of /proc/meminfo (0 when it cannot be read).
static uint64_t availableMemory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:")
      return kib * 1024;
  return 0;
}

std::vector<DeviceInfo> headroom::listDevices(std::string *note) {
  std::vector<DeviceInfo> out;
  DeviceInfo cpu;
  cpu.Backend = "cpu";
  cpu.Name = cpuModelName();
  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && pageSize > 0)
    cpu.MemoryBytes = uint64_t(pages) * uint64_t(pageSize);
  cpu.FreeBytes = availableMemory();
  cpu.Detail = std::to_string(std::thread::hardware_concurrency()) +
               " threads, OpenBLAS " + openBlasCore() + " kernels";
  // headroom re-runs itself with better kernels unless the user chose some.
  if (const char *forced = std::getenv("OPENBLAS_CORETYPE"))
    if (std::string better = betterOpenBlasCore(); !better.empty())
      cpu.Detail += std::string(" (OPENBLAS_CORETYPE=") + forced +
                    " is set; this CPU runs OpenBLAS's AVX-512 kernels: "
                    "OPENBLAS_CORETYPE=" +
                    better + ")";
  out.push_back(cpu);
#ifdef HEADROOM_HAVE_CUDA
  std::vector<CudaDeviceInfo> gpus;
  std::string why = queryCudaDevices(gpus);
  if (note)
    *note = why;
  for (const CudaDeviceInfo &g : gpus) {
    DeviceInfo d;
    d.Backend = "cuda";
    d.Index = g.Index;
    d.Name = g.Name;
    d.MemoryBytes = g.TotalBytes;
    d.FreeBytes = g.FreeBytes;
    d.Detail = "sm_" + std::to_string(g.Major) + std::to_string(g.Minor) +
               ", " + std::to_string(g.MultiProcessors) + " SMs";
    out.push_back(d);
  }
#else
  if (note)
    *note = "this build has no CUDA backend (nvcc was not found at build time)";
#endif
  return out;
}

uint64_t headroom::availableCpuBytes() {
  for (const DeviceInfo &d : listDevices())
    if (d.Backend == "cpu")
      return d.FreeBytes;
  return 0;
}

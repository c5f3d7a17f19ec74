//===- Devices.cpp - What hardware the runtime can use --------------------===//
#include "runtime/Devices.h"

#ifdef HEADROOM_HAVE_CUDA
#include "runtime/cuda/CudaDevice.h"
#endif

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
  cpu.Detail = std::to_string(std::thread::hardware_concurrency()) + " threads";
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

//===- Devices.h - What hardware the runtime can use ----------------------===//
#ifndef HEADROOM_RUNTIME_DEVICES_H
#define HEADROOM_RUNTIME_DEVICES_H

#include <cstdint>
#include <string>
#include <vector>

namespace headroom {

struct DeviceInfo {
  std::string Backend; // "cpu" or "cuda"
  int Index = 0;
  std::string Name;
  uint64_t MemoryBytes = 0; // total memory the backend can plan against
  uint64_t FreeBytes = 0;   // available now (CPU: MemAvailable)
  std::string Detail;       // e.g. "sm_90, 132 SMs"
};

/// The CPU, then every CUDA device (when the CUDA backend is built and a
/// driver is present). Never fails: a missing driver means no CUDA entries,
/// and the reason is put in `note` when given.
std::vector<DeviceInfo> listDevices(std::string *note = nullptr);

/// The memory available to a cpu plan now (MemAvailable); 0 when unknown.
uint64_t availableCpuBytes();

/// True when this build contains the CUDA backend.
bool cudaBackendBuilt();

} // namespace headroom

#endif // HEADROOM_RUNTIME_DEVICES_H

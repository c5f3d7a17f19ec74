//===- CudaDevice.h - CUDA device query and the device arena --------------===//
//
// Plain C++ interface (no CUDA headers) so host code can include it. The
// DeviceArena is the one allocation a plan's transient values live in: the
// executor asks for the planned arena size once and never allocates again.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_RUNTIME_CUDA_CUDADEVICE_H
#define HEADROOM_RUNTIME_CUDA_CUDADEVICE_H

#include <cstdint>
#include <string>
#include <vector>

namespace headroom {

struct CudaDeviceInfo {
  int Index = 0;
  std::string Name;
  uint64_t TotalBytes = 0;
  /// Free now (cudaMemGetInfo; creating the context takes some of it).
  uint64_t FreeBytes = 0;
  int Major = 0, Minor = 0, MultiProcessors = 0;
};

/// Fills `out` with every visible device; returns an empty string, or why
/// there are none (no driver, no device).
std::string queryCudaDevices(std::vector<CudaDeviceInfo> &out);

/// One device allocation of a fixed size, aligned to 256 bytes.
class DeviceArena {
public:
  DeviceArena() = default;
  DeviceArena(const DeviceArena &) = delete;
  DeviceArena &operator=(const DeviceArena &) = delete;
  ~DeviceArena();

  /// Allocates `bytes` on `device`; returns an empty string or the CUDA error.
  std::string allocate(int device, uint64_t bytes);
  void *base() const { return Base; }
  uint64_t size() const { return Size; }
  /// Device pointer at `offset`, which must lie inside the arena.
  void *at(uint64_t offset) const;

private:
  void *Base = nullptr;
  uint64_t Size = 0;
  int Device = -1;
};

} // namespace headroom

#endif // HEADROOM_RUNTIME_CUDA_CUDADEVICE_H

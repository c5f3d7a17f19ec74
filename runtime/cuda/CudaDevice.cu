//===- CudaDevice.cu - CUDA device query and the device arena -------------===//
#include "runtime/cuda/CudaDevice.h"

#include <cassert>
#include <cuda_runtime.h>

using namespace headroom;

std::string headroom::queryCudaDevices(std::vector<CudaDeviceInfo> &out) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError(); // clear the sticky error for later calls
    return std::string("no CUDA device: ") + cudaGetErrorString(e);
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess)
      continue;
    CudaDeviceInfo d;
    d.Index = i;
    d.Name = p.name;
    d.TotalBytes = p.totalGlobalMem;
    size_t free = 0, total = 0;
    if (cudaSetDevice(i) == cudaSuccess &&
        cudaMemGetInfo(&free, &total) == cudaSuccess)
      d.FreeBytes = free;
    else
      cudaGetLastError();
    d.Major = p.major;
    d.Minor = p.minor;
    d.MultiProcessors = p.multiProcessorCount;
    out.push_back(d);
  }
  return count ? "" : "no CUDA device";
}

DeviceArena::~DeviceArena() {
  if (Base) {
    cudaSetDevice(Device);
    cudaFree(Base);
  }
}

std::string DeviceArena::allocate(int device, uint64_t bytes) {
  assert(!Base && "arena allocated twice");
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess)
    return cudaGetErrorString(e);
  if (cudaError_t e = cudaMalloc(&Base, bytes); e != cudaSuccess) {
    Base = nullptr;
    return std::string("cannot allocate ") + std::to_string(bytes) +
           " bytes: " + cudaGetErrorString(e);
  }
  Size = bytes;
  Device = device;
  return "";
}

void *DeviceArena::at(uint64_t offset) const {
  assert(offset <= Size && "offset outside the arena");
  return static_cast<char *>(Base) + offset;
}

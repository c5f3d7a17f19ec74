//===- Devices.h - What hardware the runtime can use ----------------------===//
#ifndef HEADROOM_RUNTIME_DEVICES_H
#define HEADROOM_RUNTIME_DEVICES_H

#include "llvm/ADT/StringRef.h"

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

/// The OpenBLAS core (OPENBLAS_CORETYPE) this CPU should use when OpenBLAS's
/// own detection chose worse kernels, else "". Debian's OpenBLAS 0.3.21
/// takes AVX-512 CPUs it does not know (AMD Zen 4) for Haswell: its SkylakeX
/// kernels make a GPT step 25% faster there. "SKYLAKEX" when the CPU has
/// AVX-512 F, BW, DQ and VL and OpenBLAS runs an AVX2-or-older core.
std::string betterOpenBlasCore();
/// The decision, for a CPU with or without AVX-512 F/BW/DQ/VL whose OpenBLAS
/// runs `core`.
std::string betterOpenBlasCoreFor(bool avx512, llvm::StringRef core);

/// The core OpenBLAS runs (openblas_get_corename: "Haswell", "SkylakeX").
std::string openBlasCore();

/// True when this build contains the CUDA backend.
bool cudaBackendBuilt();

} // namespace headroom

#endif // HEADROOM_RUNTIME_DEVICES_H

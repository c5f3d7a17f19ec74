//===- CpuTarget.h - The CPU backend as lowering sees it ------------------===//
#ifndef HEADROOM_KERNELS_CPU_CPUTARGET_H
#define HEADROOM_KERNELS_CPU_CPUTARGET_H

#include "compiler/Target.h"

namespace headroom {

/// kernels/cpu: 64-byte alignment (a cache line, AVX-512's vector), the
/// scratch the kernels' workspace queries declare, a kernel for every op,
/// floats in the types each kernel registered (cpu::FloatSupport).
const Target &cpuTarget();

} // namespace headroom

#endif // HEADROOM_KERNELS_CPU_CPUTARGET_H

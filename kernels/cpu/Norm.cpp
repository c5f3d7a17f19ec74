//===- Norm.cpp - CPU kernels
//----------------------------------------------===//
#include "kernels/cpu/Kernel.h"

using namespace headroom;
using namespace headroom::cpu;

void headroom::cpu::registerNormKernels() {}

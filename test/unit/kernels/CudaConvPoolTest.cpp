//===- CudaConvPoolTest.cpp - (being written) ---===//
#include "CudaKernelTestUtil.h"

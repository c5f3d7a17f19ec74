//===- CudaReduceLossTest.cpp - (being written) ---===//
#include "CudaKernelTestUtil.h"

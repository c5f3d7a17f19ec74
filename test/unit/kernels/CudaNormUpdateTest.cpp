//===- CudaNormUpdateTest.cpp - (being written) ---===//
#include "CudaKernelTestUtil.h"

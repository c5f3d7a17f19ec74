//===- CudaLinalgTest.cpp - (being written) ---===//
#include "CudaKernelTestUtil.h"

//===- CudaShapeTest.cpp - (being written) ---===//
#include "CudaKernelTestUtil.h"

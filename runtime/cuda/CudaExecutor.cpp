//===- CudaExecutor.cpp - (being written) ---------------------------------===//

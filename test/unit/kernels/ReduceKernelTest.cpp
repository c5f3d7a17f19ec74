//===- ReduceKernelTest.cpp - Unit tests of kernels/cpu/Reduce.cpp ---===//
#include "kernels/cpu/Kernel.h"

#include <gtest/gtest.h>

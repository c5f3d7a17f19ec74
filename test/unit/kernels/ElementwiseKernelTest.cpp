//===- ElementwiseKernelTest.cpp - Unit tests of kernels/cpu/Elementwise.cpp ---===//
#include "kernels/cpu/Kernel.h"

#include <gtest/gtest.h>

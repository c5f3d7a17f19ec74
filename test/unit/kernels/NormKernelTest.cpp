//===- NormKernelTest.cpp - Unit tests of kernels/cpu/Norm.cpp ---===//
#include "kernels/cpu/Kernel.h"

#include <gtest/gtest.h>

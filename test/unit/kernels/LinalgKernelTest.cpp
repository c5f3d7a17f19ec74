//===- LinalgKernelTest.cpp - Unit tests of kernels/cpu/Linalg.cpp ---===//
#include "kernels/cpu/Kernel.h"

#include <gtest/gtest.h>

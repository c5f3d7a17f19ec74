//===- LossKernelTest.cpp - Unit tests of kernels/cpu/Loss.cpp ---===//
#include "kernels/cpu/Kernel.h"

#include <gtest/gtest.h>

//===- ConvPoolKernelTest.cpp - Unit tests of kernels/cpu/ConvPool.cpp ---===//
#include "kernels/cpu/Kernel.h"

#include <gtest/gtest.h>

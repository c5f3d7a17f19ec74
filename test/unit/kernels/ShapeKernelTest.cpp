//===- ShapeKernelTest.cpp - Unit tests of kernels/cpu/Shape.cpp ---===//
#include "kernels/cpu/Kernel.h"

#include <gtest/gtest.h>

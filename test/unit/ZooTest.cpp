//===- ZooTest.cpp - Zoo models import, verify and train ----------------===//
#include "compiler/Zoo.h"

#include <gtest/gtest.h>

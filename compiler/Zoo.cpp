//===- Zoo.cpp - Reference architectures as ONNX training graphs --------===//
#include "compiler/Zoo.h"

//===- Zoo.h - Reference architectures as ONNX training graphs ------------===//
#ifndef HEADROOM_COMPILER_ZOO_H
#define HEADROOM_COMPILER_ZOO_H
#endif // HEADROOM_COMPILER_ZOO_H

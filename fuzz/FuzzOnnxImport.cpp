//===- FuzzOnnxImport.cpp - libFuzzer target: the ONNX importer -----------===//
//
// Any bytes given as a model file: an imported module (which the importer
// verifies) or an error, never a crash, a leak or undefined behaviour. Both
// a training graph (scalar loss, a batch bound) and ONNX's node-test mode
// (every output) are tried.
//
//===----------------------------------------------------------------------===//
#include "compiler/OnnxImport.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  for (bool allOutputs : {false, true}) {
    headroom::ImportOptions options;
    options.Batch = 2;
    options.AllOutputs = allOutputs;
    // An empty model folder: external data must not reach the file system.
    auto m = headroom::importOnnxBuffer(bytes, "fuzz.onnx", "", options);
    if (!m)
      llvm::consumeError(m.takeError());
  }
  return 0;
}

//===- FuzzSafetensors.cpp - libFuzzer target: the safetensors reader -----===//
//
// Any bytes as a safetensors file (--lora-init reads PEFT's adapters so):
// tensors or an error, never a crash, and never an allocation larger than
// the data can fill.
//
//===----------------------------------------------------------------------===//
#include "runtime/Adapters.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  auto tensors = headroom::readSafetensors(bytes, "fuzz.safetensors");
  if (!tensors)
    llvm::consumeError(tensors.takeError());
  return 0;
}

//===- FuzzNpz.cpp - libFuzzer target: the .npz and .npy readers ----------===//
//
// Any bytes as an .npz archive and as one .npy file: arrays or an error,
// never a crash, and never an allocation larger than the data can fill.
//
//===----------------------------------------------------------------------===//
#include "runtime/Data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  auto arrays = headroom::readNpzBuffer(bytes, "fuzz.npz");
  if (!arrays)
    llvm::consumeError(arrays.takeError());
  auto one = headroom::readNpy(bytes, "fuzz.npy");
  if (!one)
    llvm::consumeError(one.takeError());
  return 0;
}

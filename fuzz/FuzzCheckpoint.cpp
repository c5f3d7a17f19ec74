//===- FuzzCheckpoint.cpp - libFuzzer target: the checkpoint reader -------===//
//
// Any bytes as a checkpoint: a verified checkpoint whose every slot lies
// inside the bytes, or an error, never a crash.
//
//===----------------------------------------------------------------------===//
#include "runtime/Checkpoint.h"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  auto c = headroom::parseCheckpoint(bytes, "fuzz.hrc");
  if (!c) {
    llvm::consumeError(c.takeError());
    return 0;
  }
  for (const headroom::CheckpointSlot &s : c->Slots)
    if (s.Bytes.begin() < bytes.begin() || s.Bytes.end() > bytes.end())
      std::abort();
  return 0;
}

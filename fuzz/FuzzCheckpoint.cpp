//===- FuzzCheckpoint.cpp - libFuzzer target: the checkpoint reader -------===//
//
// Any bytes as a checkpoint: a verified checkpoint whose every slot lies
// inside the bytes, or an error, never a crash. Mutations rarely keep the
// hashes right, so each input is also tried with the header's and every
// in-range slot's hashes recomputed: that reaches the checks of the
// header's fields.
//
//===----------------------------------------------------------------------===//
#include "runtime/Checkpoint.h"
#include "runtime/checkpoint.pb.h"

#include "llvm/Support/Endian.h"
#include "llvm/Support/xxhash.h"

#include <cstdlib>
#include <cstring>

using llvm::support::endian::read64le;
using llvm::support::endian::write64le;

static void readOne(llvm::StringRef bytes) {
  auto c = headroom::parseCheckpoint(bytes, "fuzz.hrc");
  if (!c) {
    llvm::consumeError(c.takeError());
    return;
  }
  for (const headroom::CheckpointSlot &s : c->Slots)
    if (s.Bytes.begin() < bytes.begin() || s.Bytes.end() > bytes.end())
      std::abort();
}

/// `bytes` with the trailer's header hash and the slots' chunk hashes made
/// right, or "" when there is no header to repair.
static std::string repairHashes(llvm::StringRef bytes) {
  constexpr size_t kTrailer = 32;
  if (bytes.size() < 64 + kTrailer)
    return "";
  const char *trailer = bytes.end() - kTrailer;
  uint64_t offset = read64le(trailer), length = read64le(trailer + 8);
  uint64_t end = bytes.size() - kTrailer;
  if (offset > end || length != end - offset)
    return "";
  headroom::checkpointfile::Checkpoint header;
  if (!header.ParseFromArray(bytes.data() + offset, int(length)))
    return "";
  uint64_t chunk = header.chunk_bytes();
  if (chunk < 4096 || chunk > (uint64_t(1) << 30))
    return "";
  for (auto &slot : *header.mutable_slots()) {
    if (slot.offset() > offset || slot.bytes() > offset - slot.offset())
      continue;
    llvm::StringRef data = bytes.substr(slot.offset(), slot.bytes());
    slot.clear_chunk_xxhash64();
    for (uint64_t at = 0; at < data.size(); at += chunk)
      slot.add_chunk_xxhash64(llvm::xxHash64(data.substr(at, chunk)));
  }
  std::string h = header.SerializeAsString();
  std::string out = bytes.take_front(offset).str() + h;
  char t[kTrailer];
  write64le(t, offset);
  write64le(t + 8, h.size());
  write64le(t + 16, llvm::xxHash64(h));
  std::memcpy(t + 24, trailer + 24, 8);
  return out + std::string(t, kTrailer);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  readOne(bytes);
  std::string repaired = repairHashes(bytes);
  if (!repaired.empty())
    readOne(repaired);
  return 0;
}

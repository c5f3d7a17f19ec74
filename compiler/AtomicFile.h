//===- AtomicFile.h - Files that appear whole or not at all ---------------===//
//
// Every file headroom writes for a user (trained models, plans, checkpoints,
// SVGs) goes through AtomicFile: the bytes go to a temporary file next to the
// destination, which is flushed to disk (fsync) and renamed over it, and the
// folder is synced so the rename itself survives a crash. A reader sees the
// old file or the new one, never a part of one, whatever moment the writer is
// killed at; a killed writer leaves at most a `NAME.tmp-XXXXXX` behind, which
// removeStaleTemporaries clears.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_ATOMICFILE_H
#define HEADROOM_COMPILER_ATOMICFILE_H

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace headroom {

class AtomicFile {
public:
  /// Opens a temporary file that commit() will rename to `path`.
  static llvm::Expected<AtomicFile> create(llvm::StringRef path);
  AtomicFile(AtomicFile &&other);
  AtomicFile &operator=(AtomicFile &&) = delete;
  /// Removes the temporary file unless committed.
  ~AtomicFile();

  /// Appends `bytes`.
  llvm::Error write(llvm::StringRef bytes);
  /// Bytes written so far through write().
  uint64_t size() const { return Size; }
  /// The temporary file's descriptor, for writers that need one (protobuf's
  /// SerializeToFileDescriptor, ftruncate); commit() still syncs and closes.
  int fd() const { return Fd; }
  /// Syncs the file, renames it to its destination and syncs the folder.
  llvm::Error commit();

private:
  AtomicFile() = default;
  llvm::Error fail(const llvm::Twine &what, std::error_code ec);
  std::string Path;
  llvm::SmallString<256> Temporary;
  int Fd = -1;
  uint64_t Size = 0;
};

/// Writes `bytes` to `path` atomically.
llvm::Error writeFileAtomically(llvm::StringRef path, llvm::StringRef bytes);

/// Removes the temporaries that writers of `path` killed before commit()
/// left behind (`path.tmp-*`).
void removeStaleTemporaries(llvm::StringRef path);

} // namespace headroom

#endif // HEADROOM_COMPILER_ATOMICFILE_H

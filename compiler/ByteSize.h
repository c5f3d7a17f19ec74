//===- ByteSize.h - Byte counts as people write them ----------------------===//
#ifndef HEADROOM_COMPILER_BYTESIZE_H
#define HEADROOM_COMPILER_BYTESIZE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace headroom {

/// "1.25 GiB" and friends.
std::string formatBytes(uint64_t bytes);

/// Parses a byte count: `123`, `512KiB`, `1.5GiB`, `24GB` (GB and G are
/// taken as GiB: memory is counted in powers of two here).
llvm::Expected<uint64_t> parseByteSize(llvm::StringRef text);

} // namespace headroom

#endif // HEADROOM_COMPILER_BYTESIZE_H

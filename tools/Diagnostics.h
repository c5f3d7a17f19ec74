//===- Diagnostics.h - How the command line reports a failure -------------===//
//
// Every failure a user can cause prints one line `headroom: error: ...` on
// stderr and makes the command exit with status 1.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_TOOLS_DIAGNOSTICS_H
#define HEADROOM_TOOLS_DIAGNOSTICS_H

#include "llvm/Support/Error.h"
#include "llvm/Support/WithColor.h"

namespace headroom {

/// Prints `e` as one error line; returns the exit status 1.
inline int reportError(llvm::Error e) {
  llvm::WithColor::error(llvm::errs(), "headroom")
      << llvm::toString(std::move(e)) << '\n';
  return 1;
}
inline int reportError(const llvm::Twine &msg) {
  return reportError(
      llvm::createStringError(llvm::inconvertibleErrorCode(), msg));
}

} // namespace headroom

#endif // HEADROOM_TOOLS_DIAGNOSTICS_H

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

/// In a data-parallel run, this process's rank when it is not rank 0: its
/// error lines say which rank failed.
inline int &errorRank() {
  static int rank = 0;
  return rank;
}

/// Prints `e` as one error line; returns the exit status 1.
inline int reportError(llvm::Error e) {
  llvm::WithColor::error(llvm::errs(), "headroom");
  if (errorRank() > 0)
    llvm::errs() << "rank " << errorRank() << ": ";
  llvm::errs() << llvm::toString(std::move(e)) << '\n';
  return 1;
}
inline int reportError(const llvm::Twine &msg) {
  return reportError(
      llvm::createStringError(llvm::inconvertibleErrorCode(), msg));
}

} // namespace headroom

#endif // HEADROOM_TOOLS_DIAGNOSTICS_H

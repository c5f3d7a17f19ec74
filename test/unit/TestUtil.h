//===- TestUtil.h - Helpers shared by the unit tests ----------------------===//
#ifndef HEADROOM_TEST_UNIT_TESTUTIL_H
#define HEADROOM_TEST_UNIT_TESTUTIL_H

#include "llvm/Support/Error.h"

#include <gtest/gtest.h>
#include <string>

namespace headroom {

/// The value of an Expected, or a test failure with the error's message.
template <typename T> T takeOrFail(llvm::Expected<T> e) {
  if (!e) {
    ADD_FAILURE() << llvm::toString(e.takeError());
    return T();
  }
  return std::move(*e);
}

/// The error message of a failed Expected/Error ("" when it succeeded).
template <typename T> std::string errorOf(llvm::Expected<T> e) {
  if (e)
    return "";
  return llvm::toString(e.takeError());
}
inline std::string errorOf(llvm::Error e) {
  return e ? llvm::toString(std::move(e)) : "";
}

inline std::string modelPath(const std::string &name) {
  return std::string(HEADROOM_SOURCE_DIR) + "/test/models/" + name;
}

} // namespace headroom

#endif // HEADROOM_TEST_UNIT_TESTUTIL_H

//===- Data.h - Training data: .npz archives and folders of .npy ----------===//
//
// One array per graph input, named like the input, leading dimension =
// samples. Step s of an epoch reads samples [s*B, (s+1)*B) of the epoch's
// order (the identity, or a permutation when shuffling).
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_RUNTIME_DATA_H
#define HEADROOM_RUNTIME_DATA_H

#include "compiler/IR.h"

#include "llvm/Support/Error.h"

#include <map>

namespace headroom {

struct Dataset {
  std::string Source;
  std::map<std::string, Tensor> Arrays;
  int64_t Samples = 0; // leading dimension shared by every array
};

/// Reads one .npy file (little-endian, C order; f16/f32/f64, signed and
/// unsigned integers, bool).
llvm::Expected<Tensor> readNpy(llvm::StringRef bytes, llvm::StringRef name);
/// Every array of the .npz archive in `bytes` (stored or deflated); `name`
/// starts every error message.
llvm::Expected<std::map<std::string, Tensor>>
readNpzBuffer(llvm::StringRef bytes, llvm::StringRef name);
/// Every array of a .npz archive (stored or deflated) or a folder of .npy
/// files, by name.
llvm::Expected<std::map<std::string, Tensor>> readArrays(llvm::StringRef path);
/// readArrays, checked to share a leading (sample) dimension.
llvm::Expected<Dataset> loadDataset(llvm::StringRef path);

/// Checks that `data` feeds `f`: an array per argument, with the argument's
/// element type and trailing dimensions, and at least `batch` samples
/// (the argument's leading dimension). Extra arrays are ignored.
llvm::Error checkDataset(const Dataset &data, const Function &f);
/// The same check against named argument types (a plan's function).
llvm::Error checkDataset(const Dataset &data, llvm::ArrayRef<std::string> names,
                         llvm::ArrayRef<TensorType> types);

/// Rows `order[start .. start+count)` of `t` (its leading dimension).
Tensor gatherRows(const Tensor &t, llvm::ArrayRef<int64_t> order, int64_t start,
                  int64_t count);

/// Writes a .npy file's bytes (for tests and tools).
std::string writeNpy(const Tensor &t);

} // namespace headroom

#endif // HEADROOM_RUNTIME_DATA_H

//===- ModelIO.h - Initial weights in, trained model out ------------------===//
#ifndef HEADROOM_RUNTIME_MODELIO_H
#define HEADROOM_RUNTIME_MODELIO_H

#include "compiler/AtomicFile.h"
#include "runtime/Executor.h"

#include <map>

namespace headroom {

/// Writes each state slot that has an initializer of the same name in the
/// ONNX model at `modelPath` (weights, frozen weights, buffers) into `exec`.
/// Returns the number of slots loaded.
llvm::Expected<unsigned> loadInitialState(Executor &exec,
                                          llvm::StringRef modelPath);

/// Writes the model at `modelPath` to `outPath` with every initializer that
/// is a state slot replaced by the slot's current value (or by its entry in
/// `overrides`: LoRA's merged weights), atomically (a temporary file in the
/// same folder, then rename).
llvm::Error
saveTrainedModel(const Executor &exec, llvm::StringRef modelPath,
                 llvm::StringRef outPath,
                 const std::map<std::string, Tensor> *overrides = nullptr);

} // namespace headroom

#endif // HEADROOM_RUNTIME_MODELIO_H

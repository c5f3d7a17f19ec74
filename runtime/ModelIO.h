//===- ModelIO.h - Initial weights in, trained model out ------------------===//
#ifndef HEADROOM_RUNTIME_MODELIO_H
#define HEADROOM_RUNTIME_MODELIO_H

#include "compiler/AtomicFile.h"
#include "runtime/Executor.h"

#include <map>

namespace headroom {

/// Writes each state slot that has an initializer of the same name in the
/// ONNX model at `modelPath` (weights, frozen weights, buffers) into `exec`;
/// an NF4 weight's four slots (StateInit::Nf4) get the initializer
/// quantized (kernels/cpu/Nf4.h). Returns the number of slots written.
llvm::Expected<unsigned> loadInitialState(Executor &exec,
                                          llvm::StringRef modelPath);

/// Writes the model at `modelPath` to `outPath` with every initializer that
/// is a state slot replaced by the slot's current value (or by its entry in
/// `overrides`: LoRA's merged weights), atomically (a temporary file in the
/// same folder, then rename).
/// Weight `name` of shape `shape` as the model holds it: its state slot, or
/// for an NF4 weight its four slots dequantized to f32.
llvm::Expected<Tensor> readWeight(const Executor &exec, llvm::StringRef name,
                                  llvm::ArrayRef<int64_t> shape);

llvm::Error
saveTrainedModel(const Executor &exec, llvm::StringRef modelPath,
                 llvm::StringRef outPath,
                 const std::map<std::string, Tensor> *overrides = nullptr);

} // namespace headroom

#endif // HEADROOM_RUNTIME_MODELIO_H

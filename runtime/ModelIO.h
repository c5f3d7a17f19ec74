//===- ModelIO.h - Initial weights in, trained model out ------------------===//
#ifndef HEADROOM_RUNTIME_MODELIO_H
#define HEADROOM_RUNTIME_MODELIO_H

#include "compiler/AtomicFile.h"
#include "runtime/Executor.h"

#include <map>

namespace headroom {

class Communicator;

/// Writes each state slot that has an initializer of the same name in the
/// ONNX model at `modelPath` (weights, frozen weights, buffers) into `exec`;
/// an NF4 weight's four slots (StateInit::Nf4) get the initializer
/// quantized (kernels/common/Nf4.h). A sharded slot (data parallelism) gets
/// rank `rank`'s shard of it, a replica the whole. Returns the number of
/// slots written.
llvm::Expected<unsigned>
loadInitialState(Executor &exec, llvm::StringRef modelPath, unsigned rank = 0);

/// Rank `rank`'s shard of `whole` over `ranks` ranks (compiler/IR.h
/// shardElements): its elements flattened, zero past the end.
Tensor shardOf(const Tensor &whole, unsigned rank, unsigned ranks);

/// State slot `name` whole: a sharded slot is gathered from every rank (all
/// of them call it, in the same order), with its whole type; others are
/// read as they are.
llvm::Expected<Tensor> readWholeState(const Executor &exec, Communicator *comm,
                                      llvm::StringRef name);

/// Writes the model at `modelPath` to `outPath` with every initializer that
/// is a state slot replaced by the slot's current value (or by its entry in
/// `overrides`: LoRA's merged weights), atomically (a temporary file in the
/// same folder, then rename).
/// Weight `name` of shape `shape` as the model holds it: its state slot, or
/// for an NF4 weight its four slots dequantized to f32.
/// With `comm`, sharded slots are gathered (every rank calls it).
llvm::Expected<Tensor> readWeight(const Executor &exec, llvm::StringRef name,
                                  llvm::ArrayRef<int64_t> shape,
                                  Communicator *comm = nullptr);

/// With `comm` (data parallelism) every rank calls it and rank 0 writes.
llvm::Error
saveTrainedModel(const Executor &exec, llvm::StringRef modelPath,
                 llvm::StringRef outPath,
                 const std::map<std::string, Tensor> *overrides = nullptr,
                 Communicator *comm = nullptr);

} // namespace headroom

#endif // HEADROOM_RUNTIME_MODELIO_H

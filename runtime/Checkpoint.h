//===- Checkpoint.h - Training that resumes exactly -----------------------===//
//
// A checkpoint is everything a training run needs to continue as if it had
// never stopped: every state slot of the plan (parameters, frozen weights,
// buffers such as BatchNorm statistics, optimizer moments and step counters,
// gradient accumulators, the dynamic loss scale) byte for byte, the number
// of optimizer steps done (the data position follows from it), the random
// step (Dropout's masks), and the seeds. `headroom train/run --checkpoint
// DIR` writes DIR/checkpoint.hrc atomically (compiler/AtomicFile.h: the
// previous checkpoint stays valid until the new one is complete and on
// disk); `--resume DIR` reads it back, so that a run killed at any moment and
// resumed ends with the weights of a run never interrupted.
//
// The file (docs/checkpoint.md): a 64-byte preamble (magic, format version),
// each slot's raw bytes at a 64-byte aligned offset, the header
// (runtime/checkpoint.proto) and a 32-byte trailer giving the header's place,
// its xxHash64 and an end mark. Every slot carries an xxHash64 per 16 MiB
// chunk. Reading checks all of it -- sizes, offsets, overlaps, hashes, that
// the slots are the plan's -- before a byte reaches the executor: a corrupt,
// truncated or foreign file is one error line, never a crash or a partly
// restored state.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_RUNTIME_CHECKPOINT_H
#define HEADROOM_RUNTIME_CHECKPOINT_H

#include "runtime/Executor.h"

#include "llvm/Support/MemoryBuffer.h"

namespace headroom {

/// Bump with any change that an older headroom would misread.
constexpr uint32_t kCheckpointFormatVersion = 1;

/// What a checkpoint says besides the state bytes.
struct CheckpointInfo {
  std::string PlanSha256;  // planFingerprint of the plan that wrote it
  std::string ModelPath;   // the source model (initial weights)
  std::string ModelSha256; // of its bytes
  int64_t Step = 0;        // optimizer steps completed
  uint64_t RandomStep = 0; // micro-batches consumed (Trainer::randomStep)
  uint64_t Seed = 0;       // --seed (Dropout)
  int64_t Shuffle = -1;    // --shuffle SEED; -1: none
  int64_t DataSamples = 0; // samples of the data the step indexes
  std::string DataPath;
};

/// Which rank's part of a data-parallel run's checkpoint a file holds.
/// With several ranks, each writes its own file (its shards and its copy of
/// the rest), named by step and rank, and rank 0 then writes the manifest
/// DIR/checkpoint.hrm naming the step every rank's file is complete for:
/// a rank killed while writing leaves the previous step's files and
/// manifest in place (docs/distributed.md).
struct CheckpointRank {
  unsigned Rank = 0, Ranks = 1;
};

/// The checkpoint file of a checkpoint folder: DIR/checkpoint.hrc, or with
/// several ranks DIR/checkpoint.step<S>.rank<R>-of-<N>.hrc.
std::string checkpointPath(llvm::StringRef dir, CheckpointRank rank = {},
                           int64_t step = 0);

/// Writes `info` and every state slot of `exec` to `dir`'s checkpoint
/// (creating the folder), atomically, streaming the state through a 16 MiB
/// buffer. With several ranks: this rank's file for step info.Step.
llvm::Error writeCheckpoint(llvm::StringRef dir, const CheckpointInfo &info,
                            const Executor &exec, CheckpointRank rank = {});

/// The manifest of a data-parallel checkpoint: every rank's file for
/// `step` is written (rank 0 writes it after they all are, atomically).
llvm::Error writeCheckpointManifest(llvm::StringRef dir, int64_t step,
                                    unsigned ranks);
/// Removes this rank's files of steps other than `step` (after the
/// manifest names it), and the temporaries a killed run of it left (only
/// those with `temporariesOnly`).
void removeOtherSteps(llvm::StringRef dir, CheckpointRank rank, int64_t step,
                      bool temporariesOnly = false);

struct CheckpointSlot {
  std::string Name;
  std::string Type; // TensorType::str()
  llvm::StringRef Bytes;
};

struct ParsedCheckpoint {
  CheckpointInfo Info;
  std::vector<CheckpointSlot> Slots; // Bytes point into the parsed bytes
};

/// Parses and verifies the bytes of a checkpoint file (every hash); `name`
/// starts every error message.
llvm::Expected<ParsedCheckpoint> parseCheckpoint(llvm::StringRef bytes,
                                                 llvm::StringRef name);

/// A checkpoint read from disk (mapped, not copied).
struct LoadedCheckpoint {
  std::unique_ptr<llvm::MemoryBuffer> File;
  ParsedCheckpoint Parsed;
};
/// With several ranks, this rank's file of the step the manifest names; a
/// checkpoint written by another number of ranks is an error saying so.
llvm::Expected<LoadedCheckpoint> readCheckpoint(llvm::StringRef dir,
                                                CheckpointRank rank = {});

/// Fails, naming the difference, when a run described by `now` cannot
/// continue the checkpoint `saved` (from `dir`): another plan or model,
/// other seeds, data of another size.
llvm::Error checkResumable(const CheckpointInfo &saved,
                           const CheckpointInfo &now, llvm::StringRef dir);

/// Writes the checkpoint's slots into `exec`, after checking that they are
/// exactly the plan's state slots (names, types, order). Nothing is written
/// when they are not.
llvm::Error restoreState(const ParsedCheckpoint &c, Executor &exec,
                         llvm::StringRef dir);

} // namespace headroom

#endif // HEADROOM_RUNTIME_CHECKPOINT_H

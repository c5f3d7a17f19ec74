//===- Zoo.h - Reference architectures as ONNX training graphs ------------===//
//
// Writes GPT-2 and LLaMA causal language models as ONNX training graphs
// (opset 17, default domain, loss inside), with the op patterns that
// torch.onnx.export writes for them: what `headroom zoo` does. Inputs are
// `input_ids` and `targets`, i64[batch, seq] with a symbolic batch; the output
// is the scalar `loss`. Initializers carry Hugging Face's parameter names.
//
// Weights are either drawn here (deterministic from a seed) or left out:
// every initializer then points into one sparse side file that is never
// written, so a 7B-parameter graph can be imported, compiled and reported
// without its 27 GB of weights (training it would read zeros).
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_ZOO_H
#define HEADROOM_COMPILER_ZOO_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <string>

namespace headroom {

struct ZooConfig {
  /// `random`: float32 initializers in the model; `none`: external data in a
  /// sparse side file (zeros if read).
  enum class Weights { Random, None };

  std::string Arch; // gpt2 | llama
  int64_t Layers = 0, DModel = 0, Heads = 0, Ffn = 0, Vocab = 0, Seq = 0;
  /// llama's key/value heads (grouped-query attention, as Llama 3 and
  /// Mistral): 0 means Heads. k_proj and v_proj map to KvHeads heads, each
  /// shared by Heads / KvHeads query heads (transformers' repeat_kv).
  int64_t KvHeads = 0;
  int64_t kvHeads() const { return KvHeads ? KvHeads : Heads; }
  /// llama's rotary embedding base (10000; Llama 3: 500000).
  double RopeTheta = 10000;
  Weights Weights = Weights::Random;
  /// Seeds the N(0, 0.02) draw of matrices and embeddings.
  uint64_t Seed = 0;
};

/// The architecture's defaults: gpt2 is GPT-2 small (124M), llama is
/// LLaMA-7B at sequence length 512; the presets (zooPresets()) are llama
/// with a published model's sizes at its context length. Fails for an
/// unknown name.
llvm::Expected<ZooConfig> defaultZooConfig(llvm::StringRef arch);

/// The preset names defaultZooConfig takes besides gpt2 and llama, with
/// what each is: llama2-7b, llama2-13b, llama2-70b, llama-65b, llama3.1-8b.
llvm::ArrayRef<std::pair<const char *, const char *>> zooPresets();

/// Checks sizes (positive, d_model divisible by heads, heads by kv heads
/// (llama only), an even head dimension
/// for llama's rotary embedding, a size that fits in 64 bits and, for random
/// weights, in one protobuf).
llvm::Error validateZooConfig(const ZooConfig &config);

/// Trainable parameters (elements of all initializers) of a valid config.
int64_t zooParameterCount(const ZooConfig &config);

struct ZooSummary {
  int64_t Parameters = 0;
  uint64_t ParameterBytes = 0;
  int64_t Nodes = 0;
  std::map<std::string, int64_t> OpCounts; // op type -> nodes
  std::string ModelPath;
  std::string DataPath;   // the sparse side file ("" for random weights)
  uint64_t DataBytes = 0; // its apparent size (4096-aligned tensors)
};

/// Builds the graph of `config` and writes it to `outPath` atomically (a
/// temporary file in the same folder, then rename); with Weights::None also
/// `outPath` + ".data", sparse.
llvm::Expected<ZooSummary> writeZooModel(const ZooConfig &config,
                                         llvm::StringRef outPath);

} // namespace headroom

#endif // HEADROOM_COMPILER_ZOO_H

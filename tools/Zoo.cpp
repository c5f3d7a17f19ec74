//===- Zoo.cpp - `headroom zoo` ------------------------------------------===//
//
// Writes a reference architecture as an ONNX training graph (compiler/Zoo.h):
//
//   headroom zoo gpt2|llama|PRESET [--layers N --d-model N --heads N --kv-heads
//   N
//                --ffn N --vocab N --seq N] [--weights random|none] [--seed S]
//                -o OUT.onnx
//
// Sizes default to the architecture's (GPT-2 small, LLaMA-7B) or the preset's
// (llama2-7b, llama2-13b, llama2-70b, llama-65b, llama3.1-8b). Prints one
// summary line; a mistake prints one `headroom: error:` line and returns 1.
//
//===----------------------------------------------------------------------===//
#include "compiler/Zoo.h"

#include "runtime/Report.h"

#include "tools/Diagnostics.h"
#include "tools/Flags.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

using namespace headroom;
namespace cl = llvm::cl;

extern cl::SubCommand ZooCmd;

static cl::opt<std::string> Arch(cl::Positional,
                                 cl::desc("<gpt2|llama|llama2-7b|llama2-13b|"
                                          "llama2-70b|llama-65b|llama3.1-8b>"),
                                 cl::Required, cl::sub(ZooCmd));
static cl::opt<int64_t> Layers("layers",
                               cl::desc("Transformer blocks (gpt2 12, llama "
                                        "32)"),
                               cl::sub(ZooCmd), cl::cat(modelFlags()));
static cl::opt<int64_t> DModel("d-model",
                               cl::desc("Hidden size (gpt2 768, llama 4096)"),
                               cl::sub(ZooCmd), cl::cat(modelFlags()));
static cl::opt<int64_t> Heads("heads",
                              cl::desc("Attention heads (gpt2 12, llama 32)"),
                              cl::sub(ZooCmd), cl::cat(modelFlags()));
static cl::opt<int64_t>
    KvHeads("kv-heads",
            cl::desc("llama: key/value heads, each shared by heads / "
                     "kv-heads query heads (default: --heads)"),
            cl::sub(ZooCmd), cl::cat(modelFlags()));
static cl::opt<int64_t> Ffn("ffn",
                            cl::desc("MLP hidden size (gpt2 3072, llama "
                                     "11008)"),
                            cl::sub(ZooCmd), cl::cat(modelFlags()));
static cl::opt<int64_t> Vocab("vocab",
                              cl::desc("Vocabulary (gpt2 50257, llama 32000)"),
                              cl::sub(ZooCmd), cl::cat(modelFlags()));
static cl::opt<int64_t> Seq("seq",
                            cl::desc("Sequence length (gpt2 1024, llama 512)"),
                            cl::sub(ZooCmd), cl::cat(modelFlags()));
static cl::opt<std::string>
    WeightsFlag("weights",
                cl::desc("random: N(0, 0.02) weights in the model; none: "
                         "external data in a sparse OUT.onnx.data that is "
                         "never written (compile and report only)"),
                cl::value_desc("random|none"), cl::init("random"),
                cl::sub(ZooCmd), cl::cat(modelFlags()));
static cl::opt<uint64_t> Seed("seed", cl::desc("Seed of the random weights"),
                              cl::init(0), cl::sub(ZooCmd),
                              cl::cat(modelFlags()));
static cl::opt<std::string> Output("o", cl::desc("Output model"),
                                   cl::value_desc("OUT.onnx"), cl::Required,
                                   cl::sub(ZooCmd), cl::cat(modelFlags()));

/// The architecture's defaults, overridden by the flags that were given.
static llvm::Expected<ZooConfig> configFromFlags() {
  auto config = defaultZooConfig(Arch);
  if (!config)
    return config.takeError();
  std::pair<cl::opt<int64_t> *, int64_t *> sizes[] = {
      {&Layers, &config->Layers},  {&DModel, &config->DModel},
      {&Heads, &config->Heads},    {&Ffn, &config->Ffn},
      {&Vocab, &config->Vocab},    {&Seq, &config->Seq},
      {&KvHeads, &config->KvHeads}};
  for (auto [flag, field] : sizes)
    if (flag->getNumOccurrences())
      *field = *flag;
  if (WeightsFlag == "random")
    config->Weights = ZooConfig::Weights::Random;
  else if (WeightsFlag == "none")
    config->Weights = ZooConfig::Weights::None;
  else
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--weights %s: expected random or none",
                                   WeightsFlag.c_str());
  config->Seed = Seed;
  return config;
}

int runZoo() {
  auto config = configFromFlags();
  if (!config)
    return reportError(config.takeError());
  auto summary = writeZooModel(*config, Output);
  if (!summary)
    return reportError(summary.takeError());
  llvm::outs() << "wrote " << summary->ModelPath << ": " << config->Arch << ", "
               << config->Layers << " layers, " << summary->Parameters
               << " parameters (" << formatBytes(summary->ParameterBytes)
               << "), " << summary->Nodes << " nodes";
  if (summary->DataPath.empty())
    llvm::outs() << ", random weights (seed " << config->Seed << ")\n";
  else
    llvm::outs() << ", weights: " << summary->DataPath << " ("
                 << formatBytes(summary->DataBytes)
                 << " sparse, not written)\n";
  return 0;
}

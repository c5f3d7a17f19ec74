//===- Adapters.h - LoRA adapters in and out, as PEFT has them ------------===//
//
// A plan trained with --lora (passes/Lora.cpp) lists its adapters
// (Plan::Adapters). What leaves the run is what Hugging Face PEFT reads:
//
//   saveAdapter   DIR/adapter_config.json and DIR/adapter_model.safetensors:
//                 the keys base_model.model.<module>.lora_A.weight [r, in]
//                 and .lora_B.weight [out, r] in the adapters' element type,
//                 the config's r, lora_alpha, lora_dropout, target_modules
//                 (the adapted modules' last names), fan_in_fan_out (a base
//                 stored [in, out]), bias "none". Loadable by
//                 peft.PeftModel.from_pretrained on the matching model.
//   loadAdapter   the same files back into the adapters' slots (--lora-init):
//                 every adapter's A and B must be there with its shape.
//   mergedWeights each adapted base as W + (alpha / r) B A in the base's
//                 layout, for `--save` (PEFT's merge_and_unload).
//
// safetensors is read and written here (an 8-byte little-endian header
// size, a JSON header of dtype, shape and data offsets, the raw bytes);
// files are written atomically.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_RUNTIME_ADAPTERS_H
#define HEADROOM_RUNTIME_ADAPTERS_H

#include "runtime/Executor.h"

#include <map>

namespace headroom {

llvm::Error saveAdapter(const Executor &exec, llvm::StringRef dir);
llvm::Error loadAdapter(Executor &exec, llvm::StringRef dir);
llvm::Expected<std::map<std::string, Tensor>>
mergedWeights(const Executor &exec);

/// safetensors: tensors by name (keys sorted), and the file read back.
std::string writeSafetensors(const std::map<std::string, Tensor> &tensors);
llvm::Expected<std::map<std::string, Tensor>>
readSafetensors(llvm::StringRef bytes, llvm::StringRef what);

} // namespace headroom

#endif // HEADROOM_RUNTIME_ADAPTERS_H

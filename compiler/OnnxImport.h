//===- OnnxImport.h - ONNX model -> IR ------------------------------------===//
//
// Imports a ModelProto whose graph computes a scalar loss into a Module with
// one function, @forward, whose arguments are the model's data inputs and
// which returns the loss. Float initializers become state (`param`, or
// `frozen` when named by ImportOptions::Freeze); other initializers become
// Constant nodes. Every shape is made static: dynamic input dimensions are
// bound by Batch / Shapes, then ONNX's shape inference runs, and where it
// gives up (integer Div, Range lengths) compiler/ConstantFolding.h evaluates
// the shape arithmetic and inference runs again. ONNX function ops that are not
// headroom primitives (compiler/Ops.def) are expanded into their bodies.
//
// Initializers stored as external data are never read: their shapes come from
// the TensorProto, so a model with 13 GB of weights imports in milliseconds.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_ONNXIMPORT_H
#define HEADROOM_COMPILER_ONNXIMPORT_H

#include "compiler/IR.h"

#include "llvm/Support/Error.h"

#include <map>

namespace headroom {

struct ImportOptions {
  /// Binds the leading dimension of every data input (0: not given).
  int64_t Batch = 0;
  /// Full shapes of named inputs (`--shape x=4x128`).
  std::map<std::string, std::vector<int64_t>> Shapes;
  /// Float initializers to keep constant (`--freeze a,b`).
  std::vector<std::string> Freeze;
  /// Return every graph output instead of requiring a scalar loss (for
  /// graphs that are not training graphs, such as ONNX's node tests).
  bool AllOutputs = false;
  /// Data inputs whose values are known at compile time: they become
  /// constants, so shapes computed from them are static (ONNX's node tests
  /// feed Reshape's target shape as an input, for one).
  std::map<std::string, Tensor> ConstantInputs;
};

/// The opsets headroom reads: kMaxOpset is the newest that the ONNX library
/// it is built with knows (1.19: 24). headroom's IR ops mean what ONNX's ops
/// mean at kIrOpset; a model at another opset is accepted node by node
/// (opVersionProblem): an op version in effect between kMinOpset and
/// kIrOpset, one whose contract differs from kIrOpset's only in element
/// types, or a newer one the importer rewrites (ReduceMean-18's axes
/// operand, Split-18's num_outputs, ...). Older opsets are accepted where
/// every op used is unchanged since then (Sin-7 is still Sin at 17;
/// ReduceSum-11 is not ReduceSum-13).
constexpr int kMinOpset = 13;
constexpr int kIrOpset = 17;
constexpr int kMaxOpset = 24;

/// Why a node of default-domain op `op` in a model at `opset` cannot be
/// imported because of the op's version there ("" when it can). Ops that are
/// not IR ops are expanded from ONNX's function body for that opset and are
/// never refused here.
std::string opVersionProblem(llvm::StringRef op, int opset);

llvm::Expected<std::unique_ptr<Module>>
importOnnxFile(llvm::StringRef path, const ImportOptions &options = {});

/// Imports from bytes already in memory; `modelDir` resolves external data.
llvm::Expected<std::unique_ptr<Module>>
importOnnxBuffer(llvm::StringRef bytes, llvm::StringRef name,
                 llvm::StringRef modelDir, const ImportOptions &options = {});

/// ONNX ops that are not IR ops but that the importer itself unrolls into
/// them (LSTM, GRU and RNN over their static sequence length).
bool importerExpandsOp(llvm::StringRef op);

/// Reads a serialized TensorProto (ONNX's node-test .pb files).
llvm::Expected<Tensor> readTensorProtoFile(llvm::StringRef path);

/// Parses `4x128` (or `scalar`) into dimensions.
llvm::Expected<std::vector<int64_t>> parseShapeSpec(llvm::StringRef spec);

} // namespace headroom

#endif // HEADROOM_COMPILER_ONNXIMPORT_H

//===- OnnxTensor.h - ONNX TensorProto <-> Tensor -------------------------===//
//
// Shared by the importer (constants, initializer shapes) and the runtime
// (loading initial weights, saving trained ones). External data is read from
// the model's directory only when a tensor's bytes are asked for.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_ONNXTENSOR_H
#define HEADROOM_COMPILER_ONNXTENSOR_H

#include "compiler/Types.h"

#include "llvm/Support/Error.h"

#include <onnx/onnx_pb.h>

namespace headroom {

bool isExternal(const onnx::TensorProto &t);
/// The tensor's type, from its dims and data_type (no data is read).
llvm::Expected<TensorType> tensorProtoType(const onnx::TensorProto &t);
/// The tensor's value; external data is read relative to `modelDir`.
llvm::Expected<Tensor> tensorFromProto(const onnx::TensorProto &t,
                                       llvm::StringRef modelDir);
/// Where an external-data tensor's bytes are: a file inside `modelDir` (an
/// absolute location, `..` or a symbolic link leading out is refused), with
/// the offset and byte count checked against the tensor's type and the
/// file's size. No data is read.
struct ExternalSpan {
  std::string Path;
  uint64_t Offset = 0, Size = 0;
};
llvm::Expected<ExternalSpan> externalDataSpan(const onnx::TensorProto &t,
                                              llvm::StringRef modelDir);
/// A TensorProto holding `t` as raw_data.
onnx::TensorProto tensorToProto(const Tensor &t, const std::string &name);

} // namespace headroom

#endif // HEADROOM_COMPILER_ONNXTENSOR_H

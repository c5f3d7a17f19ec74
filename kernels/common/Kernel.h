//===- Kernel.h - The kernel interface both backends share ------*- C++ -*-===//
//
// What a kernel of either backend is called with: views of the buffers the
// executor owns (host memory on the CPU, device addresses on cuda), the
// node's attributes and constant operands, the seed of random ops and the
// planned scratch. kernels/cpu/Kernel.h registers and runs CPU kernels over
// it; kernels/cuda/Kernel.h extends it with the stream and cuBLASLt.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_COMMON_KERNEL_H
#define HEADROOM_KERNELS_COMMON_KERNEL_H

#include "compiler/Attribute.h"
#include "compiler/OpInfo.h"

#include "llvm/Support/Error.h"

#include <cstdint>

namespace headroom {
class Tensor;
namespace kernels {

/// A typed view of a buffer. Data is null for an absent optional input.
struct TensorView {
  DType Type = DType::F32;
  llvm::ArrayRef<int64_t> Shape;
  void *Data = nullptr;

  bool present() const { return Data != nullptr; }
  unsigned rank() const { return Shape.size(); }
  int64_t numElements() const {
    int64_t n = 1;
    for (int64_t d : Shape)
      n *= d;
    return n;
  }
  uint64_t sizeInBytes() const { return numElements() * dtypeSize(Type); }
  template <typename T> T *as() const { return static_cast<T *>(Data); }
  TensorType type() const { return TensorType(Type, Shape); }
};

struct KernelContext {
  llvm::StringRef Op;
  llvm::ArrayRef<TensorView> Inputs;
  llvm::ArrayRef<TensorView> Outputs;
  const AttributeMap &Attrs;
  /// Seed for random ops: fixed per (run seed, step, node), so a step can be
  /// replayed exactly.
  uint64_t Seed = 0;
  /// Scratch the executor planned for this call (a backend's workspace
  /// query, e.g. kernels/cpu/Kernel.h WorkspaceFn), or null.
  void *Workspace = nullptr;
  uint64_t WorkspaceBytes = 0;
  /// Whether the views' Data are host memory (the CPU backend); a device
  /// backend reads shape operands (Slice's starts, ...) from Constants.
  bool HostData = true;
  /// Per input: the host tensor of a constant operand, else null (or none).
  llvm::ArrayRef<const Tensor *> Constants = {};

  int64_t attrInt(llvm::StringRef name, int64_t dflt) const;
  double attrFloat(llvm::StringRef name, double dflt) const;
  std::string attrString(llvm::StringRef name, llvm::StringRef dflt) const;
  std::vector<int64_t> attrInts(llvm::StringRef name,
                                std::vector<int64_t> dflt = {}) const;
  const Attribute *attr(llvm::StringRef name) const;
  bool hasInput(unsigned i) const {
    return i < Inputs.size() && Inputs[i].present();
  }
  /// An error naming the op: "Conv: <msg>".
  llvm::Error unsupported(const llvm::Twine &msg) const;
};

/// Dispatches on a float element type (f32 or f64) to fn<float>/fn<double>;
/// other types are an "unsupported element type" error.
#define HR_DISPATCH_FLOAT(ctx, dtype, FN, ...)                                 \
  ((dtype) == DType::F32 ? FN<float>(__VA_ARGS__)                              \
   : (dtype) == DType::F64                                                     \
       ? FN<double>(__VA_ARGS__)                                               \
       : (ctx).unsupported("element type " + dtypeName(dtype) +                \
                           " is not supported"))

} // namespace kernels
} // namespace headroom

#endif // HEADROOM_KERNELS_COMMON_KERNEL_H

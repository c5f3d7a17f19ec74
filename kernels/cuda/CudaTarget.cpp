//===- CudaTarget.cpp - The CUDA backend as lowering sees it --------------===//
//
// The op list is the CUDA backend's contract, family by family: a node
// outside it, or a float that is not f32 or f64 (the optimizer's step counter),
// is refused when the plan is made. Matmuls go through cuBLASLt, whose
// workspace is the library bytes; the project's own kernels (convolution and
// pooling included) take no per-call scratch.
//
//===----------------------------------------------------------------------===//
#include "kernels/cuda/CudaTarget.h"

#include <algorithm>

using namespace headroom;

namespace {

constexpr OpKind kCudaOps[] = {
    // Elementwise, with broadcasting.
    OpKind::Abs, OpKind::Neg, OpKind::Exp, OpKind::Log, OpKind::Sqrt,
    OpKind::Reciprocal, OpKind::Tanh, OpKind::Sigmoid, OpKind::Relu,
    OpKind::LeakyRelu, OpKind::Clip, OpKind::HardSigmoid, OpKind::Erf,
    OpKind::Sin, OpKind::Cos, OpKind::Floor, OpKind::Ceil, OpKind::Not,
    OpKind::Identity, OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div,
    OpKind::Pow, OpKind::Max, OpKind::Min, OpKind::Sum, OpKind::Equal,
    OpKind::Less, OpKind::LessOrEqual, OpKind::Greater, OpKind::GreaterOrEqual,
    OpKind::And, OpKind::Or, OpKind::Where, OpKind::Cast, OpKind::Dropout,
    // Matmuls (cuBLASLt).
    OpKind::Gemm, OpKind::MatMul,
    // Reductions, softmax, norms and losses, with their gradients.
    OpKind::ReduceMean, OpKind::ReduceSum, OpKind::ReduceMax, OpKind::ReduceMin,
    OpKind::ReduceProd, OpKind::ArgMax, OpKind::Softmax, OpKind::LogSoftmax,
    OpKind::SoftmaxCrossEntropyLoss, OpKind::SoftmaxCrossEntropyLossGrad,
    OpKind::NegativeLogLikelihoodLoss, OpKind::LayerNormalization,
    OpKind::LayerNormalizationGrad, OpKind::BatchNormalization,
    OpKind::BatchNormalizationGrad,
    // Convolution and pooling (the project's kernels).
    OpKind::Conv, OpKind::ConvGradInput, OpKind::ConvGradWeight,
    OpKind::MaxPool, OpKind::MaxPoolGrad, OpKind::AveragePool,
    OpKind::AveragePoolGrad, OpKind::GlobalAveragePool,
    // Data movement.
    OpKind::Reshape, OpKind::Transpose, OpKind::Squeeze, OpKind::Unsqueeze,
    OpKind::Flatten, OpKind::Concat, OpKind::Split, OpKind::Slice,
    OpKind::SliceGrad, OpKind::Gather, OpKind::GatherGrad,
    OpKind::GatherElements, OpKind::GatherElementsGrad, OpKind::ScatterElements,
    OpKind::GatherND, OpKind::ScatterND, OpKind::Expand, OpKind::Tile,
    OpKind::Pad, OpKind::Trilu,
    // Fills (a causal mask's ones, position ids) canonicalize leaves when
    // they are large.
    OpKind::ConstantOfShape, OpKind::Range,
    // Updates.
    OpKind::SgdUpdate, OpKind::Accumulate};

class CudaTarget : public Target {
public:
  llvm::StringRef name() const override { return "cuda"; }
  uint64_t alignment() const override { return 256; }
  uint64_t libraryBytes() const override { return kCublasLtWorkspaceBytes; }

  llvm::Error checkSupported(const Node &n) const override {
    if (runByExecutor(n))
      return llvm::Error::success();
    if (!llvm::is_contained(kCudaOps, n.kind()))
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "has no kernel for op '%s'",
                                     n.op().c_str());
    // f32, bf16 and f16 everywhere; f64 only elementwise (the optimizers'
    // step counters and bias corrections).
    if (n.info()->has(opflags::Elementwise) || n.is(OpKind::Cast))
      return checkFloatTypes(n,
                             {DType::F32, DType::BF16, DType::F16, DType::F64});
    return checkFloatTypes(n, {DType::F32, DType::BF16, DType::F16});
  }
};

} // namespace

const Target &headroom::cudaTarget() {
  static const CudaTarget target;
  return target;
}

//===- AttentionShape.h - FusedAttention's shape rule -----------*- C++ -*-===//
//
// FusedAttention(q, k, v, bias?) -> (out, lse) computes softmax(scale q kT +
// bias, causal) v without the [.., Sq, Sk] scores (docs/attention.md):
//
//   q [batch.., H, Sq, D]   k [batch.., Hkv, Sk, D]   v [batch.., Hkv, Sk, Dv]
//   bias: broadcasts to [batch.., H, Sq, Sk] (rank <= q's)
//   out [batch.., H, Sq, Dv] (q's type)   lse [batch.., H, Sq] (f32; f64
//   for f64 q): the log-sum-exp of each row's scores, for the backward
//
// H is a multiple of Hkv: head h reads key/value head h / (H / Hkv)
// (grouped-query attention). Rank 3 is one batch of H "heads" (torch's
// bmm form of nn.MultiheadAttention). The verifier, the fuse-attention
// pass, the cost model and the CPU and CUDA kernels take their sizes here.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_ATTENTIONSHAPE_H
#define HEADROOM_COMPILER_ATTENTIONSHAPE_H

#include "compiler/Attribute.h"
#include "compiler/Types.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>

namespace headroom {

struct AttentionShape {
  /// The batch axes (q's leading axes) and their product.
  llvm::SmallVector<int64_t, 4> BatchDims;
  int64_t Batch = 1;
  int64_t Heads = 1, KvHeads = 1, Sq = 0, Sk = 0, D = 0, Dv = 0;
  /// Element strides of the bias over [batch, H, Sq, Sk] (0 on a broadcast
  /// axis), one batch offset per flattened batch index; empty without bias.
  llvm::SmallVector<int64_t, 4> BiasBatchOffset;
  int64_t BiasHeadStride = 0, BiasRowStride = 0, BiasColStride = 0;
  bool HasBias = false;

  int64_t group() const { return Heads / KvHeads; }
  /// Elements of the scores a row-major [batch.., H, Sq, Sk] tensor would
  /// have: Dropout's mask index space.
  int64_t scoreElements() const { return Batch * Heads * Sq * Sk; }
  llvm::SmallVector<int64_t, 4> outShape() const;
  llvm::SmallVector<int64_t, 4> lseShape() const;
};

/// The sizes of FusedAttention(q, k, v, bias?), or an error naming what does
/// not fit ("k has 3 heads, which does not divide q's 4").
llvm::Expected<AttentionShape>
attentionShape(llvm::ArrayRef<int64_t> q, llvm::ArrayRef<int64_t> k,
               llvm::ArrayRef<int64_t> v,
               std::optional<llvm::ArrayRef<int64_t>> bias = std::nullopt);

/// The attributes of FusedAttention (and its gradient), defaults filled in
/// and checked against the shape.
struct AttentionAttrs {
  double Scale = 1;    // `scale`, default 1 / sqrt(D)
  bool Causal = false; // `causal`: key j seen by query i when j <= i
  bool ZeroEmptyRows = false;
  double Dropout = 0; // `dropout`: the ratio, in [0, 1)
  /// Dropout keeps a score when counterHash's top 32 bits are >= this.
  uint64_t threshold() const {
    return static_cast<uint64_t>(Dropout * 4294967296.0);
  }
};

/// The attributes of a call of shape `s`, or an error ("dropout 1.5 is not
/// in [0, 1)", "causal attention needs as many queries as keys (3 vs 5)").
llvm::Expected<AttentionAttrs> attentionAttrs(const AttributeMap &attrs,
                                              const AttentionShape &s);

/// The element type of lse for a q of type `t`: f64 for f64, else f32.
DType attentionLseType(DType t);

} // namespace headroom

#endif // HEADROOM_COMPILER_ATTENTIONSHAPE_H

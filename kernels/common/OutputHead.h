//===- OutputHead.h - LinearCrossEntropy as chunked calls ------*- C++ -*-===//
//
// LinearCrossEntropy and its gradient (compiler/OutputHeadShape.h) on every
// backend: a loop over chunks of `rows` rows, each chunk a few calls of
// ops the backend already has, on views into the operands and the call's
// workspace. Forward, per chunk c:
//
//   logits_c = MatMul(x_c, w) {transB}                    [rows, V], x's type
//   loss_c   = SoftmaxCrossEntropyLoss(logits_c, labels_c)
//              {reduction none, ignore_index}             into the result
//
// and backward, per chunk:
//
//   logits_c = MatMul(x_c, w) {transB}                    made again
//   g_c      = SoftmaxCrossEntropyLossGrad(dloss_c, logits_c, labels_c)
//   dx_c     = MatMul(g_c, w) {transB = !transB}          into dx
//   dw      += Gemm(g_c^T x_c | x_c^T g_c)                (beta 1 after the
//                                                         first chunk)
//
// so the logits and their gradient are what the unfused graph computes,
// rounded alike, and only a chunk of them exists. The workspace holds the
// chunk's logits, (backward) its gradient, then what the calls themselves
// need (kernels/cpu widens bf16/f16 operands there). Written once for both
// backends: each passes a function that runs one call (its own runKernel on
// a context derived from the op's).
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_COMMON_OUTPUTHEAD_H
#define HEADROOM_KERNELS_COMMON_OUTPUTHEAD_H

#include "kernels/common/Kernel.h"

#include "compiler/OutputHeadShape.h"

#include <vector>

namespace headroom {
namespace kernels {

/// One call of the chunk loop: the op, its operands and results (views into
/// the op's operands or workspace; null data when only sizes are asked),
/// its attributes, and the workspace left for it.
struct HeadCall {
  const char *Op;
  std::vector<TensorView> Ins, Outs;
  AttributeMap Attrs;
  void *Workspace;
  uint64_t WorkspaceBytes;
};

/// Where the chunk's logits and gradient lie in the workspace: the calls'
/// own scratch starts at CallsOffset (256-byte aligned, the cuda target's).
struct HeadLayout {
  OutputHeadShape Shape;
  int64_t Rows = 0;
  uint64_t ChunkBytes = 0, CallsOffset = 0;
};

inline uint64_t alignHead(uint64_t b) { return (b + 255) / 256 * 256; }

/// The shape and layout of a LinearCrossEntropy(Grad) call, or an error
/// naming what does not fit.
inline llvm::Expected<HeadLayout> headLayout(const KernelContext &ctx) {
  bool grad = ctx.Op == "LinearCrossEntropyGrad";
  unsigned x = grad ? 1 : 0;
  if (ctx.Inputs.size() < x + 3 || ctx.Outputs.empty())
    return ctx.unsupported("needs x, w and labels");
  auto s = outputHeadShape(ctx.Inputs[x].type(), ctx.Inputs[x + 1].type(),
                           ctx.Inputs[x + 2].type(), ctx.attrInt("transB", 0));
  if (!s)
    return ctx.unsupported(llvm::toString(s.takeError()));
  TensorType rows(outputHeadLossType(ctx.Inputs[x].Type), {s->N});
  if (!grad && ctx.Outputs[0].type() != rows)
    return ctx.unsupported("result " + ctx.Outputs[0].type().str() +
                           " should be " + rows.str());
  if (grad && (ctx.Inputs[0].type() != rows ||
               ctx.Outputs[0].type() != ctx.Inputs[1].type() ||
               (ctx.Outputs.size() > 1 &&
                ctx.Outputs[1].type() != ctx.Inputs[2].type())))
    return ctx.unsupported("dloss must be " + rows.str() +
                           " and dx, dw of x's and w's types");
  HeadLayout l;
  l.Shape = *s;
  uint64_t elem = dtypeSize(ctx.Inputs[x].Type);
  l.Rows = outputHeadRows(*s, elem, ctx.attrInt("rows", 0));
  l.ChunkBytes = alignHead(uint64_t(l.Rows) * s->V * elem);
  l.CallsOffset = l.ChunkBytes * (grad ? 2 : 1);
  return l;
}

/// `p` advanced by `bytes`, or null when p is (a size query).
inline void *advance(void *p, uint64_t bytes) {
  return p ? static_cast<char *>(p) + bytes : nullptr;
}

/// A view of rows [first, first + count) of a 1-D or 2-D view.
inline TensorView rowsOf(const TensorView &v, int64_t first, int64_t count,
                         std::vector<int64_t> &shape) {
  int64_t width = v.rank() == 2 ? v.Shape[1] : 1;
  shape = v.rank() == 2 ? std::vector<int64_t>{count, width}
                        : std::vector<int64_t>{count};
  return TensorView{
      v.Type, shape,
      advance(v.Data, uint64_t(first * width) * dtypeSize(v.Type))};
}

/// Runs the op of `ctx` (LinearCrossEntropy or LinearCrossEntropyGrad) as
/// the calls above, each through `run(const HeadCall &) -> llvm::Error`.
/// With null data in ctx's views `run` is handed every call with null
/// views too (a workspace query).
template <typename Run>
llvm::Error runOutputHead(const KernelContext &ctx, const HeadLayout &l,
                          Run &&run) {
  const OutputHeadShape &s = l.Shape;
  bool grad = ctx.Op == "LinearCrossEntropyGrad";
  unsigned xi = grad ? 1 : 0;
  const TensorView &x = ctx.Inputs[xi], &w = ctx.Inputs[xi + 1],
                   &labels = ctx.Inputs[xi + 2];
  void *calls = advance(ctx.Workspace, l.CallsOffset);
  uint64_t callBytes = ctx.WorkspaceBytes > l.CallsOffset
                           ? ctx.WorkspaceBytes - l.CallsOffset
                           : 0;
  AttributeMap loss;
  loss["reduction"] = Attribute::getString("none");
  if (const Attribute *ig = ctx.attr("ignore_index"))
    loss["ignore_index"] = *ig;
  AttributeMap forward, back, acc;
  forward["transB"] = Attribute::getInt(s.TransB);
  back["transB"] = Attribute::getInt(!s.TransB);
  acc["transA"] = Attribute::getInt(1);
  for (int64_t first = 0; first < s.N; first += l.Rows) {
    int64_t count = std::min(l.Rows, s.N - first);
    std::vector<int64_t> xs, ls, os, ds, dxs;
    std::vector<int64_t> chunk = {count, s.V};
    TensorView xc = rowsOf(x, first, count, xs),
               lc = rowsOf(labels, first, count, ls);
    TensorView logits{x.Type, chunk, ctx.Workspace};
    if (llvm::Error e = run(
            HeadCall{"MatMul", {xc, w}, {logits}, forward, calls, callBytes}))
      return e;
    if (!grad) {
      TensorView out = rowsOf(ctx.Outputs[0], first, count, os);
      if (llvm::Error e = run(HeadCall{"SoftmaxCrossEntropyLoss",
                                       {logits, lc},
                                       {out},
                                       loss,
                                       calls,
                                       callBytes}))
        return e;
      continue;
    }
    TensorView g{x.Type, chunk, advance(ctx.Workspace, l.ChunkBytes)};
    TensorView dloss = rowsOf(ctx.Inputs[0], first, count, ds);
    if (llvm::Error e = run(HeadCall{"SoftmaxCrossEntropyLossGrad",
                                     {dloss, logits, lc},
                                     {g},
                                     loss,
                                     calls,
                                     callBytes}))
      return e;
    TensorView dx = rowsOf(ctx.Outputs[0], first, count, dxs);
    if (llvm::Error e =
            run(HeadCall{"MatMul", {g, w}, {dx}, back, calls, callBytes}))
      return e;
    if (ctx.Outputs.size() < 2)
      continue;
    // dw += g^T x (w [V, D]) or x^T g (w [D, V]); the first chunk writes it.
    const TensorView &dw = ctx.Outputs[1];
    AttributeMap a = acc;
    a["beta"] = Attribute::getFloat(first ? 1.0 : 0.0);
    std::vector<TensorView> ins = {s.TransB ? g : xc, s.TransB ? xc : g};
    if (first)
      ins.push_back(dw);
    if (llvm::Error e = run(HeadCall{"Gemm", ins, {dw}, a, calls, callBytes}))
      return e;
  }
  return llvm::Error::success();
}

} // namespace kernels
} // namespace headroom

#endif // HEADROOM_KERNELS_COMMON_OUTPUTHEAD_H

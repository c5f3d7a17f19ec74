//===- Cost.cpp - Floating-point operations of a node ---------------------===//
#include "compiler/Cost.h"

#include "compiler/AttentionShape.h"
#include "compiler/MatMulShape.h"
#include "compiler/OutputHeadShape.h"
#include "compiler/Plan.h"
#include "compiler/Protocol.h"
#include "compiler/ops/ConvPool.h"

#include <algorithm>

using namespace headroom;

/// Conv's or a gradient's products (ops::ConvShape::flops) from x, w and y
/// (or their gradients); 0 when the shapes disagree (the verifier says).
static uint64_t convFlops(const Node &n, const TensorType &x,
                          const TensorType &w, const TensorType &y) {
  auto s = ops::convShape(n.attrs(), x, w, y);
  if (!s) {
    llvm::consumeError(s.takeError());
    return 0;
  }
  return s->flops();
}

/// FusedAttention and its gradient: the products the kernels compute (the
/// scores and p v forward; the scores, dp, dq, dk and dv backward), over
/// the keys each row reads (half of them when causal), plus the softmax.
static uint64_t attentionFlops(const Node &n, bool grad) {
  unsigned first = grad ? 1 : 0;
  auto s = attentionShape(n.operand(first)->type().shape(),
                          n.operand(first + 1)->type().shape(),
                          n.operand(first + 2)->type().shape());
  if (!s) { // the verifier reports it
    llvm::consumeError(s.takeError());
    return 0;
  }
  uint64_t pairs = uint64_t(s->Batch * s->Heads) * s->Sq * s->Sk;
  if (n.intAttr("causal", 0))
    pairs = uint64_t(s->Batch * s->Heads) * s->Sq * (s->Sk + 1) / 2;
  uint64_t perPair =
      grad ? 2 * (3 * s->D + 2 * s->Dv) + 8 : 2 * (s->D + s->Dv) + 5;
  return pairs * perPair;
}

uint64_t headroom::nodeFlops(const Node &n) {
  switch (n.kind()) {
  case OpKind::MatMul: {
    auto s =
        matMulShape(n.operand(0)->type().shape(), n.operand(1)->type().shape(),
                    n.intAttr("transA", 0), n.intAttr("transB", 0));
    if (!s) { // the verifier reports it
      llvm::consumeError(s.takeError());
      return 0;
    }
    return 2 * uint64_t(n.result(0)->type().numElements()) * s->K;
  }
  case OpKind::Gemm: {
    const TensorType &a = n.operand(0)->type();
    uint64_t k = n.intAttr("transA", 0) ? a.dim(0) : a.dim(a.rank() - 1);
    return 2 * uint64_t(n.result(0)->type().numElements()) * k;
  }
  case OpKind::LinearCrossEntropy:
  case OpKind::LinearCrossEntropyGrad: {
    // The logits' product (again backward, then dx's and dw's), and the
    // softmax over each row.
    bool grad = n.is(OpKind::LinearCrossEntropyGrad);
    unsigned x = grad ? 1 : 0;
    auto s = outputHeadShape(n.operand(x)->type(), n.operand(x + 1)->type(),
                             n.operand(x + 2)->type(), n.intAttr("transB", 0));
    if (!s) { // the verifier reports it
      llvm::consumeError(s.takeError());
      return 0;
    }
    uint64_t product = 2 * uint64_t(s->N) * s->V * s->D;
    uint64_t products = grad ? 1 + n.numResults() : 1;
    return products * product + 5 * uint64_t(s->N) * s->V;
  }
  case OpKind::FusedAttention:
    return attentionFlops(n, /*grad=*/false);
  case OpKind::FusedAttentionGrad:
    return attentionFlops(n, /*grad=*/true);
  case OpKind::Conv: // (x, w[, b]) -> y
    return convFlops(n, n.operand(0)->type(), n.operand(1)->type(),
                     n.result(0)->type());
  case OpKind::ConvGradInput: // (dy, w) -> dx
    return convFlops(n, n.result(0)->type(), n.operand(1)->type(),
                     n.operand(0)->type());
  case OpKind::ConvGradWeight: // (dy, x) -> dw
    return convFlops(n, n.operand(1)->type(), n.result(0)->type(),
                     n.operand(0)->type());
  case OpKind::Read:
  case OpKind::Assign:
  case OpKind::ParamGrad:
  case OpKind::Constant:
  case OpKind::Return:
  case OpKind::Identity:
  case OpKind::Reshape:
  case OpKind::Squeeze:
  case OpKind::Unsqueeze:
  case OpKind::Flatten:
  case OpKind::Transpose:
  case OpKind::Concat:
  case OpKind::Split:
  case OpKind::Slice:
  case OpKind::SliceGrad:
  case OpKind::Gather:
  case OpKind::Expand:
  case OpKind::Tile:
  case OpKind::Pad:
  case OpKind::Cast:
  case OpKind::Shape:
  case OpKind::Size:
  case OpKind::ConstantOfShape:
  case OpKind::Range:
  case OpKind::AllReduce: // collectives: the library's work, not kernels'
  case OpKind::AllReduceState:
  case OpKind::ReduceScatter:
  case OpKind::AllGather:
  case OpKind::AllGatherState:
  case OpKind::Broadcast:
    return 0;
  default:
    break;
  }
  uint64_t elements = 0;
  for (const Value *v : n.operands())
    if (v)
      elements = std::max<uint64_t>(elements, v->type().numElements());
  for (const Value *v : n.results())
    elements = std::max<uint64_t>(elements, v->type().numElements());
  return elements;
}

/// The bytes a host call reads and writes: its buffers (copies of a Read
/// or Assign once), and an update's slots twice (read and written).
static uint64_t hostCallBytes(const Plan &plan, const KernelCall &c) {
  if (c.Kind == OpKind::Read)
    return readCopies(c.Attrs) ? plan.States[c.State].Type.sizeInBytes() : 0;
  uint64_t bytes = 0;
  for (int b : llvm::concat<const int>(c.Inputs, c.Outputs))
    if (b >= 0)
      bytes += plan.Buffers[b].sizeInBytes();
  if (c.Kind != OpKind::Assign && c.State >= 0)
    for (int s :
         llvm::concat<const int>(llvm::makeArrayRef(c.State), c.MoreStates))
      bytes += 2 * plan.States[s].Type.sizeInBytes();
  return bytes;
}

/// The bytes collective call `c` moves per rank (as collectiveBytes counts
/// a node's).
static uint64_t callCollectiveBytes(const Plan &plan, const KernelCall &c) {
  auto buffer = [&](const std::vector<int> &v) {
    return v.empty() || v[0] < 0 ? 0 : plan.Buffers[v[0]].sizeInBytes();
  };
  uint64_t slot = c.State >= 0 ? plan.States[c.State].Type.sizeInBytes() : 0;
  switch (c.Kind) {
  case OpKind::AllReduce:
    return 2 * buffer(c.Inputs);
  case OpKind::AllReduceState:
    return 2 * slot;
  case OpKind::ReduceScatter:
  case OpKind::Broadcast:
    return buffer(c.Inputs);
  case OpKind::AllGather:
    return buffer(c.Outputs);
  case OpKind::AllGatherState:
    return slot;
  default:
    return 0;
  }
}

StepEstimate headroom::estimateStep(const Plan &plan) {
  const MemoryReport &r = plan.Report;
  StepEstimate e;
  bool low = false;
  for (const PlanFunction &f : plan.Functions)
    for (const KernelCall &c : f.Calls)
      if ((c.Kind == OpKind::MatMul || c.Kind == OpKind::Gemm) &&
          !c.Outputs.empty()) {
        DType t = plan.Buffers[c.Outputs[0]].dtype();
        low |= t == DType::BF16 || t == DType::F16;
      }
  e.LowPrecision = low;
  e.FlopsPerSecond = low ? kNominalLowFlops : kNominalF32Flops;
  double bandwidth = r.HostBandwidth > 0 ? r.HostBandwidth : 25e9;
  // Each function of the driver as the executor runs it on two streams
  // (compiler/Streams.h): a copy call starts when the copy stream is free
  // and the compute calls before it are done; a compute call that waits for
  // a copy call starts after it.
  for (const DriverCall &d : plan.Driver) {
    const PlanFunction *f = plan.function(d.Function);
    if (!f)
      continue;
    std::vector<double> done(f->Calls.size(), 0);
    double compute = 0, copy = 0, computeBusy = 0, copyBusy = 0, hostBusy = 0,
           collective = 0, inOrder = 0;
    for (size_t i = 0; i < f->Calls.size(); ++i) {
      const KernelCall &c = f->Calls[i];
      double comm = double(callCollectiveBytes(plan, c)) / kLinkBytesPerSecond;
      if (c.onCopyStream()) {
        bool transfer = c.Kind == OpKind::ToHost || c.Kind == OpKind::ToDevice;
        double t =
            c.Overlapped ? comm
            : transfer
                ? double(plan.Buffers[c.Outputs[0]].sizeInBytes()) / bandwidth
                : double(hostCallBytes(plan, c)) / kHostBytesPerSecond;
        copy = std::max(copy, compute) + t;
        (c.Overlapped ? collective : transfer ? copyBusy : hostBusy) += t;
        done[i] = copy;
        continue;
      }
      if (c.WaitFor >= 0 && size_t(c.WaitFor) < i)
        compute = std::max(compute, done[c.WaitFor]);
      double t = double(c.Flops) / e.FlopsPerSecond;
      compute += t;
      computeBusy += t;
      if (comm > 0) {
        // One link, and NCCL runs a communicator's collectives in the order
        // they were issued: one in order waits for the copy stream's.
        compute = std::max(compute, copy) + comm;
        copy = compute;
        collective += comm;
        inOrder += comm;
      }
    }
    e.StepSeconds += d.Repeat * std::max(compute, copy);
    e.ComputeSeconds += d.Repeat * computeBusy;
    e.TransferSeconds += d.Repeat * copyBusy;
    e.HostSeconds += d.Repeat * hostBusy;
    e.CollectiveSeconds += d.Repeat * collective;
    e.InOrderCollectiveSeconds += d.Repeat * inOrder;
  }
  e.ExposedSeconds = std::max(0.0, e.StepSeconds - e.ComputeSeconds -
                                       e.InOrderCollectiveSeconds);
  return e;
}

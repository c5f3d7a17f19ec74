//===- Communicator.cpp - The collectives on host memory ------------------===//
#include "runtime/Communicator.h"

#include "compiler/Collectives.h"

#include <cstring>

using namespace headroom;

std::vector<int64_t> headroom::shardCounts(int64_t elements, unsigned ranks) {
  int64_t s = shardElements(elements, ranks);
  std::vector<int64_t> counts;
  for (unsigned r = 0; r < ranks; ++r)
    counts.push_back(std::max<int64_t>(0, std::min(s, elements - r * s)));
  return counts;
}

static uint64_t align64(uint64_t n) { return (n + 63) & ~uint64_t(63); }

/// `n` elements of type t at `from` widened to f32 at `to`, or back.
static void widen(DType t, const void *from, float *to, int64_t n) {
  auto *p = static_cast<const uint16_t *>(from);
  for (int64_t i = 0; i < n; ++i)
    to[i] = t == DType::BF16 ? bf16ToFloat(p[i]) : halfToFloat(p[i]);
}
static void narrow(DType t, const float *from, void *to, int64_t n) {
  auto *p = static_cast<uint16_t *>(to);
  for (int64_t i = 0; i < n; ++i)
    p[i] = t == DType::BF16 ? floatToBf16(from[i]) : floatToHalf(from[i]);
}

/// Divides `n` summed elements by the number of ranks (op = mean).
static void averageOver(DType t, void *data, int64_t n, unsigned ranks) {
  if (t == DType::F64) {
    auto *p = static_cast<double *>(data);
    for (int64_t i = 0; i < n; ++i)
      p[i] /= double(ranks);
    return;
  }
  auto *p = static_cast<float *>(data);
  for (int64_t i = 0; i < n; ++i)
    p[i] /= float(ranks);
}

/// This rank's shard of the sum (or mean) of every rank's `in`: its
/// counts[rank] elements at `shard`, in the reduction's type (f32 for
/// bf16/f16, whose widened copy goes to `scratch`).
static llvm::Error reduceToShard(Communicator &comm, DType t, const void *in,
                                 llvm::ArrayRef<int64_t> counts, bool mean,
                                 void *shard, void *scratch) {
  int64_t n = 0;
  for (int64_t c : counts)
    n += c;
  DType sum = t == DType::F64 ? DType::F64 : DType::F32;
  if (t != sum) {
    widen(t, in, static_cast<float *>(scratch), n);
    in = scratch;
  }
  if (auto e = comm.reduceScatter(in, shard, counts, sum))
    return e;
  if (mean)
    averageOver(sum, shard, counts[comm.rank()], comm.size());
  return llvm::Error::success();
}

llvm::Error headroom::runCollective(Communicator &comm, const KernelCall &call,
                                    const TensorType &inType, const void *in,
                                    const TensorType &outType, void *out,
                                    void *workspace) {
  unsigned rank = comm.rank(), ranks = comm.size();
  auto opIsMean = [&]() -> llvm::Expected<bool> {
    auto it = call.Attrs.find("op");
    if (it == call.Attrs.end() ||
        it->second.kind() != Attribute::Kind::String ||
        (it->second.asString() != "sum" && it->second.asString() != "mean"))
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "%s needs op = sum or mean",
                                     call.Op.c_str());
    return it->second.asString() == "mean";
  };
  DType t = outType.dtype();
  bool wide = t == DType::F32 || t == DType::F64;
  // No planned workspace (the CUDA emulator): scratch of its own.
  std::vector<uint8_t> scratch;
  if (!workspace) {
    scratch.resize(std::max<uint64_t>(
        64, hostCollectiveWorkspace(
                call.Kind, t,
                (call.Kind == OpKind::ReduceScatter ? inType : outType)
                    .numElements(),
                ranks)));
    workspace = scratch.data();
  }
  switch (call.Kind) {
  case OpKind::AllReduce:
  case OpKind::AllReduceState: {
    auto mean = opIsMean();
    if (!mean)
      return mean.takeError();
    int64_t n = outType.numElements();
    std::vector<int64_t> counts = shardCounts(n, ranks);
    const void *from = call.Kind == OpKind::AllReduceState ? out : in;
    // The widened input (bf16/f16), then the summed shard.
    auto *base = static_cast<uint8_t *>(workspace);
    void *scratch = base;
    void *shard = base + (wide ? 0 : align64(uint64_t(n) * 4));
    if (auto e = reduceToShard(comm, t, from, counts, *mean, shard, scratch))
      return e;
    if (!wide) // rounded once, by the shard's owner
      narrow(t, static_cast<float *>(shard), scratch, counts[rank]);
    return comm.allGather(wide ? shard : scratch, out, counts, dtypeSize(t));
  }
  case OpKind::ReduceScatter: {
    auto mean = opIsMean();
    if (!mean)
      return mean.takeError();
    int64_t n = inType.numElements();
    std::vector<int64_t> counts = shardCounts(n, ranks);
    auto *base = static_cast<uint8_t *>(workspace);
    void *shard = wide ? out : base + align64(uint64_t(n) * 4);
    if (auto e = reduceToShard(comm, t, in, counts, *mean, shard, base))
      return e;
    if (!wide)
      narrow(t, static_cast<float *>(shard), out, counts[rank]);
    // Past the tensor's end the shard holds zeros.
    uint64_t kept = uint64_t(counts[rank]) * dtypeSize(t);
    std::memset(static_cast<uint8_t *>(out) + kept, 0,
                outType.sizeInBytes() - kept);
    return llvm::Error::success();
  }
  case OpKind::AllGather:
  case OpKind::AllGatherState:
    return comm.allGather(in, out, shardCounts(outType.numElements(), ranks),
                          dtypeSize(t));
  case OpKind::Broadcast: {
    auto it = call.Attrs.find("root");
    int64_t root = it == call.Attrs.end() ? -1 : it->second.asInt();
    if (root < 0 || root >= int64_t(ranks))
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "Broadcast from rank %lld of %u",
                                     (long long)root, ranks);
    if (out != in)
      std::memmove(out, in, outType.sizeInBytes());
    return comm.broadcast(out, outType.sizeInBytes(), unsigned(root));
  }
  default:
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "%s is not a collective", call.Op.c_str());
  }
}

CollectiveArgs
headroom::collectiveArgs(const Plan &plan, const KernelCall &call,
                         llvm::function_ref<void *(int)> state,
                         llvm::function_ref<void *(int)> buffer) {
  CollectiveArgs a;
  bool toState = call.State >= 0;
  a.OutType =
      toState ? &plan.States[call.State].Type : &plan.Buffers[call.Outputs[0]];
  a.Out = toState ? state(call.State) : buffer(call.Outputs[0]);
  a.InType = call.Inputs.empty() ? a.OutType : &plan.Buffers[call.Inputs[0]];
  a.In = call.Inputs.empty() ? a.Out : buffer(call.Inputs[0]);
  return a;
}

llvm::Error headroom::checkSamePlan(Communicator &comm,
                                    llvm::StringRef fingerprint) {
  auto all = comm.allGatherStrings(fingerprint);
  if (!all)
    return all.takeError();
  std::string differ;
  for (size_t r = 1; r < all->size(); ++r)
    if ((*all)[r] != (*all)[0])
      differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  if (differ.empty())
    return llvm::Error::success();
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      "rank(s) %s compiled another plan than rank 0 (plan fingerprints "
      "differ): every rank must be given the same model and flags",
      differ.c_str());
}

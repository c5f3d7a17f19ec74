//===- AttentionShape.cpp - FusedAttention's shape rule -------------------===//
#include "compiler/AttentionShape.h"

#include <cmath>
#include <string>

using namespace headroom;

static llvm::Error shapeError(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 msg.str().c_str());
}

llvm::SmallVector<int64_t, 4> AttentionShape::outShape() const {
  llvm::SmallVector<int64_t, 4> s(BatchDims.begin(), BatchDims.end());
  s.append({Heads, Sq, Dv});
  return s;
}

llvm::SmallVector<int64_t, 4> AttentionShape::lseShape() const {
  llvm::SmallVector<int64_t, 4> s(BatchDims.begin(), BatchDims.end());
  s.append({Heads, Sq});
  return s;
}

llvm::Expected<AttentionAttrs>
headroom::attentionAttrs(const AttributeMap &attrs, const AttentionShape &s) {
  AttentionAttrs a;
  double values[4] = {1.0 / std::sqrt(double(s.D)), 0, 0, 0};
  const char *names[4] = {"scale", "causal", "zero_empty_rows", "dropout"};
  for (unsigned i = 0; i < 4; ++i) {
    auto it = attrs.find(names[i]);
    if (it == attrs.end())
      continue;
    Attribute::Kind k = it->second.kind();
    if (k != Attribute::Kind::Int && k != Attribute::Kind::Float)
      return shapeError(llvm::Twine("attribute `") + names[i] +
                        "` must be a number");
    values[i] = it->second.asFloat();
  }
  a.Scale = values[0];
  a.Causal = values[1] != 0;
  a.ZeroEmptyRows = values[2] != 0;
  a.Dropout = values[3];
  if (!(a.Dropout >= 0 && a.Dropout < 1))
    return shapeError("dropout " + std::to_string(a.Dropout) +
                      " is not in [0, 1)");
  if (a.Causal && s.Sq != s.Sk)
    return shapeError("causal attention needs as many queries as keys (" +
                      llvm::Twine(s.Sq) + " vs " + llvm::Twine(s.Sk) + ")");
  return a;
}

DType headroom::attentionLseType(DType t) {
  return t == DType::F64 ? DType::F64 : DType::F32;
}

llvm::Expected<AttentionShape>
headroom::attentionShape(llvm::ArrayRef<int64_t> q, llvm::ArrayRef<int64_t> k,
                         llvm::ArrayRef<int64_t> v,
                         std::optional<llvm::ArrayRef<int64_t>> bias) {
  size_t r = q.size();
  if (r < 3)
    return shapeError("q must have rank 3 or more, got " + shapeString(q));
  if (k.size() != r || v.size() != r)
    return shapeError("q, k and v must have one rank, got " + shapeString(q) +
                      ", " + shapeString(k) + " and " + shapeString(v));
  AttentionShape s;
  for (size_t d = 0; d + 3 < r; ++d) {
    if (k[d] != q[d] || v[d] != q[d])
      return shapeError("the batch axes of q " + shapeString(q) + ", k " +
                        shapeString(k) + " and v " + shapeString(v) +
                        " differ");
    s.BatchDims.push_back(q[d]);
    s.Batch *= q[d];
  }
  s.Heads = q[r - 3];
  s.KvHeads = k[r - 3];
  s.Sq = q[r - 2];
  s.D = q[r - 1];
  s.Sk = k[r - 2];
  s.Dv = v[r - 1];
  if (v[r - 3] != s.KvHeads || v[r - 2] != s.Sk)
    return shapeError("v " + shapeString(v) + " does not match k " +
                      shapeString(k) + " in heads and keys");
  if (k[r - 1] != s.D)
    return shapeError("q and k differ in the last axis (" + llvm::Twine(s.D) +
                      " vs " + llvm::Twine(k[r - 1]) + ")");
  if (s.KvHeads <= 0 || s.Heads % s.KvHeads != 0)
    return shapeError("k has " + llvm::Twine(s.KvHeads) +
                      " heads, which does not divide q's " +
                      llvm::Twine(s.Heads));
  if (!bias)
    return s;
  llvm::ArrayRef<int64_t> b = *bias;
  if (b.size() > r)
    return shapeError("the bias " + shapeString(b) +
                      " has a higher rank than q");
  // Right-aligned broadcasting to [batch.., H, Sq, Sk].
  llvm::SmallVector<int64_t, 4> full(s.BatchDims.begin(), s.BatchDims.end());
  full.append({s.Heads, s.Sq, s.Sk});
  llvm::SmallVector<int64_t, 4> dims(r - b.size(), 1), strides(r, 0);
  dims.append(b.begin(), b.end());
  int64_t stride = 1;
  for (size_t d = r; d-- > 0;) {
    if (dims[d] != 1 && dims[d] != full[d])
      return shapeError("the bias " + shapeString(b) +
                        " does not broadcast to the scores " +
                        shapeString(full));
    strides[d] = dims[d] == 1 ? 0 : stride;
    stride *= dims[d];
  }
  s.HasBias = true;
  s.BiasHeadStride = strides[r - 3];
  s.BiasRowStride = strides[r - 2];
  s.BiasColStride = strides[r - 1];
  for (int64_t i = 0; i < s.Batch; ++i) {
    int64_t rest = i, offset = 0;
    for (size_t d = r - 3; d-- > 0;) {
      offset += (rest % full[d]) * strides[d];
      rest /= full[d];
    }
    s.BiasBatchOffset.push_back(offset);
  }
  return s;
}

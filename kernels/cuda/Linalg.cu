//===- Linalg.cu - Gemm and MatMul through cuBLASLt -----------------------===//
//
// Both ops become a list of strided-batched row-major GEMMs, found on the
// host with kernels/cpu/Linalg.cpp's rules (compiler/MatMulShape.h: numpy's
// 1-D promotion and batch broadcasting, headroom's transA/transB; Gemm's beta*C
// broadcast into the result first, then accumulated into). A broadcast batch
// axis is a batch stride of 0, never a copy; batch axes that do not merge into
// one strided batch become several calls.
//
// On the GPU each GEMM is one cublasLtMatmul on the executor's stream with
// its workspace (the cuda target's library bytes): f32 computes in f32 with
// TF32 off (CUBLAS_COMPUTE_32F, so results match the CPU's to rounding),
// bf16 and f16 take 16-bit operands and accumulate in f32, f64 in f64.
// cuBLASLt is column-major: the row-major C = op(A) op(B) is computed as the
// column-major C^T = op(B)^T op(A)^T over the same bytes.
//
// The emulator runs the same GEMM list through GemmBody, one thread per
// result element accumulating in Accum<T> (the GPU suite compares cuBLASLt
// with the CPU); so does the GPU for a GEMM cuBLASLt takes no algorithm for
// (an empty inner dimension, more than 2^31 batches). Each call tells
// cuBLASLt its operands' real alignment: a batch's matrices start inside a
// buffer, not at 256 bytes.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/LinalgCheck.h"
#include "kernels/cuda/Launch.h"

#include "compiler/MatMulShape.h"
#include "compiler/Types.h"
#include "compiler/ops/Shape.h"

#include "llvm/ADT/SmallVector.h"

#if !defined(HEADROOM_CUDA_EMULATED)
#include "kernels/cuda/CublasLt.h"

#include <cuda_runtime.h>
#endif

using namespace headroom;
using namespace headroom::cuda;
using llvm::ArrayRef;
using llvm::Error;
using llvm::SmallVector;

namespace {

/// Row-major C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b] for b < Batch,
/// A[b] at A + b * StrideA (elements), likewise B and C.
struct GemmCall {
  bool TransA = false, TransB = false;
  int64_t M = 0, N = 0, K = 0;
  int64_t Lda = 0, Ldb = 0, Ldc = 0;
  int64_t Batch = 1, StrideA = 0, StrideB = 0, StrideC = 0;
  int64_t OffA = 0, OffB = 0, OffC = 0;
  double Alpha = 1, Beta = 0;
};

/// One thread per result element of one strided-batched GEMM.
template <typename T> struct GemmBody {
  const T *A, *B;
  T *C;
  GemmCall G;
  HR_HD void operator()(int64_t idx) const {
    int64_t mn = G.M * G.N;
    int64_t b = idx / mn, i = (idx % mn) / G.N, j = idx % G.N;
    const T *a = A + G.OffA + b * G.StrideA;
    const T *bm = B + G.OffB + b * G.StrideB;
    T *c = C + G.OffC + b * G.StrideC;
    using V = Accum<T>;
    V acc = V(0);
    for (int64_t k = 0; k < G.K; ++k) {
      V x = ld(a, G.TransA ? k * G.Lda + i : i * G.Lda + k);
      V y = ld(bm, G.TransB ? j * G.Ldb + k : k * G.Ldb + j);
      acc += x * y;
    }
    V out = V(G.Alpha) * acc;
    if (G.Beta != 0)
      out += V(G.Beta) * V(ld(c, i * G.Ldc + j));
    st(c, i * G.Ldc + j, out);
  }
};

#if !defined(HEADROOM_CUDA_EMULATED)

const char *blasStatus(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS:
    return "success";
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return "not initialized";
  case CUBLAS_STATUS_ALLOC_FAILED:
    return "allocation failed";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "invalid value";
  case CUBLAS_STATUS_ARCH_MISMATCH:
    return "architecture mismatch";
  case CUBLAS_STATUS_EXECUTION_FAILED:
    return "execution failed";
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return "not supported";
  default:
    return "error";
  }
}

/// Owns the cuBLASLt descriptors of one call.
struct LtCall {
  const CublasLtApi &Api;
  cublasLtMatmulDesc_t Op = nullptr;
  cublasLtMatrixLayout_t A = nullptr, B = nullptr, C = nullptr;
  cublasLtMatmulPreference_t Pref = nullptr;
  ~LtCall() {
    if (Pref)
      Api.MatmulPreferenceDestroy(Pref);
    for (cublasLtMatrixLayout_t l : {A, B, C})
      if (l)
        Api.MatrixLayoutDestroy(l);
    if (Op)
      Api.MatmulDescDestroy(Op);
  }
};

cublasStatus_t layout(cublasLtMatrixLayout_t &l, cudaDataType_t t, int64_t rows,
                      int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  if (cublasStatus_t s = cublasLt()->MatrixLayoutCreate(&l, t, rows, cols, ld);
      s != CUBLAS_STATUS_SUCCESS)
    return s;
  int32_t count = static_cast<int32_t>(batch);
  if (cublasStatus_t s = cublasLt()->MatrixLayoutSetAttribute(
          l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count));
      s != CUBLAS_STATUS_SUCCESS)
    return s;
  return cublasLt()->MatrixLayoutSetAttribute(
      l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride));
}

/// The largest power of two (up to 256) that `p`'s address is a multiple
/// of: cuBLASLt assumes 256-byte aligned operands unless told otherwise, and
/// a batch's or an outer call's matrices start inside a buffer.
uint32_t alignmentOf(const void *p) {
  uintptr_t v = reinterpret_cast<uintptr_t>(p);
  return v == 0 ? 256 : uint32_t(std::min<uintptr_t>(256, v & (~v + 1)));
}

/// The column-major call C^T = op(B)^T op(A)^T (see the file comment).
/// False when cuBLASLt has no algorithm for it (the caller computes it with
/// GemmBody instead).
template <typename T>
llvm::Expected<bool> ltGemm(const KernelContext &ctx, const GemmCall &g,
                            const T *a, const T *b, T *c) {
  cudaDataType_t data;
  cublasComputeType_t compute;
  cudaDataType_t scale;
  if constexpr (std::is_same_v<T, double>) {
    data = CUDA_R_64F, compute = CUBLAS_COMPUTE_64F, scale = CUDA_R_64F;
  } else {
    data = std::is_same_v<T, float>      ? CUDA_R_32F
           : std::is_same_v<T, BFloat16> ? CUDA_R_16BF
                                         : CUDA_R_16F;
    compute = CUBLAS_COMPUTE_32F, scale = CUDA_R_32F;
  }
  // No handle (cuBLASLt is loaded when the executor makes one): GemmBody.
  const CublasLtApi *api = cublasLt();
  if (g.Batch > INT32_MAX || !api || !ctx.BlasLt)
    return false;
  LtCall lt{*api};
  auto check = [&](cublasStatus_t s, const char *what) -> Error {
    if (s == CUBLAS_STATUS_SUCCESS)
      return Error::success();
    return ctx.unsupported(llvm::Twine("cuBLASLt ") + what + ": " +
                           blasStatus(s));
  };
  if (Error e =
          check(api->MatmulDescCreate(&lt.Op, compute, scale), "descriptor"))
    return llvm::Expected<bool>(std::move(e));
  cublasOperation_t opFirst = g.TransB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opSecond = g.TransA ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (Error e =
          check(api->MatmulDescSetAttribute(lt.Op, CUBLASLT_MATMUL_DESC_TRANSA,
                                            &opFirst, sizeof(opFirst)),
                "transpose"))
    return llvm::Expected<bool>(std::move(e));
  if (Error e =
          check(api->MatmulDescSetAttribute(lt.Op, CUBLASLT_MATMUL_DESC_TRANSB,
                                            &opSecond, sizeof(opSecond)),
                "transpose"))
    return llvm::Expected<bool>(std::move(e));
  // Stored row-major B (k x n, or n x k transposed) read as column-major.
  int64_t bRows = g.TransB ? g.K : g.N, bCols = g.TransB ? g.N : g.K;
  int64_t aRows = g.TransA ? g.M : g.K, aCols = g.TransA ? g.K : g.M;
  if (Error e =
          check(layout(lt.A, data, bRows, bCols, g.Ldb, g.Batch, g.StrideB),
                "layout"))
    return llvm::Expected<bool>(std::move(e));
  if (Error e =
          check(layout(lt.B, data, aRows, aCols, g.Lda, g.Batch, g.StrideA),
                "layout"))
    return llvm::Expected<bool>(std::move(e));
  if (Error e = check(layout(lt.C, data, g.N, g.M, g.Ldc, g.Batch, g.StrideC),
                      "layout"))
    return llvm::Expected<bool>(std::move(e));
  if (Error e = check(api->MatmulPreferenceCreate(&lt.Pref), "preference"))
    return llvm::Expected<bool>(std::move(e));
  uint64_t ws = ctx.BlasWorkspaceBytes;
  // Lt's A is our B and Lt's B our A (the column-major view swaps them).
  uint32_t alignA = alignmentOf(b + g.OffB), alignB = alignmentOf(a + g.OffA),
           alignC = alignmentOf(c + g.OffC);
  struct {
    cublasLtMatmulPreferenceAttributes_t Attr;
    const void *Value;
    size_t Size;
  } prefs[] = {{CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)},
               {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &alignA, 4},
               {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &alignB, 4},
               {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &alignC, 4},
               {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &alignC, 4}};
  for (const auto &p : prefs)
    if (Error e = check(
            api->MatmulPreferenceSetAttribute(lt.Pref, p.Attr, p.Value, p.Size),
            "preference"))
      return llvm::Expected<bool>(std::move(e));
  cublasLtMatmulHeuristicResult_t result;
  int found = 0;
  auto handle = static_cast<cublasLtHandle_t>(ctx.BlasLt);
  cublasStatus_t h = api->MatmulAlgoGetHeuristic(
      handle, lt.Op, lt.A, lt.B, lt.C, lt.C, lt.Pref, 1, &result, &found);
  if (h == CUBLAS_STATUS_NOT_SUPPORTED ||
      (h == CUBLAS_STATUS_SUCCESS &&
       (found == 0 || result.state != CUBLAS_STATUS_SUCCESS)))
    return false;
  if (Error e = check(h, "heuristic"))
    return llvm::Expected<bool>(std::move(e));
  float alpha32 = float(g.Alpha), beta32 = float(g.Beta);
  double alpha64 = g.Alpha, beta64 = g.Beta;
  const void *alpha = std::is_same_v<T, double> ? (const void *)&alpha64
                                                : (const void *)&alpha32;
  const void *beta =
      std::is_same_v<T, double> ? (const void *)&beta64 : (const void *)&beta32;
  if (Error e =
          check(api->Matmul(handle, lt.Op, alpha, b + g.OffB, lt.A, a + g.OffA,
                            lt.B, beta, c + g.OffC, lt.C, c + g.OffC, lt.C,
                            &result.algo, ctx.BlasWorkspace, ws,
                            static_cast<cudaStream_t>(ctx.Stream)),
                "matmul"))
    return llvm::Expected<bool>(std::move(e));
  return true;
}

#endif

template <typename T>
Error runGemms(const KernelContext &ctx, ArrayRef<GemmCall> calls, const T *a,
               const T *b, T *c) {
  for (const GemmCall &g : calls) {
    if (g.M == 0 || g.N == 0 || g.Batch == 0)
      continue;
#if !defined(HEADROOM_CUDA_EMULATED)
    if (g.K > 0) { // cuBLASLt takes no empty inner dimension
      auto done = ltGemm(ctx, g, a, b, c);
      if (!done)
        return done.takeError();
      if (*done)
        continue;
    }
#endif
    forEach(ctx, g.Batch * g.M * g.N, GemmBody<T>{a, b, c, g});
  }
  return Error::success();
}

/// Y[m, n] = C broadcast to [M, N] (C of rank 0, 1 or 2).
template <typename T> struct BiasBody {
  const T *Bias;
  T *Y;
  int64_t N, Cm, Cn;
  HR_HD void operator()(int64_t idx) const {
    int64_t i = idx / N, j = idx % N;
    Y[idx] = Bias[(Cm == 1 ? 0 : i * Cn) + (Cn == 1 ? 0 : j)];
  }
};

struct GemmApply {
  const KernelContext &Ctx;
  template <typename T> Error apply() const {
    const TensorView &a = Ctx.Inputs[0], &b = Ctx.Inputs[1];
    const TensorView &y = Ctx.Outputs[0];
    auto shape = kernels::gemmShape(Ctx);
    if (!shape)
      return shape.takeError();
    int64_t m = shape->M, n = shape->N;
    GemmCall g = kernels::gemmCall<GemmCall>(*shape);
    if (const TensorView *c = shape->C) {
      int64_t cm = c->rank() == 2 ? c->Shape[0] : 1;
      int64_t cn = c->rank() >= 1 ? c->Shape[c->rank() - 1] : 1;
      forEach(Ctx, m * n, BiasBody<T>{c->as<T>(), y.as<T>(), n, cm, cn});
    }
    return runGemms<T>(Ctx, {g}, a.as<T>(), b.as<T>(), y.as<T>());
  }
};

using ops::product;

/// The GEMMs of MatMul: numpy's rules, each run of batch axes that merges
/// into one strided batch is one call.
Error matMulCalls(const KernelContext &ctx, SmallVector<GemmCall, 4> &out) {
  const TensorView &a = ctx.Inputs[0], &b = ctx.Inputs[1];
  const TensorView &y = ctx.Outputs[0];
  auto s = matMulShape(a.Shape, b.Shape, ctx.attrInt("transA", 0),
                       ctx.attrInt("transB", 0));
  if (!s)
    return ctx.unsupported(llvm::toString(s.takeError()));
  int64_t m = s->M, n = s->N, k = s->K, batches = s->batches();
  ArrayRef<int64_t> aBatch = s->ABatch, bBatch = s->BBatch;
  ArrayRef<int64_t> outBatch = s->Batch;
  if (y.numElements() != batches * m * n)
    return ctx.unsupported("result type does not match the operands");
  if (y.numElements() == 0)
    return Error::success();
  GemmCall g = kernels::contiguousCall<GemmCall>(s->TransA, s->TransB, m, n, k);
  if (!s->TransA && product(bBatch) == 1 && product(aBatch) == batches) {
    g.M = batches * m; // A's batches stack into rows
    out.push_back(g);
    return Error::success();
  }
  // Batch strides of A, B and C over the output's batch axes (0 where an
  // operand is broadcast), merged where they stay linear.
  unsigned rank = outBatch.size();
  SmallVector<int64_t, 4> sa(rank, 0), sb(rank, 0), sc(rank, 0);
  auto strides = [&](ArrayRef<int64_t> batch, int64_t size,
                     SmallVector<int64_t, 4> &s) {
    int64_t stride = size;
    for (size_t i = 0; i < batch.size(); ++i) {
      size_t from = batch.size() - 1 - i, to = rank - 1 - i;
      s[to] = batch[from] == 1 ? 0 : stride;
      stride *= batch[from];
    }
  };
  strides(aBatch, m * k, sa);
  strides(bBatch, k * n, sb);
  strides(outBatch, m * n, sc);
  SmallVector<int64_t, 4> dims, da, db, dc;
  for (unsigned d = 0; d < rank; ++d) {
    int64_t size = outBatch[d];
    if (size == 1)
      continue;
    if (!dims.empty() && da.back() == sa[d] * size &&
        db.back() == sb[d] * size && dc.back() == sc[d] * size) {
      dims.back() *= size;
      da.back() = sa[d], db.back() = sb[d], dc.back() = sc[d];
      continue;
    }
    dims.push_back(size);
    da.push_back(sa[d]), db.push_back(sb[d]), dc.push_back(sc[d]);
  }
  if (dims.empty()) { // one matrix product
    out.push_back(g);
    return Error::success();
  }
  // The innermost merged axis is the strided batch; outer axes are calls.
  unsigned inner = dims.size() - 1;
  g.Batch = dims[inner];
  g.StrideA = da[inner], g.StrideB = db[inner], g.StrideC = dc[inner];
  SmallVector<int64_t, 4> index(inner, 0);
  int64_t outer = product(ArrayRef<int64_t>(dims).take_front(inner));
  for (int64_t i = 0; i < outer; ++i) {
    GemmCall c = g;
    for (unsigned d = 0; d < inner; ++d) {
      c.OffA += index[d] * da[d];
      c.OffB += index[d] * db[d];
      c.OffC += index[d] * dc[d];
    }
    out.push_back(c);
    for (int d = int(inner) - 1; d >= 0; --d) {
      if (++index[d] < dims[d])
        break;
      index[d] = 0;
    }
  }
  return Error::success();
}

struct MatMulApply {
  const KernelContext &Ctx;
  template <typename T> Error apply() const {
    SmallVector<GemmCall, 4> calls;
    if (Error e = matMulCalls(Ctx, calls))
      return e;
    return runGemms<T>(Ctx, calls, Ctx.Inputs[0].as<T>(), Ctx.Inputs[1].as<T>(),
                       Ctx.Outputs[0].as<T>());
  }
};

Error gemmKernel(const KernelContext &ctx) {
  return dispatch<kernels::FloatTypes>(ctx, ctx.Inputs[0].Type, GemmApply{ctx});
}

Error matMulKernel(const KernelContext &ctx) {
  return dispatch<kernels::FloatTypes>(ctx, ctx.Inputs[0].Type,
                                       MatMulApply{ctx});
}

} // namespace

void cuda::registerLinalgKernels() {
  registerKernel(OpKind::Gemm, gemmKernel);
  registerKernel(OpKind::MatMul, matMulKernel);
}

//===- CudaLinalgTest.cpp - kernels/cuda/Linalg.cu vs the CPU -------------===//
//
// The emulator runs Linalg.cu's GEMM list (the strided batches and offsets
// that cuBLASLt gets on the GPU) through a reference loop, so these cases
// check how each MatMul and Gemm is split into batched calls.
//
//===----------------------------------------------------------------------===//
#include "CudaKernelTestUtil.h"

using namespace headroom;
using namespace headroom::cudatest;

namespace {

CudaCase matmul(DType t, std::vector<int64_t> a, std::vector<int64_t> b,
                std::vector<int64_t> out) {
  CudaCase c;
  c.Op = "MatMul";
  c.Inputs = {randomTensor({t, a}, 1), randomTensor({t, b}, 2)};
  c.Outputs = {{t, out}};
  c.Tol = {1e-5, 1e-5};
  if (t == DType::BF16 || t == DType::F16)
    c.Tol = {1e-2, 1e-2};
  return c;
}

TEST(CudaLinalg, MatMulBatchesAndBroadcasts) {
  std::vector<std::vector<std::vector<int64_t>>> shapes = {
      {{3, 4}, {4, 5}, {3, 5}},
      {{4}, {4, 5}, {5}},
      {{3, 4}, {4}, {3}},
      {{2, 3, 4}, {4, 5}, {2, 3, 5}},             // A's batches stack into rows
      {{2, 3, 4}, {2, 4, 5}, {2, 3, 5}},          // one strided batch
      {{3, 4}, {2, 4, 5}, {2, 3, 5}},             // A broadcast: stride 0
      {{2, 1, 3, 4}, {1, 5, 4, 2}, {2, 5, 3, 2}}, // outer calls
      {{2, 3, 1, 4}, {3, 4, 6}, {2, 3, 1, 6}},
      {{2, 3, 0}, {0, 5}, {2, 3, 5}}, // empty inner dimension
      {{6, 2, 3}, {6, 3, 2}, {6, 2, 2}}};
  for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16})
    for (const auto &s : shapes)
      EXPECT_EQ(compareCudaWithCpu(matmul(t, s[0], s[1], s[2])), "")
          << dtypeName(t).str() << " " << shapeString(s[0]) << " x "
          << shapeString(s[1]);
}

/// headroom's transA/transB: the operand's last two axes swapped.
TEST(CudaLinalg, MatMulTransposedOperands) {
  auto swapped = [](std::vector<int64_t> s, bool swap) {
    if (swap)
      std::swap(s[s.size() - 2], s[s.size() - 1]);
    return s;
  };
  std::vector<std::vector<std::vector<int64_t>>> shapes = {
      {{3, 4}, {4, 5}, {3, 5}},
      {{2, 3, 4}, {4, 5}, {2, 3, 5}},
      {{2, 3, 4}, {2, 4, 5}, {2, 3, 5}},
      {{3, 4}, {2, 4, 5}, {2, 3, 5}},
      {{2, 1, 3, 4}, {1, 5, 4, 2}, {2, 5, 3, 2}},
      {{2, 3, 0}, {0, 5}, {2, 3, 5}}};
  for (DType t : {DType::F32, DType::F64, DType::BF16})
    for (const auto &s : shapes)
      for (int flags = 1; flags < 4; ++flags) {
        bool ta = flags & 1, tb = flags & 2;
        CudaCase c = matmul(t, swapped(s[0], ta), swapped(s[1], tb), s[2]);
        c.Attrs["transA"] = Attribute::getInt(ta);
        c.Attrs["transB"] = Attribute::getInt(tb);
        EXPECT_EQ(compareCudaWithCpu(c), "")
            << dtypeName(t).str() << " " << shapeString(s[0]) << " x "
            << shapeString(s[1]) << " flags " << flags;
      }
}

TEST(CudaLinalg, GemmTransposesAlphaBetaAndBias) {
  for (DType t : {DType::F32, DType::BF16})
    for (int transA = 0; transA < 2; ++transA)
      for (int transB = 0; transB < 2; ++transB)
        for (std::vector<int64_t> bias :
             std::vector<std::vector<int64_t>>{{}, {5}, {3, 1}, {3, 5}, {1}}) {
          CudaCase c;
          c.Op = "Gemm";
          std::vector<int64_t> a =
              transA ? std::vector<int64_t>{4, 3} : std::vector<int64_t>{3, 4};
          std::vector<int64_t> b =
              transB ? std::vector<int64_t>{5, 4} : std::vector<int64_t>{4, 5};
          c.Inputs = {randomTensor({t, a}, 1), randomTensor({t, b}, 2),
                      randomTensor({t, bias}, 3)};
          c.Outputs = {{t, {3, 5}}};
          c.Attrs["transA"] = Attribute::getInt(transA);
          c.Attrs["transB"] = Attribute::getInt(transB);
          c.Attrs["alpha"] = Attribute::getFloat(0.5);
          c.Attrs["beta"] = Attribute::getFloat(2);
          c.Tol =
              t == DType::F32 ? Tolerance{1e-5, 1e-5} : Tolerance{2e-2, 1e-2};
          EXPECT_EQ(compareCudaWithCpu(c), "")
              << transA << transB << shapeString(bias);
          c.Absent = {false, false, true};
          EXPECT_EQ(compareCudaWithCpu(c), "");
        }
}

} // namespace

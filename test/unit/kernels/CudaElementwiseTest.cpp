//===- CudaElementwiseTest.cpp - kernels/cuda/Elementwise.cu vs the CPU ---===//
//
// Also the registry against cudaHasKernel (kernels/cuda/CudaTarget.h), and the
// f16/bf16 conversions of kernels/cuda/Device.h against compiler/Types.cpp's.
//
//===----------------------------------------------------------------------===//
#include "CudaKernelTestUtil.h"
#include "kernels/cuda/CudaTarget.h"

#include <algorithm>

using namespace headroom;
using namespace headroom::cudatest;

namespace {

TEST(CudaKernels, RegistryIsEveryKernelOp) {
  std::vector<std::string> listed;
  for (const OpInfo &op : allOps())
    if (cudaHasKernel(op.Kind))
      listed.push_back(op.Name.str());
  std::sort(listed.begin(), listed.end());
  EXPECT_EQ(cuda::registeredOps(), listed);
}

TEST(CudaKernels, HalfAndBf16ConversionsEqualTheCompilers) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float a = cuda::halfToFloat(uint16_t(h)), b = halfToFloat(uint16_t(h));
    ASSERT_TRUE(std::memcmp(&a, &b, 4) == 0) << "half " << h;
    a = cuda::bf16ToFloat(uint16_t(h)), b = bf16ToFloat(uint16_t(h));
    ASSERT_TRUE(std::memcmp(&a, &b, 4) == 0) << "bf16 " << h;
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t bits = rng();
    // Every exponent, and the ranges around half's subnormals and overflow.
    if (i % 3 == 1)
      bits = (bits & 0x807fffffu) | ((101u + rng() % 45) << 23);
    float f;
    std::memcpy(&f, &bits, 4);
    ASSERT_EQ(cuda::floatToHalf(f), floatToHalf(f)) << "bits " << bits;
    ASSERT_EQ(cuda::floatToBf16(f), floatToBf16(f)) << "bits " << bits;
  }
}

TensorType ty(DType t, std::vector<int64_t> shape) { return {t, shape}; }

CudaCase unary(const char *op, DType t, std::vector<int64_t> shape,
               double lo = -3, double hi = 3) {
  CudaCase c;
  c.Op = op;
  c.Inputs = {randomTensor(ty(t, shape), 1, lo, hi)};
  c.Outputs = {ty(t, shape)};
  return c;
}

CudaCase binary(const char *op, DType t, std::vector<int64_t> a,
                std::vector<int64_t> b, std::vector<int64_t> out,
                DType result = DType::F32) {
  CudaCase c;
  c.Op = op;
  c.Inputs = {randomTensor(ty(t, a), 1), randomTensor(ty(t, b), 2)};
  c.Outputs = {ty(isFloat(result) && result == DType::F32 ? t : result, out)};
  return c;
}

TEST(CudaElementwise, UnaryOpsMatchTheCpu) {
  const char *floatOps[] = {"Abs",  "Neg",  "Exp",        "Tanh", "Sigmoid",
                            "Relu", "Erf",  "Sin",        "Cos",  "Floor",
                            "Ceil", "Sqrt", "Reciprocal", "Log"};
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16})
    for (const char *op : floatOps) {
      bool positive = std::string(op) == "Sqrt" || std::string(op) == "Log";
      CudaCase c = unary(op, t, {3, 5, 7}, positive ? 0.1 : -3, 3);
      // The emulator calls the same <cmath> functions as the CPU, except
      // for f32 Tanh, Sigmoid and Erf, which the CPU computes with its
      // vectorized polynomials (kernels/cpu/VecMath.h, within 2 ulp of
      // libm; a sigmoid adds one rounding).
      c.Tol = {0, 0};
      std::string name = op;
      if ((name == "Tanh" || name == "Sigmoid" || name == "Erf") &&
          t == DType::F32)
        c.Tol = {1e-30, 5e-7};
      EXPECT_EQ(compareCudaWithCpu(c), "") << op << " " << dtypeName(t).str();
    }
  for (DType t : {DType::I8, DType::I32, DType::I64, DType::U8})
    for (const char *op : {"Abs", "Neg", "Relu"})
      EXPECT_EQ(compareCudaWithCpu(unary(op, t, {40}, -100, 100)), "") << op;
  CudaCase n = unary("Not", DType::Bool, {17});
  EXPECT_EQ(compareCudaWithCpu(n), "");
  CudaCase id = unary("Identity", DType::F16, {2, 3});
  EXPECT_EQ(compareCudaWithCpu(id), "");
}

TEST(CudaElementwise, ParameterizedUnaryOps) {
  CudaCase leaky = unary("LeakyRelu", DType::BF16, {64});
  leaky.Attrs["alpha"] = Attribute::getFloat(0.1);
  EXPECT_EQ(compareCudaWithCpu(leaky), "");
  CudaCase hs = unary("HardSigmoid", DType::F32, {64}, -6, 6);
  hs.Attrs["alpha"] = Attribute::getFloat(1.0 / 6);
  EXPECT_EQ(compareCudaWithCpu(hs), "");
  for (DType t : {DType::F32, DType::I64}) {
    CudaCase clip = unary("Clip", t, {64}, -10, 10);
    Tensor lo(ty(t, {})), hi(ty(t, {}));
    lo.setDouble(0, -2);
    hi.setDouble(0, 6);
    clip.Inputs.push_back(lo);
    clip.Inputs.push_back(hi);
    clip.Constant = {false, true, true};
    EXPECT_EQ(compareCudaWithCpu(clip), "");
    clip.Absent = {false, true, false}; // max only
    EXPECT_EQ(compareCudaWithCpu(clip), "");
  }
  CudaCase notConstant = unary("Clip", DType::F32, {4});
  notConstant.Inputs.push_back(Tensor(ty(DType::F32, {})));
  EXPECT_NE(compareCudaWithCpu(notConstant).find("min must be a constant"),
            std::string::npos);
}

TEST(CudaElementwise, BroadcastingBinaryOps) {
  std::vector<std::vector<std::vector<int64_t>>> shapes = {
      {{4, 5}, {4, 5}, {4, 5}},
      {{4, 5}, {5}, {4, 5}},
      {{4, 1}, {1, 5}, {4, 5}},
      {{}, {3, 2}, {3, 2}},
      {{2, 1, 3, 1}, {4, 1, 5}, {2, 4, 3, 5}},
      {{6, 1, 7}, {6, 3, 1}, {6, 3, 7}}};
  for (const auto &s : shapes)
    for (DType t : {DType::F32, DType::BF16, DType::I64})
      for (const char *op : {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"}) {
        if (std::string(op) == "Pow" && !isFloat(t))
          continue;
        CudaCase c = binary(op, t, s[0], s[1], s[2]);
        c.Tol = {0, 0};
        EXPECT_EQ(compareCudaWithCpu(c), "") << op << " " << dtypeName(t).str();
      }
  for (const char *op :
       {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"}) {
    CudaCase c = binary(op, DType::I32, {3, 4}, {4}, {3, 4}, DType::Bool);
    EXPECT_EQ(compareCudaWithCpu(c), "") << op;
  }
  for (const char *op : {"And", "Or"})
    EXPECT_EQ(compareCudaWithCpu(
                  binary(op, DType::Bool, {3, 4}, {3, 1}, {3, 4}, DType::Bool)),
              "");
}

TEST(CudaElementwise, IntegerEdgeCases) {
  CudaCase div;
  div.Op = "Div";
  Tensor a(ty(DType::I32, {4})), b(ty(DType::I32, {4}));
  int32_t av[] = {7, -7, INT32_MIN, 5}, bv[] = {0, 2, -1, -3};
  for (int i = 0; i < 4; ++i)
    a.setInt(i, av[i]), b.setInt(i, bv[i]);
  div.Inputs = {a, b};
  div.Outputs = {ty(DType::I32, {4})};
  EXPECT_EQ(compareCudaWithCpu(div), "");
  CudaCase pow;
  pow.Op = "Pow"; // mixed types: f32 base, i64 exponent
  pow.Inputs = {randomTensor(ty(DType::F32, {5}), 3),
                randomTensor(ty(DType::I64, {5}), 4, 0, 4)};
  pow.Outputs = {ty(DType::F32, {5})};
  EXPECT_EQ(compareCudaWithCpu(pow), "");
}

TEST(CudaElementwise, VariadicWhereCast) {
  CudaCase sum;
  sum.Op = "Sum";
  sum.Inputs = {randomTensor(ty(DType::F32, {3, 4}), 1),
                randomTensor(ty(DType::F32, {4}), 2),
                randomTensor(ty(DType::F32, {3, 1}), 3)};
  sum.Outputs = {ty(DType::F32, {3, 4})};
  EXPECT_EQ(compareCudaWithCpu(sum), "");
  CudaCase where;
  where.Op = "Where";
  where.Inputs = {randomTensor(ty(DType::Bool, {3, 1}), 1),
                  randomTensor(ty(DType::F16, {4}), 2),
                  randomTensor(ty(DType::F16, {3, 4}), 3)};
  where.Outputs = {ty(DType::F16, {3, 4})};
  EXPECT_EQ(compareCudaWithCpu(where), "");
  DType types[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I8,
                   DType::I32, DType::I64, DType::U8,  DType::Bool};
  for (DType from : types)
    for (DType to : types) {
      CudaCase c;
      c.Op = "Cast";
      Tensor x = randomTensor(ty(from, {50}), 9, -300, 300);
      x.setDouble(0, std::nan(""));
      c.Inputs = {x};
      c.Outputs = {ty(to, {50})};
      c.Attrs["to"] = Attribute::getType(to);
      c.Tol = {0, 0};
      EXPECT_EQ(compareCudaWithCpu(c), "")
          << dtypeName(from).str() << " -> " << dtypeName(to).str();
    }
}

TEST(CudaElementwise, DropoutMasksEqualTheCpusBitForBit) {
  for (DType t : {DType::F32, DType::BF16, DType::F64}) {
    CudaCase c;
    c.Op = "Dropout";
    Tensor ratio(ty(DType::F32, {})), training(ty(DType::Bool, {}));
    ratio.setDouble(0, 0.3);
    training.setDouble(0, 1);
    c.Inputs = {randomTensor(ty(t, {1000}), 1), ratio, training};
    c.Constant = {false, true, true};
    c.Outputs = {ty(t, {1000}), ty(DType::Bool, {1000})};
    c.Seed = 42;
    c.Tol = {0, 0};
    EXPECT_EQ(compareCudaWithCpu(c), "") << dtypeName(t).str();
  }
}

} // namespace

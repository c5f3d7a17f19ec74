//===- CudaConvPoolTest.cpp - kernels/cuda/ConvPool.cu vs the CPU ---------===//
//
// Every op of the family over 1-D, 2-D and 3-D windows with strides, pads
// (explicit and automatic), dilations, groups (depthwise too), ceil_mode,
// count_include_pad and MaxPool's Indices in both storage orders, in f32,
// f64, f16 and bf16; ties and the CPU's errors as well.
//
//===----------------------------------------------------------------------===//
#include "CudaKernelTestUtil.h"

using namespace headroom;
using namespace headroom::cudatest;

namespace {

using Shape = std::vector<int64_t>;

TensorType ty(DType t, Shape shape) { return {t, shape}; }

/// The tolerance of results summed in float (f64: in double) and rounded
/// once to `t`: f16 and bf16 results may round the other way.
Tolerance tolFor(DType t, double f32 = 1e-5) {
  switch (t) {
  case DType::F64:
    return {1e-12, 1e-12};
  case DType::F16:
    return {4e-3, 4e-3};
  case DType::BF16:
    return {2e-2, 1.6e-2};
  default:
    return {f32, f32};
  }
}

/// Runs `c` on the emulated CUDA kernel alone; its error, or "".
std::string cudaError(const CudaCase &c) {
  std::vector<Tensor> outs;
  return runCudaOnly(c, outs);
}

/// A window geometry and the shapes it gives.
struct Geometry {
  Shape In, Kernel, Strides, Pads, Dilations;
  std::string AutoPad = ""; // empty: not set
  bool CeilMode = false;

  unsigned rank() const { return In.size(); }
  int64_t stride(unsigned a) const { return Strides.empty() ? 1 : Strides[a]; }
  int64_t dilation(unsigned a) const {
    return Dilations.empty() ? 1 : Dilations[a];
  }
  /// The spatial output shape (ONNX's rules, what the compiler computes).
  Shape out() const {
    Shape o;
    for (unsigned a = 0; a < rank(); ++a) {
      int64_t s = stride(a);
      if (AutoPad == "SAME_UPPER" || AutoPad == "SAME_LOWER") {
        o.push_back((In[a] + s - 1) / s);
        continue;
      }
      int64_t pads =
          AutoPad == "VALID" || Pads.empty() ? 0 : Pads[a] + Pads[a + rank()];
      int64_t room = In[a] + pads - ((Kernel[a] - 1) * dilation(a) + 1);
      o.push_back((CeilMode ? (room + s - 1) / s : room / s) + 1);
    }
    return o;
  }
  AttributeMap attrs() const {
    AttributeMap a;
    if (!Strides.empty())
      a["strides"] = Attribute::getInts(Strides);
    if (!Pads.empty())
      a["pads"] = Attribute::getInts(Pads);
    if (!Dilations.empty())
      a["dilations"] = Attribute::getInts(Dilations);
    if (!AutoPad.empty())
      a["auto_pad"] = Attribute::getString(AutoPad);
    if (CeilMode)
      a["ceil_mode"] = Attribute::getInt(1);
    return a;
  }
};

Shape concat(Shape a, const Shape &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

//===----------------------------------------------------------------------===//
// Conv and its gradients
//===----------------------------------------------------------------------===//

struct ConvCase {
  std::string Name;
  int64_t N, C, M, Group;
  Geometry G;
  bool Bias = true;
};

std::vector<ConvCase> convCases() {
  return {
      {"2d_strided_dilated",
       2,
       3,
       4,
       1,
       {{7, 6}, {3, 2}, {2, 1}, {1, 0, 2, 1}, {1, 2}}},
      {"2d_grouped",
       2,
       4,
       6,
       2,
       {{6, 5}, {3, 3}, {2, 1}, {1, 0, 2, 1}, {1, 2}}},
      {"2d_depthwise", 1, 4, 4, 4, {{5, 5}, {3, 3}, {}, {1, 1, 1, 1}, {}}},
      {"2d_depthwise_multiplier",
       2,
       3,
       6,
       3,
       {{6, 7}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {}},
       false},
      {"2d_pointwise", 2, 5, 3, 1, {{4, 3}, {1, 1}, {}, {}, {}}},
      {"2d_pads_past_the_kernel",
       1,
       2,
       3,
       1,
       {{3, 4}, {2, 2}, {}, {0, 0, 0, 4}, {}}},
      {"2d_no_bias",
       3,
       2,
       2,
       1,
       {{5, 5}, {2, 3}, {3, 2}, {0, 1, 1, 0}, {2, 1}},
       false},
      {"1d", 2, 3, 2, 1, {{9}, {3}, {2}, {1, 2}, {2}}},
      {"1d_depthwise", 2, 3, 3, 3, {{8}, {4}, {1}, {2, 1}, {}}},
      {"3d_grouped",
       1,
       4,
       2,
       2,
       {{5, 4, 6}, {2, 3, 2}, {1, 2, 1}, {0, 1, 1, 1, 0, 1}, {1, 1, 2}}},
      {"same_upper",
       1,
       2,
       3,
       1,
       {{5, 6}, {3, 3}, {2, 2}, {}, {}, "SAME_UPPER"}},
      {"same_lower",
       2,
       2,
       3,
       1,
       {{5, 6}, {3, 2}, {2, 3}, {}, {}, "SAME_LOWER"}},
      {"valid",
       1,
       2,
       3,
       1,
       {{5, 6}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {}, "VALID"}},
      {"empty_batch", 0, 2, 3, 1, {{4, 4}, {3, 3}, {}, {}, {}}},
  };
}

Shape xShape(const ConvCase &c) { return concat({c.N, c.C}, c.G.In); }
Shape wShape(const ConvCase &c) {
  return concat({c.M, c.C / c.Group}, c.G.Kernel);
}
Shape yShape(const ConvCase &c) { return concat({c.N, c.M}, c.G.out()); }
AttributeMap convAttrs(const ConvCase &c) {
  AttributeMap a = c.G.attrs();
  a["group"] = Attribute::getInt(c.Group);
  a["kernel_shape"] = Attribute::getInts(c.G.Kernel);
  return a;
}

constexpr DType kFloatTypes[] = {DType::F32, DType::F64, DType::F16,
                                 DType::BF16};

TEST(CudaConvPool, ConvMatchesTheCpu) {
  for (DType t : kFloatTypes)
    for (const ConvCase &cc : convCases()) {
      CudaCase c;
      c.Op = "Conv";
      c.Inputs = {randomTensor(ty(t, xShape(cc)), 1),
                  randomTensor(ty(t, wShape(cc)), 2)};
      if (cc.Bias)
        c.Inputs.push_back(randomTensor(ty(t, {cc.M}), 3));
      c.Outputs = {ty(t, yShape(cc))};
      c.Attrs = convAttrs(cc);
      c.Tol = tolFor(t, 1e-4);
      EXPECT_EQ(compareCudaWithCpu(c), "")
          << cc.Name << " " << dtypeName(t).str();
    }
}

TEST(CudaConvPool, ConvWithAnAbsentBias) {
  ConvCase cc = convCases()[1];
  CudaCase c;
  c.Op = "Conv";
  c.Inputs = {randomTensor(ty(DType::F32, xShape(cc)), 1),
              randomTensor(ty(DType::F32, wShape(cc)), 2),
              Tensor(ty(DType::F32, {cc.M}))};
  c.Absent = {false, false, true};
  c.Outputs = {ty(DType::F32, yShape(cc))};
  c.Attrs = convAttrs(cc);
  c.Tol = tolFor(DType::F32, 1e-4);
  EXPECT_EQ(compareCudaWithCpu(c), "");
}

TEST(CudaConvPool, ConvGradInputMatchesTheCpu) {
  for (DType t : kFloatTypes)
    for (const ConvCase &cc : convCases()) {
      CudaCase c;
      c.Op = "ConvGradInput";
      c.Inputs = {randomTensor(ty(t, yShape(cc)), 4),
                  randomTensor(ty(t, wShape(cc)), 5)};
      c.Outputs = {ty(t, xShape(cc))};
      c.Attrs = convAttrs(cc);
      c.Tol = tolFor(t, 1e-4);
      EXPECT_EQ(compareCudaWithCpu(c), "")
          << cc.Name << " " << dtypeName(t).str();
    }
}

TEST(CudaConvPool, ConvGradWeightMatchesTheCpu) {
  for (DType t : kFloatTypes)
    for (const ConvCase &cc : convCases()) {
      CudaCase c;
      c.Op = "ConvGradWeight";
      c.Inputs = {randomTensor(ty(t, yShape(cc)), 6),
                  randomTensor(ty(t, xShape(cc)), 7)};
      c.Outputs = {ty(t, wShape(cc))};
      c.Attrs = convAttrs(cc);
      c.Tol = tolFor(t, 1e-4);
      EXPECT_EQ(compareCudaWithCpu(c), "")
          << cc.Name << " " << dtypeName(t).str();
    }
}

TEST(CudaConvPool, ConvGradWeightOverALargeReduction) {
  // 2 x 40 x 40 outputs per weight: more than a block's threads.
  ConvCase cc{"large", 2, 2, 3, 1, {{40, 40}, {3, 3}, {}, {1, 1, 1, 1}, {}}};
  CudaCase c;
  c.Op = "ConvGradWeight";
  c.Inputs = {randomTensor(ty(DType::F32, yShape(cc)), 6),
              randomTensor(ty(DType::F32, xShape(cc)), 7)};
  c.Outputs = {ty(DType::F32, wShape(cc))};
  c.Attrs = convAttrs(cc);
  c.Tol = {1e-3, 1e-4};
  EXPECT_EQ(compareCudaWithCpu(c), "");
}

TEST(CudaConvPool, ConvRejectsWhatTheCpuRejects) {
  ConvCase cc = convCases()[0];
  CudaCase c;
  c.Op = "Conv";
  c.Inputs = {randomTensor(ty(DType::F32, xShape(cc)), 1),
              randomTensor(ty(DType::F32, wShape(cc)), 2)};
  c.Attrs = convAttrs(cc);
  Shape wrong = yShape(cc);
  ++wrong[3];
  c.Outputs = {ty(DType::F32, wrong)};
  EXPECT_NE(cudaError(c).find("does not match the window"), std::string::npos)
      << cudaError(c);
  c.Outputs = {ty(DType::F32, yShape(cc))};
  c.Attrs["auto_pad"] = Attribute::getString("SAME_SIDEWAYS");
  EXPECT_NE(cudaError(c).find("auto_pad 'SAME_SIDEWAYS'"), std::string::npos);
  c.Attrs = convAttrs(cc);
  c.Attrs["group"] = Attribute::getInt(2);
  EXPECT_NE(cudaError(c).find("do not match group 2"), std::string::npos);
  c.Attrs = convAttrs(cc);
  c.Attrs["strides"] = Attribute::getInts({1});
  EXPECT_NE(cudaError(c).find("strides has 1 values, 2 expected"),
            std::string::npos);
  c.Attrs = convAttrs(cc);
  c.Inputs[1] = randomTensor(ty(DType::F16, wShape(cc)), 2);
  EXPECT_NE(cudaError(c).find("expected one type"), std::string::npos);
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

struct PoolCase {
  std::string Name;
  int64_t N, C;
  Geometry G;
};

std::vector<PoolCase> poolCases() {
  return {
      {"2d_overlapping_padded",
       2,
       3,
       {{7, 6}, {3, 3}, {2, 1}, {1, 1, 1, 1}, {}}},
      {"2d_dilated_ceil_mode",
       1,
       2,
       {{8, 7}, {2, 3}, {3, 2}, {0, 0, 0, 0}, {2, 1}, "", true}},
      {"2d_ceil_mode_padded",
       2,
       2,
       {{6, 7}, {3, 2}, {2, 2}, {1, 0, 1, 1}, {}, "", true}},
      {"2d_plain", 2, 2, {{6, 6}, {2, 2}, {2, 2}, {}, {}}},
      {"2d_same_upper", 1, 3, {{5, 6}, {3, 3}, {2, 2}, {}, {}, "SAME_UPPER"}},
      {"1d_same_lower", 2, 2, {{7}, {3}, {2}, {}, {}, "SAME_LOWER"}},
      {"1d_valid", 2, 2, {{7}, {2}, {3}, {1, 1}, {}, "VALID"}},
      {"1d_dilated", 1, 3, {{9}, {3}, {1}, {2, 1}, {3}}},
      {"3d", 1, 2, {{4, 5, 6}, {2, 2, 3}, {1, 1, 2}, {0, 0, 1, 0, 0, 1}, {}}},
      {"empty_batch", 0, 2, {{4, 4}, {2, 2}, {}, {}, {}}},
  };
}

Shape inShape(const PoolCase &c) { return concat({c.N, c.C}, c.G.In); }
Shape outShape(const PoolCase &c) { return concat({c.N, c.C}, c.G.out()); }
AttributeMap poolAttrs(const PoolCase &c) {
  AttributeMap a = c.G.attrs();
  a["kernel_shape"] = Attribute::getInts(c.G.Kernel);
  return a;
}

/// Small integers in [0, 3): windows with tied maxima.
Tensor tiedTensor(TensorType type, unsigned seed) {
  Tensor t = randomTensor(type, seed, 0, 3);
  for (int64_t i = 0; i < t.numElements(); ++i)
    t.setDouble(i, std::floor(t.getDouble(i)));
  return t;
}

TEST(CudaConvPool, MaxPoolMatchesTheCpu) {
  for (DType t : kFloatTypes)
    for (const PoolCase &pc : poolCases())
      for (bool ties : {false, true}) {
        CudaCase c;
        c.Op = "MaxPool";
        c.Inputs = {ties ? tiedTensor(ty(t, inShape(pc)), 1)
                         : randomTensor(ty(t, inShape(pc)), 1)};
        c.Outputs = {ty(t, outShape(pc))};
        c.Attrs = poolAttrs(pc);
        c.Tol = {0, 0};
        EXPECT_EQ(compareCudaWithCpu(c), "")
            << pc.Name << " " << dtypeName(t).str();
      }
}

TEST(CudaConvPool, MaxPoolIndicesInBothStorageOrders) {
  for (const PoolCase &pc : poolCases())
    for (int order : {0, 1})
      for (DType t : {DType::F32, DType::BF16}) {
        CudaCase c;
        c.Op = "MaxPool";
        c.Inputs = {tiedTensor(ty(t, inShape(pc)), 2)};
        c.Outputs = {ty(t, outShape(pc)), ty(DType::I64, outShape(pc))};
        c.Attrs = poolAttrs(pc);
        c.Attrs["storage_order"] = Attribute::getInt(order);
        c.Tol = {0, 0};
        EXPECT_EQ(compareCudaWithCpu(c), "") << pc.Name << " order " << order;
      }
}

TEST(CudaConvPool, MaxPoolOfIntegers) {
  for (DType t : {DType::I8, DType::U8})
    for (const PoolCase &pc : poolCases()) {
      CudaCase c;
      c.Op = "MaxPool";
      c.Inputs = {
          randomTensor(ty(t, inShape(pc)), 3, t == DType::I8 ? -100 : 0, 100)};
      c.Outputs = {ty(t, outShape(pc)), ty(DType::I64, outShape(pc))};
      c.Attrs = poolAttrs(pc);
      EXPECT_EQ(compareCudaWithCpu(c), "")
          << pc.Name << " " << dtypeName(t).str();
    }
  PoolCase pc = poolCases()[0];
  CudaCase c;
  c.Op = "MaxPool";
  c.Inputs = {randomTensor(ty(DType::I32, inShape(pc)), 3)};
  c.Outputs = {ty(DType::I32, outShape(pc))};
  c.Attrs = poolAttrs(pc);
  EXPECT_NE(cudaError(c).find("element type i32 is not supported"),
            std::string::npos)
      << cudaError(c);
}

TEST(CudaConvPool, MaxPoolGradRoutesTiesAsTheCpu) {
  // The sums of dy run in the CPU's order, so they agree exactly.
  for (DType t : kFloatTypes)
    for (const PoolCase &pc : poolCases())
      for (bool ties : {false, true}) {
        CudaCase c;
        c.Op = "MaxPoolGrad";
        c.Inputs = {randomTensor(ty(t, outShape(pc)), 4),
                    ties ? tiedTensor(ty(t, inShape(pc)), 5)
                         : randomTensor(ty(t, inShape(pc)), 5)};
        c.Outputs = {ty(t, inShape(pc))};
        c.Attrs = poolAttrs(pc);
        c.Tol = {0, 0};
        EXPECT_EQ(compareCudaWithCpu(c), "")
            << pc.Name << " " << dtypeName(t).str();
      }
}

TEST(CudaConvPool, AveragePoolMatchesTheCpu) {
  for (DType t : kFloatTypes)
    for (const PoolCase &pc : poolCases())
      for (int includePad : {0, 1}) {
        CudaCase c;
        c.Op = "AveragePool";
        c.Inputs = {randomTensor(ty(t, inShape(pc)), 6)};
        c.Outputs = {ty(t, outShape(pc))};
        c.Attrs = poolAttrs(pc);
        c.Attrs["count_include_pad"] = Attribute::getInt(includePad);
        c.Tol = tolFor(t);
        EXPECT_EQ(compareCudaWithCpu(c), "")
            << pc.Name << " " << dtypeName(t).str() << " " << includePad;
      }
}

TEST(CudaConvPool, AveragePoolGradMatchesTheCpu) {
  // dy / divisor rounds as the CPU's does, and the sums run in its order.
  for (DType t : kFloatTypes)
    for (const PoolCase &pc : poolCases())
      for (int includePad : {0, 1}) {
        CudaCase c;
        c.Op = "AveragePoolGrad";
        c.Inputs = {randomTensor(ty(t, outShape(pc)), 7)};
        c.Outputs = {ty(t, inShape(pc))};
        c.Attrs = poolAttrs(pc);
        c.Attrs["count_include_pad"] = Attribute::getInt(includePad);
        c.Tol = {0, 0};
        EXPECT_EQ(compareCudaWithCpu(c), "")
            << pc.Name << " " << dtypeName(t).str() << " " << includePad;
      }
}

TEST(CudaConvPool, WindowsInThePadding) {
  // Input 4, kernel 2, pads 3 before: the first window reads only padding.
  PoolCase pc{"padding_only", 1, 2, {{4}, {2}, {}, {3, 0}, {}}};
  for (const char *op : {"MaxPool", "AveragePool"}) {
    CudaCase c;
    c.Op = op;
    c.Inputs = {randomTensor(ty(DType::F32, inShape(pc)), 1)};
    c.Outputs = {ty(DType::F32, outShape(pc))};
    c.Attrs = poolAttrs(pc);
    EXPECT_NE(compareCudaWithCpu(c).find("entirely in the padding"),
              std::string::npos)
        << op;
    EXPECT_NE(cudaError(c).find("a window lies entirely in the padding"),
              std::string::npos)
        << op;
  }
  for (const char *op : {"MaxPoolGrad", "AveragePoolGrad"}) {
    CudaCase c;
    c.Op = op;
    c.Inputs = {randomTensor(ty(DType::F32, outShape(pc)), 1)};
    if (std::string(op) == "MaxPoolGrad")
      c.Inputs.push_back(randomTensor(ty(DType::F32, inShape(pc)), 2));
    c.Outputs = {ty(DType::F32, inShape(pc))};
    c.Attrs = poolAttrs(pc);
    EXPECT_NE(cudaError(c).find("a window lies entirely in the padding"),
              std::string::npos)
        << op;
  }
  // Counting the padding, the same window has a divisor: its mean is 0.
  for (const char *op : {"AveragePool", "AveragePoolGrad"}) {
    bool grad = std::string(op) == "AveragePoolGrad";
    CudaCase c;
    c.Op = op;
    c.Inputs = {
        randomTensor(ty(DType::F32, grad ? outShape(pc) : inShape(pc)), 1)};
    c.Outputs = {ty(DType::F32, grad ? inShape(pc) : outShape(pc))};
    c.Attrs = poolAttrs(pc);
    c.Attrs["count_include_pad"] = Attribute::getInt(1);
    EXPECT_EQ(compareCudaWithCpu(c), "") << op;
  }
}

TEST(CudaConvPool, PoolsRejectWhatTheCpuRejects) {
  PoolCase pc = poolCases()[0];
  CudaCase c;
  c.Op = "MaxPool";
  c.Inputs = {randomTensor(ty(DType::F32, inShape(pc)), 1)};
  c.Outputs = {ty(DType::F32, outShape(pc))};
  c.Attrs = poolAttrs(pc);
  c.Attrs["kernel_shape"] = Attribute::getInts({3});
  EXPECT_NE(cudaError(c).find("one value per spatial axis"), std::string::npos);
  c.Attrs = poolAttrs(pc);
  c.Outputs = {ty(DType::F32, outShape(pc)), ty(DType::I32, outShape(pc))};
  EXPECT_NE(cudaError(c).find("Indices must be i64"), std::string::npos);
  // Four spatial axes: the CPU takes them, the CUDA kernels do not.
  PoolCase four{"4d", 1, 1, {{2, 2, 2, 2}, {1, 1, 1, 1}, {}, {}, {}}};
  c.Inputs = {randomTensor(ty(DType::F32, inShape(four)), 1)};
  c.Outputs = {ty(DType::F32, outShape(four))};
  c.Attrs = poolAttrs(four);
  EXPECT_NE(cudaError(c).find("4 spatial axes are not supported on cuda"),
            std::string::npos)
      << cudaError(c);
}

TEST(CudaConvPool, GlobalAveragePoolMatchesTheCpu) {
  std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3, 5, 4}, {2, 3, 1, 1}},
      {{2, 3, 7}, {2, 3, 1}},
      {{1, 2, 3, 4, 5}, {1, 2, 1, 1, 1}},
      {{3, 2}, {3, 2}},
      {{2, 2, 30, 30}, {2, 2, 1, 1}},
      {{1, 2, 0}, {1, 2, 1}},
      {{0, 2, 3}, {0, 2, 1}}};
  for (DType t : kFloatTypes)
    for (const auto &[in, out] : shapes) {
      CudaCase c;
      c.Op = "GlobalAveragePool";
      c.Inputs = {randomTensor(ty(t, in), 8)};
      c.Outputs = {ty(t, out)};
      c.Tol = tolFor(t);
      EXPECT_EQ(compareCudaWithCpu(c), "")
          << shapeString(in) << " " << dtypeName(t).str();
    }
  CudaCase c;
  c.Op = "GlobalAveragePool";
  c.Inputs = {randomTensor(ty(DType::F32, {2, 3, 4}), 8)};
  c.Outputs = {ty(DType::F32, {2, 1, 1})};
  EXPECT_NE(cudaError(c).find("one value per [N, C] plane"), std::string::npos);
}

} // namespace

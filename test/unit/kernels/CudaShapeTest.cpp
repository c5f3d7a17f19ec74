//===- CudaShapeTest.cpp - kernels/cuda/Shape.cu vs the CPU ---------------===//
//
// Every data-movement kernel against kernels/cpu/Shape.cpp on shapes that
// exercise merged axes, wide units (rows contiguous on both sides) and the
// element-by-element paths, in 1-, 2-, 4- and 8-byte types; then what the
// CUDA kernels do differently: out-of-range indices (zeros or skipped, not
// an error), shape operands that must be plan constants, and more merged
// dimensions than kMaxDims.
//
//===----------------------------------------------------------------------===//
#include "CudaKernelTestUtil.h"

using namespace headroom;
using namespace headroom::cudatest;

namespace {

TensorType ty(DType t, std::vector<int64_t> shape) { return {t, shape}; }

Tensor i64s(std::vector<int64_t> v) {
  return Tensor::fromInts(DType::I64, {int64_t(v.size())}, v);
}

/// Random data of `type`: in [-3, 3), or [0, 6) for unsigned types (a
/// negative double does not convert to them).
Tensor rnd(TensorType type, unsigned seed) {
  bool isUnsigned = type.dtype() == DType::U8;
  return randomTensor(type, seed, isUnsigned ? 0 : -3, isUnsigned ? 6 : 3);
}

Tensor scalar(DType t, double v) {
  Tensor s(ty(t, {}));
  s.setDouble(0, v);
  return s;
}

/// A case of `op` on x with result type `out`.
CudaCase unaryCase(const char *op, Tensor x, TensorType out,
                   AttributeMap attrs = {}) {
  CudaCase c;
  c.Op = op;
  c.Inputs = {std::move(x)};
  c.Outputs = {std::move(out)};
  c.Attrs = std::move(attrs);
  c.Tol = {0, 0};
  return c;
}

/// Appends an operand, a plan constant when `constant`.
void addInput(CudaCase &c, Tensor t, bool constant = true) {
  c.Inputs.push_back(std::move(t));
  c.Constant.resize(c.Inputs.size(), false);
  c.Constant.back() = constant;
}

/// Runs `c` on the emulated CUDA kernels only; the error, or "" with the
/// results in `outs`.
std::string runCuda(const CudaCase &c, std::vector<Tensor> &outs) {
  return runCudaOnly(c, outs);
}

std::string cudaError(const CudaCase &c) {
  std::vector<Tensor> outs;
  return runCuda(c, outs);
}

std::vector<int64_t> permuted(const std::vector<int64_t> &shape,
                              const std::vector<int64_t> &perm) {
  std::vector<int64_t> out;
  for (int64_t p : perm)
    out.push_back(shape[p]);
  return out;
}

//===----------------------------------------------------------------------===//
// Layout-preserving ops, Transpose, Concat, Split
//===----------------------------------------------------------------------===//

TEST(CudaShape, ReshapeFamilyCopies) {
  for (DType t : {DType::F32, DType::BF16, DType::I8, DType::Bool})
    for (const char *op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}) {
      CudaCase c = unaryCase(op, rnd(ty(t, {2, 3, 4}), 1), ty(t, {6, 1, 4}));
      if (std::string(op) == "Reshape") // the shape operand is not read
        addInput(c, i64s({6, 1, 4}), /*constant=*/false);
      EXPECT_EQ(compareCudaWithCpu(c), "") << op;
    }
  CudaCase wrong = unaryCase("Reshape", randomTensor(ty(DType::F32, {6}), 1),
                             ty(DType::F32, {5}));
  EXPECT_NE(cudaError(wrong).find("differ in size"), std::string::npos);
}

TEST(CudaShape, TransposeAllPermutations) {
  std::vector<std::vector<int64_t>> shapes = {
      {3, 5, 7}, {4, 1, 6}, {2, 3, 4, 5}, {3, 4, 8, 2}, {2, 1, 4, 8}};
  for (DType t : {DType::F32, DType::F16, DType::I8, DType::I64})
    for (const auto &shape : shapes) {
      std::vector<int64_t> perm(shape.size());
      for (size_t i = 0; i < perm.size(); ++i)
        perm[i] = i;
      do {
        CudaCase c = unaryCase("Transpose", rnd(ty(t, shape), 2),
                               ty(t, permuted(shape, perm)),
                               {{"perm", Attribute::getInts(perm)}});
        EXPECT_EQ(compareCudaWithCpu(c), "")
            << dtypeName(t).str() << " " << shapeString(shape) << " perm "
            << perm[0] << perm[1] << perm[2];
      } while (std::next_permutation(perm.begin(), perm.end()));
    }
}

TEST(CudaShape, TransposeDefaultEdgeCasesAndErrors) {
  // No perm: reversed axes; rank 0 and 1; an empty axis.
  CudaCase rev =
      unaryCase("Transpose", randomTensor(ty(DType::BF16, {2, 3, 5}), 3),
                ty(DType::BF16, {5, 3, 2}));
  EXPECT_EQ(compareCudaWithCpu(rev), "");
  for (std::vector<int64_t> shape :
       {std::vector<int64_t>{}, {7}, {0, 3}, {3, 0}}) {
    std::vector<int64_t> out(shape.rbegin(), shape.rend());
    CudaCase c = unaryCase("Transpose", randomTensor(ty(DType::F32, shape), 4),
                           ty(DType::F32, out));
    EXPECT_EQ(compareCudaWithCpu(c), "") << shapeString(shape);
  }
  CudaCase bad =
      unaryCase("Transpose", randomTensor(ty(DType::F32, {2, 3}), 1),
                ty(DType::F32, {3, 2}), {{"perm", Attribute::getInts({1, 1})}});
  EXPECT_NE(cudaError(bad).find("not a permutation"), std::string::npos);
  // Nine axes that cannot merge: more than the kernel's index holds.
  std::vector<int64_t> nine(9, 2), perm9;
  for (int64_t d = 8; d >= 0; --d)
    perm9.push_back(d);
  CudaCase deep =
      unaryCase("Transpose", randomTensor(ty(DType::F32, nine), 1),
                ty(DType::F32, nine), {{"perm", Attribute::getInts(perm9)}});
  EXPECT_NE(cudaError(deep).find("more than 8 dimensions"), std::string::npos);
  // Nine axes of which pairs stay adjacent merge into few.
  std::vector<int64_t> permMerge = {2, 3, 4, 5, 6, 7, 8, 0, 1};
  CudaCase merged = unaryCase(
      "Transpose", randomTensor(ty(DType::F32, nine), 1), ty(DType::F32, nine),
      {{"perm", Attribute::getInts(permMerge)}});
  EXPECT_EQ(compareCudaWithCpu(merged), "");
}

TEST(CudaShape, ConcatAndSplit) {
  for (DType t : {DType::F32, DType::BF16, DType::I8, DType::I64})
    for (int64_t axis : {0, 1, 2, -1, -3}) {
      int64_t a = axis < 0 ? axis + 3 : axis;
      std::vector<int64_t> sizes = {2, 0, 3, 1};
      CudaCase cat;
      cat.Op = "Concat";
      cat.Attrs["axis"] = Attribute::getInt(axis);
      std::vector<int64_t> whole = {4, 5, 6};
      whole[a] = 0;
      for (size_t k = 0; k < sizes.size(); ++k) {
        std::vector<int64_t> part = {4, 5, 6};
        part[a] = sizes[k];
        whole[a] += sizes[k];
        cat.Inputs.push_back(rnd(ty(t, part), 10 + k));
      }
      cat.Outputs = {ty(t, whole)};
      EXPECT_EQ(compareCudaWithCpu(cat), "") << "concat axis " << axis;

      CudaCase split = unaryCase("Split", rnd(ty(t, whole), 5), ty(t, whole),
                                 {{"axis", Attribute::getInt(axis)}});
      split.Outputs.clear();
      for (int64_t s : sizes) {
        std::vector<int64_t> part = whole;
        part[a] = s;
        split.Outputs.push_back(ty(t, part));
      }
      EXPECT_EQ(compareCudaWithCpu(split), "") << "split axis " << axis;
      addInput(split, i64s(sizes));
      EXPECT_EQ(compareCudaWithCpu(split), "") << "split sizes " << axis;
      split.Constant = {false, false};
      EXPECT_NE(cudaError(split).find("split must be a constant"),
                std::string::npos);
    }
  CudaCase bad;
  bad.Op = "Concat";
  bad.Inputs = {randomTensor(ty(DType::F32, {2, 3}), 1),
                randomTensor(ty(DType::F32, {2, 4}), 2)};
  bad.Outputs = {ty(DType::F32, {4, 3})};
  EXPECT_NE(cudaError(bad).find("differ off axis"), std::string::npos);
}

//===----------------------------------------------------------------------===//
// Slice and SliceGrad
//===----------------------------------------------------------------------===//

struct SliceArgs {
  std::vector<int64_t> Starts, Ends, Axes, Steps, Out;
};

CudaCase sliceCase(const char *op, DType t, std::vector<int64_t> shape,
                   const SliceArgs &a) {
  bool grad = std::string(op) == "SliceGrad";
  CudaCase c = unaryCase(op, rnd(ty(t, grad ? a.Out : shape), 6),
                         ty(t, grad ? shape : a.Out));
  addInput(c, i64s(a.Starts));
  addInput(c, i64s(a.Ends));
  if (!a.Axes.empty() || !a.Steps.empty())
    addInput(c, i64s(a.Axes));
  if (!a.Steps.empty())
    addInput(c, i64s(a.Steps));
  return c;
}

TEST(CudaShape, SliceAndSliceGrad) {
  std::vector<int64_t> shape = {4, 6, 8};
  std::vector<SliceArgs> cases = {
      {{1}, {3}, {}, {}, {2, 6, 8}},                    // axes default
      {{0, 2}, {6, 8}, {1, 2}, {}, {4, 6, 6}},          // inner rows
      {{-3}, {1000}, {-1}, {}, {4, 6, 3}},              // negative, clamped
      {{5, 7}, {-100, 0}, {1, 2}, {-2, -3}, {4, 3, 3}}, // reversed
      {{0, 1, 1}, {4, 6, 8}, {0, 1, 2}, {2, 2, 3}, {2, 3, 3}},
      {{3}, {1}, {0}, {1}, {0, 6, 8}}, // empty
      {{0}, {8}, {2}, {4}, {4, 6, 2}},
  };
  for (DType t : {DType::F32, DType::F16, DType::I32, DType::U8})
    for (const char *op : {"Slice", "SliceGrad"})
      for (size_t i = 0; i < cases.size(); ++i)
        EXPECT_EQ(compareCudaWithCpu(sliceCase(op, t, shape, cases[i])), "")
            << op << " " << dtypeName(t).str() << " case " << i;
  // Absent axes with steps given; i32 operands.
  CudaCase c = sliceCase("Slice", DType::F32, {10}, {{1}, {9}, {0}, {3}, {3}});
  c.Absent = {false, false, false, true, false};
  c.Inputs[1] = Tensor::fromInts(DType::I32, {1}, {1});
  EXPECT_EQ(compareCudaWithCpu(c), "");
  CudaCase notConstant =
      sliceCase("Slice", DType::F32, {10}, {{1}, {9}, {}, {}, {8}});
  notConstant.Constant = {false, false, true};
  EXPECT_NE(cudaError(notConstant).find("starts must be a constant"),
            std::string::npos);
  CudaCase zeroStep =
      sliceCase("Slice", DType::F32, {10}, {{1}, {9}, {0}, {0}, {8}});
  EXPECT_NE(cudaError(zeroStep).find("a step is 0"), std::string::npos);
}

//===----------------------------------------------------------------------===//
// Gather, GatherGrad, GatherElements, GatherElementsGrad, ScatterElements
//===----------------------------------------------------------------------===//

TEST(CudaShape, Gather) {
  std::vector<int64_t> shape = {5, 6, 4};
  for (DType t : {DType::F32, DType::BF16, DType::Bool, DType::I64})
    for (DType it : {DType::I32, DType::I64})
      for (int64_t axis : {0, 1, -1}) {
        int64_t a = axis < 0 ? axis + 3 : axis, n = shape[a];
        for (std::vector<int64_t> ishape :
             {std::vector<int64_t>{7}, {2, 3}, {}}) {
          std::vector<int64_t> out(shape.begin(), shape.begin() + a);
          out.insert(out.end(), ishape.begin(), ishape.end());
          out.insert(out.end(), shape.begin() + a + 1, shape.end());
          CudaCase c = unaryCase("Gather", rnd(ty(t, shape), 1), ty(t, out),
                                 {{"axis", Attribute::getInt(axis)}});
          addInput(c, randomTensor(ty(it, ishape), 2, -n, n), false);
          EXPECT_EQ(compareCudaWithCpu(c), "")
              << dtypeName(t).str() << " axis " << axis << " indices "
              << shapeString(ishape);
        }
      }
}

TEST(CudaShape, GatherGradAccumulatesRepeatedRows) {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16})
    for (int64_t axis : {0, 1}) {
      std::vector<int64_t> data = {6, 5, 3}, idx = {4, 3};
      std::vector<int64_t> dy = axis == 0 ? std::vector<int64_t>{4, 3, 5, 3}
                                          : std::vector<int64_t>{6, 4, 3, 3};
      CudaCase c = unaryCase("GatherGrad", rnd(ty(t, dy), 3), ty(t, data),
                             {{"axis", Attribute::getInt(axis)}});
      // Twelve indices into 6 or 5 rows: repeats, and negative ones.
      addInput(c, randomTensor(ty(DType::I64, idx), 4, -data[axis], data[axis]),
               false);
      // f16 and bf16 round after each addition on cuda, once on the CPU.
      bool narrow = t == DType::F16 || t == DType::BF16;
      c.Tol = narrow ? Tolerance{2e-2, 2e-2} : Tolerance{1e-6, 1e-6};
      EXPECT_EQ(compareCudaWithCpu(c), "") << dtypeName(t).str() << " " << axis;
    }
  CudaCase ints =
      unaryCase("GatherGrad", randomTensor(ty(DType::I32, {2, 3}), 1),
                ty(DType::I32, {4, 3}));
  addInput(ints, i64s({0, 1}), false);
  EXPECT_NE(cudaError(ints).find("element type i32 is not supported"),
            std::string::npos);
}

TEST(CudaShape, GatherElementsAndGrad) {
  std::vector<int64_t> data = {4, 5, 6};
  for (DType t : {DType::F32, DType::F16, DType::I64, DType::U8})
    for (int64_t axis : {0, 1, -1}) {
      int64_t a = axis < 0 ? axis + 3 : axis;
      for (std::vector<int64_t> ishape :
           {std::vector<int64_t>{4, 5, 6}, {2, 3, 4}, {7, 2, 1}}) {
        if (a != 0 && ishape[0] > data[0])
          continue;
        CudaCase g =
            unaryCase("GatherElements", rnd(ty(t, data), 1), ty(t, ishape),
                      {{"axis", Attribute::getInt(axis)}});
        addInput(g, randomTensor(ty(DType::I32, ishape), 2, -data[a], data[a]),
                 false);
        EXPECT_EQ(compareCudaWithCpu(g), "")
            << dtypeName(t).str() << " axis " << axis << " "
            << shapeString(ishape);
        if (!isFloat(t))
          continue;
        CudaCase grad =
            unaryCase("GatherElementsGrad", rnd(ty(t, ishape), 3), ty(t, data),
                      {{"axis", Attribute::getInt(axis)}});
        grad.Inputs.push_back(g.Inputs[1]);
        grad.Tol = {1e-6, 1e-6};
        EXPECT_EQ(compareCudaWithCpu(grad), "")
            << "grad " << dtypeName(t).str() << " axis " << axis;
      }
    }
}

TEST(CudaShape, ScatterElementsReductions) {
  std::vector<int64_t> data = {4, 5}, upd = {3, 5};
  for (DType t : {DType::F32, DType::F16, DType::I32, DType::I8, DType::U8})
    for (const char *red : {"none", "add", "mul", "max", "min"})
      for (int64_t axis : {0, -1}) {
        int64_t n = data[axis < 0 ? axis + 2 : axis];
        CudaCase c =
            unaryCase("ScatterElements", rnd(ty(t, data), 1), ty(t, data),
                      {{"axis", Attribute::getInt(axis)},
                       {"reduction", Attribute::getString(red)}});
        addInput(c, randomTensor(ty(DType::I64, upd), 2, -n, n), false);
        addInput(c, rnd(ty(t, upd), 3), false);
        EXPECT_EQ(compareCudaWithCpu(c), "")
            << dtypeName(t).str() << " " << red << " axis " << axis;
      }
  CudaCase boolAdd = unaryCase(
      "ScatterElements", randomTensor(ty(DType::Bool, {3}), 1),
      ty(DType::Bool, {3}), {{"reduction", Attribute::getString("add")}});
  addInput(boolAdd, i64s({0}), false);
  addInput(boolAdd, randomTensor(ty(DType::Bool, {1}), 1), false);
  EXPECT_NE(cudaError(boolAdd).find("element type bool is not supported"),
            std::string::npos);
  boolAdd.Attrs["reduction"] = Attribute::getString("none");
  EXPECT_EQ(compareCudaWithCpu(boolAdd), "");
  boolAdd.Attrs["reduction"] = Attribute::getString("max");
  EXPECT_NE(cudaError(boolAdd).find("element type bool is not supported"),
            std::string::npos);
  boolAdd.Attrs["reduction"] = Attribute::getString("maximum");
  EXPECT_NE(cudaError(boolAdd).find("reduction 'maximum'"), std::string::npos);
}

//===----------------------------------------------------------------------===//
// GatherND, ScatterND
//===----------------------------------------------------------------------===//

struct NdArgs {
  std::vector<int64_t> Data, Indices, Out;
  int64_t Batch;
};

TEST(CudaShape, GatherNdAndScatterNd) {
  std::vector<NdArgs> cases = {
      {{4, 5, 6}, {3, 1}, {3, 5, 6}, 0},    // whole rows
      {{4, 5, 6}, {2, 3, 2}, {2, 3, 6}, 0}, // rows of the last axis
      {{4, 5, 6}, {7, 3}, {7}, 0},          // single elements
      {{4, 5, 6}, {4, 2, 1}, {4, 2, 6}, 1}, // batch_dims
      {{4, 5, 6}, {4, 5, 1}, {4, 5}, 2},
      {{3, 8}, {0, 1}, {0, 8}, 0}, // no tuples
  };
  for (DType t : {DType::F32, DType::BF16, DType::I64, DType::I8})
    for (const NdArgs &a : cases) {
      int64_t k = a.Indices.back();
      // Indices in [-d, d) of the smallest addressed axis.
      int64_t lim = 100;
      for (int64_t j = 0; j < k; ++j)
        lim = std::min(lim, a.Data[a.Batch + j]);
      Tensor idx = randomTensor(ty(DType::I32, a.Indices), 4, -lim, lim);
      CudaCase g = unaryCase("GatherND", rnd(ty(t, a.Data), 1), ty(t, a.Out),
                             {{"batch_dims", Attribute::getInt(a.Batch)}});
      addInput(g, idx, false);
      EXPECT_EQ(compareCudaWithCpu(g), "")
          << dtypeName(t).str() << " " << shapeString(a.Indices);
      if (a.Batch != 0)
        continue;
      for (const char *red : {"none", "add", "mul"}) {
        CudaCase s =
            unaryCase("ScatterND", rnd(ty(t, a.Data), 1), ty(t, a.Data),
                      {{"reduction", Attribute::getString(red)}});
        addInput(s, idx, false);
        addInput(s, rnd(ty(t, a.Out), 5), false);
        EXPECT_EQ(compareCudaWithCpu(s), "") << dtypeName(t).str() << " " << red
                                             << " " << shapeString(a.Indices);
      }
    }
}

//===----------------------------------------------------------------------===//
// Expand, Tile, Pad, Trilu
//===----------------------------------------------------------------------===//

TEST(CudaShape, ExpandAndTile) {
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> expands = {
      {{3, 1}, {2, 3, 4}},    {{}, {5}},    {{1}, {4, 1}}, {{1, 4}, {3, 4}},
      {{2, 1, 8}, {2, 3, 8}}, {{6}, {0, 6}}};
  for (DType t : {DType::F32, DType::F16, DType::U8, DType::I64})
    for (const auto &[in, out] : expands) {
      CudaCase c = unaryCase("Expand", rnd(ty(t, in), 1), ty(t, out));
      addInput(c, i64s(out), false); // not read
      EXPECT_EQ(compareCudaWithCpu(c), "")
          << dtypeName(t).str() << " " << shapeString(in);
    }
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> tiles = {
      {{2, 3}, {2, 2}},
      {{4, 8}, {1, 3}},
      {{3, 1, 4}, {2, 5, 1}},
      {{5}, {0}},
      {{2, 2}, {1, 1}}};
  for (DType t : {DType::F32, DType::BF16, DType::I64})
    for (const auto &[in, reps] : tiles) {
      std::vector<int64_t> out;
      for (size_t d = 0; d < in.size(); ++d)
        out.push_back(in[d] * reps[d]);
      CudaCase c = unaryCase("Tile", rnd(ty(t, in), 1), ty(t, out));
      addInput(c, i64s(reps));
      EXPECT_EQ(compareCudaWithCpu(c), "")
          << dtypeName(t).str() << " " << shapeString(in);
    }
}

TEST(CudaShape, PadModes) {
  struct PadArgs {
    std::vector<int64_t> In, Pads;
  };
  std::vector<PadArgs> cases = {
      {{3, 4}, {1, 2, 2, 1}},
      {{2, 3, 5}, {0, 0, 3, 0, 0, 2}}, // unpadded axes merge
      {{4, 5}, {-1, 2, 1, -2}},        // crop and pad
      {{1, 3}, {2, 0, 2, 3}},          // a size-1 axis reflects as edge
      {{6}, {5, 4}},                   // reflect further than once
      {{}, {}},                        // a scalar
  };
  for (DType t : {DType::F32, DType::F16, DType::I32, DType::I8})
    for (const char *mode : {"constant", "reflect", "edge", "wrap"})
      for (const PadArgs &a : cases) {
        std::vector<int64_t> out;
        size_t r = a.In.size();
        for (size_t d = 0; d < r; ++d)
          out.push_back(a.In[d] + a.Pads[d] + a.Pads[r + d]);
        CudaCase c = unaryCase("Pad", rnd(ty(t, a.In), 1), ty(t, out),
                               {{"mode", Attribute::getString(mode)}});
        addInput(c, i64s(a.Pads));
        EXPECT_EQ(compareCudaWithCpu(c), "")
            << dtypeName(t).str() << " " << mode << " " << shapeString(a.In);
        // The fill is read on the device: it need not be a constant.
        addInput(c, scalar(t, 3), /*constant=*/false);
        EXPECT_EQ(compareCudaWithCpu(c), "")
            << dtypeName(t).str() << " " << mode << " fill";
      }
  CudaCase empty = unaryCase("Pad", randomTensor(ty(DType::F32, {0, 2}), 1),
                             ty(DType::F32, {2, 2}),
                             {{"mode", Attribute::getString("edge")}});
  addInput(empty, i64s({1, 0, 1, 0}));
  EXPECT_NE(cudaError(empty).find("cannot pad an empty axis"),
            std::string::npos);
  empty.Attrs["mode"] = Attribute::getString("constant");
  EXPECT_EQ(compareCudaWithCpu(empty), "");
  empty.Attrs["mode"] = Attribute::getString("wrap");
  EXPECT_NE(cudaError(empty).find("cannot pad an empty axis"),
            std::string::npos);
  empty.Attrs["mode"] = Attribute::getString("circular");
  EXPECT_NE(cudaError(empty).find("mode 'circular' is not supported"),
            std::string::npos);
}

TEST(CudaShape, TriluKeepsATriangle) {
  for (DType t : {DType::F32, DType::BF16, DType::Bool, DType::I64})
    for (std::vector<int64_t> shape :
         {std::vector<int64_t>{5, 5}, {2, 4, 7}, {3, 6, 2}, {0, 3}})
      for (int64_t upper : {0, 1})
        for (int64_t k : {0, 2, -1, -100, 100}) {
          CudaCase c = unaryCase("Trilu", rnd(ty(t, shape), 1), ty(t, shape),
                                 {{"upper", Attribute::getInt(upper)}});
          if (k != 0)
            addInput(c, Tensor::fromInts(DType::I64, {}, {k}));
          EXPECT_EQ(compareCudaWithCpu(c), "")
              << dtypeName(t).str() << " " << shapeString(shape) << " upper "
              << upper << " k " << k;
        }
  CudaCase flat = unaryCase("Trilu", randomTensor(ty(DType::F32, {4}), 1),
                            ty(DType::F32, {4}));
  EXPECT_NE(cudaError(flat).find("rank >= 2"), std::string::npos);
}

TEST(CudaShape, CumSumRunsAlongAnAxis) {
  for (DType t : {DType::F32, DType::F16, DType::F64, DType::I32, DType::I64})
    for (int64_t axis : {0, 1, -1})
      for (int64_t exclusive : {0, 1})
        for (int64_t reverse : {0, 1}) {
          std::vector<int64_t> shape = {3, 5, 4};
          CudaCase c = unaryCase("CumSum", rnd(ty(t, shape), 1), ty(t, shape),
                                 {{"exclusive", Attribute::getInt(exclusive)},
                                  {"reverse", Attribute::getInt(reverse)}});
          addInput(c, Tensor::fromInts(DType::I64, {}, {axis}));
          EXPECT_EQ(compareCudaWithCpu(c), "")
              << dtypeName(t).str() << " axis " << axis << " exclusive "
              << exclusive << " reverse " << reverse;
        }
  CudaCase bad = unaryCase("CumSum", randomTensor(ty(DType::F32, {4}), 1),
                           ty(DType::F32, {4}));
  addInput(bad, Tensor::fromInts(DType::I64, {}, {1}));
  EXPECT_NE(cudaError(bad).find("axis 1 is out of range for rank 1"),
            std::string::npos);
}

//===----------------------------------------------------------------------===//
// ConstantOfShape, Range
//===----------------------------------------------------------------------===//

TEST(CudaShape, ConstantOfShapeFills) {
  CudaCase zeros;
  zeros.Op = "ConstantOfShape";
  addInput(zeros, i64s({2, 3}));
  zeros.Outputs = {ty(DType::F32, {2, 3})};
  EXPECT_EQ(compareCudaWithCpu(zeros), "");
  for (DType t : {DType::F16, DType::I64, DType::I8, DType::F32, DType::Bool})
    for (double v : {0.0, 1.0, 5.0}) {
      CudaCase c = zeros;
      c.Outputs = {ty(t, {3, 1, 5})};
      c.Inputs[0] = Tensor::fromInts(DType::I32, {3}, {3, 1, 5});
      Tensor value(ty(t, {1}));
      value.setDouble(0, v);
      c.Attrs["value"] = Attribute::getTensor(value);
      EXPECT_EQ(compareCudaWithCpu(c), "") << dtypeName(t).str() << " " << v;
    }
  CudaCase wrong = zeros;
  wrong.Outputs = {ty(DType::I64, {2, 3})};
  EXPECT_NE(cudaError(wrong).find("must be f32"), std::string::npos);
  zeros.Constant = {false};
  EXPECT_NE(cudaError(zeros).find("shape must be a constant"),
            std::string::npos);
}

TEST(CudaShape, RangeCountsLikeTheSpec) {
  struct RangeArgs {
    double Start, Limit, Delta;
  };
  std::vector<RangeArgs> cases = {{1, 2, 0.25}, {10, 3, -3}, {0, 1000, 7},
                                  {5, 5, 1},    {3, 0, 1},   {-2.5, 4.1, 0.3}};
  for (DType t : {DType::F32, DType::F64, DType::I32, DType::I64})
    for (const RangeArgs &a : cases) {
      if (!isFloat(t) &&
          (a.Delta != std::floor(a.Delta) || a.Start != std::floor(a.Start) ||
           a.Limit != std::floor(a.Limit)))
        continue;
      CudaCase c;
      c.Op = "Range";
      for (double v : {a.Start, a.Limit, a.Delta})
        addInput(c, scalar(t, v));
      Tensor s = c.Inputs[0], l = c.Inputs[1], d = c.Inputs[2];
      double count =
          std::ceil((l.getDouble(0) - s.getDouble(0)) / d.getDouble(0));
      c.Outputs = {ty(t, {std::max<int64_t>(0, int64_t(count))})};
      c.Tol = {0, 0};
      EXPECT_EQ(compareCudaWithCpu(c), "")
          << dtypeName(t).str() << " " << a.Start << " " << a.Limit;
    }
  CudaCase notConstant;
  notConstant.Op = "Range";
  for (double v : {0.0, 4.0, 1.0})
    addInput(notConstant, scalar(DType::I64, v), false);
  notConstant.Outputs = {ty(DType::I64, {4})};
  EXPECT_NE(cudaError(notConstant).find("start must be a constant"),
            std::string::npos);
}

//===----------------------------------------------------------------------===//
// Out-of-range indices: zeros or skipped on cuda, an error on the CPU
//===----------------------------------------------------------------------===//

TEST(CudaShape, OutOfRangeIndicesReadZerosAndSkipWrites) {
  Tensor x = Tensor::fromDoubles(DType::F32, {3, 2}, {1, 2, 3, 4, 5, 6});
  std::vector<Tensor> out;

  CudaCase gather = unaryCase("Gather", x, ty(DType::F32, {3, 2}));
  addInput(gather, i64s({2, 3, -4}), false);
  EXPECT_NE(compareCudaWithCpu(gather).find("out of range"),
            std::string::npos); // the CPU's error
  ASSERT_EQ(runCuda(gather, out), "");
  EXPECT_EQ(out[0].toInts(), (std::vector<int64_t>{5, 6, 0, 0, 0, 0}));

  CudaCase grad = unaryCase("GatherGrad", x, ty(DType::F32, {3, 2}));
  addInput(grad, i64s({1, 7, 1}), false);
  ASSERT_EQ(runCuda(grad, out), "");
  EXPECT_EQ(out[0].toInts(), (std::vector<int64_t>{0, 0, 6, 8, 0, 0}));

  CudaCase elements = unaryCase("GatherElements", x, ty(DType::F32, {1, 2}));
  addInput(elements, Tensor::fromInts(DType::I32, {1, 2}, {-1, 3}), false);
  ASSERT_EQ(runCuda(elements, out), "");
  EXPECT_EQ(out[0].toInts(), (std::vector<int64_t>{5, 0}));

  CudaCase scatter = unaryCase("ScatterElements", x, ty(DType::F32, {3, 2}));
  addInput(scatter, Tensor::fromInts(DType::I64, {1, 2}, {3, 0}), false);
  addInput(scatter, Tensor::fromDoubles(DType::F32, {1, 2}, {9, 9}), false);
  ASSERT_EQ(runCuda(scatter, out), "");
  EXPECT_EQ(out[0].toInts(), (std::vector<int64_t>{1, 9, 3, 4, 5, 6}));

  CudaCase nd = unaryCase("GatherND", x, ty(DType::F32, {2}));
  addInput(nd, Tensor::fromInts(DType::I64, {2, 2}, {2, 1, 0, 2}), false);
  ASSERT_EQ(runCuda(nd, out), "");
  EXPECT_EQ(out[0].toInts(), (std::vector<int64_t>{6, 0}));

  CudaCase snd = unaryCase("ScatterND", x, ty(DType::F32, {3, 2}),
                           {{"reduction", Attribute::getString("add")}});
  addInput(snd, Tensor::fromInts(DType::I64, {2, 1}, {-3, 3}), false);
  addInput(snd, Tensor::fromDoubles(DType::F32, {2, 2}, {10, 20, 30, 40}),
           false);
  ASSERT_EQ(runCuda(snd, out), "");
  EXPECT_EQ(out[0].toInts(), (std::vector<int64_t>{11, 22, 3, 4, 5, 6}));

  CudaCase badType = gather;
  badType.Inputs[1] = Tensor::fromDoubles(DType::F32, {3}, {0, 1, 2});
  EXPECT_NE(cudaError(badType).find("operand 1 is f32, expected i32 or i64"),
            std::string::npos);
}

} // namespace

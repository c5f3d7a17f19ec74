//===- UpdateKernelTest.cpp - SgdUpdate and Accumulate --------------------===//
//
// The update kernels write their state slot (Outputs[0]) in place. SgdUpdate
// must round exactly as the sgd ops of the `optimizer` pass do (LOMO's
// weights are SGD's bit for bit), so the expected values are computed here
// with the same f32 operations in the same order, and compared exactly.
//
//===----------------------------------------------------------------------===//
#include "KernelTestUtil.h"

using namespace headroom;
using namespace headroom::cpu;

namespace {

std::vector<float> randomFloats(int64_t n, unsigned seed) {
  std::vector<double> d = randomData(n, seed);
  return std::vector<float>(d.begin(), d.end());
}

TensorView view(std::vector<float> &v, const std::vector<int64_t> &shape) {
  return TensorView{DType::F32, shape, v.data()};
}

AttributeMap sgdAttrs(double lr, double wd) {
  AttributeMap a;
  a["lr"] = Attribute::getFloat(lr);
  a["weight_decay"] = Attribute::getFloat(wd);
  return a;
}

TEST(UpdateKernel, SgdUpdateRoundsLikeTheSgdOps) {
  std::vector<int64_t> shape = {7, 5};
  for (bool scaled : {false, true})
    for (double wd : {0.0, 0.01}) {
      std::vector<float> w = randomFloats(35, 1), g = randomFloats(35, 2);
      std::vector<float> want = w;
      float lr = 0.05f, wdf = static_cast<float>(wd), scale = 0.37f;
      for (size_t i = 0; i < want.size(); ++i) {
        float d = scaled ? g[i] * scale : g[i]; // Mul(g, coef)
        if (wd != 0)
          d = d + want[i] * wdf;    // Add(g, Mul(w, wd))
        want[i] = want[i] - d * lr; // Sub(w, Mul(g, lr))
      }
      std::vector<float> s = {scale};
      std::vector<TensorView> ins = {view(g, shape)};
      if (scaled)
        ins.push_back(view(s, {}));
      ASSERT_EQ(
          runKernel("SgdUpdate", ins, {view(w, shape)}, sgdAttrs(0.05, wd)),
          "");
      EXPECT_EQ(w, want) << "scaled " << scaled << " wd " << wd;
    }
}

TEST(UpdateKernel, SgdUpdateF64) {
  T64 w({4}, 3), g({4}, 4);
  std::vector<double> want = w.Data;
  double lr = static_cast<float>(0.1); // attributes are f32
  for (size_t i = 0; i < want.size(); ++i)
    want[i] = want[i] - g.Data[i] * lr;
  ASSERT_EQ(runKernel("SgdUpdate", {g.view()}, {w.view()}, sgdAttrs(0.1, 0)),
            "");
  EXPECT_EQ(w.Data, want);
}

TEST(UpdateKernel, AccumulateWritesFirstThenAdds) {
  std::vector<int64_t> shape = {6};
  std::vector<float> acc(6, 123.0f), g1 = randomFloats(6, 5),
                                     g2 = randomFloats(6, 6);
  AttributeMap first, add;
  first["scale"] = Attribute::getFloat(0.25);
  first["first"] = Attribute::getInt(1);
  add["scale"] = Attribute::getFloat(0.25);
  ASSERT_EQ(
      runKernel("Accumulate", {view(g1, shape)}, {view(acc, shape)}, first),
      "");
  ASSERT_EQ(runKernel("Accumulate", {view(g2, shape)}, {view(acc, shape)}, add),
            "");
  for (size_t i = 0; i < acc.size(); ++i)
    EXPECT_EQ(acc[i], g1[i] * 0.25f + g2[i] * 0.25f) << i;
}

TEST(UpdateKernel, ErrorsNameTheProblem) {
  std::vector<float> w(4), g(3), s(2);
  EXPECT_EQ(
      runKernel("SgdUpdate", {view(g, {3})}, {view(w, {4})}, sgdAttrs(0.1, 0)),
      "SgdUpdate: gradient f32[3] does not match the state f32[4]");
  std::vector<float> g4(4);
  EXPECT_EQ(runKernel("SgdUpdate", {view(g4, {4}), view(s, {2})},
                      {view(w, {4})}, sgdAttrs(0.1, 0)),
            "SgdUpdate: scale must be a scalar of the state's type");
  EXPECT_EQ(runKernel("Accumulate", {view(g4, {4})}, {}),
            "Accumulate: needs its state slot as the output");
  std::vector<int32_t> wi(4), gi(4);
  std::vector<int64_t> four = {4};
  EXPECT_EQ(runKernel("Accumulate", {TensorView{DType::I32, four, gi.data()}},
                      {TensorView{DType::I32, four, wi.data()}}),
            "Accumulate: element type i32 is not supported");
}

} // namespace

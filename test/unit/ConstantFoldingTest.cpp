//===- ConstantFoldingTest.cpp - The shape-arithmetic interpreter ---------===//
#include "compiler/ConstantFolding.h"
#include "TestUtil.h"

using namespace headroom;

namespace {

/// A 1-D i64 tensor.
Tensor ints(std::vector<int64_t> v) {
  return Tensor::fromInts(DType::I64, {static_cast<int64_t>(v.size())}, v);
}

/// Folds and returns the single result's values as ints (empty on failure).
std::vector<int64_t> foldInts(llvm::StringRef op,
                              std::vector<const Tensor *> operands,
                              AttributeMap attrs = {}) {
  auto r = foldConstantOp(op, attrs, operands);
  if (!r) {
    ADD_FAILURE() << llvm::toString(r.takeError());
    return {};
  }
  if (!*r) {
    ADD_FAILURE() << op.str() << " did not fold";
    return {};
  }
  return (**r)[0].toInts();
}

TEST(ConstantFoldingTest, IntegerArithmeticTruncates) {
  Tensor a = ints({7, -7, 32}), b = ints({2});
  EXPECT_EQ(foldInts("Div", {&a, &b}), std::vector<int64_t>({3, -3, 16}));
  EXPECT_EQ(foldInts("Mul", {&a, &b}), std::vector<int64_t>({14, -14, 64}));
  Tensor zero = ints({0});
  EXPECT_EQ(foldInts("Div", {&a, &zero}), std::vector<int64_t>({0, 0, 0}));
}

TEST(ConstantFoldingTest, IntegerModTakesTheSignAsOnnxSays) {
  Tensor a = ints({7, -7, 7, -7, 5}), b = ints({3, 3, -3, -3, 0});
  // fmod=0 (Python's %): the divisor's sign; fmod=1 (C's %): the dividend's.
  EXPECT_EQ(foldInts("Mod", {&a, &b}), std::vector<int64_t>({1, 2, -2, -1, 0}));
  EXPECT_EQ(foldInts("Mod", {&a, &b}, {{"fmod", Attribute::getInt(1)}}),
            std::vector<int64_t>({1, -1, 1, -1, 0}));
}

TEST(ConstantFoldingTest, ShapeChainOfAReshape) {
  // What torch exports for x.view(B, T, n_head, C // n_head).
  Tensor shape = ints({4, 16, 32});
  Tensor idx2 = Tensor::fromInts(DType::I64, {}, {2});
  auto gathered = foldConstantOp("Gather", {{"axis", Attribute::getInt(0)}},
                                 {&shape, &idx2});
  ASSERT_TRUE(gathered && *gathered);
  const Tensor &c = (**gathered)[0];
  EXPECT_EQ(c.type(), TensorType(DType::I64, {}));
  Tensor heads = Tensor::fromInts(DType::I64, {}, {2});
  auto hd = foldConstantOp("Div", {}, {&c, &heads});
  ASSERT_TRUE(hd && *hd);
  Tensor axes = ints({0});
  auto u = foldConstantOp("Unsqueeze", {}, {&(**hd)[0], &axes});
  ASSERT_TRUE(u && *u);
  Tensor b1 = ints({4}), t1 = ints({16}), h1 = ints({2});
  EXPECT_EQ(foldInts("Concat", {&b1, &t1, &h1, &(**u)[0]},
                     {{"axis", Attribute::getInt(0)}}),
            std::vector<int64_t>({4, 16, 2, 16}));
}

TEST(ConstantFoldingTest, SliceRangeAndTypeOps) {
  Tensor x = ints({0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor starts = ints({-3}), ends = ints({INT64_MAX}), axes = ints({0}),
         steps = ints({1});
  EXPECT_EQ(foldInts("Slice", {&x, &starts, &ends, &axes, &steps}),
            std::vector<int64_t>({7, 8, 9}));
  Tensor s2 = ints({8}), e2 = ints({1}), st2 = ints({-3});
  EXPECT_EQ(foldInts("Slice", {&x, &s2, &e2, &axes, &st2}),
            std::vector<int64_t>({8, 5, 2}));
  Tensor start = Tensor::fromInts(DType::I64, {}, {0});
  Tensor limit = Tensor::fromInts(DType::I64, {}, {5});
  Tensor delta = Tensor::fromInts(DType::I64, {}, {2});
  EXPECT_EQ(foldInts("Range", {&start, &limit, &delta}),
            std::vector<int64_t>({0, 2, 4}));
  auto shape = foldTypeOp("Shape", {{"start", Attribute::getInt(-2)}},
                          TensorType(DType::F32, {4, 16, 32}));
  ASSERT_TRUE(shape.hasValue());
  EXPECT_EQ(shape->toInts(), std::vector<int64_t>({16, 32}));
  EXPECT_EQ(foldTypeOp("Size", {}, TensorType(DType::F32, {4, 16}))->toInts(),
            std::vector<int64_t>({64}));
}

TEST(ConstantFoldingTest, ReshapeUnsqueezeTransposeTrilu) {
  Tensor x = ints({1, 2, 3, 4, 5, 6});
  Tensor shape = ints({0, -1});
  Tensor x2 = Tensor::fromInts(DType::I64, {2, 3}, {1, 2, 3, 4, 5, 6});
  auto r = foldConstantOp("Reshape", {}, {&x2, &shape});
  ASSERT_TRUE(r && *r);
  EXPECT_EQ((**r)[0].type(), TensorType(DType::I64, {2, 3}));
  auto t = foldConstantOp("Transpose", {}, {&x2});
  ASSERT_TRUE(t && *t);
  EXPECT_EQ((**t)[0].toInts(), std::vector<int64_t>({1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(foldInts("Trilu", {&x2}, {{"upper", Attribute::getInt(0)}}),
            std::vector<int64_t>({1, 0, 0, 4, 5, 0}));
  Tensor bad = ints({4, 4});
  EXPECT_EQ(errorOf(foldConstantOp("Reshape", {}, {&x, &bad})),
            "Reshape of i64[6] to 4x4 changes the element count");
}

TEST(ConstantFoldingTest, CastAndFloatMath) {
  Tensor f = Tensor::fromDoubles(DType::F32, {3}, {2.7, -2.7, 16.0});
  auto c =
      foldConstantOp("Cast", {{"to", Attribute::getType(DType::I64)}}, {&f});
  ASSERT_TRUE(c && *c);
  EXPECT_EQ((**c)[0].toInts(), std::vector<int64_t>({2, -2, 16}));
  auto s = foldConstantOp("Sqrt", {}, {&f});
  ASSERT_TRUE(s && *s);
  EXPECT_FLOAT_EQ((**s)[0].getDouble(2), 4.0f);
  Tensor cond = Tensor::fromInts(DType::Bool, {3}, {1, 0, 1});
  Tensor zero = Tensor::fromDoubles(DType::F32, {}, {0.0});
  auto w = foldConstantOp("Where", {}, {&cond, &f, &zero});
  ASSERT_TRUE(w && *w);
  EXPECT_FLOAT_EQ((**w)[0].getDouble(0), 2.7f);
  EXPECT_EQ((**w)[0].getDouble(1), 0.0);
}

TEST(ConstantFoldingTest, LargeResultsAreNotFolded) {
  Tensor shape = ints({512, 512});
  auto r = foldConstantOp("ConstantOfShape", {}, {&shape});
  ASSERT_TRUE(static_cast<bool>(r));
  EXPECT_FALSE(r->hasValue());
}

} // namespace

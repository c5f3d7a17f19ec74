//===- IRTest.cpp - Module/Function/Node API and use lists ----------------===//
#include "compiler/IR.h"
#include "compiler/Printer.h"
#include "compiler/Verifier.h"

#include <gtest/gtest.h>

using namespace headroom;

namespace {

TEST(IRTest, BuilderKeepsUseListsInSync) {
  Module m;
  StateSlot *w = m.addState("w", TensorType(DType::F32, {4}), StateKind::Param);
  Function *f = m.addFunction("forward");
  Value *x = f->addArgument(TensorType(DType::F32, {4}), "x");
  Builder b(*f);
  Value *r = b.read(w);
  Value *sum = b.createValue("Add", {x, r}, x->type());
  Value *id = b.createValue("Identity", {sum}, x->type());
  f->createNode("Return", {id}, {});
  EXPECT_EQ(x->users().size(), 1u);
  EXPECT_EQ(sum->users().size(), 1u);
  EXPECT_FALSE(llvm::errorToBool(verifyModule(m)));

  // Forward the Identity and erase it: its operand loses the use.
  Node *idNode = id->definingNode();
  id->replaceAllUsesWith(sum);
  EXPECT_EQ(f->returnValues()[0], sum);
  idNode->erase();
  EXPECT_EQ(sum->users().size(), 1u);
  EXPECT_EQ(sum->users()[0], f->returnNode());
  EXPECT_FALSE(llvm::errorToBool(verifyModule(m)));
}

TEST(IRTest, CloneIsDeepAndKeepsLocations) {
  Module m;
  StateSlot *w = m.addState("w", TensorType(DType::F32, {4}), StateKind::Param);
  Function *f = m.addFunction("step");
  Value *x = f->addArgument(TensorType(DType::F32, {4}), "x");
  Builder b(*f);
  b.setLoc("/layer/Add");
  Value *sum = b.createValue("Add", {x, b.read(w)}, x->type());
  b.setLoc("");
  f->createNode("Return", {sum}, {});
  m.setDriver({{f, 3, false}});

  std::unique_ptr<Module> copy = m.clone();
  EXPECT_EQ(moduleToString(*copy), moduleToString(m));
  EXPECT_FALSE(llvm::errorToBool(verifyModule(*copy)));
  const Function &cf = *copy->functions()[0];
  const Node &read = cf.nodes().front();
  EXPECT_TRUE(read.is(OpKind::Read));
  EXPECT_EQ(read.loc(), "/layer/Add");
  EXPECT_EQ(read.state(), copy->lookupState("w")); // the copy's own slot
  EXPECT_NE(read.state(), w);
  EXPECT_EQ(copy->driver()[0].Callee, &cf);
  EXPECT_EQ(copy->driver()[0].Repeat, 3u);
  EXPECT_EQ(cf.returnNode()->loc(), "");
}

TEST(IRTest, SameOperandTwiceCountsTwoUses) {
  Module m;
  Function *f = m.addFunction("f");
  Value *x = f->addArgument(TensorType(DType::F32, {2}), "x");
  Builder b(*f);
  Value *sq = b.createValue("Mul", {x, x}, x->type());
  f->createNode("Return", {sq}, {});
  EXPECT_EQ(x->users().size(), 2u);
  Value *y = f->addArgument(TensorType(DType::F32, {2}), "y");
  x->replaceAllUsesWith(y);
  EXPECT_FALSE(x->hasUses());
  EXPECT_EQ(y->users().size(), 2u);
}

TEST(IRTest, BuilderInsertsBeforeItsPoint) {
  Module m;
  Function *f = m.addFunction("f");
  Value *x = f->addArgument(TensorType(DType::F32, {2}), "x");
  Node *ret = f->createNode("Return", {x}, {});
  Builder b(*f, ret);
  Value *n = b.createValue("Neg", {x}, x->type());
  ret->setOperand(0, n);
  EXPECT_EQ(&f->nodes().front(), n->definingNode());
  EXPECT_EQ(f->returnNode(), ret);
  EXPECT_FALSE(llvm::errorToBool(verifyModule(m)));
}

TEST(IRTest, PrinterMakesDuplicateAndNumericNamesUnique) {
  Module m;
  Function *f = m.addFunction("f");
  Value *x = f->addArgument(TensorType(DType::F32, {2}), "x");
  Builder b(*f);
  Value *a = b.createValue("Neg", {x}, x->type());
  a->setName("x");                                 // clashes with the argument
  Value *c = b.createValue("Neg", {a}, x->type()); // unnamed
  Value *d = b.createValue("Neg", {c}, x->type());
  d->setName("0"); // a hint that looks like a number
  Value *e = b.createValue("Neg", {d}, x->type());
  e->setName("onnx::Neg/1"); // needs quoting
  f->createNode("Return", {e}, {});
  std::string text = moduleToString(m);
  EXPECT_NE(text.find("%x_1 = Neg(%x)"), std::string::npos) << text;
  EXPECT_NE(text.find("%1 = Neg(%x_1)"), std::string::npos) << text;
  EXPECT_NE(text.find("%0 = Neg(%1)"), std::string::npos) << text;
  EXPECT_NE(text.find("%\"onnx::Neg/1\" = Neg(%0)"), std::string::npos) << text;
}

TEST(TypesTest, HalfAndBf16RoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f})
    EXPECT_EQ(halfToFloat(floatToHalf(f)), f) << f;
  EXPECT_EQ(floatToHalf(1e6f), 0x7c00); // overflow to inf
  EXPECT_EQ(bf16ToFloat(floatToBf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16ToFloat(floatToBf16(1.0078125f)), 1.0078125f);
  EXPECT_EQ(bf16ToFloat(floatToBf16(1.0040f)), 1.0078125f); // above halfway
  // Round to nearest even: 1 + 2^-8 is halfway between bf16 neighbours.
  EXPECT_EQ(bf16ToFloat(floatToBf16(1.00390625f)), 1.0f);
}

TEST(TypesTest, Broadcast) {
  auto s = broadcastShapes({4, 1, 3}, {2, 1});
  ASSERT_TRUE(s.hasValue());
  EXPECT_EQ(llvm::ArrayRef<int64_t>(*s), llvm::ArrayRef<int64_t>({4, 2, 3}));
  EXPECT_FALSE(broadcastShapes({3}, {4}).hasValue());
  EXPECT_EQ(broadcastShapes({}, {}).getValue().size(), 0u);
}

} // namespace

namespace {

/// A copy made by cloneFunction has the same nodes, attributes, states and
/// name hints, its own values, and prints like the original but for its name.
TEST(IRTest, CloneFunctionCopiesEverything) {
  Module m;
  StateSlot *w = m.addState("w", TensorType(DType::F32, {2}), StateKind::Param);
  Function *f = m.addFunction("step");
  Value *x = f->addArgument(TensorType(DType::F32, {2}), "x");
  Builder b(*f);
  Value *r = b.read(w);
  AttributeMap a;
  a["grad_of"] = Attribute::getStrings({"w"});
  Value *g = b.createValue("Mul", {x, r}, x->type(), a);
  g->setName("g");
  b.create("SgdUpdate", {g}, {}, {}, w);
  f->createNode("Return", {g}, {});
  Function *c = m.cloneFunction(*f, "copy");
  ASSERT_EQ(m.functions().size(), 2u);
  EXPECT_EQ(c->arguments().size(), 1u);
  EXPECT_NE(c->arguments()[0], x);
  EXPECT_EQ(c->arguments()[0]->name(), "x");
  EXPECT_NE(c->returnValues()[0], g);
  EXPECT_EQ(c->returnValues()[0]->name(), "g");
  EXPECT_EQ(g->users().size(), 2u); // the copy uses its own values
  std::string text = moduleToString(m);
  size_t second = text.find("func @copy");
  ASSERT_NE(second, std::string::npos);
  std::string one =
      text.substr(text.find("func @step"), second - text.find("func @step"));
  std::string two = text.substr(second);
  EXPECT_EQ(one.substr(one.find('(')), two.substr(two.find('(')) + "\n");
  EXPECT_FALSE(llvm::errorToBool(verifyModule(m)));
}

} // namespace

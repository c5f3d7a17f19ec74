//===- Protocol.cpp - The attributes passes hand each other ---------------===//
#include "compiler/Protocol.h"

using namespace headroom;

void headroom::tagGradient(Value *g, const StateSlot *param) {
  Node *def = g->definingNode();
  if (!def)
    return;
  std::vector<std::string> tags(def->numResults());
  if (const Attribute *a = def->attr("grad_of"))
    if (a->kind() == Attribute::Kind::Strings &&
        a->asStrings().size() == tags.size())
      tags = a->asStrings();
  tags[g->resultIndex()] = param->name();
  def->setAttr("grad_of", Attribute::getStrings(std::move(tags)));
}

std::vector<Value *> headroom::taggedGradients(const Node &n) {
  std::vector<Value *> out;
  const Attribute *a = n.attr("grad_of");
  if (!a || a->kind() != Attribute::Kind::Strings)
    return out;
  for (size_t i = 0; i < a->asStrings().size() && i < n.numResults(); ++i)
    if (!a->asStrings()[i].empty())
      out.push_back(n.result(i));
  return out;
}

void headroom::copyGradientTags(const Node &from, Node &to) {
  if (const Attribute *a = from.attr("grad_of"))
    to.setAttr("grad_of", *a);
}

llvm::Expected<Function *> headroom::forwardOf(Module &m,
                                               llvm::StringRef pass) {
  auto fail = [&](const llvm::Twine &found) {
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        (pass + ": expected one function, the forward before autodiff; " +
         found)
            .str()
            .c_str());
  };
  if (m.functions().size() != 1)
    return fail("found " + llvm::Twine(m.functions().size()) + " functions");
  Function &f = *m.functions()[0];
  for (const Node &n : f.nodes())
    if (isLossSeed(n) || hasGradientTag(n) || n.is(OpKind::ParamGrad))
      return fail("@" + f.name() + " was differentiated already (node '" +
                  n.op() + "' is autodiff's)");
  return &f;
}

//===- Kernel.cpp - The kernel interface both backends share --------------===//
#include "kernels/common/Kernel.h"

using namespace headroom;
using namespace headroom::kernels;

const Attribute *KernelContext::attr(llvm::StringRef name) const {
  auto it = Attrs.find(name.str());
  return it == Attrs.end() ? nullptr : &it->second;
}

int64_t KernelContext::attrInt(llvm::StringRef name, int64_t dflt) const {
  const Attribute *a = attr(name);
  return a && a->kind() == Attribute::Kind::Int ? a->asInt() : dflt;
}

double KernelContext::attrFloat(llvm::StringRef name, double dflt) const {
  const Attribute *a = attr(name);
  if (a && (a->kind() == Attribute::Kind::Float ||
            a->kind() == Attribute::Kind::Int))
    return a->asFloat();
  return dflt;
}

std::string KernelContext::attrString(llvm::StringRef name,
                                      llvm::StringRef dflt) const {
  const Attribute *a = attr(name);
  return a && a->kind() == Attribute::Kind::String ? a->asString() : dflt.str();
}

std::vector<int64_t> KernelContext::attrInts(llvm::StringRef name,
                                             std::vector<int64_t> dflt) const {
  const Attribute *a = attr(name);
  return a && a->kind() == Attribute::Kind::Ints ? a->asInts() : dflt;
}

llvm::Error KernelContext::unsupported(const llvm::Twine &msg) const {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 (Op + ": " + msg).str());
}

//===- Kernels.cpp - The CPU kernel registry ------------------------------===//
#include "kernels/cpu/Kernel.h"

#include "llvm/ADT/StringMap.h"

#include <mutex>

using namespace headroom;
using namespace headroom::cpu;

namespace {
struct Registered {
  KernelFn Fn = nullptr;
  FloatTypes Floats = FloatTypes::All;
};
} // namespace

static llvm::StringMap<Registered> &registry() {
  static llvm::StringMap<Registered> r;
  return r;
}

static llvm::StringMap<WorkspaceFn> &workspaceRegistry() {
  static llvm::StringMap<WorkspaceFn> r;
  return r;
}

void headroom::cpu::registerKernel(llvm::StringRef op, KernelFn fn,
                                   FloatTypes floats) {
  registry()[op] = Registered{fn, floats};
}

void headroom::cpu::registerWorkspace(llvm::StringRef op, WorkspaceFn fn) {
  workspaceRegistry()[op] = fn;
}

/// Runs every family's registration once.
static void registerAll() {
  static std::once_flag once;
  std::call_once(once, [] {
    registerElementwiseKernels();
    registerShapeKernels();
    registerLinalgKernels();
    registerReduceKernels();
    registerNormKernels();
    registerLossKernels();
    registerConvPoolKernels();
    registerUpdateKernels();
  });
}

KernelFn headroom::cpu::lookupKernel(llvm::StringRef op) {
  registerAll();
  auto it = registry().find(op);
  return it == registry().end() ? nullptr : it->second.Fn;
}

FloatTypes headroom::cpu::kernelFloatTypes(llvm::StringRef op) {
  registerAll();
  auto it = registry().find(op);
  return it == registry().end() ? FloatTypes::All : it->second.Floats;
}

WorkspaceFn headroom::cpu::lookupWorkspace(llvm::StringRef op) {
  registerAll();
  auto it = workspaceRegistry().find(op);
  return it == workspaceRegistry().end() ? nullptr : it->second;
}

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

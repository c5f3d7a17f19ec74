//===- OpInfo.cpp - The op registry ---------------------------------------===//
#include "compiler/OpInfo.h"

#include "llvm/ADT/StringMap.h"

using namespace headroom;
using namespace headroom::opflags;

static const OpInfo kOps[] = {
#define HR_OP(Name, MinOps, MaxOps, MinRes, MaxRes, Flags, Doc)                \
  {OpKind::Name, #Name, MinOps, MaxOps, MinRes, MaxRes, Flags, Doc},
#include "compiler/Ops.def"
};

llvm::ArrayRef<OpInfo> headroom::allOps() { return kOps; }

const OpInfo *headroom::lookupOp(llvm::StringRef name) {
  static const llvm::StringMap<const OpInfo *> byName = [] {
    llvm::StringMap<const OpInfo *> m;
    for (const OpInfo &op : kOps)
      m[op.Name] = &op;
    return m;
  }();
  auto it = byName.find(name);
  return it == byName.end() ? nullptr : it->second;
}

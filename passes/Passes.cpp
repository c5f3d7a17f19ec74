//===- Passes.cpp - The pass registry -------------------------------------===//
#include "passes/Passes.h"

using namespace headroom;

static const PassInfo kPasses[] = {
#define HR_PASS(Name, Factory, Summary) {Name, &Factory, Summary},
#include "passes/Passes.def"
};

llvm::ArrayRef<PassInfo> headroom::allPasses() { return kPasses; }

std::unique_ptr<Pass> headroom::createPassByName(llvm::StringRef name) {
  for (const PassInfo &p : kPasses)
    if (p.Name == name)
      return p.Create();
  return nullptr;
}

std::string headroom::passesMarkdown() {
  std::string s = "# Passes\n\n"
                  "Generated from `passes/Passes.def` by "
                  "`headroom opt --list-passes --markdown`; a test keeps this "
                  "file equal to that output.\n\n"
                  "| pass | what it does |\n|---|---|\n";
  for (const PassInfo &p : kPasses)
    s += "| `" + p.Name.str() + "` | " + p.Summary.str() + " |\n";
  return s;
}

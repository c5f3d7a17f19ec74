//===- PassManager.cpp - Run a list of passes -----------------------------===//
#include "compiler/PassManager.h"

#include "compiler/Printer.h"
#include "compiler/Verifier.h"
#include "passes/Passes.h"

#include "llvm/ADT/SmallVector.h"

using namespace headroom;

llvm::Error PassManager::addPipeline(llvm::StringRef list) {
  llvm::SmallVector<llvm::StringRef, 8> names;
  list.split(names, ',', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  for (llvm::StringRef name : names) {
    name = name.trim();
    std::unique_ptr<Pass> p = createPassByName(name);
    if (!p) {
      std::string known;
      for (const PassInfo &info : allPasses())
        known += (known.empty() ? "" : ", ") + info.Name.str();
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "unknown pass '%s' (known passes: %s)",
                                     name.str().c_str(), known.c_str());
    }
    add(std::move(p));
  }
  return llvm::Error::success();
}

static void printBanner(llvm::raw_ostream &os, llvm::StringRef what) {
  os << "// -----// IR " << what << " //----- //\n";
}

llvm::Error PassManager::run(Module &m) {
  if (Options.VerifyEach)
    if (auto e = verifyModule(m))
      return llvm::joinErrors(
          llvm::createStringError(llvm::inconvertibleErrorCode(),
                                  "the input IR is invalid"),
          std::move(e));
  if (Options.PrintAfterAll && Options.PrintStream) {
    printBanner(*Options.PrintStream, "before all passes");
    printModule(m, *Options.PrintStream);
  }
  for (auto &p : Passes) {
    auto changed = p->run(m);
    if (!changed)
      return changed.takeError();
    if (Options.VerifyEach)
      if (auto e = verifyModule(m))
        return llvm::createStringError(
            llvm::inconvertibleErrorCode(), "IR invalid after pass '%s': %s",
            p->name().str().c_str(), llvm::toString(std::move(e)).c_str());
    if (Options.PrintAfterAll && Options.PrintStream) {
      printBanner(
          *Options.PrintStream,
          ("after " + p->name() + (*changed ? "" : " (no change)")).str());
      printModule(m, *Options.PrintStream);
    }
  }
  return llvm::Error::success();
}

//===- PassManager.cpp - Run a list of passes -----------------------------===//
#include "passes/PassManager.h"

#include "compiler/Printer.h"
#include "compiler/Verifier.h"
#include "passes/Passes.h"

#include "llvm/ADT/SmallVector.h"

using namespace headroom;

llvm::Error PassManager::addPipeline(llvm::StringRef list) {
  // Split on commas outside `{...}` option groups.
  llvm::SmallVector<llvm::StringRef, 8> entries;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    char c = i < list.size() ? list[i] : ',';
    depth += c == '{' ? 1 : c == '}' ? -1 : 0;
    if (c == ',' && depth == 0) {
      if (!list.slice(start, i).trim().empty())
        entries.push_back(list.slice(start, i).trim());
      start = i + 1;
    }
  }
  for (llvm::StringRef entry : entries) {
    auto [name, rest] = entry.split('{');
    name = name.trim();
    llvm::StringRef options = rest;
    if (entry.contains('{')) {
      if (!options.endswith("}"))
        return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "pass '%s': options must end with '}'",
                                       name.str().c_str());
      options = options.drop_back();
    }
    auto created = createPassByName(name, options);
    if (!created)
      return created.takeError();
    std::unique_ptr<Pass> p = std::move(*created);
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
  if (Options.VerifyEach && !Options.InputVerified)
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
    if (Options.VerifyEach && *changed)
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

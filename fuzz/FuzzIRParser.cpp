//===- FuzzIRParser.cpp - libFuzzer target: the textual IR parser ---------===//
//
// Any text: a module or an error, never a crash. A module that parses and
// verifies prints to text that parses again to the same text (the printer
// and the parser agree on every construct the fuzzer reaches).
//
//===----------------------------------------------------------------------===//
#include "compiler/Parser.h"
#include "compiler/Printer.h"
#include "compiler/Verifier.h"

#include <cstdio>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  auto m = headroom::parseModule(text, "fuzz.hr");
  if (!m) {
    llvm::consumeError(m.takeError());
    return 0;
  }
  if (auto e = headroom::verifyModule(**m)) {
    llvm::consumeError(std::move(e));
    return 0;
  }
  std::string printed = headroom::moduleToString(**m);
  auto again = headroom::parseModule(printed, "printed.hr");
  if (!again) {
    std::fprintf(stderr, "printed module does not parse: %s\n%s\n",
                 llvm::toString(again.takeError()).c_str(), printed.c_str());
    std::abort();
  }
  std::string reprinted = headroom::moduleToString(**again);
  if (reprinted != printed) {
    std::fprintf(stderr, "print/parse/print differs:\n%s\n---\n%s\n",
                 printed.c_str(), reprinted.c_str());
    std::abort();
  }
  return 0;
}

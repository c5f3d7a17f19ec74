//===- Printer.h - Textual IR output --------------------------------------===//
//
// The textual form of a Module. It round-trips exactly with Parser.h:
// print(parse(print(m))) == print(m), byte for byte. docs/ir.md describes it.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_PRINTER_H
#define HEADROOM_COMPILER_PRINTER_H

#include "compiler/IR.h"

namespace headroom {

void printModule(const Module &m, llvm::raw_ostream &os);
std::string moduleToString(const Module &m);

/// True when `s` can be printed without quotes after `%` or `@`.
bool isBareIdentifier(llvm::StringRef s);

} // namespace headroom

#endif // HEADROOM_COMPILER_PRINTER_H

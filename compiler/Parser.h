//===- Parser.h - Textual IR input ----------------------------------------===//
//
// Parses the form Printer.h writes. Errors name the place and what was
// expected: `file.hr:3:17: expected ')' after operands`.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_PARSER_H
#define HEADROOM_COMPILER_PARSER_H

#include "compiler/IR.h"

#include "llvm/Support/Error.h"

namespace headroom {

llvm::Expected<std::unique_ptr<Module>>
parseModule(llvm::StringRef text, llvm::StringRef bufferName = "<input>");

} // namespace headroom

#endif // HEADROOM_COMPILER_PARSER_H

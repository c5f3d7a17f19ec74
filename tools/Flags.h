//===- Flags.h - The training flags on the command line -------------------===//
//
// One cl option per row of compileFlags() (pipeline/CompileOptions.h),
// registered on the subcommands that compile a step; cl only splits the
// command line and prints --help, pipeline/ gives the values their meaning.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_TOOLS_FLAGS_H
#define HEADROOM_TOOLS_FLAGS_H

#include "pipeline/CompileOptions.h"

#include "llvm/Support/CommandLine.h"

namespace headroom {

/// Registers every training flag on `subcommands`; call before
/// cl::ParseCommandLineOptions.
void registerCompileFlags(llvm::ArrayRef<llvm::cl::SubCommand *> subcommands,
                          llvm::cl::OptionCategory &category);

/// The training flags given on the command line, in compileFlags() order.
FlagList givenCompileFlags();

} // namespace headroom

#endif // HEADROOM_TOOLS_FLAGS_H

//===- Zoo.cpp - `headroom zoo` ------------------------------------------===//
#include "llvm/Support/CommandLine.h"

extern llvm::cl::SubCommand ZooCmd;

int runZoo() { return 1; }

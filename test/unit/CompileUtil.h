//===- CompileUtil.h - Compiling test models in tests ---------------------===//
#ifndef HEADROOM_TEST_UNIT_COMPILEUTIL_H
#define HEADROOM_TEST_UNIT_COMPILEUTIL_H

#include "TestUtil.h"
#include "pipeline/Compile.h"
#include "runtime/Trainer.h"

namespace headroom {

/// The plan of `model` (a path) compiled with `o`, or an empty plan and a
/// test failure.
inline Plan compilePlan(const std::string &model, const CompileOptions &o) {
  auto c = compile(model, o);
  if (!c) {
    ADD_FAILURE() << llvm::toString(c.takeError());
    return Plan();
  }
  return std::move(c->ThePlan);
}

/// A trainer for `model` compiled with `o`: what `headroom train` runs.
inline llvm::Expected<std::unique_ptr<Trainer>>
compileTrainer(const std::string &model, const CompileOptions &o,
               uint64_t seed = 0) {
  auto c = compile(model, o);
  if (!c)
    return c.takeError();
  return Trainer::create(std::move(c->ThePlan), model, seed);
}

} // namespace headroom

#endif // HEADROOM_TEST_UNIT_COMPILEUTIL_H

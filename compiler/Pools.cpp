//===- Pools.cpp - Where values live: the device or the pinned host pool --===//
#include "compiler/Pools.h"

#include "compiler/Verifier.h"

using namespace headroom;

bool headroom::touchesHostSlot(const Node &n) {
  return llvm::any_of(n.states(),
                      [](const StateSlot *s) { return s->onHost(); });
}

bool headroom::touchesDeviceSlot(const Node &n) {
  return llvm::any_of(n.states(),
                      [](const StateSlot *s) { return !s->onHost(); });
}

bool headroom::isConstantValue(const Value *v) {
  return v->definingNode() && v->definingNode()->is(OpKind::Constant);
}

bool headroom::runsOnHostByRule(
    const Node &n, llvm::function_ref<bool(const Value *)> onHost) {
  if (touchesHostSlot(n))
    return true;
  if (touchesDeviceSlot(n))
    return false;
  bool any = false;
  for (const Value *v : n.operands()) {
    if (!v || isConstantValue(v))
      continue;
    if (!onHost(v))
      return false;
    any = true;
  }
  return any;
}

PoolAssignment::PoolAssignment(const Function &f) : F(f) {
  for (const Node &n : f.nodes()) {
    if (n.info()->has(opflags::Terminator) || n.is(OpKind::Constant) ||
        n.is(OpKind::ToDevice))
      continue;
    bool host = n.is(OpKind::ToHost) ||
                runsOnHostByRule(n, [&](const Value *v) { return onHost(v); });
    if (!host)
      continue;
    if (!n.is(OpKind::ToHost))
      HostNodes.insert(&n);
    for (const Value *r : n.results())
      HostValues.insert(r);
  }
}

llvm::Error PoolAssignment::check() const {
  auto fail = [&](const Node &n, const llvm::Twine &why) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "in @%s, %s: %s", F.name().c_str(),
                                   describeNode(n).c_str(), why.str().c_str());
  };
  for (const Node &n : F.nodes()) {
    if (touchesHostSlot(n) && touchesDeviceSlot(n))
      return fail(n, "touches state slots on the host and on the device; an "
                     "update runs where all its slots are");
    bool terminator = n.info()->has(opflags::Terminator);
    if (n.is(OpKind::Constant))
      continue;
    // Where the operands must be.
    bool wantHost = n.is(OpKind::ToDevice) || runsOnHost(n);
    if (n.is(OpKind::ToHost))
      wantHost = false;
    for (const Value *v : n.operands()) {
      if (!v || isConstantValue(v) || onHost(v) == wantHost)
        continue;
      if (terminator)
        return fail(n, "returns %" + v->name() +
                           ", which is in the host pool; results are "
                           "returned from the device (ToDevice it)");
      if (n.is(OpKind::ToHost) || n.is(OpKind::ToDevice))
        return fail(n, "copies %" + v->name() + ", which is already " +
                           (wantHost ? "on the device" : "in the host pool"));
      return fail(n, llvm::Twine("runs on the ") +
                         (wantHost ? "host" : "device") + " and reads %" +
                         v->name() + ", which is " +
                         (wantHost ? "on the device (ToHost it first)"
                                   : "in the host pool (ToDevice it first)"));
    }
  }
  return llvm::Error::success();
}

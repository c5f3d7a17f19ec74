//===- Plan.cpp - Lowering a Module to a Plan -----------------------------===//
#include "runtime/Plan.h"

#include "llvm/ADT/DenseMap.h"

using namespace headroom;

int Plan::stateIndex(llvm::StringRef name) const {
  for (size_t i = 0; i < States.size(); ++i)
    if (States[i].Name == name)
      return static_cast<int>(i);
  return -1;
}

const PlanFunction *Plan::function(llvm::StringRef name) const {
  for (const PlanFunction &f : Functions)
    if (f.Name == name)
      return &f;
  return nullptr;
}

llvm::Expected<Plan> headroom::lowerModule(const Module &m) {
  Plan plan;
  llvm::DenseMap<const StateSlot *, int> stateIds;
  for (const auto &s : m.states()) {
    stateIds[s.get()] = plan.States.size();
    plan.States.push_back({s->name(), s->type(), s->kind()});
  }
  for (const auto &f : m.functions()) {
    PlanFunction pf;
    pf.Name = f->name();
    llvm::DenseMap<const Value *, int> buffers;
    auto bufferOf = [&](const Value *v) {
      auto [it, inserted] = buffers.try_emplace(v, plan.Buffers.size());
      if (inserted)
        plan.Buffers.push_back(v->type());
      return it->second;
    };
    for (Value *a : f->arguments())
      pf.Args.push_back(bufferOf(a));
    // A Read may alias its slot unless its value is used after a node that
    // writes the slot; then the executor must copy (attribute `copy`).
    llvm::DenseMap<const Node *, unsigned> position;
    for (const Node &n : f->nodes())
      position[&n] = position.size();
    auto needsCopy = [&](const Node &read) {
      for (const Node &w : f->nodes()) {
        if (!w.info()->has(opflags::WritesState) || w.state() != read.state() ||
            position[&w] < position[&read])
          continue;
        for (const Node *user : read.result(0)->users())
          if (user != &w && position[user] > position[&w])
            return true;
      }
      return false;
    };
    uint32_t id = 0;
    for (const Node &n : f->nodes()) {
      if (n.info()->has(opflags::Terminator)) {
        for (Value *v : n.operands())
          pf.Results.push_back(bufferOf(v));
        continue;
      }
      KernelCall call;
      call.Op = n.op();
      call.Attrs = n.attrs();
      call.Id = id++;
      for (Value *v : n.operands())
        call.Inputs.push_back(v ? bufferOf(v) : -1);
      for (Value *r : n.results())
        call.Outputs.push_back(bufferOf(r));
      if (n.state())
        call.State = stateIds.lookup(n.state());
      if (n.op() == "Read" && needsCopy(n))
        call.Attrs["copy"] = Attribute::getInt(1);
      pf.Calls.push_back(std::move(call));
    }
    plan.Functions.push_back(std::move(pf));
  }
  return plan;
}

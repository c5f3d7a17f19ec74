//===- IR.cpp - headroom's intermediate representation --------------------===//
#include "compiler/IR.h"
#include "compiler/ops/ResultTypes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"

#include <cassert>

using namespace headroom;

llvm::StringRef headroom::stateKindName(StateKind k) {
  switch (k) {
  case StateKind::Param:
    return "param";
  case StateKind::Frozen:
    return "frozen";
  case StateKind::Buffer:
    return "buffer";
  case StateKind::Optimizer:
    return "optimizer";
  case StateKind::Gradient:
    return "grad";
  case StateKind::Replica:
    return "replica";
  }
  llvm_unreachable("unknown state kind");
}

llvm::StringRef headroom::stateInitName(StateInit i) {
  switch (i) {
  case StateInit::Model:
    return "model";
  case StateInit::Zeros:
    return "zeros";
  case StateInit::KaimingUniform:
    return "kaiming_uniform";
  case StateInit::Nf4:
    return "nf4";
  }
  llvm_unreachable("unknown state init");
}

llvm::Optional<StateInit> headroom::parseStateInit(llvm::StringRef s) {
  if (s == "model")
    return StateInit::Model;
  if (s == "zeros")
    return StateInit::Zeros;
  if (s == "kaiming_uniform")
    return StateInit::KaimingUniform;
  if (s == "nf4")
    return StateInit::Nf4;
  return llvm::None;
}

llvm::Optional<StateKind> headroom::parseStateKind(llvm::StringRef s) {
  if (s == "param")
    return StateKind::Param;
  if (s == "frozen")
    return StateKind::Frozen;
  if (s == "buffer")
    return StateKind::Buffer;
  if (s == "optimizer")
    return StateKind::Optimizer;
  if (s == "grad")
    return StateKind::Gradient;
  if (s == "replica")
    return StateKind::Replica;
  return llvm::None;
}

//===----------------------------------------------------------------------===//
// Value and Node
//===----------------------------------------------------------------------===//

void Value::removeUser(Node *n) {
  auto it = llvm::find(Users, n);
  assert(it != Users.end() && "use list out of sync");
  Users.erase(it);
}

void Value::replaceAllUsesWith(Value *v) {
  assert(v != this && "replacing a value with itself");
  while (!Users.empty()) {
    Node *user = Users.back();
    for (unsigned i = 0; i < user->numOperands(); ++i)
      if (user->operand(i) == this)
        user->setOperand(i, v);
  }
}

Node::~Node() {
  for (Value *v : Operands)
    if (v)
      v->removeUser(this);
}

void Node::setOperand(unsigned i, Value *v) {
  if (Operands[i])
    Operands[i]->removeUser(this);
  Operands[i] = v;
  if (v)
    v->Users.push_back(this);
}

const Attribute *Node::attr(llvm::StringRef name) const {
  auto it = Attrs.find(name.str());
  return it == Attrs.end() ? nullptr : &it->second;
}

int64_t Node::intAttr(llvm::StringRef name, int64_t dflt) const {
  return headroom::intAttr(Attrs, name, dflt);
}

double Node::floatAttr(llvm::StringRef name, double dflt) const {
  const Attribute *a = attr(name);
  if (!a)
    return dflt;
  if (a->kind() == Attribute::Kind::Float || a->kind() == Attribute::Kind::Int)
    return a->asFloat();
  return dflt;
}

std::string Node::stringAttr(llvm::StringRef name, llvm::StringRef dflt) const {
  const Attribute *a = attr(name);
  return a && a->kind() == Attribute::Kind::String ? a->asString() : dflt.str();
}

void Node::erase() {
  for (Value *r : Results) {
    (void)r;
    assert(!r->hasUses() && "erasing a node whose results are still used");
  }
  Parent->nodes().erase(getIterator());
}

//===----------------------------------------------------------------------===//
// Function
//===----------------------------------------------------------------------===//

Function::~Function() {
  // Nodes drop their operands' use entries as they die; clear them before the
  // value pool goes so that no node touches a freed value.
  Nodes.clear();
}

Value *Function::addArgument(TensorType type, std::string name) {
  ValuePool.push_back(std::unique_ptr<Value>(
      new Value(std::move(type), std::move(name), nullptr, Args.size())));
  Args.push_back(ValuePool.back().get());
  return Args.back();
}

Node *Function::returnNode() const {
  if (Nodes.empty())
    return nullptr;
  const Node &last = Nodes.back();
  return last.info()->has(opflags::Terminator) ? const_cast<Node *>(&last)
                                               : nullptr;
}

llvm::ArrayRef<Value *> Function::returnValues() const {
  Node *ret = returnNode();
  return ret ? ret->operands() : llvm::ArrayRef<Value *>();
}

Node *Function::createNode(llvm::StringRef op, llvm::ArrayRef<Value *> operands,
                           llvm::ArrayRef<TensorType> resultTypes,
                           AttributeMap attrs, StateSlot *state, Node *before) {
  const OpInfo *info = lookupOp(op);
  assert(info && "creating a node of an unregistered op");
  Node *n = new Node();
  n->Op = op.str();
  n->Info = info;
  n->Parent = this;
  if (state)
    n->States.push_back(state);
  n->Attrs = std::move(attrs);
  n->Operands.resize(operands.size(), nullptr);
  for (unsigned i = 0; i < operands.size(); ++i)
    n->setOperand(i, operands[i]);
  for (unsigned i = 0; i < resultTypes.size(); ++i) {
    ValuePool.push_back(
        std::unique_ptr<Value>(new Value(resultTypes[i], "", n, i)));
    n->Results.push_back(ValuePool.back().get());
  }
  if (before)
    Nodes.insert(before->getIterator(), n);
  else
    Nodes.push_back(n);
  return n;
}

Value *Builder::constant(Tensor t) {
  TensorType type = t.type();
  AttributeMap attrs;
  attrs["value"] = Attribute::getTensor(std::move(t));
  return createValue("Constant", {}, type, std::move(attrs));
}

Value *Builder::apply(llvm::StringRef op, llvm::ArrayRef<Value *> operands,
                      AttributeMap attrs) {
  const OpInfo *info = lookupOp(op);
  if (!info)
    llvm::report_fatal_error("Builder::apply: no op named '" + op + "'");
  auto types = ops::inferResultTypes(info->Kind, operands, attrs);
  if (!types)
    llvm::report_fatal_error("Builder::apply(" + op +
                             "): " + llvm::toString(types.takeError()));
  if (!*types || (*types)->size() != 1)
    llvm::report_fatal_error("Builder::apply(" + op +
                             "): no single result type by rule; give it");
  return createValue(op, operands, (**types)[0], std::move(attrs));
}

Value *Builder::read(StateSlot *s) {
  return create("Read", {}, {s->type()}, {}, s)->result(0);
}

//===----------------------------------------------------------------------===//
// Module
//===----------------------------------------------------------------------===//

StateSlot *Module::addState(std::string name, TensorType type, StateKind kind) {
  assert(!lookupState(name) && "duplicate state slot");
  States.push_back(
      std::make_unique<StateSlot>(std::move(name), std::move(type), kind));
  return States.back().get();
}

StateSlot *Module::lookupState(llvm::StringRef name) const {
  for (const auto &s : States)
    if (s->name() == name)
      return s.get();
  return nullptr;
}

void Module::eraseState(StateSlot *s) {
  auto it = llvm::find_if(States, [&](const auto &p) { return p.get() == s; });
  assert(it != States.end() && "erasing a state slot of another module");
  llvm::erase_if(Adapters, [&](const LoraAdapter &a) {
    return a.Base == s || a.A == s || a.B == s;
  });
  States.erase(it);
}

Function *Module::addFunction(std::string name) {
  Functions.push_back(std::make_unique<Function>(this, std::move(name)));
  return Functions.back().get();
}

Function *Module::lookupFunction(llvm::StringRef name) const {
  for (const auto &f : Functions)
    if (f->name() == name)
      return f.get();
  return nullptr;
}

/// Appends copies of f's arguments and nodes to `copy`, each node's state
/// slot mapped by `state`.
template <typename StateMap>
static void copyBody(const Function &f, Function &copy, StateMap state) {
  llvm::DenseMap<const Value *, Value *> map;
  for (Value *a : f.arguments())
    map[a] = copy.addArgument(a->type(), a->name());
  for (const Node &n : f.nodes()) {
    llvm::SmallVector<Value *, 4> operands;
    for (Value *v : n.operands())
      operands.push_back(v ? map.lookup(v) : nullptr);
    llvm::SmallVector<TensorType, 2> types;
    for (Value *r : n.results())
      types.push_back(r->type());
    Node *c = copy.createNode(n.op(), operands, types, n.attrs());
    for (StateSlot *s : n.states())
      c->addState(state(s));
    c->setLoc(n.loc());
    for (unsigned i = 0; i < n.numResults(); ++i) {
      c->result(i)->setName(n.result(i)->name());
      map[n.result(i)] = c->result(i);
    }
  }
}

Function *Module::cloneFunction(const Function &f, std::string name) {
  Function *copy = addFunction(std::move(name));
  copyBody(f, *copy, [](StateSlot *s) { return s; });
  return copy;
}

std::unique_ptr<Module> Module::clone() const {
  auto m = std::make_unique<Module>();
  llvm::DenseMap<const StateSlot *, StateSlot *> states;
  for (const auto &s : States) {
    StateSlot *copy = m->addState(s->name(), s->type(), s->kind());
    copy->setInit(s->init());
    copy->setOnHost(s->onHost());
    if (s->shardOf())
      copy->setShardOf(*s->shardOf());
    states[s.get()] = copy;
  }
  for (const auto &s : States)
    if (s->replicaOf())
      states[s.get()]->setReplicaOf(states.lookup(s->replicaOf()));
  m->setRanks(Ranks);
  for (LoraAdapter a : Adapters) {
    a.Base = states.lookup(a.Base);
    a.A = states.lookup(a.A);
    a.B = states.lookup(a.B);
    m->addAdapter(a);
  }
  llvm::DenseMap<const Function *, Function *> functions;
  for (const auto &f : Functions) {
    Function *copy = m->addFunction(f->name());
    copyBody(*f, *copy, [&](StateSlot *s) { return states.lookup(s); });
    functions[f.get()] = copy;
  }
  std::vector<DriverStep> driver = Driver;
  for (DriverStep &d : driver)
    d.Callee = functions.lookup(d.Callee);
  m->setDriver(std::move(driver));
  return m;
}

//===- IR.h - headroom's intermediate representation ----------------------===//
//
// A Module holds state slots (what persists across training steps: parameters,
// frozen weights, later optimizer moments and accumulators) and functions. A
// Function is an SSA graph in a fixed order: arguments, then a list of nodes,
// the last of which is `return`. Every value has a static TensorType.
//
// Functions read state only through `Read` nodes and write it only through
// update nodes (ops whose OpInfo says they write state, e.g. `Assign`); the
// planner lowers those writes to in-place updates. Nodes refer to state slots
// directly: a node has value operands and state operands, at most one except
// for the fused optimizer updates (AdamWUpdate writes a weight and its two
// moments, MomentumUpdate a weight and its buffer, in one pass).
//
// Use lists are kept up to date by every mutation that goes through Node's API,
// so passes can ask `value->users()` and call `replaceAllUsesWith`.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_IR_H
#define HEADROOM_COMPILER_IR_H

#include "compiler/Attribute.h"
#include "compiler/OpInfo.h"
#include "compiler/Types.h"

#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/ilist.h"
#include "llvm/ADT/ilist_node.h"

#include <memory>
#include <string>
#include <vector>

namespace headroom {

class Function;
class Node;

/// What a state slot holds. Parameters are trained; frozen slots are constant
/// weights that still live in state (they come from the model's
/// initializers); buffers are updated by the model itself (BatchNormalization's
/// running statistics); optimizer slots hold moments and step counters.
/// What a state slot holds: a trained parameter, a frozen weight, a
/// non-trained buffer the step updates (BatchNorm statistics), optimizer
/// state (moments, step counts), a gradient kept across calls (the
/// accumulators of gradient accumulation), or the whole of a sharded
/// parameter, gathered from every rank's shard after each update (ZeRO 1
/// and 2's working weights; StateSlot::replicaOf names the shard).
enum class StateKind { Param, Frozen, Buffer, Optimizer, Gradient, Replica };
llvm::StringRef stateKindName(StateKind k);
llvm::Optional<StateKind> parseStateKind(llvm::StringRef s);

/// Where a slot's first value comes from: the model's initializer of its
/// name (the default; optimizer and gradient state start at zero), zeros, or
/// drawn from --seed as torch's kaiming_uniform_(a=sqrt(5)) draws a Linear
/// weight (uniform in +-1/sqrt(fan_in), fan_in the last dimension): what
/// the lora pass gives its adapters (lora_B zeros, lora_A drawn).
/// Nf4: the model's initializer of the weight quantized to NF4 when the
/// run starts (the four slots of compiler/StateQuantization.h).
enum class StateInit { Model, Zeros, KaimingUniform, Nf4 };
llvm::StringRef stateInitName(StateInit i);
llvm::Optional<StateInit> parseStateInit(llvm::StringRef s);

class StateSlot {
public:
  StateSlot(std::string name, TensorType type, StateKind kind)
      : Name(std::move(name)), Type(std::move(type)), Kind(kind) {}
  StateInit init() const { return Init; }
  void setInit(StateInit i) { Init = i; }
  const std::string &name() const { return Name; }
  const TensorType &type() const { return Type; }
  /// Changes what the slot holds (mixed precision stores parameters in
  /// bf16); its Reads and updates must follow.
  void setType(TensorType t) { Type = std::move(t); }
  StateKind kind() const { return Kind; }
  void setKind(StateKind k) { Kind = k; }
  /// Whether the slot lives in the plan's pinned host pool instead of on
  /// the device (the `offload` pass; compiler/Pools.h says where each node
  /// then runs).
  bool onHost() const { return Host; }
  void setOnHost(bool host) { Host = host; }
  /// Data parallelism (the `data-parallel` pass): a sharded slot holds this
  /// rank's part of a tensor of type shardOf() -- elements
  /// [rank s, rank s + s) of it flattened, s = shardElements(), zero past
  /// its end -- and its type is [s]. Null when the slot holds the whole.
  const TensorType *shardOf() const { return Whole ? &*Whole : nullptr; }
  void setShardOf(TensorType whole) { Whole = std::move(whole); }
  /// A Replica slot's shard: the sharded slot it is gathered from.
  StateSlot *replicaOf() const { return Source; }
  void setReplicaOf(StateSlot *s) { Source = s; }

private:
  std::string Name;
  TensorType Type;
  StateKind Kind;
  StateInit Init = StateInit::Model;
  bool Host = false;
  llvm::Optional<TensorType> Whole;
  StateSlot *Source = nullptr;
};

/// The elements of each rank's shard of a tensor of `elements` elements
/// split over `ranks` ranks: ceil(elements / ranks), the last rank's shard
/// padded with zeros.
inline int64_t shardElements(int64_t elements, unsigned ranks) {
  return (elements + ranks - 1) / ranks;
}

/// An SSA value: a function argument or a node result.
class Value {
public:
  const TensorType &type() const { return Type; }
  void setType(TensorType t) { Type = std::move(t); }
  /// A name hint: the printer uses it when it is unique, and the ONNX name for
  /// imported values. Function arguments are matched to data by this name.
  const std::string &name() const { return Name; }
  void setName(std::string n) { Name = std::move(n); }

  /// The node that defines this value, or null for a function argument.
  Node *definingNode() const { return Def; }
  unsigned resultIndex() const { return Index; }
  bool isArgument() const { return Def == nullptr; }

  /// Nodes that use this value, once per use, in no particular order.
  llvm::ArrayRef<Node *> users() const { return Users; }
  bool hasUses() const { return !Users.empty(); }
  /// Makes every user of this value use `v` instead.
  void replaceAllUsesWith(Value *v);

private:
  friend class Function;
  friend class Node;
  Value(TensorType type, std::string name, Node *def, unsigned index)
      : Type(std::move(type)), Name(std::move(name)), Def(def), Index(index) {}
  void removeUser(Node *n);

  TensorType Type;
  std::string Name;
  Node *Def;
  unsigned Index;
  llvm::SmallVector<Node *, 2> Users;
};

class Node : public llvm::ilist_node<Node> {
public:
  ~Node();
  const std::string &op() const { return Op; }
  const OpInfo *info() const { return Info; }
  OpKind kind() const { return Info->Kind; }
  bool is(OpKind k) const { return Info->Kind == k; }

  /// Where the node came from: the ONNX node's name (torch writes scopes
  /// such as `/layers.0/attention_norm/Pow`), carried by clones and by the
  /// nodes a pass derives from it (a gradient rule's nodes take the forward
  /// node's). Empty for nodes with no source. Printed as `loc("...")`.
  const std::string &loc() const { return Loc; }
  void setLoc(std::string l) { Loc = std::move(l); }
  Function *parent() const { return Parent; }

  unsigned numOperands() const { return Operands.size(); }
  /// Operand i; null where an optional ONNX input is absent.
  Value *operand(unsigned i) const { return Operands[i]; }
  llvm::ArrayRef<Value *> operands() const { return Operands; }
  void setOperand(unsigned i, Value *v);

  unsigned numResults() const { return Results.size(); }
  Value *result(unsigned i) const { return Results[i]; }
  llvm::ArrayRef<Value *> results() const { return Results; }

  /// The state slot a Read reads or an update op writes; null otherwise.
  /// A fused optimizer update writes several: this is the first (the
  /// parameter), states() lists them all.
  StateSlot *state() const { return States.empty() ? nullptr : States[0]; }
  llvm::ArrayRef<StateSlot *> states() const { return States; }
  /// Adds a state operand after the ones the node has.
  void addState(StateSlot *s) { States.push_back(s); }

  const AttributeMap &attrs() const { return Attrs; }
  const Attribute *attr(llvm::StringRef name) const;
  int64_t intAttr(llvm::StringRef name, int64_t dflt) const;
  double floatAttr(llvm::StringRef name, double dflt) const;
  std::string stringAttr(llvm::StringRef name, llvm::StringRef dflt) const;
  void setAttr(llvm::StringRef name, Attribute a) { Attrs[name.str()] = a; }
  void removeAttr(llvm::StringRef name) { Attrs.erase(name.str()); }

  /// Drops every operand (updating use lists) and unlinks and deletes this
  /// node. Its results must have no uses left.
  void erase();

private:
  friend class Function;
  Node() = default;

  std::string Op;
  const OpInfo *Info = nullptr;
  Function *Parent = nullptr;
  llvm::SmallVector<Value *, 3> Operands;
  llvm::SmallVector<Value *, 1> Results;
  llvm::SmallVector<StateSlot *, 1> States;
  AttributeMap Attrs;
  std::string Loc;
};

class Module;

class Function {
public:
  using NodeList = llvm::iplist<Node>;

  Function(Module *parent, std::string name)
      : Parent(parent), Name(std::move(name)) {}
  Function(const Function &) = delete;
  ~Function();

  const std::string &name() const { return Name; }
  void setName(std::string n) { Name = std::move(n); }
  Module *parent() const { return Parent; }

  Value *addArgument(TensorType type, std::string name);
  llvm::ArrayRef<Value *> arguments() const { return Args; }

  NodeList &nodes() { return Nodes; }
  const NodeList &nodes() const { return Nodes; }
  /// The terminating `return` node, or null while the function is built.
  Node *returnNode() const;
  /// Values the function returns (operands of its `return`).
  llvm::ArrayRef<Value *> returnValues() const;
  /// A training step's loss: its result 0 (null without results). The
  /// forward is what computes it; autodiff's backward follows it.
  Value *loss() const {
    return returnValues().empty() ? nullptr : returnValues()[0];
  }
  /// The node computing the loss, or null (none, or an argument).
  Node *lossNode() const { return loss() ? loss()->definingNode() : nullptr; }

  /// Creates a node before `before` (or at the end when null). `op` must be in
  /// the op registry, `resultTypes` gives the results.
  Node *createNode(llvm::StringRef op, llvm::ArrayRef<Value *> operands,
                   llvm::ArrayRef<TensorType> resultTypes,
                   AttributeMap attrs = {}, StateSlot *state = nullptr,
                   Node *before = nullptr);

private:
  Module *Parent;
  std::string Name;
  llvm::SmallVector<Value *, 4> Args;
  NodeList Nodes;
  // Owns every value ever created here (results of erased nodes included; they
  // are unreachable and cost a few bytes until the function dies).
  std::vector<std::unique_ptr<Value>> ValuePool;
};

/// Inserts nodes at a fixed point of a function; what passes use to build IR.
class Builder {
public:
  explicit Builder(Function &f, Node *before = nullptr)
      : F(f), Before(before) {}
  void setInsertionPoint(Node *before) { Before = before; }
  /// The location every node created from now on gets.
  void setLoc(std::string loc) { Loc = std::move(loc); }
  const std::string &loc() const { return Loc; }

  Node *create(llvm::StringRef op, llvm::ArrayRef<Value *> operands,
               llvm::ArrayRef<TensorType> resultTypes, AttributeMap attrs = {},
               StateSlot *state = nullptr) {
    Node *n = F.createNode(op, operands, resultTypes, std::move(attrs), state,
                           Before);
    n->setLoc(Loc);
    return n;
  }
  /// A single-result node; returns its result.
  Value *createValue(llvm::StringRef op, llvm::ArrayRef<Value *> operands,
                     const TensorType &type, AttributeMap attrs = {}) {
    return create(op, operands, {type}, std::move(attrs))->result(0);
  }
  /// A single-result node of an op with a result-type rule
  /// (compiler/ops/ResultTypes.h: elementwise, Cast, MatMul, reductions,
  /// the shape family) whose type the rule gives; returns its result. A
  /// rule that refuses the operands is a bug in the pass: fatal, naming both.
  Value *apply(llvm::StringRef op, llvm::ArrayRef<Value *> operands,
               AttributeMap attrs = {});
  Value *constant(Tensor t);
  Value *read(StateSlot *s);

private:
  Function &F;
  Node *Before;
  std::string Loc;
};

/// One entry of a module's driver: how a training step calls a function.
struct DriverStep {
  Function *Callee = nullptr;
  unsigned Repeat = 1;
  /// Runs on the batch of the call before it instead of the next one (the
  /// update pass after a norm-only pass of LOMO with clipping).
  bool SameBatch = false;
};

/// The unit of compilation: state slots and functions, both in creation order,
/// and the driver: the calls one training step makes.
/// A LoRA adapter the `lora` pass added (passes/Lora.cpp): the frozen base
/// weight, its trained A [rank, in] and B [out, rank], and what saving it as
/// PEFT does needs: alpha (the scale is alpha / rank), the dropout, and
/// whether the base is [out, in] (PyTorch's Linear) or [in, out].
struct LoraAdapter {
  StateSlot *Base = nullptr, *A = nullptr, *B = nullptr;
  double Alpha = 0, Dropout = 0;
  bool OutIn = true;
};

class Module {
public:
  Module() = default;
  Module(const Module &) = delete;

  /// The adapters of `lora` (printed as `lora @W @A @B alpha X dropout P
  /// out_in|in_out` lines after the states).
  llvm::ArrayRef<LoraAdapter> adapters() const { return Adapters; }
  void addAdapter(LoraAdapter a) { Adapters.push_back(a); }

  StateSlot *addState(std::string name, TensorType type, StateKind kind);
  StateSlot *lookupState(llvm::StringRef name) const;
  llvm::ArrayRef<std::unique_ptr<StateSlot>> states() const { return States; }
  /// Removes a slot no node refers to any more.
  void eraseState(StateSlot *s);

  Function *addFunction(std::string name);
  Function *lookupFunction(llvm::StringRef name) const;
  llvm::ArrayRef<std::unique_ptr<Function>> functions() const {
    return Functions;
  }
  /// A copy of `f` named `name`, appended: same arguments, nodes, attributes
  /// and state slots, its values with the same name hints.
  Function *cloneFunction(const Function &f, std::string name);
  /// A deep copy: states, functions (node locations and value names kept)
  /// and the driver.
  std::unique_ptr<Module> clone() const;

  /// The calls of one step, in order. Empty means one call of the first
  /// function (what every module without a driver line does).
  llvm::ArrayRef<DriverStep> driver() const { return Driver; }
  void setDriver(std::vector<DriverStep> d) { Driver = std::move(d); }

  /// The processes that run this module together (data parallelism: each
  /// on its share of the batch; printed as a `ranks N` line). 1: alone.
  unsigned ranks() const { return Ranks; }
  void setRanks(unsigned n) { Ranks = n; }

private:
  std::vector<std::unique_ptr<StateSlot>> States;
  std::vector<std::unique_ptr<Function>> Functions;
  std::vector<DriverStep> Driver;
  std::vector<LoraAdapter> Adapters;
  unsigned Ranks = 1;
};

} // namespace headroom

#endif // HEADROOM_COMPILER_IR_H

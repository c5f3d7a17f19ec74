//===- OnnxImport.cpp - ONNX model -> IR ----------------------------------===//
//
// The import runs in three stages on the ModelProto, then translates it:
//   1. parse and check (protobuf, opset range, ONNX's checker);
//   2. bind dynamic input dimensions from the user's --batch / --shape;
//   3. until every value has a static shape: expand function ops that are not
//      headroom primitives, run ONNX shape inference with data propagation,
//      and fold nodes whose inputs are constants (or Shape/Size of a static
//      value) into Constant nodes.
// ONNX reports errors by throwing; this file is the only place headroom
// catches exceptions, and it turns each into an llvm::Error.
//
//===----------------------------------------------------------------------===//
#include "compiler/OnnxImport.h"

#include "compiler/ConstantFolding.h"
#include "compiler/OnnxTensor.h"
#include "compiler/Verifier.h"

#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/defs/shape_inference.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <google/protobuf/io/coded_stream.h>

#include <algorithm>
#include <climits>
#include <fstream>
#include <functional>
#include <mutex>

using namespace headroom;
using llvm::Error;
using llvm::Expected;

namespace {

Error err(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// `node 'name' (op 'Gemm')`, or `node #12 (op 'Gemm')` when it has no name.
std::string nodeLabel(const onnx::NodeProto &n, int index) {
  std::string s = n.name().empty() ? "node #" + std::to_string(index)
                                   : "node '" + n.name() + "'";
  return s + " (op '" + n.op_type() + "')";
}

/// A readable name hint for an ONNX value: torch's `/h.0/attn/MatMul_output_0`
/// becomes `h.0.attn.MatMul`, `onnx::Gemm_12` becomes `Gemm_12`. Only a hint:
/// the printer keeps printed names unique, and data inputs keep exact names.
std::string prettyName(llvm::StringRef name) {
  name.consume_front("onnx::");
  name = name.ltrim('/');
  name.consume_back("_output_0");
  std::string out;
  for (char c : name)
    out += (llvm::isAlnum(c) || c == '_' || c == '.') ? c
           : c == '/'                                 ? '.'
                                                      : '_';
  return out;
}

/// The location compactLocations() leaves on a node in place of the
/// exporter's metadata.
constexpr llvm::StringLiteral kLocKey = "headroom.loc";

/// Where a node comes from, for errors and for recomputation's blocks.
/// torch's legacy exporter names nodes by module path
/// (`/transformer/h.0/attn/MatMul`); the dynamo exporter names them
/// `node_MatMul_12` and records the module path in the node's metadata
/// `pkg.torch.onnx.name_scopes` (`['', 'model', 'model.h.0', 'matmul']`:
/// each scope extends the one before, the last is the op's own), which
/// gives `/model/h.0/node_MatMul_12`.
std::string nodeLocation(const onnx::NodeProto &n) {
  for (const auto &p : n.metadata_props()) {
    if (p.key() == kLocKey)
      return p.value();
    if (p.key() != "pkg.torch.onnx.name_scopes")
      continue;
    llvm::SmallVector<llvm::StringRef, 8> scopes;
    llvm::StringRef rest = p.value();
    while (true) {
      auto [before, after] = rest.split('\'');
      if (after.empty() && before == rest)
        break;
      auto [scope, tail] = after.split('\'');
      scopes.push_back(scope);
      rest = tail;
    }
    std::string loc;
    llvm::StringRef parent;
    for (size_t i = 0; i + 1 < scopes.size(); ++i) {
      llvm::StringRef s = scopes[i];
      if (s.empty())
        continue;
      // `model.h.0` under `model` adds `h.0`.
      llvm::StringRef own = s;
      if (!parent.empty() && s.startswith(parent) && s.size() > parent.size() &&
          s[parent.size()] == '.')
        own = s.drop_front(parent.size() + 1);
      loc += "/" + own.str();
      parent = s;
    }
    return loc + "/" + n.name();
  }
  return n.name();
}

bool isDefaultDomain(const std::string &d) {
  return d.empty() || d == "ai.onnx";
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

Expected<Attribute> attributeFromProto(const onnx::AttributeProto &a,
                                       const onnx::NodeProto &node,
                                       llvm::StringRef modelDir) {
  using AP = onnx::AttributeProto;
  switch (a.type()) {
  case AP::INT:
    if (node.op_type() == "Cast" && a.name() == "to") {
      auto dt = dtypeFromOnnx(static_cast<int>(a.i()));
      if (!dt)
        return err("Cast to unsupported element type " + llvm::Twine(a.i()));
      return Attribute::getType(*dt);
    }
    return Attribute::getInt(a.i());
  case AP::FLOAT:
    return Attribute::getFloat(a.f());
  case AP::STRING:
    return Attribute::getString(a.s());
  case AP::INTS:
    return Attribute::getInts(
        std::vector<int64_t>(a.ints().begin(), a.ints().end()));
  case AP::FLOATS:
    return Attribute::getFloats(
        std::vector<double>(a.floats().begin(), a.floats().end()));
  case AP::STRINGS:
    return Attribute::getStrings(
        std::vector<std::string>(a.strings().begin(), a.strings().end()));
  case AP::TENSOR: {
    auto t = tensorFromProto(a.t(), modelDir);
    if (!t)
      return t.takeError();
    return Attribute::getTensor(std::move(*t));
  }
  default:
    return err("attribute '" + a.name() + "' has unsupported kind " +
               AP::AttributeType_Name(a.type()));
  }
}

/// The tensor a Constant node produces (its `value` or `value_*` attribute).
Expected<Tensor> constantNodeValue(const onnx::NodeProto &n,
                                   llvm::StringRef modelDir) {
  if (n.attribute_size() != 1)
    return err("Constant needs exactly one value attribute");
  const onnx::AttributeProto &a = n.attribute(0);
  if (a.name() == "value")
    return tensorFromProto(a.t(), modelDir);
  if (a.name() == "value_float")
    return Tensor::fromDoubles(DType::F32, {}, {a.f()});
  if (a.name() == "value_floats") {
    std::vector<double> v(a.floats().begin(), a.floats().end());
    return Tensor::fromDoubles(DType::F32, {int64_t(v.size())}, v);
  }
  if (a.name() == "value_int")
    return Tensor::fromInts(DType::I64, {}, {a.i()});
  if (a.name() == "value_ints") {
    std::vector<int64_t> v(a.ints().begin(), a.ints().end());
    return Tensor::fromInts(DType::I64, {int64_t(v.size())}, v);
  }
  return err("Constant attribute '" + a.name() + "' is not supported");
}

//===----------------------------------------------------------------------===//
// Types from shape inference
//===----------------------------------------------------------------------===//

/// A value's type when ONNX knows it completely, else None.
llvm::Optional<TensorType> staticType(const onnx::TypeProto &t) {
  if (!t.has_tensor_type() || !t.tensor_type().has_shape())
    return llvm::None;
  auto dt = dtypeFromOnnx(t.tensor_type().elem_type());
  if (!dt)
    return llvm::None;
  llvm::SmallVector<int64_t, 4> dims;
  for (const auto &d : t.tensor_type().shape().dim()) {
    if (!d.has_dim_value() || d.dim_value() < 0)
      return llvm::None;
    dims.push_back(d.dim_value());
  }
  return TensorType(*dt, dims);
}

//===----------------------------------------------------------------------===//
// The importer
//===----------------------------------------------------------------------===//

struct RecurrentSpec;

class Importer {
public:
  Importer(onnx::ModelProto &model, llvm::StringRef name,
           llvm::StringRef modelDir, const ImportOptions &options)
      : Model(model), Graph(*model.mutable_graph()), Name(name.str()),
        ModelDir(modelDir.str()), Options(options) {}

  Expected<std::unique_ptr<Module>> run();

private:
  Error checkModel();
  Error readSignature();
  void compactMetadata();
  Error trainBatchNorms();
  Error checkOpVersion(const onnx::NodeProto &n, int index);
  Error bindInputs();
  Error makeShapesStatic();
  Expected<bool> expandFunctions();
  std::vector<onnx::TypeProto> inputTypeProtos(const onnx::NodeProto &n) const;
  /// Unsupported ops: op -> (its first node, count).
  using UnsupportedOps =
      llvm::MapVector<std::string, std::pair<std::string, int>,
                      std::map<std::string, unsigned>>;
  Error unsupportedOps(const UnsupportedOps &unsupported);
  Expected<bool> lowerSequences();
  Expected<std::vector<int64_t>> sequenceSizes(const onnx::NodeProto &n, int i,
                                               int64_t dim);
  Expected<std::vector<std::pair<int, int64_t>>>
  sequenceUses(const onnx::NodeProto &n, int64_t count,
               const llvm::StringMap<std::vector<int>> &users);
  Expected<llvm::Optional<Tensor>> knownConstant(const std::string &name);
  Expected<bool>
  expandRecurrent(const onnx::NodeProto &n, int index,
                  google::protobuf::RepeatedPtrField<onnx::NodeProto> &nodes);
  Error recurrentSpec(const onnx::NodeProto &n, int index, const TensorType &x,
                      RecurrentSpec &r);
  void
  unrollRecurrent(const onnx::NodeProto &n, const RecurrentSpec &r,
                  const TensorType &x,
                  google::protobuf::RepeatedPtrField<onnx::NodeProto> &nodes);
  Error inferShapes();
  Expected<bool> foldConstants();
  Expected<std::unique_ptr<Module>> translate();
  /// What translate keeps while it walks the graph: the value of each ONNX
  /// name, made on first use for initializers (a Read or a Constant).
  struct GraphValues {
    Module &M;
    Builder &B;
    std::map<std::string, Tensor> ConstInits;
    llvm::StringMap<Value *> Values;
    Value *lookup(const std::string &name);
  };
  Expected<std::map<std::string, Tensor>> addStates(Module &m);
  Error translateNode(int i, GraphValues &g);
  Error checkBuffersWritten(const Module &m, const Function &f);
  Error addReturn(Function &f, GraphValues &g);
  Error normalizeNode(const onnx::NodeProto &n, int index,
                      llvm::SmallVectorImpl<Value *> &operands,
                      AttributeMap &attrs, Builder &b);

  Error fail(const llvm::Twine &msg) { return err(Name + ": " + msg); }
  /// "--batch N --shape x=AxB " (what bound the data inputs' shapes), or
  /// "the model's shapes " when nothing did.
  std::string bindingsText() const {
    std::string s;
    if (Options.Batch)
      s += "--batch " + std::to_string(Options.Batch) + " ";
    for (const auto &[name, dims] : Options.Shapes)
      s += "--shape " + name + "=" + shapeString(dims) + " ";
    return s.empty() ? "the model's shapes " : s;
  }
  Error failAt(const onnx::NodeProto &n, int index, const llvm::Twine &msg) {
    return err(Name + ": " + nodeLabel(n, index) + ": " + msg);
  }

  onnx::ModelProto &Model;
  onnx::GraphProto &Graph;
  std::string Name, ModelDir;
  const ImportOptions &Options;
  int Opset = 0;
  llvm::StringSet<> Initializers;
  /// Initializers that came from ImportOptions::ConstantInputs: constants
  /// even when they are float.
  llvm::StringSet<> BoundConstants;
  /// Static types of every value ONNX inferred, by name.
  llvm::StringMap<TensorType> Types;
  unsigned ExpansionCount = 0;
  /// What torch.export's graph signature (PyTorch 2.x's dynamo exporter)
  /// says each initializer is: PARAMETER, BUFFER, CONSTANT_TENSOR, ...; and
  /// the buffers the model's forward mutates (BUFFER_MUTATION).
  bool HasSignature = false;
  llvm::StringMap<std::string> Roles;
  llvm::StringSet<> MutatedBuffers;
  /// opVersionProblem by op (a 7B export has thousands of nodes, few ops).
  llvm::StringMap<std::string> VersionProblems;
};

/// Refuses a default-domain node that headroom runs as an IR op (or unrolls)
/// when the model's opset gives it a version whose meaning headroom does not
/// implement (see opVersionProblem).
Error Importer::checkOpVersion(const onnx::NodeProto &n, int index) {
  if (!isDefaultDomain(n.domain()))
    return Error::success();
  auto cached = VersionProblems.find(n.op_type());
  if (cached == VersionProblems.end())
    cached = VersionProblems
                 .try_emplace(n.op_type(), opVersionProblem(n.op_type(), Opset))
                 .first;
  const std::string &why = cached->second;
  if (why.empty())
    return Error::success();
  return failAt(n, index, why);
}

Error Importer::checkModel() {
  if (!Model.has_graph() || Graph.node_size() == 0)
    return fail("not an ONNX model with a graph (the file may be truncated, "
                "empty or not ONNX)");
  for (const auto &op : Model.opset_import())
    if (isDefaultDomain(op.domain()))
      Opset = static_cast<int>(op.version());
  if (Opset == 0)
    return fail("the model does not import the default ONNX opset");
  if (Opset > kMaxOpset)
    return fail("opset " + llvm::Twine(Opset) +
                " is newer than this headroom reads (" +
                llvm::Twine(kMinOpset) + ".." + llvm::Twine(kMaxOpset) +
                "); export with torch.onnx.export(..., opset_version=" +
                llvm::Twine(kMaxOpset) + ") or older");
  for (int i = 0; i < Graph.node_size(); ++i)
    if (auto e = checkOpVersion(Graph.node(i), i))
      return e;
  if (Model.ir_version() < 3 || Model.ir_version() > onnx::IR_VERSION)
    return fail("IR version " + llvm::Twine(Model.ir_version()) +
                " is not supported (expected 3.." +
                llvm::Twine(int(onnx::IR_VERSION)) + ")");
  // External data is checked before ONNX's checker, which reads nothing
  // but would name a missing file less clearly: every location must be a
  // file inside the model's folder that holds the tensor's bytes.
  for (const auto &t : Graph.initializer())
    if (isExternal(t))
      if (auto span = externalDataSpan(t, ModelDir); !span)
        return fail(llvm::toString(span.takeError()));
  try {
    // check_model(ModelProto) cannot be told where the model lives, which
    // external data needs; this is its body with the model directory set.
    onnx::checker::CheckerContext ctx;
    ctx.set_model_dir(ModelDir);
    ctx.set_ir_version(static_cast<int>(Model.ir_version()));
    std::unordered_map<std::string, int> opsets;
    for (const auto &op : Model.opset_import())
      opsets[op.domain()] = static_cast<int>(op.version());
    ctx.set_opset_imports(opsets);
    onnx::checker::LexicalScopeContext lex;
    onnx::checker::check_graph(Graph, ctx, lex);
    if (Model.ir_version() >= 8)
      onnx::checker::check_model_local_functions(Model, ctx, lex);
  } catch (const std::exception &e) {
    return fail(llvm::StringRef(e.what()).split('\n').first.trim() +
                " (ONNX checker)");
  }
  for (const auto &t : Graph.initializer())
    Initializers.insert(t.name());
  return Error::success();
}

constexpr llvm::StringLiteral kKindKey =
    "pkg.torch.export.graph_signature.InputSpec.kind";
constexpr llvm::StringLiteral kSignatureKey =
    "pkg.torch.export.ExportedProgram.graph_signature";
constexpr llvm::StringLiteral kFoldedKey =
    "pkg.onnxscript.optimizer.folded_from";

/// Reads what the dynamo exporter records of the training state: each
/// initializer's InputSpec.kind (on the value_info entry of its name) and the
/// BUFFER_MUTATION outputs of the graph signature. A file written with the
/// exporter's optimizer (optimize=True, the default) is refused: it folds
/// parameters into new constants (the transposed Linear weights, BatchNorm
/// into Conv, equal-valued tensors merged), so what PyTorch trains is no
/// longer in it.
Error Importer::readSignature() {
  unsigned folded = 0;
  std::string firstFolded;
  for (const auto &v : Graph.value_info())
    for (const auto &p : v.metadata_props()) {
      if (p.key() == kKindKey) {
        HasSignature = true;
        Roles[v.name()] = p.value();
      }
      if (p.key() == kFoldedKey && Initializers.count(v.name()) &&
          folded++ == 0)
        firstFolded = v.name();
    }
  for (const auto &p : Graph.metadata_props()) {
    if (p.key() != kSignatureKey)
      continue;
    HasSignature = true;
    // Lines such as `getitem_3: BUFFER_MUTATION target='bn1.running_mean'`.
    llvm::SmallVector<llvm::StringRef, 64> lines;
    llvm::StringRef(p.value()).split(lines, '\n');
    for (llvm::StringRef line : lines) {
      if (!line.contains(": BUFFER_MUTATION "))
        continue;
      llvm::StringRef target = line.split("target='").second;
      MutatedBuffers.insert(target.split('\'').first);
    }
  }
  if (folded)
    return fail(
        "written by torch.onnx.export's optimizer (optimize=True, the "
        "default), which folds parameters into constants (" +
        llvm::Twine(folded) + " initializers, the first '" + firstFolded +
        "', say pkg.onnxscript.optimizer.folded_from): PyTorch's training "
        "cannot be reproduced from it; export with torch.onnx.export(model, "
        "args, f, dynamo=True, optimize=False)");
  if (HasSignature &&
      llvm::none_of(Graph.initializer(), [&](const onnx::TensorProto &t) {
        return Roles.lookup(t.name()) == "PARAMETER";
      }))
    return fail("the file's graph signature "
                "(pkg.torch.export.graph_signature) marks no initializer as "
                "a PARAMETER, so nothing would train (was its value_info "
                "metadata dropped by a tool?)");
  return Error::success();
}

/// The dynamo exporter's metadata (stack traces, FX nodes, class
/// hierarchies, name scopes: most of a 7B file's 10 MB) is read once: each
/// node keeps only its location, the value_info only its types, so the
/// rounds of expansion and inference below copy small nodes.
void Importer::compactMetadata() {
  for (onnx::NodeProto &n : *Graph.mutable_node()) {
    if (n.metadata_props_size() == 0)
      continue;
    std::string loc = nodeLocation(n);
    n.clear_metadata_props();
    if (loc == n.name())
      continue;
    auto *p = n.add_metadata_props();
    p->set_key(kLocKey.str());
    p->set_value(loc);
  }
  for (onnx::ValueInfoProto &v : *Graph.mutable_value_info())
    v.clear_metadata_props();
  Graph.clear_metadata_props();
}

/// The dynamo exporter writes every BatchNormalization in inference mode
/// (torchlib hard-codes it) while the signature says the forward mutates its
/// running statistics: such a node is trained as PyTorch trains it, in
/// training mode (batch statistics), with the new statistics as outputs that
/// the step writes back (writeBackRunningStats).
Error Importer::trainBatchNorms() {
  for (int i = 0; i < Graph.node_size(); ++i) {
    onnx::NodeProto &n = *Graph.mutable_node(i);
    if (n.op_type() != "BatchNormalization" || !isDefaultDomain(n.domain()) ||
        n.input_size() != 5 || n.output_size() != 1 ||
        !MutatedBuffers.count(n.input(3)) || !MutatedBuffers.count(n.input(4)))
      continue;
    onnx::AttributeProto *mode = nullptr;
    for (auto &a : *n.mutable_attribute())
      if (a.name() == "training_mode")
        mode = &a;
    if (mode && mode->i() != 0)
      continue;
    if (Opset < 14)
      return failAt(n, i, "training mode needs opset 14 or newer");
    if (!mode)
      mode = n.add_attribute();
    mode->Clear();
    mode->set_name("training_mode");
    mode->set_type(onnx::AttributeProto::INT);
    mode->set_i(1);
    std::string prefix = "_bn" + std::to_string(ExpansionCount++) + "/";
    n.add_output(prefix + "running_mean");
    n.add_output(prefix + "running_var");
  }
  return Error::success();
}

Error Importer::bindInputs() {
  // Inputs with known values become initializers (emitted as constants).
  for (const auto &kv : Options.ConstantInputs) {
    auto &inputs = *Graph.mutable_input();
    auto it = std::find_if(inputs.begin(), inputs.end(), [&](const auto &in) {
      return in.name() == kv.first;
    });
    if (it == inputs.end() || Initializers.count(kv.first))
      return fail("constant input '" + kv.first +
                  "' is not a data input of the model");
    inputs.erase(it);
    *Graph.add_initializer() = tensorToProto(kv.second, kv.first);
    Initializers.insert(kv.first);
    BoundConstants.insert(kv.first);
  }
  llvm::StringSet<> inputNames;
  for (onnx::ValueInfoProto &in : *Graph.mutable_input()) {
    if (Initializers.count(in.name()))
      continue;
    inputNames.insert(in.name());
    if (!in.type().has_tensor_type() || !in.type().tensor_type().has_shape())
      return fail("input '" + in.name() + "' is not a tensor with a shape");
    int elemType = in.type().tensor_type().elem_type();
    if (!dtypeFromOnnx(elemType))
      return fail("input '" + in.name() + "' has element type " +
                  onnx::TensorProto::DataType_Name(
                      static_cast<onnx::TensorProto::DataType>(elemType)) +
                  ", which headroom does not support");
    auto *shape = in.mutable_type()->mutable_tensor_type()->mutable_shape();
    auto given = Options.Shapes.find(in.name());
    if (given != Options.Shapes.end()) {
      const std::vector<int64_t> &dims = given->second;
      if (static_cast<int>(dims.size()) != shape->dim_size())
        return fail("--shape " + in.name() + "=" + shapeString(dims) +
                    " has rank " + llvm::Twine(dims.size()) +
                    " but the model's input '" + in.name() + "' has rank " +
                    llvm::Twine(shape->dim_size()));
      for (int i = 0; i < shape->dim_size(); ++i) {
        auto *d = shape->mutable_dim(i);
        if (d->has_dim_value() && d->dim_value() != dims[i])
          return fail("--shape " + in.name() + "=" + shapeString(dims) +
                      " contradicts the model: dimension " + llvm::Twine(i) +
                      " of input '" + in.name() + "' is " +
                      llvm::Twine(d->dim_value()));
        d->set_dim_value(dims[i]);
      }
      continue;
    }
    for (int i = 0; i < shape->dim_size(); ++i) {
      auto *d = shape->mutable_dim(i);
      if (d->has_dim_value() && d->dim_value() >= 0) {
        if (i == 0 && Options.Batch && d->dim_value() != Options.Batch)
          return fail("--batch " + llvm::Twine(Options.Batch) +
                      " contradicts the model: input '" + in.name() +
                      "' has a fixed leading dimension " +
                      llvm::Twine(d->dim_value()));
        continue;
      }
      if (i == 0 && Options.Batch) {
        d->set_dim_value(Options.Batch);
        continue;
      }
      std::string sym = d->has_dim_param() ? " ('" + d->dim_param() + "')" : "";
      return fail("input '" + in.name() + "' has dynamic dimension " +
                  llvm::Twine(i) + sym + "; bind it with " +
                  (i == 0 ? "--batch N or " : "") + "--shape " + in.name() +
                  "=DIMS");
    }
  }
  for (const auto &kv : Options.Shapes)
    if (!inputNames.count(kv.first))
      return fail("--shape names '" + kv.first +
                  "', which is not a data input of the model");
  return Error::success();
}

/// Inlines `fn` for `node`: formal inputs/outputs map to the node's, other
/// names get a unique prefix, attribute references take the node's values
/// (or the schema's defaults).
void expandFunction(const onnx::NodeProto &node, const onnx::FunctionProto &fn,
                    const onnx::OpSchema *schema, const std::string &prefix,
                    google::protobuf::RepeatedPtrField<onnx::NodeProto> &out) {
  std::map<std::string, std::string> io;
  for (int i = 0; i < node.input_size() && i < fn.input_size(); ++i)
    io[fn.input(i)] = node.input(i);
  for (int i = 0; i < node.output_size() && i < fn.output_size(); ++i)
    if (!node.output(i).empty())
      io[fn.output(i)] = node.output(i);
  std::map<std::string, onnx::AttributeProto> attrs;
  if (schema)
    for (const auto &kv : schema->attributes())
      if (kv.second.default_value.type() != onnx::AttributeProto::UNDEFINED)
        attrs[kv.first] = kv.second.default_value;
  for (const auto &a : node.attribute())
    attrs[a.name()] = a;
  auto rename = [&](const std::string &n) {
    if (n.empty())
      return n;
    auto it = io.find(n);
    return it != io.end() ? it->second : prefix + n;
  };
  for (const auto &body : fn.node()) {
    onnx::NodeProto *n = out.Add();
    *n = body;
    n->set_name(prefix + body.name());
    *n->mutable_metadata_props() = node.metadata_props(); // its module
    for (auto &in : *n->mutable_input())
      in = rename(in);
    for (auto &o : *n->mutable_output())
      o = rename(o);
    n->clear_attribute();
    for (const auto &a : body.attribute()) {
      if (a.ref_attr_name().empty()) {
        *n->add_attribute() = a;
        continue;
      }
      auto it = attrs.find(a.ref_attr_name());
      if (it == attrs.end())
        continue; // unset optional attribute
      onnx::AttributeProto *copy = n->add_attribute();
      *copy = it->second;
      copy->set_name(a.name());
    }
  }
}

/// Nodes expandFunctions() keeps as they are: IR ops, ops constant folding
/// evaluates, and sequence ops (lowerSequences).
static bool keptAsIs(const onnx::NodeProto &n) {
  if (!isDefaultDomain(n.domain()))
    return false;
  const OpInfo *info = lookupOp(n.op_type());
  return (info && info->has(opflags::Onnx)) || isFoldableOp(n.op_type()) ||
         n.op_type() == "SplitToSequence" || n.op_type() == "SequenceAt";
}

/// The ONNX types of `n`'s inputs, as far as shape inference knows them.
std::vector<onnx::TypeProto>
Importer::inputTypeProtos(const onnx::NodeProto &n) const {
  std::vector<onnx::TypeProto> inputTypes;
  for (const auto &in : n.input()) {
    onnx::TypeProto tp;
    auto it = Types.find(in);
    if (it != Types.end()) {
      auto *tt = tp.mutable_tensor_type();
      tt->set_elem_type(dtypeToOnnx(it->second.dtype()));
      for (int64_t d : it->second.shape())
        tt->mutable_shape()->add_dim()->set_dim_value(d);
    }
    inputTypes.push_back(tp);
  }
  return inputTypes;
}

/// One error naming every unsupported op of the model (op -> its first
/// node and how many): a user who meets them one at a time fixes one and
/// meets the next.
Error Importer::unsupportedOps(const UnsupportedOps &unsupported) {
  if (unsupported.size() == 1 && unsupported.front().second.second == 1)
    return fail(unsupported.front().second.first +
                ": unsupported operator; headroom supports the ops listed in "
                "docs/ops.md");
  std::string list;
  for (const auto &[op, where] : unsupported) {
    if (!list.empty())
      list += ", ";
    list += op + " (" +
            (where.second == 1
                 ? ""
                 : std::to_string(where.second) + " nodes, the first ") +
            where.first + ")";
  }
  return fail("unsupported operators: " + list +
              "; headroom supports the ops listed in docs/ops.md");
}

Expected<bool> Importer::expandFunctions() {
  // Most rounds have nothing to expand: the node list (thousands of nodes
  // in a 7B export) is copied only when something is.
  if (llvm::all_of(Graph.node(), keptAsIs))
    return false;
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  bool changed = false;
  // Every unsupported op of the model is named in one error: a user who
  // meets them one at a time fixes one and meets the next.
  UnsupportedOps unsupported;
  for (int i = 0; i < Graph.node_size(); ++i) {
    const onnx::NodeProto &n = Graph.node(i);
    const OpInfo *info = lookupOp(n.op_type());
    if (isDefaultDomain(n.domain()) && info && info->has(opflags::Onnx)) {
      *nodes.Add() = n;
      continue;
    }
    // Ops that are not IR ops but that constant folding evaluates (Mod in
    // shape arithmetic) wait for it; translate() refuses any left over.
    if (isDefaultDomain(n.domain()) && isFoldableOp(n.op_type()) &&
        !(info && info->has(opflags::Onnx))) {
      *nodes.Add() = n;
      continue;
    }
    // Sequences are lowered once their types are known (lowerSequences).
    if (isDefaultDomain(n.domain()) &&
        (n.op_type() == "SplitToSequence" || n.op_type() == "SequenceAt")) {
      *nodes.Add() = n;
      continue;
    }
    if (isDefaultDomain(n.domain()) && importerExpandsOp(n.op_type())) {
      auto done = expandRecurrent(n, i, nodes);
      if (!done)
        return done.takeError();
      changed |= *done;
      continue;
    }
    const onnx::FunctionProto *local = nullptr;
    for (const auto &f : Model.functions())
      if (f.name() == n.op_type() && f.domain() == n.domain())
        local = &f;
    const onnx::OpSchema *schema = nullptr;
    onnx::FunctionProto built;
    if (!local) {
      if (!isDefaultDomain(n.domain()))
        return failAt(n, i, "unsupported operator domain '" + n.domain() + "'");
      schema = onnx::OpSchemaRegistry::Schema(n.op_type(), Opset, "");
      if (!schema)
        return failAt(n, i,
                      "unknown operator (not in ONNX opset " +
                          llvm::Twine(Opset) + ")");
      // A function body is chosen for the model's opset: the ops it uses
      // must mean what they mean there (ReduceMean's axes became an input
      // at 18, and ONNX keeps a body per opset for such changes).
      if (schema->HasFunction()) {
        local = schema->GetFunction(Opset);
      } else if (schema->HasContextDependentFunction()) {
        // Its body depends on its inputs' types (CastLike's target type):
        // kept until shape inference knows them.
        bool typesKnown = true;
        for (const auto &in : n.input())
          typesKnown &= in.empty() || Types.count(in) > 0;
        if (!typesKnown) {
          *nodes.Add() = n;
          continue;
        }
        onnx::FunctionBodyBuildContextImpl ctx(n, inputTypeProtos(n));
        try {
          if (schema->BuildContextDependentFunction(ctx, built, Opset))
            local = &built;
        } catch (const std::exception &e) {
          return failAt(n, i, "cannot expand: " + llvm::Twine(e.what()));
        }
      }
      if (!local) {
        auto &seen = unsupported[n.op_type()];
        if (seen.second++ == 0)
          seen.first = nodeLabel(n, i);
        continue;
      }
    }
    std::string prefix = "_fn" + std::to_string(ExpansionCount++) + "/";
    expandFunction(n, *local, schema, prefix, nodes);
    changed = true;
  }
  if (!unsupported.empty())
    return unsupportedOps(unsupported);
  if (changed)
    Graph.mutable_node()->Swap(&nodes);
  return changed;
}

namespace {

/// Writes the primitive ops that one expanded node is made of: each named
/// after the node, each value under the expansion's unique prefix.
class NodeBuilder {
public:
  NodeBuilder(const onnx::NodeProto &n, std::string prefix, DType dtype,
              int opset,
              google::protobuf::RepeatedPtrField<onnx::NodeProto> &out)
      : N(n), Prefix(std::move(prefix)), Dtype(dtype), Opset(opset), Out(out) {}

  static onnx::AttributeProto intAttr(const char *name, int64_t v) {
    onnx::AttributeProto a;
    a.set_name(name);
    a.set_type(onnx::AttributeProto::INT);
    a.set_i(v);
    return a;
  }

  /// A node of `op` with the given outputs; returns the first.
  std::string emit(llvm::StringRef op, std::vector<std::string> ins,
                   std::vector<std::string> outs,
                   std::vector<onnx::AttributeProto> attrs = {}) {
    onnx::NodeProto *m = Out.Add();
    m->set_op_type(op.str());
    m->set_name(N.name().empty() ? Prefix + op.str()
                                 : N.name() + "/" + op.str());
    *m->mutable_metadata_props() = N.metadata_props(); // its module
    for (auto &i : ins)
      m->add_input(i);
    for (auto &o : outs)
      m->add_output(o);
    for (auto &a : attrs)
      *m->add_attribute() = a;
    return outs.empty() ? std::string() : outs[0];
  }
  /// A node of `op` with one fresh output.
  std::string op(llvm::StringRef op, std::vector<std::string> ins,
                 std::vector<onnx::AttributeProto> attrs = {}) {
    return emit(op, std::move(ins), {fresh(op)}, std::move(attrs));
  }
  std::string ints(std::vector<int64_t> v, bool scalar = false) {
    onnx::TensorProto t;
    t.set_data_type(onnx::TensorProto::INT64);
    if (!scalar)
      t.add_dims(int64_t(v.size()));
    for (int64_t e : v)
      t.add_int64_data(e);
    return constant(std::move(t));
  }
  std::string zeros(std::vector<int64_t> dims) {
    onnx::TensorProto t;
    t.set_data_type(dtypeToOnnx(Dtype));
    int64_t count = 1;
    for (int64_t d : dims) {
      t.add_dims(d);
      count *= d;
    }
    t.set_raw_data(std::string(count * dtypeSize(Dtype), '\0'));
    return constant(std::move(t));
  }
  /// v[i] along axis 0.
  std::string take(const std::string &v, int64_t i) {
    return op("Gather", {v, ints({i}, /*scalar=*/true)}, {intAttr("axis", 0)});
  }
  /// `v` cut along `axis` into `parts` equal pieces.
  std::vector<std::string> split(const std::string &v, int64_t parts,
                                 int64_t axis) {
    return splitInto(v, {}, parts, axis);
  }
  /// `v` cut along `axis` into pieces of the given sizes.
  std::vector<std::string> split(const std::string &v,
                                 std::vector<int64_t> sizes, int64_t axis) {
    return splitInto(v, ints(sizes), int64_t(sizes.size()), axis);
  }

private:
  std::string fresh(llvm::StringRef what) {
    return Prefix + what.str() + std::to_string(Counter++);
  }
  std::string constant(onnx::TensorProto t) {
    onnx::AttributeProto a;
    a.set_name("value");
    a.set_type(onnx::AttributeProto::TENSOR);
    *a.mutable_t() = std::move(t);
    return emit("Constant", {}, {fresh("const")}, {a});
  }
  std::vector<std::string> splitInto(const std::string &v,
                                     const std::string &sizes, int64_t parts,
                                     int64_t axis) {
    std::vector<std::string> outs;
    for (int64_t i = 0; i < parts; ++i)
      outs.push_back(fresh("part"));
    std::vector<std::string> ins = {v};
    if (!sizes.empty())
      ins.push_back(sizes);
    // Equal pieces: implied by the outputs before opset 18, said after.
    std::vector<onnx::AttributeProto> attrs = {intAttr("axis", axis)};
    if (sizes.empty() && Opset >= 18)
      attrs.push_back(intAttr("num_outputs", parts));
    emit("Split", ins, outs, attrs);
    return outs;
  }

  const onnx::NodeProto &N;
  std::string Prefix;
  DType Dtype;
  int Opset;
  google::protobuf::RepeatedPtrField<onnx::NodeProto> &Out;
  int Counter = 0;
};

/// One time step of a recurrent cell: the new states (h, and LSTM's c) from
/// x_t W^T plus the biases added before the loop ([batch, gates * hidden])
/// and the previous states ([batch, hidden] each).
using RecurrentStep = std::function<std::vector<std::string>(
    const std::string &xw, const std::vector<std::string> &states)>;

/// What distinguishes LSTM, GRU and RNN inside the shared unrolling
/// (Importer::expandRecurrent).
struct RecurrentCell {
  /// W's blocks of `hidden` rows: LSTM 4 (i, o, f, c), GRU 3 (z, r, h),
  /// RNN 1.
  int Gates = 1;
  /// The recurrent states: h, and LSTM's c (initial ones are inputs 5 and 6,
  /// final ones outputs 1 and 2).
  int States = 1;
  /// A direction's activations (f, g, h as the op names them) by default.
  std::vector<std::string> Activations;
  /// Whether R's bias is added to x W^T once for all steps: all but GRU with
  /// linear_before_reset, which multiplies it by the reset gate.
  bool FoldRecurrentBias = true;
  /// Prepares a direction from R^T ([hidden, gates * hidden]), R's bias
  /// when it is not folded ("" when folded or absent) and the direction's
  /// activations; returns its step.
  std::function<RecurrentStep(NodeBuilder &b, const std::string &rT,
                              const std::string &rb,
                              std::vector<std::string> act)>
      Direction;
};

/// c' = f(f) c + f(i) g(c~), h' = f(o) h(c'), from gates i, o, f, c~.
RecurrentCell lstmCell() {
  RecurrentCell cell;
  cell.Gates = 4;
  cell.States = 2;
  cell.Activations = {"Sigmoid", "Tanh", "Tanh"};
  cell.Direction = [](NodeBuilder &b, const std::string &rT,
                      const std::string &, std::vector<std::string> act) {
    return [&b, rT, act](const std::string &xw,
                         const std::vector<std::string> &s) {
      auto g = b.split(b.op("Add", {xw, b.op("MatMul", {s[0], rT})}), 4, 1);
      std::string c = b.op(
          "Add", {b.op("Mul", {b.op(act[0], {g[2]}), s[1]}),
                  b.op("Mul", {b.op(act[0], {g[0]}), b.op(act[1], {g[3]})})});
      std::string h = b.op("Mul", {b.op(act[0], {g[1]}), b.op(act[2], {c})});
      return std::vector<std::string>{h, c};
    };
  };
  return cell;
}

/// z = f(x Wz + h Rz + bz), r = f(x Wr + h Rr + br), h~ = g(x Wh + (r h) Rh
/// + bh), or with linear_before_reset g(x Wh + Wbh + r (h Rh + Rbh));
/// h' = (1 - z) h~ + z h, computed as h~ + z (h - h~).
RecurrentCell gruCell(bool linearBeforeReset, int64_t hidden) {
  RecurrentCell cell;
  cell.Gates = 3;
  cell.Activations = {"Sigmoid", "Tanh"};
  cell.FoldRecurrentBias = !linearBeforeReset;
  cell.Direction = [linearBeforeReset,
                    hidden](NodeBuilder &b, const std::string &rT,
                            const std::string &rb,
                            std::vector<std::string> act) -> RecurrentStep {
    auto blend = [&b](const std::string &z, const std::string &h,
                      const std::string &candidate) {
      return std::vector<std::string>{b.op(
          "Add", {candidate, b.op("Mul", {z, b.op("Sub", {h, candidate})})})};
    };
    if (linearBeforeReset)
      return [&b, rT, rb, act, blend](const std::string &xw,
                                      const std::vector<std::string> &s) {
        std::string hr = b.op("MatMul", {s[0], rT});
        if (!rb.empty())
          hr = b.op("Add", {hr, rb});
        auto x = b.split(xw, 3, 1), h = b.split(hr, 3, 1);
        std::string z = b.op(act[0], {b.op("Add", {x[0], h[0]})});
        std::string r = b.op(act[0], {b.op("Add", {x[1], h[1]})});
        std::string candidate =
            b.op(act[1], {b.op("Add", {x[2], b.op("Mul", {r, h[2]})})});
        return blend(z, s[0], candidate);
      };
    auto parts = b.split(rT, std::vector<int64_t>{2 * hidden, hidden}, 1);
    return [&b, rzr = parts[0], rh = parts[1], act,
            blend](const std::string &xw, const std::vector<std::string> &s) {
      auto x = b.split(xw, 3, 1);
      auto h = b.split(b.op("MatMul", {s[0], rzr}), 2, 1);
      std::string z = b.op(act[0], {b.op("Add", {x[0], h[0]})});
      std::string r = b.op(act[0], {b.op("Add", {x[1], h[1]})});
      std::string candidate = b.op(
          act[1],
          {b.op("Add", {x[2], b.op("MatMul", {b.op("Mul", {r, s[0]}), rh})})});
      return blend(z, s[0], candidate);
    };
  };
  return cell;
}

/// h' = f(x W + h R + b).
RecurrentCell rnnCell() {
  RecurrentCell cell;
  cell.Activations = {"Tanh"};
  cell.Direction = [](NodeBuilder &b, const std::string &rT,
                      const std::string &, std::vector<std::string> act) {
    return [&b, rT, act](const std::string &xw,
                         const std::vector<std::string> &s) {
      return std::vector<std::string>{
          b.op(act[0], {b.op("Add", {xw, b.op("MatMul", {s[0], rT})})})};
    };
  };
  return cell;
}

} // namespace

/// A recurrent node as recurrentSpec reads it.
struct RecurrentSpec {
  std::string Direction = "forward";
  /// Per direction, the cell's activations, as the ops are spelled.
  std::vector<std::string> Activations;
  int64_t Hidden = 0;
  RecurrentCell Cell;
  int Dirs = 1;
  size_t PerDir = 0;
};

/// LSTM, GRU and RNN (what nn.LSTM, nn.GRU and nn.RNN export to) unrolled
/// over their static sequence length into the ops they are made of, once
/// the inputs' types are known (before that the node is kept and ONNX's
/// shape inference types it). Per direction, x W^T + biases is one MatMul
/// over all steps, split into steps; each step is the cell's primitives
/// (lstmCell, gruCell, rnnCell above). Autodiff then differentiates them
/// (backpropagation through time). What torch does not emit is refused:
/// layout 1, sequence_lens, clip, activation_alpha/beta, activations other
/// than Sigmoid, Tanh and Relu, and LSTM's peepholes and input_forget.
/// Reads and checks a recurrent node's attributes and input shapes.
Error Importer::recurrentSpec(const onnx::NodeProto &n, int index,
                              const TensorType &x, RecurrentSpec &r) {
  const std::string &op = n.op_type();
  auto refuse = [&](const llvm::Twine &what) {
    return failAt(n, index, op + " " + what);
  };
  auto has = [&](int i) { return i < n.input_size() && !n.input(i).empty(); };
  auto typeOf = [&](int i) -> const TensorType * {
    if (!has(i))
      return nullptr;
    auto it = Types.find(n.input(i));
    return it == Types.end() ? nullptr : &it->second;
  };
  auto intAttr = [&](const char *name, int64_t dflt) {
    for (const auto &a : n.attribute())
      if (a.name() == name)
        return a.i();
    return dflt;
  };
  for (const auto &a : n.attribute()) {
    if (a.name() == "direction")
      r.Direction = a.s();
    if (a.name() == "activations")
      r.Activations.assign(a.strings().begin(), a.strings().end());
    if (a.name() == "clip" || a.name() == "activation_alpha" ||
        a.name() == "activation_beta")
      return refuse(a.name() + " is not supported");
  }
  if (intAttr("layout", 0) != 0)
    return refuse("layout 1 is not supported");
  if (has(4))
    return refuse("sequence_lens is not supported");
  if (r.Direction != "forward" && r.Direction != "reverse" &&
      r.Direction != "bidirectional")
    return refuse("direction '" + r.Direction +
                  "' is not forward, reverse or bidirectional");
  if (x.rank() != 3)
    return refuse("input X must have rank 3, not " + x.str());
  r.Hidden = intAttr("hidden_size", 0);
  if (r.Hidden <= 0)
    return refuse("needs a positive hidden_size");

  if (op == "LSTM") {
    if (intAttr("input_forget", 0) != 0)
      return refuse("input_forget is not supported");
    if (has(7))
      return refuse("peepholes (P) are not supported");
    r.Cell = lstmCell();
  } else if (op == "GRU") {
    int64_t lbr = intAttr("linear_before_reset", 0);
    if (lbr != 0 && lbr != 1)
      return refuse("linear_before_reset must be 0 or 1, not " +
                    llvm::Twine(lbr));
    r.Cell = gruCell(lbr == 1, r.Hidden);
  } else {
    r.Cell = rnnCell();
  }

  r.Dirs = r.Direction == "bidirectional" ? 2 : 1;
  r.PerDir = r.Cell.Activations.size();
  if (r.Activations.empty())
    for (int d = 0; d < r.Dirs; ++d)
      r.Activations.insert(r.Activations.end(), r.Cell.Activations.begin(),
                           r.Cell.Activations.end());
  if (r.Activations.size() != r.PerDir * r.Dirs)
    return refuse("direction '" + r.Direction + "' takes " +
                  llvm::Twine(r.PerDir * r.Dirs) + " activations, not " +
                  llvm::Twine(r.Activations.size()));
  for (std::string &a : r.Activations) {
    // Spelled as the ops are (torch's export), or in any case.
    auto known = llvm::StringSwitch<const char *>(llvm::StringRef(a).lower())
                     .Case("sigmoid", "Sigmoid")
                     .Case("tanh", "Tanh")
                     .Case("relu", "Relu")
                     .Default(nullptr);
    if (!known)
      return refuse("activation '" + a +
                    "' is not supported (Sigmoid, Tanh and Relu are)");
    a = known;
  }

  int64_t steps = x.dim(0), batch = x.dim(1), inputs = x.dim(2);
  if (steps < 1)
    return refuse("input X has no time steps (" + x.str() + ")");
  int64_t width = r.Cell.Gates * r.Hidden;
  auto check = [&](int i, const char *what,
                   std::vector<int64_t> want) -> Error {
    const TensorType *t = typeOf(i);
    if (!t || t->shape() == llvm::ArrayRef<int64_t>(want))
      return Error::success();
    return refuse(llvm::Twine(what) + " must be " +
                  TensorType(t->dtype(), want).str() + " for hidden_size " +
                  llvm::Twine(r.Hidden) + ", not " + t->str());
  };
  if (auto e = check(1, "W", {r.Dirs, width, inputs}))
    return e;
  if (auto e = check(2, "R", {r.Dirs, width, r.Hidden}))
    return e;
  if (auto e = check(3, "B", {r.Dirs, 2 * width}))
    return e;
  for (int k = 0; k < r.Cell.States; ++k)
    if (auto e = check(5 + k, k ? "initial_c" : "initial_h",
                       {r.Dirs, batch, r.Hidden}))
      return e;

  return Error::success();
}

/// The unrolled steps of a checked recurrent node (recurrentSpec's `r`).
void Importer::unrollRecurrent(
    const onnx::NodeProto &n, const RecurrentSpec &r, const TensorType &x,
    google::protobuf::RepeatedPtrField<onnx::NodeProto> &nodes) {
  const std::string &op = n.op_type();
  auto has = [&](int i) { return i < n.input_size() && !n.input(i).empty(); };
  int64_t steps = x.dim(0), batch = x.dim(1), inputs = x.dim(2);
  std::string name = llvm::StringRef(op).lower();
  NodeBuilder b(n, "_" + name + std::to_string(ExpansionCount++) + "/",
                x.dtype(), Opset, nodes);
  bool wantY = n.output_size() > 0 && !n.output(0).empty();
  std::string rows =
      b.op("Reshape", {n.input(0), b.ints({steps * batch, inputs})});
  std::vector<std::string> ys;
  std::vector<std::vector<std::string>> finals(r.Cell.States); // [state][dir]
  for (int d = 0; d < r.Dirs; ++d) {
    bool reverse = r.Direction == "reverse" || d == 1;
    std::string xw =
        b.op("MatMul", {rows, b.op("Transpose", {b.take(n.input(1), d)})});
    std::string rb;
    if (has(3)) {
      auto wr = b.split(b.take(n.input(3), d), 2, 0);
      if (r.Cell.FoldRecurrentBias) {
        xw = b.op("Add", {xw, b.op("Add", {wr[0], wr[1]})});
      } else {
        xw = b.op("Add", {xw, wr[0]});
        rb = wr[1];
      }
    }
    std::vector<std::string> xs =
        steps == 1 ? std::vector<std::string>{xw} : b.split(xw, steps, 0);
    RecurrentStep step = r.Cell.Direction(
        b, b.op("Transpose", {b.take(n.input(2), d)}), rb,
        std::vector<std::string>(r.Activations.begin() + d * r.PerDir,
                                 r.Activations.begin() + (d + 1) * r.PerDir));
    std::vector<std::string> states;
    for (int k = 0; k < r.Cell.States; ++k)
      states.push_back(has(5 + k) ? b.take(n.input(5 + k), d)
                                  : b.zeros({batch, r.Hidden}));
    std::vector<std::string> hAt(steps);
    for (int64_t k = 0; k < steps; ++k) {
      int64_t t = reverse ? steps - 1 - k : k;
      states = step(xs[t], states);
      hAt[t] = states[0];
    }
    if (wantY) {
      std::string y =
          steps == 1 ? hAt[0]
                     : b.op("Concat", hAt, {NodeBuilder::intAttr("axis", 0)});
      ys.push_back(b.op("Reshape", {y, b.ints({steps, 1, batch, r.Hidden})}));
    }
    for (int k = 0; k < r.Cell.States; ++k)
      finals[k].push_back(b.op("Unsqueeze", {states[k], b.ints({0})}));
  }
  auto join = [&](std::vector<std::string> parts, int64_t axis, int out) {
    if (out >= n.output_size() || n.output(out).empty())
      return;
    if (parts.size() == 1)
      b.emit("Identity", {parts[0]}, {n.output(out)});
    else
      b.emit("Concat", parts, {n.output(out)},
             {NodeBuilder::intAttr("axis", axis)});
  };
  join(ys, 1, 0);
  for (int k = 0; k < r.Cell.States; ++k)
    join(finals[k], 0, 1 + k);
}

Expected<bool> Importer::expandRecurrent(
    const onnx::NodeProto &n, int index,
    google::protobuf::RepeatedPtrField<onnx::NodeProto> &nodes) {
  const std::string &op = n.op_type();
  auto refuse = [&](const llvm::Twine &what) {
    return failAt(n, index, op + " " + what);
  };
  auto has = [&](int i) { return i < n.input_size() && !n.input(i).empty(); };
  if (!has(0) || !has(1) || !has(2))
    return refuse("needs inputs X, W and R");
  auto typeOf = [&](int i) -> const TensorType * {
    if (!has(i))
      return nullptr;
    auto it = Types.find(n.input(i));
    return it == Types.end() ? nullptr : &it->second;
  };
  const TensorType *x = typeOf(0);
  if (!x || !typeOf(1) || !typeOf(2)) { // typed by the next inference round
    *nodes.Add() = n;
    return false;
  }
  RecurrentSpec r;
  if (auto e = recurrentSpec(n, index, *x, r))
    return e;
  unrollRecurrent(n, r, *x, nodes);
  return true;
}

/// ONNX 1.12's own inference functions trust some inputs they should check
/// (LayerNormalization indexes the dimension at `axis` of a rank-0 input and
/// reads address 0: found by fuzz/FuzzOnnxImport.cpp). Once per process,
/// each such function is wrapped in the check it lacks, which fails shape
/// inference (an error, not a crash).
static void guardOnnxShapeInference() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto wrap = [](const char *op, int version, auto check) {
      const onnx::OpSchema *schema =
          onnx::OpSchemaRegistry::Schema(op, version, "");
      if (!schema || schema->SinceVersion() != version)
        return;
      onnx::InferenceFunction inner =
          schema->GetTypeAndShapeInferenceFunction();
      // The registry hands out const schemas; this is the one edit made.
      const_cast<onnx::OpSchema *>(schema)->TypeAndShapeInferenceFunction(
          [inner, check](onnx::InferenceContext &ctx) {
            check(ctx);
            if (inner)
              inner(ctx);
          });
    };
    wrap("LayerNormalization", 17, [](onnx::InferenceContext &ctx) {
      if (!onnx::hasInputShape(ctx, 0))
        return;
      int64_t rank = ctx.getInputType(0)->tensor_type().shape().dim_size();
      int64_t axis = -1;
      if (const onnx::AttributeProto *a = ctx.getAttribute("axis"))
        axis = a->i();
      if (axis < -rank || axis >= rank)
        fail_shape_inference("LayerNormalization: axis ", axis,
                             " is out of range for an input of rank ", rank);
    });
  });
}

Error Importer::inferShapes() {
  guardOnnxShapeInference();
  Graph.clear_value_info();
  for (auto &out : *Graph.mutable_output())
    out.mutable_type()->mutable_tensor_type()->clear_shape();
  // Data propagation (shape arithmetic evaluated by ONNX) is tried first.
  // ONNX 1.19 propagates the values of tensors of any rank through
  // Unsqueeze and then refuses them in Mul ("Invalid rank for Mul
  // broadcasting", LLaMA's rotary table): without it, constant folding
  // below evaluates the shape arithmetic instead, so a model that fails only
  // with propagation is inferred again without.
  auto infer = [&](bool dataProp) -> Error {
    try {
      onnx::ShapeInferenceOptions opts(/*check_type_val=*/true,
                                       /*strict_mode_val=*/1, dataProp);
      onnx::shape_inference::InferShapes(
          Model, onnx::OpSchemaRegistry::Instance(), opts);
    } catch (const std::exception &e) {
      return fail("shape inference failed: " +
                  llvm::StringRef(e.what()).split('\n').first.trim());
    }
    return Error::success();
  };
  if (Error e = infer(/*dataProp=*/true)) {
    llvm::consumeError(std::move(e));
    Graph.clear_value_info();
    if (Error again = infer(/*dataProp=*/false))
      return again;
  }
  Types.clear();
  auto record = [&](const onnx::ValueInfoProto &v) {
    if (auto t = staticType(v.type()))
      Types[v.name()] = *t;
  };
  for (const auto &v : Graph.input())
    record(v);
  for (const auto &v : Graph.value_info())
    record(v);
  for (const auto &v : Graph.output())
    record(v);
  for (const auto &t : Graph.initializer())
    if (auto type = tensorProtoType(t))
      Types[t.name()] = *type;
    else
      llvm::consumeError(type.takeError());
  return Error::success();
}

Expected<bool> Importer::foldConstants() {
  // Known constants: non-float initializers and Constant outputs. Float
  // initializers are weights (state), never folded.
  std::map<std::string, Tensor> consts;
  for (const auto &t : Graph.initializer()) {
    auto type = tensorProtoType(t);
    if (!type)
      return fail(llvm::toString(type.takeError()));
    if ((isFloat(type->dtype()) && !BoundConstants.count(t.name())) ||
        type->numElements() > kMaxFoldElements)
      continue;
    auto v = tensorFromProto(t, ModelDir);
    if (!v)
      return v.takeError();
    consts.emplace(t.name(), std::move(*v));
  }
  bool changed = false;
  for (int i = 0; i < Graph.node_size(); ++i) {
    onnx::NodeProto &n = *Graph.mutable_node(i);
    if (n.op_type() == "Constant") {
      auto v = constantNodeValue(n, ModelDir);
      if (!v)
        return failAt(n, i, llvm::toString(v.takeError()));
      if (n.output_size() == 1)
        consts.emplace(n.output(0), std::move(*v));
      continue;
    }
    std::vector<Tensor> results;
    if ((n.op_type() == "Shape" || n.op_type() == "Size") &&
        n.input_size() == 1 && Types.count(n.input(0))) {
      AttributeMap attrs;
      for (const auto &a : n.attribute())
        if (a.type() == onnx::AttributeProto::INT)
          attrs[a.name()] = Attribute::getInt(a.i());
      results.push_back(
          *foldTypeOp(n.op_type(), attrs, Types.lookup(n.input(0))));
    } else {
      if (!isFoldableOp(n.op_type()) || !isDefaultDomain(n.domain()))
        continue;
      llvm::SmallVector<const Tensor *, 4> operands;
      bool allConst = true;
      for (const auto &in : n.input()) {
        auto it = consts.find(in);
        if (!in.empty() && it == consts.end())
          allConst = false;
        operands.push_back(in.empty() ? nullptr : &it->second);
      }
      if (!allConst)
        continue;
      AttributeMap attrs;
      for (const auto &a : n.attribute()) {
        auto attr = attributeFromProto(a, n, ModelDir);
        if (!attr)
          return failAt(n, i, llvm::toString(attr.takeError()));
        attrs[a.name()] = std::move(*attr);
      }
      auto folded = foldConstantOp(n.op_type(), attrs, operands);
      if (!folded)
        return failAt(n, i, llvm::toString(folded.takeError()));
      if (!*folded)
        continue;
      results = std::move(**folded);
    }
    // Replace the node by one Constant per result (the first in place).
    std::vector<onnx::NodeProto> replacements;
    for (size_t r = 0; r < results.size() && r < size_t(n.output_size()); ++r) {
      if (n.output(r).empty())
        continue;
      onnx::NodeProto c;
      c.set_op_type("Constant");
      c.set_name(n.name());
      c.add_output(n.output(r));
      auto *a = c.add_attribute();
      a->set_name("value");
      a->set_type(onnx::AttributeProto::TENSOR);
      *a->mutable_t() = tensorToProto(results[r], n.output(r));
      consts.emplace(n.output(r), std::move(results[r]));
      replacements.push_back(std::move(c));
    }
    n = replacements.front();
    for (size_t r = 1; r < replacements.size(); ++r) {
      // Rare (multi-result folds); append and restore order by moving up.
      *Graph.add_node() = replacements[r];
      for (int k = Graph.node_size() - 1; k > i + 1; --k)
        Graph.mutable_node()->SwapElements(k, k - 1);
      ++i;
    }
    changed = true;
  }
  return changed;
}

/// The value of `name` when an initializer that is not a weight or a
/// Constant node gives it; None when it is computed.
Expected<llvm::Optional<Tensor>>
Importer::knownConstant(const std::string &name) {
  for (const auto &t : Graph.initializer()) {
    if (t.name() != name)
      continue;
    auto type = tensorProtoType(t);
    if (!type)
      return fail(llvm::toString(type.takeError()));
    if (isFloat(type->dtype()) && !BoundConstants.count(name))
      return llvm::None;
    auto v = tensorFromProto(t, ModelDir);
    if (!v)
      return v.takeError();
    return llvm::Optional<Tensor>(std::move(*v));
  }
  for (const auto &n : Graph.node()) {
    if (n.op_type() != "Constant" || n.output_size() != 1 ||
        n.output(0) != name)
      continue;
    auto v = constantNodeValue(n, ModelDir);
    if (!v)
      return v.takeError();
    return llvm::Optional<Tensor>(std::move(*v));
  }
  return llvm::None;
}

/// A SplitToSequence whose every use is a SequenceAt at a constant position
/// (torch.split and torch.chunk in dynamo exports: GPT-2's q, k, v) becomes
/// one Split, with a Squeeze per piece where keepdims=0 drops the axis, and
/// each SequenceAt an Identity of its piece. Needs the input's static type,
/// so it runs once shape inference has it.
/// The nodes replacing SplitToSequence `n`: the sizes constant, one Split
/// into `pieces`, and a Squeeze of each when keepdims=0 drops the axis.
static std::vector<onnx::NodeProto>
splitNodes(const onnx::NodeProto &n, const std::string &prefix,
           llvm::ArrayRef<int64_t> sizes, llvm::ArrayRef<std::string> pieces,
           int64_t axis, bool squeeze) {
  std::vector<onnx::NodeProto> nodes;
  onnx::NodeProto c;
  c.set_op_type("Constant");
  c.set_name(n.name());
  c.add_output(prefix + "sizes");
  auto *value = c.add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  *value->mutable_t() = tensorToProto(
      Tensor::fromInts(DType::I64, {int64_t(sizes.size())}, sizes),
      prefix + "sizes");
  nodes.push_back(c);
  onnx::NodeProto split;
  split.set_op_type("Split");
  split.set_name(n.name());
  split.add_input(n.input(0));
  split.add_input(prefix + "sizes");
  auto *ax = split.add_attribute();
  ax->set_name("axis");
  ax->set_type(onnx::AttributeProto::INT);
  ax->set_i(axis);
  for (const std::string &p : pieces)
    split.add_output(p + (squeeze ? "/kept" : ""));
  nodes.push_back(split);
  if (squeeze) {
    onnx::NodeProto axes = c;
    axes.set_output(0, prefix + "axes");
    *axes.mutable_attribute(0)->mutable_t() = tensorToProto(
        Tensor::fromInts(DType::I64, {1}, {axis}), prefix + "axes");
    nodes.push_back(axes);
    for (const std::string &p : pieces) {
      onnx::NodeProto sq;
      sq.set_op_type("Squeeze");
      sq.set_name(n.name());
      sq.add_input(p + "/kept");
      sq.add_input(prefix + "axes");
      sq.add_output(p);
      nodes.push_back(sq);
    }
  }
  return nodes;
}

/// The piece sizes of SplitToSequence `n` (node i) along an axis of `dim`:
/// ones without a split operand, chunks of a scalar one, else its sizes.
Expected<std::vector<int64_t>> Importer::sequenceSizes(const onnx::NodeProto &n,
                                                       int i, int64_t dim) {
  std::vector<int64_t> sizes;
  bool hasSplit = n.input_size() > 1 && !n.input(1).empty();
  // One Split output per piece: a sequence of more pieces than any model
  // splits into (torch.unbind of a long axis) is refused, not allocated.
  constexpr int64_t kMaxPieces = 1 << 14;
  auto tooMany = [&] {
    return failAt(n, i,
                  "makes more than " + llvm::Twine(kMaxPieces) + " pieces");
  };
  if (!hasSplit) {
    if (dim > kMaxPieces)
      return tooMany();
    sizes.assign(dim, 1);
  } else {
    auto split = knownConstant(n.input(1));
    if (!split)
      return split.takeError();
    if (!*split)
      return failAt(n, i, "split sizes must be constants");
    if ((*split)->type().rank() == 0) {
      int64_t chunk = (*split)->getInt(0);
      if (chunk <= 0)
        return failAt(n, i,
                      "split size " + llvm::Twine(chunk) + " is not positive");
      if (dim / chunk >= kMaxPieces)
        return tooMany();
      for (int64_t at = 0; at < dim; at += chunk)
        sizes.push_back(std::min(chunk, dim - at));
    } else {
      if ((*split)->numElements() > kMaxPieces)
        return tooMany();
      for (int64_t k = 0; k < (*split)->numElements(); ++k)
        sizes.push_back((*split)->getInt(k));
    }
  }
  return sizes;
}

/// The SequenceAt nodes that read SplitToSequence `n`'s output (`users`:
/// the nodes reading each name), with their positions among `count`
/// pieces; an error for any other reader or a position not constant.
Expected<std::vector<std::pair<int, int64_t>>>
Importer::sequenceUses(const onnx::NodeProto &n, int64_t count,
                       const llvm::StringMap<std::vector<int>> &users) {
  std::vector<std::pair<int, int64_t>> uses;
  for (int u : users.lookup(n.output(0))) {
    const onnx::NodeProto &at = Graph.node(u);
    if (at.op_type() != "SequenceAt" || at.input_size() != 2 ||
        at.output_size() != 1 || at.input(0) != n.output(0))
      return failAt(at, u,
                    "uses the sequence of a SplitToSequence; headroom "
                    "supports sequences read by SequenceAt only");
    auto pos = knownConstant(at.input(1));
    if (!pos)
      return pos.takeError();
    if (*pos && (*pos)->numElements() != 1)
      return failAt(at, u, "position must be one integer");
    int64_t p = *pos ? (*pos)->getInt(0) : INT64_MAX;
    if (p < -count || p >= count)
      return failAt(at, u,
                    *pos ? "position " + llvm::Twine(p) +
                               " is outside the sequence of " +
                               llvm::Twine(count)
                         : llvm::Twine("position must be a constant"));
    uses.push_back({u, p < 0 ? p + count : p});
  }
  return uses;
}

Expected<bool> Importer::lowerSequences() {
  llvm::StringMap<std::vector<int>> users;
  for (int i = 0; i < Graph.node_size(); ++i)
    for (const auto &in : Graph.node(i).input())
      users[in].push_back(i);
  std::map<int, std::vector<onnx::NodeProto>> replace;
  for (int i = 0; i < Graph.node_size(); ++i) {
    const onnx::NodeProto &n = Graph.node(i);
    if (!isDefaultDomain(n.domain()) || n.op_type() != "SplitToSequence")
      continue;
    if (n.input_size() < 1 || n.output_size() != 1)
      return failAt(n, i, "needs an input and one output");
    if (Opset < 13)
      return failAt(n, i, "sequences need opset 13 or newer");
    if (!Types.count(n.input(0)))
      continue;
    const TensorType &x = Types.lookup(n.input(0));
    int64_t axis = 0, keepdims = 1;
    for (const auto &a : n.attribute()) {
      if (a.name() == "axis")
        axis = a.i();
      if (a.name() == "keepdims")
        keepdims = a.i();
    }
    int64_t rank = x.rank();
    if (axis < -rank || axis >= rank)
      return failAt(n, i,
                    "axis " + llvm::Twine(axis) + " is out of range for " +
                        x.str());
    axis = axis < 0 ? axis + rank : axis;
    int64_t dim = x.dim(axis);
    bool hasSplit = n.input_size() > 1 && !n.input(1).empty();
    auto sizes = sequenceSizes(n, i, dim);
    if (!sizes)
      return sizes.takeError();
    std::string prefix = "_seq" + std::to_string(ExpansionCount++) + "/";
    std::vector<std::string> pieces;
    for (size_t k = 0; k < sizes->size(); ++k)
      pieces.push_back(prefix + std::to_string(k));
    auto uses = sequenceUses(n, sizes->size(), users);
    if (!uses)
      return uses.takeError();
    std::vector<onnx::NodeProto> nodes =
        splitNodes(n, prefix, *sizes, pieces, axis, !keepdims && !hasSplit);
    for (onnx::NodeProto &made : nodes)
      *made.mutable_metadata_props() = n.metadata_props();
    replace[i] = std::move(nodes);
    for (const auto &[u, p] : *uses) {
      onnx::NodeProto id;
      id.set_op_type("Identity");
      id.set_name(Graph.node(u).name());
      *id.mutable_metadata_props() = Graph.node(u).metadata_props();
      id.add_input(pieces[p]);
      id.add_output(Graph.node(u).output(0));
      replace[u] = {id};
    }
  }
  if (replace.empty())
    return false;
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (int i = 0; i < Graph.node_size(); ++i) {
    auto it = replace.find(i);
    if (it == replace.end()) {
      *nodes.Add() = Graph.node(i);
      continue;
    }
    for (auto &r : it->second)
      *nodes.Add() = std::move(r);
  }
  Graph.mutable_node()->Swap(&nodes);
  return true;
}

Error Importer::makeShapesStatic() {
  for (int round = 0;; ++round) {
    // Each round expands, lowers or folds something; a model that keeps
    // asking for more (a local function that calls itself) is refused.
    if (round > 256)
      return fail("import does not converge: function expansion, sequence "
                  "lowering and constant folding still change the graph "
                  "after 256 rounds (a recursive function?)");
    auto expanded = expandFunctions();
    if (!expanded)
      return expanded.takeError();
    if (auto e = inferShapes())
      return e;
    // Context-dependent functions need input types (CastLike, also inside
    // bodies expanded this round): expand again once they are known.
    auto again = expandFunctions();
    if (!again)
      return again.takeError();
    if (*again)
      continue;
    auto lowered = lowerSequences();
    if (!lowered)
      return lowered.takeError();
    if (*lowered)
      continue;
    int missing = -1;
    for (int i = 0; i < Graph.node_size() && missing < 0; ++i)
      for (const auto &o : Graph.node(i).output())
        if (!o.empty() && !Types.count(o))
          missing = i;
    if (missing < 0)
      return Error::success();
    auto folded = foldConstants();
    if (!folded)
      return folded.takeError();
    if (!*folded || round > 64) {
      const onnx::NodeProto &n = Graph.node(missing);
      auto infos = {&Graph.value_info(), &Graph.output()};
      for (const auto *list : infos)
        for (const auto &v : *list)
          for (const auto &o : n.output())
            if (v.name() == o && v.type().has_tensor_type() &&
                !dtypeFromOnnx(v.type().tensor_type().elem_type()))
              return failAt(n, missing,
                            "output '" + o + "' has element type " +
                                onnx::TensorProto::DataType_Name(
                                    static_cast<onnx::TensorProto::DataType>(
                                        v.type().tensor_type().elem_type())) +
                                ", which headroom does not support");
      return failAt(n, missing,
                    "cannot determine a static shape for its output; check "
                    "--batch/--shape, or the graph computes a shape from data");
    }
  }
}

/// Training-mode BatchNormalization computes new running statistics; when
/// they come from initializers, the step writes them back (as PyTorch's
/// module does) and the initializers become buffers, not parameters.
Error writeBackRunningStats(Node &n, Builder &b) {
  if (!n.is(OpKind::BatchNormalization) || !n.intAttr("training_mode", 0) ||
      n.numResults() < 3)
    return Error::success();
  for (unsigned i = 0; i < 2; ++i) {
    Node *read = n.operand(3 + i)->definingNode();
    if (!read || !read->is(OpKind::Read))
      continue;
    StateSlot *s = read->state();
    if (s->kind() == StateKind::Frozen)
      continue; // the user froze it: keep it constant
    s->setKind(StateKind::Buffer);
    b.create("Assign", {n.result(1 + i)}, {}, {}, s);
  }
  return Error::success();
}

/// The value of `v` when a Constant node defines it.
const Tensor *constantOf(Value *v) {
  Node *d = v ? v->definingNode() : nullptr;
  if (!d || !d->is(OpKind::Constant))
    return nullptr;
  return &d->attrs().at("value").asTensor();
}

/// Rewrites a node of a newer op version (kNewerVersions) into the form the
/// IR op takes, which is the opset-17 one.
Error Importer::normalizeNode(const onnx::NodeProto &n, int index,
                              llvm::SmallVectorImpl<Value *> &operands,
                              AttributeMap &attrs, Builder &b) {
  llvm::StringRef op = n.op_type();
  // Split-18 {num_outputs}: chunks of ceil(d / n), the last one smaller.
  if (op == "Split" && attrs.count("num_outputs")) {
    if (!operands[0] || attrs.at("num_outputs").kind() != Attribute::Kind::Int)
      return failAt(n, index, "needs an input and an integer num_outputs");
    int64_t parts = attrs.at("num_outputs").asInt();
    attrs.erase("num_outputs");
    if (operands.size() > 1 && operands[1])
      return failAt(n, index, "gives both num_outputs and split sizes");
    const TensorType &x = operands[0]->type();
    int64_t axis = attrs.count("axis") ? attrs.at("axis").asInt() : 0;
    int64_t rank = x.rank();
    if (axis < -rank || axis >= rank)
      return failAt(n, index,
                    "axis " + llvm::Twine(axis) + " is out of range for " +
                        x.str());
    int64_t dim = x.dim(axis < 0 ? axis + rank : axis);
    if (parts < 1 || parts != n.output_size())
      return failAt(n, index,
                    "num_outputs " + llvm::Twine(parts) + " differs from its " +
                        llvm::Twine(n.output_size()) + " outputs");
    int64_t chunk = (dim + parts - 1) / parts;
    std::vector<int64_t> sizes(parts, chunk);
    sizes.back() = dim - chunk * (parts - 1);
    if (sizes.back() < 0)
      return failAt(n, index,
                    "cannot split " + llvm::Twine(dim) + " into " +
                        llvm::Twine(parts) + " parts");
    operands.resize(1);
    operands.push_back(
        b.constant(Tensor::fromInts(DType::I64, {parts}, sizes)));
    return Error::success();
  }
  // Pad-18 (data, pads, constant_value?, axes?): pads for the listed axes
  // only; the IR's Pad takes pads for every axis.
  if (op == "Pad" && operands.size() > 3 && operands[3]) {
    if (!operands[0] || !operands[1])
      return failAt(n, index, "needs data and pads");
    const Tensor *pads = constantOf(operands[1]);
    const Tensor *axes = constantOf(operands[3]);
    if (!pads || !axes)
      return failAt(n, index, "pads and axes must be constants");
    int64_t rank = operands[0]->type().rank(), count = axes->numElements();
    if (pads->numElements() != 2 * count)
      return failAt(n, index,
                    "has " + llvm::Twine(pads->numElements()) + " pads for " +
                        llvm::Twine(count) + " axes");
    std::vector<int64_t> full(2 * rank, 0);
    for (int64_t i = 0; i < count; ++i) {
      int64_t a = axes->getInt(i);
      if (a < -rank || a >= rank)
        return failAt(n, index,
                      "axis " + llvm::Twine(a) + " is out of range for rank " +
                          llvm::Twine(rank));
      a = a < 0 ? a + rank : a;
      full[a] = pads->getInt(i);
      full[a + rank] = pads->getInt(i + count);
    }
    operands[1] = b.constant(Tensor::fromInts(DType::I64, {2 * rank}, full));
    operands.resize(3);
    while (!operands.back())
      operands.pop_back();
    return Error::success();
  }
  // Cast-19 {saturate}, Cast-24 {round_mode}: for float8 only.
  if (op == "Cast") {
    attrs.erase("saturate");
    attrs.erase("round_mode");
  }
  return Error::success();
}

Value *Importer::GraphValues::lookup(const std::string &name) {
  auto it = Values.find(name);
  if (it != Values.end())
    return it->second;
  Value *v = nullptr;
  if (StateSlot *s = M.lookupState(name))
    v = B.read(s);
  else if (ConstInits.count(name))
    v = B.constant(ConstInits.at(name));
  if (v) {
    v->setName(name);
    Values[name] = v;
  }
  return v;
}

/// The float initializers become state (trained, frozen or a buffer); the
/// rest are constants, returned.
Expected<std::map<std::string, Tensor>> Importer::addStates(Module &m) {
  llvm::StringSet<> frozen;
  for (const std::string &name : Options.Freeze) {
    if (!Initializers.count(name))
      return fail("--freeze names '" + name +
                  "', which is not an initializer of the model");
    frozen.insert(name);
  }
  std::map<std::string, Tensor> constInits;
  for (const auto &t : Graph.initializer()) {
    auto type = tensorProtoType(t);
    if (!type)
      return fail(llvm::toString(type.takeError()));
    if (isFloat(type->dtype()) && !BoundConstants.count(t.name())) {
      // With a graph signature only PARAMETERs train; buffers the step
      // updates become Buffer state (writeBackRunningStats), every other
      // float initializer stays as it is. Without one every float
      // initializer trains unless frozen.
      bool trains = !HasSignature || Roles.lookup(t.name()) == "PARAMETER";
      StateKind kind = trains ? StateKind::Param : StateKind::Frozen;
      if (MutatedBuffers.count(t.name()))
        kind = StateKind::Buffer;
      m.addState(t.name(), *type,
                 frozen.count(t.name()) ? StateKind::Frozen : kind);
      continue;
    }
    if (frozen.count(t.name()))
      return fail("--freeze names '" + t.name() +
                  "', which is not a float initializer");
    auto v = tensorFromProto(t, ModelDir);
    if (!v)
      return fail(llvm::toString(v.takeError()));
    constInits.emplace(t.name(), std::move(*v));
  }

  return constInits;
}

/// Node `i` of the graph, its operands looked up (initializers read on
/// first use), normalized to headroom's op and created.
Error Importer::translateNode(int i, GraphValues &g) {
  const onnx::NodeProto &n = Graph.node(i);
  // Every node made for this one (its Reads and Constants too) is from it.
  g.B.setLoc(nodeLocation(n));
  llvm::SmallVector<Value *, 4> operands;
  for (const auto &in : n.input()) {
    if (in.empty()) {
      operands.push_back(nullptr);
      continue;
    }
    Value *v = g.lookup(in);
    if (!v)
      return failAt(n, i, "input '" + in + "' is not defined before use");
    operands.push_back(v);
  }
  // Drop trailing absent outputs; an absent output in the middle would
  // need a type ONNX does not infer.
  int numResults = n.output_size();
  while (numResults > 0 && n.output(numResults - 1).empty())
    --numResults;
  llvm::SmallVector<TensorType, 2> types;
  for (int r = 0; r < numResults; ++r) {
    if (n.output(r).empty())
      return failAt(n, i,
                    "absent output " + llvm::Twine(r) +
                        " before a present one is not supported");
    types.push_back(Types.lookup(n.output(r)));
  }
  AttributeMap attrs;
  if (n.op_type() == "Constant") {
    auto v = constantNodeValue(n, ModelDir);
    if (!v)
      return failAt(n, i, llvm::toString(v.takeError()));
    attrs["value"] = Attribute::getTensor(std::move(*v));
  } else {
    for (const auto &a : n.attribute()) {
      auto attr = attributeFromProto(a, n, ModelDir);
      if (!attr)
        return failAt(n, i, llvm::toString(attr.takeError()));
      attrs[a.name()] = std::move(*attr);
    }
  }
  const OpInfo *info = lookupOp(n.op_type());
  if (!info || !info->has(opflags::Onnx))
    return failAt(n, i, "unsupported operator");
  // Function bodies expanded since checkModel use ops at the model's
  // opset too.
  if (auto e = checkOpVersion(n, i))
    return e;
  if (static_cast<int>(operands.size()) < info->MinOperands ||
      (info->MaxOperands >= 0 &&
       static_cast<int>(operands.size()) > info->MaxOperands))
    return failAt(n, i,
                  "has " + llvm::Twine(operands.size()) +
                      " inputs, which headroom does not support");
  if (auto e = normalizeNode(n, i, operands, attrs, g.B))
    return e;
  Node *node = g.B.create(n.op_type(), operands, types, std::move(attrs));
  for (int r = 0; r < numResults; ++r) {
    node->result(r)->setName(prettyName(n.output(r)));
    g.Values[n.output(r)] = node->result(r);
  }
  if (auto e = writeBackRunningStats(*node, g.B))
    return failAt(n, i, llvm::toString(std::move(e)));
  return Error::success();
}

/// Every buffer the forward mutates must be written by the step.
Error Importer::checkBuffersWritten(const Module &m, const Function &f) {
  llvm::StringSet<> written;
  for (const Node &n : f.nodes())
    if (n.is(OpKind::Assign))
      written.insert(n.state()->name());
  for (const auto &s : m.states())
    if (s->kind() == StateKind::Buffer && !written.count(s->name()))
      return fail("the model's forward updates buffer '" + s->name() +
                  "' (BUFFER_MUTATION in its graph signature), and headroom "
                  "reproduces that for BatchNorm running statistics only; "
                  "--freeze " +
                  s->name() + " keeps it constant");

  return Error::success();
}

/// The function returns the loss: the output named "loss", else the only
/// scalar float output (every output with AllOutputs).
Error Importer::addReturn(Function &f, GraphValues &g) {
  if (Options.AllOutputs) {
    llvm::SmallVector<Value *, 4> results;
    for (const auto &o : Graph.output()) {
      Value *v = g.lookup(o.name());
      if (!v)
        return fail("output '" + o.name() + "' is not computed by the graph");
      results.push_back(v);
    }
    f.createNode("Return", results, {});
    return Error::success();
  }
  // The loss: the output named "loss", else the only scalar float output.
  const onnx::ValueInfoProto *loss = nullptr;
  std::string outputs;
  for (const auto &o : Graph.output()) {
    TensorType t = Types.lookup(o.name());
    outputs += (outputs.empty() ? "" : ", ") + o.name() + " " + t.str();
    if (o.name() == "loss")
      loss = &o;
  }
  if (!loss) {
    for (const auto &o : Graph.output()) {
      auto it = Types.find(o.name());
      if (it == Types.end() || !isFloat(it->second.dtype()) ||
          it->second.numElements() != 1)
        continue;
      if (loss)
        return fail("more than one scalar float output (" + outputs +
                    "); name the loss output 'loss'");
      loss = &o;
    }
  }
  if (!loss || !isFloat(Types.lookup(loss->name()).dtype()) ||
      Types.lookup(loss->name()).numElements() != 1)
    return fail("no scalar float loss output (outputs: " + outputs +
                "); compute the loss inside the model's forward");
  Value *lossValue = g.lookup(loss->name());
  if (!lossValue)
    return fail("output '" + loss->name() + "' is not computed by the graph");
  f.createNode("Return", {lossValue}, {});
  return Error::success();
}

Expected<std::unique_ptr<Module>> Importer::translate() {
  auto m = std::make_unique<Module>();
  auto constInits = addStates(*m);
  if (!constInits)
    return constInits.takeError();
  Function *f = m->addFunction("forward");
  Builder b(*f);
  GraphValues g{*m, b, std::move(*constInits), {}};
  for (const auto &in : Graph.input()) {
    if (Initializers.count(in.name()))
      continue;
    g.Values[in.name()] = f->addArgument(Types.lookup(in.name()), in.name());
  }
  for (int i = 0; i < Graph.node_size(); ++i)
    if (auto e = translateNode(i, g))
      return e;
  if (auto e = checkBuffersWritten(*m, *f))
    return e;
  if (auto e = addReturn(*f, g))
    return e;
  return m;
}

Expected<std::unique_ptr<Module>> Importer::run() {
  if (auto e = checkModel())
    return e;
  if (auto e = readSignature())
    return e;
  compactMetadata();
  if (auto e = trainBatchNorms())
    return e;
  if (auto e = bindInputs())
    return e;
  if (auto e = makeShapesStatic())
    return e;
  auto m = translate();
  if (!m)
    return m.takeError();
  if (auto e = checkByteCounts(**m))
    return fail(bindingsText() +
                "makes tensors too large: " + llvm::toString(std::move(e)));
  // ONNX's shape inference does not check everything (a Gemm whose inner
  // dimensions differ passes it); what it let through is an error here.
  if (auto e = verifyModule(**m))
    return fail("the model is inconsistent: " + llvm::toString(std::move(e)));
  return m;
}

} // namespace

//===----------------------------------------------------------------------===//
// Op versions
//===----------------------------------------------------------------------===//

namespace {

/// Whether two versions of an op have the same contract: the same inputs,
/// outputs and attributes (names, arity, optionality, attribute types,
/// requiredness and defaults). Such versions differ only in the element
/// types they allow (bf16 at 13, float8 at 19, int4 at 21, ...), which
/// headroom's own type checks cover.
bool sameContract(const onnx::OpSchema &a, const onnx::OpSchema &b) {
  auto sameParams = [](const auto &x, const auto &y) {
    if (x.size() != y.size())
      return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i].GetName() != y[i].GetName() ||
          x[i].GetOption() != y[i].GetOption())
        return false;
    return true;
  };
  if (!sameParams(a.inputs(), b.inputs()) ||
      !sameParams(a.outputs(), b.outputs()) ||
      a.attributes().size() != b.attributes().size())
    return false;
  for (const auto &[name, attr] : a.attributes()) {
    auto it = b.attributes().find(name);
    if (it == b.attributes().end() || it->second.type != attr.type ||
        it->second.required != attr.required ||
        it->second.default_value.SerializeAsString() !=
            attr.default_value.SerializeAsString())
      return false;
  }
  return true;
}

/// Versions after opset kIrOpset whose contract changed and that headroom
/// implements all the same: the IR op takes both forms, or translate()
/// rewrites the new form into the IR's (normalizeNode).
const std::pair<const char *, int> kNewerVersions[] = {
    // Axes as an optional operand, noop_with_empty_axes: ReduceSum's form
    // since 13, which the IR's reductions take.
    {"ReduceMean", 18},
    {"ReduceMax", 18},
    {"ReduceMax", 20},
    {"ReduceMin", 18},
    {"ReduceMin", 20},
    {"ReduceProd", 18},
    // num_outputs: normalizeNode writes the split sizes.
    {"Split", 18},
    // An axes operand: normalizeNode writes pads for every axis.
    {"Pad", 18},
    // saturate (19) and round_mode (24): only conversions to float8 saturate
    // or round by mode, and headroom has no float8.
    {"Cast", 19},
    {"Cast", 24},
    // dilations: the pooling windows take them as MaxPool's.
    {"AveragePool", 19},
};

} // namespace

std::string headroom::opVersionProblem(llvm::StringRef op, int opset) {
  const OpInfo *info = lookupOp(op);
  if (!(info && info->has(opflags::Onnx)) && !importerExpandsOp(op))
    return ""; // expanded from ONNX's function body for this opset, or
               // refused as unsupported
  std::string name = op.str();
  auto *given = onnx::OpSchemaRegistry::Schema(name, opset, "");
  auto *ir = onnx::OpSchemaRegistry::Schema(name, kIrOpset, "");
  if (!given || !ir)
    return "";
  int version = given->since_version();
  // Every version in effect at some opset from kMinOpset to kIrOpset.
  auto *first = onnx::OpSchemaRegistry::Schema(name, kMinOpset, "");
  int lowest = first ? first->since_version() : 1;
  auto accepted = [&](const onnx::OpSchema &s) {
    int v = s.since_version();
    if (v >= lowest && v <= ir->since_version())
      return true;
    for (const auto &[o, newer] : kNewerVersions)
      if (op == o && v == newer)
        return true;
    return false;
  };
  if (version < lowest && sameContract(*given, *ir))
    return "";
  // A newer version is accepted when it is listed, or when its contract is
  // that of the version before it and that one is accepted (Pad-19 only
  // adds a mode, which the kernels refuse by name; Cast-21 only types).
  for (const onnx::OpSchema *s = given; s && version > lowest;) {
    if (accepted(*s))
      return "";
    auto *before =
        onnx::OpSchemaRegistry::Schema(name, s->since_version() - 1, "");
    if (!before || !sameContract(*s, *before))
      break;
    s = before;
  }
  if (accepted(*given))
    return "";
  return "opset " + std::to_string(opset) + " gives " + name + "-" +
         std::to_string(version) + ", whose contract differs from the " + name +
         "-" + std::to_string(ir->since_version()) +
         " that headroom implements (" +
         (version < lowest ? "export with opset_version " +
                                 std::to_string(kMinOpset) + " or newer"
                           : "export with an older opset_version") +
         ")";
}

bool headroom::importerExpandsOp(llvm::StringRef op) {
  return op == "LSTM" || op == "GRU" || op == "RNN";
}

Expected<std::unique_ptr<Module>>
headroom::importOnnxBuffer(llvm::StringRef bytes, llvm::StringRef name,
                           llvm::StringRef modelDir,
                           const ImportOptions &options) {
  onnx::ModelProto model;
  google::protobuf::io::CodedInputStream in(
      reinterpret_cast<const uint8_t *>(bytes.data()),
      static_cast<int>(std::min<size_t>(bytes.size(), INT_MAX)));
  in.SetTotalBytesLimit(INT_MAX);
  if (bytes.size() > INT_MAX || !model.ParseFromCodedStream(&in) ||
      !in.ConsumedEntireMessage())
    return err(name + ": not a valid ONNX model (the protobuf data is "
                      "malformed or truncated)");
  return Importer(model, name, modelDir, options).run();
}

Expected<std::unique_ptr<Module>>
headroom::importOnnxFile(llvm::StringRef path, const ImportOptions &options) {
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  if (!buf)
    return err(path + ": cannot read: " + buf.getError().message());
  llvm::StringRef dir = llvm::sys::path::parent_path(path);
  return importOnnxBuffer((*buf)->getBuffer(), path, dir.empty() ? "." : dir,
                          options);
}

Expected<Tensor> headroom::readTensorProtoFile(llvm::StringRef path) {
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  if (!buf)
    return err(path + ": cannot read: " + buf.getError().message());
  onnx::TensorProto t;
  if (!t.ParseFromArray((*buf)->getBufferStart(),
                        static_cast<int>((*buf)->getBufferSize())))
    return err(path + ": not a serialized ONNX TensorProto");
  llvm::StringRef dir = llvm::sys::path::parent_path(path);
  auto tensor = tensorFromProto(t, dir.empty() ? "." : dir);
  if (!tensor)
    return err(path + ": " + llvm::toString(tensor.takeError()));
  return tensor;
}

Expected<std::vector<int64_t>> headroom::parseShapeSpec(llvm::StringRef spec) {
  std::vector<int64_t> dims;
  if (spec == "scalar")
    return dims;
  llvm::SmallVector<llvm::StringRef, 4> parts;
  spec.split(parts, 'x');
  for (llvm::StringRef p : parts) {
    int64_t d;
    if (p.getAsInteger(10, d) || d < 0)
      return err("bad shape '" + spec +
                 "': expected dimensions like 4x128 (or 'scalar')");
    dims.push_back(d);
  }
  return dims;
}

//===- PlanFile.cpp - Plans on disk ---------------------------------------===//
//
// Converts between `struct Plan` and the messages of runtime/plan.proto.
// Writing is a direct translation. Reading checks the envelope (magic,
// version, body checksum), then translates and validates every field the
// executor trusts: element types, sizes (no overflow), buffer, state,
// function and call indices, op names and arities, placements inside the
// arena, and the driver loop.
//
//===----------------------------------------------------------------------===//
#include "runtime/PlanFile.h"

#include "compiler/Collectives.h"

#include "compiler/OpInfo.h"
#include "compiler/Protocol.h"
#include "compiler/StateQuantization.h"
#include "runtime/ModelIO.h"
#include "runtime/plan.pb.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"

#include <cassert>
#include <climits>
#include <cmath>

using namespace headroom;
namespace pb = headroom::planfile;

static constexpr llvm::StringLiteral kMagic = "headroom plan";
/// Calls of driver functions per step (micro-batches and norm passes).
constexpr uint64_t kMaxCallsPerStep = 1u << 20;

/// No tensor, state or arena of a valid plan is this large; the bound keeps
/// every size and offset sum far from overflow.
static constexpr uint64_t kMaxBytes = uint64_t(1) << 50;

static const std::pair<DType, pb::ElementType> kElementTypes[] = {
    {DType::F32, pb::F32},   {DType::F64, pb::F64}, {DType::F16, pb::F16},
    {DType::BF16, pb::BF16}, {DType::I8, pb::I8},   {DType::I16, pb::I16},
    {DType::I32, pb::I32},   {DType::I64, pb::I64}, {DType::U8, pb::U8},
    {DType::U16, pb::U16},   {DType::U32, pb::U32}, {DType::U64, pb::U64},
    {DType::Bool, pb::BOOL},
};

static const std::pair<StateKind, pb::StateKind> kStateKinds[] = {
    {StateKind::Param, pb::PARAM},       {StateKind::Frozen, pb::FROZEN},
    {StateKind::Buffer, pb::BUFFER},     {StateKind::Optimizer, pb::OPTIMIZER},
    {StateKind::Gradient, pb::GRADIENT}, {StateKind::Replica, pb::REPLICA},
};

static std::string sha256Hex(llvm::StringRef bytes) {
  return llvm::toHex(llvm::SHA256::hash(llvm::arrayRefFromStringRef(bytes)),
                     /*LowerCase=*/true);
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

static void toProto(const TensorType &t, pb::TensorType &p) {
  for (const auto &[dtype, element] : kElementTypes)
    if (dtype == t.dtype())
      p.set_element_type(element);
  for (int64_t d : t.shape())
    p.add_dims(d);
}

static pb::ElementType toProto(DType t) {
  for (const auto &[dtype, element] : kElementTypes)
    if (dtype == t)
      return element;
  llvm_unreachable("element type missing from kElementTypes");
}

static void toProto(const std::string &name, const Attribute &a,
                    pb::Attribute &p) {
  p.set_name(name);
  switch (a.kind()) {
  case Attribute::Kind::Int:
    p.set_int_value(a.asInt());
    return;
  case Attribute::Kind::Float:
    p.set_float_value(a.asFloat());
    return;
  case Attribute::Kind::String:
    p.set_string_value(a.asString());
    return;
  case Attribute::Kind::Ints:
    p.mutable_ints_value()->mutable_values()->Add(a.asInts().begin(),
                                                  a.asInts().end());
    return;
  case Attribute::Kind::Floats:
    p.mutable_floats_value()->mutable_values()->Add(a.asFloats().begin(),
                                                    a.asFloats().end());
    return;
  case Attribute::Kind::Strings:
    for (const std::string &s : a.asStrings())
      p.mutable_strings_value()->add_values(s);
    return;
  case Attribute::Kind::Type:
    p.set_type_value(toProto(a.asType()));
    return;
  case Attribute::Kind::Tensor: {
    const Tensor &t = a.asTensor();
    pb::Tensor *pt = p.mutable_tensor_value();
    toProto(t.type(), *pt->mutable_type());
    pt->set_data(t.bytes().data(), t.bytes().size());
    return;
  }
  }
  llvm_unreachable("unknown attribute kind");
}

static void toProto(const MemoryReport &r, pb::MemoryReport &p) {
  p.set_parameters(r.Parameters);
  p.set_frozen(r.Frozen);
  p.set_buffers(r.Buffers);
  p.set_optimizer_state(r.OptimizerState);
  p.set_constants(r.Constants);
  p.set_arena_bytes(r.ArenaBytes);
  p.set_arena_lower_bound(r.ArenaLowerBound);
  p.set_activations(r.Activations);
  p.set_gradients(r.Gradients);
  p.set_temporaries(r.Temporaries);
  p.set_workspace(r.Workspace);
  p.set_gradient_state(r.GradientState);
  p.set_gradients_max_live(r.GradientsMaxLive);
  p.set_largest_parameter(r.LargestParameter);
  p.set_passes_per_step(r.PassesPerStep);
  p.set_library_bytes(r.LibraryBytes);
  p.set_state_padding(r.StatePadding);
  p.set_recomputed(r.Recomputed);
  p.set_step_flops(r.StepFlops);
  p.set_recompute_flops(r.RecomputeFlops);
  p.set_saved_activations(r.SavedActivations);
  p.set_peak_position(r.PeakPosition);
  p.set_peak_op(r.PeakOp);
  p.set_peak_loc(r.PeakLoc);
  p.set_loss_position(r.LossPosition);
  for (int64_t u : r.UpdatePositions)
    p.add_update_positions(u);
  p.set_host_state(r.HostState);
  p.set_host_state_padding(r.HostStatePadding);
  p.set_host_arena_bytes(r.HostArenaBytes);
  p.set_host_workspace(r.HostWorkspace);
  p.set_to_host_bytes(r.ToHostBytes);
  p.set_to_device_bytes(r.ToDeviceBytes);
  p.set_host_bandwidth(r.HostBandwidth);
  p.set_ranks(r.Ranks);
  p.set_collective_bytes(r.CollectiveBytes);
  p.set_collective_elements(r.CollectiveElements);
  p.set_shard_bytes(r.ShardBytes);
  p.set_shard_whole_bytes(r.ShardWholeBytes);
  p.set_replica_bytes(r.ReplicaBytes);
  p.set_collective_library_bytes(r.CollectiveLibraryBytes);
  for (const PeakValue &v : r.PeakValues) {
    pb::PeakValue *pv = p.add_peak_values();
    pv->set_name(v.Name);
    pv->set_op(v.Op);
    pv->set_loc(v.Loc);
    pv->set_bytes(v.Bytes);
    pv->set_category(uint32_t(index(v.Category)));
  }
  for (const auto &point : r.Timeline) {
    pb::TimelinePoint *t = p.add_timeline();
    t->set_activations(point[0]);
    t->set_gradients(point[1]);
    t->set_temporaries(point[2]);
    t->set_recomputed(point[3]);
  }
}

static void toProto(const Plan &plan, const PlanSource &source,
                    const PlanRecipe &recipe, pb::Plan &p) {
  p.mutable_source()->set_path(source.ModelPath);
  p.mutable_source()->set_sha256(source.Sha256);
  p.mutable_options()->set_flags(recipe.Flags);
  p.mutable_options()->set_lr(recipe.Lr);
  p.mutable_options()->set_pipeline(recipe.Pipeline);
  p.set_target(plan.TargetName);
  p.set_alignment(plan.Alignment);
  p.set_library_bytes(plan.LibraryBytes);
  for (const DriverCall &d : plan.Driver) {
    pb::DriverCall *pd = p.add_driver();
    pd->set_function(d.Function);
    pd->set_repeat(d.Repeat);
    pd->set_same_batch(d.SameBatch);
  }
  for (const PlanState &s : plan.States) {
    pb::State *ps = p.add_states();
    ps->set_name(s.Name);
    toProto(s.Type, *ps->mutable_type());
    for (const auto &[kind, pkind] : kStateKinds)
      if (kind == s.Kind)
        ps->set_kind(pkind);
    ps->set_init(uint32_t(s.Init));
    ps->set_host(s.Host);
    if (s.ShardOf)
      toProto(*s.ShardOf, *ps->mutable_shard_of());
    ps->set_replica_of(uint32_t(s.ReplicaOf + 1));
  }
  for (const PlanAdapter &a : plan.Adapters) {
    pb::Adapter *pa = p.add_adapters();
    pa->set_base(a.Base);
    pa->set_a(a.A);
    pa->set_b(a.B);
    pa->set_alpha(a.Alpha);
    pa->set_dropout(a.Dropout);
    pa->set_out_in(a.OutIn);
  }
  assert(plan.Buffers.size() == plan.Placements.size() &&
         "one placement per buffer");
  for (size_t i = 0; i < plan.Buffers.size(); ++i) {
    pb::Buffer *pbuf = p.add_buffers();
    toProto(plan.Buffers[i], *pbuf->mutable_type());
    const Placement &place = plan.Placements[i];
    switch (place.Where) {
    case Placement::Kind::Arena:
      if (place.Host)
        pbuf->set_host_arena_offset(place.Offset);
      else
        pbuf->set_arena_offset(place.Offset);
      break;
    case Placement::Kind::State:
      pbuf->set_state(place.Index);
      break;
    case Placement::Kind::Constant:
      pbuf->mutable_constant()->set_function(place.Index);
      pbuf->mutable_constant()->set_call(place.Call);
      break;
    }
  }
  for (const PlanFunction &f : plan.Functions) {
    pb::Function *pf = p.add_functions();
    pf->set_name(f.Name);
    pf->mutable_args()->Add(f.Args.begin(), f.Args.end());
    for (const std::string &name : f.ArgNames)
      pf->add_arg_names(name);
    pf->mutable_results()->Add(f.Results.begin(), f.Results.end());
    for (const KernelCall &c : f.Calls) {
      pb::Call *pc = pf->add_calls();
      pc->set_op(c.Op);
      for (const auto &[name, attr] : c.Attrs) // std::map: sorted by name
        toProto(name, attr, *pc->add_attributes());
      pc->mutable_inputs()->Add(c.Inputs.begin(), c.Inputs.end());
      pc->mutable_outputs()->Add(c.Outputs.begin(), c.Outputs.end());
      pc->set_state(c.State);
      pc->mutable_more_states()->Add(c.MoreStates.begin(), c.MoreStates.end());
      pc->set_id(c.Id);
      pc->set_host(c.Host);
      pc->set_wait_for(c.WaitFor);
      pc->set_overlapped(c.Overlapped);
      pc->set_flops(c.Flops);
    }
  }
  p.set_arena_bytes(plan.ArenaBytes);
  p.set_workspace_bytes(plan.WorkspaceBytes);
  p.set_host_arena_bytes(plan.HostArenaBytes);
  p.set_host_workspace_bytes(plan.HostWorkspaceBytes);
  p.set_ranks(plan.Ranks);
  toProto(plan.Report, *p.mutable_report());
}

llvm::Expected<std::string>
headroom::serializePlanFile(const Plan &plan, const PlanSource &source,
                            const PlanRecipe &recipe) {
  pb::Plan body;
  toProto(plan, source, recipe, body);
  pb::PlanFile file;
  file.set_magic(kMagic.data(), kMagic.size());
  file.set_format_version(kPlanFormatVersion);
  // Fields without maps serialize deterministically.
  if (!body.SerializeToString(file.mutable_body()))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the plan is too large to serialize (%zu "
                                   "bytes; protobuf's limit is 2 GiB)",
                                   body.ByteSizeLong());
  auto digest = llvm::SHA256::hash(llvm::arrayRefFromStringRef(file.body()));
  file.set_body_sha256(digest.data(), digest.size());
  std::string bytes;
  if (!file.SerializeToString(&bytes))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the plan is too large to serialize (%zu "
                                   "bytes; protobuf's limit is 2 GiB)",
                                   file.ByteSizeLong());
  return bytes;
}

std::string headroom::planFingerprint(const Plan &plan) {
  pb::Plan body;
  toProto(plan, PlanSource{}, PlanRecipe{}, body);
  // What the plan runs, not where it came from or what its report says.
  body.clear_source();
  body.clear_options();
  body.clear_report();
  std::string bytes;
  body.SerializeToString(&bytes);
  return sha256Hex(bytes);
}

llvm::Error headroom::writePlanFile(const Plan &plan, const PlanSource &source,
                                    const PlanRecipe &recipe,
                                    llvm::StringRef path) {
  auto bytes = serializePlanFile(plan, source, recipe);
  if (!bytes)
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s: %s",
                                   path.str().c_str(),
                                   llvm::toString(bytes.takeError()).c_str());
  return writeFileAtomically(path, *bytes);
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

namespace {

/// Translates a parsed pb::Plan, checking what the executor relies on.
class PlanReader {
public:
  explicit PlanReader(llvm::StringRef name) : Name(name) {}
  llvm::Expected<LoadedPlan> read(const pb::Plan &p);

private:
  llvm::Error readStates(const pb::Plan &p);
  llvm::Error readAdapters(const pb::Plan &p);
  llvm::Error readSizes(const pb::Plan &p);
  llvm::Error readBuffers(const pb::Plan &p);
  void readReport(const pb::MemoryReport &pr);
  llvm::Error invalid(const llvm::Twine &what) const {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   Name + ": invalid plan: " + what);
  }
  llvm::Expected<TensorType> readType(const pb::TensorType &p,
                                      const llvm::Twine &where) const;
  llvm::Expected<DType> readElementType(pb::ElementType e,
                                        const llvm::Twine &where) const;
  llvm::Expected<Attribute> readAttribute(const pb::Attribute &p,
                                          const llvm::Twine &where) const;
  llvm::Error readFunction(const pb::Function &p, PlanFunction &f) const;
  llvm::Error checkCall(const PlanFunction &f, const KernelCall &c) const;
  llvm::Error checkBuffer(int b, bool optional, const llvm::Twine &where) const;
  llvm::Error checkPools() const;
  llvm::Error checkPlacements() const;
  llvm::Error checkDriver() const;

  std::string Name;
  Plan P;
};

} // namespace

llvm::Expected<DType>
PlanReader::readElementType(pb::ElementType e, const llvm::Twine &where) const {
  for (const auto &[dtype, element] : kElementTypes)
    if (element == e)
      return dtype;
  return invalid(where + ": unknown element type " + llvm::Twine(int(e)));
}

llvm::Expected<TensorType>
PlanReader::readType(const pb::TensorType &p, const llvm::Twine &where) const {
  auto dtype = readElementType(p.element_type(), where);
  if (!dtype)
    return dtype.takeError();
  uint64_t bytes = dtypeSize(*dtype);
  for (int64_t d : p.dims())
    if (d < 0 || __builtin_mul_overflow(bytes, uint64_t(d), &bytes) ||
        bytes > kMaxBytes)
      return invalid(where + ": dimensions out of range");
  std::vector<int64_t> dims(p.dims().begin(), p.dims().end());
  return TensorType(*dtype, dims);
}

llvm::Expected<Attribute>
PlanReader::readAttribute(const pb::Attribute &p,
                          const llvm::Twine &where) const {
  switch (p.value_case()) {
  case pb::Attribute::kIntValue:
    return Attribute::getInt(p.int_value());
  case pb::Attribute::kFloatValue:
    return Attribute::getFloat(p.float_value());
  case pb::Attribute::kStringValue:
    return Attribute::getString(p.string_value());
  case pb::Attribute::kIntsValue:
    return Attribute::getInts(std::vector<int64_t>(
        p.ints_value().values().begin(), p.ints_value().values().end()));
  case pb::Attribute::kFloatsValue:
    return Attribute::getFloats(std::vector<double>(
        p.floats_value().values().begin(), p.floats_value().values().end()));
  case pb::Attribute::kStringsValue:
    return Attribute::getStrings(std::vector<std::string>(
        p.strings_value().values().begin(), p.strings_value().values().end()));
  case pb::Attribute::kTypeValue: {
    auto t = readElementType(p.type_value(), where);
    if (!t)
      return t.takeError();
    return Attribute::getType(*t);
  }
  case pb::Attribute::kTensorValue: {
    auto t = readType(p.tensor_value().type(), where);
    if (!t)
      return t.takeError();
    const std::string &data = p.tensor_value().data();
    if (data.size() != t->sizeInBytes())
      return invalid(where + ": " + llvm::Twine(data.size()) +
                     " bytes of data for a tensor of type " + t->str());
    return Attribute::getTensor(
        Tensor(*t, std::vector<uint8_t>(data.begin(), data.end())));
  }
  case pb::Attribute::VALUE_NOT_SET:
    break;
  }
  return invalid(where + ": no value");
}

llvm::Error PlanReader::checkBuffer(int b, bool optional,
                                    const llvm::Twine &where) const {
  if ((optional && b == -1) || (b >= 0 && size_t(b) < P.Buffers.size()))
    return llvm::Error::success();
  return invalid(where + ": buffer " + llvm::Twine(b) + " is out of range (" +
                 llvm::Twine(P.Buffers.size()) + " buffers)");
}

llvm::Error PlanReader::readFunction(const pb::Function &p,
                                     PlanFunction &f) const {
  f.Name = p.name();
  std::string where = "@" + f.Name;
  f.Args.assign(p.args().begin(), p.args().end());
  f.ArgNames.assign(p.arg_names().begin(), p.arg_names().end());
  f.Results.assign(p.results().begin(), p.results().end());
  if (f.ArgNames.size() != f.Args.size())
    return invalid(where + ": " + llvm::Twine(f.Args.size()) +
                   " arguments but " + llvm::Twine(f.ArgNames.size()) +
                   " argument names");
  for (int b : f.Args)
    if (auto e = checkBuffer(b, /*optional=*/false, where + " argument"))
      return e;
  for (int b : f.Results)
    if (auto e = checkBuffer(b, /*optional=*/false, where + " result"))
      return e;
  for (const pb::Call &pc : p.calls()) {
    KernelCall c;
    c.Op = pc.op();
    if (const OpInfo *info = lookupOp(c.Op))
      c.Kind = info->Kind;
    c.Inputs.assign(pc.inputs().begin(), pc.inputs().end());
    c.Outputs.assign(pc.outputs().begin(), pc.outputs().end());
    c.State = pc.state();
    c.MoreStates.assign(pc.more_states().begin(), pc.more_states().end());
    c.Id = pc.id();
    c.Host = pc.host();
    c.WaitFor = pc.wait_for();
    c.Overlapped = pc.overlapped();
    c.Flops = pc.flops();
    std::string callWhere = (where + " call " + llvm::Twine(f.Calls.size()) +
                             " (op '" + c.Op + "')")
                                .str();
    for (const pb::Attribute &pa : pc.attributes()) {
      auto a = readAttribute(pa, callWhere + " attribute '" + pa.name() + "'");
      if (!a)
        return a.takeError();
      if (!c.Attrs.emplace(pa.name(), std::move(*a)).second)
        return invalid(callWhere + ": attribute '" + pa.name() +
                       "' appears twice");
    }
    if (auto e = checkCall(f, c))
      return invalid(callWhere + ": " + llvm::toString(std::move(e)));
    f.Calls.push_back(std::move(c));
  }
  return llvm::Error::success();
}

/// What the executor assumes of a call (without the plan's name: the caller
/// adds it).
llvm::Error PlanReader::checkCall(const PlanFunction &f,
                                  const KernelCall &c) const {
  auto fail = [](const llvm::Twine &msg) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
  };
  const OpInfo *op = lookupOp(c.Op);
  if (!op || op->has(opflags::Terminator))
    return fail("not an op this headroom runs");
  auto outside = [](size_t n, int lo, int hi) {
    return int64_t(n) < lo || (hi >= 0 && int64_t(n) > hi);
  };
  if (outside(c.Inputs.size(), op->MinOperands, op->MaxOperands) ||
      outside(c.Outputs.size(), op->MinResults, op->MaxResults))
    return fail(llvm::Twine(c.Inputs.size()) + " inputs and " +
                llvm::Twine(c.Outputs.size()) + " outputs do not fit the op");
  for (int b : c.Inputs)
    if (b != -1 && (b < 0 || size_t(b) >= P.Buffers.size()))
      return fail("input buffer " + llvm::Twine(b) + " is out of range (" +
                  llvm::Twine(P.Buffers.size()) + " buffers)");
  for (int b : c.Outputs)
    if (b < 0 || size_t(b) >= P.Buffers.size())
      return fail("output buffer " + llvm::Twine(b) + " is out of range (" +
                  llvm::Twine(P.Buffers.size()) + " buffers)");
  if (isCollective(c.Kind)) {
    std::vector<TensorType> ins, outs;
    for (int b : c.Inputs)
      if (b < 0)
        return fail("a collective's operand is absent");
      else
        ins.push_back(P.Buffers[b]);
    for (int b : c.Outputs)
      outs.push_back(P.Buffers[b]);
    bool hasState = c.State >= 0 && size_t(c.State) < P.States.size();
    if (c.State >= int(P.States.size()) || c.State < -1 ||
        !c.MoreStates.empty())
      return fail("state " + llvm::Twine(c.State) + " is out of range");
    std::string why =
        collectiveError(c.Kind, c.Attrs, ins, outs,
                        hasState ? &P.States[c.State].Type : nullptr, P.Ranks);
    if (!why.empty())
      return fail(why);
    if (c.Kind == OpKind::AllGatherState &&
        P.States[c.State].Kind != StateKind::Replica)
      return fail("AllGatherState writes a slot that is not a replica");
    return llvm::Error::success();
  }
  bool usesState =
      op->has(opflags::ReadsState) || op->has(opflags::WritesState);
  if (!usesState) {
    if (c.State != -1 || !c.MoreStates.empty())
      return fail("names a state slot but the op has none");
    return llvm::Error::success();
  }
  if (c.State < 0 || size_t(c.State) >= P.States.size())
    return fail("state " + llvm::Twine(c.State) + " is out of range (" +
                llvm::Twine(P.States.size()) + " states)");
  size_t moreStates = c.Kind == OpKind::AdamW8bitUpdate  ? 4
                      : c.Kind == OpKind::AdamWUpdate    ? 2
                      : c.Kind == OpKind::MomentumUpdate ? 1
                                                         : 0;
  if (c.MoreStates.size() != moreStates)
    return fail("names " + llvm::Twine(c.MoreStates.size() + 1) +
                " state slots, the op writes " + llvm::Twine(moreStates + 1));
  const TensorType &state = P.States[c.State].Type;
  // The moments: the weight's type, f32 beside a bf16/f16 weight, or the
  // 8-bit layout (u8 codes, then f32 absmaxes; compiler/StateQuantization.h).
  auto momentFits = [&](size_t k, const TensorType &t) {
    if (c.Kind == OpKind::AdamW8bitUpdate)
      return k < 2 ? t == TensorType(DType::U8, state.shape())
                   : t == TensorType(DType::F32,
                                     {stateBlocks(state.numElements())});
    bool narrow = state.dtype() == DType::BF16 || state.dtype() == DType::F16;
    return t == state || (narrow && t == TensorType(DType::F32, state.shape()));
  };
  for (size_t k = 0; k < c.MoreStates.size(); ++k) {
    int s = c.MoreStates[k];
    if (s < 0 || size_t(s) >= P.States.size() || s == c.State ||
        llvm::count(c.MoreStates, s) != 1 || !momentFits(k, P.States[s].Type))
      return fail("state " + llvm::Twine(s) +
                  " is out of range, repeated or of another type");
  }
  // Read and Assign copy the slot's bytes; ParamGrad copies its input's.
  int value = c.Kind == OpKind::Read ? c.Outputs[0] : c.Inputs[0];
  if (value < 0)
    return fail("the state's value is absent");
  if (c.Kind != OpKind::ParamGrad && P.Buffers[value] != state)
    return fail("buffer " + llvm::Twine(value) + " is " +
                P.Buffers[value].str() + ", the state is " + state.str());
  // A Read is its slot, or a copy of it in the arena.
  if (c.Kind == OpKind::Read) {
    const Placement &place = P.Placements[value];
    bool copy = readCopies(c.Attrs);
    // (An index out of range is checkPlacements' to report.)
    bool inRange = place.Index >= 0 && size_t(place.Index) < P.States.size();
    if (copy ? place.Where != Placement::Kind::Arena
             : place.Where != Placement::Kind::State ||
                   (inRange && place.Index != c.State))
      return fail(copy ? "a copying Read must write an arena buffer"
                       : "a Read's result must be its own state slot");
  }
  return llvm::Error::success();
}

/// Every call reads and writes buffers of the pool it runs in: host calls
/// host-pool buffers, the others device buffers; ToHost and ToDevice copy
/// across (compiler/Pools.h). Constants are in both. A host pool only on
/// the cuda target.
llvm::Error PlanReader::checkPools() const {
  auto onHost = [&](int b) {
    const Placement &place = P.Placements[b];
    return place.Where == Placement::Kind::State ? P.States[place.Index].Host
                                                 : place.Host;
  };
  auto constant = [&](int b) {
    return P.Placements[b].Where == Placement::Kind::Constant;
  };
  bool anyHost =
      llvm::any_of(P.States, [](const PlanState &s) { return s.Host; }) ||
      llvm::any_of(P.Placements, [](const Placement &p) { return p.Host; });
  if (anyHost && P.TargetName != "cuda")
    return invalid("the plan keeps a host pool, which only --device cuda "
                   "plans have");
  for (const PlanFunction &f : P.Functions) {
    for (int b : llvm::concat<const int>(f.Args, f.Results))
      if (onHost(b))
        return invalid("@" + f.Name + ": argument or result buffer " +
                       llvm::Twine(b) + " is in the host pool");
    for (size_t i = 0; i < f.Calls.size(); ++i) {
      const KernelCall &c = f.Calls[i];
      if (c.Overlapped && (P.TargetName != "cuda" || !isCollective(c.Kind)))
        return invalid("@" + f.Name + " call " + llvm::Twine(c.Id) + " (op '" +
                       c.Op +
                       "') is marked to run on the copy stream, which "
                       "only --device cuda's collectives do");
      if (c.WaitFor != -1 &&
          (c.onCopyStream() || c.WaitFor < 0 || size_t(c.WaitFor) >= i ||
           !f.Calls[c.WaitFor].onCopyStream()))
        return invalid("@" + f.Name + " call " + llvm::Twine(c.Id) +
                       " waits for call " + llvm::Twine(c.WaitFor) +
                       ", not an earlier copy-stream call of a compute call");
      bool in = c.Host || c.Kind == OpKind::ToDevice;
      bool out = c.Host || c.Kind == OpKind::ToHost;
      bool fits = true;
      for (int b : c.Inputs)
        fits &= b < 0 || constant(b) || onHost(b) == in;
      for (int b : c.Outputs)
        fits &= onHost(b) == out;
      for (int s :
           llvm::concat<const int>(llvm::makeArrayRef(c.State), c.MoreStates))
        fits &= s < 0 || P.States[s].Host == c.Host;
      if (!fits)
        return invalid("@" + f.Name + " call " + llvm::Twine(c.Id) + " (op '" +
                       c.Op + "') runs on the " + (c.Host ? "host" : "device") +
                       " and touches a buffer or slot of the other pool");
    }
  }
  return llvm::Error::success();
}

llvm::Error PlanReader::checkPlacements() const {
  for (size_t i = 0; i < P.Buffers.size(); ++i) {
    const Placement &place = P.Placements[i];
    uint64_t bytes = P.Buffers[i].sizeInBytes();
    std::string where = "buffer " + std::to_string(i);
    switch (place.Where) {
    case Placement::Kind::Arena:
      if (place.Offset % P.Alignment)
        return invalid(where + ": offset " + llvm::Twine(place.Offset) +
                       " is not a multiple of the alignment " +
                       llvm::Twine(P.Alignment));
      if (uint64_t arena = place.Host ? P.HostArenaBytes : P.ArenaBytes;
          place.Offset > arena || bytes > arena - place.Offset)
        return invalid(where + ": bytes [" + llvm::Twine(place.Offset) + ", " +
                       llvm::Twine(place.Offset + bytes) +
                       ") lie outside the " + llvm::Twine(arena) + "-byte " +
                       (place.Host ? "host " : "") + "arena");
      break;
    case Placement::Kind::State:
      if (place.Index < 0 || size_t(place.Index) >= P.States.size())
        return invalid(where + ": state " + llvm::Twine(place.Index) +
                       " is out of range (" + llvm::Twine(P.States.size()) +
                       " states)");
      if (P.States[place.Index].Type != P.Buffers[i])
        return invalid(where + " is " + P.Buffers[i].str() + ", its state is " +
                       P.States[place.Index].Type.str());
      break;
    case Placement::Kind::Constant: {
      if (place.Index < 0 || size_t(place.Index) >= P.Functions.size() ||
          place.Call < 0 ||
          size_t(place.Call) >= P.Functions[place.Index].Calls.size())
        return invalid(where + ": constant of function " +
                       llvm::Twine(place.Index) + " call " +
                       llvm::Twine(place.Call) + " does not exist");
      const KernelCall &c = P.Functions[place.Index].Calls[place.Call];
      auto value = c.Attrs.find("value");
      if (c.Kind != OpKind::Constant || value == c.Attrs.end() ||
          value->second.kind() != Attribute::Kind::Tensor ||
          value->second.asTensor().type() != P.Buffers[i])
        return invalid(where + ": function " + llvm::Twine(place.Index) +
                       " call " + llvm::Twine(place.Call) +
                       " is not a Constant of type " + P.Buffers[i].str());
      break;
    }
    }
  }
  return llvm::Error::success();
}

/// Each driver call runs a step: its arguments are batches of the data
/// (leading dimension = samples) and its first result is the loss.
llvm::Error PlanReader::checkDriver() const {
  if (P.Driver.empty())
    return invalid("the driver loop is empty");
  if (P.Driver.front().SameBatch)
    return invalid("the driver's first call has no batch before it to reuse");
  const PlanFunction *first = P.function(P.Driver.front().Function);
  uint64_t calls = 0;
  for (const DriverCall &d : P.Driver) {
    const PlanFunction *f = P.function(d.Function);
    if (!f)
      return invalid("the driver calls @" + d.Function +
                     ", which the plan does not define");
    if (d.Repeat == 0)
      return invalid("the driver calls @" + d.Function + " 0 times");
    if (f->Results.empty())
      return invalid("@" + d.Function + " returns no loss");
    for (size_t i = 0; i < f->Results.size() && i < 2; ++i)
      if (P.Buffers[f->Results[i]].numElements() < 1)
        return invalid("@" + d.Function + " returns an empty " +
                       (i ? "gradient norm" : "loss"));
    calls += d.Repeat;
    if (calls > kMaxCallsPerStep)
      return invalid("the driver makes more than " +
                     llvm::Twine(kMaxCallsPerStep) + " calls per step");
    for (int b : f->Args)
      if (P.Buffers[b].rank() > 0 && !f->Args.empty() &&
          P.Buffers[b].dim(0) != P.Buffers[f->Args[0]].dim(0))
        return invalid("@" + d.Function + " takes batches of different sizes");
    if (d.SameBatch && d.Repeat != 1)
      return invalid("the driver repeats @" + d.Function +
                     " on the same batch");
    for (int b : f->Args)
      if (P.Buffers[b].rank() == 0)
        return invalid("@" + d.Function +
                       " takes a scalar argument; data arguments are batches");
    bool same = first && f->ArgNames == first->ArgNames &&
                f->Args.size() == first->Args.size();
    for (size_t i = 0; same && i < f->Args.size(); ++i)
      same = P.Buffers[f->Args[i]] == P.Buffers[first->Args[i]];
    if (!same)
      return invalid("the driver calls @" + P.Driver.front().Function +
                     " and @" + d.Function + ", whose arguments differ");
  }
  return llvm::Error::success();
}

/// The state slots: types, kinds, shards and replicas.
llvm::Error PlanReader::readStates(const pb::Plan &p) {
  for (const pb::State &ps : p.states()) {
    std::string where = "state @" + ps.name();
    auto type = readType(ps.type(), where);
    if (!type)
      return type.takeError();
    llvm::Optional<StateKind> kind;
    for (const auto &[k, pk] : kStateKinds)
      if (pk == ps.kind())
        kind = k;
    if (!kind)
      return invalid(where + ": unknown kind " + llvm::Twine(int(ps.kind())));
    if (ps.init() > uint32_t(StateInit::Nf4))
      return invalid(where + ": unknown init " + llvm::Twine(ps.init()));
    PlanState state{ps.name(), *type,      *kind, StateInit(ps.init()),
                    ps.host(), llvm::None, -1};
    if (ps.has_shard_of()) {
      auto whole = readType(ps.shard_of(), where + " (the whole of its shard)");
      if (!whole)
        return whole.takeError();
      if (*type != shardType(*whole, P.Ranks))
        return invalid(where + ": " + type->str() + " is not a shard of " +
                       whole->str() + " over " + llvm::Twine(P.Ranks) +
                       " ranks");
      state.ShardOf = *whole;
    }
    if (ps.replica_of()) {
      size_t source = ps.replica_of() - 1;
      if (source >= P.States.size() || !P.States[source].ShardOf ||
          P.States[source].ShardOf->shape() != type->shape() ||
          *kind != StateKind::Replica)
        return invalid(where + ": a replica of state " + llvm::Twine(source) +
                       ", which is not an earlier shard of its shape");
      state.ReplicaOf = int(source);
    } else if (*kind == StateKind::Replica) {
      return invalid(where + ": a replica of no shard");
    }
    P.States.push_back(std::move(state));
  }
  return llvm::Error::success();
}

/// LoRA adapters: three states whose shapes fit.
llvm::Error PlanReader::readAdapters(const pb::Plan &p) {
  for (const pb::Adapter &pa : p.adapters()) {
    for (const std::string *name : {&pa.base(), &pa.a(), &pa.b()})
      if (P.stateIndex(*name) < 0)
        return invalid("lora adapter of @" + pa.base() + ": no state @" +
                       *name);
    const TensorType &w = P.States[P.stateIndex(pa.base())].Type,
                     &a = P.States[P.stateIndex(pa.a())].Type,
                     &b = P.States[P.stateIndex(pa.b())].Type;
    // The base as the model has it, or its NF4 codes (two per byte).
    bool nf4 = P.States[P.stateIndex(pa.base())].Init == StateInit::Nf4;
    bool shapes =
        a.rank() == 2 && b.rank() == 2 && a.dim(0) == b.dim(1) &&
        (nf4 ? w == TensorType(DType::U8, {nf4PackedBytes(a.dim(1) * b.dim(0))})
             : w.rank() == 2 && a.dim(1) == w.dim(pa.out_in() ? 1 : 0) &&
                   b.dim(0) == w.dim(pa.out_in() ? 0 : 1));
    if (!shapes || !std::isfinite(pa.alpha()) || !std::isfinite(pa.dropout()))
      return invalid("lora adapter of @" + pa.base() + ": " + a.str() +
                     " and " + b.str() + " do not fit " + w.str());
    P.Adapters.push_back(
        {pa.base(), pa.a(), pa.b(), pa.alpha(), pa.dropout(), pa.out_in()});
  }

  return llvm::Error::success();
}

/// The arena, workspaces and their sum with the state, each bounded.
llvm::Error PlanReader::readSizes(const pb::Plan &p) {
  if (p.arena_bytes() > kMaxBytes)
    return invalid("the arena of " + llvm::Twine(p.arena_bytes()) +
                   " bytes is too large");
  P.ArenaBytes = p.arena_bytes();
  if (p.workspace_bytes() > kMaxBytes)
    return invalid("the workspace of " + llvm::Twine(p.workspace_bytes()) +
                   " bytes is too large");
  P.WorkspaceBytes = p.workspace_bytes();
  if (p.host_arena_bytes() > kMaxBytes || p.host_workspace_bytes() > kMaxBytes)
    return invalid("the host pool's arena or workspace is too large");
  P.HostArenaBytes = p.host_arena_bytes();
  P.HostWorkspaceBytes = p.host_workspace_bytes();
  // The executor's one allocation: every state slot at the alignment, the
  // arena, the workspaces. Each part is bounded; their sum must be too.
  uint64_t total = P.ArenaBytes + P.WorkspaceBytes + P.LibraryBytes;
  for (const PlanState &st : P.States) {
    total += (st.Type.sizeInBytes() + P.Alignment - 1) & ~(P.Alignment - 1);
    if (total > kMaxBytes)
      break;
  }
  if (total > kMaxBytes)
    return invalid("state, arena and workspace together exceed " +
                   llvm::Twine(kMaxBytes) + " bytes");
  return llvm::Error::success();
}

/// Every buffer: its type and where it lives.
llvm::Error PlanReader::readBuffers(const pb::Plan &p) {
  for (const pb::Buffer &pbuf : p.buffers()) {
    std::string where = "buffer " + std::to_string(P.Buffers.size());
    auto type = readType(pbuf.type(), where);
    if (!type)
      return type.takeError();
    Placement place;
    switch (pbuf.place_case()) {
    case pb::Buffer::kArenaOffset:
      place.Where = Placement::Kind::Arena;
      place.Offset = pbuf.arena_offset();
      break;
    case pb::Buffer::kHostArenaOffset:
      place.Where = Placement::Kind::Arena;
      place.Host = true;
      place.Offset = pbuf.host_arena_offset();
      break;
    case pb::Buffer::kState:
      place.Where = Placement::Kind::State;
      place.Index = pbuf.state();
      break;
    case pb::Buffer::kConstant:
      place.Where = Placement::Kind::Constant;
      place.Index = pbuf.constant().function();
      place.Call = pbuf.constant().call();
      break;
    case pb::Buffer::PLACE_NOT_SET:
      return invalid(where + ": no placement");
    }
    P.Buffers.push_back(*type);
    P.Placements.push_back(place);
  }

  return llvm::Error::success();
}

/// The memory report, as the compiler wrote it.
void PlanReader::readReport(const pb::MemoryReport &pr) {
  MemoryReport &r = P.Report;
  r.Parameters = pr.parameters();
  r.Frozen = pr.frozen();
  r.Buffers = pr.buffers();
  r.OptimizerState = pr.optimizer_state();
  r.Constants = pr.constants();
  r.ArenaBytes = pr.arena_bytes();
  r.ArenaLowerBound = pr.arena_lower_bound();
  r.Activations = pr.activations();
  r.Gradients = pr.gradients();
  r.Temporaries = pr.temporaries();
  r.Workspace = pr.workspace();
  r.GradientState = pr.gradient_state();
  r.GradientsMaxLive = pr.gradients_max_live();
  r.LargestParameter = pr.largest_parameter();
  r.PassesPerStep = pr.passes_per_step();
  r.LibraryBytes = pr.library_bytes();
  r.StatePadding = pr.state_padding();
  r.Recomputed = pr.recomputed();
  r.StepFlops = pr.step_flops();
  r.RecomputeFlops = pr.recompute_flops();
  r.SavedActivations = pr.saved_activations();
  r.PeakPosition = pr.peak_position();
  r.PeakOp = pr.peak_op();
  r.PeakLoc = pr.peak_loc();
  r.LossPosition = pr.loss_position();
  r.UpdatePositions.assign(pr.update_positions().begin(),
                           pr.update_positions().end());
  r.HostState = pr.host_state();
  r.Ranks = std::max<uint64_t>(1, pr.ranks());
  r.CollectiveBytes = pr.collective_bytes();
  r.CollectiveElements = pr.collective_elements();
  r.ShardBytes = pr.shard_bytes();
  r.ShardWholeBytes = pr.shard_whole_bytes();
  r.ReplicaBytes = pr.replica_bytes();
  r.CollectiveLibraryBytes = pr.collective_library_bytes();
  r.HostStatePadding = pr.host_state_padding();
  r.HostArenaBytes = pr.host_arena_bytes();
  r.HostWorkspace = pr.host_workspace();
  r.ToHostBytes = pr.to_host_bytes();
  r.ToDeviceBytes = pr.to_device_bytes();
  if (pr.host_bandwidth() > 0 && std::isfinite(pr.host_bandwidth()))
    r.HostBandwidth = pr.host_bandwidth();
  for (const pb::PeakValue &v : pr.peak_values())
    r.PeakValues.push_back({v.name(), v.op(), v.loc(), v.bytes(),
                            Transient(std::min<uint32_t>(v.category(), 3))});
  for (const pb::TimelinePoint &t : pr.timeline())
    r.Timeline.push_back(
        {t.activations(), t.gradients(), t.temporaries(), t.recomputed()});
}

llvm::Expected<LoadedPlan> PlanReader::read(const pb::Plan &p) {
  LoadedPlan out;
  out.Source.ModelPath = p.source().path();
  out.Source.Sha256 = p.source().sha256();
  if (out.Source.ModelPath.empty())
    return invalid("no source model");
  out.Recipe.Flags = p.options().flags();
  out.Recipe.Lr = p.options().lr();
  out.Recipe.Pipeline = p.options().pipeline();
  P.TargetName = p.target();
  if (P.TargetName.empty())
    return invalid("no target");
  P.Alignment = p.alignment();
  if (P.Alignment == 0 || P.Alignment > 4096 ||
      (P.Alignment & (P.Alignment - 1)))
    return invalid("alignment " + llvm::Twine(P.Alignment) +
                   " is not a power of two up to 4096");
  if (p.library_bytes() > kMaxBytes)
    return invalid("the library workspace of " +
                   llvm::Twine(p.library_bytes()) + " bytes is too large");
  P.LibraryBytes = p.library_bytes();
  if (p.ranks() > (1u << 20))
    return invalid("it runs on " + llvm::Twine(p.ranks()) +
                   " ranks (at most 2^20)");
  P.Ranks = std::max(1u, p.ranks());
  for (const pb::DriverCall &d : p.driver())
    P.Driver.push_back({d.function(), d.repeat(), d.same_batch()});

  using Step = llvm::Error (PlanReader::*)(const pb::Plan &);
  for (Step step : {&PlanReader::readStates, &PlanReader::readAdapters,
                    &PlanReader::readSizes, &PlanReader::readBuffers})
    if (auto e = (this->*step)(p))
      return e;
  for (const pb::Function &pf : p.functions()) {
    PlanFunction f;
    if (auto e = readFunction(pf, f))
      return e;
    P.Functions.push_back(std::move(f));
  }
  if (auto e = checkPlacements())
    return e;
  if (auto e = checkPools())
    return e;
  if (auto e = checkDriver())
    return e;

  readReport(p.report());
  out.ThePlan = std::move(P);
  return out;
}

llvm::Expected<LoadedPlan> headroom::parsePlanFile(llvm::StringRef bytes,
                                                   llvm::StringRef name) {
  auto malformed = [&] {
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "%s: not a valid headroom plan (the data is malformed or truncated)",
        name.str().c_str());
  };
  pb::PlanFile file;
  if (bytes.size() > INT_MAX ||
      !file.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) ||
      file.magic() != kMagic || file.format_version() == 0)
    return malformed(); // version 0 is absent: the file ends after the magic
  if (file.format_version() != kPlanFormatVersion)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "%s: plan format version %u is not the version this headroom reads "
        "(%u); compile again",
        name.str().c_str(), file.format_version(), kPlanFormatVersion);
  auto digest = llvm::SHA256::hash(llvm::arrayRefFromStringRef(file.body()));
  pb::Plan body;
  if (file.body_sha256() != llvm::toStringRef(digest) ||
      !body.ParseFromString(file.body()))
    return malformed();
  return PlanReader(name).read(body);
}

llvm::Expected<LoadedPlan> headroom::readPlanFile(llvm::StringRef path) {
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  if (!buf)
    return llvm::createStringError(buf.getError(), "%s: cannot read: %s",
                                   path.str().c_str(),
                                   buf.getError().message().c_str());
  return parsePlanFile((*buf)->getBuffer(), path);
}

//===----------------------------------------------------------------------===//
// The source model
//===----------------------------------------------------------------------===//

/// The SHA-256 of the file at `path`, or the error that reading it gave.
static llvm::ErrorOr<std::string> hashFile(llvm::StringRef path) {
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  if (!buf)
    return buf.getError();
  return sha256Hex((*buf)->getBuffer());
}

llvm::Expected<PlanSource>
headroom::describePlanSource(llvm::StringRef modelPath) {
  PlanSource source;
  llvm::SmallString<256> absolute(modelPath);
  if (std::error_code ec = llvm::sys::fs::make_absolute(absolute))
    return llvm::createStringError(ec, "%s: %s", modelPath.str().c_str(),
                                   ec.message().c_str());
  llvm::sys::path::remove_dots(absolute, /*remove_dot_dot=*/true);
  source.ModelPath = absolute.str().str();
  auto hash = hashFile(source.ModelPath);
  if (!hash)
    return llvm::createStringError(hash.getError(), "%s: cannot read: %s",
                                   modelPath.str().c_str(),
                                   hash.getError().message().c_str());
  source.Sha256 = *hash;
  return source;
}

llvm::Error headroom::checkPlanSource(const PlanSource &source,
                                      llvm::StringRef planPath) {
  auto hash = hashFile(source.ModelPath);
  if (!hash)
    return llvm::createStringError(
        hash.getError(),
        "%s: cannot read the source model %s (%s); the plan takes its "
        "initial weights from it",
        planPath.str().c_str(), source.ModelPath.c_str(),
        hash.getError().message().c_str());
  if (*hash == source.Sha256)
    return llvm::Error::success();
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      "%s: the source model %s changed since the plan was compiled (sha256 "
      "%s... now %s...); compile again",
      planPath.str().c_str(), source.ModelPath.c_str(),
      source.Sha256.substr(0, 12).c_str(), hash->substr(0, 12).c_str());
}

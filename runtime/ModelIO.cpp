//===- ModelIO.cpp - Initial weights in, trained model out ----------------===//
#include "runtime/ModelIO.h"

#include "runtime/Communicator.h"

#include "compiler/AtomicFile.h"

#include "compiler/OnnxTensor.h"
#include "kernels/common/Nf4.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <google/protobuf/io/coded_stream.h>

#include <array>
#include <climits>
#include <cstdio>

using namespace headroom;

static llvm::Error err(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

static llvm::Expected<onnx::ModelProto> readModel(llvm::StringRef path) {
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  if (!buf)
    return err(path + ": cannot read: " + buf.getError().message());
  onnx::ModelProto model;
  google::protobuf::io::CodedInputStream in(
      reinterpret_cast<const uint8_t *>((*buf)->getBufferStart()),
      static_cast<int>(std::min<size_t>((*buf)->getBufferSize(), INT_MAX)));
  in.SetTotalBytesLimit(INT_MAX);
  if (!model.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
    return err(path + ": not a valid ONNX model (malformed or truncated)");
  return model;
}

static std::string dirOf(llvm::StringRef path) {
  llvm::StringRef dir = llvm::sys::path::parent_path(path);
  return dir.empty() ? "." : dir.str();
}

/// The names of NF4 weight `name`'s four slots: its codes, then its scales.
static std::array<std::string, 4> nf4SlotNames(llvm::StringRef name) {
  return {name.str(), (name + kNf4ScaleSuffixes[0]).str(),
          (name + kNf4ScaleSuffixes[1]).str(),
          (name + kNf4ScaleSuffixes[2]).str()};
}

/// Quantizes initializer `w` into the four slots of the NF4 weight of its
/// name.
static llvm::Error writeNf4(Executor &exec, llvm::StringRef name,
                            const Tensor &w) {
  int64_t n = w.type().numElements();
  auto names = nf4SlotNames(name);
  const TensorType want[4] = {TensorType(DType::U8, {nf4PackedBytes(n)}),
                              TensorType(DType::U8, {nf4Blocks(n)}),
                              TensorType(DType::F32, {nf4NestedBlocks(n)}),
                              TensorType(DType::F32, {1})};
  Tensor slots[4];
  for (unsigned k = 0; k < 4; ++k) {
    int index = exec.plan().stateIndex(names[k]);
    if (index < 0 || exec.plan().States[index].Type != want[k])
      return err(names[k] + ": the plan's NF4 slot " +
                 (index < 0 ? std::string("is missing")
                            : "is " + exec.plan().States[index].Type.str()) +
                 "; for the model's " + w.type().str() + " it is " +
                 want[k].str() + " (another model?)");
    slots[k] = Tensor(want[k]);
  }
  Tensor f32 = w.convertedTo(DType::F32);
  quantizeNf4(reinterpret_cast<const float *>(f32.bytes().data()), n,
              {slots[0].data(), slots[1].data(),
               reinterpret_cast<float *>(slots[2].data()),
               reinterpret_cast<float *>(slots[3].data())});
  for (unsigned k = 0; k < 4; ++k)
    if (auto e = exec.writeState(names[k], slots[k]))
      return e;
  return llvm::Error::success();
}

Tensor headroom::shardOf(const Tensor &whole, unsigned rank, unsigned ranks) {
  int64_t n = whole.numElements(), s = shardElements(n, ranks);
  Tensor out(TensorType(whole.type().dtype(), {s}));
  uint64_t size = dtypeSize(whole.type().dtype());
  int64_t first = std::min<int64_t>(n, int64_t(rank) * s);
  int64_t count = std::min<int64_t>(s, n - first);
  std::copy_n(whole.bytes().begin() + first * size, count * size, out.data());
  return out;
}

llvm::Expected<Tensor> headroom::readWholeState(const Executor &exec,
                                                Communicator *comm,
                                                llvm::StringRef name) {
  auto local = exec.readState(name);
  if (!local)
    return local.takeError();
  const PlanState &s = exec.plan().States[exec.plan().stateIndex(name)];
  if (!s.ShardOf)
    return local;
  if (!comm)
    return err("state @" + name +
               " is a shard: reading it whole needs the "
               "run's ranks");
  Tensor whole(*s.ShardOf);
  if (auto e =
          comm->allGather(local->bytes().data(), whole.data(),
                          shardCounts(s.ShardOf->numElements(), comm->size()),
                          dtypeSize(s.ShardOf->dtype())))
    return e;
  return whole;
}

llvm::Expected<Tensor> headroom::readWeight(const Executor &exec,
                                            llvm::StringRef name,
                                            llvm::ArrayRef<int64_t> shape,
                                            Communicator *comm) {
  int index = exec.plan().stateIndex(name);
  if (index < 0 || exec.plan().States[index].Init != StateInit::Nf4)
    return readWholeState(exec, comm, name);
  auto names = nf4SlotNames(name);
  Tensor slots[4];
  for (unsigned k = 0; k < 4; ++k) {
    auto t = readWholeState(exec, comm, names[k]);
    if (!t)
      return t.takeError();
    slots[k] = std::move(*t);
  }
  TensorType type(DType::F32, shape);
  std::vector<TensorType> types;
  for (const Tensor &t : slots)
    types.push_back(t.type());
  std::string why = nf4OperandError(types, type);
  if (!why.empty())
    return err(name + ": " + why);
  Tensor out(type);
  auto *w = reinterpret_cast<float *>(out.data());
  auto *nested = reinterpret_cast<const float *>(slots[2].bytes().data());
  float offset = *reinterpret_cast<const float *>(slots[3].bytes().data());
  for (int64_t i = 0; i < type.numElements(); ++i)
    w[i] = dequantizeNf4(kNf4Map, kSignedDynamicMap, slots[0].bytes().data(),
                         slots[1].bytes().data(), nested, offset, i);
  return out;
}

llvm::Expected<unsigned> headroom::loadInitialState(Executor &exec,
                                                    llvm::StringRef modelPath,
                                                    unsigned rank) {
  const Plan &plan = exec.plan();
  auto model = readModel(modelPath);
  if (!model)
    return model.takeError();
  unsigned loaded = 0;
  for (const auto &init : model->graph().initializer()) {
    int slot = exec.plan().stateIndex(init.name());
    if (slot < 0)
      continue;
    auto t = tensorFromProto(init, dirOf(modelPath));
    if (!t)
      return err(modelPath + ": " + llvm::toString(t.takeError()));
    // A weight the plan stores in another float type (mixed precision
    // without master weights) is converted, rounding to nearest even.
    if (exec.plan().States[slot].Init == StateInit::Nf4) {
      if (auto e = writeNf4(exec, init.name(), *t))
        return err(modelPath + ": " + llvm::toString(std::move(e)));
      loaded += 4;
      continue;
    }
    // Replicas of a sharded weight (data parallelism) start whole.
    for (size_t r = 0; r < plan.States.size(); ++r) {
      if (plan.States[r].ReplicaOf != slot)
        continue;
      Tensor whole = *t;
      DType type = plan.States[r].Type.dtype();
      if (isFloat(type) && isFloat(whole.type().dtype()))
        whole = whole.convertedTo(type);
      if (auto e = exec.writeState(plan.States[r].Name, whole))
        return e;
      ++loaded;
    }
    DType stored = exec.plan().States[slot].Type.dtype();
    if (isFloat(stored) && isFloat(t->type().dtype()))
      *t = t->convertedTo(stored);
    if (plan.States[slot].ShardOf) {
      if (t->type().shape() != plan.States[slot].ShardOf->shape())
        return err(modelPath + ": initializer '" + init.name() + "' is " +
                   t->type().str() + ", the plan's weight " +
                   plan.States[slot].ShardOf->str());
      *t = shardOf(*t, rank, plan.Ranks);
    }
    if (auto e = exec.writeState(init.name(), *t))
      return e;
    ++loaded;
  }
  return loaded;
}

llvm::Error headroom::saveTrainedModel(
    const Executor &exec, llvm::StringRef modelPath, llvm::StringRef outPath,
    const std::map<std::string, Tensor> *overrides, Communicator *comm) {
  bool writes = !comm || comm->rank() == 0;
  auto model = readModel(modelPath);
  if (!model)
    return model.takeError();
  std::string srcDir = dirOf(modelPath);
  uint64_t total = 0;
  for (auto &init : *model->mutable_graph()->mutable_initializer()) {
    auto found = overrides ? overrides->find(init.name())
                           : std::map<std::string, Tensor>::const_iterator();
    auto value = overrides && found != overrides->end()
                     ? llvm::Expected<Tensor>(found->second)
                     : readWeight(exec, init.name(),
                                  std::vector<int64_t>(init.dims().begin(),
                                                       init.dims().end()),
                                  comm);
    if (!value) {
      llvm::consumeError(value.takeError());
      if (writes && isExternal(init)) {
        // Not trained, but stored beside the source model: inline it so the
        // saved model stands on its own.
        auto t = tensorFromProto(init, srcDir);
        if (!t)
          return t.takeError();
        init = tensorToProto(*t, init.name());
      }
      total += init.ByteSizeLong();
      continue;
    }
    // Saved in the model's own type (a bf16-stored weight widens back).
    auto type = tensorProtoType(init);
    if (type && isFloat(type->dtype()) && isFloat(value->type().dtype()))
      *value = value->convertedTo(type->dtype());
    else if (!type)
      llvm::consumeError(type.takeError());
    init = tensorToProto(*value, init.name());
    total += value->bytes().size();
  }
  if (!writes)
    return llvm::Error::success();
  if (total >= (uint64_t(2) << 30))
    return err(outPath + ": the trained model's " + llvm::Twine(total) +
               " bytes of weights exceed ONNX's 2 GiB limit for one file; "
               "saving with external data is not supported yet");
  std::string bytes;
  if (!model->SerializeToString(&bytes))
    return err(outPath + ": cannot serialize the model");
  return writeFileAtomically(outPath, bytes);
}

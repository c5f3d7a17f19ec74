//===- ModelIO.cpp - Initial weights in, trained model out ----------------===//
#include "runtime/ModelIO.h"

#include "compiler/AtomicFile.h"

#include "compiler/OnnxTensor.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <google/protobuf/io/coded_stream.h>

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

llvm::Expected<unsigned> headroom::loadInitialState(Executor &exec,
                                                    llvm::StringRef modelPath) {
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
    DType stored = exec.plan().States[slot].Type.dtype();
    if (isFloat(stored) && isFloat(t->type().dtype()))
      *t = t->convertedTo(stored);
    if (auto e = exec.writeState(init.name(), *t))
      return e;
    ++loaded;
  }
  return loaded;
}

llvm::Error
headroom::saveTrainedModel(const Executor &exec, llvm::StringRef modelPath,
                           llvm::StringRef outPath,
                           const std::map<std::string, Tensor> *overrides) {
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
                     : exec.readState(init.name());
    if (!value) {
      llvm::consumeError(value.takeError());
      if (isExternal(init)) {
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
  if (total >= (uint64_t(2) << 30))
    return err(outPath + ": the trained model's " + llvm::Twine(total) +
               " bytes of weights exceed ONNX's 2 GiB limit for one file; "
               "saving with external data is not supported yet");
  std::string bytes;
  if (!model->SerializeToString(&bytes))
    return err(outPath + ": cannot serialize the model");
  return writeFileAtomically(outPath, bytes);
}

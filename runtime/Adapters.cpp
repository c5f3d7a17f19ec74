//===- Adapters.cpp - LoRA adapters in and out, as PEFT has them ----------===//
#include "runtime/Adapters.h"

#include "compiler/AtomicFile.h"
#include "runtime/ModelIO.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <set>

using namespace headroom;

namespace {

const char *const kPrefix = "base_model.model.";

llvm::Error err(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

llvm::Optional<std::string> safetensorsDType(DType t) {
  switch (t) {
  case DType::F32:
    return std::string("F32");
  case DType::F64:
    return std::string("F64");
  case DType::F16:
    return std::string("F16");
  case DType::BF16:
    return std::string("BF16");
  default:
    return llvm::None;
  }
}

llvm::Optional<DType> dtypeOfSafetensors(llvm::StringRef s) {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16})
    if (safetensorsDType(t) == s.str())
      return t;
  return llvm::None;
}

/// The module of an adapter: its A's name less `.lora_A.weight`.
std::string moduleOf(const PlanAdapter &a) {
  llvm::StringRef name = a.A;
  name.consume_back(".lora_A.weight");
  return name.str();
}

} // namespace

std::string
headroom::writeSafetensors(const std::map<std::string, Tensor> &tensors) {
  llvm::json::Object header;
  header["__metadata__"] = llvm::json::Object{{"format", "pt"}};
  uint64_t offset = 0;
  for (const auto &[name, t] : tensors) {
    llvm::json::Array shape;
    for (int64_t d : t.type().shape())
      shape.push_back(d);
    uint64_t end = offset + t.bytes().size();
    header[name] = llvm::json::Object{
        {"dtype", *safetensorsDType(t.type().dtype())},
        {"shape", std::move(shape)},
        {"data_offsets", llvm::json::Array{int64_t(offset), int64_t(end)}}};
    offset = end;
  }
  std::string json;
  llvm::raw_string_ostream os(json);
  os << llvm::json::Value(std::move(header));
  os.flush();
  json.append((8 - json.size() % 8) % 8, ' '); // the data 8-byte aligned
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = char((uint64_t(json.size()) >> (8 * i)) & 0xff);
  out += json;
  for (const auto &entry : tensors)
    out.append(reinterpret_cast<const char *>(entry.second.bytes().data()),
               entry.second.bytes().size());
  return out;
}

llvm::Expected<std::map<std::string, Tensor>>
headroom::readSafetensors(llvm::StringRef bytes, llvm::StringRef what) {
  auto bad = [&](const llvm::Twine &why) {
    return err(what + ": not a safetensors file: " + why);
  };
  if (bytes.size() < 8)
    return bad("shorter than its header size");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= uint64_t(uint8_t(bytes[i])) << (8 * i);
  if (n > bytes.size() - 8)
    return bad("a header of " + llvm::Twine(n) + " bytes in a file of " +
               llvm::Twine(bytes.size()));
  auto json = llvm::json::parse(bytes.substr(8, n));
  if (!json)
    return bad(llvm::toString(json.takeError()));
  const llvm::json::Object *header = json->getAsObject();
  if (!header)
    return bad("the header is not a JSON object");
  llvm::StringRef data = bytes.substr(8 + n);
  std::map<std::string, Tensor> out;
  for (const auto &[key, value] : *header) {
    if (key == "__metadata__")
      continue;
    const llvm::json::Object *entry = value.getAsObject();
    const llvm::json::Array *shape = entry ? entry->getArray("shape") : nullptr;
    const llvm::json::Array *offsets =
        entry ? entry->getArray("data_offsets") : nullptr;
    auto dtypeName = entry ? entry->getString("dtype") : llvm::None;
    auto dtype = dtypeName ? dtypeOfSafetensors(*dtypeName) : llvm::None;
    if (!shape || !offsets || offsets->size() != 2 || !dtype)
      return bad("tensor '" + key.str() +
                 "' needs a float dtype (F32, F64, F16, BF16), a shape and "
                 "two data offsets");
    std::vector<int64_t> dims;
    for (const llvm::json::Value &d : *shape) {
      auto v = d.getAsInteger();
      if (!v || *v < 0 || *v > (int64_t(1) << 40))
        return bad("tensor '" + key.str() + "' has a bad dimension");
      dims.push_back(*v);
    }
    auto begin = (*offsets)[0].getAsInteger(),
         end = (*offsets)[1].getAsInteger();
    TensorType type(*dtype, dims);
    auto size = type.checkedSizeInBytes();
    if (!begin || !end || *begin < 0 || *end < *begin ||
        uint64_t(*end) > data.size() || !size ||
        uint64_t(*end - *begin) != *size)
      return bad("tensor '" + key.str() + "' does not fit its data offsets");
    const uint8_t *p = reinterpret_cast<const uint8_t *>(data.data()) + *begin;
    out.emplace(key.str(), Tensor(type, std::vector<uint8_t>(p, p + *size)));
  }
  return out;
}

llvm::Error headroom::saveAdapter(const Executor &exec, llvm::StringRef dir) {
  const Plan &plan = exec.plan();
  if (plan.Adapters.empty())
    return err("--save-adapter: the plan has no LoRA adapters (train with "
               "--lora)");
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    return err("--save-adapter " + dir + ": " + ec.message());
  std::map<std::string, Tensor> tensors;
  std::set<std::string> targets;
  bool inOut = false;
  for (const PlanAdapter &a : plan.Adapters) {
    for (const std::string *name : {&a.A, &a.B}) {
      auto t = exec.readState(*name);
      if (!t)
        return t.takeError();
      tensors.emplace(kPrefix + *name, std::move(*t));
    }
    std::string module = moduleOf(a);
    llvm::StringRef last = llvm::StringRef(module).rsplit('.').second;
    targets.insert(last.empty() ? module : last.str());
    inOut |= !a.OutIn;
  }
  const PlanAdapter &first = plan.Adapters.front();
  int64_t rank = plan.States[plan.stateIndex(first.A)].Type.dim(0);
  llvm::json::Array targetList;
  for (const std::string &t : targets)
    targetList.push_back(t);
  llvm::json::Object config{{"peft_type", "LORA"},
                            {"task_type", nullptr},
                            {"base_model_name_or_path", nullptr},
                            {"r", rank},
                            {"lora_alpha", first.Alpha},
                            {"lora_dropout", first.Dropout},
                            {"target_modules", std::move(targetList)},
                            {"bias", "none"},
                            {"fan_in_fan_out", inOut},
                            {"inference_mode", true},
                            {"init_lora_weights", true},
                            {"use_rslora", false},
                            {"use_dora", false},
                            {"modules_to_save", nullptr},
                            {"revision", nullptr}};
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(config))) << "\n";
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, "adapter_config.json");
  if (auto e = writeFileAtomically(path, os.str()))
    return e;
  path = dir;
  llvm::sys::path::append(path, "adapter_model.safetensors");
  return writeFileAtomically(path, writeSafetensors(tensors));
}

llvm::Error headroom::loadAdapter(Executor &exec, llvm::StringRef dir) {
  const Plan &plan = exec.plan();
  if (plan.Adapters.empty())
    return err("--lora-init: the plan has no LoRA adapters (train with "
               "--lora)");
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, "adapter_model.safetensors");
  auto buf = llvm::MemoryBuffer::getFile(path);
  if (!buf)
    return err("--lora-init " + path + ": " + buf.getError().message());
  auto tensors = readSafetensors((*buf)->getBuffer(), path);
  if (!tensors)
    return tensors.takeError();
  for (const PlanAdapter &a : plan.Adapters)
    for (const std::string *name : {&a.A, &a.B}) {
      auto it = tensors->find(kPrefix + *name);
      if (it == tensors->end())
        it = tensors->find(*name);
      if (it == tensors->end())
        return err("--lora-init " + path + ": no tensor " + kPrefix + *name);
      const TensorType &want = plan.States[plan.stateIndex(*name)].Type;
      if (it->second.type().shape() != want.shape())
        return err("--lora-init " + path + ": " + it->first + " is " +
                   it->second.type().str() + ", the adapter is " + want.str() +
                   " (another rank or model?)");
      if (auto e = exec.writeState(*name, it->second.convertedTo(want.dtype())))
        return e;
    }
  return llvm::Error::success();
}

llvm::Expected<std::map<std::string, Tensor>>
headroom::mergedWeights(const Executor &exec) {
  std::map<std::string, Tensor> out;
  for (const PlanAdapter &a : exec.plan().Adapters) {
    auto A = exec.readState(a.A), B = exec.readState(a.B);
    int64_t in = A ? A->type().dim(1) : 0, o = B ? B->type().dim(0) : 0;
    auto w = readWeight(exec, a.Base,
                        a.OutIn ? std::vector<int64_t>{o, in}
                                : std::vector<int64_t>{in, o});
    if (!w || !A || !B) {
      llvm::Error e = llvm::Error::success();
      for (auto *x : {&w, &A, &B})
        if (!*x)
          e = llvm::joinErrors(std::move(e), x->takeError());
      return e;
    }
    int64_t r = A->type().dim(0);
    double scale = a.Alpha / double(r);
    // W [out, in] += scale B A, or W [in, out] += scale (B A)^T; in f64.
    Tensor merged = w->convertedTo(DType::F64),
           a64 = A->convertedTo(DType::F64), b64 = B->convertedTo(DType::F64);
    auto *m = reinterpret_cast<double *>(merged.data());
    auto *pa = reinterpret_cast<const double *>(a64.bytes().data());
    auto *pb = reinterpret_cast<const double *>(b64.bytes().data());
    for (int64_t i = 0; i < o; ++i)
      for (int64_t j = 0; j < in; ++j) {
        double s = 0;
        for (int64_t k = 0; k < r; ++k)
          s += pb[i * r + k] * pa[k * in + j];
        m[a.OutIn ? i * in + j : j * o + i] += scale * s;
      }
    out.emplace(a.Base, merged.convertedTo(w->type().dtype()));
  }
  return out;
}

//===- OnnxTensor.cpp - ONNX TensorProto <-> Tensor -----------------------===//
#include "compiler/OnnxTensor.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Path.h"

#include <cstring>
#include <fstream>

using namespace headroom;
using llvm::Expected;

static llvm::Error err(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

bool headroom::isExternal(const onnx::TensorProto &t) {
  return t.data_location() == onnx::TensorProto::EXTERNAL;
}

Expected<TensorType> headroom::tensorProtoType(const onnx::TensorProto &t) {
  auto dt = dtypeFromOnnx(t.data_type());
  if (!dt)
    return err("tensor '" + t.name() + "' has unsupported element type " +
               onnx::TensorProto::DataType_Name(
                   static_cast<onnx::TensorProto::DataType>(t.data_type())));
  llvm::SmallVector<int64_t, 4> dims;
  for (int64_t d : t.dims()) {
    if (d < 0)
      return err("tensor '" + t.name() + "' has negative dimension " +
                 llvm::Twine(d));
    dims.push_back(d);
  }
  return TensorType(*dt, dims);
}

/// Reads an external-data tensor's bytes (small tensors only: shape constants
/// and the like; float weights are never read).
static Expected<std::vector<uint8_t>> readExternal(const onnx::TensorProto &t,
                                                   llvm::StringRef modelDir,
                                                   uint64_t size) {
  std::string location;
  uint64_t offset = 0;
  for (const auto &kv : t.external_data()) {
    if (kv.key() == "location")
      location = kv.value();
    else if (kv.key() == "offset")
      offset = std::strtoull(kv.value().c_str(), nullptr, 10);
  }
  llvm::SmallString<256> path(modelDir);
  llvm::sys::path::append(path, location);
  std::ifstream in(path.c_str(), std::ios::binary);
  std::vector<uint8_t> bytes(size);
  if (!in || !in.seekg(offset) ||
      !in.read(reinterpret_cast<char *>(bytes.data()), size))
    return err("cannot read " + llvm::Twine(size) + " bytes at offset " +
               llvm::Twine(offset) + " of external data file '" + path +
               "' for tensor '" + t.name() + "'");
  return bytes;
}

Expected<Tensor> headroom::tensorFromProto(const onnx::TensorProto &t,
                                           llvm::StringRef modelDir) {
  auto type = tensorProtoType(t);
  if (!type)
    return type.takeError();
  uint64_t size = type->sizeInBytes();
  if (isExternal(t)) {
    auto bytes = readExternal(t, modelDir, size);
    if (!bytes)
      return bytes.takeError();
    return Tensor(*type, std::move(*bytes));
  }
  if (t.has_raw_data()) {
    if (t.raw_data().size() != size)
      return err("tensor '" + t.name() + "' has " +
                 llvm::Twine(t.raw_data().size()) +
                 " bytes of data; its type " + type->str() + " needs " +
                 llvm::Twine(size));
    const auto *p = reinterpret_cast<const uint8_t *>(t.raw_data().data());
    return Tensor(*type, std::vector<uint8_t>(p, p + size));
  }
  int64_t n = type->numElements();
  Tensor out(*type);
  auto countError = [&](int have) {
    return err("tensor '" + t.name() + "' has " + llvm::Twine(have) +
               " elements; its type " + type->str() + " needs " +
               llvm::Twine(n));
  };
  switch (type->dtype()) {
  case DType::F32:
    if (t.float_data_size() != n)
      return countError(t.float_data_size());
    for (int64_t i = 0; i < n; ++i)
      out.setDouble(i, t.float_data(i));
    break;
  case DType::F64:
    if (t.double_data_size() != n)
      return countError(t.double_data_size());
    for (int64_t i = 0; i < n; ++i)
      out.setDouble(i, t.double_data(i));
    break;
  case DType::I64:
    if (t.int64_data_size() != n)
      return countError(t.int64_data_size());
    for (int64_t i = 0; i < n; ++i)
      out.setInt(i, t.int64_data(i));
    break;
  case DType::U32:
  case DType::U64:
    if (t.uint64_data_size() != n)
      return countError(t.uint64_data_size());
    for (int64_t i = 0; i < n; ++i)
      out.setInt(i, static_cast<int64_t>(t.uint64_data(i)));
    break;
  case DType::F16:
  case DType::BF16: {
    // 16-bit floats are stored as their bit patterns in int32_data.
    if (t.int32_data_size() != n)
      return countError(t.int32_data_size());
    for (int64_t i = 0; i < n; ++i) {
      uint16_t bits = static_cast<uint16_t>(t.int32_data(i));
      std::memcpy(out.data() + 2 * i, &bits, 2);
    }
    break;
  }
  default: // i8, i16, i32, u8, u16, bool
    if (t.int32_data_size() != n)
      return countError(t.int32_data_size());
    for (int64_t i = 0; i < n; ++i)
      out.setInt(i, t.int32_data(i));
    break;
  }
  return out;
}

onnx::TensorProto headroom::tensorToProto(const Tensor &t,
                                          const std::string &name) {
  onnx::TensorProto p;
  p.set_name(name);
  p.set_data_type(dtypeToOnnx(t.type().dtype()));
  for (int64_t d : t.type().shape())
    p.add_dims(d);
  p.set_raw_data(t.bytes().data(), t.bytes().size());
  return p;
}

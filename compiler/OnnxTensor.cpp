//===- OnnxTensor.cpp - ONNX TensorProto <-> Tensor -----------------------===//
#include "compiler/OnnxTensor.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
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
  TensorType type(*dt, dims);
  if (!type.checkedSizeInBytes())
    return err("tensor '" + t.name() + "' has dimensions " +
               shapeString(type.shape()) + " whose size overflows");
  return type;
}

/// The file an external-data tensor's `location` names, which must lie inside
/// the model's folder: an absolute location, a `..` component or a symbolic
/// link that leads out of the folder is refused (a crafted model could
/// otherwise read any file into its weights and `--save` would write it out;
/// ONNX closed the same hole in 1.16, CVE-2024-27318).
static Expected<std::string> externalDataPath(const onnx::TensorProto &t,
                                              llvm::StringRef location,
                                              llvm::StringRef modelDir) {
  auto refuse = [&](const llvm::Twine &why) {
    return err("tensor '" + t.name() + "': external data location '" +
               location + "' " + why +
               " (external data must be a file inside the model's folder)");
  };
  if (location.empty())
    return refuse("is empty");
  if (location.find('\0') != llvm::StringRef::npos)
    return refuse("contains a NUL byte");
  if (llvm::sys::path::is_absolute(location) ||
      llvm::sys::path::is_absolute(location, llvm::sys::path::Style::windows))
    return refuse("is an absolute path");
  for (auto it = llvm::sys::path::begin(location),
            end = llvm::sys::path::end(location);
       it != end; ++it)
    if (*it == "..")
      return refuse("leaves the model's folder through '..'");
  // A model read from memory has no folder (the fuzz target): nothing
  // outside it may be named.
  if (modelDir.empty())
    return refuse("cannot be resolved: the model was not read from a file");
  llvm::SmallString<256> path(modelDir);
  llvm::sys::path::append(path, location);
  // Symbolic links: the real file must still be inside the real folder.
  llvm::SmallString<256> realDir, realFile;
  if (llvm::sys::fs::real_path(modelDir, realDir) ||
      llvm::sys::fs::real_path(path, realFile))
    return err("cannot open external data file '" + path + "' for tensor '" +
               t.name() + "'");
  llvm::StringRef inside(realFile);
  bool rootDir =
      !realDir.empty() && llvm::sys::path::is_separator(realDir.back()); // "/"
  if (!inside.consume_front(realDir) ||
      !(rootDir || inside.empty() ||
        llvm::sys::path::is_separator(inside.front())))
    return refuse("is a link to '" + realFile + "', outside the folder");
  if (!llvm::sys::fs::is_regular_file(realFile))
    return refuse("is not a regular file");
  // The resolved file is what is read: a link swapped in after this check
  // is not followed again.
  return std::string(realFile);
}

Expected<ExternalSpan> headroom::externalDataSpan(const onnx::TensorProto &t,
                                                  llvm::StringRef modelDir) {
  auto type = tensorProtoType(t);
  if (!type)
    return type.takeError();
  uint64_t size = type->sizeInBytes();
  std::string location;
  uint64_t offset = 0;
  llvm::Optional<uint64_t> length;
  for (const auto &kv : t.external_data()) {
    uint64_t n = 0;
    bool bad = false;
    if (kv.key() == "location") {
      location = kv.value();
    } else if (kv.key() == "offset") {
      bad = llvm::StringRef(kv.value()).getAsInteger(10, offset);
    } else if (kv.key() == "length") {
      bad = llvm::StringRef(kv.value()).getAsInteger(10, n);
      length = n;
    }
    if (bad)
      return err("tensor '" + t.name() + "': external data " + kv.key() + " '" +
                 kv.value() + "' is not a byte count");
  }
  if (length && *length != size)
    return err("tensor '" + t.name() + "': external data length " +
               llvm::Twine(*length) + " does not match its type " +
               type->str() + ", which needs " + llvm::Twine(size) + " bytes");
  auto path = externalDataPath(t, location, modelDir);
  if (!path)
    return path.takeError();
  uint64_t fileSize = 0;
  if (llvm::sys::fs::file_size(*path, fileSize) || offset > fileSize ||
      size > fileSize - offset)
    return err("tensor '" + t.name() + "' needs " + llvm::Twine(size) +
               " bytes at offset " + llvm::Twine(offset) +
               " of external data file '" + *path + "', which has " +
               llvm::Twine(fileSize) + " (truncated or the wrong file?)");
  return ExternalSpan{*path, offset, size};
}

/// Reads an external-data tensor's bytes (small tensors only: shape constants
/// and the like; float weights are read when a run loads its initial state).
static Expected<std::vector<uint8_t>> readExternal(const onnx::TensorProto &t,
                                                   llvm::StringRef modelDir) {
  auto span = externalDataSpan(t, modelDir);
  if (!span)
    return span.takeError();
  std::ifstream in(span->Path.c_str(), std::ios::binary);
  std::vector<uint8_t> bytes(span->Size);
  if (!in || !in.seekg(span->Offset) ||
      !in.read(reinterpret_cast<char *>(bytes.data()), span->Size))
    return err("cannot read " + llvm::Twine(span->Size) + " bytes at offset " +
               llvm::Twine(span->Offset) + " of external data file '" +
               span->Path + "' for tensor '" + t.name() + "'");
  return bytes;
}

Expected<Tensor> headroom::tensorFromProto(const onnx::TensorProto &t,
                                           llvm::StringRef modelDir) {
  auto type = tensorProtoType(t);
  if (!type)
    return type.takeError();
  uint64_t size = type->sizeInBytes();
  if (isExternal(t)) {
    auto bytes = readExternal(t, modelDir);
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

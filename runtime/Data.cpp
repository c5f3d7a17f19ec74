//===- Data.cpp - Training data: .npz archives and folders of .npy --------===//
#include "runtime/Data.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <zip.h>

#include <cstring>

using namespace headroom;

static llvm::Error err(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// numpy's `descr` for each element type (little-endian).
static llvm::Optional<DType> dtypeFromDescr(llvm::StringRef d) {
  if (d.size() < 3 || (d[0] != '<' && d[0] != '|' && d[0] != '='))
    return llvm::None;
  llvm::StringRef code = d.drop_front();
  static const std::pair<const char *, DType> table[] = {
      {"f2", DType::F16}, {"f4", DType::F32}, {"f8", DType::F64},
      {"i1", DType::I8},  {"i2", DType::I16}, {"i4", DType::I32},
      {"i8", DType::I64}, {"u1", DType::U8},  {"u2", DType::U16},
      {"u4", DType::U32}, {"u8", DType::U64}, {"b1", DType::Bool}};
  for (const auto &[c, t] : table)
    if (code == c)
      return t;
  return llvm::None;
}

static const char *descrOf(DType t) {
  switch (t) {
  case DType::F16:
    return "<f2";
  case DType::F32:
    return "<f4";
  case DType::F64:
    return "<f8";
  case DType::I8:
    return "|i1";
  case DType::I16:
    return "<i2";
  case DType::I32:
    return "<i4";
  case DType::I64:
    return "<i8";
  case DType::U8:
    return "|u1";
  case DType::U16:
    return "<u2";
  case DType::U32:
    return "<u4";
  case DType::U64:
    return "<u8";
  case DType::Bool:
    return "|b1";
  case DType::BF16:
    return "<V2"; // numpy has no bfloat16
  }
  return "";
}

/// The value of `'key': value` in a numpy header dict.
static llvm::StringRef headerField(llvm::StringRef header,
                                   llvm::StringRef key) {
  size_t at = header.find(("'" + key + "'").str());
  if (at == llvm::StringRef::npos)
    return "";
  llvm::StringRef rest = header.drop_front(at + key.size() + 2).ltrim();
  if (!rest.consume_front(":"))
    return "";
  rest = rest.ltrim();
  if (rest.startswith("(")) // a tuple
    return rest.take_until([](char c) { return c == ')'; }).drop_front();
  if (rest.startswith("'"))
    return rest.drop_front().take_until([](char c) { return c == '\''; });
  return rest.take_until([](char c) { return c == ',' || c == '}'; }).trim();
}

llvm::Expected<Tensor> headroom::readNpy(llvm::StringRef bytes,
                                         llvm::StringRef name) {
  auto bad = [&](const llvm::Twine &why) {
    return err(name + ": not a valid .npy array (" + why + ")");
  };
  if (bytes.size() < 10 || !bytes.startswith("\x93NUMPY"))
    return bad("no NUMPY magic");
  uint8_t major = bytes[6];
  size_t headerLen, offset;
  if (major == 1) {
    headerLen = uint8_t(bytes[8]) | (uint8_t(bytes[9]) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12)
      return bad("truncated header");
    headerLen = uint32_t(uint8_t(bytes[8])) | uint32_t(uint8_t(bytes[9])) << 8 |
                uint32_t(uint8_t(bytes[10])) << 16 |
                uint32_t(uint8_t(bytes[11])) << 24;
    offset = 12;
  } else {
    return bad("unknown format version " + llvm::Twine(major));
  }
  if (offset + headerLen > bytes.size())
    return bad("truncated header");
  llvm::StringRef header = bytes.substr(offset, headerLen);
  llvm::StringRef descr = headerField(header, "descr");
  auto dt = dtypeFromDescr(descr);
  if (!dt)
    return bad("element type '" + descr + "' is not supported");
  if (headerField(header, "fortran_order") != "False")
    return bad(
        "Fortran order is not supported; save with np.ascontiguousarray");
  llvm::SmallVector<int64_t, 4> shape;
  llvm::SmallVector<llvm::StringRef, 4> dims;
  headerField(header, "shape").split(dims, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef d : dims) {
    int64_t v;
    if (d.trim().getAsInteger(10, v) || v < 0)
      return bad("bad shape");
    shape.push_back(v);
  }
  uint64_t elems = 1;
  for (int64_t d : shape) {
    if (d && elems > (uint64_t(1) << 56) / uint64_t(d))
      return bad("shape too large");
    elems *= uint64_t(d);
  }
  TensorType type(*dt, shape);
  llvm::StringRef data = bytes.drop_front(offset + headerLen);
  if (data.size() != type.sizeInBytes())
    return bad("has " + llvm::Twine(data.size()) +
               " bytes of data, its shape " + type.str() + " needs " +
               llvm::Twine(type.sizeInBytes()));
  return Tensor(type,
                std::vector<uint8_t>(data.bytes_begin(), data.bytes_end()));
}

std::string headroom::writeNpy(const Tensor &t) {
  std::string shape;
  for (int64_t d : t.type().shape())
    shape += std::to_string(d) + ", ";
  if (t.type().rank() > 1)
    shape.erase(shape.size() - 2, 1); // "(2, 3)" but "(2,)"
  std::string header = "{'descr': '" + std::string(descrOf(t.type().dtype())) +
                       "', 'fortran_order': False, 'shape': (" +
                       llvm::StringRef(shape).rtrim().str() + "), }";
  // Pad so that the data starts 64-byte aligned; the header ends with '\n'.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY\x01";
  out += '\0';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(reinterpret_cast<const char *>(t.bytes().data()),
             t.bytes().size());
  return out;
}

static llvm::Error addArray(Dataset &d, llvm::StringRef name, Tensor t) {
  if (t.type().rank() == 0)
    return err(d.Source + ": array '" + name +
               "' is a scalar; arrays need a leading sample dimension");
  int64_t n = t.type().dim(0);
  if (!d.Arrays.empty() && n != d.Samples)
    return err(d.Source + ": array '" + name + "' has " + llvm::Twine(n) +
               " samples, the others have " + llvm::Twine(d.Samples));
  d.Samples = n;
  d.Arrays.emplace(name.str(), std::move(t));
  return llvm::Error::success();
}

llvm::Expected<std::map<std::string, Tensor>>
headroom::readNpzBuffer(llvm::StringRef bytes, llvm::StringRef name) {
  std::map<std::string, Tensor> arrays;
  zip_error_t ze;
  zip_error_init(&ze);
  auto fail = [&]() {
    std::string msg = zip_error_strerror(&ze);
    zip_error_fini(&ze);
    return err(name + ": not a readable .npz archive (" + msg + ")");
  };
  zip_source_t *src =
      zip_source_buffer_create(bytes.data(), bytes.size(), /*freep=*/0, &ze);
  if (!src)
    return fail();
  zip_t *z = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &ze);
  if (!z) {
    zip_source_free(src);
    return fail();
  }
  zip_error_fini(&ze);
  auto closer = llvm::make_scope_exit([&] { zip_discard(z); });
  zip_int64_t entries = zip_get_num_entries(z, 0);
  for (zip_int64_t i = 0; i < entries; ++i) {
    zip_stat_t st;
    if (zip_stat_index(z, i, 0, &st) != 0 || !(st.valid & ZIP_STAT_NAME) ||
        !(st.valid & ZIP_STAT_SIZE))
      return err(name + ": cannot read the archive's entry " + llvm::Twine(i));
    llvm::StringRef entry(st.name);
    if (!entry.endswith(".npy"))
      continue;
    zip_file_t *f = zip_fopen_index(z, i, 0);
    if (!f)
      return err(name + ": cannot open '" + entry + "': " + zip_strerror(z));
    // Read what the entry really holds, not what its header claims: a
    // corrupt size must not become an allocation.
    std::string data;
    char chunk[1 << 16];
    zip_int64_t got;
    while ((got = zip_fread(f, chunk, sizeof(chunk))) > 0 &&
           data.size() <= st.size)
      data.append(chunk, size_t(got));
    zip_fclose(f);
    if (got < 0 || data.size() != st.size)
      return err(name + ": '" + entry + "' is truncated or corrupt");
    auto t = readNpy(data, (name + ":" + entry).str());
    if (!t)
      return t.takeError();
    arrays.emplace(entry.drop_back(4).str(), std::move(*t));
  }
  if (arrays.empty())
    return err(name + ": the archive holds no .npy arrays");
  return arrays;
}

static llvm::Expected<std::map<std::string, Tensor>>
readNpz(llvm::StringRef path) {
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  if (!buf)
    return err(path + ": cannot read: " + buf.getError().message());
  return readNpzBuffer((*buf)->getBuffer(), path);
}

static llvm::Expected<std::map<std::string, Tensor>>
readNpyFolder(llvm::StringRef path) {
  std::map<std::string, Tensor> arrays;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(path, ec), end; it != end && !ec;
       it.increment(ec)) {
    if (!llvm::StringRef(it->path()).endswith(".npy"))
      continue;
    auto buf = llvm::MemoryBuffer::getFile(it->path(), /*IsText=*/false,
                                           /*RequiresNullTerminator=*/false);
    if (!buf)
      return err(it->path() + ": cannot read: " + buf.getError().message());
    auto t = readNpy((*buf)->getBuffer(), it->path());
    if (!t)
      return t.takeError();
    arrays.emplace(llvm::sys::path::stem(it->path()).str(), std::move(*t));
  }
  if (arrays.empty())
    return err(path + ": the folder holds no .npy files");
  return arrays;
}

llvm::Expected<std::map<std::string, Tensor>>
headroom::readArrays(llvm::StringRef path) {
  if (!llvm::sys::fs::exists(path))
    return err(path + ": no such file or folder");
  if (llvm::sys::fs::is_directory(path))
    return readNpyFolder(path);
  return readNpz(path);
}

llvm::Expected<Dataset> headroom::loadDataset(llvm::StringRef path) {
  auto arrays = readArrays(path);
  if (!arrays)
    return arrays.takeError();
  Dataset d;
  d.Source = path.str();
  for (auto &[name, t] : *arrays)
    if (auto e = addArray(d, name, std::move(t)))
      return e;
  return d;
}

llvm::Error headroom::checkDataset(const Dataset &data, const Function &f) {
  std::vector<std::string> names;
  std::vector<TensorType> types;
  for (Value *a : f.arguments()) {
    names.push_back(a->name());
    types.push_back(a->type());
  }
  return checkDataset(data, names, types);
}

llvm::Error headroom::checkDataset(const Dataset &data,
                                   llvm::ArrayRef<std::string> names,
                                   llvm::ArrayRef<TensorType> types) {
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string &name = names[i];
    const TensorType &want = types[i];
    if (want.rank() == 0)
      return err("the model's input '" + name +
                 "' is a scalar; data inputs need a leading batch dimension");
    auto it = data.Arrays.find(name);
    if (it == data.Arrays.end()) {
      std::string have;
      for (const auto &kv : data.Arrays)
        have += (have.empty() ? "" : ", ") + kv.first;
      return err(data.Source + ": no array named '" + name +
                 "' for the model's input of type " + want.str() +
                 " (arrays: " + have + ")");
    }
    const TensorType &t = it->second.type();
    if (t.dtype() != want.dtype())
      return err(data.Source + ": array '" + name + "' is " +
                 dtypeName(t.dtype()) + ", the model's input is " + want.str());
    if (t.rank() != want.rank() ||
        t.shape().drop_front() != want.shape().drop_front())
      return err(data.Source + ": array '" + name + "' has samples of shape " +
                 shapeString(t.shape().drop_front()) + ", the model's input '" +
                 name + "' needs " + shapeString(want.shape().drop_front()));
    if (data.Samples < want.dim(0))
      return err(data.Source + ": " + llvm::Twine(data.Samples) +
                 " samples are fewer than one batch of " +
                 llvm::Twine(want.dim(0)));
  }
  return llvm::Error::success();
}

Tensor headroom::gatherRows(const Tensor &t, llvm::ArrayRef<int64_t> order,
                            int64_t start, int64_t count) {
  llvm::SmallVector<int64_t, 4> shape(t.type().shape().begin(),
                                      t.type().shape().end());
  shape[0] = count;
  TensorType type(t.type().dtype(), shape);
  size_t row = t.bytes().size() / t.type().dim(0);
  std::vector<uint8_t> bytes(type.sizeInBytes());
  for (int64_t i = 0; i < count; ++i)
    std::memcpy(bytes.data() + i * row,
                t.bytes().data() + order[start + i] * row, row);
  return Tensor(type, std::move(bytes));
}

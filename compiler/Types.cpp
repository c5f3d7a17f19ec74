//===- Types.cpp - Element types, tensor types and constant tensors -------===//
#include "compiler/Types.h"

#include "llvm/ADT/StringSwitch.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>

using namespace headroom;

namespace {
struct DTypeInfo {
  DType Type;
  const char *Name;
  unsigned Size;
  int Onnx; // onnx::TensorProto::DataType
};
// One row per DType, in enum order.
constexpr DTypeInfo kDTypes[] = {
    {DType::F32, "f32", 4, 1},   {DType::F64, "f64", 8, 11},
    {DType::F16, "f16", 2, 10},  {DType::BF16, "bf16", 2, 16},
    {DType::I8, "i8", 1, 3},     {DType::I16, "i16", 2, 5},
    {DType::I32, "i32", 4, 6},   {DType::I64, "i64", 8, 7},
    {DType::U8, "u8", 1, 2},     {DType::U16, "u16", 2, 4},
    {DType::U32, "u32", 4, 12},  {DType::U64, "u64", 8, 13},
    {DType::Bool, "bool", 1, 9},
};
const DTypeInfo &info(DType t) {
  const DTypeInfo &i = kDTypes[static_cast<unsigned>(t)];
  assert(i.Type == t && "kDTypes out of enum order");
  return i;
}
} // namespace

llvm::StringRef headroom::dtypeName(DType t) { return info(t).Name; }
unsigned headroom::dtypeSize(DType t) { return info(t).Size; }

llvm::Optional<DType> headroom::parseDType(llvm::StringRef name) {
  for (const DTypeInfo &i : kDTypes)
    if (name == i.Name)
      return i.Type;
  return llvm::None;
}

llvm::Optional<DType> headroom::dtypeFromOnnx(int onnxType) {
  for (const DTypeInfo &i : kDTypes)
    if (onnxType == i.Onnx)
      return i.Type;
  return llvm::None;
}
int headroom::dtypeToOnnx(DType t) { return info(t).Onnx; }

bool headroom::isFloat(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::F16 ||
         t == DType::BF16;
}
bool headroom::isSignedInt(DType t) {
  return t == DType::I8 || t == DType::I16 || t == DType::I32 ||
         t == DType::I64;
}
bool headroom::isUnsignedInt(DType t) {
  return t == DType::U8 || t == DType::U16 || t == DType::U32 ||
         t == DType::U64;
}

int64_t TensorType::numElements() const {
  int64_t n = 1;
  for (int64_t d : Shape)
    n *= d;
  return n;
}

llvm::Optional<uint64_t> TensorType::checkedSizeInBytes() const {
  uint64_t bytes = dtypeSize(Dtype);
  for (int64_t d : Shape) {
    if (d < 0)
      return llvm::None;
    if (d != 0 && bytes > kMaxTensorBytes / uint64_t(d))
      return llvm::None;
    bytes *= uint64_t(d);
  }
  return bytes;
}

void TensorType::print(llvm::raw_ostream &os) const {
  os << dtypeName(Dtype) << '[';
  for (unsigned i = 0; i < Shape.size(); ++i)
    os << (i ? ", " : "") << Shape[i];
  os << ']';
}

std::string TensorType::str() const {
  std::string s;
  llvm::raw_string_ostream os(s);
  print(os);
  return os.str();
}

llvm::Optional<llvm::SmallVector<int64_t, 4>>
headroom::broadcastShapes(llvm::ArrayRef<int64_t> a,
                          llvm::ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  llvm::SmallVector<int64_t, 4> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return llvm::None;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

llvm::Expected<AxisSplit> headroom::axisSplit(llvm::ArrayRef<int64_t> shape,
                                              int64_t axis) {
  int64_t rank = shape.size();
  if (rank == 0 && (axis == 0 || axis == -1))
    return AxisSplit();
  if (axis < -rank || axis >= rank)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "axis %lld is out of range for rank %lld",
                                   (long long)axis, (long long)rank);
  AxisSplit s;
  s.Axis = axis < 0 ? axis + rank : axis;
  for (int64_t i = 0; i < rank; ++i)
    (i < s.Axis ? s.Outer : i == s.Axis ? s.N : s.Inner) *= shape[i];
  return s;
}

std::string headroom::shapeString(llvm::ArrayRef<int64_t> shape) {
  if (shape.empty())
    return "scalar";
  std::string s;
  for (unsigned i = 0; i < shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(shape[i]);
  return s;
}

//===----------------------------------------------------------------------===//
// 16-bit floats
//===----------------------------------------------------------------------===//

float headroom::halfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else { // subnormal: normalize
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while (!(man & 0x400));
    bits = sign | ((112 - e) << 23) | ((man & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t headroom::floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = (x >> 16) & 0x8000;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) // inf or nan
    return sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0);
  if (absx >= 0x477ff000u) // rounds to >= 65520: overflow to inf
    return sign | 0x7c00;
  if (absx < 0x38800000u) { // subnormal or zero in half
    float a;
    std::memcpy(&a, &absx, 4);
    // Scale so the subnormal's integer mantissa lands in the integer part;
    // nearbyint rounds to nearest even.
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  uint32_t man = absx & 0x7fffff;
  uint32_t exp = (absx >> 23) - 112;
  uint32_t h = (exp << 10) | (man >> 13);
  uint32_t rest = man & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
    ++h;
  return sign | static_cast<uint16_t>(h);
}

float headroom::bf16ToFloat(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t headroom::floatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) // nan stays a quiet nan
    return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

//===----------------------------------------------------------------------===//
// Tensor
//===----------------------------------------------------------------------===//

Tensor::Tensor(TensorType type)
    : Type(std::move(type)), Bytes(Type.sizeInBytes(), 0) {}

Tensor::Tensor(TensorType type, std::vector<uint8_t> bytes)
    : Type(std::move(type)), Bytes(std::move(bytes)) {
  assert(Bytes.size() == Type.sizeInBytes() && "tensor data size mismatch");
}

template <typename T> static T load(const uint8_t *p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T> static void store(uint8_t *p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

double Tensor::getDouble(int64_t i) const {
  const uint8_t *p = Bytes.data() + i * dtypeSize(Type.dtype());
  switch (Type.dtype()) {
  case DType::F32:
    return load<float>(p);
  case DType::F64:
    return load<double>(p);
  case DType::F16:
    return halfToFloat(load<uint16_t>(p));
  case DType::BF16:
    return bf16ToFloat(load<uint16_t>(p));
  case DType::I8:
    return load<int8_t>(p);
  case DType::I16:
    return load<int16_t>(p);
  case DType::I32:
    return load<int32_t>(p);
  case DType::I64:
    return static_cast<double>(load<int64_t>(p));
  case DType::U8:
    return load<uint8_t>(p);
  case DType::U16:
    return load<uint16_t>(p);
  case DType::U32:
    return load<uint32_t>(p);
  case DType::U64:
    return static_cast<double>(load<uint64_t>(p));
  case DType::Bool:
    return load<uint8_t>(p) ? 1.0 : 0.0;
  }
  llvm_unreachable("unknown dtype");
}

int64_t Tensor::getInt(int64_t i) const {
  const uint8_t *p = Bytes.data() + i * dtypeSize(Type.dtype());
  switch (Type.dtype()) {
  case DType::I8:
    return load<int8_t>(p);
  case DType::I16:
    return load<int16_t>(p);
  case DType::I32:
    return load<int32_t>(p);
  case DType::I64:
    return load<int64_t>(p);
  case DType::U8:
    return load<uint8_t>(p);
  case DType::U16:
    return load<uint16_t>(p);
  case DType::U32:
    return load<uint32_t>(p);
  case DType::U64:
    return static_cast<int64_t>(load<uint64_t>(p));
  case DType::Bool:
    return load<uint8_t>(p) ? 1 : 0;
  default: {
    double d = getDouble(i);
    // Float -> int conversion truncates toward zero, as ONNX Cast does;
    // out-of-range values saturate instead of invoking undefined behaviour.
    if (std::isnan(d))
      return 0;
    if (d >= 9.2233720368547758e18)
      return INT64_MAX;
    if (d <= -9.2233720368547758e18)
      return INT64_MIN;
    return static_cast<int64_t>(d);
  }
  }
}

template <typename T> static T saturate(double v) {
  if (std::isnan(v))
    return 0;
  if (v >= static_cast<double>(std::numeric_limits<T>::max()))
    return std::numeric_limits<T>::max();
  if (v <= static_cast<double>(std::numeric_limits<T>::lowest()))
    return std::numeric_limits<T>::lowest();
  return static_cast<T>(v);
}

void Tensor::setDouble(int64_t i, double v) {
  uint8_t *p = Bytes.data() + i * dtypeSize(Type.dtype());
  switch (Type.dtype()) {
  case DType::F32:
    return store<float>(p, static_cast<float>(v));
  case DType::F64:
    return store<double>(p, v);
  case DType::F16:
    return store<uint16_t>(p, floatToHalf(static_cast<float>(v)));
  case DType::BF16:
    return store<uint16_t>(p, floatToBf16(static_cast<float>(v)));
  case DType::Bool:
    return store<uint8_t>(p, v != 0);
  default:
    return setInt(i, getIntFromDouble(v));
  }
}

int64_t Tensor::getIntFromDouble(double v) { return saturate<int64_t>(v); }

void Tensor::setInt(int64_t i, int64_t v) {
  uint8_t *p = Bytes.data() + i * dtypeSize(Type.dtype());
  switch (Type.dtype()) {
  case DType::I8:
    return store<int8_t>(p, static_cast<int8_t>(v));
  case DType::I16:
    return store<int16_t>(p, static_cast<int16_t>(v));
  case DType::I32:
    return store<int32_t>(p, static_cast<int32_t>(v));
  case DType::I64:
    return store<int64_t>(p, v);
  case DType::U8:
    return store<uint8_t>(p, static_cast<uint8_t>(v));
  case DType::U16:
    return store<uint16_t>(p, static_cast<uint16_t>(v));
  case DType::U32:
    return store<uint32_t>(p, static_cast<uint32_t>(v));
  case DType::U64:
    return store<uint64_t>(p, static_cast<uint64_t>(v));
  case DType::Bool:
    return store<uint8_t>(p, v != 0);
  default:
    return setDouble(i, static_cast<double>(v));
  }
}

std::vector<int64_t> Tensor::toInts() const {
  std::vector<int64_t> out(numElements());
  for (int64_t i = 0; i < numElements(); ++i)
    out[i] = getInt(i);
  return out;
}

bool Tensor::isSplat() const {
  unsigned sz = dtypeSize(Type.dtype());
  if (Bytes.size() <= sz)
    return true;
  for (size_t off = sz; off < Bytes.size(); off += sz)
    if (std::memcmp(Bytes.data(), Bytes.data() + off, sz) != 0)
      return false;
  return true;
}

Tensor Tensor::fromInts(DType t, llvm::ArrayRef<int64_t> shape,
                        llvm::ArrayRef<int64_t> values) {
  Tensor r(TensorType(t, shape));
  assert(values.size() == static_cast<size_t>(r.numElements()) &&
         "value count does not match shape");
  for (size_t i = 0; i < values.size(); ++i)
    r.setInt(i, values[i]);
  return r;
}

Tensor Tensor::fromDoubles(DType t, llvm::ArrayRef<int64_t> shape,
                           llvm::ArrayRef<double> values) {
  Tensor r(TensorType(t, shape));
  assert(values.size() == static_cast<size_t>(r.numElements()) &&
         "value count does not match shape");
  for (size_t i = 0; i < values.size(); ++i)
    r.setDouble(i, values[i]);
  return r;
}

Tensor Tensor::convertedTo(DType t) const {
  if (t == Type.dtype())
    return *this;
  Tensor out(Type.withDType(t));
  for (int64_t i = 0; i < numElements(); ++i)
    out.setDouble(i, getDouble(i));
  return out;
}

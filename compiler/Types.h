//===- Types.h - Element types, tensor types and constant tensors ---------===//
//
// Every value in headroom's IR has a static TensorType: an element type and a
// shape whose dimensions are all known. Dynamic ONNX dimensions are bound by
// the user at import time (--batch, --shape), so nothing downstream ever sees a
// symbolic dimension. Tensor holds constant data (Constant nodes, folded shape
// arithmetic) in little-endian host layout.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_TYPES_H
#define HEADROOM_COMPILER_TYPES_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/Optional.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>
#include <vector>

namespace headroom {

/// Element types. The names are the IR's spelling (`f32`, `i64`, `bool`).
enum class DType : uint8_t {
  F32,
  F64,
  F16,
  BF16,
  I8,
  I16,
  I32,
  I64,
  U8,
  U16,
  U32,
  U64,
  Bool,
};

llvm::StringRef dtypeName(DType t);
llvm::Optional<DType> parseDType(llvm::StringRef name);
/// Bytes per element.
unsigned dtypeSize(DType t);
bool isFloat(DType t);
bool isSignedInt(DType t);
bool isUnsignedInt(DType t);
inline bool isInteger(DType t) { return isSignedInt(t) || isUnsignedInt(t); }

/// ONNX TensorProto::DataType <-> DType. Returns None for types headroom does
/// not represent (string, complex, float8).
llvm::Optional<DType> dtypeFromOnnx(int onnxType);
int dtypeToOnnx(DType t);

/// The largest tensor headroom plans: 2^52 bytes (4 PiB). Well beyond any
/// memory, and small enough that sums of thousands of tensors, offsets with
/// alignment padding and products with small factors cannot overflow 64 bits.
constexpr uint64_t kMaxTensorBytes = uint64_t(1) << 52;

/// A static tensor type: element type and shape. Rank 0 is a scalar.
class TensorType {
public:
  TensorType() = default;
  TensorType(DType dtype, llvm::ArrayRef<int64_t> shape)
      : Dtype(dtype), Shape(shape.begin(), shape.end()) {}

  DType dtype() const { return Dtype; }
  llvm::ArrayRef<int64_t> shape() const { return Shape; }
  unsigned rank() const { return Shape.size(); }
  int64_t dim(unsigned i) const { return Shape[i]; }
  int64_t numElements() const;
  uint64_t sizeInBytes() const { return numElements() * dtypeSize(Dtype); }
  /// sizeInBytes, or None when a dimension is negative or the byte count
  /// exceeds kMaxTensorBytes (the verifier refuses such types, so every
  /// type that passed it can use sizeInBytes and numElements freely).
  llvm::Optional<uint64_t> checkedSizeInBytes() const;
  TensorType withDType(DType t) const { return TensorType(t, Shape); }

  bool operator==(const TensorType &o) const {
    return Dtype == o.Dtype && Shape == o.Shape;
  }
  bool operator!=(const TensorType &o) const { return !(*this == o); }

  /// Prints `f32[4, 8]`.
  void print(llvm::raw_ostream &os) const;
  std::string str() const;

private:
  DType Dtype = DType::F32;
  llvm::SmallVector<int64_t, 4> Shape;
};

/// The multidirectional (numpy) broadcast of two shapes, or None when they
/// are incompatible.
llvm::Optional<llvm::SmallVector<int64_t, 4>>
broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);

/// A shape seen as [Outer, N, Inner] around one axis (softmax, ArgMax,
/// CumSum: an op along an axis).
struct AxisSplit {
  int64_t Outer = 1, N = 1, Inner = 1;
  int64_t Axis = 0; // normalized to [0, rank)
};

/// The split of `shape` at `axis` (negative counts from the end; a scalar
/// takes 0 and -1), or an error "axis A is out of range for rank R".
llvm::Expected<AxisSplit> axisSplit(llvm::ArrayRef<int64_t> shape,
                                    int64_t axis);

/// Prints a shape as `4x8` (the command line's spelling; scalar is `scalar`).
std::string shapeString(llvm::ArrayRef<int64_t> shape);

/// Constant tensor data. Elements are stored packed in the type's layout.
class Tensor {
public:
  Tensor() = default;
  explicit Tensor(TensorType type);
  Tensor(TensorType type, std::vector<uint8_t> bytes);

  const TensorType &type() const { return Type; }
  const std::vector<uint8_t> &bytes() const { return Bytes; }
  uint8_t *data() { return Bytes.data(); }
  int64_t numElements() const { return Type.numElements(); }

  /// Element i converted to double / int64 (bool is 0 or 1; f16/bf16 widened).
  double getDouble(int64_t i) const;
  int64_t getInt(int64_t i) const;
  /// Stores v converted to the element type (rounding to nearest for floats,
  /// C++ conversion for integers, `v != 0` for bool).
  void setDouble(int64_t i, double v);
  void setInt(int64_t i, int64_t v);
  /// double -> int64 with saturation (NaN -> 0), never undefined behaviour.
  static int64_t getIntFromDouble(double v);

  /// The same values in element type `t` (floats rounded to nearest even).
  Tensor convertedTo(DType t) const;

  /// All elements as int64 (for shape tensors and index lists).
  std::vector<int64_t> toInts() const;
  /// True when every element equals the first one (printed as a splat).
  bool isSplat() const;

  static Tensor fromInts(DType t, llvm::ArrayRef<int64_t> shape,
                         llvm::ArrayRef<int64_t> values);
  static Tensor fromDoubles(DType t, llvm::ArrayRef<int64_t> shape,
                            llvm::ArrayRef<double> values);

  bool operator==(const Tensor &o) const {
    return Type == o.Type && Bytes == o.Bytes;
  }

private:
  TensorType Type;
  std::vector<uint8_t> Bytes;
};

/// IEEE half and bfloat16 conversions (round to nearest even).
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bf16ToFloat(uint16_t h);
uint16_t floatToBf16(float f);

} // namespace headroom

#endif // HEADROOM_COMPILER_TYPES_H

//===- Attribute.h - Node attributes --------------------------------------===//
//
// Attributes are compile-time constants attached to a node: numbers, strings,
// lists of them, element types (Cast's `to`) and constant tensors (Constant's
// `value`). They mirror ONNX's AttributeProto closely enough that import is a
// direct translation, with two changes: element types are their own kind
// (printed `f32`, not ONNX's integer code) and graphs are not supported.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_ATTRIBUTE_H
#define HEADROOM_COMPILER_ATTRIBUTE_H

#include "compiler/Types.h"

#include "llvm/ADT/StringRef.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace headroom {

class Attribute {
public:
  enum class Kind { Int, Float, String, Ints, Floats, Strings, Type, Tensor };

  Attribute() = default;
  static Attribute getInt(int64_t v);
  static Attribute getFloat(double v);
  static Attribute getString(std::string v);
  static Attribute getInts(std::vector<int64_t> v);
  static Attribute getFloats(std::vector<double> v);
  static Attribute getStrings(std::vector<std::string> v);
  static Attribute getType(DType t);
  static Attribute getTensor(Tensor t);

  Kind kind() const { return K; }
  int64_t asInt() const;
  double asFloat() const;
  const std::string &asString() const;
  const std::vector<int64_t> &asInts() const;
  const std::vector<double> &asFloats() const;
  const std::vector<std::string> &asStrings() const;
  DType asType() const;
  const Tensor &asTensor() const;

  bool operator==(const Attribute &o) const;
  bool operator!=(const Attribute &o) const { return !(*this == o); }

  /// Prints the attribute's value in the textual IR's syntax.
  /// Float attributes are f32, as in ONNX: getFloat rounds to f32.
  void print(llvm::raw_ostream &os) const;

private:
  Kind K = Kind::Int;
  int64_t I = 0;
  double F = 0;
  std::string S;
  std::vector<int64_t> Is;
  std::vector<double> Fs;
  std::vector<std::string> Ss;
  DType T = DType::F32;
  std::shared_ptr<const Tensor> Data; // shared: copying a node copies cheaply
};

/// Attributes of one node, ordered by name so that printing is deterministic.
using AttributeMap = std::map<std::string, Attribute>;

/// The integer attribute `name` of `attrs`, or `dflt` when it is absent or
/// not an integer.
int64_t intAttr(const AttributeMap &attrs, llvm::StringRef name, int64_t dflt);
/// The integer-list attribute `name` of `attrs`, or null.
const std::vector<int64_t> *intsAttr(const AttributeMap &attrs,
                                     llvm::StringRef name);

/// The shortest decimal (printf's %g form) that reads back as the same value
/// of element type `t`: `1e-05`, `0.001`, `3`, `inf`, `nan`.
std::string shortestDecimal(double v, DType t = DType::F64);
/// Prints the shortest decimal that reads back as the same value of element
/// type `t` (f32: `1e-05`, not `9.99999975e-06`), always with a '.' or an
/// exponent so that it parses as a float (`1.0`, `inf`, `nan`).
void printFloat(llvm::raw_ostream &os, double v, DType t = DType::F64);
/// Prints a string literal with C escapes.
void printQuoted(llvm::raw_ostream &os, llvm::StringRef s);

} // namespace headroom

#endif // HEADROOM_COMPILER_ATTRIBUTE_H

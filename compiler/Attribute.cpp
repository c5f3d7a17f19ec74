//===- Attribute.cpp - Node attributes ------------------------------------===//
#include "compiler/Attribute.h"

#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/Format.h"

#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstdlib>

using namespace headroom;

Attribute Attribute::getInt(int64_t v) {
  Attribute a;
  a.K = Kind::Int;
  a.I = v;
  return a;
}
Attribute Attribute::getFloat(double v) {
  Attribute a;
  a.K = Kind::Float;
  a.F = static_cast<float>(v);
  return a;
}
Attribute Attribute::getString(std::string v) {
  Attribute a;
  a.K = Kind::String;
  a.S = std::move(v);
  return a;
}
Attribute Attribute::getInts(std::vector<int64_t> v) {
  Attribute a;
  a.K = Kind::Ints;
  a.Is = std::move(v);
  return a;
}
Attribute Attribute::getFloats(std::vector<double> v) {
  Attribute a;
  a.K = Kind::Floats;
  a.Fs = std::move(v);
  for (double &f : a.Fs)
    f = static_cast<float>(f);
  return a;
}
Attribute Attribute::getStrings(std::vector<std::string> v) {
  Attribute a;
  a.K = Kind::Strings;
  a.Ss = std::move(v);
  return a;
}
Attribute Attribute::getType(DType t) {
  Attribute a;
  a.K = Kind::Type;
  a.T = t;
  return a;
}
Attribute Attribute::getTensor(Tensor t) {
  Attribute a;
  a.K = Kind::Tensor;
  a.Data = std::make_shared<const Tensor>(std::move(t));
  return a;
}

int64_t Attribute::asInt() const {
  assert(K == Kind::Int && "attribute is not an int");
  return I;
}
double Attribute::asFloat() const {
  assert((K == Kind::Float || K == Kind::Int) && "attribute is not a float");
  return K == Kind::Int ? static_cast<double>(I) : F;
}
const std::string &Attribute::asString() const {
  assert(K == Kind::String && "attribute is not a string");
  return S;
}
const std::vector<int64_t> &Attribute::asInts() const {
  assert(K == Kind::Ints && "attribute is not an int list");
  return Is;
}
const std::vector<double> &Attribute::asFloats() const {
  assert(K == Kind::Floats && "attribute is not a float list");
  return Fs;
}
const std::vector<std::string> &Attribute::asStrings() const {
  assert(K == Kind::Strings && "attribute is not a string list");
  return Ss;
}
DType Attribute::asType() const {
  assert(K == Kind::Type && "attribute is not an element type");
  return T;
}
const Tensor &Attribute::asTensor() const {
  assert(K == Kind::Tensor && "attribute is not a tensor");
  return *Data;
}

bool Attribute::operator==(const Attribute &o) const {
  if (K != o.K)
    return false;
  switch (K) {
  case Kind::Int:
    return I == o.I;
  case Kind::Float:
    return F == o.F || (std::isnan(F) && std::isnan(o.F));
  case Kind::String:
    return S == o.S;
  case Kind::Ints:
    return Is == o.Is;
  case Kind::Floats:
    return Fs == o.Fs;
  case Kind::Strings:
    return Ss == o.Ss;
  case Kind::Type:
    return T == o.T;
  case Kind::Tensor:
    return *Data == *o.Data;
  }
  llvm_unreachable("unknown attribute kind");
}

/// True when `a` and `b` are the same value once rounded to `t`.
static bool sameIn(DType t, double a, double b) {
  switch (t) {
  case DType::F32:
    return static_cast<float>(a) == static_cast<float>(b);
  case DType::F16:
    return floatToHalf(static_cast<float>(a)) ==
           floatToHalf(static_cast<float>(b));
  case DType::BF16:
    return floatToBf16(static_cast<float>(a)) ==
           floatToBf16(static_cast<float>(b));
  default:
    return a == b;
  }
}

std::string headroom::shortestDecimal(double v, DType t) {
  if (std::isnan(v))
    return "nan";
  if (std::isinf(v))
    return v < 0 ? "-inf" : "inf";
  // The shortest of %.{1..17}g that reads back exactly.
  char buf[32];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*g", prec, v);
    if (sameIn(t, std::strtod(buf, nullptr), v))
      break;
  }
  return buf;
}

void headroom::printFloat(llvm::raw_ostream &os, double v, DType t) {
  std::string s = shortestDecimal(v, t);
  os << s;
  if (llvm::StringRef(s).find_first_of(".en") == llvm::StringRef::npos)
    os << ".0";
}

void headroom::printQuoted(llvm::raw_ostream &os, llvm::StringRef s) {
  os << '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\')
      os << '\\' << c;
    else if (c == '\n')
      os << "\\n";
    else if (c == '\t')
      os << "\\t";
    else if (c < 0x20 || c >= 0x7f)
      os << llvm::format("\\%02X", c);
    else
      os << c;
  }
  os << '"';
}

/// Tensor elements print as ints or floats by element type; a splat prints one
/// element. Syntax: `dense<f32[2, 2]> [1.0, 2.0, 3.0, 4.0]` or
/// `dense<f32[2, 2]> 0.0`.
static void printTensor(llvm::raw_ostream &os, const Tensor &t) {
  os << "dense<";
  t.type().print(os);
  os << "> ";
  auto elem = [&](int64_t i) {
    if (isFloat(t.type().dtype()))
      printFloat(os, t.getDouble(i), t.type().dtype());
    else if (t.type().dtype() == DType::U64)
      os << static_cast<uint64_t>(t.getInt(i));
    else
      os << t.getInt(i);
  };
  if (t.numElements() > 0 && t.isSplat()) {
    elem(0);
    return;
  }
  os << '[';
  for (int64_t i = 0; i < t.numElements(); ++i) {
    if (i)
      os << ", ";
    elem(i);
  }
  os << ']';
}

void Attribute::print(llvm::raw_ostream &os) const {
  switch (K) {
  case Kind::Int:
    os << I;
    return;
  case Kind::Float:
    printFloat(os, F, DType::F32);
    return;
  case Kind::String:
    printQuoted(os, S);
    return;
  case Kind::Type:
    os << dtypeName(T);
    return;
  case Kind::Tensor:
    printTensor(os, *Data);
    return;
  case Kind::Ints:
    os << '[';
    for (size_t i = 0; i < Is.size(); ++i)
      os << (i ? ", " : "") << Is[i];
    os << ']';
    return;
  case Kind::Floats:
    // An empty list prints as `[]`, which parses as ints; ONNX has no float
    // list attribute whose meaning depends on it being empty.
    os << '[';
    for (size_t i = 0; i < Fs.size(); ++i) {
      if (i)
        os << ", ";
      printFloat(os, Fs[i], DType::F32);
    }
    os << ']';
    return;
  case Kind::Strings:
    os << '[';
    for (size_t i = 0; i < Ss.size(); ++i) {
      if (i)
        os << ", ";
      printQuoted(os, Ss[i]);
    }
    os << ']';
    return;
  }
}

int64_t headroom::intAttr(const AttributeMap &attrs, llvm::StringRef name,
                          int64_t dflt) {
  auto it = attrs.find(name.str());
  return it != attrs.end() && it->second.kind() == Attribute::Kind::Int
             ? it->second.asInt()
             : dflt;
}

const std::vector<int64_t> *headroom::intsAttr(const AttributeMap &attrs,
                                               llvm::StringRef name) {
  auto it = attrs.find(name.str());
  return it != attrs.end() && it->second.kind() == Attribute::Kind::Ints
             ? &it->second.asInts()
             : nullptr;
}

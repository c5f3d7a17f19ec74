//===- ConvPool.cpp - Convolution and pooling windows ---------------------===//
#include "compiler/ops/ConvPool.h"

#include "llvm/ADT/Twine.h"

#include <algorithm>

using namespace headroom;
using llvm::ArrayRef;
using llvm::Twine;

static llvm::Error fail(const Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

static int64_t product(ArrayRef<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= d;
  return n;
}

int64_t ops::Window::inSize() const { return product(In); }
int64_t ops::Window::kernelSize() const { return product(Kernel); }
int64_t ops::Window::outSize() const { return product(Out); }

bool ops::Window::isPointwise() const {
  for (unsigned a = 0; a < rank(); ++a)
    if (Kernel[a] != 1 || Strides[a] != 1 || PadBegin[a] || PadEnd[a])
      return false;
  return true;
}

static std::vector<int64_t> ints(const AttributeMap &attrs,
                                 llvm::StringRef name) {
  auto it = attrs.find(name.str());
  if (it == attrs.end() || it->second.kind() != Attribute::Kind::Ints)
    return {};
  return it->second.asInts();
}

/// An ints attribute of one value per spatial axis, or `dflt` everywhere.
static llvm::Expected<ops::WindowDims> perAxis(const AttributeMap &attrs,
                                               llvm::StringRef name,
                                               unsigned rank, int64_t dflt,
                                               unsigned copies = 1) {
  std::vector<int64_t> v = ints(attrs, name);
  if (v.empty())
    return ops::WindowDims(rank * copies, dflt);
  if (v.size() != rank * copies)
    return fail(name + " has " + Twine(v.size()) + " values, " +
                Twine(rank * copies) + " expected");
  return ops::WindowDims(v.begin(), v.end());
}

llvm::Expected<ops::Window> ops::makeWindow(const AttributeMap &attrs,
                                            ArrayRef<int64_t> in,
                                            ArrayRef<int64_t> kernel,
                                            ArrayRef<int64_t> out,
                                            bool ceilMode) {
  unsigned rank = in.size();
  Window w;
  w.In.assign(in.begin(), in.end());
  w.Kernel.assign(kernel.begin(), kernel.end());
  w.Out.assign(out.begin(), out.end());
  auto strides = perAxis(attrs, "strides", rank, 1);
  auto dilations = perAxis(attrs, "dilations", rank, 1);
  auto pads = perAxis(attrs, "pads", rank, 0, /*copies=*/2);
  if (!strides || !dilations || !pads)
    return llvm::joinErrors(
        llvm::joinErrors(strides.takeError(), dilations.takeError()),
        pads.takeError());
  w.Strides = *strides;
  w.Dilations = *dilations;
  w.PadBegin.assign(pads->begin(), pads->begin() + rank);
  w.PadEnd.assign(pads->begin() + rank, pads->end());
  auto it = attrs.find("auto_pad");
  std::string autoPad =
      it != attrs.end() && it->second.kind() == Attribute::Kind::String
          ? it->second.asString()
          : "NOTSET";
  bool same = autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER";
  if (!same && autoPad != "NOTSET" && autoPad != "VALID")
    return fail("auto_pad '" + autoPad + "' is not supported");
  for (unsigned a = 0; a < rank; ++a) {
    int64_t s = w.Strides[a], d = w.Dilations[a], k = w.Kernel[a];
    if (s < 1 || d < 1 || k < 1 || w.PadBegin[a] < 0 || w.PadEnd[a] < 0)
      return fail("strides, dilations and kernel sizes must be positive and "
                  "pads non-negative");
    int64_t span = (k - 1) * d + 1, lo, hi;
    if (same) {
      lo = hi = ceilDiv(in[a], s);
      int64_t total = std::max<int64_t>(0, (lo - 1) * s + span - in[a]);
      w.PadBegin[a] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.PadEnd[a] = total - w.PadBegin[a];
    } else {
      if (autoPad == "VALID")
        w.PadBegin[a] = w.PadEnd[a] = 0;
      int64_t room = in[a] + w.PadBegin[a] + w.PadEnd[a] - span;
      lo = room < 0 ? 0 : room / s + 1;
      // ceil_mode may add a last partial window; some versions of ONNX's
      // shape inference drop it when it starts in the end padding.
      hi = room < 0 ? 0 : (ceilMode ? ceilDiv(room, s) : room / s) + 1;
    }
    if (out[a] < lo || out[a] > hi)
      return fail("spatial output size " + Twine(out[a]) + " on axis " +
                  Twine(a) + " does not match the window (expected " +
                  Twine(hi) + ")");
  }
  return w;
}

llvm::Expected<ops::ConvShape> ops::convShape(const AttributeMap &attrs,
                                              const TensorType &x,
                                              const TensorType &w,
                                              const TensorType &y) {
  if (x.dtype() != w.dtype() || x.dtype() != y.dtype())
    return fail("operands of types " + dtypeName(x.dtype()) + ", " +
                dtypeName(w.dtype()) + " and " + dtypeName(y.dtype()) +
                " are not supported (expected one type)");
  unsigned rank = x.rank();
  if (rank < 3 || w.rank() != rank || y.rank() != rank)
    return fail("x, w and y must have the same rank >= 3");
  ConvShape s;
  s.N = x.dim(0);
  s.C = x.dim(1);
  s.M = w.dim(0);
  auto g = attrs.find("group");
  s.G = g != attrs.end() && g->second.kind() == Attribute::Kind::Int
            ? g->second.asInt()
            : 1;
  if (s.G < 1 || s.C != w.dim(1) * s.G || s.M % s.G || y.dim(0) != s.N ||
      y.dim(1) != s.M)
    return fail("shapes " + x.str() + ", " + w.str() + ", " + y.str() +
                " do not match group " + Twine(s.G));
  ArrayRef<int64_t> kernel = w.shape().drop_front(2);
  std::vector<int64_t> attrKernel = ints(attrs, "kernel_shape");
  if (!attrKernel.empty() && ArrayRef<int64_t>(attrKernel) != kernel)
    return fail("kernel_shape does not match the weight's shape " + w.str());
  auto win = makeWindow(attrs, x.shape().drop_front(2), kernel,
                        y.shape().drop_front(2), /*ceilMode=*/false);
  if (!win)
    return win.takeError();
  s.W = std::move(*win);
  return s;
}

llvm::Expected<ops::Window> ops::poolWindow(const AttributeMap &attrs,
                                            const TensorType &x,
                                            const TensorType &y) {
  if (x.rank() < 3 || y.rank() != x.rank() || x.dim(0) != y.dim(0) ||
      x.dim(1) != y.dim(1))
    return fail("input " + x.str() + " and output " + y.str() +
                " are not [N, C, spatial...]");
  std::vector<int64_t> kernel = ints(attrs, "kernel_shape");
  if (kernel.size() != x.rank() - 2)
    return fail("kernel_shape must have one value per spatial axis");
  auto c = attrs.find("ceil_mode");
  bool ceil = c != attrs.end() && c->second.kind() == Attribute::Kind::Int &&
              c->second.asInt() != 0;
  return makeWindow(attrs, x.shape().drop_front(2), kernel,
                    y.shape().drop_front(2), ceil);
}

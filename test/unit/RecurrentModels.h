//===- RecurrentModels.h - LSTM/GRU/RNN models and a reference ------------===//
//
// One-node ONNX models of LSTM, GRU and RNN built in C++ with random
// operands, and a straightforward reference of the ONNX equations (loops in
// double, nothing shared with the importer's unrolling). Used by the import
// tests (OnnxImportTest.cpp: outputs against the reference) and the autodiff
// tests (AutodiffTest.cpp: gradients through time against finite
// differences).
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_TEST_UNIT_RECURRENTMODELS_H
#define HEADROOM_TEST_UNIT_RECURRENTMODELS_H

#include "compiler/OnnxTensor.h"
#include "compiler/Types.h"

#include <onnx/onnx_pb.h>

#include <cmath>
#include <ostream>
#include <random>
#include <string>
#include <vector>

namespace headroom {

/// One recurrent node: its op, attributes, sizes and which optional inputs
/// it has.
struct RecurrentSpec {
  const char *Name;      // the test's name
  const char *Op;        // LSTM, GRU or RNN
  const char *Direction; // forward, reverse or bidirectional
  int64_t Steps, Batch, Inputs, Hidden;
  bool Bias = false, InitialH = false, InitialC = false;
  int64_t LinearBeforeReset = 0;    // GRU only
  const char *Activation = nullptr; // RNN's f, when not Tanh
  DType Type = DType::F32;

  int dirs() const { return std::string(Direction) == "bidirectional" ? 2 : 1; }
  int gates() const {
    std::string op = Op;
    return op == "LSTM" ? 4 : op == "GRU" ? 3 : 1;
  }
  int states() const { return std::string(Op) == "LSTM" ? 2 : 1; }
};

/// gtest prints a case by its name.
inline void PrintTo(const RecurrentSpec &s, std::ostream *os) { *os << s.Name; }

/// The node's operands, by ONNX input name (absent optional ones are
/// default-constructed tensors, with no bytes).
struct RecurrentOperands {
  Tensor X, W, R, B, InitialH, InitialC;

  static bool has(const Tensor &t) { return !t.bytes().empty(); }
  /// Inputs in ONNX's order with names; absent optional ones are skipped.
  std::vector<std::pair<std::string, const Tensor *>> named() const {
    std::vector<std::pair<std::string, const Tensor *>> out = {
        {"X", &X}, {"W", &W}, {"R", &R}};
    if (has(B))
      out.push_back({"B", &B});
    if (has(InitialH))
      out.push_back({"initial_h", &InitialH});
    if (has(InitialC))
      out.push_back({"initial_c", &InitialC});
    return out;
  }
};

inline Tensor randomTensor(DType t, std::vector<int64_t> shape,
                           std::mt19937 &rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Tensor out(TensorType(t, shape));
  for (int64_t i = 0; i < out.numElements(); ++i)
    out.setDouble(i, u(rng));
  return out;
}

inline RecurrentOperands randomOperands(const RecurrentSpec &s,
                                        std::mt19937 &rng) {
  int64_t d = s.dirs(), w = s.gates() * s.Hidden;
  RecurrentOperands o;
  o.X = randomTensor(s.Type, {s.Steps, s.Batch, s.Inputs}, rng);
  o.W = randomTensor(s.Type, {d, w, s.Inputs}, rng);
  o.R = randomTensor(s.Type, {d, w, s.Hidden}, rng);
  if (s.Bias)
    o.B = randomTensor(s.Type, {d, 2 * w}, rng);
  if (s.InitialH)
    o.InitialH = randomTensor(s.Type, {d, s.Batch, s.Hidden}, rng);
  if (s.InitialC)
    o.InitialC = randomTensor(s.Type, {d, s.Batch, s.Hidden}, rng);
  return o;
}

inline void setValueInfo(onnx::ValueInfoProto *v, const std::string &name,
                         const TensorType &t) {
  v->set_name(name);
  auto *tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(dtypeToOnnx(t.dtype()));
  auto *shape = tt->mutable_shape();
  for (int64_t d : t.shape())
    shape->add_dim()->set_dim_value(d);
}

/// The recurrent node alone, its outputs named Y, Y_h (and LSTM's Y_c).
/// Its operands are graph inputs and its outputs graph outputs; with
/// `asInitializers`, the operands are initializers holding their values and
/// the caller adds the outputs (a loss). Returns the node.
inline onnx::NodeProto *recurrentModel(onnx::ModelProto &m,
                                       const RecurrentSpec &s,
                                       const RecurrentOperands &operands,
                                       bool asInitializers = false) {
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  onnx::GraphProto *g = m.mutable_graph();
  g->set_name(s.Name);
  onnx::NodeProto *n = g->add_node();
  n->set_op_type(s.Op);
  n->set_name(std::string(s.Op) + "0");
  auto attr = [&](const char *name) {
    onnx::AttributeProto *a = n->add_attribute();
    a->set_name(name);
    return a;
  };
  onnx::AttributeProto *a = attr("hidden_size");
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(s.Hidden);
  a = attr("direction");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(s.Direction);
  if (s.LinearBeforeReset) {
    a = attr("linear_before_reset");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(s.LinearBeforeReset);
  }
  if (s.Activation) {
    a = attr("activations");
    a->set_type(onnx::AttributeProto::STRINGS);
    for (int d = 0; d < s.dirs(); ++d)
      a->add_strings(s.Activation);
  }
  // Absent optional inputs are empty names; sequence_lens always is.
  std::vector<std::string> ins = {
      "X",
      "W",
      "R",
      operands.has(operands.B) ? "B" : "",
      "",
      operands.has(operands.InitialH) ? "initial_h" : "",
      operands.has(operands.InitialC) ? "initial_c" : ""};
  while (ins.back().empty())
    ins.pop_back();
  for (const std::string &in : ins)
    n->add_input(in);
  for (const auto &[name, t] : operands.named()) {
    if (asInitializers)
      *g->add_initializer() = tensorToProto(*t, name);
    else
      setValueInfo(g->add_input(), name, t->type());
  }
  int64_t d = s.dirs();
  std::vector<std::string> outs = {"Y", "Y_h", "Y_c"};
  for (int k = 0; k < 1 + s.states(); ++k) {
    n->add_output(outs[k]);
    if (asInitializers)
      continue;
    TensorType t = k == 0 ? TensorType(s.Type, {s.Steps, d, s.Batch, s.Hidden})
                          : TensorType(s.Type, {d, s.Batch, s.Hidden});
    setValueInfo(g->add_output(), outs[k], t);
  }
  return n;
}

/// Y, Y_h (and LSTM's Y_c) by the ONNX equations, in double.
inline std::vector<Tensor> referenceRecurrent(const RecurrentSpec &s,
                                              const RecurrentOperands &o) {
  const int64_t T = s.Steps, N = s.Batch, I = s.Inputs, H = s.Hidden;
  const int dirs = s.dirs(), G = s.gates();
  std::string op = s.Op;
  auto sigmoid = [](double v) { return 1 / (1 + std::exp(-v)); };
  auto act = [&](double v) { // RNN's f, GRU's and LSTM's g and h
    if (s.Activation && std::string(s.Activation) == "Relu")
      return v > 0 ? v : 0;
    return std::tanh(v);
  };
  Tensor y(TensorType(s.Type, {T, dirs, N, H}));
  Tensor yh(TensorType(s.Type, {dirs, N, H}));
  Tensor yc(TensorType(s.Type, {dirs, N, H}));
  for (int d = 0; d < dirs; ++d) {
    bool reverse = std::string(s.Direction) == "reverse" || d == 1;
    auto w = [&](int64_t row, int64_t i) {
      return o.W.getDouble((d * G * H + row) * I + i);
    };
    auto r = [&](int64_t row, int64_t k) {
      return o.R.getDouble((d * G * H + row) * H + k);
    };
    auto wb = [&](int64_t row) {
      return s.Bias ? o.B.getDouble(d * 2 * G * H + row) : 0.0;
    };
    auto rb = [&](int64_t row) {
      return s.Bias ? o.B.getDouble(d * 2 * G * H + G * H + row) : 0.0;
    };
    std::vector<double> h(N * H, 0.0), c(N * H, 0.0);
    for (int64_t i = 0; i < N * H; ++i) {
      if (s.InitialH)
        h[i] = o.InitialH.getDouble(d * N * H + i);
      if (s.InitialC)
        c[i] = o.InitialC.getDouble(d * N * H + i);
    }
    for (int64_t step = 0; step < T; ++step) {
      int64_t t = reverse ? T - 1 - step : step;
      std::vector<double> next(N * H), nextC(N * H);
      for (int64_t b = 0; b < N; ++b) {
        // x_t W^T + Wb and h R^T + Rb for every gate row.
        std::vector<double> xw(G * H), hr(G * H);
        for (int64_t row = 0; row < G * H; ++row) {
          double sx = wb(row), sh = rb(row);
          for (int64_t i = 0; i < I; ++i)
            sx += o.X.getDouble((t * N + b) * I + i) * w(row, i);
          for (int64_t k = 0; k < H; ++k)
            sh += h[b * H + k] * r(row, k);
          xw[row] = sx;
          hr[row] = sh;
        }
        for (int64_t j = 0; j < H; ++j) {
          double hPrev = h[b * H + j];
          if (op == "LSTM") { // gates i, o, f, c
            double ig = sigmoid(xw[j] + hr[j]);
            double og = sigmoid(xw[H + j] + hr[H + j]);
            double fg = sigmoid(xw[2 * H + j] + hr[2 * H + j]);
            double cg = std::tanh(xw[3 * H + j] + hr[3 * H + j]);
            nextC[b * H + j] = fg * c[b * H + j] + ig * cg;
            next[b * H + j] = og * std::tanh(nextC[b * H + j]);
          } else if (op == "GRU") { // gates z, r, h
            double z = sigmoid(xw[j] + hr[j]);
            double candidate;
            if (s.LinearBeforeReset) {
              double rg = sigmoid(xw[H + j] + hr[H + j]);
              candidate = std::tanh(xw[2 * H + j] + rg * hr[2 * H + j]);
            } else {
              // (r (.) h) Rh^T + Rbh: the reset gate of every unit k.
              double sum = rb(2 * H + j);
              for (int64_t k = 0; k < H; ++k) {
                double rk = sigmoid(xw[H + k] + hr[H + k]);
                sum += rk * h[b * H + k] * r(2 * H + j, k);
              }
              candidate = std::tanh(xw[2 * H + j] + sum);
            }
            next[b * H + j] = (1 - z) * candidate + z * hPrev;
          } else {
            next[b * H + j] = act(xw[j] + hr[j]);
          }
        }
      }
      h = next;
      if (op == "LSTM")
        c = nextC;
      for (int64_t i = 0; i < N * H; ++i)
        y.setDouble((t * dirs + d) * N * H + i, h[i]);
    }
    for (int64_t i = 0; i < N * H; ++i) {
      yh.setDouble(d * N * H + i, h[i]);
      yc.setDouble(d * N * H + i, c[i]);
    }
  }
  std::vector<Tensor> out = {y, yh};
  if (op == "LSTM")
    out.push_back(yc);
  return out;
}

} // namespace headroom

#endif // HEADROOM_TEST_UNIT_RECURRENTMODELS_H

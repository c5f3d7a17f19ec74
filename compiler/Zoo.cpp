//===- Zoo.cpp - Reference architectures as ONNX training graphs --------===//
//
// The graphs follow what torch.onnx.export (opset 17, training mode, no
// constant folding) writes for Hugging Face's GPT2LMHeadModel and
// LlamaForCausalLM with the loss computed in forward: linear layers are
// MatMul against [in, out] weights (+ Add for biases), attention is
// Reshape/Transpose/MatMul/Softmax, the causal mask and LLaMA's rotary tables
// are computed in the graph (an initializer would become a trainable
// parameter), and the loss is SoftmaxCrossEntropyLoss over flattened tokens.
// GPT-2 ties its output projection to the token embedding, as GPT-2 does.
//
//===----------------------------------------------------------------------===//
#include "compiler/Zoo.h"

#include "compiler/AtomicFile.h"
#include "compiler/OnnxTensor.h"
#include "compiler/Types.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"

#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <unistd.h>

using namespace headroom;

namespace {

llvm::Error err(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// External tensors start at multiples of this (page size, as ONNX's own
/// external-data writer and mmap-based loaders expect).
constexpr uint64_t kAlign = 4096;
/// Inline weights share protobuf's 2 GiB message limit with the graph.
constexpr uint64_t kMaxInlineBytes = uint64_t(1900) << 20;
/// torch's F.cross_entropy default.
constexpr int64_t kIgnoreIndex = -100;

//===----------------------------------------------------------------------===//
// Sizes
//===----------------------------------------------------------------------===//

/// Total elements of `shapes`, or None when it overflows int64.
llvm::Optional<int64_t>
elements(std::initializer_list<std::initializer_list<int64_t>> shapes) {
  int64_t total = 0;
  for (auto shape : shapes) {
    llvm::Optional<int64_t> n = 1;
    for (int64_t d : shape)
      if (!(n = llvm::checkedMul(*n, d)))
        return llvm::None;
    llvm::Optional<int64_t> sum = llvm::checkedAdd(total, *n);
    if (!sum)
      return llvm::None;
    total = *sum;
  }
  return total;
}

/// The parameter count: one shape per initializer of a block, then the
/// initializers outside the blocks. This is the formula the tests check.
llvm::Optional<int64_t> checkedParameterCount(const ZooConfig &c) {
  int64_t d = c.DModel, f = c.Ffn, v = c.Vocab, s = c.Seq;
  llvm::Optional<int64_t> block, outer;
  if (c.Arch == "gpt2") {
    // ln_1, c_attn (+bias), attn.c_proj (+bias), ln_2, c_fc (+bias),
    // mlp.c_proj (+bias); wte (also the output projection), wpe, ln_f.
    block = elements({{2, d},
                      {d, 3, d},
                      {3, d},
                      {d, d},
                      {d},
                      {2, d},
                      {d, f},
                      {f},
                      {f, d},
                      {d}});
    outer = elements({{v, d}, {s, d}, {2, d}});
  } else {
    // Two RMSNorms, q/o, k/v (kv heads of d / heads), gate/up/down;
    // embedding, final norm, lm_head.
    int64_t kv = c.Heads > 0 ? d / c.Heads * c.kvHeads() : 0;
    block = elements({{2, d}, {2, d, d}, {2, d, kv}, {3, d, f}});
    outer = elements({{v, d}, {d}, {d, v}});
  }
  if (!block || !outer)
    return llvm::None;
  llvm::Optional<int64_t> blocks = llvm::checkedMul(*block, c.Layers);
  return blocks ? llvm::checkedAdd(*blocks, *outer) : llvm::None;
}

//===----------------------------------------------------------------------===//
// Building the graph
//===----------------------------------------------------------------------===//

onnx::AttributeProto attr(const std::string &name,
                          onnx::AttributeProto::AttributeType type) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(type);
  return a;
}
onnx::AttributeProto intAttr(const std::string &name, int64_t v) {
  onnx::AttributeProto a = attr(name, onnx::AttributeProto::INT);
  a.set_i(v);
  return a;
}
onnx::AttributeProto intsAttr(const std::string &name,
                              llvm::ArrayRef<int64_t> v) {
  onnx::AttributeProto a = attr(name, onnx::AttributeProto::INTS);
  for (int64_t x : v)
    a.add_ints(x);
  return a;
}
onnx::AttributeProto floatAttr(const std::string &name, float v) {
  onnx::AttributeProto a = attr(name, onnx::AttributeProto::FLOAT);
  a.set_f(v);
  return a;
}
onnx::AttributeProto stringAttr(const std::string &name, const std::string &v) {
  onnx::AttributeProto a = attr(name, onnx::AttributeProto::STRING);
  a.set_s(v);
  return a;
}
onnx::AttributeProto tensorAttr(const std::string &name, const Tensor &v) {
  onnx::AttributeProto a = attr(name, onnx::AttributeProto::TENSOR);
  *a.mutable_t() = tensorToProto(v, name);
  return a;
}

/// How a random initializer is filled.
enum class Fill { Normal, Ones, Zeros };

/// N(0, 1) from mt19937_64 by Box-Muller: the same numbers on every standard
/// library (std::normal_distribution's algorithm is unspecified).
class NormalSource {
public:
  explicit NormalSource(uint64_t seed) : Engine(seed) {}
  double next() {
    if (HasSpare) {
      HasSpare = false;
      return Spare;
    }
    double u1 = uniform(), u2 = uniform();
    double r = std::sqrt(-2.0 * std::log(u1));
    double theta = 2.0 * llvm::numbers::pi * u2;
    Spare = r * std::sin(theta);
    HasSpare = true;
    return r * std::cos(theta);
  }

private:
  /// Uniform in (0, 1]: never 0, so the log is finite.
  double uniform() { return double((Engine() >> 11) + 1) * 0x1.0p-53; }

  std::mt19937_64 Engine;
  double Spare = 0;
  bool HasSpare = false;
};

/// Appends nodes and initializers to a graph. Nodes are named after their
/// (single or first) output; constants are created once per value.
class GraphBuilder {
public:
  GraphBuilder(onnx::GraphProto &graph, const ZooConfig &config,
               std::string dataLocation)
      : Graph(graph), Config(config), DataLocation(std::move(dataLocation)),
        Normal(config.Seed) {}

  /// Adds a node with outputs `outs`.
  void node(llvm::StringRef type, llvm::ArrayRef<std::string> inputs,
            llvm::ArrayRef<std::string> outs,
            llvm::ArrayRef<onnx::AttributeProto> attrs = {}) {
    onnx::NodeProto *n = Graph.add_node();
    n->set_op_type(type.str());
    n->set_name(outs.front());
    for (const std::string &in : inputs)
      n->add_input(in);
    for (const std::string &out : outs)
      n->add_output(out);
    for (const onnx::AttributeProto &a : attrs)
      *n->add_attribute() = a;
  }

  /// Adds a node with one output named `out`; returns `out`.
  std::string op(llvm::StringRef type, llvm::ArrayRef<std::string> inputs,
                 const std::string &out,
                 llvm::ArrayRef<onnx::AttributeProto> attrs = {}) {
    node(type, inputs, {out}, attrs);
    return out;
  }

  /// A Constant node holding `value` (one per distinct value).
  std::string constant(const Tensor &value) {
    std::string key = value.type().str();
    key.append(value.bytes().begin(), value.bytes().end());
    auto [it, inserted] = Constants.try_emplace(key);
    if (inserted)
      it->second =
          op("Constant", {}, "/Constant_" + std::to_string(NumConsts++),
             {tensorAttr("value", value)});
    return it->second;
  }
  std::string f32(double v) {
    return constant(Tensor::fromDoubles(DType::F32, {}, {v}));
  }
  std::string i64(int64_t v) {
    return constant(Tensor::fromInts(DType::I64, {}, {v}));
  }
  std::string i64s(llvm::ArrayRef<int64_t> v) {
    return constant(
        Tensor::fromInts(DType::I64, {static_cast<int64_t>(v.size())}, v));
  }

  /// A float32 initializer: drawn or constant, or a range of the side file.
  std::string weight(const std::string &name, llvm::ArrayRef<int64_t> dims,
                     Fill fill) {
    onnx::TensorProto *t = Graph.add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    uint64_t count = 1;
    for (int64_t d : dims) {
      t->add_dims(d);
      count *= d;
    }
    if (Config.Weights == ZooConfig::Weights::None)
      addExternal(*t, 4 * count);
    else
      fillRaw(*t, count, fill);
    return name;
  }

  /// Bytes of the side file the external initializers point into.
  uint64_t dataBytes() const { return DataOffset; }

private:
  void addExternal(onnx::TensorProto &t, uint64_t bytes) {
    t.set_data_location(onnx::TensorProto::EXTERNAL);
    auto entry = [&](const char *key, const std::string &value) {
      onnx::StringStringEntryProto *e = t.add_external_data();
      e->set_key(key);
      e->set_value(value);
    };
    entry("location", DataLocation);
    entry("offset", std::to_string(DataOffset));
    entry("length", std::to_string(bytes));
    DataOffset = llvm::alignTo(DataOffset + bytes, kAlign);
  }

  void fillRaw(onnx::TensorProto &t, uint64_t count, Fill fill) {
    std::string &raw = *t.mutable_raw_data();
    raw.resize(4 * count);
    for (uint64_t i = 0; i < count; ++i) {
      float v = fill == Fill::Normal ? float(0.02 * Normal.next())
                : fill == Fill::Ones ? 1.0f
                                     : 0.0f;
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      // ONNX raw_data is little-endian whatever the host is.
      llvm::support::endian::write32le(&raw[4 * i], bits);
    }
  }

  onnx::GraphProto &Graph;
  const ZooConfig &Config;
  std::string DataLocation;
  NormalSource Normal;
  uint64_t DataOffset = 0;
  std::map<std::string, std::string> Constants;
  int NumConsts = 0;
};

//===----------------------------------------------------------------------===//
// Pieces shared by both architectures
//===----------------------------------------------------------------------===//

/// x @ W (W stored [in, out]) + bias when `bias`; `name` names the weights.
std::string linear(GraphBuilder &b, const std::string &x,
                   const std::string &name, int64_t in, int64_t out, bool bias,
                   const std::string &scope) {
  std::string w = b.weight(name + ".weight", {in, out}, Fill::Normal);
  std::string y = b.op("MatMul", {x, w}, scope + "/MatMul");
  if (!bias)
    return y;
  std::string bv = b.weight(name + ".bias", {out}, Fill::Zeros);
  return b.op("Add", {y, bv}, scope + "/Add");
}

/// The causal mask, bool[seq, seq], true on and below the diagonal: what
/// `torch.tril(torch.ones(seq, seq)).bool()` exports.
std::string causalMask(GraphBuilder &b, int64_t seq) {
  std::string ones =
      b.op("ConstantOfShape", {b.i64s({seq, seq})}, "/causal_mask/ones",
           {tensorAttr("value", Tensor::fromDoubles(DType::F32, {1}, {1.0}))});
  std::string tril =
      b.op("Trilu", {ones}, "/causal_mask/tril", {intAttr("upper", 0)});
  return b.op("Cast", {tril}, "/causal_mask",
              {intAttr("to", onnx::TensorProto::BOOL)});
}

/// [b, s, heads hd] -> [b, heads, s, hd] (perm 0,2,1,3) or [b, heads, hd,
/// s] (0,2,3,1); `heads` 0 means c.Heads.
std::string splitHeads(GraphBuilder &b, const ZooConfig &c,
                       const std::string &x, llvm::ArrayRef<int64_t> perm,
                       const std::string &scope, int64_t heads = 0) {
  std::string r =
      b.op("Reshape",
           {x, b.i64s({0, c.Seq, heads ? heads : c.Heads, c.DModel / c.Heads})},
           scope + "/Reshape");
  return b.op("Transpose", {r}, scope + "/Transpose", {intsAttr("perm", perm)});
}

/// transformers' repeat_kv: [b, kv, s, hd] -> [b, heads, s, hd], each kv
/// head shared by heads / kv query heads (Unsqueeze, Expand, Reshape, as
/// torch.onnx.export writes `x[:, :, None].expand(...).reshape(...)`).
std::string repeatKv(GraphBuilder &b, const ZooConfig &c, const std::string &x,
                     const std::string &scope) {
  int64_t kv = c.kvHeads(), hd = c.DModel / c.Heads;
  if (kv == c.Heads)
    return x;
  std::string u =
      b.op("Unsqueeze", {x, b.i64s({2})}, scope + "/repeat_kv/Unsqueeze");
  std::string e = b.op("Expand", {u, b.i64s({1, 1, c.Heads / kv, 1, 1})},
                       scope + "/repeat_kv/Expand");
  return b.op("Reshape", {e, b.i64s({0, c.Heads, c.Seq, hd})},
              scope + "/repeat_kv/Reshape");
}

/// softmax(causal(q kT / sqrt(hd))) v with the heads merged back: [b, s, d].
std::string attention(GraphBuilder &b, const ZooConfig &c, const std::string &q,
                      const std::string &kt, const std::string &v,
                      const std::string &mask, const std::string &scope) {
  double hd = double(c.DModel / c.Heads);
  std::string scores = b.op("MatMul", {q, kt}, scope + "/scores");
  std::string scaled =
      b.op("Mul", {scores, b.f32(1.0 / std::sqrt(hd))}, scope + "/scaled");
  std::string masked =
      b.op("Where", {mask, scaled, b.f32(std::numeric_limits<float>::lowest())},
           scope + "/masked");
  std::string probs =
      b.op("Softmax", {masked}, scope + "/probs", {intAttr("axis", -1)});
  std::string ctx = b.op("MatMul", {probs, v}, scope + "/context");
  std::string t = b.op("Transpose", {ctx}, scope + "/merge/Transpose",
                       {intsAttr("perm", {0, 2, 1, 3})});
  return b.op("Reshape", {t, b.i64s({0, c.Seq, c.DModel})},
              scope + "/merge/Reshape");
}

/// Mean cross-entropy of the flattened logits against the flattened targets.
void crossEntropy(GraphBuilder &b, const ZooConfig &c,
                  const std::string &logits) {
  std::string flat =
      b.op("Reshape", {logits, b.i64s({-1, c.Vocab})}, "/loss/logits");
  std::string targets =
      b.op("Reshape", {"targets", b.i64s({-1})}, "/loss/targets");
  b.op(
      "SoftmaxCrossEntropyLoss", {flat, targets}, "loss",
      {stringAttr("reduction", "mean"), intAttr("ignore_index", kIgnoreIndex)});
}

//===----------------------------------------------------------------------===//
// GPT-2
//===----------------------------------------------------------------------===//

std::string layerNorm(GraphBuilder &b, const ZooConfig &c, const std::string &x,
                      const std::string &name, const std::string &scope) {
  std::string w = b.weight(name + ".weight", {c.DModel}, Fill::Ones);
  std::string bias = b.weight(name + ".bias", {c.DModel}, Fill::Zeros);
  return b.op("LayerNormalization", {x, w, bias}, scope,
              {intAttr("axis", -1), floatAttr("epsilon", 1e-5f)});
}

/// GPT-2's gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
std::string geluNew(GraphBuilder &b, const std::string &x,
                    const std::string &scope) {
  std::string cube = b.op("Pow", {x, b.f32(3.0)}, scope + "/Pow");
  std::string small = b.op("Mul", {cube, b.f32(0.044715)}, scope + "/Mul");
  std::string inner = b.op("Add", {x, small}, scope + "/Add");
  std::string arg =
      b.op("Mul", {inner, b.f32(std::sqrt(2.0 / llvm::numbers::pi))},
           scope + "/Mul_1");
  std::string t = b.op("Tanh", {arg}, scope + "/Tanh");
  std::string onePlus = b.op("Add", {t, b.f32(1.0)}, scope + "/Add_1");
  std::string half = b.op("Mul", {x, b.f32(0.5)}, scope + "/Mul_2");
  return b.op("Mul", {half, onePlus}, scope + "/Mul_3");
}

std::string gpt2Block(GraphBuilder &b, const ZooConfig &c,
                      const std::string &mask, int64_t i,
                      const std::string &x) {
  std::string p = "transformer.h." + std::to_string(i);
  std::string s = "/transformer/h." + std::to_string(i);
  int64_t d = c.DModel;
  std::string h = layerNorm(b, c, x, p + ".ln_1", s + "/ln_1");
  std::string qkv =
      linear(b, h, p + ".attn.c_attn", d, 3 * d, true, s + "/attn/c_attn");
  std::string q = s + "/attn/q", k = s + "/attn/k", v = s + "/attn/v";
  b.node("Split", {qkv, b.i64s({d, d, d})}, {q, k, v}, {intAttr("axis", 2)});
  q = splitHeads(b, c, q, {0, 2, 1, 3}, s + "/attn/q");
  k = splitHeads(b, c, k, {0, 2, 3, 1}, s + "/attn/k");
  v = splitHeads(b, c, v, {0, 2, 1, 3}, s + "/attn/v");
  std::string a = attention(b, c, q, k, v, mask, s + "/attn");
  a = linear(b, a, p + ".attn.c_proj", d, d, true, s + "/attn/c_proj");
  std::string x1 = b.op("Add", {x, a}, s + "/residual_attn");
  h = layerNorm(b, c, x1, p + ".ln_2", s + "/ln_2");
  h = linear(b, h, p + ".mlp.c_fc", d, c.Ffn, true, s + "/mlp/c_fc");
  h = geluNew(b, h, s + "/mlp/gelu");
  h = linear(b, h, p + ".mlp.c_proj", c.Ffn, d, true, s + "/mlp/c_proj");
  return b.op("Add", {x1, h}, s + "/residual_mlp");
}

void buildGpt2(GraphBuilder &b, const ZooConfig &c) {
  std::string wte =
      b.weight("transformer.wte.weight", {c.Vocab, c.DModel}, Fill::Normal);
  std::string wpe =
      b.weight("transformer.wpe.weight", {c.Seq, c.DModel}, Fill::Normal);
  std::string tok = b.op("Gather", {wte, "input_ids"},
                         "/transformer/wte/Gather", {intAttr("axis", 0)});
  std::string positions = b.op("Range", {b.i64(0), b.i64(c.Seq), b.i64(1)},
                               "/transformer/positions");
  std::string pos = b.op("Gather", {wpe, positions}, "/transformer/wpe/Gather",
                         {intAttr("axis", 0)});
  std::string x = b.op("Add", {tok, pos}, "/transformer/embeddings");
  std::string mask = causalMask(b, c.Seq);
  for (int64_t i = 0; i < c.Layers; ++i)
    x = gpt2Block(b, c, mask, i, x);
  x = layerNorm(b, c, x, "transformer.ln_f", "/transformer/ln_f");
  // lm_head is tied to wte: F.linear(x, wte) exports as MatMul(x, wte^T).
  std::string wteT = b.op("Transpose", {wte}, "/lm_head/Transpose",
                          {intsAttr("perm", {1, 0})});
  crossEntropy(b, c, b.op("MatMul", {x, wteT}, "/lm_head/MatMul"));
}

//===----------------------------------------------------------------------===//
// LLaMA
//===----------------------------------------------------------------------===//

/// x / sqrt(mean(x^2) + eps) * weight, as LlamaRMSNorm exports.
std::string rmsNorm(GraphBuilder &b, const ZooConfig &c, const std::string &x,
                    const std::string &name, const std::string &scope) {
  std::string w = b.weight(name + ".weight", {c.DModel}, Fill::Ones);
  std::string sq = b.op("Pow", {x, b.f32(2.0)}, scope + "/Pow");
  std::string var = b.op("ReduceMean", {sq}, scope + "/ReduceMean",
                         {intsAttr("axes", {-1}), intAttr("keepdims", 1)});
  std::string eps = b.op("Add", {var, b.f32(1e-6)}, scope + "/Add");
  std::string root = b.op("Sqrt", {eps}, scope + "/Sqrt");
  std::string inv = b.op("Reciprocal", {root}, scope + "/Reciprocal");
  std::string normed = b.op("Mul", {x, inv}, scope + "/Mul");
  return b.op("Mul", {normed, w}, scope + "/Mul_1");
}

struct RotaryTables {
  std::string Cos, Sin; // f32[1, 1, seq, head_dim]
};

/// cos/sin of positions * inv_freq, computed in the graph as
/// LlamaRotaryEmbedding does (base c.RopeTheta).
RotaryTables rotaryTables(GraphBuilder &b, const ZooConfig &c) {
  int64_t hd = c.DModel / c.Heads;
  std::string s = "/model/rotary_emb";
  std::string idx =
      b.op("Range", {b.f32(0), b.f32(double(hd)), b.f32(2)}, s + "/Range");
  std::string expo = b.op("Div", {idx, b.f32(double(hd))}, s + "/Div");
  std::string power = b.op("Pow", {b.f32(c.RopeTheta), expo}, s + "/Pow");
  std::string invFreq = b.op("Reciprocal", {power}, s + "/inv_freq");
  std::string t = b.op("Range", {b.f32(0), b.f32(double(c.Seq)), b.f32(1)},
                       s + "/positions");
  std::string tCol = b.op("Unsqueeze", {t, b.i64s({1})}, s + "/Unsqueeze");
  std::string fRow =
      b.op("Unsqueeze", {invFreq, b.i64s({0})}, s + "/Unsqueeze_1");
  std::string freqs = b.op("Mul", {tCol, fRow}, s + "/freqs");
  std::string emb =
      b.op("Concat", {freqs, freqs}, s + "/emb", {intAttr("axis", -1)});
  std::string shape = b.i64s({1, 1, c.Seq, hd});
  RotaryTables r;
  r.Cos = b.op("Reshape", {b.op("Cos", {emb}, s + "/Cos"), shape}, s + "/cos");
  r.Sin = b.op("Reshape", {b.op("Sin", {emb}, s + "/Sin"), shape}, s + "/sin");
  return r;
}

/// x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1).
std::string applyRotary(GraphBuilder &b, const ZooConfig &c,
                        const std::string &x, const RotaryTables &r,
                        const std::string &scope) {
  int64_t half = c.DModel / c.Heads / 2;
  std::string axes = b.i64s({3}), steps = b.i64s({1});
  std::string x1 = b.op("Slice", {x, b.i64s({0}), b.i64s({half}), axes, steps},
                        scope + "/Slice");
  std::string x2 =
      b.op("Slice",
           {x, b.i64s({half}), b.i64s({std::numeric_limits<int64_t>::max()}),
            axes, steps},
           scope + "/Slice_1");
  std::string neg = b.op("Neg", {x2}, scope + "/Neg");
  std::string rotated =
      b.op("Concat", {neg, x1}, scope + "/rotate_half", {intAttr("axis", -1)});
  std::string a = b.op("Mul", {x, r.Cos}, scope + "/Mul");
  std::string bb = b.op("Mul", {rotated, r.Sin}, scope + "/Mul_1");
  return b.op("Add", {a, bb}, scope + "/Add");
}

std::string llamaBlock(GraphBuilder &b, const ZooConfig &c,
                       const std::string &mask, const RotaryTables &rope,
                       int64_t i, const std::string &x) {
  std::string p = "model.layers." + std::to_string(i);
  std::string s = "/model/layers." + std::to_string(i);
  int64_t d = c.DModel, f = c.Ffn;
  std::string h = rmsNorm(b, c, x, p + ".input_layernorm", s + "/input_norm");
  auto heads = [&](const char *which, int64_t n) {
    std::string proj = std::string(which) + "_proj";
    std::string y = linear(b, h, p + ".self_attn." + proj, d, d / c.Heads * n,
                           false, s + "/self_attn/" + proj);
    return splitHeads(b, c, y, {0, 2, 1, 3}, s + "/self_attn/" + which, n);
  };
  std::string q = heads("q", c.Heads), k = heads("k", c.kvHeads()),
              v = heads("v", c.kvHeads());
  q = applyRotary(b, c, q, rope, s + "/self_attn/q_rope");
  k = applyRotary(b, c, k, rope, s + "/self_attn/k_rope");
  k = repeatKv(b, c, k, s + "/self_attn/k");
  v = repeatKv(b, c, v, s + "/self_attn/v");
  std::string kt = b.op("Transpose", {k}, s + "/self_attn/kT",
                        {intsAttr("perm", {0, 1, 3, 2})});
  std::string a = attention(b, c, q, kt, v, mask, s + "/self_attn");
  a = linear(b, a, p + ".self_attn.o_proj", d, d, false, s + "/self_attn/o");
  std::string x1 = b.op("Add", {x, a}, s + "/residual_attn");
  h = rmsNorm(b, c, x1, p + ".post_attention_layernorm", s + "/post_norm");
  std::string g =
      linear(b, h, p + ".mlp.gate_proj", d, f, false, s + "/mlp/gate_proj");
  std::string sig = b.op("Sigmoid", {g}, s + "/mlp/Sigmoid");
  std::string silu = b.op("Mul", {sig, g}, s + "/mlp/silu");
  std::string up =
      linear(b, h, p + ".mlp.up_proj", d, f, false, s + "/mlp/up_proj");
  std::string act = b.op("Mul", {silu, up}, s + "/mlp/Mul");
  std::string down =
      linear(b, act, p + ".mlp.down_proj", f, d, false, s + "/mlp/down_proj");
  return b.op("Add", {x1, down}, s + "/residual_mlp");
}

void buildLlama(GraphBuilder &b, const ZooConfig &c) {
  std::string embed =
      b.weight("model.embed_tokens.weight", {c.Vocab, c.DModel}, Fill::Normal);
  std::string x = b.op("Gather", {embed, "input_ids"},
                       "/model/embed_tokens/Gather", {intAttr("axis", 0)});
  RotaryTables rope = rotaryTables(b, c);
  std::string mask = causalMask(b, c.Seq);
  for (int64_t i = 0; i < c.Layers; ++i)
    x = llamaBlock(b, c, mask, rope, i, x);
  x = rmsNorm(b, c, x, "model.norm", "/model/norm");
  crossEntropy(b, c,
               linear(b, x, "lm_head", c.DModel, c.Vocab, false, "/lm_head"));
}

//===----------------------------------------------------------------------===//
// The model and its files
//===----------------------------------------------------------------------===//

void addTensorValue(
    google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> &to,
    const std::string &name, int elemType,
    llvm::ArrayRef<const char *> symbolic, llvm::ArrayRef<int64_t> dims) {
  onnx::ValueInfoProto *v = to.Add();
  v->set_name(name);
  onnx::TypeProto::Tensor *t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elemType);
  onnx::TensorShapeProto *shape = t->mutable_shape();
  for (const char *s : symbolic)
    shape->add_dim()->set_dim_param(s);
  for (int64_t d : dims)
    shape->add_dim()->set_dim_value(d);
}

/// The whole model; external initializers point into `dataLocation`.
onnx::ModelProto buildModel(const ZooConfig &c, const std::string &dataLocation,
                            uint64_t &dataBytes) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("headroom zoo");
  onnx::OperatorSetIdProto *opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(17);
  onnx::GraphProto &g = *model.mutable_graph();
  g.set_name(c.Arch);
  for (const char *in : {"input_ids", "targets"})
    addTensorValue(*g.mutable_input(), in, onnx::TensorProto::INT64, {"batch"},
                   {c.Seq});
  addTensorValue(*g.mutable_output(), "loss", onnx::TensorProto::FLOAT, {}, {});
  GraphBuilder b(g, c, dataLocation);
  if (c.Arch == "gpt2")
    buildGpt2(b, c);
  else
    buildLlama(b, c);
  dataBytes = b.dataBytes();
  return model;
}

/// Creates `path` atomically (compiler/AtomicFile.h): `fill` writes the
/// temporary file's descriptor.
static llvm::Error
writeThroughFd(llvm::StringRef path,
               llvm::function_ref<std::error_code(int fd)> fill) {
  auto file = AtomicFile::create(path);
  if (!file)
    return file.takeError();
  if (std::error_code ec = fill(file->fd()))
    return err(path + ": cannot write: " + ec.message());
  return file->commit();
}

/// A file of `bytes` zeros that occupies no blocks: its size is set, nothing
/// is written.
llvm::Error writeSparseFile(llvm::StringRef path, uint64_t bytes) {
  return writeThroughFd(path, [&](int fd) {
    if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0)
      return std::error_code(errno, std::generic_category());
    return std::error_code();
  });
}

llvm::Error writeModel(const onnx::ModelProto &model, llvm::StringRef path) {
  return writeThroughFd(path, [&](int fd) {
    if (!model.SerializeToFileDescriptor(fd))
      return std::make_error_code(std::errc::io_error);
    return std::error_code();
  });
}

std::string gigabytes(uint64_t bytes) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::format("%.2f GB", double(bytes) / 1e9);
  return os.str();
}

} // namespace

//===----------------------------------------------------------------------===//
// API
//===----------------------------------------------------------------------===//

llvm::Expected<ZooConfig> headroom::defaultZooConfig(llvm::StringRef arch) {
  ZooConfig c;
  c.Arch = arch.str();
  if (arch == "gpt2") { // GPT-2 small
    c.Layers = 12, c.DModel = 768, c.Heads = 12, c.Ffn = 3072;
    c.Vocab = 50257, c.Seq = 1024;
    return c;
  }
  if (arch == "llama") { // LLaMA-7B
    c.Layers = 32, c.DModel = 4096, c.Heads = 32, c.Ffn = 11008;
    c.Vocab = 32000, c.Seq = 512;
    return c;
  }
  struct Preset {
    const char *Name;
    int64_t Layers, DModel, Heads, KvHeads, Ffn, Vocab, Seq;
    double RopeTheta;
  };
  // Each model's config.json (Hugging Face), at its context length.
  static const Preset presets[] = {
      {"llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096, 10000},
      {"llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096, 10000},
      {"llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096, 10000},
      {"llama-65b", 80, 8192, 64, 64, 22016, 32000, 2048, 10000},
      {"llama3.1-8b", 32, 4096, 32, 8, 14336, 128256, 8192, 500000},
  };
  for (const Preset &p : presets)
    if (arch == p.Name) {
      c.Arch = "llama";
      c.Layers = p.Layers, c.DModel = p.DModel, c.Heads = p.Heads;
      c.KvHeads = p.KvHeads, c.Ffn = p.Ffn, c.Vocab = p.Vocab, c.Seq = p.Seq;
      c.RopeTheta = p.RopeTheta;
      return c;
    }
  return err("unknown architecture '" + arch +
             "': expected gpt2, llama or a preset (llama2-7b, llama2-13b, "
             "llama2-70b, llama-65b, llama3.1-8b)");
}

llvm::ArrayRef<std::pair<const char *, const char *>> headroom::zooPresets() {
  static const std::pair<const char *, const char *> presets[] = {
      {"llama2-7b", "Llama-2 7B (seq 4096)"},
      {"llama2-13b", "Llama-2 13B (seq 4096)"},
      {"llama2-70b", "Llama-2 70B, 8 key/value heads (seq 4096)"},
      {"llama-65b", "LLaMA-65B (seq 2048)"},
      {"llama3.1-8b",
       "Llama-3.1 8B, 8 key/value heads, rope theta 500000 (seq 8192)"}};
  return presets;
}

llvm::Error headroom::validateZooConfig(const ZooConfig &c) {
  if (c.Arch != "gpt2" && c.Arch != "llama")
    return err("unknown architecture '" + c.Arch + "': expected gpt2 or llama");
  std::pair<const char *, int64_t> sizes[] = {
      {"layers", c.Layers}, {"d-model", c.DModel}, {"heads", c.Heads},
      {"ffn", c.Ffn},       {"vocab", c.Vocab},    {"seq", c.Seq}};
  for (auto [flag, value] : sizes)
    if (value <= 0)
      return err(llvm::Twine("--") + flag + " " + llvm::Twine(value) +
                 ": must be positive");
  if (c.DModel % c.Heads)
    return err("--d-model " + llvm::Twine(c.DModel) +
               " is not divisible by --heads " + llvm::Twine(c.Heads));
  if (c.KvHeads < 0 || (c.KvHeads && c.Arch != "llama"))
    return err("--kv-heads " + llvm::Twine(c.KvHeads) +
               ": grouped-query heads are llama's (a positive count)");
  if (c.Heads % c.kvHeads())
    return err("--heads " + llvm::Twine(c.Heads) +
               " is not divisible by --kv-heads " + llvm::Twine(c.kvHeads()));
  int64_t hd = c.DModel / c.Heads;
  if (c.Arch == "llama" && hd % 2)
    return err("llama needs an even head dimension for its rotary "
               "embedding; --d-model " +
               llvm::Twine(c.DModel) + " / --heads " + llvm::Twine(c.Heads) +
               " = " + llvm::Twine(hd));
  llvm::Optional<int64_t> params = checkedParameterCount(c);
  if (!params || *params > (int64_t(1) << 56))
    return err("the model is too large: over 2^56 parameters");
  uint64_t bytes = 4 * uint64_t(*params);
  if (c.Weights == ZooConfig::Weights::Random && bytes > kMaxInlineBytes)
    return err("random weights take " + gigabytes(bytes) +
               ", more than one ONNX file can hold (2 GiB); use --weights "
               "none to compile and report without them");
  return llvm::Error::success();
}

int64_t headroom::zooParameterCount(const ZooConfig &config) {
  return checkedParameterCount(config).getValueOr(-1);
}

llvm::Expected<ZooSummary> headroom::writeZooModel(const ZooConfig &config,
                                                   llvm::StringRef outPath) {
  if (auto e = validateZooConfig(config))
    return e;
  llvm::StringRef fileName = llvm::sys::path::filename(outPath);
  if (fileName.empty() || fileName == "." || fileName == "..")
    return err("'" + outPath + "' is not a file name");
  bool external = config.Weights == ZooConfig::Weights::None;
  ZooSummary s;
  s.ModelPath = outPath.str();
  s.Parameters = zooParameterCount(config);
  s.ParameterBytes = 4 * uint64_t(s.Parameters);
  onnx::ModelProto model = buildModel(
      config, external ? (fileName + ".data").str() : "", s.DataBytes);
  s.Nodes = model.graph().node_size();
  for (const onnx::NodeProto &n : model.graph().node())
    ++s.OpCounts[n.op_type()];
  if (external) {
    s.DataPath = (outPath + ".data").str();
    if (auto e = writeSparseFile(s.DataPath, s.DataBytes))
      return e;
  }
  if (auto e = writeModel(model, outPath))
    return e;
  return s;
}

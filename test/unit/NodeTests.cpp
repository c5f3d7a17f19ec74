//===- NodeTests.cpp - Reading ONNX's backend node tests ------------------===//
#include "NodeTests.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <onnx/defs/schema.h>

#include <algorithm>
#include <cstdlib>

using namespace headroom;

/// The node tests of one folder; names get `suffix`.
static void loadNodeTestsFrom(const std::string &dir, llvm::StringRef suffix,
                              bool newer, std::vector<NodeTestCase> &out) {
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec)) {
    NodeTestCase c;
    c.Dir = it->path();
    c.Name = llvm::sys::path::filename(it->path()).str();
    c.Newer = newer;
    auto buf = llvm::MemoryBuffer::getFile(c.Dir + "/model.onnx");
    if (!buf)
      continue;
    c.Bytes = (*buf)->getBuffer().str();
    if (!c.Proto.ParseFromString(c.Bytes))
      continue;
    if (!suffix.empty())
      for (const auto &op : c.Proto.opset_import())
        if (op.domain().empty() || op.domain() == "ai.onnx")
          c.Name += suffix.str() + std::to_string(op.version());
    out.push_back(std::move(c));
  }
}

std::vector<NodeTestCase> headroom::loadNodeTests() {
  std::vector<NodeTestCase> out;
  // HEADROOM_ONNX_NODE_TESTS in the environment overrides where the build
  // found them (test/gpu's prebuilt binary runs on a machine without the
  // package, bench/gpu-bundle.sh).
  const char *env = std::getenv("HEADROOM_ONNX_NODE_TESTS");
  std::string dir = env && *env ? env : HEADROOM_ONNX_NODE_TESTS;
  loadNodeTestsFrom(dir, "", /*newer=*/false, out);
  // ONNX 1.19's tests of op versions after opset 17, in the checkout
  // (test/models/node/make_node_tests.py), named `test_x@opset`.
  const char *src = std::getenv("HEADROOM_SOURCE_DIR");
  loadNodeTestsFrom(std::string(src && *src ? src : HEADROOM_SOURCE_DIR) +
                        "/test/models/node",
                    "@", /*newer=*/true, out);
  std::sort(out.begin(), out.end(),
            [](const auto &a, const auto &b) { return a.Name < b.Name; });
  return out;
}

std::string headroom::whyNotAccepted(const NodeTestCase &c) {
  const onnx::ModelProto &m = c.Proto;
  int opset = 0;
  for (const auto &op : m.opset_import())
    if (op.domain().empty() || op.domain() == "ai.onnx")
      opset = static_cast<int>(op.version());
  for (const auto &n : m.graph().node()) {
    const OpInfo *info = lookupOp(n.op_type());
    if (!n.domain().empty() && n.domain() != "ai.onnx")
      return "domain " + n.domain();
    // The newer tests were chosen for ops headroom reads, function ops
    // (Gelu, Attention, RMSNormalization, ...) among them: each must pass
    // or be listed with its reason.
    if ((!info || !info->has(opflags::Onnx)) &&
        !importerExpandsOp(n.op_type()) && !c.Newer)
      return "op " + n.op_type();
    auto *then = onnx::OpSchemaRegistry::Schema(n.op_type(), opset, "");
    if (!then || !opVersionProblem(n.op_type(), opset).empty())
      return "op version " + n.op_type() + "-" +
             std::to_string(then ? then->since_version() : 0);
  }
  return "";
}

llvm::Expected<std::vector<NodeTestData>>
headroom::loadNodeTestData(const NodeTestCase &c) {
  std::vector<NodeTestData> sets;
  for (int s = 0;; ++s) {
    std::string dir = c.Dir + "/test_data_set_" + std::to_string(s);
    if (!llvm::sys::fs::is_directory(dir))
      break;
    NodeTestData d;
    for (int k = 0;; ++k) {
      std::string pb = dir + "/input_" + std::to_string(k) + ".pb";
      if (!llvm::sys::fs::exists(pb))
        break;
      auto t = readTensorProtoFile(pb);
      if (!t)
        return t.takeError();
      d.Inputs.push_back(std::move(*t));
    }
    for (int k = 0;; ++k) {
      std::string pb = dir + "/output_" + std::to_string(k) + ".pb";
      if (!llvm::sys::fs::exists(pb))
        break;
      auto t = readTensorProtoFile(pb);
      if (!t)
        return t.takeError();
      d.Outputs.push_back(std::move(*t));
    }
    sets.push_back(std::move(d));
  }
  return sets;
}

llvm::Expected<std::unique_ptr<Module>>
headroom::importNodeTest(const NodeTestCase &c,
                         std::map<std::string, Tensor> &constants) {
  ImportOptions options;
  options.AllOutputs = true;
  constants.clear();
  auto m = importOnnxBuffer(c.Bytes, c.Name, c.Dir, options);
  if (m)
    return m;
  std::string error = llvm::toString(m.takeError());
  if (error.find("cannot determine a static shape") == std::string::npos)
    return llvm::createStringError(llvm::inconvertibleErrorCode(), error);
  int index = 0;
  for (const auto &in : c.Proto.graph().input()) {
    std::string pb =
        c.Dir + "/test_data_set_0/input_" + std::to_string(index++) + ".pb";
    auto t = readTensorProtoFile(pb);
    if (!t) {
      llvm::consumeError(t.takeError());
      continue;
    }
    if (!isFloat(t->type().dtype()) || t->type().rank() == 0)
      constants.emplace(in.name(), std::move(*t));
  }
  options.ConstantInputs = constants;
  return importOnnxBuffer(c.Bytes, c.Name, c.Dir, options);
}

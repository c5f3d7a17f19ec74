//===- OnnxNodeTest.cpp - ONNX's backend node tests import and verify -----===//
//
// libonnx-testdata ships one small model per ONNX operator test
// (/usr/share/libonnx-testdata/data/node/test_<op>_<case>/model.onnx). Every
// test whose operators headroom accepts must import and verify; the ones that
// do not are listed below with the reason, and the list is kept honest: an
// entry that starts passing fails the test. Every ONNX op in Ops.def must be
// covered by at least one node test.
//
// Kernels are checked against the tests' input/output .pb files by the CPU
// backend's own suite; this one covers import only.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "compiler/OnnxImport.h"
#include "compiler/Verifier.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <map>
#include <set>

using namespace headroom;

namespace {

/// Node tests whose ops headroom lists but which it cannot import, and why.
const std::map<std::string, std::string> kExpectedFailures = {
    {"test_cast_FLOAT_to_STRING", "string tensors"},
    {"test_cast_STRING_to_FLOAT", "string tensors"},
    {"test_castlike_FLOAT_to_STRING_expanded", "string tensors"},
    {"test_castlike_STRING_to_FLOAT_expanded", "string tensors"},
    {"test_identity_opt", "optional types"},
    {"test_identity_sequence", "sequence types"},
};

struct NodeTestCase {
  std::string Dir, Name;
};

std::vector<NodeTestCase> allNodeTests() {
  std::vector<NodeTestCase> out;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(HEADROOM_ONNX_NODE_TESTS, ec), end;
       it != end && !ec; it.increment(ec))
    out.push_back({it->path(), llvm::sys::path::filename(it->path()).str()});
  std::sort(out.begin(), out.end(),
            [](const auto &a, const auto &b) { return a.Name < b.Name; });
  return out;
}

/// Why headroom need not accept this model, or "" when it must: an op it
/// does not list, or an op version older than the semantics it implements.
std::string whyNotAccepted(const onnx::ModelProto &m) {
  int opset = 0;
  for (const auto &op : m.opset_import())
    if (op.domain().empty() || op.domain() == "ai.onnx")
      opset = static_cast<int>(op.version());
  for (const auto &n : m.graph().node()) {
    const OpInfo *info = lookupOp(n.op_type());
    if (!n.domain().empty() && n.domain() != "ai.onnx")
      return "domain " + n.domain();
    if (!info || !info->has(opflags::Onnx))
      return "op " + n.op_type();
    auto *then = onnx::OpSchemaRegistry::Schema(n.op_type(), opset, "");
    auto *now = onnx::OpSchemaRegistry::Schema(n.op_type(), kMaxOpset, "");
    if (!then || !now || then->since_version() != now->since_version())
      return "op version " + n.op_type() + "-" +
             std::to_string(then ? then->since_version() : 0);
  }
  return "";
}

/// The test's integer and scalar inputs (test_data_set_0), to bind as
/// constants when they decide a shape (Reshape's target, Range's limit...).
std::map<std::string, Tensor> integerInputs(const onnx::ModelProto &m,
                                            const std::string &dir) {
  std::map<std::string, Tensor> out;
  int index = 0;
  for (const auto &in : m.graph().input()) {
    std::string pb =
        dir + "/test_data_set_0/input_" + std::to_string(index++) + ".pb";
    auto t = readTensorProtoFile(pb);
    if (!t) {
      llvm::consumeError(t.takeError());
      continue;
    }
    if (!isFloat(t->type().dtype()) || t->type().rank() == 0)
      out.emplace(in.name(), std::move(*t));
  }
  return out;
}

TEST(OnnxNodeTest, AcceptedModelsImportAndVerify) {
  std::vector<NodeTestCase> cases = allNodeTests();
  if (cases.empty())
    GTEST_SKIP() << "libonnx-testdata is not installed";
  std::map<std::string, unsigned> coverage;
  std::set<std::string> unexpectedPass;
  unsigned imported = 0, notAccepted = 0, expanded = 0;
  for (const NodeTestCase &c : cases) {
    std::string path = c.Dir + "/model.onnx";
    auto buf = llvm::MemoryBuffer::getFile(path);
    ASSERT_TRUE(static_cast<bool>(buf)) << path;
    onnx::ModelProto proto;
    ASSERT_TRUE(
        proto.ParseFromArray((*buf)->getBufferStart(), (*buf)->getBufferSize()))
        << path;
    ImportOptions options;
    options.AllOutputs = true;
    if (!whyNotAccepted(proto).empty()) {
      // Not required to import, but it must fail cleanly or give valid IR
      // (ONNX function ops expand into supported ops this way).
      ++notAccepted;
      auto m = importOnnxBuffer((*buf)->getBuffer(), c.Name, c.Dir, options);
      if (!m) {
        llvm::consumeError(m.takeError());
        continue;
      }
      EXPECT_EQ(errorOf(verifyModule(**m)), "") << c.Name;
      ++expanded;
      continue;
    }
    auto m = importOnnxBuffer((*buf)->getBuffer(), c.Name, c.Dir, options);
    std::string error;
    if (!m)
      error = llvm::toString(m.takeError());
    if (error.find("cannot determine a static shape") != std::string::npos) {
      options.ConstantInputs = integerInputs(proto, c.Dir);
      m = importOnnxBuffer((*buf)->getBuffer(), c.Name, c.Dir, options);
      error = m ? "" : llvm::toString(m.takeError());
    }
    if (m)
      error = errorOf(verifyModule(**m));
    auto expected = kExpectedFailures.find(c.Name);
    if (expected != kExpectedFailures.end()) {
      EXPECT_NE(error, "") << c.Name << " is listed as failing ("
                           << expected->second << ") but now imports";
      continue;
    }
    EXPECT_EQ(error, "") << c.Name;
    if (!error.empty())
      continue;
    ++imported;
    for (const auto &n : proto.graph().node())
      ++coverage[n.op_type()];
  }
  for (const OpInfo &op : allOps()) {
    if (!op.has(opflags::Onnx))
      continue;
    EXPECT_GT(coverage[op.Name.str()], 0u)
        << op.Name.str() << " is not covered by any ONNX node test";
  }
  std::cout << "[ node tests ] " << imported << " imported and verified, "
            << kExpectedFailures.size() << " listed failures, " << notAccepted
            << " use ops or op versions headroom does not list (" << expanded
            << " of them import by expanding ONNX functions)\n";
}

} // namespace

//===- OnnxNodeTest.cpp - ONNX's backend node tests import and verify -----===//
//
// Every node test whose operators headroom accepts must import and verify;
// the ones that do not are listed below with the reason, and the list is kept
// honest: an entry that starts passing fails the test. Every ONNX op in
// Ops.def must be covered by at least one node test. Kernels are checked
// against the tests' outputs by CpuNodeTest.cpp.
//
//===----------------------------------------------------------------------===//
#include "NodeTests.h"
#include "TestUtil.h"
#include "compiler/Verifier.h"

#include <iostream>
#include <map>

using namespace headroom;

namespace {

/// Node tests whose ops headroom lists but which it cannot import, and why.
const std::map<std::string, std::string> kExpectedFailures = {
    {"test_cast_FLOAT_to_STRING", "string tensors"},
    {"test_cast_STRING_to_FLOAT", "string tensors"},
    {"test_castlike_FLOAT_to_STRING_expanded", "string tensors"},
    {"test_castlike_STRING_to_FLOAT_expanded", "string tensors"},
    {"test_identity_opt", "optional types"},
    {"test_gru_batchwise", "GRU layout 1 (torch does not emit it)"},
    {"test_lstm_batchwise", "LSTM layout 1 (torch does not emit it)"},
    {"test_lstm_with_peepholes", "LSTM peepholes (torch does not emit them)"},
    {"test_identity_sequence", "sequence types"},
    {"test_simple_rnn_batchwise", "RNN layout 1 (torch does not emit it)"},
};

TEST(OnnxNodeTest, AcceptedModelsImportAndVerify) {
  std::vector<NodeTestCase> cases = loadNodeTests();
  if (cases.empty())
    GTEST_SKIP() << "libonnx-testdata is not installed";
  std::map<std::string, unsigned> coverage;
  unsigned imported = 0, notAccepted = 0, expanded = 0;
  for (const NodeTestCase &c : cases) {
    std::map<std::string, Tensor> constants;
    auto m = importNodeTest(c, constants);
    std::string error =
        m ? errorOf(verifyModule(**m)) : llvm::toString(m.takeError());
    if (!whyNotAccepted(c).empty()) {
      // Not required to import, but it must fail cleanly or give valid IR
      // (ONNX function ops expand into supported ops this way).
      ++notAccepted;
      if (m) {
        EXPECT_EQ(error, "") << c.Name;
        ++expanded;
      }
      continue;
    }
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
    for (const auto &n : c.Proto.graph().node())
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

//===- NodeTests.h - Reading ONNX's backend node tests --------------------===//
//
// libonnx-testdata ships one directory per ONNX operator test:
// model.onnx plus test_data_set_N/{input,output}_K.pb. Shared by the import
// suite (OnnxNodeTest.cpp) and the CPU kernel suite (CpuNodeTest.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_TEST_UNIT_NODETESTS_H
#define HEADROOM_TEST_UNIT_NODETESTS_H

#include "compiler/IR.h"
#include "compiler/OnnxImport.h"

#include <onnx/onnx_pb.h>

#include <map>
#include <string>
#include <vector>

namespace headroom {

struct NodeTestCase {
  std::string Dir, Name;
  /// From test/models/node (op versions after opset 17), not Debian's.
  bool Newer = false;
  onnx::ModelProto Proto;
  std::string Bytes;
};

/// Every node test directory, sorted by name: libonnx-testdata's, and
/// test/models/node's (op versions after opset 17, named `test_x@opset`).
std::vector<NodeTestCase> loadNodeTests();

/// Why headroom need not accept this model, or "" when it must: an op it
/// does not list, or an op version older than the semantics it implements.
std::string whyNotAccepted(const NodeTestCase &c);

/// Imports a node test with all outputs returned. When a shape depends on an
/// input's value, integer and scalar inputs of test_data_set_0 are bound as
/// constants (recorded in `constants`).
llvm::Expected<std::unique_ptr<Module>>
importNodeTest(const NodeTestCase &c, std::map<std::string, Tensor> &constants);

/// The data sets of a test: inputs and expected outputs, by graph position.
struct NodeTestData {
  std::vector<Tensor> Inputs, Outputs;
};
llvm::Expected<std::vector<NodeTestData>>
loadNodeTestData(const NodeTestCase &c);

} // namespace headroom

#endif // HEADROOM_TEST_UNIT_NODETESTS_H

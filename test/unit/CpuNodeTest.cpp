//===- CpuNodeTest.cpp - CPU kernels against ONNX's node-test outputs -----===//
//
// Every node test that imports (see OnnxNodeTest.cpp) runs on the CPU
// executor with each of its data sets, and its outputs must match ONNX's
// within tolerance: floats |got - want| <= 1e-5 + 1e-4 |want| (f16/bf16:
// 1e-3 + 1e-2 |want|, their precision), integers and bools exactly.
//
// A test that does not pass must be listed, with the reason, in
// test/unit/cpu_node_exceptions/<family>.txt (`test_name: reason`); a listed
// test that passes fails this suite, so the lists stay true.
//
//===----------------------------------------------------------------------===//
#include "NodeTests.h"
#include "TestUtil.h"
#include "kernels/cpu/CpuTarget.h"
#include "kernels/cuda/CudaTarget.h"
#include "runtime/Executor.h"
#include "runtime/cuda/CudaExecutor.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cmath>
#include <iostream>

using namespace headroom;

namespace {

std::map<std::string, std::string> loadExceptions(const char *folder) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  std::string dir = std::string(HEADROOM_SOURCE_DIR) + "/test/unit/" + folder;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec)) {
    auto buf = llvm::MemoryBuffer::getFile(it->path());
    if (!buf)
      continue;
    llvm::SmallVector<llvm::StringRef, 64> lines;
    (*buf)->getBuffer().split(lines, '\n');
    for (llvm::StringRef line : lines) {
      line = line.trim();
      if (line.empty() || line.startswith("#"))
        continue;
      auto [name, reason] = line.split(':');
      out[name.trim().str()] = reason.trim().str();
    }
  }
  return out;
}

/// "" when `got` matches `want`, else what differs.
std::string compare(const Tensor &got, const Tensor &want) {
  if (got.type() != want.type())
    return "type " + got.type().str() + ", expected " + want.type().str();
  DType t = want.type().dtype();
  bool lowp = t == DType::F16 || t == DType::BF16;
  double atol = lowp ? 1e-3 : 1e-5, rtol = lowp ? 1e-2 : 1e-4;
  for (int64_t i = 0; i < want.numElements(); ++i) {
    if (isFloat(t)) {
      double g = got.getDouble(i), w = want.getDouble(i);
      if (std::isnan(w)
              ? std::isnan(g)
              : (g == w || std::fabs(g - w) <= atol + rtol * std::fabs(w)))
        continue;
      return "element " + std::to_string(i) + " is " + std::to_string(g) +
             ", expected " + std::to_string(w);
    }
    if (got.getInt(i) != want.getInt(i))
      return "element " + std::to_string(i) + " is " +
             std::to_string(got.getInt(i)) + ", expected " +
             std::to_string(want.getInt(i));
  }
  return "";
}

/// Runs every data set of one test; "" when all outputs match. On the cuda
/// target, `notLowered` is set when the target refuses the model (an op or
/// type outside its contract) instead.
std::string runNodeTest(const NodeTestCase &c, bool onCuda = false,
                        bool *notLowered = nullptr) {
  std::map<std::string, Tensor> constants;
  auto m = importNodeTest(c, constants);
  if (!m)
    return "import: " + llvm::toString(m.takeError());
  auto plan = lowerModule(**m, onCuda ? cudaTarget() : cpuTarget());
  if (!plan) {
    if (notLowered)
      *notLowered = true;
    return "lower: " + llvm::toString(plan.takeError());
  }
  auto exec = onCuda ? createEmulatedCudaExecutor(std::move(*plan))
                     : createCpuExecutor(std::move(*plan));
  if (!exec)
    return "executor: " + llvm::toString(exec.takeError());
  auto sets = loadNodeTestData(c);
  if (!sets)
    return "data: " + llvm::toString(sets.takeError());
  const Function &f = *(*m)->functions()[0];
  for (size_t s = 0; s < sets->size(); ++s) {
    const NodeTestData &d = (*sets)[s];
    std::vector<const Tensor *> args;
    for (Value *a : f.arguments()) {
      int index = 0;
      for (const auto &in : c.Proto.graph().input()) {
        if (in.name() == a->name())
          break;
        ++index;
      }
      if (index >= static_cast<int>(d.Inputs.size()))
        return "no data for input '" + a->name() + "'";
      args.push_back(&d.Inputs[index]);
    }
    auto results = (*exec)->run("forward", args);
    if (!results)
      return llvm::toString(results.takeError());
    if (results->size() != d.Outputs.size())
      return "returned " + std::to_string(results->size()) +
             " outputs, expected " + std::to_string(d.Outputs.size());
    for (size_t k = 0; k < d.Outputs.size(); ++k) {
      std::string diff = compare((*results)[k], d.Outputs[k]);
      if (!diff.empty())
        return "data set " + std::to_string(s) + ", output " +
               std::to_string(k) + ": " + diff;
    }
  }
  return "";
}

TEST(CpuNodeTest, KernelsMatchOnnxOutputs) {
  std::vector<NodeTestCase> cases = loadNodeTests();
  if (cases.empty())
    GTEST_SKIP() << "libonnx-testdata is not installed";
  std::map<std::string, std::string> exceptions =
      loadExceptions("cpu_node_exceptions");
  unsigned passed = 0, listed = 0;
  for (const NodeTestCase &c : cases) {
    if (!whyNotAccepted(c).empty())
      continue;
    std::map<std::string, Tensor> constants;
    auto m = importNodeTest(c, constants);
    if (!m) { // OnnxNodeTest covers import failures
      llvm::consumeError(m.takeError());
      continue;
    }
    std::string error = runNodeTest(c);
    auto listedIt = exceptions.find(c.Name);
    if (listedIt != exceptions.end()) {
      ++listed;
      EXPECT_NE(error, "") << c.Name << " is listed in cpu_node_exceptions ("
                           << listedIt->second << ") but passes";
      continue;
    }
    EXPECT_EQ(error, "") << c.Name;
    passed += error.empty();
  }
  std::cout << "[ cpu kernels ] " << passed << " node tests pass, " << listed
            << " listed as unsupported\n";
}

// The CUDA kernels and executor (on the emulator) against the same outputs:
// every test the CPU passes must pass on cuda, unless the cuda target
// refuses its model when the plan is made (an op or element type outside
// cudaHasKernel's: counted, not failed) or it is listed with the
// reason in test/unit/cuda_node_exceptions/.
TEST(CudaNodeTest, EmulatedKernelsMatchOnnxOutputs) {
  std::vector<NodeTestCase> cases = loadNodeTests();
  if (cases.empty())
    GTEST_SKIP() << "libonnx-testdata is not installed";
  std::map<std::string, std::string> cpuExceptions =
      loadExceptions("cpu_node_exceptions");
  std::map<std::string, std::string> exceptions =
      loadExceptions("cuda_node_exceptions");
  unsigned passed = 0, refused = 0, listed = 0;
  for (const NodeTestCase &c : cases) {
    if (!whyNotAccepted(c).empty() || cpuExceptions.count(c.Name))
      continue;
    std::map<std::string, Tensor> constants;
    auto m = importNodeTest(c, constants);
    if (!m) {
      llvm::consumeError(m.takeError());
      continue;
    }
    bool notLowered = false;
    std::string error = runNodeTest(c, /*onCuda=*/true, &notLowered);
    if (notLowered) {
      ++refused;
      continue;
    }
    auto listedIt = exceptions.find(c.Name);
    if (listedIt != exceptions.end()) {
      ++listed;
      EXPECT_NE(error, "") << c.Name << " is listed in cuda_node_exceptions ("
                           << listedIt->second << ") but passes";
      continue;
    }
    EXPECT_EQ(error, "") << c.Name;
    passed += error.empty();
  }
  std::cout << "[ cuda kernels, emulated ] " << passed << " node tests pass, "
            << refused << " refused by the cuda target, " << listed
            << " listed as unsupported\n";
}

} // namespace

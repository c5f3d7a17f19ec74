//===- headroom.cpp - The headroom command line ---------------------------===//
//
// One binary with subcommands (README.md, docs/training.md, docs/memory.md).
// Every failure a user can cause prints one line `headroom: error: ...` and
// exits with status 1.
//
//===----------------------------------------------------------------------===//
#include "compiler/OnnxImport.h"
#include "compiler/OpInfo.h"
#include "compiler/Parser.h"
#include "compiler/Printer.h"
#include "passes/PassManager.h"
#include "passes/Passes.h"
#include "pipeline/Compile.h"
#include "runtime/Devices.h"
#include "runtime/Executor.h"
#include "runtime/Report.h"
#include "tools/Diagnostics.h"
#include "tools/Flags.h"

#include "Version.inc"

#include "llvm/ADT/StringMap.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

#include <onnx/onnx_pb.h>

#include <cstdlib>
#include <map>
#include <unistd.h>

using namespace headroom;
namespace cl = llvm::cl;

static cl::OptionCategory Category("headroom options");
static cl::SubCommand OptCmd("opt", "Run passes on a model and print the IR");
static cl::SubCommand DevicesCmd("devices",
                                 "List the devices the runtime can use");
cl::SubCommand ZooCmd("zoo", "Write a reference architecture (gpt2, llama) "
                             "as an ONNX training graph");
cl::SubCommand ReportCmd("report", "Compile the training step and print its "
                                   "memory report (no data, no run)");
cl::SubCommand CompileCmd("compile", "Compile the training step into a plan "
                                     "file and print its memory report");
cl::SubCommand RunCmd("run", "Run a compiled plan on data");
cl::SubCommand TrainCmd("train", "Compile the training step and run it on "
                                 "data");

static cl::opt<bool> AllOutputs(
    "all-outputs",
    cl::desc("Return every graph output instead of requiring a scalar loss"),
    cl::sub(OptCmd), cl::cat(Category));

// headroom opt
static cl::opt<std::string> OptInput(cl::Positional,
                                     cl::desc("<model.onnx|file.hr|->"),
                                     cl::sub(OptCmd), cl::init("-"));
static cl::opt<std::string>
    PassList("passes",
             cl::desc("Comma-separated passes to run (default: canonicalize; "
                      "--passes= runs none)"),
             cl::value_desc("a,b"), cl::init("canonicalize"), cl::sub(OptCmd),
             cl::cat(Category));
static cl::opt<bool> PrintAfterAll("print-after-all",
                                   cl::desc("Print the IR before and after "
                                            "every pass"),
                                   cl::sub(OptCmd), cl::cat(Category));
static cl::opt<bool> SplitInputFile(
    "split-input-file",
    cl::desc("Treat each '// -----' separated chunk of textual IR as its own "
             "module (for tests)"),
    cl::sub(OptCmd), cl::cat(Category));
static cl::opt<bool>
    NoVerify("no-verify", cl::desc("Do not run the verifier between passes"),
             cl::sub(OptCmd), cl::cat(Category));
static cl::opt<bool> Stats("stats",
                           cl::desc("After the IR, print a summary: ops, "
                                    "parameters, bytes"),
                           cl::sub(OptCmd), cl::cat(Category));
static cl::opt<bool> ListPasses("list-passes",
                                cl::desc("List the registered passes and exit"),
                                cl::sub(OptCmd), cl::cat(Category));
static cl::opt<bool> ListOps("list-ops",
                             cl::desc("List the supported ops and exit"),
                             cl::sub(OptCmd), cl::cat(Category));
static cl::opt<bool> Markdown("markdown",
                              cl::desc("With --list-passes/--list-ops: print "
                                       "the Markdown of docs/"),
                              cl::sub(OptCmd), cl::cat(Category));
static cl::opt<std::string> OutputFile("o", cl::desc("Output file"),
                                       cl::value_desc("file"), cl::init("-"),
                                       cl::sub(OptCmd), cl::cat(Category));

static cl::opt<bool> CompileStep(
    "compile",
    cl::desc("Print the step `headroom compile` makes with the training "
             "flags (instead of --passes), after its pass pipeline"),
    cl::sub(OptCmd), cl::cat(Category));

int runTrain(const CompileOptions &options);          // tools/Train.cpp
int runZoo();                                         // tools/Zoo.cpp
int runReport(const CompileOptions &options);         // tools/Train.cpp
int runRecomputeSweep(const CompileOptions &options); // tools/Train.cpp
int runReportOfPlan();                                // tools/Train.cpp
bool modelIsPlan();                                   // tools/Train.cpp
int runCompile(const CompileOptions &options);        // tools/Train.cpp
int runRun();                                         // tools/Train.cpp

/// The import options the flags give (`headroom opt` without --compile).
static llvm::Expected<ImportOptions> importOptionsGiven() {
  auto options = importOptionsFromFlags(givenCompileFlags());
  if (options)
    options->AllOutputs = AllOutputs;
  return options;
}

/// Whether `--recompute sweep` was given (report's frontier, not a policy).
static bool recomputeSweep() {
  for (const auto &[name, value] : givenCompileFlags())
    if (name == "recompute" && value == "sweep")
      return true;
  return false;
}

/// `--memory-budget device`: the memory free now on the device the plan is
/// for (the first GPU for cuda, available RAM for the cpu).
static llvm::Error resolveDeviceBudget(FlagList &flags) {
  std::string device = defaultDevice();
  for (const auto &[name, value] : flags)
    if (name == "device" && value != "auto")
      device = value;
  for (auto &[name, value] : flags) {
    if (name != "memory-budget" || value != "device")
      continue;
    std::string note;
    for (const DeviceInfo &d : listDevices(&note))
      if (d.Backend == device && d.FreeBytes) {
        value = std::to_string(d.FreeBytes);
        break;
      }
    if (value == "device")
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "--memory-budget device: no %s device with a known free memory "
          "here%s%s",
          device.c_str(), note.empty() ? "" : ": ", note.c_str());
  }
  return llvm::Error::success();
}

/// The compile options the flags give; --device auto is this machine's.
static llvm::Expected<CompileOptions> compileOptionsGiven() {
  FlagList flags = givenCompileFlags();
  if (auto e = resolveDeviceBudget(flags))
    return e;
  llvm::erase_if(flags, [](const auto &f) {
    return f.first == "recompute" && f.second == "sweep";
  });
  auto options = compileOptionsFromFlags(flags, defaultDevice());
  if (options)
    options->Import.AllOutputs = AllOutputs;
  // Offloaded candidates' pinned pools must fit this host unless told.
  if (options && options->AllowOffload && !options->HostMemoryBudget)
    options->HostMemoryBudget = availableCpuBytes();
  return options;
}

/// Imports .onnx or parses textual IR, by extension ("-" is textual IR).
static llvm::Expected<std::unique_ptr<Module>>
loadModule(llvm::StringRef path) {
  if (path.endswith(".onnx")) {
    auto options = importOptionsGiven();
    if (!options)
      return options.takeError();
    return importOnnxFile(path, *options);
  }
  auto buf = llvm::MemoryBuffer::getFileOrSTDIN(path, /*IsText=*/true);
  if (!buf)
    return llvm::createStringError(buf.getError(), "%s: cannot read: %s",
                                   path.str().c_str(),
                                   buf.getError().message().c_str());
  return parseModule((*buf)->getBuffer(), path == "-" ? "<stdin>" : path);
}

static void printStats(const Module &m, llvm::raw_ostream &os) {
  os << "// ----- summary -----\n";
  // Per state kind (enum order): tensors, elements, bytes.
  const char *kinds[] = {"parameters", "frozen", "buffers", "optimizer"};
  uint64_t elems[4] = {}, bytes[4] = {};
  unsigned counts[4] = {};
  for (const auto &s : m.states()) {
    int k = static_cast<int>(s->kind());
    ++counts[k];
    elems[k] += s->type().numElements();
    bytes[k] += s->type().sizeInBytes();
  }
  for (int k = 0; k < 4; ++k)
    if (counts[k] || k == 0)
      os << "// " << kinds[k] << ": " << counts[k] << " tensors, " << elems[k]
         << " elements, " << formatBytes(bytes[k]) << "\n";
  for (const auto &f : m.functions()) {
    std::map<std::string, unsigned> ops;
    uint64_t resultBytes = 0;
    unsigned count = 0;
    for (const Node &n : f->nodes()) {
      if (n.info()->has(opflags::Terminator))
        continue;
      ++ops[n.op()];
      ++count;
      for (Value *r : n.results())
        resultBytes += r->type().sizeInBytes();
    }
    os << "// @" << f->name() << ": " << count << " nodes, inputs:";
    for (Value *a : f->arguments())
      os << " " << a->name() << " " << a->type().str();
    os << "\n//   sum of all node results: " << formatBytes(resultBytes)
       << " (an upper bound on activations, before memory planning)\n";
    os << "//   ops:";
    unsigned col = 9;
    for (const auto &kv : ops) {
      std::string item = " " + kv.first + " " + std::to_string(kv.second);
      if (col + item.size() > 78) {
        os << "\n//       ";
        col = 9;
      }
      os << item;
      col += item.size();
    }
    os << "\n";
    // The fuse-attention pass's decisions (docs/attention.md).
    std::map<std::string, unsigned> declined;
    for (const Node &n : f->nodes())
      if (const Attribute *a = n.attr("fuse_attention");
          a && a->kind() == Attribute::Kind::String)
        ++declined[a->asString()];
    if (ops.count("FusedAttention") || !declined.empty()) {
      os << "//   attention: " << ops["FusedAttention"] << " fused";
      for (const auto &[why, count] : declined)
        os << "; " << count << " unfused: " << why;
      os << "\n";
    }
  }
}

static std::string opsMarkdown() {
  std::string s =
      "# Supported ops\n\n"
      "Generated from `compiler/Ops.def` by `headroom opt --list-ops "
      "--markdown`; a test keeps this file equal to that output. ONNX ops "
      "are accepted from the default domain at opsets " +
      std::to_string(kMinOpset) + ".." + std::to_string(kMaxOpset) +
      " with the meaning they have at opset " + std::to_string(kIrOpset) +
      " (docs/import.md says which newer versions are read and how); ONNX "
      "function ops not listed here are expanded into their bodies at "
      "import. To add one: docs/adding-an-op.md.\n\n| op | kind | what it "
      "does |\n|---|---|---|\n";
  for (const OpInfo &op : allOps())
    s += "| `" + op.Name.str() + "` | " +
         (op.has(opflags::Onnx) ? "ONNX" : "headroom") + " | " + op.Doc.str() +
         " |\n";
  return s;
}

static int runOpt() {
  if (ListPasses) {
    if (Markdown) {
      llvm::outs() << passesMarkdown();
      return 0;
    }
    for (const PassInfo &p : allPasses())
      llvm::outs() << llvm::format("  %-16s ", p.Name.str().c_str())
                   << p.Summary << '\n';
    return 0;
  }
  if (ListOps) {
    if (Markdown) {
      llvm::outs() << opsMarkdown();
      return 0;
    }
    for (const OpInfo &op : allOps())
      llvm::outs() << llvm::format("  %-26s ", op.Name.str().c_str()) << op.Doc
                   << '\n';
    return 0;
  }
  std::error_code ec;
  llvm::ToolOutputFile out(OutputFile, ec, llvm::sys::fs::OF_Text);
  if (ec)
    return reportError(OutputFile + ": cannot write: " + ec.message());
  if (CompileStep && PassList.getNumOccurrences())
    return reportError("give --compile or --passes, not both");
  if (CompileStep) {
    // The model imports at the micro-batch size; textual IR is taken as it
    // is (already at that size).
    auto options = compileOptionsGiven();
    if (!options)
      return reportError(options.takeError());
    llvm::Expected<Compiled> compiled =
        llvm::StringRef(OptInput).endswith(".onnx")
            ? compile(OptInput, *options)
            : [&]() -> llvm::Expected<Compiled> {
      auto m = loadModule(OptInput);
      if (!m)
        return m.takeError();
      return compileModule(std::move(*m), *options);
    }();
    if (!compiled)
      return reportError(compiled.takeError());
    out.os() << "// pipeline: " << compiled->Pipeline << "\n";
    printModule(*compiled->M, out.os());
    if (Stats)
      printStats(*compiled->M, out.os());
    out.keep();
    return 0;
  }
  auto process = [&](llvm::Expected<std::unique_ptr<Module>> m) -> llvm::Error {
    if (!m)
      return m.takeError();
    PassManagerOptions options;
    options.VerifyEach = !NoVerify;
    options.PrintAfterAll = PrintAfterAll;
    options.PrintStream = &out.os();
    PassManager pm(options);
    if (auto e = pm.addPipeline(PassList))
      return e;
    if (auto e = pm.run(**m))
      return e;
    if (!PrintAfterAll)
      printModule(**m, out.os());
    if (Stats)
      printStats(**m, out.os());
    return llvm::Error::success();
  };
  if (!SplitInputFile || llvm::StringRef(OptInput).endswith(".onnx")) {
    if (auto e = process(loadModule(OptInput)))
      return reportError(std::move(e));
    out.keep(); // otherwise ToolOutputFile deletes the partial output
    return 0;
  }
  // Each chunk is parsed on its own; an error in one is printed (so tests can
  // check it) and the next chunk still runs; the exit status reports it.
  auto buf = llvm::MemoryBuffer::getFileOrSTDIN(OptInput, /*IsText=*/true);
  if (!buf)
    return reportError(OptInput + ": cannot read: " + buf.getError().message());
  llvm::SmallVector<llvm::StringRef, 8> chunks;
  (*buf)->getBuffer().split(chunks, "// -----");
  int status = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (i)
      out.os() << "// -----\n";
    std::string name = (OptInput + " (chunk " + llvm::Twine(i + 1) + ")").str();
    if (auto e = process(parseModule(chunks[i], name))) {
      llvm::WithColor::error(llvm::errs(), "headroom")
          << llvm::toString(std::move(e)) << '\n';
      status = 1;
    }
  }
  out.keep();
  return status;
}

static int runDevices() {
  std::string note;
  for (const DeviceInfo &d : listDevices(&note))
    llvm::outs() << d.Backend << ":" << d.Index << "  " << d.Name << "  "
                 << formatBytes(d.MemoryBytes) << " ("
                 << formatBytes(d.FreeBytes) << " free)  " << d.Detail << "\n";
  if (!note.empty())
    llvm::outs() << "(" << note << ")\n";
  return 0;
}

/// OpenBLAS picks its kernels when it is loaded, before main, from the CPU
/// or OPENBLAS_CORETYPE. On a CPU it misjudges (runtime/Devices.h) headroom
/// sets the variable and runs itself again, once: the variable is then set.
/// A user's own OPENBLAS_CORETYPE is left alone.
static void useTheBestOpenBlasKernels(char **argv) {
  if (std::getenv("OPENBLAS_CORETYPE"))
    return;
  std::string core = betterOpenBlasCore();
  if (core.empty())
    return;
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  execv("/proc/self/exe", argv);
  // exec failed: go on with the kernels OpenBLAS chose.
}

/// `headroom --version`: what it is, what it was built from, what it reads.
static void printVersion(llvm::raw_ostream &os) {
  os << "headroom " << HEADROOM_VERSION << " (commit " << HEADROOM_COMMIT
     << ")\n  reads ONNX opsets " << kMinOpset << ".." << kMaxOpset << " (ONNX "
     << HEADROOM_ONNX_VERSION << ", IR versions up to " << int(onnx::IR_VERSION)
     << ")\n  backends: cpu"
#ifdef HEADROOM_HAS_CUDA
     << ", cuda"
#endif
     << "\n";
}

/// The subcommand named by the first argument (the top level when none).
static cl::SubCommand &givenSubcommand(int argc, char **argv) {
  if (argc > 1)
    for (cl::SubCommand *s : cl::getRegisteredSubcommands())
      if (!s->getName().empty() && s->getName() == argv[1])
        return *s;
  return *cl::TopLevelSubCommand;
}

int main(int argc, char **argv) {
  useTheBestOpenBlasKernels(argv);
  registerCompileFlags({&OptCmd, &TrainCmd, &ReportCmd, &CompileCmd});
  std::vector<const cl::OptionCategory *> shown = {&Category};
  for (const cl::OptionCategory *c : flagGroups())
    shown.push_back(c);
  cl::HideUnrelatedOptions(shown);
  cl::SetVersionPrinter(printVersion);
  if (auto e = checkFlagNames(argc, argv, givenSubcommand(argc, argv)))
    return reportError(std::move(e));
  cl::ParseCommandLineOptions(
      argc, argv,
      "headroom: compile training steps that fit in memory\n\n"
      "  headroom opt MODEL.onnx --batch 4 --passes=canonicalize "
      "--print-after-all\n");
  if (OptCmd)
    return runOpt();
  if (DevicesCmd)
    return runDevices();
  if (ZooCmd)
    return runZoo();
  if (RunCmd)
    return runRun();
  if (ReportCmd && modelIsPlan())
    return runReportOfPlan();
  if (CompileCmd || ReportCmd || TrainCmd) {
    auto options = compileOptionsGiven();
    if (!options)
      return reportError(options.takeError());
    if (recomputeSweep() && !ReportCmd)
      return reportError("--recompute sweep is for headroom report: it "
                         "compiles every policy and prints the frontier");
    if (recomputeSweep())
      return runRecomputeSweep(*options);
    return CompileCmd  ? runCompile(*options)
           : ReportCmd ? runReport(*options)
                       : runTrain(*options);
  }
  cl::PrintHelpMessage();
  return 1;
}

//===- Train.cpp - `headroom train`, `report`, `compile` and `run` --------===//
//
// Compile the training step, then run it over the data: step s of an epoch
// reads samples [s*B, (s+1)*B) of that epoch's order (a permutation with
// --shuffle SEED); a final partial batch is dropped, as with
// DataLoader(drop_last=True). Progress goes to stderr: one rewritten line on
// a terminal, plain lines otherwise. `compile` writes the lowered step to a
// plan file (runtime/PlanFile.h) and `run` runs one with the same loop, so
// that compile + run gives the same weights as train.
//
//===----------------------------------------------------------------------===//
#include "compiler/Attribute.h"
#include "pipeline/AutoFit.h"
#include "pipeline/Compile.h"
#include "runtime/Adapters.h"
#include "runtime/Checkpoint.h"
#include "runtime/Communicator.h"
#include "runtime/Devices.h"
#include "runtime/ModelIO.h"
#include "runtime/PlanFile.h"
#include "runtime/Report.h"
#include "runtime/Trainer.h"

#include "tools/Diagnostics.h"
#include "tools/Flags.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

using namespace headroom;
namespace cl = llvm::cl;

extern cl::SubCommand TrainCmd;
extern cl::SubCommand ReportCmd;
extern cl::SubCommand CompileCmd;
extern cl::SubCommand RunCmd;

static cl::opt<std::string> Model(cl::Positional, cl::desc("<model.onnx>"),
                                  cl::Required, cl::sub(TrainCmd),
                                  cl::sub(ReportCmd), cl::sub(CompileCmd));
static cl::opt<std::string> PlanPath(cl::Positional, cl::desc("<model.plan>"),
                                     cl::Required, cl::sub(RunCmd));
static cl::opt<std::string> PlanOut("o", cl::desc("Write the plan here"),
                                    cl::value_desc("PLAN"), cl::sub(CompileCmd),
                                    cl::cat(outputFlags()));
static cl::opt<std::string> DataPath("data",
                                     cl::desc(".npz archive or folder of .npy"),
                                     cl::value_desc("PATH"), cl::Required,
                                     cl::sub(TrainCmd), cl::sub(RunCmd),
                                     cl::cat(modelFlags()));
static cl::opt<int64_t> Steps("steps", cl::desc("Optimizer steps to run"),
                              cl::value_desc("N"), cl::init(0),
                              cl::sub(TrainCmd), cl::sub(RunCmd),
                              cl::cat(modelFlags()));
static cl::opt<int64_t> Epochs("epochs",
                               cl::desc("Passes over the data (instead of "
                                        "--steps)"),
                               cl::value_desc("N"), cl::init(0),
                               cl::sub(TrainCmd), cl::sub(RunCmd),
                               cl::cat(modelFlags()));
static cl::opt<uint64_t> Seed("seed", cl::desc("Seed for dropout"),
                              cl::value_desc("SEED"), cl::init(0),
                              cl::sub(TrainCmd), cl::sub(RunCmd),
                              cl::cat(modelFlags()));
static cl::opt<int64_t> Shuffle("shuffle",
                                cl::desc("Shuffle the samples every epoch with "
                                         "this seed"),
                                cl::value_desc("SEED"), cl::init(-1),
                                cl::sub(TrainCmd), cl::sub(RunCmd),
                                cl::cat(modelFlags()));
static cl::opt<std::string> Save("save",
                                 cl::desc("Write the trained model (ONNX)"),
                                 cl::value_desc("OUT.onnx"), cl::sub(TrainCmd),
                                 cl::sub(RunCmd), cl::cat(outputFlags()));
static cl::opt<std::string>
    SaveAdapter("save-adapter",
                cl::desc("With --lora: write the trained adapters as PEFT "
                         "does (adapter_config.json, "
                         "adapter_model.safetensors)"),
                cl::value_desc("DIR"), cl::sub(TrainCmd), cl::sub(RunCmd),
                cl::cat(outputFlags()));
static cl::opt<std::string>
    LoraInit("lora-init",
             cl::desc("With --lora: start the adapters from a PEFT adapter "
                      "folder (adapter_model.safetensors) instead of --seed"),
             cl::value_desc("DIR"), cl::sub(TrainCmd), cl::sub(RunCmd),
             cl::cat(modelFlags()));
static cl::opt<std::string> Log("log", cl::desc("Write one JSON line per step"),
                                cl::value_desc("FILE"), cl::sub(TrainCmd),
                                cl::sub(RunCmd), cl::cat(outputFlags()));
static cl::opt<std::string>
    CheckpointDir("checkpoint",
                  cl::desc("Write checkpoints (DIR/checkpoint.hrc, "
                           "atomically) to this folder"),
                  cl::value_desc("DIR"), cl::sub(TrainCmd), cl::sub(RunCmd),
                  cl::cat(outputFlags()));
static cl::opt<int64_t>
    CheckpointEvery("checkpoint-every",
                    cl::desc("Checkpoint every N steps and after the last "
                             "(default: after the last only)"),
                    cl::value_desc("N"), cl::init(0), cl::sub(TrainCmd),
                    cl::sub(RunCmd), cl::cat(outputFlags()));
static cl::opt<std::string>
    ResumeDir("resume",
              cl::desc("Continue the run whose checkpoint is in this folder "
                       "(--steps/--epochs count from its start)"),
              cl::value_desc("DIR"), cl::sub(TrainCmd), cl::sub(RunCmd),
              cl::cat(outputFlags()));

static std::string formatDuration(double seconds) {
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", (long long)(s / 3600),
                (long long)(s / 60 % 60), (long long)(s % 60));
  return buf;
}

/// Runs --steps or --epochs steps of `t` over `data`, logging as it goes,
/// then saves the trained model (initializers from `sourceModel`) with
/// --save. `lr` is what the log reports.
/// The first NaN or infinity among the rows of a batch, as "input 'x'
/// sample 37 holds nan" (empty when the data is finite).
static std::string firstNonFinite(const Dataset &data,
                                  llvm::ArrayRef<int64_t> order, int64_t start,
                                  int64_t batch) {
  for (const auto &[name, array] : data.Arrays) {
    if (!isFloat(array.type().dtype()) || data.Samples == 0)
      continue;
    int64_t perSample = array.numElements() / data.Samples;
    for (int64_t i = start; i < start + batch && i < int64_t(order.size()); ++i)
      for (int64_t j = 0; j < perSample; ++j) {
        double v = array.getDouble(order[i] * perSample + j);
        if (!std::isfinite(v))
          return "input '" + name + "' sample " + std::to_string(order[i]) +
                 " holds " + shortestDecimal(v);
      }
  }
  return "";
}

/// The log's lines of steps up to `step` (a resumed run rewrites the steps
/// after its checkpoint).
static llvm::Error truncateLog(llvm::StringRef path, int64_t step) {
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buf)
    return llvm::Error::success(); // no log yet
  std::string kept;
  llvm::SmallVector<llvm::StringRef, 0> lines;
  (*buf)->getBuffer().split(lines, '\n', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef line : lines) {
    auto v = llvm::json::parse(line);
    if (!v) {
      llvm::consumeError(v.takeError());
      continue; // a line a kill cut short
    }
    auto s =
        v->getAsObject() ? v->getAsObject()->getInteger("step") : llvm::None;
    if (s && *s <= step)
      kept += (line + "\n").str();
  }
  return writeFileAtomically(path, kept);
}

/// What a checkpoint of this run records about it (the step counters are
/// filled in when it is written).
static CheckpointInfo describeRun(Trainer &t, const Dataset &data,
                                  const PlanSource &source) {
  CheckpointInfo info;
  info.PlanSha256 = planFingerprint(t.executor().plan());
  info.ModelPath = source.ModelPath;
  info.ModelSha256 = source.Sha256;
  info.Seed = Seed;
  info.Shuffle = Shuffle < 0 ? -1 : int64_t(Shuffle);
  info.DataSamples = data.Samples;
  info.DataPath = data.Source;
  return info;
}

static int trainSteps(Trainer &t, const Dataset &data, double lr,
                      const PlanSource &source, NanPolicy onNan);

/// A setup step of a data-parallel run that may fail on some ranks: the
/// ranks compare notes first. When every rank failed, rank 0 prints its
/// error and each returns 1; when only some did, they print theirs and
/// stop the job (a rank that returned alone would leave the others waiting
/// in their next collective). 0 when no rank failed.
static bool SettledFailure = false; // every rank failed the same way

static int settle(Communicator *comm, llvm::Error e) {
  if (!comm)
    return e ? reportError(std::move(e)) : 0;
  std::string mine = e ? llvm::toString(std::move(e)) : "";
  auto all = comm->allGatherStrings(mine);
  if (!all) {
    reportError(all.takeError());
    abortRanks(1);
  }
  bool every =
      llvm::all_of(*all, [](const std::string &s) { return !s.empty(); });
  bool any =
      llvm::any_of(*all, [](const std::string &s) { return !s.empty(); });
  if (!any)
    return 0;
  if (every) {
    SettledFailure = true;
    return comm->rank() == 0 ? reportError(mine) : 1;
  }
  if (!mine.empty())
    reportError(mine);
  abortRanks(1);
}

/// Joins the ranks a plan for several ranks runs with (the MPI job this
/// process is part of) and checks that each compiled the same plan. Null
/// for a plan of one rank.
static llvm::Expected<Communicator *> joinRanks(const Plan &plan) {
  if (plan.Ranks <= 1)
    return nullptr;
  auto world = joinMpiWorld();
  if (!world)
    return world.takeError();
  Communicator *comm = *world;
  errorRank() = int(comm->rank());
  if (comm->size() != plan.Ranks)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "the plan is for %u ranks (--ranks %u) and this process is one of "
        "%u: launch it as `mpirun -np %u headroom ...` (or `srun -n %u`)",
        plan.Ranks, plan.Ranks, comm->size(), plan.Ranks, plan.Ranks);
  return comm;
}

/// The trainer of `plan`: with several ranks, after joining them and
/// checking that every rank compiled the same plan. Null when that failed
/// (reported; `rc` is the exit status).
static std::unique_ptr<Trainer> startTrainer(Plan plan, llvm::StringRef model,
                                             int &rc) {
  auto comm = joinRanks(plan);
  if (!comm) {
    rc = reportError(comm.takeError());
    return nullptr;
  }
  if (*comm)
    if ((rc = settle(*comm, checkSamePlan(**comm, planFingerprint(plan)))))
      return nullptr;
  auto trainer = Trainer::create(std::move(plan), model, Seed, *comm);
  if ((rc = settle(*comm,
                   trainer ? llvm::Error::success() : trainer.takeError())))
    return nullptr;
  return std::move(*trainer);
}

static int trainLoop(Trainer &t, const Dataset &data, double lr,
                     const PlanSource &source, NanPolicy onNan) {
  // A rank that fails alone stops the job (see settle()).
  Communicator *comm = t.communicator();
  int rc = trainSteps(t, data, lr, source, onNan);
  if (rc && comm && !SettledFailure)
    abortRanks(rc);
  return rc;
}

/// --resume: the state, random step and log of the checkpoint in
/// ResumeDir, checked against this run; `first` is the steps it had done.
static int resume(Trainer &t, const CheckpointInfo &run,
                  const CheckpointRank &ckptRank, bool lead, int64_t &first) {
  Communicator *comm = t.communicator();
  auto saved = readCheckpoint(ResumeDir, ckptRank);
  if (int rc = settle(comm, saved ? llvm::Error::success() : saved.takeError()))
    return rc;
  const CheckpointInfo &info = saved->Parsed.Info;
  if (auto e = checkResumable(info, run, ResumeDir))
    return reportError(std::move(e));
  if (auto e = restoreState(saved->Parsed, t.executor(), ResumeDir))
    return reportError(std::move(e));
  t.setRandomStep(info.RandomStep);
  first = info.Step;
  if (!Log.empty() && lead)
    if (auto e = truncateLog(Log, first))
      return reportError(std::move(e));
  if (lead)
    llvm::errs() << "resuming from "
                 << checkpointPath(ResumeDir, ckptRank, first) << " after step "
                 << first << "\n";
  return 0;
}

/// The report's title: the model, the batch, how ranks and micro-batches
/// split it.
static std::string runTitle(Trainer &t, llvm::StringRef sourceModel) {
  std::string title = (llvm::sys::path::filename(sourceModel) + ", batch " +
                       llvm::Twine(t.batch()))
                          .str();
  if (Communicator *comm = t.communicator())
    title += " (" + std::to_string(t.rankBatch()) + " on each of " +
             std::to_string(comm->size()) + " ranks)";
  if (t.microBatch() != t.rankBatch())
    title += " (micro-batches of " + std::to_string(t.microBatch()) + ")";
  return title;
}

/// One line of --log: JSON, a non-finite number as null (JSON has no NaN).
static void logStep(llvm::raw_ostream &log, int64_t step, const StepResult &r,
                    double lr, double seconds) {
  auto number = [&](double v) {
    if (std::isfinite(v))
      log << llvm::format("%.9g", v);
    else
      log << "null";
  };
  log << "{\"step\": " << step << ", \"loss\": ";
  number(r.Loss);
  log << ", \"lr\": " << llvm::format("%.9g", lr);
  if (r.GradNorm) {
    log << ", \"grad_norm\": ";
    number(*r.GradNorm);
  }
  log << ", \"seconds\": " << llvm::format("%.6f", seconds) << "}\n";
  log.flush();
}

/// A non-finite loss at `step` (`where`: the sample that has a non-finite
/// input, if one does): an error with --on-nan stop, else a warning.
static int nonFiniteLoss(int64_t step, double loss, const std::string &where,
                         NanPolicy onNan) {
  std::string what = "step " + std::to_string(step) + ": the loss is " +
                     shortestDecimal(loss) +
                     (where.empty() ? "" : " (" + where + ")");
  if (onNan == NanPolicy::Stop)
    return reportError(what + "; stopping (--on-nan skip leaves such "
                              "steps out, --on-nan continue trains on)");
  llvm::WithColor::warning(llvm::errs(), "headroom")
      << what
      << (onNan == NanPolicy::Skip ? "; skipped: no weight changed"
                                   : "; training on (--on-nan continue)")
      << "\n";
  return 0;
}

/// Writes this rank's checkpoint of `step` into CheckpointDir; with ranks,
/// the manifest once every rank's file is complete, then drops older steps.
static llvm::Error writeStepCheckpoint(Trainer &t, CheckpointInfo &run,
                                       const CheckpointRank &ckptRank,
                                       int64_t step) {
  run.Step = step;
  run.RandomStep = t.randomStep();
  if (auto e = writeCheckpoint(CheckpointDir, run, t.executor(), ckptRank))
    return e;
  Communicator *comm = t.communicator();
  if (!comm)
    return llvm::Error::success();
  // Every rank's file is complete before the manifest names its step.
  if (auto e = comm->barrier())
    return e;
  if (comm->rank() == 0)
    if (auto e = writeCheckpointManifest(CheckpointDir, step, comm->size()))
      return e;
  if (auto e = comm->barrier())
    return e;
  removeOtherSteps(CheckpointDir, ckptRank, step);
  return llvm::Error::success();
}

/// The progress line of a step: loss, gradient norm, throughput, ETA.
static std::string progressLine(int64_t step, int64_t total,
                                const StepResult &r, int64_t samples,
                                double seconds, double eta) {
  std::string line;
  llvm::raw_string_ostream os(line);
  os << "step " << step << "/" << total << "  loss "
     << llvm::format("%.4f", r.Loss);
  if (r.GradNorm)
    os << "  grad_norm " << llvm::format("%.4f", *r.GradNorm);
  os << "  " << llvm::format("%.0f", samples / std::max(seconds, 1e-9))
     << " samples/s  ETA " << formatDuration(eta);
  return os.str();
}

/// --save-adapter and --save after the last step.
static int saveOutputs(Trainer &t, llvm::StringRef sourceModel,
                       double lastLoss) {
  Communicator *comm = t.communicator();
  bool lead = !comm || comm->rank() == 0;
  bool adapters = !t.executor().plan().Adapters.empty();
  if (!SaveAdapter.empty()) {
    if (comm && t.executor().plan().Report.ShardBytes)
      return reportError("--save-adapter with sharded state (--zero 1 or "
                         "more) is not supported yet; use --zero 0");
    if (lead) {
      if (auto e = saveAdapter(t.executor(), SaveAdapter))
        return reportError(std::move(e));
      llvm::errs() << "saved the adapters in " << SaveAdapter << "\n";
    }
  }
  if (!Save.empty()) {
    if (adapters && comm && t.executor().plan().Report.ShardBytes)
      return reportError("--save with LoRA adapters and sharded state (--zero "
                         "1 or more) is not supported yet; use --zero 0");
    // With adapters, the model gets each base merged: W + (alpha / r) B A.
    std::map<std::string, Tensor> merged;
    if (adapters) {
      auto m = mergedWeights(t.executor());
      if (!m)
        return reportError(m.takeError());
      merged = std::move(*m);
    }
    if (auto e =
            saveTrainedModel(t.executor(), sourceModel, Save, &merged, comm))
      return reportError(std::move(e));
    if (lead)
      llvm::errs() << "saved " << Save << (adapters ? " (adapters merged)" : "")
                   << " (final loss " << llvm::format("%.4f", lastLoss)
                   << ")\n";
  }
  return 0;
}

static int trainSteps(Trainer &t, const Dataset &data, double lr,
                      const PlanSource &source, NanPolicy onNan) {
  Communicator *comm = t.communicator();
  bool lead = !comm || comm->rank() == 0; // prints, logs, saves files
  CheckpointRank ckptRank;
  if (comm)
    ckptRank = {comm->rank(), comm->size()};
  llvm::StringRef sourceModel = source.ModelPath;
  if (auto e = t.checkData(data))
    return reportError(std::move(e));
  bool adapters = !t.executor().plan().Adapters.empty();
  if (!adapters && (!SaveAdapter.empty() || !LoraInit.empty()))
    return reportError(
        std::string(SaveAdapter.empty() ? "--lora-init" : "--save-adapter") +
        " needs a plan with LoRA adapters (--lora)");
  if (!LoraInit.empty())
    if (auto e = loadAdapter(t.executor(), LoraInit))
      return reportError(std::move(e));
  if (CheckpointEvery < 0 || (CheckpointEvery > 0 && CheckpointDir.empty()))
    return reportError(
        "--checkpoint-every N needs --checkpoint DIR and N >= 1");
  CheckpointInfo run;
  int64_t first = 0; // steps already done
  if (!CheckpointDir.empty() || !ResumeDir.empty())
    run = describeRun(t, data, source);
  if (!ResumeDir.empty())
    if (int rc = resume(t, run, ckptRank, lead, first))
      return rc;
  if (!CheckpointDir.empty() && !comm)
    removeStaleTemporaries(checkpointPath(CheckpointDir));
  if (!CheckpointDir.empty() && comm)
    removeOtherSteps(CheckpointDir, ckptRank, first, /*temporariesOnly=*/true);
  if (lead)
    printReportTable(t.executor().plan(), runTitle(t, sourceModel),
                     llvm::errs());
  int64_t batch = t.batch();
  if (batch <= 0)
    return reportError("the model has no data input to feed");
  int64_t perEpoch = data.Samples / batch;
  int64_t total = Steps > 0 ? Steps : Epochs * perEpoch;
  if (first > total)
    return reportError("the checkpoint in " + ResumeDir + " is after step " +
                       llvm::Twine(first) + ", beyond the " +
                       llvm::Twine(total) + " steps this run asks for");

  std::unique_ptr<llvm::raw_fd_ostream> log;
  if (!Log.empty() && lead) {
    std::error_code ec;
    log = std::make_unique<llvm::raw_fd_ostream>(
        Log, ec, first > 0 ? llvm::sys::fs::OF_Append : llvm::sys::fs::OF_None);
    if (ec)
      return reportError(Log + ": cannot write: " + ec.message());
  }
  auto checkpoint = [&](int64_t step) {
    return writeStepCheckpoint(t, run, ckptRank, step);
  };
  bool tty = lead && llvm::sys::Process::StandardErrIsDisplayed();
  std::vector<int64_t> order(data.Samples);
  int64_t orderEpoch = -1; // the epoch `order` is for
  auto start = std::chrono::steady_clock::now();
  double lastLoss = 0;
  for (int64_t s = first; s < total; ++s) {
    int64_t epoch = s / perEpoch, inEpoch = s % perEpoch;
    if (epoch != orderEpoch) {
      orderEpoch = epoch;
      std::iota(order.begin(), order.end(), 0);
      if (Shuffle >= 0) {
        std::mt19937_64 rng(uint64_t(Shuffle) * 1000003ull + epoch);
        std::shuffle(order.begin(), order.end(), rng);
      }
    }
    auto r = t.step(data, order, inEpoch * batch);
    if (!r)
      return reportError(r.takeError());
    lastLoss = r->Loss;
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    if (log)
      logStep(*log, s + 1, *r, lr, seconds);
    std::string line =
        progressLine(s + 1, total, *r, (s + 1 - first) * batch, seconds,
                     (total - s - 1) * seconds / (s + 1 - first));
    if (tty)
      llvm::errs() << "\r" << line << "\x1b[K";
    else if (lead && ((s + 1) % std::max<int64_t>(1, total / 20) == 0 ||
                      s + 1 == total))
      llvm::errs() << line << "\n";
    if (!std::isfinite(r->Loss)) {
      if (tty)
        llvm::errs() << "\n";
      std::string where = firstNonFinite(data, order, inEpoch * batch, batch);
      if (int rc = nonFiniteLoss(s + 1, r->Loss, where, onNan))
        return rc;
    }
    if (!CheckpointDir.empty() &&
        ((CheckpointEvery > 0 && (s + 1) % CheckpointEvery == 0) ||
         s + 1 == total))
      if (auto e = checkpoint(s + 1))
        return reportError(std::move(e));
  }
  if (tty)
    llvm::errs() << "\n";
  if (first == total && !CheckpointDir.empty())
    if (auto e = checkpoint(total))
      return reportError(std::move(e));
  return saveOutputs(t, sourceModel, lastLoss);
}

/// A cpu plan whose peak exceeds the memory available now is refused before
/// anything is allocated, with the flags that would fit: auto-fit (the same
/// search as `--memory-budget`) run against what is available. Success when
/// the plan fits or is not for this machine's memory.
static llvm::Error refuseWhatDoesNotFit(const Plan &plan, llvm::StringRef model,
                                        CompileOptions options) {
  if (plan.TargetName != "cpu")
    return llvm::Error::success();
  uint64_t peak = plan.Report.PeakBytes(), available = availableCpuBytes();
  if (!available || peak <= available)
    return llvm::Error::success();
  std::string msg = "the plan's peak of " + formatBytes(peak) +
                    " exceeds the " + formatBytes(available) +
                    " of memory available here";
  options.MemoryBudget = available;
  auto fit = autoFit(model, options);
  if (!fit) {
    msg += "; nothing fits it: " + llvm::toString(fit.takeError());
  } else {
    const FitCandidate &best = fit->Tried.front();
    msg += "; these flags fit (peak " + formatBytes(best.PeakBytes) +
           "): " + best.Options.flags();
  }
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// Refuses an output that cannot be written before anything runs: an
/// unwritable --save was found after the whole run, with the trained
/// weights lost. A file is written atomically next to its path, so its
/// folder must exist and be writable; a folder (--checkpoint) may be made.
static llvm::Error checkWritable(llvm::StringRef flag, llvm::StringRef path,
                                 bool isDir = false) {
  if (path.empty())
    return llvm::Error::success();
  namespace fs = llvm::sys::fs;
  auto refuse = [&](const llvm::Twine &why) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   flag + " " + path + ": " + why);
  };
  if (isDir && fs::is_directory(path))
    return fs::access(path, fs::AccessMode::Write)
               ? refuse("the folder is not writable")
               : llvm::Error::success();
  if (fs::exists(path) && (isDir || fs::is_directory(path)))
    return refuse(isDir ? "exists and is not a folder" : "is a folder");
  llvm::StringRef parent = llvm::sys::path::parent_path(
      path.rtrim('/').empty() ? path : path.rtrim('/'));
  // A folder is made with its missing parents: the nearest one that exists
  // must be writable.
  while (isDir && !parent.empty() && !fs::exists(parent))
    parent = llvm::sys::path::parent_path(parent);
  if (parent.empty())
    parent = ".";
  if (!fs::is_directory(parent))
    return refuse("the folder '" + parent + "' does not exist");
  if (fs::access(parent, fs::AccessMode::Write))
    return refuse("the folder '" + parent + "' is not writable");
  return llvm::Error::success();
}

/// Every output of train and run, checked before the first step.
static llvm::Error checkRunOutputs() {
  if (auto e = checkWritable("--save", Save))
    return e;
  if (auto e = checkWritable("--save-adapter", SaveAdapter, /*isDir=*/true))
    return e;
  if (auto e = checkWritable("--log", Log))
    return e;
  return checkWritable("--checkpoint", CheckpointDir, /*isDir=*/true);
}

int runTrain(const CompileOptions &options) {
  if ((Steps > 0) == (Epochs > 0))
    return reportError("give exactly one of --steps N or --epochs N");
  if (auto e = checkRunOutputs())
    return reportError(std::move(e));
  auto data = loadDataset(DataPath);
  if (!data)
    return reportError(data.takeError());
  auto compiled = compile(Model, options);
  if (!compiled)
    return reportError(compiled.takeError());
  if (auto e = refuseWhatDoesNotFit(compiled->ThePlan, Model, options))
    return reportError(std::move(e));
  // A checkpoint names the model by its hash, taken only when one is used.
  PlanSource source{Model, ""};
  if (!CheckpointDir.empty() || !ResumeDir.empty()) {
    auto described = describePlanSource(Model);
    if (!described)
      return reportError(described.takeError());
    source = *described;
  }
  int rc = 0;
  auto trainer = startTrainer(std::move(compiled->ThePlan), Model, rc);
  if (!trainer)
    return rc;
  return trainLoop(*trainer, *data, options.Optimizer.Lr, source,
                   options.OnNan);
}

static cl::opt<bool> Json("json", cl::desc("Print the report as JSON"),
                          cl::sub(ReportCmd), cl::cat(outputFlags()));
static cl::opt<std::string> Svg("svg",
                                cl::desc("Also write memory over the schedule "
                                         "as SVG"),
                                cl::value_desc("FILE"), cl::sub(ReportCmd),
                                cl::cat(outputFlags()));

static cl::opt<std::string>
    Html("html",
         cl::desc("Also write one self-contained HTML page of the report: "
                  "the peak by part against the budget, memory over the step, "
                  "what lives at the peak, auto-fit's candidates, the "
                  "recomputation frontier"),
         cl::value_desc("FILE"), cl::sub(ReportCmd), cl::cat(outputFlags()));

static std::string reportTitle(const CompileOptions &o) {
  std::string title = (llvm::sys::path::filename(Model) + ", batch " +
                       llvm::Twine(o.Import.Batch))
                          .str();
  if (o.Accumulate > 1)
    title += " (" + std::to_string(o.Accumulate) + " micro-batches of " +
             std::to_string(o.Import.Batch / o.Accumulate) + ")";
  return title + ", " +
         (o.ApplyOptimizer ? o.Optimizer.kindName().str() : "no optimizer");
}

/// With --svg, writes what `draw` prints to that file (atomically).
static int writeSvg(llvm::function_ref<void(llvm::raw_ostream &)> draw) {
  if (Svg.empty())
    return 0;
  std::string text;
  llvm::raw_string_ostream os(text);
  draw(os);
  if (auto e = writeFileAtomically(Svg, os.str()))
    return reportError(std::move(e));
  return 0;
}

/// With --html, writes the page (atomically).
static int writeHtml(const ReportPage &page) {
  if (Html.empty())
    return 0;
  std::string text;
  llvm::raw_string_ostream os(text);
  printReportHtml(page, os);
  if (auto e = writeFileAtomically(Html, os.str()))
    return reportError(std::move(e));
  return 0;
}

static int printReport(const Plan &plan, llvm::StringRef title,
                       ReportPage page = {}) {
  if (Json)
    printReportJson(plan, llvm::outs());
  else
    printReportTable(plan, title, llvm::outs());
  if (int rc = writeSvg(
          [&](llvm::raw_ostream &os) { printReportSvg(plan, title, os); }))
    return rc;
  page.Title = title.str();
  page.ThePlan = &plan;
  return writeHtml(page);
}

/// Whether the positional model is a plan file (`headroom report x.plan`).
bool modelIsPlan() { return llvm::StringRef(Model).endswith(".plan"); }

/// `headroom report PLAN.plan`: the report a compiled plan carries.
/// report's --svg and --html, checked before anything is compiled.
static llvm::Error checkReportOutputs() {
  if (auto e = checkWritable("--svg", Svg))
    return e;
  return checkWritable("--html", Html);
}

int runReportOfPlan() {
  if (auto e = checkReportOutputs())
    return reportError(std::move(e));
  auto loaded = readPlanFile(Model);
  if (!loaded)
    return reportError(loaded.takeError());
  std::string title = (llvm::sys::path::filename(Model) + ": " +
                       loaded->Source.ModelPath + " " + loaded->Recipe.Flags)
                          .str();
  return printReport(loaded->ThePlan, title);
}

/// `headroom report --memory-budget SIZE`: the candidates the search
/// compiled, best first, why the winner won, then the winner's report.
static int runAutoFitReport(const CompileOptions &options) {
  auto start = std::chrono::steady_clock::now();
  auto fit = autoFit(Model, options);
  if (!fit)
    return reportError(fit.takeError());
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  auto extra = [](const FitCandidate &c) {
    return 100 * extraShare(c.ExtraFlops, c.StepFlops);
  };
  if (Json) {
    llvm::json::Array rows;
    for (const FitCandidate &c : fit->Tried)
      rows.push_back(
          llvm::json::Object{{"candidate", c.Label},
                             {"flags", c.Options.flags()},
                             {"rank", c.Rank},
                             {"peak_bytes", int64_t(c.PeakBytes)},
                             {"recompute_flops", int64_t(c.RecomputeFlops)},
                             {"extra_flops", int64_t(c.ExtraFlops)},
                             {"approximate", c.Options.Optimizer.Int8State},
                             {"micro_steps", int64_t(c.Options.Accumulate)},
                             {"offload", c.Options.Offload},
                             {"host_peak_bytes", int64_t(c.HostPeakBytes)},
                             {"estimated_step_seconds", c.StepSeconds},
                             {"fits", c.Fits}});
    llvm::json::Object root{
        {"memory_budget_bytes", int64_t(options.MemoryBudget)},
        {"winner", fit->Tried.front().Label},
        {"why", fit->Why},
        {"search_seconds", seconds},
        {"candidates", std::move(rows)},
        {"report", reportJson(fit->Best.ThePlan)}};
    llvm::outs() << llvm::formatv("{0:2}", llvm::json::Value(std::move(root)))
                 << "\n";
    return 0;
  }
  llvm::outs() << "auto-fit: " << llvm::sys::path::filename(Model) << ", batch "
               << options.Import.Batch << ", budget "
               << formatBytes(options.MemoryBudget) << ": " << fit->Tried.size()
               << " candidates compiled in " << llvm::format("%.2f", seconds)
               << " s\n";
  llvm::outs() << "       candidate" << std::string(64, ' ')
               << "peak  FLOPs +  rank\n";
  size_t shown = 0;
  for (const FitCandidate &c : fit->Tried) {
    if (shown++ == 12) {
      llvm::outs() << "  ... " << fit->Tried.size() - 12
                   << " more (--json lists them all)\n";
      break;
    }
    const char *mark = shown == 1 ? "=>" : c.Fits ? "fits" : "";
    llvm::outs() << llvm::format(
        "  %-4s %-72s %11s %7.1f%% %5d\n", mark, c.Label.c_str(),
        formatBytes(c.PeakBytes).c_str(), extra(c), c.Rank);
  }
  llvm::outs() << "  (rank: 0 exact techniques, 1 bf16, 2 bf16 without master "
                  "weights, 3 that with 8-bit AdamW state (approximate), 4-6 "
                  "0-2 with another optimizer, 7 LoRA adapters)\n"
               << "  chosen: " << fit->Why << "\n\n";
  ReportPage page;
  page.BudgetBytes = options.MemoryBudget;
  page.Why = fit->Why;
  for (const FitCandidate &c : fit->Tried)
    page.Candidates.push_back({c.Label, c.PeakBytes, c.ExtraFlops, c.StepFlops,
                               c.Rank, c.Fits, c.Options.Optimizer.Int8State});
  return printReport(fit->Best.ThePlan,
                     reportTitle(options) + ", " + fit->Tried.front().Label,
                     std::move(page));
}

int runReport(const CompileOptions &options) {
  if (auto e = checkReportOutputs())
    return reportError(std::move(e));
  if (options.MemoryBudget)
    return runAutoFitReport(options);
  auto compiled = compile(Model, options);
  if (!compiled)
    return reportError(compiled.takeError());
  return printReport(compiled->ThePlan, reportTitle(options));
}

/// `headroom report --recompute sweep`: every recomputation candidate of
/// the step, compiled, as a table (or JSON) and, with --svg, the frontier.
int runRecomputeSweep(const CompileOptions &options) {
  if (auto e = checkReportOutputs())
    return reportError(std::move(e));
  auto built = buildStep(Model, options);
  if (!built)
    return reportError(built.takeError());
  std::vector<RecomputeChoice> choices = RecomputeSpace::of(**built).all();
  auto compiled = compileRecomputeCandidates(**built, options, choices);
  if (!compiled)
    return reportError(compiled.takeError());
  std::vector<SweepPoint> points;
  for (size_t i = 0; i < choices.size(); ++i)
    points.push_back({choices[i].Label, &(*compiled)[i].ThePlan.Report});
  std::string title = reportTitle(options);
  if (Json)
    printSweepJson(points, llvm::outs());
  else
    printSweepTable(points, title, llvm::outs());
  if (int rc = writeSvg(
          [&](llvm::raw_ostream &os) { printSweepSvg(points, title, os); }))
    return rc;
  ReportPage page;
  page.Title = title;
  page.Sweep = points;
  return writeHtml(page);
}

int runCompile(const CompileOptions &options) {
  if (PlanOut.empty())
    return reportError("-o PLAN is required: the plan file to write");
  if (auto e = checkWritable("-o", PlanOut))
    return reportError(std::move(e));
  // Hashed before the import reads it: a model that changes meanwhile is
  // refused at run time rather than silently paired with this plan.
  auto source = describePlanSource(Model);
  if (!source)
    return reportError(source.takeError());
  auto compiled = compile(Model, options);
  if (!compiled)
    return reportError(compiled.takeError());
  PlanRecipe recipe;
  recipe.Flags = options.flags();
  recipe.Pipeline = compiled->Pipeline;
  recipe.Lr = options.Optimizer.Lr;
  if (auto e = writePlanFile(compiled->ThePlan, *source, recipe, PlanOut))
    return reportError(std::move(e));
  printReportTable(compiled->ThePlan, reportTitle(options), llvm::outs());
  uint64_t size = 0;
  llvm::sys::fs::file_size(PlanOut, size);
  llvm::outs().flush(); // the report first, then the status line
  llvm::errs() << "wrote " << PlanOut << " (" << formatBytes(size) << ")\n";
  return 0;
}

int runRun() {
  if ((Steps > 0) == (Epochs > 0))
    return reportError("give exactly one of --steps N or --epochs N");
  if (auto e = checkRunOutputs())
    return reportError(std::move(e));
  auto loaded = readPlanFile(PlanPath);
  if (!loaded)
    return reportError(loaded.takeError());
  if (auto e = checkPlanSource(loaded->Source, PlanPath))
    return reportError(std::move(e));
  auto data = loadDataset(DataPath);
  if (!data)
    return reportError(data.takeError());
  llvm::errs() << "plan " << PlanPath << ": " << loaded->Source.ModelPath << " "
               << loaded->Recipe.Flags << "\n";
  std::string model = loaded->Source.ModelPath;
  PlanSource source = loaded->Source;
  // The plan's flags: its --on-nan (stop when they do not say), and what to
  // search from when the plan does not fit here.
  NanPolicy onNan = NanPolicy::Stop;
  if (auto flags = splitFlags(loaded->Recipe.Flags)) {
    if (auto o = compileOptionsFromFlags(*flags)) {
      onNan = o->OnNan;
      if (auto e = refuseWhatDoesNotFit(loaded->ThePlan, model, *o))
        return reportError(std::move(e));
    } else {
      llvm::consumeError(o.takeError());
    }
  } else {
    llvm::consumeError(flags.takeError());
  }
  int rc = 0;
  auto trainer = startTrainer(std::move(loaded->ThePlan), model, rc);
  if (!trainer)
    return rc;
  return trainLoop(*trainer, *data, loaded->Recipe.Lr, source, onNan);
}

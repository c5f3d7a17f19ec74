//===- Flags.cpp - The training flags on the command line -----------------===//
#include "tools/Flags.h"

#include "llvm/ADT/StringExtras.h"

#include <memory>

using namespace headroom;
namespace cl = llvm::cl;

namespace {
/// The option of one compileFlags() row: a switch, a repeatable list or a
/// single value, all kept as the text given.
struct RegisteredFlag {
  const FlagInfo *Info;
  std::unique_ptr<cl::opt<bool>> Switch;
  std::unique_ptr<cl::list<std::string>> Values;
  std::unique_ptr<cl::opt<std::string>> Value;
};
} // namespace

static std::vector<RegisteredFlag> &registered() {
  static std::vector<RegisteredFlag> flags;
  return flags;
}

namespace {
/// A cl modifier: the option belongs to each of these subcommands.
struct Subcommands {
  llvm::ArrayRef<cl::SubCommand *> Subs;
  template <class Opt> void apply(Opt &o) const {
    for (cl::SubCommand *s : Subs)
      o.addSubCommand(*s);
  }
};
} // namespace

cl::OptionCategory &headroom::modelFlags() {
  static cl::OptionCategory c("model, data and run");
  return c;
}
cl::OptionCategory &headroom::optimizerFlags() {
  static cl::OptionCategory c("optimizer");
  return c;
}
cl::OptionCategory &headroom::memoryFlags() {
  static cl::OptionCategory c("memory: precision, accumulation, "
                              "recomputation, budget");
  return c;
}
cl::OptionCategory &headroom::outputFlags() {
  static cl::OptionCategory c("outputs");
  return c;
}
llvm::ArrayRef<const cl::OptionCategory *> headroom::flagGroups() {
  static const cl::OptionCategory *groups[] = {&modelFlags(), &optimizerFlags(),
                                               &memoryFlags(), &outputFlags()};
  return groups;
}

/// The --help group of a compileFlags() row.
static cl::OptionCategory &groupOf(llvm::StringRef name) {
  static const char *const optimizer[] = {
      "optimizer", "lr",  "momentum",       "nesterov",        "weight-decay",
      "betas",     "eps", "clip-grad-norm", "disable-dropout", "on-nan"};
  static const char *const memory[] = {
      "accum",     "schedule",       "precision",      "master-weights",
      "recompute", "recompute-keep", "memory-budget",  "allow-optimizer",
      "attention", "fuse-update",    "optimizer-state"};
  if (llvm::is_contained(optimizer, name))
    return optimizerFlags();
  if (llvm::is_contained(memory, name))
    return memoryFlags();
  return modelFlags();
}

void headroom::registerCompileFlags(llvm::ArrayRef<cl::SubCommand *> subs) {
  for (const FlagInfo &info : compileFlags()) {
    RegisteredFlag r{&info, nullptr, nullptr, nullptr};
    // Registered when constructed: every modifier goes to the constructor.
    Subcommands where{subs};
    cl::desc help(info.Help);
    cl::cat cat(groupOf(info.Name));
    if (!info.ValueName)
      r.Switch = std::make_unique<cl::opt<bool>>(llvm::StringRef(info.Name),
                                                 help, where, cat);
    else if (info.Repeats)
      r.Values = std::make_unique<cl::list<std::string>>(
          llvm::StringRef(info.Name), help, cl::value_desc(info.ValueName),
          where, cat);
    else
      r.Value = std::make_unique<cl::opt<std::string>>(
          llvm::StringRef(info.Name), help, cl::value_desc(info.ValueName),
          where, cat);
    registered().push_back(std::move(r));
  }
}

FlagList headroom::givenCompileFlags() {
  FlagList flags;
  for (const RegisteredFlag &r : registered()) {
    if (r.Switch && r.Switch->getNumOccurrences())
      flags.emplace_back(r.Info->Name, *r.Switch ? "1" : "0");
    if (r.Values)
      for (const std::string &v : *r.Values)
        flags.emplace_back(r.Info->Name, v);
    if (r.Value && r.Value->getNumOccurrences())
      flags.emplace_back(r.Info->Name, *r.Value);
  }
  return flags;
}

/// What users of other tools type, and the headroom flag that means it.
static const std::pair<const char *, const char *> kSynonyms[] = {
    {"learning-rate", "lr"},
    {"learning_rate", "lr"},
    {"batch-size", "batch"},
    {"batch_size", "batch"},
    {"bs", "batch"},
    {"micro-batch", "accum"},
    {"gradient-accumulation-steps", "accum"},
    {"gradient_accumulation_steps", "accum"},
    {"grad-accum", "accum"},
    {"accumulate", "accum"},
    {"max-grad-norm", "clip-grad-norm"},
    {"optim-bits", "optimizer-state"},
    {"max_grad_norm", "clip-grad-norm"},
    {"clip-grad", "clip-grad-norm"},
    {"weight_decay", "weight-decay"},
    {"wd", "weight-decay"},
    {"optim", "optimizer"},
    {"dtype", "precision"},
    {"mixed-precision", "precision"},
    {"amp", "precision"},
    {"bf16", "precision"},
    {"fp16", "precision"},
    {"gradient-checkpointing", "recompute"},
    {"activation-checkpointing", "recompute"},
    {"checkpointing", "recompute"},
    {"output", "save"},
    {"out", "save"},
    {"max-steps", "steps"},
    {"num-steps", "steps"},
    {"num-epochs", "epochs"},
    {"epoch", "epochs"},
    {"budget", "memory-budget"},
    {"dataset", "data"},
};

llvm::Error headroom::checkFlagNames(int argc, char **argv,
                                     cl::SubCommand &sub) {
  llvm::StringMap<cl::Option *> &known = cl::getRegisteredOptions(sub);
  llvm::StringMap<cl::Option *> &generic =
      cl::getRegisteredOptions(*cl::TopLevelSubCommand);
  auto lookup = [&](llvm::StringRef name) -> cl::Option * {
    if (cl::Option *o = known.lookup(name))
      return o;
    return generic.lookup(name);
  };
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef arg = argv[i];
    if (arg == "--")
      break;
    if (!arg.startswith("-") || arg == "-")
      continue;
    llvm::StringRef name = arg.ltrim('-').split('=').first;
    if (cl::Option *o = lookup(name)) {
      // `--lr 0.1`: the value is the next argument (a negative number too).
      if (!arg.contains('=') && o->getValueExpectedFlag() == cl::ValueRequired)
        ++i;
      continue;
    }
    std::string hint;
    for (const auto &[typed, flag] : kSynonyms)
      if (name == typed && known.count(flag))
        hint = flag;
    // Else the nearest visible flag within two edits (`--recompte`).
    unsigned best = 3;
    for (const auto &entry : known) {
      llvm::StringRef candidate = entry.getKey();
      if (!hint.empty() || candidate.size() < 2 ||
          entry.getValue()->getOptionHiddenFlag() != cl::NotHidden)
        continue;
      unsigned d = name.edit_distance(candidate, /*AllowReplacements=*/true,
                                      /*MaxEditDistance=*/best);
      // Not a guess from almost nothing: `-o` is not `--lr`.
      if (d < best && 3 * d <= name.size()) {
        best = d;
        hint = candidate.str();
      }
    }
    std::string where = sub.getName().empty()
                            ? std::string("headroom")
                            : "headroom " + sub.getName().str();
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "unknown flag '" + arg.split('=').first + "' for " + where +
            (hint.empty() ? "" : "; did you mean --" + hint + "?") + " (" +
            where + " --help lists them)");
  }
  return llvm::Error::success();
}

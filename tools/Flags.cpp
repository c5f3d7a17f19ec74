//===- Flags.cpp - The training flags on the command line -----------------===//
#include "tools/Flags.h"

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

void headroom::registerCompileFlags(llvm::ArrayRef<cl::SubCommand *> subs,
                                    cl::OptionCategory &category) {
  for (const FlagInfo &info : compileFlags()) {
    RegisteredFlag r{&info, nullptr, nullptr, nullptr};
    // Registered when constructed: every modifier goes to the constructor.
    Subcommands where{subs};
    cl::desc help(info.Help);
    cl::cat cat(category);
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

//===- Passes.cpp - The pass registry -------------------------------------===//
#include "passes/Passes.h"

#include "compiler/Protocol.h"

using namespace headroom;

static const PassInfo kPasses[] = {
#define HR_PASS(Name, Factory, Summary) {Name, &Factory, Summary},
#include "passes/Passes.def"
};

llvm::ArrayRef<PassInfo> headroom::allPasses() { return kPasses; }

llvm::Expected<std::unique_ptr<Pass>>
headroom::createPassByName(llvm::StringRef name, llvm::StringRef options) {
  for (const PassInfo &p : kPasses)
    if (p.Name == name)
      return p.Create(options);
  return nullptr;
}

llvm::Expected<std::vector<std::pair<std::string, std::string>>>
headroom::parsePassOptions(llvm::StringRef pass, llvm::StringRef options) {
  std::vector<std::pair<std::string, std::string>> out;
  llvm::SmallVector<llvm::StringRef, 8> items;
  options.split(items, ' ', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef item : items) {
    auto [key, value] = item.split('=');
    if (key.empty() || value.empty())
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "pass '%s': option '%s' is not of the form key=value",
          pass.str().c_str(), item.str().c_str());
    out.emplace_back(key.str(), value.str());
  }
  return out;
}

llvm::Error headroom::checkNoOptions(llvm::StringRef pass,
                                     llvm::StringRef options) {
  if (options.trim().empty())
    return llvm::Error::success();
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "pass '%s' takes no options, got '%s'",
                                 pass.str().c_str(), options.str().c_str());
}

std::string headroom::passesMarkdown() {
  std::string s = "# Passes\n\n"
                  "Generated from `passes/Passes.def` by "
                  "`headroom opt --list-passes --markdown`; a test keeps this "
                  "file equal to that output.\n\n"
                  "| pass | what it does |\n|---|---|\n";
  for (const PassInfo &p : kPasses)
    s += "| `" + p.Name.str() + "` | " + p.Summary.str() + " |\n";
  return s;
}

std::string headroom::freshFunctionName(const Module &m, llvm::StringRef base) {
  std::string name = base.str();
  for (int i = 1; m.lookupFunction(name); ++i)
    name = (base + "." + llvm::Twine(i)).str();
  return name;
}

llvm::Expected<StateSlot *>
headroom::stateSlotFor(Module &m, llvm::StringRef name, const TensorType &type,
                       StateKind kind, llvm::StringRef pass) {
  StateSlot *s = m.lookupState(name);
  if (!s)
    return m.addState(name.str(), type, kind);
  if (s->type() != type || s->kind() != kind)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "%s: state @%s exists as %s %s; this pass needs it as %s %s",
        pass.str().c_str(), name.str().c_str(), s->type().str().c_str(),
        stateKindName(s->kind()).str().c_str(), type.str().c_str(),
        stateKindName(kind).str().c_str());
  return s;
}

/// Whether a node draws random numbers: Dropout, and a FusedAttention that
/// took over a Dropout (its `dropout` attribute), which keeps that Dropout's
/// place in the numbering and so draws the same mask.
static bool drawsRandom(const Node &n) {
  return n.is(OpKind::Dropout) ||
         (n.is(OpKind::FusedAttention) && n.attr("dropout"));
}

void headroom::stampRandomStreams(Function &f) {
  bool all = true;
  for (const Node &n : f.nodes())
    all &= !drawsRandom(n) || randomStream(n.attrs());
  if (all) // already numbered (by autodiff): copies keep their streams
    return;
  int64_t stream = 0;
  for (Node &n : f.nodes())
    if (drawsRandom(n))
      setRandomStream(n, stream++);
}

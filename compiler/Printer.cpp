//===- Printer.cpp - Textual IR output ------------------------------------===//
#include "compiler/Printer.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"

using namespace headroom;

bool headroom::isBareIdentifier(llvm::StringRef s) {
  if (s.empty())
    return false;
  for (char c : s)
    if (!llvm::isAlnum(c) && c != '_' && c != '.')
      return false;
  return true;
}

static void printName(llvm::raw_ostream &os, char sigil, llvm::StringRef s) {
  os << sigil;
  if (isBareIdentifier(s))
    os << s;
  else
    printQuoted(os, s);
}

namespace {
/// Assigns each value of one function a unique printed name: its hint when
/// that is free, the hint with a `_N` suffix when it is taken, a number when
/// it has none. Numbers skip every hint so a later hint `%3` cannot clash.
class Namer {
public:
  explicit Namer(const Function &f) {
    llvm::StringSet<> hints;
    forEachValue(f, [&](Value *v) {
      if (!v->name().empty())
        hints.insert(v->name());
    });
    forEachValue(f, [&](Value *v) {
      std::string name = v->name();
      if (name.empty()) {
        do
          name = std::to_string(Next++);
        while (hints.count(name) || Used.count(name));
      } else if (Used.count(name)) {
        unsigned k = 1;
        while (Used.count(v->name() + "_" + std::to_string(k)) ||
               hints.count(v->name() + "_" + std::to_string(k)))
          ++k;
        name = v->name() + "_" + std::to_string(k);
      }
      Used.insert(name);
      Names[v] = name;
    });
  }
  llvm::StringRef operator[](const Value *v) const {
    auto it = Names.find(v);
    assert(it != Names.end() && "operand defined outside the function");
    return it->second;
  }

private:
  template <typename Fn> static void forEachValue(const Function &f, Fn fn) {
    for (Value *a : f.arguments())
      fn(a);
    for (const Node &n : f.nodes())
      for (Value *r : n.results())
        fn(r);
  }
  llvm::DenseMap<const Value *, std::string> Names;
  llvm::StringSet<> Used;
  unsigned Next = 0;
};
} // namespace

static void printNode(const Node &n, const Namer &names,
                      llvm::raw_ostream &os) {
  os << "  ";
  if (n.info()->has(opflags::Terminator)) {
    os << "return";
    for (unsigned i = 0; i < n.numOperands(); ++i) {
      os << (i ? ", " : " ");
      printName(os, '%', names[n.operand(i)]);
    }
    os << '\n';
    return;
  }
  for (unsigned i = 0; i < n.numResults(); ++i) {
    if (i)
      os << ", ";
    printName(os, '%', names[n.result(i)]);
  }
  if (n.numResults())
    os << " = ";
  os << n.op() << '(';
  bool first = true;
  for (const StateSlot *s : n.states()) {
    if (!first)
      os << ", ";
    printName(os, '@', s->name());
    first = false;
  }
  for (Value *v : n.operands()) {
    if (!first)
      os << ", ";
    first = false;
    if (v)
      printName(os, '%', names[v]);
    else
      os << "none";
  }
  os << ')';
  if (!n.attrs().empty()) {
    os << " {";
    bool firstAttr = true;
    for (const auto &kv : n.attrs()) {
      os << (firstAttr ? "" : ", ");
      firstAttr = false;
      if (isBareIdentifier(kv.first))
        os << kv.first;
      else
        printQuoted(os, kv.first);
      os << " = ";
      kv.second.print(os);
    }
    os << '}';
  }
  if (n.numResults()) {
    os << " : ";
    for (unsigned i = 0; i < n.numResults(); ++i) {
      if (i)
        os << ", ";
      n.result(i)->type().print(os);
    }
  }
  if (!n.loc().empty()) {
    os << " loc(";
    printQuoted(os, n.loc());
    os << ')';
  }
  os << '\n';
}

void headroom::printModule(const Module &m, llvm::raw_ostream &os) {
  if (m.ranks() != 1)
    os << "ranks " << m.ranks() << '\n';
  for (const auto &s : m.states()) {
    os << "state ";
    printName(os, '@', s->name());
    os << " : ";
    s->type().print(os);
    os << ' ' << stateKindName(s->kind());
    if (s->replicaOf()) {
      os << ' ';
      printName(os, '@', s->replicaOf()->name());
    }
    if (s->init() != StateInit::Model)
      os << " init " << stateInitName(s->init());
    if (s->onHost())
      os << " host";
    if (s->shardOf()) {
      os << " shard ";
      s->shardOf()->print(os);
    }
    os << '\n';
  }
  for (const LoraAdapter &a : m.adapters()) {
    os << "lora ";
    printName(os, '@', a.Base->name());
    os << ' ';
    printName(os, '@', a.A->name());
    os << ' ';
    printName(os, '@', a.B->name());
    os << " alpha " << shortestDecimal(a.Alpha) << " dropout "
       << shortestDecimal(a.Dropout) << (a.OutIn ? " out_in" : " in_out")
       << '\n';
  }
  for (const auto &f : m.functions()) {
    if (!m.states().empty() || f != m.functions().front())
      os << '\n';
    Namer names(*f);
    os << "func ";
    printName(os, '@', f->name());
    os << '(';
    for (unsigned i = 0; i < f->arguments().size(); ++i) {
      Value *a = f->arguments()[i];
      if (i)
        os << ", ";
      printName(os, '%', names[a]);
      os << ": ";
      a->type().print(os);
    }
    os << ") {\n";
    for (const Node &n : f->nodes())
      printNode(n, names, os);
    os << "}\n";
  }
  if (m.driver().empty())
    return;
  os << "\ndriver ";
  for (size_t i = 0; i < m.driver().size(); ++i) {
    const DriverStep &d = m.driver()[i];
    if (i)
      os << ", ";
    printName(os, '@', d.Callee->name());
    if (d.Repeat != 1)
      os << " repeat " << d.Repeat;
    if (d.SameBatch)
      os << " same_batch";
  }
  os << '\n';
}

std::string headroom::moduleToString(const Module &m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  printModule(m, os);
  return os.str();
}

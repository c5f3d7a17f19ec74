//===- Parser.cpp - Textual IR input --------------------------------------===//
//
// A hand-written lexer and recursive-descent parser. The grammar, informally:
//
//   module   := (state | func)* driver?
//   state    := 'state' @name ':' type ('param' | 'frozen' | 'buffer'
//                                         | 'optimizer' | 'grad')
//   func     := 'func' @name '(' (%name ':' type),* ')' '{' node* '}'
//   driver   := 'driver' (@name ('repeat' int)? 'same_batch'?),+
//   node     := 'return' %name,*
//             | (%name,* '=')? Op '(' (@name | %name | 'none'),* ')'
//               ('{' (key '=' attr),* '}')? (':' type,*)?
//   type     := dtype '[' int,* ']'
//   attr     := int | float | string | dtype | '[' ... ']'
//             | 'dense' '<' type '>' (number | '[' number,* ']')
//
// Comments run from `//` to the end of the line (lit's RUN lines are comments).
//
//===----------------------------------------------------------------------===//
#include "compiler/Parser.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"

#include <cmath>
#include <cstdlib>

using namespace headroom;

namespace {

enum class Tok {
  Eof,
  Ident,   // bare word: keyword, op name, dtype, attribute key
  ValueId, // %name
  StateId, // @name
  Int,
  Float,
  String,
  Punct, // one of ( ) { } [ ] < > , : =
  Error,
};

struct Token {
  Tok Kind = Tok::Eof;
  std::string Text; // identifier/name without sigil, string contents, number
  const char *Loc = nullptr;
};

class Parser {
public:
  Parser(llvm::StringRef text, llvm::StringRef name)
      : Buf(text), Name(name), Cur(text.begin()) {
    next();
  }
  llvm::Expected<std::unique_ptr<Module>> parse();

private:
  // Lexing.
  void next();
  void lexName(Tok kind);
  bool isPunct(char c) const {
    return Tk.Kind == Tok::Punct && Tk.Text[0] == c;
  }
  bool isIdent(llvm::StringRef s) const {
    return Tk.Kind == Tok::Ident && Tk.Text == s;
  }

  // Errors.
  llvm::Error error(const llvm::Twine &msg) const {
    return errorAt(Tk.Loc, msg);
  }
  llvm::Error errorAt(const char *loc, const llvm::Twine &msg) const;
  llvm::Error expectPunct(char c, const llvm::Twine &what);

  // Grammar.
  llvm::Error parseState(Module &m);
  llvm::Error parseRanks(Module &m);
  llvm::Error parseFunction(Module &m);
  llvm::Error parseDriver(Module &m);
  llvm::Error parseLora(Module &m);
  llvm::Error parseNode(Function &f, llvm::StringMap<Value *> &values);
  llvm::Expected<Value *> lookupValue(const llvm::StringMap<Value *> &values,
                                      const Token &t);
  llvm::Error parseReturn(Function &f, const llvm::StringMap<Value *> &values);
  llvm::Error parseResultNames(std::vector<Token> &resultNames);
  llvm::Error parseOperands(Function &f, const llvm::StringMap<Value *> &values,
                            llvm::SmallVectorImpl<StateSlot *> &states,
                            llvm::SmallVectorImpl<Value *> &operands);
  llvm::Error parseAttributes(AttributeMap &attrs);
  llvm::Error parseResultTypes(llvm::SmallVectorImpl<TensorType> &types);
  llvm::Error parseLoc(std::string &loc);
  llvm::Expected<TensorType> parseType();
  llvm::Expected<Attribute> parseAttribute();
  llvm::Expected<Tensor> parseDense();
  llvm::Error defineValue(llvm::StringMap<Value *> &values, const Token &name,
                          Value *v);

  llvm::StringRef Buf, Name;
  const char *Cur;
  Token Tk;
};

} // namespace

//===----------------------------------------------------------------------===//
// Lexer
//===----------------------------------------------------------------------===//

static bool isNameChar(char c) {
  return llvm::isAlnum(c) || c == '_' || c == '.';
}

/// Reads a quoted string at `p` (on the opening quote); returns false on an
/// unterminated string or bad escape.
static bool readQuoted(const char *&p, const char *end, std::string &out) {
  ++p;
  while (p < end && *p != '"') {
    char c = *p++;
    if (c == '\n')
      return false;
    if (c != '\\') {
      out += c;
      continue;
    }
    if (p >= end)
      return false;
    char e = *p++;
    if (e == 'n')
      out += '\n';
    else if (e == 't')
      out += '\t';
    else if (e == '"' || e == '\\')
      out += e;
    else if (llvm::isHexDigit(e) && p < end && llvm::isHexDigit(*p)) {
      out += static_cast<char>(llvm::hexFromNibbles(e, *p));
      ++p;
    } else
      return false;
  }
  if (p >= end)
    return false;
  ++p;
  return true;
}

void Parser::lexName(Tok kind) {
  const char *end = Buf.end();
  ++Cur; // sigil
  if (Cur < end && *Cur == '"') {
    if (!readQuoted(Cur, end, Tk.Text)) {
      Tk.Kind = Tok::Error;
      Tk.Text = "unterminated or malformed quoted name";
      return;
    }
  } else {
    const char *start = Cur;
    while (Cur < end && isNameChar(*Cur))
      ++Cur;
    Tk.Text.assign(start, Cur);
    if (Tk.Text.empty()) {
      Tk.Kind = Tok::Error;
      Tk.Text = "expected a name after the sigil";
      return;
    }
  }
  Tk.Kind = kind;
}

void Parser::next() {
  const char *end = Buf.end();
  for (;;) {
    while (Cur < end && llvm::isSpace(*Cur))
      ++Cur;
    if (Cur + 1 < end && Cur[0] == '/' && Cur[1] == '/') {
      while (Cur < end && *Cur != '\n')
        ++Cur;
      continue;
    }
    break;
  }
  Tk = Token();
  Tk.Loc = Cur;
  if (Cur >= end)
    return;
  char c = *Cur;
  if (c == '%')
    return lexName(Tok::ValueId);
  if (c == '@')
    return lexName(Tok::StateId);
  if (c == '"') {
    if (!readQuoted(Cur, end, Tk.Text)) {
      Tk.Kind = Tok::Error;
      Tk.Text = "unterminated or malformed string";
      return;
    }
    Tk.Kind = Tok::String;
    return;
  }
  if (llvm::StringRef("(){}[]<>,:=").contains(c)) {
    Tk.Kind = Tok::Punct;
    Tk.Text = std::string(1, c);
    ++Cur;
    return;
  }
  if (llvm::isDigit(c) || c == '-' || c == '+') {
    const char *start = Cur++;
    llvm::StringRef rest(Cur, end - Cur);
    if (rest.startswith("inf")) { // -inf, +inf
      Cur += 3;
      Tk.Kind = Tok::Float;
      Tk.Text.assign(start, Cur);
      return;
    }
    bool isFloatLit = false;
    while (Cur < end) {
      char d = *Cur;
      if (llvm::isDigit(d)) {
        ++Cur;
      } else if (d == '.' || d == 'e' || d == 'E') {
        isFloatLit = true;
        ++Cur;
        if ((d == 'e' || d == 'E') && Cur < end && (*Cur == '-' || *Cur == '+'))
          ++Cur;
      } else {
        break;
      }
    }
    Tk.Text.assign(start, Cur);
    Tk.Kind = isFloatLit ? Tok::Float : Tok::Int;
    return;
  }
  if (llvm::isAlpha(c) || c == '_') {
    const char *start = Cur;
    while (Cur < end && isNameChar(*Cur))
      ++Cur;
    Tk.Text.assign(start, Cur);
    Tk.Kind = Tok::Ident;
    if (Tk.Text == "inf" || Tk.Text == "nan")
      Tk.Kind = Tok::Float;
    return;
  }
  Tk.Kind = Tok::Error;
  Tk.Text = std::string("unexpected character '") + c + "'";
  ++Cur;
}

llvm::Error Parser::errorAt(const char *loc, const llvm::Twine &msg) const {
  unsigned line = 1, col = 1;
  for (const char *p = Buf.begin(); p < loc && p < Buf.end(); ++p) {
    if (*p == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  std::string text = msg.str();
  if (Tk.Kind == Tok::Error && loc == Tk.Loc)
    text = Tk.Text;
  return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s:%u:%u: %s",
                                 Name.str().c_str(), line, col, text.c_str());
}

llvm::Error Parser::expectPunct(char c, const llvm::Twine &what) {
  if (!isPunct(c))
    return error("expected '" + llvm::Twine(c) + "' " + what);
  next();
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Grammar
//===----------------------------------------------------------------------===//

llvm::Expected<TensorType> Parser::parseType() {
  if (Tk.Kind != Tok::Ident)
    return error("expected a tensor type such as f32[4, 8]");
  auto dt = parseDType(Tk.Text);
  if (!dt)
    return error("expected an element type (f32, i64, bool, ...), got '" +
                 Tk.Text + "'");
  next();
  if (auto e = expectPunct('[', "after the element type"))
    return e;
  llvm::SmallVector<int64_t, 4> shape;
  while (!isPunct(']')) {
    if (!shape.empty())
      if (auto e = expectPunct(',', "between dimensions"))
        return e;
    int64_t d;
    if (Tk.Kind != Tok::Int || Tk.Text[0] == '-' ||
        llvm::StringRef(Tk.Text).getAsInteger(10, d))
      return error("expected a non-negative dimension");
    shape.push_back(d);
    next();
  }
  TensorType type(*dt, shape);
  if (!type.checkedSizeInBytes())
    return error("type " + type.str() + " has more than 2^52 bytes (4 PiB)");
  next();
  return type;
}

/// The largest `dense<...>` literal the parser materializes.
constexpr uint64_t kMaxLiteralBytes = uint64_t(1) << 30;

static double toDouble(const std::string &s) {
  if (s == "nan")
    return NAN;
  return std::strtod(s.c_str(), nullptr); // handles inf, -inf
}

llvm::Expected<Tensor> Parser::parseDense() {
  next(); // 'dense'
  if (auto e = expectPunct('<', "after 'dense'"))
    return e;
  auto type = parseType();
  if (!type)
    return type.takeError();
  if (auto e = expectPunct('>', "after the tensor type"))
    return e;
  std::vector<Token> elems;
  bool splat = !isPunct('[');
  if (!splat)
    next();
  while (splat ? elems.empty() : !isPunct(']')) {
    if (!splat && !elems.empty())
      if (auto e = expectPunct(',', "between tensor elements"))
        return e;
    if (Tk.Kind != Tok::Int && Tk.Kind != Tok::Float)
      return error("expected a number in the tensor literal");
    if (!isFloat(type->dtype()) && Tk.Kind == Tok::Float)
      return error("expected an integer element for " + type->str());
    elems.push_back(Tk);
    next();
  }
  if (!splat)
    next();
  // A literal is materialized here: a splat of any size would be too.
  if (*type->checkedSizeInBytes() > kMaxLiteralBytes)
    return error("tensor literal of type " + type->str() +
                 " is larger than 1 GiB");
  int64_t n = type->numElements();
  if (!splat && static_cast<int64_t>(elems.size()) != n)
    return error("tensor literal has " + llvm::Twine(elems.size()) +
                 " elements, its type " + type->str() + " needs " +
                 llvm::Twine(n));
  Tensor t(*type);
  for (int64_t i = 0; i < n; ++i) {
    const Token &e = elems[splat ? 0 : i];
    if (isFloat(type->dtype()))
      t.setDouble(i, toDouble(e.Text));
    else if (type->dtype() == DType::U64)
      t.setInt(
          i, static_cast<int64_t>(std::strtoull(e.Text.c_str(), nullptr, 10)));
    else
      t.setInt(i, std::strtoll(e.Text.c_str(), nullptr, 10));
  }
  return t;
}

llvm::Expected<Attribute> Parser::parseAttribute() {
  if (Tk.Kind == Tok::Int) {
    int64_t v = std::strtoll(Tk.Text.c_str(), nullptr, 10);
    next();
    return Attribute::getInt(v);
  }
  if (Tk.Kind == Tok::Float) {
    double v = toDouble(Tk.Text);
    next();
    return Attribute::getFloat(v);
  }
  if (Tk.Kind == Tok::String) {
    std::string s = Tk.Text;
    next();
    return Attribute::getString(s);
  }
  if (isIdent("dense")) {
    auto t = parseDense();
    if (!t)
      return t.takeError();
    return Attribute::getTensor(std::move(*t));
  }
  if (Tk.Kind == Tok::Ident) {
    auto dt = parseDType(Tk.Text);
    if (!dt)
      return error("expected an attribute value, got '" + Tk.Text + "'");
    next();
    return Attribute::getType(*dt);
  }
  if (!isPunct('['))
    return error("expected an attribute value");
  next();
  // A list takes the kind of its first element; `[]` is an empty int list.
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  Tok kind = Tok::Eof;
  while (!isPunct(']')) {
    if (kind != Tok::Eof)
      if (auto e = expectPunct(',', "between list elements"))
        return e;
    if (kind == Tok::Eof)
      kind = Tk.Kind;
    if (Tk.Kind == Tok::Int && kind == Tok::Float)
      floats.push_back(toDouble(Tk.Text));
    else if (Tk.Kind != kind)
      return error("list elements must all be integers, floats or strings");
    else if (kind == Tok::Int)
      ints.push_back(std::strtoll(Tk.Text.c_str(), nullptr, 10));
    else if (kind == Tok::Float)
      floats.push_back(toDouble(Tk.Text));
    else if (kind == Tok::String)
      strings.push_back(Tk.Text);
    else
      return error("expected an integer, float or string list element");
    next();
  }
  next();
  if (kind == Tok::Float)
    return Attribute::getFloats(std::move(floats));
  if (kind == Tok::String)
    return Attribute::getStrings(std::move(strings));
  return Attribute::getInts(std::move(ints));
}

llvm::Error Parser::parseState(Module &m) {
  next(); // 'state'
  if (Tk.Kind != Tok::StateId)
    return error("expected a state name such as @fc1.weight");
  Token name = Tk;
  next();
  if (m.lookupState(name.Text))
    return errorAt(name.Loc, "state @" + name.Text + " is defined twice");
  if (auto e = expectPunct(':', "after the state name"))
    return e;
  auto type = parseType();
  if (!type)
    return type.takeError();
  auto kind = Tk.Kind == Tok::Ident ? parseStateKind(Tk.Text) : llvm::None;
  if (!kind)
    return error("expected a state kind (param, frozen, buffer, optimizer, "
                 "grad or replica)");
  next();
  StateSlot *source = nullptr;
  if (*kind == StateKind::Replica) {
    if (Tk.Kind != Tok::StateId)
      return error("expected the sharded state a replica is gathered from");
    source = m.lookupState(Tk.Text);
    if (!source)
      return error("state @" + Tk.Text +
                   " is not defined (a replica's shard "
                   "comes before it)");
    next();
  }
  StateSlot *slot = m.addState(name.Text, *type, *kind);
  slot->setReplicaOf(source);
  if (Tk.Kind == Tok::Ident && Tk.Text == "init") {
    next();
    auto init = Tk.Kind == Tok::Ident ? parseStateInit(Tk.Text) : llvm::None;
    if (!init)
      return error("expected a state init (model, zeros or kaiming_uniform)");
    next();
    slot->setInit(*init);
  }
  if (Tk.Kind == Tok::Ident && Tk.Text == "host") {
    next();
    slot->setOnHost(true);
  }
  if (Tk.Kind == Tok::Ident && Tk.Text == "shard") {
    next();
    auto whole = parseType();
    if (!whole)
      return whole.takeError();
    slot->setShardOf(*whole);
  }
  return llvm::Error::success();
}

llvm::Error Parser::parseRanks(Module &m) {
  next(); // 'ranks'
  if (!m.states().empty() || !m.functions().empty() || m.ranks() != 1)
    return error("'ranks' comes once, before the states");
  unsigned long long n = 0;
  if (Tk.Kind != Tok::Int || llvm::getAsUnsignedInteger(Tk.Text, 10, n) ||
      n == 0 || n > (1u << 20))
    return error("expected the number of ranks (1 to 2^20)");
  m.setRanks(unsigned(n));
  next();
  return llvm::Error::success();
}

llvm::Error Parser::defineValue(llvm::StringMap<Value *> &values,
                                const Token &name, Value *v) {
  if (!values.insert({name.Text, v}).second)
    return errorAt(name.Loc, "value %" + name.Text + " is defined twice");
  v->setName(name.Text);
  return llvm::Error::success();
}

llvm::Expected<Value *>
Parser::lookupValue(const llvm::StringMap<Value *> &values, const Token &t) {
  auto it = values.find(t.Text);
  if (it == values.end())
    return errorAt(t.Loc, "use of undefined value %" + t.Text);
  return it->second;
}

/// `return %a, %b` (the function's last line).
llvm::Error Parser::parseReturn(Function &f,
                                const llvm::StringMap<Value *> &values) {
  next();
  llvm::SmallVector<Value *, 2> operands;
  while (Tk.Kind == Tok::ValueId) {
    auto v = lookupValue(values, Tk);
    if (!v)
      return v.takeError();
    operands.push_back(*v);
    next();
    if (!isPunct(','))
      break;
    next();
  }
  f.createNode("Return", operands, {});
  if (!isPunct('}'))
    return error("expected '}' after return");
  return llvm::Error::success();
}

/// `%a, %b =` before the op (none for an op without results).
llvm::Error Parser::parseResultNames(std::vector<Token> &resultNames) {
  while (Tk.Kind == Tok::ValueId) {
    resultNames.push_back(Tk);
    next();
    if (isPunct(',')) {
      next();
      if (Tk.Kind != Tok::ValueId)
        return error("expected a result name after ','");
      continue;
    }
    if (auto e = expectPunct('=', "after the result names"))
      return e;
    break;
  }
  return llvm::Error::success();
}

/// `(@state, %value, none, ...)`: state operands first.
llvm::Error Parser::parseOperands(Function &f,
                                  const llvm::StringMap<Value *> &values,
                                  llvm::SmallVectorImpl<StateSlot *> &states,
                                  llvm::SmallVectorImpl<Value *> &operands) {
  if (auto e = expectPunct('(', "after the op name"))
    return e;
  bool first = true;
  while (!isPunct(')')) {
    if (!first)
      if (auto e = expectPunct(',', "between operands"))
        return e;
    if (Tk.Kind == Tok::StateId) {
      if (!operands.empty())
        return error("state operands must come before value operands");
      StateSlot *state = f.parent()->lookupState(Tk.Text);
      if (!state)
        return error("use of undefined state @" + Tk.Text);
      states.push_back(state);
    } else if (Tk.Kind == Tok::ValueId) {
      auto v = lookupValue(values, Tk);
      if (!v)
        return v.takeError();
      operands.push_back(*v);
    } else if (isIdent("none")) {
      operands.push_back(nullptr);
    } else {
      return error("expected an operand (%value, @state or none)");
    }
    first = false;
    next();
  }
  next();
  return llvm::Error::success();
}

/// `{name = value, ...}`, when given.
llvm::Error Parser::parseAttributes(AttributeMap &attrs) {
  if (isPunct('{')) {
    next();
    while (!isPunct('}')) {
      if (!attrs.empty())
        if (auto e = expectPunct(',', "between attributes"))
          return e;
      if (Tk.Kind != Tok::Ident && Tk.Kind != Tok::String)
        return error("expected an attribute name");
      Token key = Tk;
      next();
      if (auto e = expectPunct('=', "after the attribute name"))
        return e;
      auto a = parseAttribute();
      if (!a)
        return a.takeError();
      if (!attrs.emplace(key.Text, std::move(*a)).second)
        return errorAt(key.Loc, "attribute '" + key.Text + "' is given twice");
    }
    next();
  }
  return llvm::Error::success();
}

/// `: type, type` after the node, when given.
llvm::Error Parser::parseResultTypes(llvm::SmallVectorImpl<TensorType> &types) {
  if (isPunct(':')) {
    next();
    do {
      if (!types.empty())
        next(); // ','
      auto t = parseType();
      if (!t)
        return t.takeError();
      types.push_back(*t);
    } while (isPunct(','));
  }
  return llvm::Error::success();
}

/// `loc("...")`, when given.
llvm::Error Parser::parseLoc(std::string &loc) {
  if (isIdent("loc")) {
    next();
    if (auto e = expectPunct('(', "after 'loc'"))
      return e;
    if (Tk.Kind != Tok::String)
      return error("expected a quoted location in loc(...)");
    loc = Tk.Text;
    next();
    if (!isPunct(')'))
      return error("expected ')' after the location");
    next();
  }
  return llvm::Error::success();
}

llvm::Error Parser::parseNode(Function &f, llvm::StringMap<Value *> &values) {
  if (isIdent("return"))
    return parseReturn(f, values);
  std::vector<Token> resultNames;
  if (auto e = parseResultNames(resultNames))
    return e;
  if (Tk.Kind != Tok::Ident)
    return error("expected an op name");
  Token opTok = Tk;
  const OpInfo *info = lookupOp(opTok.Text);
  if (!info)
    return error("unknown op '" + opTok.Text + "'");
  next();
  llvm::SmallVector<StateSlot *, 1> states;
  llvm::SmallVector<Value *, 4> operands;
  if (auto e = parseOperands(f, values, states, operands))
    return e;
  AttributeMap attrs;
  if (auto e = parseAttributes(attrs))
    return e;
  llvm::SmallVector<TensorType, 2> types;
  if (auto e = parseResultTypes(types))
    return e;
  if (types.size() != resultNames.size())
    return errorAt(opTok.Loc, "expected " + llvm::Twine(resultNames.size()) +
                                  " result type(s) after ':', got " +
                                  llvm::Twine(types.size()));
  std::string loc;
  if (auto e = parseLoc(loc))
    return e;
  Node *n = f.createNode(opTok.Text, operands, types, std::move(attrs));
  for (StateSlot *s : states)
    n->addState(s);
  n->setLoc(std::move(loc));
  for (unsigned i = 0; i < resultNames.size(); ++i)
    if (auto e = defineValue(values, resultNames[i], n->result(i)))
      return e;
  return llvm::Error::success();
}

llvm::Error Parser::parseFunction(Module &m) {
  next(); // 'func'
  if (Tk.Kind != Tok::StateId)
    return error("expected a function name such as @forward");
  if (m.lookupFunction(Tk.Text))
    return error("function @" + Tk.Text + " is defined twice");
  Function *f = m.addFunction(Tk.Text);
  next();
  if (auto e = expectPunct('(', "after the function name"))
    return e;
  llvm::StringMap<Value *> values;
  while (!isPunct(')')) {
    if (!f->arguments().empty())
      if (auto e = expectPunct(',', "between arguments"))
        return e;
    if (Tk.Kind != Tok::ValueId)
      return error("expected an argument name such as %x");
    Token name = Tk;
    next();
    if (auto e = expectPunct(':', "after the argument name"))
      return e;
    auto type = parseType();
    if (!type)
      return type.takeError();
    if (auto e = defineValue(values, name, f->addArgument(*type, name.Text)))
      return e;
  }
  next();
  if (auto e = expectPunct('{', "to open the function body"))
    return e;
  while (!isPunct('}')) {
    if (Tk.Kind == Tok::Eof)
      return error("expected '}' to close function @" + f->name());
    if (auto e = parseNode(*f, values))
      return e;
  }
  const char *close = Tk.Loc;
  next();
  if (!f->returnNode())
    return errorAt(close,
                   "function @" + f->name() + " does not end with 'return'");
  return llvm::Error::success();
}

llvm::Error Parser::parseDriver(Module &m) {
  next(); // 'driver'
  std::vector<DriverStep> steps;
  do {
    if (!steps.empty())
      next(); // ','
    if (Tk.Kind != Tok::StateId)
      return error("expected a function name such as @step");
    Function *f = m.lookupFunction(Tk.Text);
    if (!f)
      return error("the driver calls @" + Tk.Text +
                   ", which is not defined above it");
    next();
    DriverStep d;
    d.Callee = f;
    if (isIdent("repeat")) {
      next();
      unsigned long long n = 0;
      if (Tk.Kind != Tok::Int || llvm::getAsUnsignedInteger(Tk.Text, 10, n) ||
          n == 0 || n > UINT32_MAX)
        return error("expected a repeat count of at least 1");
      d.Repeat = static_cast<unsigned>(n);
      next();
    }
    if (isIdent("same_batch")) {
      if (steps.empty())
        return error("the driver's first call has no batch before it to "
                     "reuse");
      d.SameBatch = true;
      next();
    }
    steps.push_back(d);
  } while (isPunct(','));
  m.setDriver(std::move(steps));
  return llvm::Error::success();
}

/// lora @W @A @B alpha X dropout P out_in|in_out
llvm::Error Parser::parseLora(Module &m) {
  next(); // 'lora'
  LoraAdapter a;
  for (StateSlot **slot : {&a.Base, &a.A, &a.B}) {
    if (Tk.Kind != Tok::StateId)
      return error("expected the base, A and B states of a lora adapter");
    *slot = m.lookupState(Tk.Text);
    if (!*slot)
      return error("use of undefined state @" + Tk.Text);
    next();
  }
  for (double *field : {&a.Alpha, &a.Dropout}) {
    if (!isIdent(field == &a.Alpha ? "alpha" : "dropout"))
      return error(field == &a.Alpha ? "expected 'alpha'"
                                     : "expected 'dropout'");
    next();
    if ((Tk.Kind != Tok::Int && Tk.Kind != Tok::Float) ||
        llvm::StringRef(Tk.Text).getAsDouble(*field))
      return error("expected a number");
    next();
  }
  if (!isIdent("out_in") && !isIdent("in_out"))
    return error("expected the base's layout, out_in or in_out");
  a.OutIn = isIdent("out_in");
  next();
  m.addAdapter(a);
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<Module>> Parser::parse() {
  auto m = std::make_unique<Module>();
  while (Tk.Kind != Tok::Eof) {
    llvm::Error e = llvm::Error::success();
    if (isIdent("state"))
      e = parseState(*m);
    else if (isIdent("ranks"))
      e = parseRanks(*m);
    else if (isIdent("lora"))
      e = parseLora(*m);
    else if (isIdent("func"))
      e = parseFunction(*m);
    else if (isIdent("driver") && m->driver().empty())
      e = parseDriver(*m);
    else if (isIdent("driver"))
      e = error("the module already has a driver");
    else
      e = error("expected 'ranks', 'state', 'lora', 'func' or 'driver'");
    if (e)
      return e;
  }
  return m;
}

llvm::Expected<std::unique_ptr<Module>>
headroom::parseModule(llvm::StringRef text, llvm::StringRef bufferName) {
  return Parser(text, bufferName).parse();
}

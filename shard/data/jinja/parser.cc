#include "shard/data/jinja/parser.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <initializer_list>

#include "shard/data/jinja/budget.h"

namespace shard::jinja {
namespace {

bool IsOneOf(const std::string& s, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return s == n; });
}

ExprPtr MakeExpr(ExprKind kind, int line, std::string name = {}) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  e->name = std::move(name);
  return e;
}

// Attaches a child (null: an omitted part), keeping the tree's depth, which
// bounds how deep the render's walk of it recurses.
void Deepen(Expr* parent, const Expr* child) {
  if (!child) return;
  parent->depth = std::max(parent->depth, child->depth + 1);
  if (parent->depth > kMaxParseDepth)
    Fail("expression nested deeper than " + std::to_string(kMaxParseDepth) +
             " levels (operators, filters, calls or brackets)",
         parent->line);
}
void Add(Expr* parent, ExprPtr child) {
  Deepen(parent, child.get());
  parent->args.push_back(std::move(child));
}
void Add(const ExprPtr& parent, ExprPtr child) { Add(parent.get(), std::move(child)); }
void AddKw(Expr* parent, std::string name, ExprPtr child) {
  Deepen(parent, child.get());
  parent->kw.emplace_back(std::move(name), std::move(child));
}

// An integer literal (Python's are unbounded; the template's are int64).
int64_t IntLiteral(const Token& t) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(t.text.c_str(), &end, 10);
  if (errno == ERANGE || end != t.text.c_str() + t.text.size())
    Fail("integer literal " + t.text + " does not fit in 64 bits (template integers are int64)", t.line);
  return v;
}

ExprPtr Binary(std::string op, ExprPtr a, ExprPtr b) {
  auto e = MakeExpr(ExprKind::kBinary, a->line, std::move(op));
  Add(e, std::move(a));
  Add(e, std::move(b));
  return e;
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& t) : t_(t) {}

  Body Top() {
    std::string end;
    Body b = ParseBody({}, &end);
    return b;
  }

 private:
  const Token& Peek(size_t k = 0) const { return t_[std::min(pos_ + k, t_.size() - 1)]; }
  const Token& Next() { return t_[std::min(pos_++, t_.size() - 1)]; }
  bool IsOp(const char* op, size_t k = 0) const { return Peek(k).type == Tok::kOp && Peek(k).text == op; }
  bool IsName(const char* n, size_t k = 0) const { return Peek(k).type == Tok::kName && Peek(k).text == n; }
  bool AcceptOp(const char* op) { return IsOp(op) ? (++pos_, true) : false; }
  bool AcceptName(const char* n) { return IsName(n) ? (++pos_, true) : false; }
  [[noreturn]] void Unexpected(const std::string& what) const {
    const Token& t = Peek();
    std::string got = t.type == Tok::kEnd ? "the end of the template"
                      : t.type == Tok::kStmtClose ? "'%}'"
                      : t.type == Tok::kExprClose ? "'}}'"
                                                  : "'" + t.text + "'";
    Fail("expected " + what + ", got " + got, t.line);
  }
  void ExpectOp(const char* op) {
    if (!AcceptOp(op)) Unexpected(std::string("'") + op + "'");
  }
  std::string ExpectName() {
    if (Peek().type != Tok::kName) Unexpected("a name");
    return Next().text;
  }
  void ExpectStmtClose() {
    if (Peek().type != Tok::kStmtClose) Unexpected("'%}'");
    ++pos_;
  }

  // One level of the parser's recursion (a block, a bracket, a unary
  // operator) for its lifetime: a source nested past kMaxParseDepth is refused
  // before it can run the parser or the render off the end of the stack.
  class Nested {
   public:
    Nested(Parser* p, int line) : p_(p) {
      if (++p_->depth_ > kMaxParseDepth) {
        --p_->depth_;
        Fail("nested deeper than " + std::to_string(kMaxParseDepth) + " levels (blocks, brackets or operators)", line);
      }
    }
    ~Nested() { --p_->depth_; }
    Nested(const Nested&) = delete;
    Nested& operator=(const Nested&) = delete;

   private:
    Parser* p_;
  };

  // Statements until `{% <one of ends> %}`; *end gets the end keyword (its tag is left unconsumed).
  Body ParseBody(std::initializer_list<const char*> ends, std::string* end) {
    Nested nested(this, Peek().line);
    Body body;
    while (true) {
      const Token& t = Peek();
      if (t.type == Tok::kEnd) {
        if (ends.size() == 0) return body;
        Fail(std::string("missing {% ") + *(ends.end() - 1) + " %} before the end of the template", t.line);
      }
      if (t.type == Tok::kText) {
        auto n = std::make_unique<Node>();
        n->kind = NodeKind::kText;
        n->line = t.line;
        n->text = Next().text;
        body.push_back(std::move(n));
      } else if (t.type == Tok::kExprOpen) {
        ++pos_;
        auto n = std::make_unique<Node>();
        n->kind = NodeKind::kOutput;
        n->line = t.line;
        n->exprs.push_back(Expression());
        if (Peek().type != Tok::kExprClose) Unexpected("'}}'");
        ++pos_;
        body.push_back(std::move(n));
      } else if (t.type == Tok::kStmtOpen) {
        const Token& kw = Peek(1);
        if (kw.type == Tok::kName && std::any_of(ends.begin(), ends.end(), [&](const char* e) { return kw.text == e; })) {
          *end = kw.text;
          return body;
        }
        ++pos_;
        body.push_back(Statement());
      } else {
        Unexpected("text or a tag");
      }
    }
  }

  // Consumes `{% keyword` of a closing tag found by ParseBody.
  void ConsumeTagStart() { pos_ += 2; }

  std::unique_ptr<Node> Statement() {
    const Token& kw = Peek();
    if (kw.type != Tok::kName) Unexpected("a statement name");
    auto n = std::make_unique<Node>();
    n->line = kw.line;
    const std::string name = Next().text;
    std::string end;
    if (name == "if") {
      n->kind = NodeKind::kIf;
      n->exprs.push_back(Expression());
      ExpectStmtClose();
      while (true) {
        n->bodies.push_back(ParseBody({"elif", "else", "endif"}, &end));
        ConsumeTagStart();
        if (end == "elif") {
          n->exprs.push_back(Expression());
          ExpectStmtClose();
        } else if (end == "else") {
          ExpectStmtClose();
          n->bodies.push_back(ParseBody({"endif"}, &end));
          ConsumeTagStart();
          ExpectStmtClose();
          break;
        } else {
          ExpectStmtClose();
          break;
        }
      }
    } else if (name == "for") {
      For(n.get());
    } else if (name == "set") {
      Set(n.get());
    } else if (name == "macro") {
      Macro(n.get());
    } else if (name == "generation") {
      n->kind = NodeKind::kGeneration;
      ExpectStmtClose();
      n->bodies.push_back(ParseBody({"endgeneration"}, &end));
      ConsumeTagStart();
      ExpectStmtClose();
    } else if (name == "break" || name == "continue") {
      n->kind = name == "break" ? NodeKind::kBreak : NodeKind::kContinue;
      if (loops_ == 0) Fail("{% " + name + " %} outside a loop", kw.line);
      ExpectStmtClose();
    } else if (IsOneOf(name, {"elif", "else", "endif", "endfor", "endset", "endmacro", "endgeneration"})) {
      Fail("{% " + name + " %} without its opening tag", kw.line);
    } else {
      Fail("unsupported construct {% " + name + " %} (outside the chat-template subset of Jinja)", kw.line);
    }
    return n;
  }

  void For(Node* n) {
    n->kind = NodeKind::kFor;
    const bool paren = AcceptOp("(");
    do n->names.push_back(ExpectName());
    while (AcceptOp(","));
    if (paren) ExpectOp(")");
    if (!AcceptName("in")) Unexpected("'in'");
    n->exprs.push_back(Or());
    if (AcceptName("if")) n->exprs.push_back(Expression());
    if (IsName("recursive")) Fail("unsupported construct 'for ... recursive'", Peek().line);
    ExpectStmtClose();
    std::string end;
    ++loops_;
    n->bodies.push_back(ParseBody({"else", "endfor"}, &end));
    --loops_;
    ConsumeTagStart();
    ExpectStmtClose();
    if (end == "else") {
      n->bodies.push_back(ParseBody({"endfor"}, &end));
      ConsumeTagStart();
      ExpectStmtClose();
    }
  }

  void Set(Node* n) {
    n->kind = NodeKind::kSet;
    std::string target = ExpectName();
    if (AcceptOp(".")) target += "." + ExpectName();
    n->names.push_back(target);
    while (AcceptOp(",")) n->names.push_back(ExpectName());
    if (AcceptOp("=")) {
      n->exprs.push_back(TupleOrExpression());
      ExpectStmtClose();
      return;
    }
    if (n->names.size() != 1 || Peek().type != Tok::kStmtClose) Unexpected("'=' or '%}' (a block set)");
    ++pos_;
    std::string end;
    n->bodies.push_back(ParseBody({"endset"}, &end));
    ConsumeTagStart();
    ExpectStmtClose();
  }

  void Macro(Node* n) {
    n->kind = NodeKind::kMacro;
    n->text = ExpectName();
    ExpectOp("(");
    while (!AcceptOp(")")) {
      n->names.push_back(ExpectName());
      n->exprs.push_back(AcceptOp("=") ? Expression() : nullptr);
      if (!IsOp(")")) ExpectOp(",");
    }
    ExpectStmtClose();
    std::string end;
    const int loops = loops_;  // a macro's body is a function of its own: no loop around it
    loops_ = 0;
    n->bodies.push_back(ParseBody({"endmacro"}, &end));
    loops_ = loops;
    ConsumeTagStart();
    ExpectStmtClose();
  }

  // `a, b` without brackets is a tuple (in set statements).
  ExprPtr TupleOrExpression() {
    ExprPtr first = Expression();
    if (!IsOp(",")) return first;
    auto list = MakeExpr(ExprKind::kList, first->line);
    Add(list, std::move(first));
    while (AcceptOp(",")) Add(list, Expression());
    return list;
  }

 public:
  ExprPtr Expression() {
    Nested nested(this, Peek().line);
    ExprPtr e = Or();
    if (!IsName("if")) return e;
    const int line = Next().line;
    auto c = MakeExpr(ExprKind::kCond, line);
    Add(c, Or());
    Add(c, std::move(e));
    Add(c, AcceptName("else") ? Expression() : nullptr);
    return c;
  }

 private:
  ExprPtr Or() {
    ExprPtr e = And();
    while (AcceptName("or")) e = Binary("or", std::move(e), And());
    return e;
  }
  ExprPtr And() {
    ExprPtr e = Not();
    while (AcceptName("and")) e = Binary("and", std::move(e), Not());
    return e;
  }
  ExprPtr Not() {
    if (IsName("not")) {
      Nested nested(this, Peek().line);
      auto u = MakeExpr(ExprKind::kUnary, Next().line, "not");
      Add(u, Not());
      return u;
    }
    return Compare();
  }
  ExprPtr Compare() {
    ExprPtr e = Math1();
    while (true) {
      if (Peek().type == Tok::kOp && IsOneOf(Peek().text, {"==", "!=", "<", ">", "<=", ">="})) {
        std::string op = Next().text;
        e = Binary(op, std::move(e), Math1());
      } else if (AcceptName("in")) {
        e = Binary("in", std::move(e), Math1());
      } else if (IsName("not") && IsName("in", 1)) {
        pos_ += 2;
        e = Binary("not in", std::move(e), Math1());
      } else {
        return e;
      }
    }
  }
  ExprPtr Math1() {
    ExprPtr e = Concat();
    while (IsOp("+") || IsOp("-")) {
      std::string op = Next().text;
      e = Binary(op, std::move(e), Concat());
    }
    return e;
  }
  ExprPtr Concat() {
    ExprPtr e = Math2();
    while (AcceptOp("~")) e = Binary("~", std::move(e), Math2());
    return e;
  }
  ExprPtr Math2() {
    ExprPtr e = Pow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      std::string op = Next().text;
      e = Binary(op, std::move(e), Pow());
    }
    return e;
  }
  ExprPtr Pow() {
    ExprPtr e = Unary(true);
    while (AcceptOp("**")) e = Binary("**", std::move(e), Unary(true));
    return e;
  }
  ExprPtr Unary(bool with_filter) {
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      Nested nested(this, Peek().line);
      const Token& t = Next();
      e = MakeExpr(ExprKind::kUnary, t.line, t.text);
      Add(e, Unary(false));
    } else {
      e = Postfix(Primary());
    }
    return with_filter ? FilterOrTest(std::move(e)) : std::move(e);
  }

  void CallArguments(Expr* call) {
    // After '(' : positional and name=value arguments up to ')'.
    while (!AcceptOp(")")) {
      if (Peek().type == Tok::kName && IsOp("=", 1)) {
        std::string k = Next().text;
        ++pos_;
        AddKw(call, std::move(k), Expression());
      } else {
        Add(call, Expression());
      }
      if (!IsOp(")")) ExpectOp(",");
    }
  }

  ExprPtr Postfix(ExprPtr e) {
    while (true) {
      if (AcceptOp(".")) {
        const Token& t = Next();
        if (t.type == Tok::kInt) {
          auto ix = MakeExpr(ExprKind::kIndex, t.line);
          Add(ix, std::move(e));
          auto lit = MakeExpr(ExprKind::kLiteral, t.line);
          lit->value = Value::Int(IntLiteral(t));
          Add(ix, std::move(lit));
          e = std::move(ix);
          continue;
        }
        if (t.type != Tok::kName) Fail("expected an attribute name after '.'", t.line);
        auto a = MakeExpr(ExprKind::kAttr, t.line, t.text);
        Add(a, std::move(e));
        e = std::move(a);
      } else if (IsOp("[")) {
        e = Subscript(std::move(e));
      } else if (IsOp("(")) {
        auto c = MakeExpr(ExprKind::kCall, Next().line);
        Add(c, std::move(e));
        CallArguments(c.get());
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr Subscript(ExprPtr e) {
    const int line = Next().line;  // '['
    ExprPtr parts[3];
    int colons = 0;
    while (!AcceptOp("]")) {
      if (AcceptOp(":")) {
        if (++colons > 2) Fail("too many ':' in a slice", line);
        continue;
      }
      if (parts[colons]) Unexpected("':' or ']'");
      parts[colons] = Expression();
    }
    if (colons == 0) {
      if (!parts[0]) Fail("empty subscript []", line);
      auto ix = MakeExpr(ExprKind::kIndex, line);
      Add(ix, std::move(e));
      Add(ix, std::move(parts[0]));
      return ix;
    }
    auto s = MakeExpr(ExprKind::kSlice, line);
    Add(s, std::move(e));
    for (auto& p : parts) Add(s, std::move(p));
    return s;
  }

  ExprPtr FilterOrTest(ExprPtr e) {
    while (true) {
      if (AcceptOp("|")) {
        const Token& t = Peek();
        auto f = MakeExpr(ExprKind::kFilter, t.line, ExpectName());
        Add(f, std::move(e));
        if (AcceptOp("(")) CallArguments(f.get());
        e = std::move(f);
      } else if (IsName("is")) {
        const int line = Next().line;
        const bool negate = AcceptName("not");
        auto t = MakeExpr(ExprKind::kTest, line, ExpectName());
        t->negate = negate;
        Add(t, std::move(e));
        if (AcceptOp("(")) {
          CallArguments(t.get());
        } else if ((Peek().type == Tok::kString || Peek().type == Tok::kInt || Peek().type == Tok::kFloat ||
                    (Peek().type == Tok::kName &&
                     !IsOneOf(Peek().text, {"else", "or", "and", "if", "not", "in", "is"})))) {
          Add(t, Postfix(Primary()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  ExprPtr Primary() {
    const Token& t = Peek();
    switch (t.type) {
      case Tok::kName: {
        ++pos_;
        auto lit = MakeExpr(ExprKind::kLiteral, t.line);
        if (t.text == "true" || t.text == "True") lit->value = Value::Bool(true);
        else if (t.text == "false" || t.text == "False") lit->value = Value::Bool(false);
        else if (t.text == "none" || t.text == "None") lit->value = Value::None();
        else return MakeExpr(ExprKind::kName, t.line, t.text);
        return lit;
      }
      case Tok::kString: {
        auto lit = MakeExpr(ExprKind::kLiteral, t.line);
        std::string s;
        while (Peek().type == Tok::kString) s += Next().text;  // adjacent literals join
        lit->value = Value::Str(std::move(s));
        return lit;
      }
      case Tok::kInt:
      case Tok::kFloat: {
        ++pos_;
        auto lit = MakeExpr(ExprKind::kLiteral, t.line);
        lit->value = t.type == Tok::kInt ? Value::Int(IntLiteral(t)) : Value::Float(std::strtod(t.text.c_str(), nullptr));
        return lit;
      }
      case Tok::kOp:
        if (t.text == "(") return Parenthesised();
        if (t.text == "[") return Sequence("]", ExprKind::kList);
        if (t.text == "{") return Sequence("}", ExprKind::kDict);
        [[fallthrough]];
      default: Unexpected("an expression");
    }
  }

  ExprPtr Parenthesised() {
    const int line = Next().line;
    if (AcceptOp(")")) return MakeExpr(ExprKind::kList, line);
    ExprPtr e = Expression();
    if (AcceptOp(")")) return e;
    auto list = MakeExpr(ExprKind::kList, line);
    Add(list, std::move(e));
    while (AcceptOp(",")) {
      if (IsOp(")")) break;
      Add(list, Expression());
    }
    ExpectOp(")");
    return list;
  }

  ExprPtr Sequence(const char* close, ExprKind kind) {
    auto e = MakeExpr(kind, Next().line);
    while (!AcceptOp(close)) {
      Add(e, Expression());
      if (kind == ExprKind::kDict) {
        ExpectOp(":");
        Add(e, Expression());
      }
      if (!IsOp(close)) ExpectOp(",");
    }
    return e;
  }

  const std::vector<Token>& t_;
  size_t pos_ = 0;
  int depth_ = 0;  // Nested levels open
  int loops_ = 0;  // for bodies open around the statement being parsed (break/continue need one)
};

}  // namespace

Body Parse(const std::vector<Token>& tokens) { return Parser(tokens).Top(); }

}  // namespace shard::jinja

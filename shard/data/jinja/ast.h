// The parsed template: statement nodes holding expression trees. One generic
// node type each (a kind plus children) keeps the parser and interpreter short.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "shard/data/jinja/value.h"

namespace shard::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,  // value
  kName,     // name
  kList,     // args: the items (tuples are lists)
  kDict,     // args: key, value, key, value, ...
  kAttr,     // args[0].name
  kIndex,    // args[0][args[1]]
  kSlice,    // args[0][args[1]:args[2]:args[3]] (null children: omitted)
  kCall,     // args[0](args[1..], kw)
  kFilter,   // args[0] | name(args[1..], kw)
  kTest,     // args[0] is [not] name(args[1..]); negate
  kUnary,    // name ("not", "-", "+") args[0]
  kBinary,   // args[0] name args[1]
  kCond,     // args[1] if args[0] else args[2] (args[2] may be null)
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  int depth = 1;  // of the tree below (and with) this node; the parser bounds it
  std::string name;
  bool negate = false;
  Value value;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kw;
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

enum class NodeKind {
  kText,        // text
  kOutput,      // {{ exprs[0] }}
  kIf,          // exprs[k] guards bodies[k]; one more body than exprs: the else
  kFor,         // for names in exprs[0] [if exprs[1]]: bodies[0], else bodies[1]
  kSet,         // names (one name, "ns.attr", or several to unpack) = exprs[0], or bodies[0] (block set)
  kMacro,       // name(names with defaults in exprs, null = none): bodies[0]
  kGeneration,  // {% generation %} bodies[0] {% endgeneration %}
  kBreak,
  kContinue,
};

struct Node {
  NodeKind kind = NodeKind::kText;
  int line = 0;
  std::string text;
  std::vector<std::string> names;
  std::vector<ExprPtr> exprs;
  std::vector<Body> bodies;
};

}  // namespace shard::jinja

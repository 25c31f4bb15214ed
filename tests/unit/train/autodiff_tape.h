// A scalar reverse-mode autodiff tape in double precision: the independent
// reference the parity tests (LoRA, preference) check the engine against.
// Every value is a node; Backward(out) fills each node's d(out)/d(node) in g.
#pragma once

#include <cmath>
#include <utility>
#include <vector>

namespace shard::autodiff {

struct Tape {
  struct Node {
    double v = 0, g = 0;
    std::vector<std::pair<int, double>> in;  // parent, d(this)/d(parent)
  };
  std::vector<Node> n;
  int Push(double v, std::vector<std::pair<int, double>> in = {}) {
    n.push_back({v, 0, std::move(in)});
    return static_cast<int>(n.size()) - 1;
  }
  double v(int i) const { return n[i].v; }
  int Leaf(double x) { return Push(x); }
  // c0 + sum coef_i x_i
  int Lin(const std::vector<std::pair<int, double>>& terms, double c0 = 0) {
    double s = c0;
    for (auto [i, c] : terms) s += c * n[i].v;
    return Push(s, terms);
  }
  int Add(int a, int b) { return Lin({{a, 1}, {b, 1}}); }
  int Mul(int a, int b) { return Push(n[a].v * n[b].v, {{a, n[b].v}, {b, n[a].v}}); }
  int Dot(const std::vector<int>& a, const std::vector<int>& b) {
    double s = 0;
    std::vector<std::pair<int, double>> in;
    for (size_t i = 0; i < a.size(); ++i) {
      s += n[a[i]].v * n[b[i]].v;
      in.push_back({a[i], n[b[i]].v});
      in.push_back({b[i], n[a[i]].v});
    }
    return Push(s, std::move(in));
  }
  int Exp(int a) { const double e = std::exp(n[a].v); return Push(e, {{a, e}}); }
  int Log(int a) { return Push(std::log(n[a].v), {{a, 1 / n[a].v}}); }
  int Inv(int a) { return Push(1 / n[a].v, {{a, -1 / (n[a].v * n[a].v)}}); }
  int Rsqrt(int a) { const double r = 1 / std::sqrt(n[a].v); return Push(r, {{a, -0.5 * r * r * r}}); }
  int Silu(int a) {
    const double x = n[a].v, sg = 1 / (1 + std::exp(-x));
    return Push(x * sg, {{a, sg * (1 + x * (1 - sg))}});
  }
  void Backward(int out) {
    n[out].g = 1;
    for (int i = out; i >= 0; --i)
      for (auto [p, d] : n[i].in) n[p].g += d * n[i].g;
  }
};

}  // namespace shard::autodiff

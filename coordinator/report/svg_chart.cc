#include "coordinator/report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

namespace shardd {
namespace {

constexpr double kW = 400, kH = 170, kL = 46, kR = 8, kT = 8, kB = 20;

std::string Fixed1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

std::string MarkLine(const char* cls, double x, const std::string& title) {
  return "<line class=\"" + std::string(cls) + "\" x1=\"" + Fixed1(x) + "\" y1=\"" + Fixed1(kT) + "\" x2=\"" +
         Fixed1(x) + "\" y2=\"" + Fixed1(kH - kB) + "\"><title>" + title + "</title></line>";
}

}  // namespace

std::string HtmlEscape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string ShortNumber(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "NaN" : (v > 0 ? "inf" : "-inf");
  char buf[32];
  const double a = std::fabs(v);
  if (a != 0 && (a < 1e-3 || a >= 1e7)) std::snprintf(buf, sizeof(buf), "%.3g", v);
  else std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

namespace {

// The chart both entry points draw: one line (named "" : no data-series, its
// last value beside the title) or several.
struct Line {
  std::string name, color;
  std::vector<std::pair<double, double>> pts;
};

std::string Chart(const std::string& id, const std::string& title, const std::vector<Line>& lines, bool log_scale,
                  const std::vector<int64_t>& commits, const std::vector<int64_t>& restarts) {
  size_t count = 0;
  double x0 = 0, x1 = 0, y0 = 0, y1 = 0;
  for (const Line& l : lines)
    for (const auto& p : l.pts) {
      if (count++ == 0) x0 = x1 = p.first, y0 = y1 = p.second;
      x0 = std::min(x0, p.first), x1 = std::max(x1, p.first);
      y0 = std::min(y0, p.second), y1 = std::max(y1, p.second);
    }
  std::string svg = "<svg id=\"chart-" + HtmlEscape(id) + "\" viewBox=\"0 0 400 170\" preserveAspectRatio=\"none\" "
                    "data-points=\"" + std::to_string(count) + "\">";
  if (count == 0)
    return "<div class=\"chart\"><h3>" + HtmlEscape(title) + "</h3>" + svg +
           "<text x=\"200\" y=\"85\" text-anchor=\"middle\">no data</text></svg></div>";
  const bool log = log_scale && y0 > 0;
  if (log) y0 = std::log10(y0), y1 = std::log10(y1);
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 += std::fabs(y1) * 0.05 + 1e-9, y0 -= std::fabs(y0) * 0.05 + 1e-9;
  auto tx = [&](double x) { return kL + (x - x0) / (x1 - x0) * (kW - kL - kR); };
  auto ty = [&](double y) { return kT + (1 - ((log ? std::log10(y) : y) - y0) / (y1 - y0)) * (kH - kT - kB); };
  auto label = [&](double v) { return ShortNumber(log ? std::pow(10, v) : v); };
  svg += "<line class=\"axis\" x1=\"46\" y1=\"150\" x2=\"392\" y2=\"150\"/>"
         "<line class=\"axis\" x1=\"46\" y1=\"8\" x2=\"46\" y2=\"150\"/>";
  svg += "<text x=\"42\" y=\"16\" text-anchor=\"end\">" + label(y1) + "</text>";
  svg += "<text x=\"42\" y=\"150\" text-anchor=\"end\">" + label(y0) + "</text>";
  svg += "<text x=\"46\" y=\"164\">" + std::to_string(static_cast<int64_t>(x0)) +
         "</text><text x=\"392\" y=\"164\" text-anchor=\"end\">step " + std::to_string(static_cast<int64_t>(x1)) +
         "</text>";
  for (int64_t c : commits)
    if (c >= x0 && c <= x1) svg += MarkLine("commit", tx(static_cast<double>(c)), "checkpoint " + std::to_string(c));
  for (int64_t r : restarts)
    if (r >= x0 && r <= x1)
      svg += MarkLine("restart", tx(static_cast<double>(r)), "new attempt from step " + std::to_string(r));
  std::string legend;
  for (const Line& l : lines) {
    if (l.pts.empty()) continue;
    std::string d;
    d.reserve(l.pts.size() * 12);
    for (const auto& p : l.pts) {
      if (!d.empty()) d += ' ';
      d += Fixed1(tx(p.first)) + "," + Fixed1(ty(p.second));
    }
    svg += "<polyline class=\"line\" stroke=\"" + HtmlEscape(l.color) + "\"" +
           (l.name.empty() ? "" : " data-series=\"" + HtmlEscape(l.name) + "\"") + " points=\"" + d + "\"/>";
    if (!legend.empty()) legend += " &middot; ";
    legend += l.name.empty() ? ShortNumber(l.pts.back().second)
                             : "<span style=\"color:" + HtmlEscape(l.color) + "\">" + HtmlEscape(l.name) + "</span> " +
                                   ShortNumber(l.pts.back().second);
  }
  svg += "</svg>";
  return "<div class=\"chart\"><h3>" + HtmlEscape(title) + " <span class=\"muted\">" + legend + "</span></h3>" + svg +
         "</div>";
}

Line PointsOf(const ChartSeries& s, std::string name) {
  Line l{std::move(name), s.color, {}};
  for (size_t i = 0; i < s.steps.size() && i < s.values.size(); ++i)
    if (s.values[i] && std::isfinite(*s.values[i])) l.pts.emplace_back(static_cast<double>(s.steps[i]), *s.values[i]);
  return l;
}

}  // namespace

std::string SvgLineChart(const ChartSeries& s, const std::vector<int64_t>& commits,
                         const std::vector<int64_t>& restarts) {
  return Chart(s.id, s.title, {PointsOf(s, "")}, s.log_scale, commits, restarts);
}

std::string SvgLinesChart(const std::string& id, const std::string& title, const std::vector<ChartSeries>& lines,
                          const std::vector<int64_t>& commits, const std::vector<int64_t>& restarts) {
  std::vector<Line> drawn;
  for (const ChartSeries& s : lines) drawn.push_back(PointsOf(s, s.title));
  return Chart(id, title, drawn, false, commits, restarts);
}

}  // namespace shardd

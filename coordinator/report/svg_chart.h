// A line chart as inline SVG markup: the same drawing as the dashboard's
// chart() in coordinator/web/app.js (axes, min/max labels, checkpoint commits
// green, new attempts red dashed), computed here so a saved report needs no
// script. Pure; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shardd {

struct ChartSeries {
  std::string id;     // the <svg> id is "chart-<id>"
  std::string title;
  std::string color;  // CSS color of the line
  std::vector<int64_t> steps;                // x
  std::vector<std::optional<double>> values;  // y; nullopt (or non-finite) = no point
  bool log_scale = false;                     // log10 y axis when every value is > 0
};

// "<div class=chart><h3>title last</h3><svg ... data-points=N>...</svg></div>".
// commits/restarts: steps to mark (outside the x range: left out).
std::string SvgLineChart(const ChartSeries& s, const std::vector<int64_t>& commits,
                         const std::vector<int64_t>& restarts);

// Several lines on one y axis (the dashboard's linesChart()): the chart is
// "chart-<id>" titled `title`; each line's title names it (data-series on its
// <polyline>, and beside the chart's title in its colour with its last value);
// data-points counts the points of all lines. A line's `id` and `log_scale`
// are not used.
std::string SvgLinesChart(const std::string& id, const std::string& title, const std::vector<ChartSeries>& lines,
                          const std::vector<int64_t>& commits, const std::vector<int64_t>& restarts);

// HTML text escaping (& < > " ').
std::string HtmlEscape(const std::string& s);

// A short figure: 4 significant digits, "1.2e-05" for small ones.
std::string ShortNumber(double v);

}  // namespace shardd

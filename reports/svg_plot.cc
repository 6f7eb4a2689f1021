#include "reports/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/format.h"
#include "reports/table.h"

namespace fathom::reports {
namespace {

// Okabe and Ito's palette: distinguishable with the common colour-vision deficiencies.
constexpr const char* kPalette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                    "#E69F00", "#56B4E9", "#000000", "#F0E442"};
constexpr int kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

constexpr double kLeft = 74, kTop = 40, kBottom = 54, kLegendWidth = 240;
// Legend names wrap at this many characters (12px sans-serif in the legend's width), at spaces
// where they can; each wrapped line adds kLegendLine pixels to the entry's kLegendRow.
constexpr size_t kLegendChars = 24;
constexpr double kLegendRow = 18, kLegendLine = 14;

// Maps data values on one axis to pixels.
struct Scale {
  bool log = false;
  double lo = 0, hi = 1;    // data range shown
  double from = 0, to = 1;  // pixel range
  std::vector<double> ticks;

  double operator()(double v) const {
    const double t = log ? (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo))
                         : (v - lo) / (hi - lo);
    return from + t * (to - from);
  }
};

Scale MakeScale(const Axis& axis, double lo, double hi, double from, double to) {
  Scale s;
  s.log = axis.log;
  s.from = from;
  s.to = to;
  if (axis.log) {
    if (hi <= lo) hi = lo * 10;
    s.ticks = LogTicks(lo, hi);
  } else {
    if (hi <= lo) {
      const double pad = lo == 0 ? 1.0 : std::abs(lo) * 0.1;
      lo -= pad;
      hi += pad;
    }
    s.ticks = LinearTicks(lo, hi, 6);
  }
  s.lo = s.ticks.front();
  s.hi = s.ticks.back();
  return s;
}

std::string Num(double v) { return StrFormat("%.1f", v); }

// A point's marker: the shape follows the colour index (circle, square, triangle, diamond), so
// series that share a point (an Offline and a Server sweep of one deployment) stay apart. Drawn
// hollow; a faint one filled, small and translucent.
std::string Marker(int index, double x, double y, const char* color, bool faint) {
  const std::string paint =
      faint ? StrFormat("fill=\"%s\" fill-opacity=\"0.25\"", color)
            : StrFormat("fill=\"white\" fill-opacity=\"0.6\" stroke=\"%s\" stroke-width=\"1.8\"",
                        color);
  const double r = faint ? 2.5 : 4.5;
  switch (index % 4) {
    case 1:
      return "<rect class=\"marker\" x=\"" + Num(x - r) + "\" y=\"" + Num(y - r) + "\" width=\"" +
             Num(2 * r) + "\" height=\"" + Num(2 * r) + "\" " + paint + "/>";
    case 2:
      return "<path class=\"marker\" d=\"M" + Num(x) + " " + Num(y - 1.3 * r) + "L" +
             Num(x + 1.2 * r) + " " + Num(y + 0.9 * r) + "L" + Num(x - 1.2 * r) + " " +
             Num(y + 0.9 * r) + "Z\" " + paint + "/>";
    case 3:
      return "<path class=\"marker\" d=\"M" + Num(x) + " " + Num(y - 1.4 * r) + "L" +
             Num(x + 1.4 * r) + " " + Num(y) + "L" + Num(x) + " " + Num(y + 1.4 * r) + "L" +
             Num(x - 1.4 * r) + " " + Num(y) + "Z\" " + paint + "/>";
    default:
      return "<circle class=\"marker\" cx=\"" + Num(x) + "\" cy=\"" + Num(y) + "\" r=\"" + Num(r) +
             "\" " + paint + "/>";
  }
}

// `name` in lines of at most kLegendChars: broken at spaces, and a word longer than a line in
// pieces (after a '-' where it has one).
std::vector<std::string> LegendLines(const std::string& name) {
  std::vector<std::string> lines(1);
  size_t from = 0;
  while (from < name.size()) {
    size_t end = name.find(' ', from);
    if (end == std::string::npos) end = name.size();
    std::string word = name.substr(from, end - from);
    from = end + 1;
    while (!word.empty()) {
      std::string& line = lines.back();
      const size_t room =
          line.empty() ? kLegendChars : kLegendChars - std::min(kLegendChars, line.size() + 1);
      if (word.size() <= room) {
        line += (line.empty() ? "" : " ") + word;
        break;
      }
      if (line.empty()) {  // a word longer than a line: cut after its last '-' that fits, if any
        const size_t dash = word.rfind('-', kLegendChars - 1);
        const size_t cut = dash != std::string::npos && dash > 0 ? dash + 1 : kLegendChars;
        line = word.substr(0, cut);
        word = word.substr(cut);
      }
      lines.emplace_back();
    }
  }
  return lines;
}

}  // namespace

std::vector<double> LinearTicks(double lo, double hi, int target) {
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  std::vector<double> ticks;
  const auto first = static_cast<int64_t>(std::floor(lo / step + 1e-9));
  const auto last = static_cast<int64_t>(std::ceil(hi / step - 1e-9));
  for (int64_t i = first; i <= last; ++i) ticks.push_back(static_cast<double>(i) * step);
  if (ticks.size() < 2) ticks.push_back(ticks.back() + step);
  return ticks;
}

std::vector<double> LogTicks(double lo, double hi) {
  const int first = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
  const int last = std::max(first + 1, static_cast<int>(std::ceil(std::log10(hi) - 1e-9)));
  std::vector<double> ticks;
  for (int e = first; e <= last; ++e) {
    const double p = std::pow(10.0, e);
    ticks.push_back(p);
    if (last - first <= 2 && e < last) {
      ticks.push_back(2 * p);
      ticks.push_back(5 * p);
    }
  }
  return ticks;
}

std::string TickLabel(double v) {
  const double a = std::abs(v);
  if (a < 1e-12) return "0";  // rounding residue of a zero tick
  if (a >= 1e6) return StrFormat("%gM", v / 1e6);
  if (a >= 1e4) return StrFormat("%gk", v / 1e3);
  if (a < 1e-3) return StrFormat("%.0e", v);
  return StrFormat("%g", v);
}

Result<std::string> RenderSvg(const Plot& plot) {
  double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
  for (const Series& s : plot.series) {
    if (s.x.size() != s.y.size()) {
      return Status::InvalidArgument("plot '" + plot.title + "': series '" + s.name + "' has " +
                                     std::to_string(s.x.size()) + " x values and " +
                                     std::to_string(s.y.size()) + " y values");
    }
    for (size_t i = 0; i < s.x.size(); ++i) {
      for (const bool is_x : {true, false}) {
        const double v = is_x ? s.x[i] : s.y[i];
        const bool log = is_x ? plot.x.log : plot.y.log;
        if (!std::isfinite(v) || (log && v <= 0)) {
          return Status::InvalidArgument(
              "plot '" + plot.title + "': series '" + s.name + "' point " + std::to_string(i) +
              ": " + (is_x ? "x" : "y") + " = " + StrFormat("%g", v) + ": " +
              (log ? "must be finite and > 0 on a log axis" : "must be finite"));
        }
      }
      xlo = std::min(xlo, s.x[i]);
      xhi = std::max(xhi, s.x[i]);
      ylo = std::min(ylo, s.y[i]);
      yhi = std::max(yhi, s.y[i]);
    }
  }
  if (!std::isfinite(xlo))
    return Status::InvalidArgument("plot '" + plot.title + "': no points to plot");
  if (!plot.y.log && ylo > 0 && ylo < 0.5 * yhi)
    ylo = 0;  // start at zero unless that squashes the data
  if (!plot.x.log && xlo > 0 && xlo < 0.5 * xhi) xlo = 0;

  // The plot grows taller where the legend needs it.
  std::vector<std::vector<std::string>> legend(plot.series.size());
  double legend_height = 0;
  for (size_t i = 0; i < plot.series.size(); ++i) {
    if (plot.series[i].name.empty()) continue;
    legend[i] = LegendLines(plot.series[i].name);
    legend_height += kLegendRow + kLegendLine * static_cast<double>(legend[i].size() - 1);
  }
  const int height = std::max(plot.height, static_cast<int>(std::ceil(kTop + legend_height + 8)));
  const double right = plot.width - kLegendWidth, bottom = height - kBottom;
  const Scale sx = MakeScale(plot.x, xlo, xhi, kLeft, right);
  const Scale sy = MakeScale(plot.y, ylo, yhi, bottom, kTop);

  std::string svg = StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n",
      plot.width, height, plot.width, height);
  svg += StrFormat("<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", plot.width, height);
  svg += "<text x=\"" + Num(kLeft) + "\" y=\"22\" font-size=\"15\" font-weight=\"bold\">" +
         EscapeXml(plot.title) + "</text>\n";
  // Grid, ticks and axes.
  for (double t : sx.ticks) {
    svg += "<line x1=\"" + Num(sx(t)) + "\" y1=\"" + Num(kTop) + "\" x2=\"" + Num(sx(t)) +
           "\" y2=\"" + Num(bottom) + "\" stroke=\"#e5e5e5\"/>\n";
    svg += "<text x=\"" + Num(sx(t)) + "\" y=\"" + Num(bottom + 16) + "\" text-anchor=\"middle\">" +
           EscapeXml(TickLabel(t)) + "</text>\n";
  }
  for (double t : sy.ticks) {
    svg += "<line x1=\"" + Num(kLeft) + "\" y1=\"" + Num(sy(t)) + "\" x2=\"" + Num(right) +
           "\" y2=\"" + Num(sy(t)) + "\" stroke=\"#e5e5e5\"/>\n";
    svg += "<text x=\"" + Num(kLeft - 6) + "\" y=\"" + Num(sy(t) + 4) + "\" text-anchor=\"end\">" +
           EscapeXml(TickLabel(t)) + "</text>\n";
  }
  svg += "<rect x=\"" + Num(kLeft) + "\" y=\"" + Num(kTop) + "\" width=\"" + Num(right - kLeft) +
         "\" height=\"" + Num(bottom - kTop) + "\" fill=\"none\" stroke=\"#444\"/>\n";
  svg += "<text class=\"x-label\" x=\"" + Num((kLeft + right) / 2) + "\" y=\"" +
         Num(height - 12.0) + "\" text-anchor=\"middle\">" +
         EscapeXml(plot.x.label + (plot.x.log ? " (log)" : "")) + "</text>\n";
  svg += "<text class=\"y-label\" transform=\"translate(16 " + Num((kTop + bottom) / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" +
         EscapeXml(plot.y.label + (plot.y.log ? " (log)" : "")) + "</text>\n";

  // Series, then the legend.
  double ly = kTop + 8;
  for (size_t i = 0; i < plot.series.size(); ++i) {
    const Series& s = plot.series[i];
    const int index = s.color >= 0 ? s.color : static_cast<int>(i);
    const char* color = kPalette[index % kPaletteSize];
    svg += "<g>";
    if (!s.name.empty()) svg += "<title>" + EscapeXml(s.name) + "</title>";
    if (s.line && s.x.size() > 1) {
      svg += "<polyline fill=\"none\" stroke=\"" + std::string(color) +
             "\" stroke-width=\"2\" points=\"";
      for (size_t p = 0; p < s.x.size(); ++p)
        svg += (p > 0 ? " " : "") + Num(sx(s.x[p])) + "," + Num(sy(s.y[p]));
      svg += "\"/>";
    }
    if (s.points) {
      for (size_t p = 0; p < s.x.size(); ++p)
        svg += Marker(index, sx(s.x[p]), sy(s.y[p]), color, s.faint);
    }
    svg += "</g>\n";
    if (s.name.empty()) continue;
    // The entry's swatch: its line and, where the series has markers, its marker.
    svg += "<g class=\"legend\"><rect x=\"" + Num(right + 14) + "\" y=\"" +
           Num(ly - (s.faint ? 2 : 1)) + "\" width=\"14\" height=\"" + (s.faint ? "4" : "2") +
           "\" fill=\"" + color + "\"" + (s.faint ? " fill-opacity=\"0.35\"" : "") + "/>";
    if (s.points && !s.faint) {
      std::string swatch = Marker(index, right + 21, ly, color, false);
      swatch.replace(swatch.find("marker"), 6, "swatch");
      svg += swatch;
    }
    svg += "<text x=\"" + Num(right + 34) + "\" y=\"" + Num(ly + 4) + "\">";
    for (size_t l = 0; l < legend[i].size(); ++l) {
      svg += "<tspan x=\"" + Num(right + 34) + "\"" +
             (l > 0 ? " dy=\"" + Num(kLegendLine) + "\"" : "") + ">" + EscapeXml(legend[i][l]) +
             "</tspan>";
    }
    svg += "</text></g>\n";
    ly += kLegendRow + kLegendLine * static_cast<double>(legend[i].size() - 1);
  }
  return svg + "</svg>\n";
}

}  // namespace fathom::reports

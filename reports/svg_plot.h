// Line and scatter plots as standalone SVG, with linear or logarithmic axes.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace fathom::reports {

struct Series {
  std::string name;  // in the legend, wrapped to its width; empty: not listed
  std::vector<double> x, y;
  bool line = true;    // joins the points in the order given
  bool points = true;  // a marker on each point
  bool faint = false;  // small translucent markers: a background cloud
  int color = -1;      // index into the palette; -1: the series' own index
};

struct Axis {
  std::string label;
  bool log = false;
};

struct Plot {
  std::string title;
  Axis x, y;
  std::vector<Series> series;
  int width = 760, height = 460;  // pixels, legend included; taller where the legend needs it
};

// The plot as an SVG document. Errors: no points at all, a point that is not finite, or one at
// or below zero on a logarithmic axis (naming the series, the point and the value).
Result<std::string> RenderSvg(const Plot& plot);

// Round tick values (steps of 1, 2 or 5 times a power of ten) covering [lo, hi] with about
// `target` of them; the first is at or below lo and the last at or above hi.
std::vector<double> LinearTicks(double lo, double hi, int target);
// Powers of ten covering [lo, hi] (lo > 0), with 2x and 5x between them across two decades or
// fewer.
std::vector<double> LogTicks(double lo, double hi);
// A short label for a tick: "0.25", "800", "12k", "1.5M".
std::string TickLabel(double v);

}  // namespace fathom::reports

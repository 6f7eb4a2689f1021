#include <cstdio>
#include <memory>

#include "apps/fathom/commands.h"
#include "base/format.h"
#include "tuner/calibration/intervals.h"

namespace fathom::cli {
namespace {

struct IntervalsFlags {
  std::string residuals;  // empty: the shipped table
  std::string check;      // a residual table of rows the first does not hold
  double level = 0.8;
  bool json = false;
};

int HeldOut(const std::vector<tuner::Residual>& rows) {
  int n = 0;
  for (const tuner::Residual& r : rows) n += r.fitted ? 0 : 1;
  return n;
}

Status Run(const IntervalsFlags& f) {
  if (!(f.level > 0 && f.level < 1))
    return Status::InvalidArgument(StrFormat("--level = %g: must be in (0, 1)", f.level));
  const std::string path = f.residuals.empty() ? tuner::DefaultResidualsPath() : f.residuals;
  const std::string shown = f.residuals.empty() ? "models/calibration/residuals.csv" : path;
  FATHOM_ASSIGN_OR_RETURN(std::vector<tuner::Residual> rows, tuner::LoadResiduals(path));
  int held_out = HeldOut(rows);
  const tuner::ResidualTable table(std::move(rows));
  std::vector<tuner::CoverageRow> coverage;
  if (f.check.empty()) {
    coverage = table.Coverage(f.level);
  } else {
    FATHOM_ASSIGN_OR_RETURN(std::vector<tuner::Residual> checked, tuner::LoadResiduals(f.check));
    for (const tuner::Residual& c : checked) {
      for (const tuner::Residual& r : table.rows()) {
        if (c.stack == r.stack && c.results == r.results && c.line == r.line &&
            c.metric == r.metric)
          return Status::InvalidArgument(StrFormat(
              "%s: %s's %s line %d (%s) is already in %s: --check takes rows the table does "
              "not hold",
              f.check.c_str(), c.stack.c_str(), c.results.c_str(), c.line, c.metric.c_str(),
              shown.c_str()));
      }
    }
    held_out = HeldOut(checked);
    coverage = table.CoverageOf(checked, f.level);
  }
  if (f.json) {
    OrderedJson j;
    j["residuals"] = shown;
    if (!f.check.empty()) j["checked"] = f.check;
    j["level"] = f.level;
    j["held_out_figures"] = held_out;
    OrderedJson families = OrderedJson::array();
    for (const auto& c : coverage) {
      families.push_back({{"family", c.family},
                          {"figures", c.rows},
                          {"inside", c.covered},
                          {"coverage", c.rows > 0 ? static_cast<double>(c.covered) / c.rows : 0.0},
                          {"median_width_pct", c.median_width_pct}});
    }
    j["coverage"] = families;
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  if (f.check.empty()) {
    std::printf(
        "%d held-out published figures in %s. Each one's %.0f%% interval comes from\n"
        "the others (its own system's left out), as a new question's comes from all of them; "
        "the\nshare of figures inside their interval should be near %.0f%%:\n\n",
        held_out, shown.c_str(), 100 * f.level, 100 * f.level);
  } else {
    std::printf(
        "%d held-out published figures in %s, none of them in %s. Each one's\n"
        "%.0f%% interval comes from all of %s, as a new question's does; the share of\n"
        "figures inside their interval should be near %.0f%%:\n\n",
        held_out, f.check.c_str(), shown.c_str(), 100 * f.level, shown.c_str(), 100 * f.level);
  }
  std::printf("%-36s %7s %7s %9s %14s\n", "rows", "figures", "inside", "coverage", "median width");
  for (const auto& c : coverage) {
    std::printf("%-36s %7d %7d %8.0f%% %13.0f%%\n", c.family.c_str(), c.rows, c.covered,
                c.rows > 0 ? 100.0 * c.covered / c.rows : 0.0, c.median_width_pct);
  }
  return Status::Ok();
}

}  // namespace

void RegisterIntervals(CLI::App& app, Status* result) {
  auto f = std::make_shared<IntervalsFlags>();
  CLI::App* cmd = app.add_subcommand(
      "intervals",
      "How far to trust fathom's figures: the error bars' held-out published results and how "
      "often their intervals held");
  cmd->add_option("--residuals", f->residuals,
                  "Residual table (calibrate --residuals-out; default: "
                  "models/calibration/residuals.csv)");
  cmd->add_option("--check", f->check,
                  "Residual table of rows --residuals does not hold (calibrate --residuals-out on "
                  "newer published results): how often the intervals --residuals gives hold them");
  cmd->add_option("--level", f->level, "Interval level")->capture_default_str();
  cmd->add_flag("--json", f->json, "Print JSON");
  cmd->callback([f, result] { *result = Run(*f); });
}

}  // namespace fathom::cli

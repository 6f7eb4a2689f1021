// Reports on tuner sweeps read back from the results store: the best deployment of each sweep,
// rankings, Pareto frontiers and what a million tokens costs, as terminal text, Markdown, HTML
// with inline plots, SVG and CSV. Prices can be changed for what-if analysis.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "models/hardware.h"
#include "reports/table.h"
#include "sim/deployment_config.h"
#include "tuner/search/launch.h"
#include "tuner/search/results.h"
#include "tuner/search/tuner.h"

namespace fathom::reports {

struct ReportOptions {
  int top = 10;  // rows of each sweep's ranking
  // What-if prices in USD per GPU-hour by GPU name; the key "" prices every GPU not named.
  // A sweep's GPU with no price here keeps the price its sweep was run at.
  std::map<std::string, double> prices;
  // Each sweep's best with its error bars ("52300-61800 tok/s"; empty: none), in the headline and
  // the sweep's description, where the caller has them (the calibration's held-out rows are not
  // this library's to read).
  std::function<std::string(const tuner::SweepInfo&, const tuner::CandidateResult&)> error_bars;
};

// "TP8 PP1 EP8 attnDP8 x1 fp4", "P 1xTP8 / D 1xTP8 attnDP8 fp4 MTP3": a deployment's layout in one
// cell.
std::string LayoutLabel(const sim::DeploymentConfig& d);

// A deployment's launch commands (vLLM, SGLang, TensorRT-LLM) in a ```sh fence and TensorRT-LLM's
// options file (extra.yaml) in a ```yaml fence: Markdown that reads as well on a terminal. With
// an `engine` ("vLLM", as models::Stack names it), that engine's command alone: the one the
// prediction is for.
std::string LaunchMarkdown(const tuner::LaunchCommands& l, const std::string& engine = "");

// The first `top` of `ranked` with their layouts, limits and metrics; costs at `usd_per_gpu_hour`
// where it is > 0, else as stored. Offline candidates (no QPS) show "-" for QPS and TTFT p99: there
// neither is a measured figure or a limit.
Table RankingTable(const std::vector<tuner::CandidateResult>& ranked, int top,
                   double usd_per_gpu_hour = 0);

// One row per sweep: id, model, GPUs, scenario ("?" where inferred), candidates simulated and
// valid, and the best objective.
Table SweepList(const std::vector<tuner::StoredSweep>& sweeps);

// The sweeps whose ids start with one of `ids` (all of them when `ids` is empty); an id that
// matches none or several is an error that lists the sweeps.
Result<std::vector<tuner::StoredSweep>> SelectSweeps(std::vector<tuner::StoredSweep> all,
                                                     const std::vector<std::string>& ids,
                                                     const std::string& source);

class SweepReport {
 public:
  // `catalog` gives each GPU's power (for energy per token); GPUs it lacks get none.
  SweepReport(const std::vector<tuner::StoredSweep>& sweeps, const models::HardwareCatalog& catalog,
              ReportOptions options);

  // Each starts with the best deployment of each sweep and, where one model was swept on several
  // GPU kinds or counts, the cheapest of them per model and scenario.
  std::string Text() const;
  std::string Markdown() const;
  Result<std::string> Html() const;
  // Tokens/s per GPU against tokens/s per user: every valid candidate and each sweep's frontier.
  Result<std::string> FrontierSvg() const;
  // Cost per million tokens along each sweep's frontier against tokens/s per user.
  Result<std::string> CostSvg() const;
  // Every simulated candidate of every sweep, one row each.
  std::string CandidatesCsv() const;

 private:
  struct View {
    tuner::SweepInfo info;
    std::string label;  // model, GPUs and scenario; with the id where two sweeps share them
    std::vector<tuner::CandidateResult> simulated, ranked, frontier;
    double price = 0;              // USD per GPU-hour the report costs at
    double power_watts = 0;        // per GPU; 0: unknown
    tuner::LaunchCommands launch;  // the best's, when one is valid
  };
  double Cost(const View& v, const tuner::CandidateResult& c) const;
  Table Overview() const;
  // The HTML report's opening: each sweep's best in one sentence.
  std::string Headline() const;
  // The cheapest valid deployment of each model and scenario (at the same limits) over every GPU
  // kind and count the sweeps tried, at the report's prices; rows only where they tried several.
  Table Cheapest() const;
  Table FrontierTable(const View& v) const;
  std::string Description(const View& v) const;

  std::vector<View> views_;
  ReportOptions options_;
};

}  // namespace fathom::reports

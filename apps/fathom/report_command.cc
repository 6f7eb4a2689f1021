#include <cstdio>
#include <filesystem>
#include <memory>

#include "apps/fathom/commands.h"
#include "apps/fathom/interval_note.h"
#include "base/csv.h"
#include "base/files.h"
#include "models/hardware.h"
#include "reports/sweep_report.h"
#include "tuner/search/results.h"

namespace fathom::cli {
namespace {

struct ReportFlags {
  std::string db, out, plot = "frontier";
  std::vector<std::string> sweeps, prices, hardware_files;
  int top = 10;
  bool list = false;
};

// "6.5" prices every GPU; "h200=3.8" one of them.
Result<std::map<std::string, double>> ParsePrices(const std::vector<std::string>& specs,
                                                  const models::HardwareCatalog& catalog) {
  std::map<std::string, double> prices;
  for (const std::string& spec : specs) {
    const size_t eq = spec.find('=');
    const std::string gpu = eq == std::string::npos ? "" : spec.substr(0, eq);
    double usd = 0;
    if (!ParseFiniteDouble(eq == std::string::npos ? spec : spec.substr(eq + 1), &usd) ||
        !(usd > 0)) {
      return Status::InvalidArgument("--price = \"" + spec +
                                     "\": must be USD per GPU-hour > 0, as 6.5 or h200=3.8");
    }
    if (!gpu.empty()) FATHOM_RETURN_IF_ERROR(catalog.Find(gpu).status());
    prices[gpu] = usd;
  }
  return prices;
}

Status Run(const ReportFlags& f) {
  if (f.top < 1)
    return Status::InvalidArgument("--top = " + std::to_string(f.top) + ": must be >= 1");
  const std::string ext = std::filesystem::path(f.out).extension().string();
  if (!f.out.empty() && ext != ".html" && ext != ".md" && ext != ".svg" && ext != ".csv") {
    return Status::InvalidArgument("--out = \"" + f.out +
                                   "\": must end in .html, .md, .svg or .csv");
  }
  if (f.plot != "frontier" && f.plot != "cost") {
    return Status::InvalidArgument("--plot = \"" + f.plot + "\": must be frontier or cost");
  }
  FATHOM_ASSIGN_OR_RETURN(models::HardwareCatalog catalog,
                          models::HardwareCatalog::Load(f.hardware_files));
  FATHOM_ASSIGN_OR_RETURN(auto prices, ParsePrices(f.prices, catalog));
  FATHOM_ASSIGN_OR_RETURN(auto store, tuner::ResultStore::OpenExisting(f.db));
  FATHOM_ASSIGN_OR_RETURN(auto all, store->Sweeps());
  FATHOM_ASSIGN_OR_RETURN(auto sweeps, reports::SelectSweeps(std::move(all), f.sweeps, f.db));
  if (f.list) {
    std::printf("%s", reports::SweepList(sweeps).Text().c_str());
    return Status::Ok();
  }
  FATHOM_ASSIGN_OR_RETURN(const tuner::ResidualTable residuals,
                          tuner::ResidualTable::LoadDefault());
  const reports::SweepReport report(sweeps, catalog, {f.top, prices, ReportErrorBars(&residuals)});
  if (f.out.empty()) {
    std::printf("%s", report.Text().c_str());
    return Status::Ok();
  }
  std::string content;
  if (ext == ".html") {
    FATHOM_ASSIGN_OR_RETURN(content, report.Html());
  } else if (ext == ".md") {
    content = report.Markdown();
  } else if (ext == ".csv") {
    content = report.CandidatesCsv();
  } else {
    auto svg = f.plot == "cost" ? report.CostSvg() : report.FrontierSvg();
    if (!svg.ok())
      return Status::InvalidArgument(f.db + ": cannot plot the " + f.plot + ": " +
                                     svg.status().message());
    content = *svg;
  }
  FATHOM_RETURN_IF_ERROR(WriteFileAtomic(f.out, content));
  std::printf("wrote %s (%zu sweeps)\n", f.out.c_str(), sweeps.size());
  return Status::Ok();
}

}  // namespace

void RegisterReport(CLI::App& app, Status* result) {
  auto f = std::make_shared<ReportFlags>();
  CLI::App* cmd =
      app.add_subcommand("report", "Tables, plots and cost per million tokens from tuner sweeps");
  cmd->add_option("--db", f->db, "Results database that `fathom tune --db` wrote")->required();
  cmd->add_option("--sweep", f->sweeps,
                  "Sweep ids (or unique prefixes) to report (default: every sweep)");
  cmd->add_flag("--list", f->list, "List the sweeps in the database");
  cmd->add_option("--out", f->out,
                  "Write the report: .html (tables and plots), .md, .svg (one plot) or .csv "
                  "(every candidate); default: text on stdout");
  cmd->add_option("--plot", f->plot, "With --out FILE.svg: frontier or cost")
      ->capture_default_str();
  cmd->add_option("--top", f->top, "Rows of each sweep's ranking")->capture_default_str();
  cmd->add_option("--price", f->prices,
                  "What-if USD per GPU-hour: 6.5 for every GPU, or h200=3.8 (repeatable)");
  cmd->add_option("--hardware-file", f->hardware_files, "Add a GPU from your own JSON file");
  cmd->callback([f, result] { *result = Run(*f); });
}

}  // namespace fathom::cli

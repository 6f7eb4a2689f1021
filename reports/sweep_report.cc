#include "reports/sweep_report.h"

#include <algorithm>
#include <set>

#include "base/format.h"
#include "reports/svg_plot.h"

namespace fathom::reports {
namespace {

// Offline candidates have no QPS (every query arrives at once): there QPS is not a measured figure
// and TTFT is no limit (it counts the wait behind the whole data set), so neither is shown.
std::string QpsCell(const tuner::CandidateResult& c) {
  return c.qps > 0 ? FormatFixed(c.qps, 2) : "-";
}
std::string TtftCell(const tuner::CandidateResult& c) {
  return c.qps > 0 ? FormatFixed(c.ttft_p99_ms, 0) : "-";
}

std::string Gpus(const tuner::SweepInfo& s) { return std::to_string(s.gpus) + "x" + s.hardware; }

std::string Limits(const tuner::SweepInfo& s) {
  if (!s.ServerLike()) return "";
  auto ms = [](const std::optional<double>& v) {
    return v ? FormatFixed(*v, 0) + " ms" : std::string("?");
  };
  return "p99 limits TTFT " + ms(s.ttft_limit_ms) + " / TPOT " + ms(s.tpot_limit_ms);
}

std::string Objective(const tuner::SweepInfo& s) {
  return s.ServerLike() ? "the highest QPS within the p99 limits" : "the most tokens/s";
}

std::string Commands(const tuner::LaunchCommands& l) {
  return l.vllm + "\n\n" + l.sglang + "\n\n" + l.trtllm + "\n";
}

constexpr const char* kTrtllmOptions = "TensorRT-LLM's --extra_llm_api_options file:";

}  // namespace

std::string LayoutLabel(const sim::DeploymentConfig& d) {
  std::string layout =
      d.disaggregated
          ? "P " + std::to_string(d.prefill.instances) + "xTP" + std::to_string(d.prefill.tp) +
                " / D " + std::to_string(d.decode.instances) + "xTP" + std::to_string(d.decode.tp) +
                " attnDP" + std::to_string(d.decode.attn_dp)
          : "TP" + std::to_string(d.tp) + " PP" + std::to_string(d.pp) + " EP" +
                std::to_string(d.ep) + " attnDP" + std::to_string(d.attn_dp) + " x" +
                std::to_string(d.gpus / (d.tp * d.pp));
  layout +=
      " " + d.weights + (d.engine.mtp_depth > 0 ? " MTP" + std::to_string(d.engine.mtp_depth) : "");
  if (d.runtime == models::Runtime::kCpp) layout += " C++";  // TensorRT engines, C++ executor
  // vLLM V0's multi-step scheduling: decode steps scheduled at once.
  if (d.engine.scheduler_steps > 1)
    layout += " " + std::to_string(d.engine.scheduler_steps) + " steps";
  return layout;
}

std::string LaunchMarkdown(const tuner::LaunchCommands& l, const std::string& engine) {
  const std::string options =
      std::string(kTrtllmOptions) + "\n\n```yaml\n" + l.trtllm_yaml + "```\n";
  if (engine == "vLLM") return "```sh\n" + l.vllm + "\n```\n";
  if (engine == "SGLang") return "```sh\n" + l.sglang + "\n```\n";
  if (engine == "TensorRT-LLM") return "```sh\n" + l.trtllm + "\n```\n\n" + options;
  return "```sh\n" + Commands(l) + "```\n\n" + options;
}

Table RankingTable(const std::vector<tuner::CandidateResult>& ranked, int top,
                   double usd_per_gpu_hour) {
  Table t({{"rank"},
           {"layout", false},
           {"batch"},
           {"tokens"},
           {"tok/s"},
           {"tok/s/GPU"},
           {"tok/s/user"},
           {"QPS"},
           {"TTFT p99"},
           {"TPOT p99"},
           {"$/Mtok"}});
  for (int i = 0; i < top && i < static_cast<int>(ranked.size()); ++i) {
    const tuner::CandidateResult& c = ranked[i];
    const double cost = usd_per_gpu_hour > 0
                            ? models::CostPerMillionTokens(usd_per_gpu_hour, c.tokens_per_s_per_gpu)
                            : c.cost_per_million_tokens;
    t.AddRow(
        {std::to_string(i + 1), LayoutLabel(c.config), std::to_string(c.config.engine.max_batch),
         std::to_string(c.config.engine.max_num_tokens), FormatFixed(c.throughput_tokens_per_s, 0),
         FormatFixed(c.tokens_per_s_per_gpu, 0), FormatFixed(c.tokens_per_s_per_user, 1),
         QpsCell(c), TtftCell(c), FormatFixed(c.tpot_p99_ms, 1), FormatFixed(cost, 3)});
  }
  return t;
}

Table SweepList(const std::vector<tuner::StoredSweep>& sweeps) {
  Table t({{"sweep", false},
           {"model", false},
           {"GPUs", false},
           {"scenario", false},
           {"stack", false},
           {"simulated"},
           {"valid"},
           {"best", false}});
  for (const auto& s : sweeps) {
    const auto ranked = tuner::RankValid(s.results, s.info.ServerLike());
    std::string best = "-";
    if (!ranked.empty()) {
      best = s.info.ServerLike()
                 ? FormatFixed(ranked.front().qps, 2) + " QPS"
                 : FormatFixed(ranked.front().throughput_tokens_per_s, 0) + " tok/s";
    }
    t.AddRow({s.info.id, s.info.model, Gpus(s.info),
              std::string(sim::Name(s.info.scenario)) + (s.info.recorded ? "" : "?"),
              s.info.stack.empty() ? "-" : s.info.stack, std::to_string(s.results.size()),
              std::to_string(ranked.size()), best});
  }
  return t;
}

Result<std::vector<tuner::StoredSweep>> SelectSweeps(std::vector<tuner::StoredSweep> all,
                                                     const std::vector<std::string>& ids,
                                                     const std::string& source) {
  if (all.empty())
    return Status::InvalidArgument(source +
                                   ": holds no sweeps (`fathom tune --db FILE` writes them)");
  if (ids.empty()) return all;
  std::string known;
  for (const auto& s : all) known += " " + s.info.id;
  std::vector<tuner::StoredSweep> out;
  for (const std::string& id : ids) {
    std::vector<const tuner::StoredSweep*> matches;
    for (const auto& s : all) {
      if (s.info.id.rfind(id, 0) == 0) matches.push_back(&s);
    }
    if (matches.size() != 1) {
      return Status::InvalidArgument(
          source + ": --sweep = \"" + id +
          "\": " + (matches.empty() ? "matches no sweep" : "matches several sweeps") +
          " (sweeps:" + known + ")");
    }
    out.push_back(*matches.front());
  }
  return out;
}

SweepReport::SweepReport(const std::vector<tuner::StoredSweep>& sweeps,
                         const models::HardwareCatalog& catalog, ReportOptions options)
    : options_(std::move(options)) {
  std::map<std::string, int> label_uses;
  // Labels name the stack where the sweeps were priced by more than one.
  std::set<std::string> stacks;
  for (const auto& s : sweeps) stacks.insert(s.info.stack);
  for (const auto& s : sweeps) {
    View v;
    v.info = s.info;
    v.label = s.info.model + " " + Gpus(s.info) + " " + std::string(sim::Name(s.info.scenario));
    if (stacks.size() > 1 && !s.info.stack.empty()) v.label += " " + s.info.stack;
    ++label_uses[v.label];
    v.simulated = s.results;
    v.ranked = tuner::RankValid(s.results, s.info.ServerLike());
    v.frontier = tuner::ParetoFrontier(v.ranked);  // of equal points, the best-ranked
    auto price = options_.prices.find(s.info.hardware);
    if (price == options_.prices.end()) price = options_.prices.find("");
    v.price = price != options_.prices.end() ? price->second : s.info.price_per_gpu_hour;
    if (auto hw = catalog.Find(s.info.hardware); hw.ok()) v.power_watts = hw->power_watts;
    if (!v.ranked.empty()) v.launch = tuner::MakeLaunchCommands(v.ranked.front().config, catalog);
    views_.push_back(std::move(v));
  }
  for (View& v : views_) {
    if (label_uses[v.label] > 1) v.label += " #" + v.info.id;
  }
}

double SweepReport::Cost(const View& v, const tuner::CandidateResult& c) const {
  return v.price > 0 ? models::CostPerMillionTokens(v.price, c.tokens_per_s_per_gpu)
                     : c.cost_per_million_tokens;
}

Table SweepReport::Overview() const {
  Table t({{"sweep", false},
           {"simulated"},
           {"best layout", false},
           {"QPS"},
           {"tok/s"},
           {"tok/s/GPU"},
           {"tok/s/user"},
           {"TTFT p99"},
           {"TPOT p99"},
           {"$/GPU-h"},
           {"$/Mtok"},
           {"kWh/Mtok"}});
  for (const View& v : views_) {
    const std::string simulated =
        std::to_string(v.simulated.size()) + "/" + std::to_string(v.info.candidates);
    const std::string price = v.price > 0 ? FormatFixed(v.price, 2) : "?";
    if (v.ranked.empty()) {
      t.AddRow({v.label, simulated, "none valid", "-", "-", "-", "-", "-", "-", price, "-", "-"});
      continue;
    }
    const tuner::CandidateResult& b = v.ranked.front();
    const std::string energy = v.power_watts > 0 && b.tokens_per_s_per_gpu > 0
                                   ? FormatFixed(v.power_watts / b.tokens_per_s_per_gpu / 3.6, 2)
                                   : "?";
    t.AddRow({v.label, simulated, LayoutLabel(b.config), QpsCell(b),
              FormatFixed(b.throughput_tokens_per_s, 0), FormatFixed(b.tokens_per_s_per_gpu, 0),
              FormatFixed(b.tokens_per_s_per_user, 1), TtftCell(b), FormatFixed(b.tpot_p99_ms, 1),
              price, FormatFixed(Cost(v, b), 3), energy});
  }
  return t;
}

Table SweepReport::Cheapest() const {
  struct Group {
    std::string model, scenario, limits;
    std::set<std::string> tried;  // GPU counts and kinds
    const View* view = nullptr;
    const tuner::CandidateResult* best = nullptr;
    double cost = 0;
  };
  std::vector<Group> groups;
  for (const View& v : views_) {
    Group key{v.info.model,
              std::string(sim::Name(v.info.scenario)),
              Limits(v.info),
              {},
              nullptr,
              nullptr,
              0};
    auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& o) {
      return o.model == key.model && o.scenario == key.scenario && o.limits == key.limits;
    });
    if (g == groups.end()) g = groups.insert(groups.end(), key);
    g->tried.insert(Gpus(v.info));
    for (const auto& c : v.ranked) {
      const double cost = Cost(v, c);
      if (cost > 0 && (g->best == nullptr || cost < g->cost)) {
        g->view = &v;
        g->best = &c;
        g->cost = cost;
      }
    }
  }
  Table t({{"model", false},
           {"scenario", false},
           {"tried", false},
           {"cheapest on", false},
           {"layout", false},
           {"QPS"},
           {"tok/s/GPU"},
           {"$/GPU-h"},
           {"$/Mtok"}});
  for (const Group& g : groups) {
    if (g.tried.size() < 2) continue;
    const std::string scenario = g.scenario + (g.limits.empty() ? "" : " (" + g.limits + ")");
    const std::string tried = std::to_string(g.tried.size()) + " GPU setups";
    if (g.best == nullptr) {
      t.AddRow({g.model, scenario, tried, "none valid (or priced)", "-", "-", "-", "-", "-"});
      continue;
    }
    t.AddRow({g.model, scenario, tried, Gpus(g.view->info), LayoutLabel(g.best->config),
              QpsCell(*g.best), FormatFixed(g.best->tokens_per_s_per_gpu, 0),
              FormatFixed(g.view->price, 2), FormatFixed(g.cost, 3)});
  }
  return t;
}

Table SweepReport::FrontierTable(const View& v) const {
  Table t({{"tok/s/user"},
           {"tok/s/GPU"},
           {"layout", false},
           {"batch"},
           {"tokens"},
           {"QPS"},
           {"$/Mtok"}});
  for (const auto& c : v.frontier) {
    t.AddRow({FormatFixed(c.tokens_per_s_per_user, 1), FormatFixed(c.tokens_per_s_per_gpu, 0),
              LayoutLabel(c.config), std::to_string(c.config.engine.max_batch),
              std::to_string(c.config.engine.max_num_tokens), QpsCell(c),
              FormatFixed(Cost(v, c), 3)});
  }
  return t;
}

std::string SweepReport::Description(const View& v) const {
  const tuner::SweepInfo& s = v.info;
  std::string d = "Sweep " + s.id + ": " + s.model + " on " + Gpus(s) + ", " +
                  std::string(sim::Name(s.scenario)) + " scenario";
  if (s.ServerLike()) d += ", " + Limits(s);
  if (!s.stack.empty()) d += ", priced by " + s.stack;
  d += "; objective " + Objective(s) + ". ";
  const int64_t invalid = static_cast<int64_t>(v.simulated.size() - v.ranked.size());
  if (s.recorded) {
    const int64_t unsimulated =
        std::max<int64_t>(0, s.candidates - static_cast<int64_t>(v.simulated.size()));
    d += std::to_string(s.candidates) + " feasible candidates (" + std::to_string(s.infeasible) +
         " infeasible): " + std::to_string(v.simulated.size()) + " simulated, " +
         std::to_string(invalid) + " of them not valid.";
    if (unsimulated > 0) {
      d += " The other " + std::to_string(unsimulated) +
           " were pruned by their bound or not yet simulated (`fathom tune --no-prune` simulates "
           "every one).";
    }
  } else {
    d += std::to_string(v.simulated.size()) + " simulated candidates (" + std::to_string(invalid) +
         " not valid); stored by a fathom that kept no record of the sweep, so its limits and "
         "price are unknown "
         "and its scenario is inferred.";
  }
  if (options_.error_bars && !v.ranked.empty()) {
    const std::string interval = options_.error_bars(s, v.ranked.front());
    if (!interval.empty()) d += " The best's 80% interval: " + interval + ".";
  }
  if (v.price > 0) {
    const bool what_if = v.price != s.price_per_gpu_hour;
    d += " Costs at $" + FormatFixed(v.price, 2) + " per GPU-hour" +
         (what_if && s.price_per_gpu_hour > 0
              ? " (what-if; swept at $" + FormatFixed(s.price_per_gpu_hour, 2) + ")"
              : "") +
         ".";
  }
  return d;
}

std::string SweepReport::Text() const {
  std::string out = "Best deployment of each sweep\n\n" + Overview().Text();
  if (const Table cheapest = Cheapest(); cheapest.rows() > 0) {
    out += "\nCheapest deployment per model across GPUs\n\n" + cheapest.Text();
  }
  for (const View& v : views_) {
    out += "\n== " + v.label + " ==\n" + Description(v) + "\n\n";
    if (v.ranked.empty()) {
      out += "No valid candidate.\n";
    } else {
      out += RankingTable(v.ranked, options_.top, v.price).Text();
      out += "\nLaunch the best:\n\n" + LaunchMarkdown(v.launch);
    }
    out += "\nPareto frontier (tokens/s per GPU against tokens/s per user): " +
           std::to_string(v.frontier.size()) + " points\n";
    if (!v.frontier.empty()) out += FrontierTable(v).Text();
  }
  return out;
}

std::string SweepReport::Markdown() const {
  std::string out =
      "# fathom tuning report\n\nPlots: `fathom report --out FILE.html`, or `--out FILE.svg` with "
      "`--plot frontier` or `--plot cost`.\n\n## Best deployment of each sweep\n\n" +
      Overview().Markdown();
  if (const Table cheapest = Cheapest(); cheapest.rows() > 0) {
    out += "\n## Cheapest deployment per model across GPUs\n\n" + cheapest.Markdown();
  }
  for (const View& v : views_) {
    out += "\n## " + v.label + "\n\n" + Description(v) + "\n\n### Ranking\n\n";
    if (v.ranked.empty()) {
      out += "No valid candidate.\n";
    } else {
      out += RankingTable(v.ranked, options_.top, v.price).Markdown();
      out += "\n### Launch the best\n\n" + LaunchMarkdown(v.launch);
    }
    out += "\n### Pareto frontier\n\n";
    out += v.frontier.empty() ? "No valid candidate.\n" : FrontierTable(v).Markdown();
  }
  return out;
}

Result<std::string> SweepReport::FrontierSvg() const {
  Plot p;
  p.title = "Pareto frontier: throughput per GPU against speed per user";
  p.x = {"tokens/s per user (1000 / mean TPOT)", false};
  p.y = {"tokens/s per GPU", false};
  for (size_t i = 0; i < views_.size(); ++i) {
    const View& v = views_[i];
    Series cloud{"", {}, {}, false, true, true, static_cast<int>(i)};
    for (const auto& c : v.ranked) {
      cloud.x.push_back(c.tokens_per_s_per_user);
      cloud.y.push_back(c.tokens_per_s_per_gpu);
    }
    Series front{v.label + (v.frontier.empty() ? " (no valid candidate)" : ""),
                 {},
                 {},
                 true,
                 true,
                 false,
                 static_cast<int>(i)};
    for (const auto& c : v.frontier) {
      front.x.push_back(c.tokens_per_s_per_user);
      front.y.push_back(c.tokens_per_s_per_gpu);
    }
    p.series.push_back(std::move(cloud));
    p.series.push_back(std::move(front));
  }
  return RenderSvg(p);
}

Result<std::string> SweepReport::CostSvg() const {
  Plot p;
  p.title = "Cost per million tokens along each frontier";
  p.x = {"tokens/s per user (1000 / mean TPOT)", false};
  p.y = {"USD per million tokens", true};
  for (size_t i = 0; i < views_.size(); ++i) {
    const View& v = views_[i];
    Series s{v.label, {}, {}, true, true, false, static_cast<int>(i)};
    for (const auto& c : v.frontier) {
      if (Cost(v, c) <= 0) continue;  // a sweep with no price
      s.x.push_back(c.tokens_per_s_per_user);
      s.y.push_back(Cost(v, c));
    }
    if (s.x.empty()) s.name += v.frontier.empty() ? " (no valid candidate)" : " (no price)";
    p.series.push_back(std::move(s));
  }
  return RenderSvg(p);
}

// One sentence per sweep for the top of the HTML report: its best deployment and what it serves.
std::string SweepReport::Headline() const {
  std::string out = "<ul class=\"headline\">\n";
  for (const View& v : views_) {
    out += "<li><b>" + EscapeXml(v.label) + "</b>: ";
    if (v.ranked.empty()) {
      out += "no candidate met the limits.</li>\n";
      continue;
    }
    const tuner::CandidateResult& b = v.ranked.front();
    out += "best " + EscapeXml(LayoutLabel(b.config)) + ", " +
           (v.info.ServerLike() ? FormatFixed(b.qps, 2) + " QPS, " : "") +
           FormatFixed(b.throughput_tokens_per_s, 0) + " tok/s (" +
           FormatFixed(b.tokens_per_s_per_gpu, 0) + " per GPU)";
    if (Cost(v, b) > 0) out += " at $" + FormatFixed(Cost(v, b), 3) + " per million tokens";
    if (options_.error_bars) {
      const std::string cell = options_.error_bars(v.info, b);
      if (!cell.empty()) out += " (80% interval " + EscapeXml(cell) + ")";
    }
    out += ".</li>\n";
  }
  return out + "</ul>\n";
}

Result<std::string> SweepReport::Html() const {
  // Laid out for a page 800 px wide or more: plots scale to it, tables wrap their layout cells.
  std::string out =
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>fathom tuning "
      "report</title>\n<style>"
      "body{font-family:sans-serif;margin:1.5em;max-width:1200px}"
      "table{border-collapse:collapse;margin:0.5em 0 1.5em}"
      "th,td{border:1px solid #ccc;padding:3px 6px;font-size:12px}th{background:#f3f3f3}"
      "td{overflow-wrap:anywhere}td.n{text-align:right;white-space:nowrap}"
      "svg{width:100%;max-width:1000px;height:auto}ul.headline li{margin:0.3em 0}"
      "pre{background:#f6f6f6;padding:6px 8px;font-size:12px;white-space:pre-wrap;"
      "overflow-wrap:anywhere}"
      "</style></head><body>\n<h1>fathom tuning report</h1>\n" +
      Headline();
  const bool any_valid =
      std::any_of(views_.begin(), views_.end(), [](const View& v) { return !v.ranked.empty(); });
  if (any_valid) {
    FATHOM_ASSIGN_OR_RETURN(std::string frontier, FrontierSvg());
    out +=
        "<p>Faint points: every valid candidate simulated; lines: each sweep's frontier (no other "
        "candidate serves both more tokens/s per GPU and more tokens/s per user).</p>\n" +
        frontier;
  }
  out +=
      "<h2>Assumptions</h2>\n<ul>\n"
      "<li>Every figure is the simulator's prediction for the sweep's model, GPUs, workload and "
      "p99 limits (each sweep's section names them); pruned candidates were never "
      "simulated.</li>\n"
      "<li>tok/s: output tokens per second over the run, as MLPerf LoadGen counts them; "
      "tok/s/user: 1000 / mean TPOT in ms.</li>\n"
      "<li>$/Mtok: USD per GPU-hour / (tokens/s per GPU x 3600) x 10<sup>6</sup>, at the "
      "prices in the overview ($/GPU-h).</li>\n"
      "<li>kWh/Mtok: the GPUs at their rated power (TDP) for a million tokens, an upper bound that "
      "leaves out hosts, network and cooling.</li>\n" +
      std::string(options_.error_bars
                      ? "<li>80% interval: where the published figure would lie, from how far "
                        "fathom missed published MLPerf results it was not fitted on that "
                        "extrapolate as the sweep does (<code>fathom intervals</code> shows how "
                        "often such intervals held).</li>\n"
                      : "") +
      "</ul>\n<h2>Best deployment of each sweep</h2>\n" + Overview().Html();
  if (const Table cheapest = Cheapest(); cheapest.rows() > 0) {
    out += "<h2>Cheapest deployment per model across GPUs</h2>\n" + cheapest.Html();
  }
  if (any_valid) {
    const bool priced = std::any_of(views_.begin(), views_.end(), [&](const View& v) {
      return std::any_of(v.frontier.begin(), v.frontier.end(),
                         [&](const auto& c) { return Cost(v, c) > 0; });
    });
    if (priced) {
      FATHOM_ASSIGN_OR_RETURN(std::string cost, CostSvg());
      out += "<h2>Cost per million tokens</h2>\n" + cost;
    }
  }
  for (const View& v : views_) {
    out += "<h2>" + EscapeXml(v.label) + "</h2>\n<p>" + EscapeXml(Description(v)) +
           "</p>\n<h3>Ranking</h3>\n";
    if (v.ranked.empty()) {
      out += "<p>No valid candidate.</p>\n";
    } else {
      const tuner::LaunchCommands& l = v.launch;
      out += RankingTable(v.ranked, options_.top, v.price).Html();
      out += "<h3>Launch the best</h3>\n<pre>" + EscapeXml(Commands(l)) + "</pre>\n<p>" +
             EscapeXml(kTrtllmOptions) + "</p>\n<pre>" + EscapeXml(l.trtllm_yaml) + "</pre>\n";
    }
    out += "<h3>Pareto frontier</h3>\n";
    out += v.frontier.empty() ? "<p>No valid candidate.</p>\n" : FrontierTable(v).Html();
  }
  return out + "</body></html>\n";
}

std::string SweepReport::CandidatesCsv() const {
  Table t({{"sweep", false},
           {"model", false},
           {"hardware", false},
           {"gpus"},
           {"scenario", false},
           {"valid"},
           {"frontier"},
           {"layout", false},
           {"kv", false},
           {"max_batch"},
           {"max_num_tokens"},
           {"qps"},
           {"throughput_tokens_per_s"},
           {"tokens_per_s_per_gpu"},
           {"tokens_per_s_per_user"},
           {"ttft_p99_ms"},
           {"tpot_p99_ms"},
           {"usd_per_gpu_hour"},
           {"cost_per_million_tokens"},
           {"config", false}});
  for (const View& v : views_) {
    std::set<std::string> on_frontier;
    for (const auto& c : v.frontier) on_frontier.insert(tuner::CandidateKey(c.config));
    for (const auto& c : v.simulated) {
      const std::string key = tuner::CandidateKey(c.config);
      // An invalid candidate has no figures (no run served its requests within the limits), and
      // an Offline one no QPS: their cells stay empty rather than read 0.
      auto figure = [&](double value) { return c.valid ? StrFormat("%g", value) : std::string(); };
      t.AddRow({v.info.id,
                v.info.model,
                v.info.hardware,
                std::to_string(v.info.gpus),
                std::string(sim::Name(v.info.scenario)),
                c.valid ? "1" : "0",
                on_frontier.count(key) ? "1" : "0",
                LayoutLabel(c.config),
                c.config.kv,
                std::to_string(c.config.engine.max_batch),
                std::to_string(c.config.engine.max_num_tokens),
                c.qps > 0 ? figure(c.qps) : "",
                figure(c.throughput_tokens_per_s),
                figure(c.tokens_per_s_per_gpu),
                figure(c.tokens_per_s_per_user),
                figure(c.ttft_p99_ms),
                figure(c.tpot_p99_ms),
                v.price > 0 ? StrFormat("%g", v.price) : "",
                figure(Cost(v, c)),
                key});
    }
  }
  return t.Csv();
}

}  // namespace fathom::reports

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <regex>

#include "base/format.h"
#include "reports/breakdown.h"
#include "reports/svg_plot.h"
#include "reports/sweep_report.h"
#include "reports/table.h"

namespace fathom::reports {
namespace {

int Count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

tuner::CandidateResult Candidate(int max_batch, double per_gpu, double per_user,
                                 bool valid = true) {
  tuner::CandidateResult c;
  c.config.model = "llama2-70b";
  c.config.hardware = "h200";
  c.config.gpus = 8;
  c.config.tp = 8;
  c.config.ep = 1;
  c.config.attn_dp = 1;
  c.config.weights = "fp8";
  c.config.engine.max_batch = max_batch;
  c.valid = valid;
  c.tokens_per_s_per_gpu = per_gpu;
  c.throughput_tokens_per_s = 8 * per_gpu;
  c.tokens_per_s_per_user = per_user;
  c.qps = c.throughput_tokens_per_s / 300;
  c.cost_per_million_tokens = models::CostPerMillionTokens(3.8, per_gpu);
  return c;
}

tuner::StoredSweep Sweep(std::string id, std::string hardware, sim::Scenario scenario) {
  tuner::StoredSweep s;
  s.info.id = std::move(id);
  s.info.model = "llama2-70b";
  s.info.hardware = std::move(hardware);
  s.info.gpus = 8;
  s.info.scenario = scenario;
  s.info.price_per_gpu_hour = 3.8;
  s.results = {Candidate(64, 900, 30), Candidate(256, 1800, 18), Candidate(128, 1000, 15),
               Candidate(512, 5000, 40, false)};
  s.info.candidates = 6;
  return s;
}

models::HardwareCatalog Catalog() { return *models::HardwareCatalog::LoadBuiltin(); }

// The cells of CSV line `line` (0: the titles), split at every comma: exact up to a quoted cell
// with commas (the candidates CSV's last, its config as JSON).
std::vector<std::string> CsvCells(const std::string& csv, int line) {
  size_t at = 0;
  for (int i = 0; i < line; ++i) at = csv.find('\n', at) + 1;
  std::vector<std::string> cells;
  const std::string row = csv.substr(at, csv.find('\n', at) - at);
  for (size_t from = 0;;) {
    const size_t comma = row.find(',', from);
    cells.push_back(row.substr(from, comma - from));
    if (comma == std::string::npos) return cells;
    from = comma + 1;
  }
}

}  // namespace

TEST_CASE(
    "Table: text aligns numbers right and words left, and CSV, Markdown and HTML escape what they "
    "must",
    "[reports]") {
  Table t({{"name", false}, {"tok/s"}});
  t.AddRow({"a, \"b\"", "12"});
  t.AddRow({"x|y <z>", "1234"});
  CHECK(t.Text() == "name     tok/s\na, \"b\"      12\nx|y <z>   1234\n");
  CHECK(t.Csv() == "name,tok/s\n\"a, \"\"b\"\"\",12\nx|y <z>,1234\n");
  CHECK(t.Markdown() ==
        "| name | tok/s |\n| --- | ---: |\n| a, \"b\" | 12 |\n| x\\|y <z> | 1234 |\n");
  CHECK(t.Html().find("<td>x|y &lt;z&gt;</td><td class=\"n\">1234</td>") != std::string::npos);
}

TEST_CASE("FormatFixed: fixed decimals, and huge or undefined values in a few characters",
          "[reports]") {
  CHECK(FormatFixed(1234.56, 1) == "1234.6");
  CHECK(FormatFixed(2164352, 0) == "2164352");
  CHECK(FormatFixed(1e300, 0) == "1.0e+300");
  CHECK(FormatFixed(-2.5e9, 2) == "-2.5e+09");
  CHECK(FormatFixed(std::numeric_limits<double>::quiet_NaN(), 1) == "nan");
  CHECK(FormatFixed(-std::numeric_limits<double>::infinity(), 1) == "-inf");
}

TEST_CASE("LayoutLabel: degrees as simulate prints them, attention DP as attnDP", "[reports]") {
  sim::DeploymentConfig d;  // DeepSeek-R1 on 8 B200s, TP8 / EP8 / attention DP8, FP4
  CHECK(LayoutLabel(d).rfind("TP8 PP1 EP8 attnDP8 x1 fp4", 0) == 0);
  d.disaggregated = true;
  d.decode.tp = d.decode.attn_dp = 8;
  CHECK(LayoutLabel(d).find("xTP8 attnDP8") != std::string::npos);
}

TEST_CASE("RankingTable: Offline rows show no QPS or TTFT, and a huge value keeps its cell narrow",
          "[reports]") {
  tuner::CandidateResult server = Candidate(64, 900, 30);
  server.ttft_p99_ms = 850;
  // Offline: no QPS, and a p99 TTFT that is the wait behind the whole data set.
  tuner::CandidateResult offline = Candidate(256, 1800, 18);
  offline.qps = 0;
  offline.ttft_p99_ms = 2164352;
  offline.tpot_p99_ms = 1e300;
  const Table t = RankingTable({server, offline}, 10);
  const std::string csv = t.Csv();
  const auto titles = CsvCells(csv, 0);
  REQUIRE(titles.size() == 11);
  REQUIRE(titles[7] == "QPS");
  REQUIRE(titles[8] == "TTFT p99");
  CHECK(CsvCells(csv, 1)[7] == FormatFixed(server.qps, 2));
  CHECK(CsvCells(csv, 1)[8] == "850");
  CHECK(CsvCells(csv, 2)[7] == "-");
  CHECK(CsvCells(csv, 2)[8] == "-");
  CHECK(CsvCells(csv, 2)[9] == "1.0e+300");
  const auto cells = CsvCells(csv, 2);
  for (size_t i = 0; i < cells.size(); ++i) {
    if (titles[i] != "layout") CHECK(cells[i].size() <= 24);  // the figures; a layout is a label
  }
}

TEST_CASE("LinearTicks: round steps of 1, 2 or 5 that cover the range", "[reports]") {
  for (auto [lo, hi] :
       {std::pair{0.0, 19.0}, {0.13, 0.87}, {-40.0, 2500.0}, {1e6, 1.7e6}, {3.0, 3.001}}) {
    INFO(lo << " " << hi);
    const auto ticks = LinearTicks(lo, hi, 6);
    REQUIRE(ticks.size() >= 2);
    CHECK(ticks.size() <= 13);
    CHECK(ticks.front() <= lo);
    CHECK(ticks.back() >= hi);
    const double step = ticks[1] - ticks[0];
    const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
    CHECK((std::abs(mantissa - 1) < 1e-6 || std::abs(mantissa - 2) < 1e-6 ||
           std::abs(mantissa - 5) < 1e-6));
    for (size_t i = 1; i < ticks.size(); ++i) CHECK(ticks[i] - ticks[i - 1] == Approx(step));
  }
  CHECK(LinearTicks(0, 19, 6) == std::vector<double>{0, 5, 10, 15, 20});
}

TEST_CASE("LogTicks: powers of ten, with 2 and 5 between them over few decades", "[reports]") {
  CHECK(LogTicks(1.2, 3.5) == std::vector<double>{1, 2, 5, 10});
  const auto wide = LogTicks(0.5, 2000);
  REQUIRE(wide.size() == 6);
  CHECK(wide.front() == Approx(0.1));
  CHECK(wide.back() == Approx(1e4));
  CHECK(TickLabel(0.25) == "0.25");
  CHECK(TickLabel(800) == "800");
  CHECK(TickLabel(12000) == "12k");
  CHECK(TickLabel(1.5e6) == "1.5M");
  CHECK(TickLabel(-1e-17) == "0");
}

TEST_CASE("RenderSvg: series that share a point keep distinct, hollow markers", "[reports]") {
  // An Offline and a Server sweep of one deployment: the same frontier point.
  Plot p;
  p.title = "shared";
  p.x = {"x", false};
  p.y = {"y", false};
  for (int i = 0; i < 4; ++i)
    p.series.push_back({"s" + std::to_string(i), {5}, {7}, true, true, false, -1});
  auto svg = RenderSvg(p);
  REQUIRE(svg.ok());
  CHECK(Count(*svg, "<circle class=\"marker\"") == 1);
  CHECK(Count(*svg, "<rect class=\"marker\"") == 1);
  CHECK(Count(*svg, "<path class=\"marker\"") == 2);  // a triangle and a diamond
  CHECK(Count(*svg, "fill=\"white\"") >= 4);
}

TEST_CASE(
    "RenderSvg: every point lands inside the plot area, and bad values are errors naming them",
    "[reports]") {
  Plot p;
  p.title = "a < b & c";
  p.x = {"x", false};
  p.y = {"y", true};
  p.series.push_back({"line", {1, 2, 3}, {10, 100, 1000}, true, true, false, -1});
  p.series.push_back({"", {1.5, 2.5}, {20, 30}, false, true, true, -1});
  auto svg = RenderSvg(p);
  REQUIRE(svg.ok());
  CHECK(svg->find("a &lt; b &amp; c") != std::string::npos);
  CHECK(Count(*svg, "<polyline") == 1);
  CHECK(Count(*svg, "class=\"marker\"") == 5);
  CHECK(Count(*svg, "<circle class=\"marker\"") == 3);  // the second series' are squares
  CHECK(Count(*svg, "fill-opacity=\"0.25\"") == 2);
  const std::regex circle("class=\"marker\" cx=\"([0-9.]+)\" cy=\"([0-9.]+)\"");
  for (auto it = std::sregex_iterator(svg->begin(), svg->end(), circle);
       it != std::sregex_iterator(); ++it) {
    const double cx = std::stod((*it)[1]), cy = std::stod((*it)[2]);
    CHECK(cx >= 74);
    CHECK(cx <= p.width - 240);
    CHECK(cy >= 40);
    CHECK(cy <= p.height - 54);
  }
  // On the log axis, 10 -> 100 -> 1000 are equally spaced.
  const std::regex points("points=\"[0-9.]+,([0-9.]+) [0-9.]+,([0-9.]+) [0-9.]+,([0-9.]+)\"");
  std::smatch m;
  REQUIRE(std::regex_search(*svg, m, points));
  CHECK(std::stod(m[1]) - std::stod(m[2]) == Approx(std::stod(m[2]) - std::stod(m[3])).margin(0.2));

  p.series[0].y[1] = 0;
  auto zero = RenderSvg(p);
  REQUIRE_FALSE(zero.ok());
  CHECK(zero.status().message() ==
        "plot 'a < b & c': series 'line' point 1: y = 0: must be finite and > 0 on a log axis");
  p.series[0].y[1] = std::numeric_limits<double>::quiet_NaN();
  CHECK_FALSE(RenderSvg(p).ok());
  CHECK(RenderSvg(Plot{}).status().message() == "plot '': no points to plot");
}

TEST_CASE("SweepReport: the best of each sweep, its frontier, and costs at what-if prices",
          "[reports]") {
  const auto catalog = Catalog();
  std::vector<tuner::StoredSweep> sweeps = {Sweep("111", "h200", sim::Scenario::kServer),
                                            Sweep("222", "h200", sim::Scenario::kServer)};
  SweepReport as_swept(sweeps, catalog, {});
  const std::string text = as_swept.Text();
  // Both sweeps share model, GPUs and scenario: their ids tell them apart.
  CHECK(text.find("llama2-70b 8xh200 server #111") != std::string::npos);
  CHECK(text.find("llama2-70b 8xh200 server #222") != std::string::npos);
  // The best is the valid candidate with the highest QPS (the invalid 5000 tok/s one is out).
  CHECK(text.find("4 simulated, 1 of them not valid") != std::string::npos);
  CHECK(text.find("The other 2 were pruned") != std::string::npos);
  // $3.80 per GPU-hour at 1800 tokens/s per GPU: 3.8 / (1800 x 3600) x 1e6 = 0.586 $/Mtok.
  CHECK(text.find("0.586") != std::string::npos);

  // What-if: $7.20 doubles every cost; a price for another GPU changes nothing here.
  SweepReport what_if(sweeps, catalog, {10, {{"h200", 7.2}, {"b200", 1.0}}, {}});
  const std::string csv = what_if.CandidatesCsv();
  CHECK(Count(csv, "\n") == 1 + 8);
  CHECK(csv.find(",7.2,1.11111,") != std::string::npos);  // 7.2 / (1800 x 3600) x 1e6
  CHECK(what_if.Text().find("(what-if; swept at $3.80)") != std::string::npos);
  // Frontier: 256 (1800/GPU at 18/user) and 64 (900 at 30); 128 (1000 at 15) is dominated.
  const auto html = what_if.Html();
  REQUIRE(html.ok());
  CHECK(Count(*html, "<svg") == 2);
  CHECK(Count(csv, "llama2-70b,h200,8,server,1,1,") == 4);
  // Energy: H200 at its rated power and 1800 tokens/s per GPU.
  const double kwh = (*catalog.Find("h200")).power_watts / 1800 / 3.6;
  CHECK(what_if.Text().find("  " + StrFormat("%.2f", kwh) + "\n") != std::string::npos);

  // Error bars where the caller gives them: a column of the overview and the headline's words.
  ReportOptions with_bars;
  with_bars.error_bars = [](const tuner::SweepInfo& info, const tuner::CandidateResult& best) {
    return info.id == "111" ? StrFormat("%.1f-%.1f QPS", 0.8 * best.qps, 1.1 * best.qps)
                            : std::string();
  };
  const SweepReport barred(sweeps, catalog, with_bars);
  const std::string barred_text = barred.Text();
  CHECK(barred_text.find("The best's 80% interval: ") != std::string::npos);
  const auto barred_html = barred.Html();
  REQUIRE(barred_html.ok());
  CHECK(Count(*barred_html, "(80% interval ") == 1);  // the other sweep has none
  CHECK(as_swept.Text().find("80% interval") == std::string::npos);
}

TEST_CASE("SweepReport: a sweep with no valid candidate reports so, and plots nothing",
          "[reports]") {
  tuner::StoredSweep s = Sweep("333", "h200", sim::Scenario::kOffline);
  for (auto& r : s.results) r.valid = false;
  SweepReport report({s}, Catalog(), {});
  CHECK(report.Text().find("none valid") != std::string::npos);
  auto html = report.Html();
  REQUIRE(html.ok());
  CHECK(Count(*html, "<svg") == 0);
  CHECK_FALSE(report.FrontierSvg().ok());
}

// The visible text of each legend entry in `svg`, its lines joined by spaces.
std::vector<std::string> LegendEntries(const std::string& svg) {
  std::vector<std::string> entries;
  const std::regex entry("<g class=\"legend\">(.*?)</g>"), line("<tspan[^>]*>([^<]*)</tspan>");
  for (auto e = std::sregex_iterator(svg.begin(), svg.end(), entry); e != std::sregex_iterator();
       ++e) {
    const std::string body = (*e)[1];
    std::string text;
    for (auto l = std::sregex_iterator(body.begin(), body.end(), line); l != std::sregex_iterator();
         ++l) {
      text += (text.empty() ? "" : " ") + std::string((*l)[1]);
    }
    entries.push_back(text);
  }
  return entries;
}

TEST_CASE("RenderSvg: a long legend name wraps whole, and the plot grows to hold its legend",
          "[reports]") {
  Plot p;
  p.x = {"x", false};
  p.y = {"y", false};
  const std::string long_word(60, 'w');
  p.series.push_back({"a sweep named " + long_word, {1, 2}, {1, 2}, true, true, false, -1});
  auto svg = RenderSvg(p);
  REQUIRE(svg.ok());
  const std::regex line("<tspan[^>]*>([^<]*)</tspan>");
  std::string joined;
  for (auto l = std::sregex_iterator(svg->begin(), svg->end(), line); l != std::sregex_iterator();
       ++l) {
    CHECK((*l)[1].length() <= 24);
    joined += (*l)[1];
  }
  CHECK(joined == "a sweep named" + long_word);
  CHECK(Count(*svg, "class=\"x-label\"") == 1);
  CHECK(Count(*svg, "class=\"y-label\"") == 1);

  for (int i = 0; i < 40; ++i)
    p.series.push_back({"series " + std::to_string(i), {1}, {1}, false, true, false, -1});
  svg = RenderSvg(p);
  REQUIRE(svg.ok());
  std::smatch m;
  REQUIRE(std::regex_search(*svg, m, std::regex("height=\"([0-9]+)\"")));
  CHECK(std::stoi(m[1]) > 40 * 18 + 40);
}

TEST_CASE("SweepReport: legends name every sweep, distinctly, with or without a valid candidate",
          "[reports]") {
  // Two sweeps of the same model, GPUs and scenario whose ids share a long prefix, and one where
  // nothing is valid.
  std::vector<tuner::StoredSweep> sweeps = {
      Sweep("interactive-sweep-001", "h200", sim::Scenario::kServer),
      Sweep("interactive-sweep-002", "h200", sim::Scenario::kServer),
      Sweep("333", "b200", sim::Scenario::kServer)};
  for (auto& r : sweeps[2].results) r.valid = false;
  const SweepReport report(sweeps, Catalog(), {});
  for (const auto& svg : {report.FrontierSvg(), report.CostSvg()}) {
    REQUIRE(svg.ok());
    CHECK(LegendEntries(*svg) ==
          std::vector<std::string>{"llama2-70b 8xh200 server #interactive-sweep-001",
                                   "llama2-70b 8xh200 server #interactive-sweep-002",
                                   "llama2-70b 8xb200 server (no valid candidate)"});
  }
}

TEST_CASE("SweepReport: the CSV leaves figures an invalid or Offline candidate lacks empty, not 0",
          "[reports]") {
  tuner::StoredSweep offline = Sweep("444", "h200", sim::Scenario::kOffline);
  for (auto& r : offline.results) r.qps = 0;
  const std::string csv = SweepReport({offline}, Catalog(), {}).CandidatesCsv();
  const auto titles = CsvCells(csv, 0);
  REQUIRE(titles.size() == 20);
  REQUIRE(titles[11] == "qps");
  REQUIRE(titles[18] == "cost_per_million_tokens");
  for (int row = 1; row <= 4; ++row) {
    const auto cells = CsvCells(csv, row);
    REQUIRE(cells.size() >= 20);
    INFO(csv);
    CHECK(cells[11] == "");  // Offline: no QPS
    const bool valid = cells[5] == "1";
    for (int c = 12; c <= 18; ++c) {
      if (c == 17) continue;  // the price applies to every candidate
      CHECK(cells[c].empty() == !valid);
    }
  }
  CHECK(csv.find(",0,TP8") != std::string::npos);  // the invalid one is there, marked invalid
}

TEST_CASE("SweepReport: a frontier lists each point once", "[reports]") {
  tuner::StoredSweep s = Sweep("555", "h200", sim::Scenario::kServer);
  // Two more candidates exactly where others are: 96 at 64's point, 1024 at 256's.
  s.results.push_back(Candidate(96, 900, 30));
  s.results.push_back(Candidate(1024, 1800, 18));
  const SweepReport report({s}, Catalog(), {});
  CHECK(report.Text().find(
            "Pareto frontier (tokens/s per GPU against tokens/s per user): 2 points") !=
        std::string::npos);
  CHECK(Count(report.CandidatesCsv(), ",1,1,TP8") == 2);  // valid and on the frontier
  auto svg = report.FrontierSvg();
  REQUIRE(svg.ok());
  const std::regex points("<polyline[^>]*points=\"([^\"]*)\"");
  std::smatch m;
  REQUIRE(std::regex_search(*svg, m, points));
  CHECK(Count(m[1], ",") == 2);
  CHECK(tuner::ParetoFrontier(s.results).size() == 2);
}

TEST_CASE("SweepReport: the best's launch commands, with TensorRT-LLM's extra.yaml in a fence",
          "[reports]") {
  const SweepReport report({Sweep("666", "h200", sim::Scenario::kServer)}, Catalog(), {});
  for (const std::string& out : {report.Text(), report.Markdown()}) {
    const size_t yaml = out.find("```yaml\ntensor_parallel_size: 8\n");
    REQUIRE(yaml != std::string::npos);
    const size_t close = out.find("\n```\n", yaml);
    REQUIRE(close != std::string::npos);
    CHECK(out.substr(yaml, close - yaml).find("max_batch_size: 256") != std::string::npos);
    CHECK(out.find("```sh\nvllm serve meta-llama/Llama-2-70b-chat-hf") != std::string::npos);
    CHECK(Count(out, "```") % 2 == 0);
  }
  auto html = report.Html();
  REQUIRE(html.ok());
  CHECK(html->find("<pre>tensor_parallel_size: 8\n") != std::string::npos);
  CHECK(html->find("--extra_llm_api_options extra.yaml\n</pre>") != std::string::npos);
}

TEST_CASE(
    "SelectSweeps: ids by unique prefix, and unknown or ambiguous ones are errors listing the "
    "sweeps",
    "[reports]") {
  std::vector<tuner::StoredSweep> all = {Sweep("12345", "h200", sim::Scenario::kServer),
                                         Sweep("12399", "b200", sim::Scenario::kServer)};
  auto one = SelectSweeps(all, {"123"}, "x.db");
  REQUIRE_FALSE(one.ok());
  CHECK(one.status().message() ==
        "x.db: --sweep = \"123\": matches several sweeps (sweeps: 12345 12399)");
  auto picked = SelectSweeps(all, {"1239"}, "x.db");
  REQUIRE(picked.ok());
  REQUIRE(picked->size() == 1);
  CHECK(picked->front().info.hardware == "b200");
  CHECK(SelectSweeps(all, {"9"}, "x.db").status().message().find("matches no sweep") !=
        std::string::npos);
  CHECK(SelectSweeps({}, {}, "x.db").status().message() ==
        "x.db: holds no sweeps (`fathom tune --db FILE` writes them)");
}

}  // namespace fathom::reports

namespace fathom::reports {

TEST_CASE("SweepReport: the cheapest deployment per model and scenario across the GPUs swept",
          "[reports]") {
  // The same model and scenario on H200 and B200; B200 at a what-if price that makes it the
  // cheaper.
  tuner::StoredSweep h200 = Sweep("a", "h200", sim::Scenario::kServer);
  tuner::StoredSweep b200 = Sweep("b", "b200", sim::Scenario::kServer);
  tuner::StoredSweep offline = Sweep("c", "h200", sim::Scenario::kOffline);
  SweepReport cheaper_b200({h200, b200, offline}, Catalog(), {10, {{"b200", 1.0}}, {}});
  const std::string text = cheaper_b200.Text();
  INFO(text);
  REQUIRE(Count(text, "Cheapest deployment per model across GPUs") == 1);
  // Its row: the B200 sweep's candidate with the most tokens/s per GPU, at $1 per GPU-hour.
  CHECK(std::regex_search(
      text,
      std::regex("llama2-70b +server .*  2 GPU setups +8xb200 +TP8 .* 1800 +1\\.00 +0\\.154")));
  // Offline was swept on one GPU kind only: no row.
  CHECK_FALSE(std::regex_search(text, std::regex("llama2-70b +offline +")));
  CHECK(Count(cheaper_b200.Markdown(), "## Cheapest deployment per model across GPUs") == 1);

  SweepReport one_each({h200, offline}, Catalog(), {});
  CHECK(Count(one_each.Text(), "Cheapest deployment") == 0);
}

TEST_CASE("Breakdown: the parts add up to the GPUs' time and the gain is credited part by part",
          "[reports]") {
  // 8 GPUs for 100 s, 2 million tokens: 400 GPU-s per million; 300 of them priced.
  sim::SimulationResult a;
  a.output_tokens = 2'000'000;
  a.drain_end_s = 100;
  a.throughput_tokens_per_s = 20'000;
  a.counters.cost.gemm = 200;
  a.counters.cost.attention = 300;
  a.counters.cost.host = 100;
  // The other run: the same tokens in 125 s, attention and the wait for the host dearer.
  sim::SimulationResult b = a;
  b.drain_end_s = 125;
  b.counters.cost.attention = 500;
  b.counters.cost.host = 150;
  const BreakdownRun ours{"ours", &a, 8}, theirs{"theirs", &b, 8};
  const OrderedJson j = BreakdownJson(ours);
  CHECK(j["gemm"] == 100.0);
  CHECK(j["attention"] == 150.0);
  CHECK(j["idle"] == 100.0);  // 800 GPU-s, 600 of them priced
  CHECK(j["total"] == 400.0);
  double parts = 0;
  for (const auto& [key, value] : j.items()) {
    if (key != "total") parts += value.get<double>();
  }
  CHECK(parts == Approx(400));
  const std::string table = BreakdownTable({ours, theirs}).Text();
  CHECK(table.find("attention") != std::string::npos);
  CHECK(table.find("unattributed") == std::string::npos);  // none: no row
  CHECK(table.find("tokens/s sustained (as ranked)") != std::string::npos);
  CHECK(table.find("tokens/s over the run, drain included (LoadGen's)") != std::string::npos);
  // 500 GPU-s per million against 400: attention 100 fewer (100%), host 25 fewer, idle 25 more.
  const std::string credit = CreditLines(ours, theirs);
  CHECK(credit.find("ours spends 100.0 GPU-seconds per million tokens fewer than theirs") == 0);
  CHECK(credit.find("  attention: 100.0 fewer (100% of the gain)\n") != std::string::npos);
  CHECK(credit.find("  host (the GPU waiting for it): 25.0 fewer (25% of the gain)") !=
        std::string::npos);
  CHECK(credit.find("  idle (no batch: bubbles, the drain): 25.0 more\n") != std::string::npos);
  CHECK(credit.find("attention") < credit.find("host"));
  // Neither run streamed: no front row, no front note.
  CHECK(table.find("serving front busy") == std::string::npos);
  CHECK(credit.find("serving front") == std::string::npos);
  // Theirs streamed every token through a front busy the whole time: the table shows both fronts'
  // load and the credit says which part of the gain rests on the front's cost.
  a.front_max_tokens_per_s = b.front_max_tokens_per_s = 17'500;
  a.front_busy_share = 0.12;
  b.front_busy_share = 1.0;
  const std::string streamed = BreakdownTable({ours, theirs}).Text();
  CHECK(streamed.find("serving front busy, % of arrivals' time") != std::string::npos);
  const std::string front = CreditLines(ours, theirs);
  CHECK(front.find("  theirs serving front is busy 100% of the arrivals' time") !=
        std::string::npos);
  CHECK(front.find("ours serving front") == std::string::npos);
}

}  // namespace fathom::reports

#include "reports/breakdown.h"

#include <algorithm>
#include <cmath>

#include "base/format.h"

namespace fathom::reports {
namespace {

struct Part {
  const char* name;
  const char* key;                   // in JSON
  double models::StageCost::*field;  // null: idle, what the parts leave of the GPUs' time
};

constexpr Part kParts[] = {
    {"dense GEMMs", "gemm", &models::StageCost::gemm},
    {"MoE experts (grouped GEMMs)", "grouped_gemm", &models::StageCost::grouped_gemm},
    {"attention", "attention", &models::StageCost::attention},
    {"collectives", "communication", &models::StageCost::communication},
    {"norms, activations, other kernels", "elementwise", &models::StageCost::elementwise},
    {"attention-DP imbalance (ranks waiting)", "imbalance", &models::StageCost::imbalance},
    {"host (the GPU waiting for it)", "host", &models::StageCost::host},
    {"unattributed (KV swaps)", "unattributed", &models::StageCost::unattributed},
    {"idle (no batch: bubbles, the drain)", "idle", nullptr},
};

double TotalPerMillion(const BreakdownRun& r);

double MillionTokens(const BreakdownRun& r) {
  return std::max(1.0, static_cast<double>(r.run->output_tokens)) / 1e6;
}

// GPU-seconds per million output tokens of one part.
double PerMillion(const BreakdownRun& r, const Part& p) {
  const models::StageCost& c = r.run->counters.cost;
  const double all = r.gpus * r.run->drain_end_s;
  const double v = p.field != nullptr ? c.*(p.field) : std::max(0.0, all - c.Total());
  return v / MillionTokens(r);
}

double TotalPerMillion(const BreakdownRun& r) {
  return r.gpus * r.run->drain_end_s / MillionTokens(r);
}

}  // namespace

Table BreakdownTable(const std::vector<BreakdownRun>& runs) {
  std::vector<Table::Column> columns = {{"GPU-seconds per million output tokens", false}};
  for (const BreakdownRun& r : runs) columns.push_back({r.label});
  Table t(std::move(columns));
  for (const Part& p : kParts) {
    bool any = false;  // a swap's time: rounding leaves the others a few nanoseconds
    for (const BreakdownRun& r : runs) any = any || std::abs(PerMillion(r, p)) >= 0.05;
    if (!any && p.field == &models::StageCost::unattributed) continue;
    std::vector<std::string> row = {p.name};
    for (const BreakdownRun& r : runs) row.push_back(FormatFixed(PerMillion(r, p), 1));
    t.AddRow(std::move(row));
  }
  auto add = [&](const char* name, auto value, int digits) {
    std::vector<std::string> row = {name};
    for (const BreakdownRun& r : runs) row.push_back(FormatFixed(value(r), digits));
    t.AddRow(std::move(row));
  };
  add("total (GPUs x run, drain included)", TotalPerMillion, 1);
  // The ranking's figure, and LoadGen's, which the drain of the longest outputs lowers.
  add(
      "tokens/s sustained (as ranked)",
      [](const BreakdownRun& r) { return r.run->sustained_tokens_per_s; }, 0);
  add(
      "tokens/s over the run, drain included (LoadGen's)",
      [](const BreakdownRun& r) { return r.run->throughput_tokens_per_s; }, 0);
  add(
      "mean TTFT ms (queueing, serving front)",
      [](const BreakdownRun& r) { return r.run->ttft_mean_ms; }, 0);
  add(
      "mean TPOT ms", [](const BreakdownRun& r) { return r.run->tpot_mean_ms; }, 1);
  bool streamed = false;
  for (const BreakdownRun& r : runs) streamed = streamed || r.run->front_max_tokens_per_s > 0;
  if (streamed) {
    add(
        "serving front busy, % of arrivals' time",
        [](const BreakdownRun& r) { return 100 * r.run->front_busy_share; }, 0);
  }
  return t;
}

std::string CreditLines(const BreakdownRun& ours, const BreakdownRun& theirs) {
  struct Delta {
    const char* name;
    double saved;  // GPU-seconds per million tokens ours spends less
  };
  std::vector<Delta> deltas;
  double gain = 0;
  for (const Part& p : kParts) {
    const double saved = PerMillion(theirs, p) - PerMillion(ours, p);
    deltas.push_back({p.name, saved});
    gain += saved;
  }
  std::stable_sort(deltas.begin(), deltas.end(),
                   [](const Delta& a, const Delta& b) { return a.saved > b.saved; });
  std::string out = StrFormat("%s spends %s GPU-seconds per million tokens %s than %s:\n",
                              ours.label.c_str(), FormatFixed(std::abs(gain), 1).c_str(),
                              gain >= 0 ? "fewer" : "more", theirs.label.c_str());
  for (const Delta& d : deltas) {
    if (std::abs(d.saved) < 0.05) continue;
    out += StrFormat("  %s: %s %s", d.name, FormatFixed(std::abs(d.saved), 1).c_str(),
                     d.saved > 0 ? "fewer" : "more");
    if (gain > 0 && d.saved > 0) out += StrFormat(" (%.0f%% of the gain)", 100 * d.saved / gain);
    out += "\n";
  }
  // A run its serving front bounds spends its GPUs' time waiting on the front's queue (the drain
  // after the last arrival, first tokens behind responses): that part of the gain rests on the
  // front's cost a response, a stack constant fitted on other hosts (sim::kFrontBoundShare).
  for (const BreakdownRun* r : {&theirs, &ours}) {
    if (r->run->front_busy_share < sim::kFrontBoundShare) continue;
    out += StrFormat(
        "  %s serving front is busy %.0f%% of the arrivals' time: its queue, not its GPUs, sets "
        "that run's latencies and much of its idle time, at the stack's cost a response (fitted on "
        "other hosts); the gain that part makes is only as sure as that cost (`fathom simulate "
        "--deployment` on it prints the run with a front that costs nothing)\n",
        r->label.c_str(), 100 * r->run->front_busy_share);
  }
  return out;
}

OrderedJson BreakdownJson(const BreakdownRun& run) {
  OrderedJson j;
  for (const Part& p : kParts) j[p.key] = PerMillion(run, p);
  j["total"] = TotalPerMillion(run);
  return j;
}

}  // namespace fathom::reports

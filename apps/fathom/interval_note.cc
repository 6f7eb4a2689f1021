#include "apps/fathom/interval_note.h"

#include "base/format.h"
#include "reports/table.h"

namespace fathom::cli {

Result<IntervalNote> DescribeIntervals(const std::string& stack,
                                       const sim::DeploymentConfig& config, const Answer& answer) {
  IntervalNote note;
  if (stack.empty()) return note;
  FATHOM_ASSIGN_OR_RETURN(tuner::ResidualTable table, tuner::ResidualTable::LoadDefault());
  const tuner::Question base{stack, config.model, config.hardware, "", config.TotalGpus()};
  auto interval = [&](const char* metric, double figure) {
    tuner::Question q = base;
    q.metric = metric;
    return table.IntervalFor(q, figure);
  };
  std::string lines;
  double level = 0;
  unsigned unseen = 0;
  bool unseen_family = false;
  auto add = [&](const std::string& key, const tuner::Interval& in, double low, double high,
                 const char* unit, int decimals) {
    OrderedJson j = in.ToJson();
    j["low"] = low;
    j["high"] = high;
    note.json[key] = j;
    lines += StrFormat(
        "\n  %s-%s %s (%d rows%s)", reports::FormatFixed(low, decimals).c_str(),
        reports::FormatFixed(high, decimals).c_str(), unit, in.rows,
        in.widened ? (", too few like it: also " + tuner::DescribeUnseen(in.basis)).c_str() : "");
    level = in.level;
    unseen = in.unseen;
    unseen_family = in.unseen_family;
  };
  if (answer.scenario == sim::Scenario::kOffline) {
    if (auto in = interval(tuner::kOfflineTokens, answer.tokens_per_s))
      add("tokens_per_s", *in, in->low, in->high, "tokens/s", 0);
  } else {
    if (answer.capacity) {
      if (auto in = interval(tuner::kCapacityQps, answer.qps)) {
        add("qps", *in, in->low, in->high, "QPS", 2);
        const auto [low, high] = in->Scaled(answer.tokens_per_s);
        add("tokens_per_s", *in, low, high, "tokens/s", 0);
      }
    }
    if (answer.overloaded) {
      note.text =
          "Error bars: none for the p99 latencies of a run that falls behind its arrivals\n";
      note.json["latencies_overloaded"] = true;
    } else {
      if (auto in = interval(tuner::kTtftP99, answer.ttft_p99_ms))
        add("ttft_p99_ms", *in, in->low, in->high, "ms p99 TTFT", 0);
      if (auto in = interval(tuner::kTpotP99, answer.tpot_p99_ms))
        add("tpot_p99_ms", *in, in->low, in->high, "ms p99 TPOT", 1);
    }
  }
  if (lines.empty()) return note;
  note.text += StrFormat(
                   "Error bars, %.0f%%, from held-out published results like this question "
                   "(%s):",
                   100 * level, tuner::DescribeUnseen(unseen).c_str()) +
               lines +
               (unseen_family ? "\n  (no held-out result is on this GPU's family: as wide as the "
                                "widest family's)"
                              : "") +
               "\n  (split conformal; `fathom intervals` shows how often such intervals held)\n";
  if (answer.own_trace) {
    note.text +=
        "  (from MLPerf runs: on a workload of your own fathom may miss by more than they did)\n";
    note.json["mlperf_workloads_only"] = true;
  }
  return note;
}

std::function<std::string(const tuner::SweepInfo&, const tuner::CandidateResult&)> ReportErrorBars(
    const tuner::ResidualTable* table) {
  return [table](const tuner::SweepInfo& s, const tuner::CandidateResult& best) -> std::string {
    if (s.stack.empty()) return "";
    const bool server = s.ServerLike();
    const auto in =
        table->IntervalFor({s.stack, s.model, s.hardware,
                            server ? tuner::kCapacityQps : tuner::kOfflineTokens, s.gpus},
                           server ? best.qps : best.throughput_tokens_per_s);
    if (!in) return "";
    return reports::FormatFixed(in->low, server ? 2 : 0) + "-" +
           reports::FormatFixed(in->high, server ? 2 : 0) + (server ? " QPS" : " tok/s");
  };
}

}  // namespace fathom::cli

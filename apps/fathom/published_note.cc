#include "apps/fathom/published_note.h"

#include "base/format.h"
#include "reports/sweep_report.h"
#include "reports/table.h"
#include "tuner/calibration/published.h"

namespace fathom::cli {
namespace {

// A deployment as the published ones are compared: layout, precision, batch limits, MTP, and for
// a streamed scenario the tokens a response (the deployment's, else `stack_interval`; 0: not
// known, as for a published deployment that names none: its own release's default).
std::string Shape(const sim::DeploymentConfig& d, bool streamed, int64_t stack_interval = 0) {
  std::string s = reports::LayoutLabel(d) + ", batch " + std::to_string(d.engine.max_batch) + ", " +
                  std::to_string(d.engine.max_num_tokens) + " tokens a step, " + d.kv + " KV";
  if (d.engine.mtp_depth > 0) s += ", MTP " + std::to_string(d.engine.mtp_depth);
  const int64_t interval = !streamed                      ? 0
                           : d.engine.stream_interval > 0 ? d.engine.stream_interval
                                                          : stack_interval;
  if (interval == 1) s += ", streams every token";
  if (interval > 1) s += ", streams every " + std::to_string(interval) + " tokens";
  return s;
}

// Claims past this far above the best published result on the same system get a warning and
// the configurations side by side (#43: such a gain must be checked on hardware).
constexpr double kCheckAbovePct = 15;

}  // namespace

Result<PublishedNote> DescribePublished(const sim::DeploymentConfig& config, sim::Scenario scenario,
                                        double figure, int64_t stack_interval) {
  const bool streamed = scenario != sim::Scenario::kOffline;
  PublishedNote note;
  FATHOM_ASSIGN_OR_RETURN(
      std::vector<tuner::PublishedReference> refs,
      tuner::NearestPublished(config.model, config.hardware, config.TotalGpus(), scenario));
  if (refs.empty()) return note;
  const bool offline = scenario == sim::Scenario::kOffline;
  const char* unit = offline ? "tokens/s" : "QPS";
  const int gpus = refs.front().row.gpus;
  const bool same_count = gpus == config.TotalGpus();
  note.text = StrFormat("Published (MLPerf, %s on %d x %s%s):\n", config.model.c_str(), gpus,
                        config.hardware.c_str(), same_count ? "" : ", the nearest count shipped");
  OrderedJson nearest = OrderedJson::array();
  constexpr size_t kShown = 5;
  for (size_t i = 0; i < refs.size(); ++i) {
    const tuner::PublishedReference& r = refs[i];
    nearest.push_back(r.ToJson());
    if (i == kShown)
      note.text += StrFormat("  and %zu more (--json lists them)\n", refs.size() - i);
    if (i >= kShown) continue;
    note.text += StrFormat("  %s %s, %s: %s %s", r.row.round.c_str(), r.row.submitter.c_str(),
                           r.row.system.c_str(),
                           reports::FormatFixed(r.figure, offline ? 0 : 2).c_str(), unit);
    if (!offline) {
      note.text += StrFormat(" (%s tokens/s, p99 TTFT %s ms, TPOT %s ms)",
                             reports::FormatFixed(r.row.tokens_per_s, 0).c_str(),
                             reports::FormatFixed(r.row.ttft_p99_ms, 0).c_str(),
                             reports::FormatFixed(r.row.tpot_p99_ms, 1).c_str());
    }
    if (r.deployment) note.text += "; " + Shape(*r.deployment, streamed);
    note.text += "\n";
  }
  note.json["nearest"] = nearest;
  if (!(figure > 0)) return note;
  // Per GPU where the counts differ.
  const tuner::PublishedReference& best = refs.front();
  const double scale = static_cast<double>(gpus) / config.TotalGpus();
  const double pct = best.figure > 0 ? 100.0 * (figure * scale / best.figure - 1) : 0.0;
  note.json["vs_best_pct"] = pct;
  note.text += StrFormat("fathom's answer is %+.1f%% against the best of them%s.\n", pct,
                         same_count ? "" : " (per GPU)");
  if (same_count && pct > kCheckAbovePct) {
    note.text += StrFormat(
        "That is more than %.0f%% above the best published result on this system: check it on "
        "hardware before relying on it.\n  fathom's:  %s\n",
        kCheckAbovePct, Shape(config, streamed, stack_interval).c_str());
    if (best.deployment) {
      note.text += "  published: " + Shape(*best.deployment, streamed) + "\n";
      note.check_against = best;
    }
    note.json["check_on_hardware"] = true;
  }
  return note;
}

}  // namespace fathom::cli

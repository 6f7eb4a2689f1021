#include "tuner/search/search_space.h"

#include <cmath>
#include <span>

#include "base/format.h"
#include "models/memory.h"

namespace fathom::tuner {
namespace {

std::vector<int> PowersOfTwoUpTo(int n) {
  std::vector<int> out;
  for (int v = 1; v <= n; v *= 2) out.push_back(v);
  return out;
}

// Whether a layout runs at all and fits in memory; what it lacks where it does not fit is recorded
// in `out` for a search that finds nothing to explain itself.
bool Fits(const models::ModelArch& m, const models::Hardware& hw, const models::ParallelLayout& l,
          const models::Precision& p, int64_t max_batch, int64_t max_tokens,
          const SearchSpace& space, Candidates* out) {
  if (!models::ValidateLayout(m, l).ok()) return false;
  models::MemoryOptions o;
  o.max_batch = max_batch;
  o.max_num_tokens = max_tokens;
  // Room for a full batch of sequences of SearchSpace::sequence_kv_tokens on every rank.
  o.min_kv_tokens = std::max<int64_t>(
      max_tokens, static_cast<int64_t>(std::ceil(max_batch * space.sequence_kv_tokens)));
  const models::MemoryPlan plan = models::PlanMemory(m, hw, l, p, o);
  if (plan.fits) return true;
  const double lacking = std::max(
      0.0, static_cast<double>(o.min_kv_tokens) * plan.kv_bytes_per_token - plan.kv_budget_bytes);
  if (out->out_of_memory++ == 0 || lacking < out->least_shortfall_bytes) {
    out->least_shortfall_bytes = lacking;
    out->least_shortfall = StrFormat("TP%d PP%d EP%d %s weights, batch %lld", l.tp, l.pp, l.ep,
                                     std::string(models::Name(p.moe_weights)).c_str(),
                                     static_cast<long long>(max_batch));
  }
  return false;
}

}  // namespace

void FollowStack(const sim::TimeModel& time_model, const std::string& model_type,
                 SearchSpace* space) {
  space->runtimes = time_model.Runtimes(model_type);
  space->scheduler_steps = time_model.search.scheduler_steps;
  space->adp_balance = time_model.search.attention_dp_balance;
  space->async_scheduling = time_model.search.async_scheduling;
  space->prefill_first = time_model.search.prefill_first;
}

std::string CandidateKey(const sim::DeploymentConfig& d) { return sim::ToJson(d).dump(); }

Result<Candidates> Enumerate(const SearchSpace& s, const models::HardwareCatalog& catalog) {
  FATHOM_ASSIGN_OR_RETURN(models::ModelArch model, models::LoadModel(s.model));
  FATHOM_ASSIGN_OR_RETURN(models::Hardware hw, catalog.Find(s.hardware));
  if (s.gpus < 1)
    return Status::InvalidArgument("--gpus = " + std::to_string(s.gpus) + ": must be >= 1");
  std::vector<std::string> weights = s.weights;
  if (weights.empty()) {
    weights =
        hw.HasFp4Cores() ? std::vector<std::string>{"fp4", "fp8"} : std::vector<std::string>{"fp8"};
    // A checkpoint shipped in MXFP4 (gpt-oss) also runs as it ships, which is how MLPerf's
    // submitters and the engines' guides run it.
    if (model.native_moe_weights == models::DType::kMxfp4) weights.insert(weights.begin(), "mxfp4");
  }
  if (!(s.mtp_acceptance >= 0 && s.mtp_acceptance < 1))
    return Status::InvalidArgument(
        StrFormat("--acceptance = %g: must be in [0, 1)", s.mtp_acceptance));
  const std::span<const AdpCounts> adp_counts = s.scenario == sim::Scenario::kOffline
                                                    ? std::span<const AdpCounts>(kOfflineAdpCounts)
                                                    : std::span<const AdpCounts>(kServerAdpCounts);
  std::vector<int> mtp = s.mtp;
  if (s.scenario == sim::Scenario::kInteractive && model.mtp_layers > 0 &&
      std::find(mtp.begin(), mtp.end(), 3) == mtp.end()) {
    mtp.push_back(3);  // MLPerf allows speculative decoding in Interactive only
  }
  Candidates out;
  const int domain = std::min(s.gpus, hw.scale_up_domain_gpus);
  auto layouts = [&](int gpus) {
    std::vector<models::ParallelLayout> ls;
    for (int tp : PowersOfTwoUpTo(domain)) {
      for (int pp : {1, 2, 4}) {
        if (gpus % (tp * pp) != 0) continue;
        std::vector<int> eps = {1};
        std::vector<int> dps = {1};
        if (model.is_moe()) {
          eps = {tp};
          if (tp > 1) dps = {1, tp};
        }
        for (int ep : eps)
          for (int dp : dps) ls.push_back({gpus, tp, pp, ep, dp});
      }
    }
    return ls;
  };

  for (const std::string& w : weights) {
    FATHOM_ASSIGN_OR_RETURN(models::DType wt, models::ParseDType(w, "--weights"));
    for (const std::string& kv : s.kv) {
      FATHOM_ASSIGN_OR_RETURN(models::DType kt, models::ParseDType(kv, "--kv"));
      // The MXFP4 checkpoint keeps its attention in its own format (gpt-oss: BF16).
      const models::DType dense = wt == models::DType::kMxfp4 && wt == model.native_moe_weights
                                      ? model.native_dense_weights
                                      : wt;
      const models::Precision precision{wt, dense, kt};
      for (int depth : mtp) {
        for (models::Runtime runtime : s.runtimes) {
          // TensorRT engines are built for NVIDIA GPUs only.
          if (runtime == models::Runtime::kCpp && hw.vendor != "nvidia") continue;
          for (int64_t batch : s.max_batch) {
            for (int64_t tokens : s.max_num_tokens) {
              sim::DeploymentConfig base;
              base.model = s.model;
              base.hardware = s.hardware;
              base.weights = w;
              if (dense != wt) base.dense_weights = std::string(models::Name(dense));
              base.kv = kv;
              base.engine.max_batch = batch;
              base.engine.max_num_tokens = tokens;
              base.engine.mtp_depth = depth;
              base.engine.async_scheduling = s.async_scheduling;
              if (s.prefill_first) base.engine.scheduler = sim::SchedulerKind::kPrefillFirst;
              base.engine.acceptance = depth > 0 ? s.mtp_acceptance : 0.0;
              base.runtime = runtime;
              for (const models::ParallelLayout& l : layouts(s.gpus)) {
                if (!Fits(model, hw, l, precision, batch, tokens, s, &out)) {
                  ++out.infeasible;
                  continue;
                }
                // TensorRT engines have no attention DP (a PyTorch-flow feature).
                if (runtime == models::Runtime::kCpp && l.attn_dp > 1) continue;
                sim::DeploymentConfig d = base;
                d.gpus = l.gpus;
                d.tp = l.tp;
                d.pp = l.pp;
                d.ep = l.ep;
                d.attn_dp = l.attn_dp;
                // MLPerf's TensorRT-LLM harness keeps an instance's seats full and no more
                // (max_concurrency: max_batch_size times the attention-DP ranks), so each request
                // goes to the rank that freed a seat (sim::EngineConfig::max_concurrency).
                if (runtime == models::Runtime::kPython)
                  d.engine.max_concurrency = d.engine.MaxRunning(l.pp) * l.attn_dp;
                out.feasible.push_back(d);
                for (int steps : s.scheduler_steps) {
                  if (steps == 1) continue;
                  sim::DeploymentConfig multi = d;
                  multi.engine.scheduler_steps = steps;
                  out.feasible.push_back(multi);
                }
                if (s.adp_balance && l.attn_dp > 1) {
                  d.engine.adp_balance = true;
                  for (const AdpCounts& c : adp_counts) {
                    d.engine.adp_batching_wait_iters = c.batching_wait_iters;
                    d.engine.adp_timeout_iters = c.timeout_iters;
                    out.feasible.push_back(d);
                  }
                }
              }
              if (!s.disaggregated || s.gpus < 2 || s.scenario == sim::Scenario::kOffline) continue;
              // Disaggregated: split the GPUs into a prefill and a decode pool (one instance each,
              // or several prefill instances when the split is uneven).
              for (int prefill_gpus = 1; prefill_gpus < s.gpus; prefill_gpus *= 2) {
                const int decode_gpus = s.gpus - prefill_gpus;
                for (int ptp : PowersOfTwoUpTo(std::min(prefill_gpus, domain))) {
                  const int pinst = prefill_gpus / ptp;
                  if (pinst * ptp != prefill_gpus) continue;
                  const models::ParallelLayout pl{ptp, ptp, 1, model.is_moe() ? ptp : 1, 1};
                  if (!Fits(model, hw, pl, precision, batch, tokens, s, &out)) {
                    ++out.infeasible;
                    continue;
                  }
                  for (int dtp : PowersOfTwoUpTo(std::min(decode_gpus, domain))) {
                    if (decode_gpus % dtp != 0) continue;
                    const models::ParallelLayout dl{dtp, dtp, 1, model.is_moe() ? dtp : 1,
                                                    model.is_moe() ? dtp : 1};
                    if (!Fits(model, hw, dl, precision, batch, tokens, s, &out)) {
                      ++out.infeasible;
                      continue;
                    }
                    sim::DeploymentConfig d = base;
                    d.disaggregated = true;
                    d.prefill = {pinst, ptp, 1, pl.ep, 1};
                    d.decode = {decode_gpus / dtp, dtp, 1, dl.ep, dl.attn_dp};
                    d.gpus = s.gpus;
                    d.tp = dtp;
                    d.ep = dl.ep;
                    d.attn_dp = dl.attn_dp;
                    out.feasible.push_back(d);
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

}  // namespace fathom::tuner

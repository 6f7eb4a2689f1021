#include "sim/deployment_config.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "base/format.h"

namespace fathom::sim {
namespace {

Status CheckKnown(const Json& j, const std::string& source, const std::set<std::string>& known) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (known.count(it.key()) == 0) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return Status::InvalidArgument(source + ": field '" + it.key() +
                                     "': unknown (known: " + list + ")");
    }
  }
  return Status::Ok();
}

// The most GPUs a deployment or pool spans: far beyond any cluster, and small enough that sums
// and products of two layout degrees stay within int.
constexpr int64_t kMaxGpus = 65536;

// A GPU count, parallel degree or instance count from `key` (required without a fallback), as
// typed: in [1, kMaxGpus], never truncated to int.
int LayoutCount(JsonFields& f, std::string_view key, std::optional<int64_t> fallback) {
  const int64_t n = fallback ? f.Int(key, *fallback) : f.Int(key);
  if (n < 1 || n > kMaxGpus) f.Fail(key, std::to_string(n), "must be in [1, 65536]");
  return static_cast<int>(std::clamp<int64_t>(n, 1, kMaxGpus));
}

Result<PoolLayout> PoolFromJson(const Json& j, const std::string& source) {
  FATHOM_RETURN_IF_ERROR(CheckKnown(j, source, {"instances", "tp", "pp", "ep", "attn_dp"}));
  JsonFields f(j, source);
  PoolLayout p;
  p.instances = LayoutCount(f, "instances", 1);
  p.tp = LayoutCount(f, "tp", std::nullopt);
  p.pp = LayoutCount(f, "pp", 1);
  p.ep = LayoutCount(f, "ep", 1);
  p.attn_dp = LayoutCount(f, "attn_dp", 1);
  const int64_t gpus = int64_t{p.instances} * p.tp * p.pp;
  if (gpus > kMaxGpus) {
    f.Fail("instances", std::to_string(p.instances),
           "instances x tp x pp = " + std::to_string(gpus) + " GPUs: must be <= 65536");
  }
  FATHOM_RETURN_IF_ERROR(f.status());
  return p;
}

OrderedJson PoolToJson(const PoolLayout& p) {
  OrderedJson j;
  j["instances"] = p.instances;
  j["tp"] = p.tp;
  j["pp"] = p.pp;
  j["ep"] = p.ep;
  j["attn_dp"] = p.attn_dp;
  return j;
}

std::string_view Name(PreemptionMode m) {
  return m == PreemptionMode::kSwap ? "swap" : "recompute";
}
std::string_view Name(AdmissionPolicy a) {
  return a == AdmissionPolicy::kReserve ? "reserve" : "greedy";
}

models::ParallelLayout ToLayout(const PoolLayout& p) {
  return {p.instances * p.tp * p.pp, p.tp, p.pp, p.ep, p.attn_dp};
}

}  // namespace

int DeploymentConfig::TotalGpus() const {
  if (!disaggregated) return gpus;
  return prefill.instances * prefill.tp * prefill.pp + decode.instances * decode.tp * decode.pp;
}

Result<DeploymentConfig> DeploymentFromJson(const Json& j, const std::string& source) {
  if (!j.is_object()) return Status::InvalidArgument(source + ": expected a JSON object");
  FATHOM_RETURN_IF_ERROR(CheckKnown(j, source,
                                    {"model",
                                     "hardware",
                                     "gpus",
                                     "tp",
                                     "pp",
                                     "ep",
                                     "attn_dp",
                                     "weights",
                                     "dense_weights",
                                     "kv",
                                     "scheduler",
                                     "max_batch",
                                     "max_num_tokens",
                                     "chunk_size",
                                     "block_size",
                                     "reserve",
                                     "preemption",
                                     "admission",
                                     "prefix_caching",
                                     "mtp",
                                     "acceptance",
                                     "draft_cost",
                                     "router",
                                     "disaggregated",
                                     "decode_max_batch",
                                     "kv_link_gb_per_s",
                                     "adp_balance",
                                     "stream_interval",
                                     "runtime",
                                     "run"}));
  DeploymentConfig d;
  JsonFields f(j, source);
  d.model = f.String("model", d.model);
  d.hardware = f.String("hardware", d.hardware);
  d.gpus = LayoutCount(f, "gpus", d.gpus);
  d.tp = LayoutCount(f, "tp", d.tp);
  d.pp = LayoutCount(f, "pp", d.pp);
  d.ep = LayoutCount(f, "ep", d.ep);
  d.attn_dp = LayoutCount(f, "attn_dp", d.attn_dp);
  d.weights = f.String("weights", d.weights);
  d.dense_weights = f.String("dense_weights", "");
  d.kv = f.String("kv", d.kv);
  const std::string runtime = f.String("runtime", std::string(models::Name(d.runtime)));
  EngineConfig& e = d.engine;
  const std::string scheduler = f.String("scheduler", std::string(Name(e.scheduler)));
  e.max_batch = f.Int("max_batch", e.max_batch);
  e.max_num_tokens = f.Int("max_num_tokens", e.max_num_tokens);
  e.chunk_size = f.Int("chunk_size", e.chunk_size);
  e.block_tokens = f.Int("block_size", e.block_tokens);
  e.reserve_fraction = f.Double("reserve", e.reserve_fraction);
  const std::string preemption = f.String("preemption", "recompute");
  const std::string admission = f.String("admission", "greedy");
  e.prefix_caching = f.Bool("prefix_caching", false);
  const int64_t mtp = f.Int("mtp", 0);  // checked as typed: a cast to int would wrap 2^32 + 3 to 3
  if (mtp < 0 || mtp > 16) f.Fail("mtp", std::to_string(mtp), "must be in [0, 16]");
  e.mtp_depth = static_cast<int>(std::clamp<int64_t>(mtp, 0, 16));
  e.acceptance = f.Double("acceptance", 0.0);
  e.draft_cost = f.Double("draft_cost", e.draft_cost);
  e.stream_interval = f.Int("stream_interval", e.stream_interval);
  const std::string router = f.String("router", std::string(Name(d.router)));
  d.decode_max_batch = f.Int("decode_max_batch", 0);
  d.kv_link_gb_per_s = f.Double("kv_link_gb_per_s", 0.0);
  FATHOM_RETURN_IF_ERROR(f.status());

  auto with_source = [&](Status s) { return s.WithContext(source); };
  auto rt = models::ParseRuntime(runtime);
  if (!rt.ok()) return with_source(rt.status());
  d.runtime = *rt;
  auto sched = ParseScheduler(scheduler);
  if (!sched.ok()) return with_source(sched.status());
  e.scheduler = *sched;
  auto route = ParseRouter(router);
  if (!route.ok()) return with_source(route.status());
  d.router = *route;
  if (preemption != "recompute" && preemption != "swap") {
    return Status::InvalidArgument(source + ": field 'preemption' = \"" + preemption +
                                   "\": must be recompute or swap");
  }
  e.preemption = preemption == "swap" ? PreemptionMode::kSwap : PreemptionMode::kRecompute;
  if (admission != "greedy" && admission != "reserve") {
    return Status::InvalidArgument(source + ": field 'admission' = \"" + admission +
                                   "\": must be greedy or reserve");
  }
  e.admission = admission == "reserve" ? AdmissionPolicy::kReserve : AdmissionPolicy::kGreedy;
  if (j.contains("adp_balance") && !j["adp_balance"].is_null()) {
    const Json& bj = j["adp_balance"];
    FATHOM_RETURN_IF_ERROR(
        CheckKnown(bj, source + ": adp_balance", {"batching_wait_iters", "timeout_iters"}));
    JsonFields bf(bj, source + ": adp_balance");
    e.adp_balance = true;
    e.adp_batching_wait_iters = bf.Int("batching_wait_iters", e.adp_batching_wait_iters);
    e.adp_timeout_iters = bf.Int("timeout_iters", e.adp_timeout_iters);
    FATHOM_RETURN_IF_ERROR(bf.status());
  }
  FATHOM_RETURN_IF_ERROR(with_source(e.Validate()));

  if (j.contains("disaggregated") && !j["disaggregated"].is_null()) {
    const Json& dj = j["disaggregated"];
    if (!dj.is_object() || !dj.contains("prefill") || !dj.contains("decode")) {
      return Status::InvalidArgument(source +
                                     ": field 'disaggregated': needs 'prefill' and 'decode' pools");
    }
    FATHOM_RETURN_IF_ERROR(CheckKnown(dj, source + ": disaggregated", {"prefill", "decode"}));
    d.disaggregated = true;
    FATHOM_ASSIGN_OR_RETURN(d.prefill,
                            PoolFromJson(dj["prefill"], source + ": disaggregated.prefill"));
    FATHOM_ASSIGN_OR_RETURN(d.decode,
                            PoolFromJson(dj["decode"], source + ": disaggregated.decode"));
  }
  return d;
}

Result<DeploymentFile> LoadDeploymentFile(const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(Json j, ReadJsonFile(path));
  DeploymentFile file;
  FATHOM_ASSIGN_OR_RETURN(file.config, DeploymentFromJson(j, path));
  if (!j.contains("run") || j["run"].is_null()) return file;
  const std::string source = path + ": run";
  const Json& rj = j["run"];
  if (!rj.is_object()) return Status::InvalidArgument(source + ": expected a JSON object");
  FATHOM_RETURN_IF_ERROR(CheckKnown(rj, source,
                                    {"scenario", "qps", "samples", "seed", "benchmark", "trace",
                                     "stack", "ttft_limit_ms", "tpot_limit_ms"}));
  JsonFields f(rj, source);
  RunRecord run;
  const std::string scenario = f.String("scenario");
  run.qps = f.Double("qps", 0.0);
  run.samples = f.Int("samples");
  run.seed = static_cast<uint64_t>(f.Int("seed", 1));
  run.benchmark = f.String("benchmark", "");
  run.trace = f.String("trace", "");
  run.stack = f.String("stack", "");
  if (rj.contains("ttft_limit_ms")) run.ttft_limit_ms = f.Double("ttft_limit_ms");
  if (rj.contains("tpot_limit_ms")) run.tpot_limit_ms = f.Double("tpot_limit_ms");
  FATHOM_RETURN_IF_ERROR(f.status());
  auto parsed = ParseScenario(scenario);
  if (!parsed.ok()) return parsed.status().WithContext(source);
  run.scenario = *parsed;
  if (run.samples < 1) f.Fail("samples", std::to_string(run.samples), "must be >= 1");
  if (run.scenario == Scenario::kServer || run.scenario == Scenario::kInteractive) {
    if (!(run.qps > 0) || !std::isfinite(run.qps))
      f.Fail("qps", StrFormat("%g", run.qps), "must be > 0 and finite");
  }
  for (const auto& [name, limit] :
       {std::pair{"ttft_limit_ms", run.ttft_limit_ms}, {"tpot_limit_ms", run.tpot_limit_ms}}) {
    if (limit && !(*limit > 0 && std::isfinite(*limit)))
      f.Fail(name, StrFormat("%g", *limit), "must be > 0 and finite");
  }
  FATHOM_RETURN_IF_ERROR(f.status());
  file.run = run;
  return file;
}

OrderedJson ToJson(const DeploymentConfig& d, const RunRecord& run) {
  OrderedJson j = ToJson(d);
  OrderedJson r;
  r["scenario"] = Name(run.scenario);
  if (run.qps > 0) r["qps"] = run.qps;
  r["samples"] = run.samples;
  r["seed"] = run.seed;
  if (!run.benchmark.empty()) r["benchmark"] = run.benchmark;
  if (!run.trace.empty()) r["trace"] = run.trace;
  if (!run.stack.empty()) r["stack"] = run.stack;
  if (run.ttft_limit_ms) r["ttft_limit_ms"] = *run.ttft_limit_ms;
  if (run.tpot_limit_ms) r["tpot_limit_ms"] = *run.tpot_limit_ms;
  j["run"] = r;
  return j;
}

OrderedJson ToJson(const DeploymentConfig& d) {
  OrderedJson j;
  j["model"] = d.model;
  j["hardware"] = d.hardware;
  j["gpus"] = d.gpus;
  j["tp"] = d.tp;
  j["pp"] = d.pp;
  j["ep"] = d.ep;
  j["attn_dp"] = d.attn_dp;
  j["weights"] = d.weights;
  if (!d.dense_weights.empty()) j["dense_weights"] = d.dense_weights;
  j["kv"] = d.kv;
  j["runtime"] = models::Name(d.runtime);
  j["scheduler"] = Name(d.engine.scheduler);
  j["max_batch"] = d.engine.max_batch;
  j["max_num_tokens"] = d.engine.max_num_tokens;
  j["chunk_size"] = d.engine.chunk_size;
  j["block_size"] = d.engine.block_tokens;
  j["reserve"] = d.engine.reserve_fraction;
  j["preemption"] = Name(d.engine.preemption);
  j["admission"] = Name(d.engine.admission);
  j["prefix_caching"] = d.engine.prefix_caching;
  j["mtp"] = d.engine.mtp_depth;
  j["acceptance"] = d.engine.acceptance;
  if (d.engine.draft_cost != EngineConfig().draft_cost) j["draft_cost"] = d.engine.draft_cost;
  j["router"] = Name(d.router);
  if (d.engine.adp_balance) {
    j["adp_balance"] = {{"batching_wait_iters", d.engine.adp_batching_wait_iters},
                        {"timeout_iters", d.engine.adp_timeout_iters}};
  }
  if (d.engine.stream_interval > 0) j["stream_interval"] = d.engine.stream_interval;
  if (d.disaggregated) {
    j["disaggregated"] = {{"prefill", PoolToJson(d.prefill)}, {"decode", PoolToJson(d.decode)}};
    if (d.decode_max_batch > 0) j["decode_max_batch"] = d.decode_max_batch;
    if (d.kv_link_gb_per_s > 0) j["kv_link_gb_per_s"] = d.kv_link_gb_per_s;
  }
  return j;
}

Result<std::unique_ptr<ResolvedDeployment>> Resolve(const DeploymentConfig& d,
                                                    const models::HardwareCatalog& catalog,
                                                    const TimeModelFactory& make_time) {
  auto out = std::make_unique<ResolvedDeployment>();
  FATHOM_ASSIGN_OR_RETURN(out->model, models::LoadModel(d.model));
  FATHOM_ASSIGN_OR_RETURN(out->hardware, catalog.Find(d.hardware));
  FATHOM_ASSIGN_OR_RETURN(models::DType w, models::ParseDType(d.weights, "weights"));
  out->precision.moe_weights = w;
  out->precision.dense_weights = w;
  if (!d.dense_weights.empty()) {
    FATHOM_ASSIGN_OR_RETURN(out->precision.dense_weights,
                            models::ParseDType(d.dense_weights, "dense_weights"));
  }
  FATHOM_ASSIGN_OR_RETURN(out->precision.kv, models::ParseDType(d.kv, "kv"));
  FATHOM_RETURN_IF_ERROR(d.engine.Validate());

  auto pool = [&](const models::ParallelLayout& layout, int instances, const EngineConfig& engine,
                  models::MemoryPlan* plan, std::unique_ptr<models::ExecutionTimeModel>* time,
                  const char* what) -> Result<PoolSpec> {
    FATHOM_RETURN_IF_ERROR(
        models::ValidateLayout(out->model, layout).WithContext(std::string(what)));
    models::MemoryOptions mo;
    mo.max_num_tokens = engine.max_num_tokens;
    mo.max_batch = engine.max_batch;
    mo.reserve_fraction = engine.reserve_fraction;
    *plan = models::PlanMemory(out->model, out->hardware, layout, out->precision, mo);
    if (!plan->fits)
      return Status::InvalidArgument(std::string(what) + " " + layout.ToString() +
                                     ": does not fit: " + plan->why_not);
    *time = make_time(out->model, out->hardware, layout, out->precision, d.runtime);
    PoolSpec p;
    p.time = time->get();
    p.instances = instances;
    p.ranks = layout.attn_dp;
    p.kv_blocks_per_rank = plan->kv_capacity_tokens / engine.block_tokens;
    p.sliding_window = out->model.sliding_window;
    p.kv_bytes_per_token = plan->kv_bytes_per_token;
    return p;
  };

  SimulationSpec& spec = out->spec;
  spec.engine = d.engine;
  spec.router = d.router;
  spec.benchmark = d.model;
  spec.total_gpus = d.TotalGpus();
  if (!d.disaggregated) {
    out->layout = {d.gpus, d.tp, d.pp, d.ep, d.attn_dp};
    FATHOM_RETURN_IF_ERROR(models::ValidateLayout(out->model, out->layout));
    FATHOM_ASSIGN_OR_RETURN(spec.pool, pool(out->layout, out->layout.replicas(), d.engine,
                                            &out->plan, &out->time, "deployment"));
    return out;
  }
  out->layout = ToLayout(d.prefill);
  out->decode_layout = ToLayout(d.decode);
  FATHOM_ASSIGN_OR_RETURN(spec.pool, pool(out->layout, d.prefill.instances, d.engine, &out->plan,
                                          &out->time, "prefill pool"));
  spec.decode_engine = d.engine;
  if (d.decode_max_batch > 0) spec.decode_engine.max_batch = d.decode_max_batch;
  FATHOM_ASSIGN_OR_RETURN(PoolSpec decode,
                          pool(out->decode_layout, d.decode.instances, spec.decode_engine,
                               &out->decode_plan, &out->decode_time, "decode pool"));
  spec.decode_pool = decode;
  if (d.kv_link_gb_per_s != 0 &&
      !(d.kv_link_gb_per_s >= 1e-3 && std::isfinite(d.kv_link_gb_per_s))) {
    return Status::InvalidArgument(
        "kv_link_gb_per_s = " + StrFormat("%g", d.kv_link_gb_per_s) +
        ": must be 0 (the GPU's scale-out bandwidth) or at least 0.001 GB/s, finite");
  }
  // Each GPU of the prefill instance sends its share of the KV over its own NIC.
  const double per_gpu =
      d.kv_link_gb_per_s > 0 ? d.kv_link_gb_per_s * 1e9 : out->hardware.scale_out_bytes_per_s;
  spec.disagg.kv_link_bytes_per_s = per_gpu;
  return out;
}

}  // namespace fathom::sim

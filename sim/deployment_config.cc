#include "sim/deployment_config.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "base/format.h"

namespace fathom::sim {
namespace {

std::string_view Name(PreemptionMode m) {
  return m == PreemptionMode::kSwap ? "swap" : "recompute";
}
std::string_view Name(AdmissionPolicy a) {
  return a == AdmissionPolicy::kReserve ? "reserve" : "greedy";
}
Result<PreemptionMode> ParsePreemption(std::string_view s) {
  if (s == "recompute") return PreemptionMode::kRecompute;
  if (s == "swap") return PreemptionMode::kSwap;
  return Status::InvalidArgument("field 'preemption' = \"" + std::string(s) +
                                 "\": must be recompute or swap");
}
Result<AdmissionPolicy> ParseAdmission(std::string_view s) {
  if (s == "greedy") return AdmissionPolicy::kGreedy;
  if (s == "reserve") return AdmissionPolicy::kReserve;
  return Status::InvalidArgument("field 'admission' = \"" + std::string(s) +
                                 "\": must be greedy or reserve");
}

// How a field is read and written: `required` fields have no default; a field is written only
// when `written` (fields left at a default that means "not set" are left out).
struct FieldOptions {
  bool required = false;
  bool written = true;
};
constexpr FieldOptions kRequired{true, true};
FieldOptions WrittenIf(bool written) { return {false, written}; }

// Reads the fields a table names (DeploymentFields, RunFields, PoolFields) into a struct whose
// values are the defaults. Fields the table does not name are errors, reported first (a typo must
// not silently fall back to a default); then the first error in table order.
class FieldReader {
 public:
  // `j` is borrowed; `path` names a nested object ("disaggregated.prefill") after the file.
  FieldReader(const Json& j, std::string file, std::string path = "")
      : j_(j), file_(std::move(file)), path_(std::move(path)), f_(j, Source()) {}

  // Keys read elsewhere (the deployment file's "run").
  void Known(std::string_view key) { known_.emplace(key); }

  void String(std::string_view key, std::string& v, FieldOptions o = {}) {
    Known(key);
    v = o.required ? f_.String(key) : f_.String(key, v);
  }
  template <typename Integer>
  void Int(std::string_view key, Integer& v, FieldOptions o = {}) {
    Known(key);
    v = static_cast<Integer>(o.required ? f_.Int(key) : f_.Int(key, static_cast<int64_t>(v)));
  }
  // An integer in [lo, hi], checked as typed: a cast to int would wrap 2^32 + 3 to 3.
  void IntIn(std::string_view key, int& v, int64_t lo, int64_t hi, FieldOptions o = {}) {
    Known(key);
    const int64_t n = o.required ? f_.Int(key) : f_.Int(key, v);
    if (n < lo || n > hi) {
      f_.Fail(key, std::to_string(n),
              "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    v = static_cast<int>(std::clamp(n, lo, hi));
  }
  void Double(std::string_view key, double& v, FieldOptions o = {}) {
    Known(key);
    v = o.required ? f_.Double(key) : f_.Double(key, v);
  }
  // Read when present, a number then.
  void Double(std::string_view key, std::optional<double>& v) {
    Known(key);
    if (j_.contains(std::string(key))) v = f_.Double(key);
  }
  void Bool(std::string_view key, bool& v, FieldOptions = {}) {
    Known(key);
    v = f_.Bool(key, v);
  }
  // An array of integers, when present.
  void IntList(std::string_view key, std::vector<int64_t>& v, FieldOptions = {}) {
    Known(key);
    v = f_.IntList(key, v);
  }
  // A name `parse` turns into `v`; its error is prefixed with the source.
  template <typename E, typename Parse>
  void Enum(std::string_view key, E& v, Parse parse, FieldOptions o = {}) {
    Known(key);
    const std::string name = o.required ? f_.String(key) : f_.String(key, std::string(Name(v)));
    if (!f_.status().ok()) return;
    auto parsed = parse(name);
    if (!parsed.ok()) return Fail(parsed.status().WithContext(Source()));
    v = *parsed;
  }
  // An object read by `fields` when present and not null (then `present` is set).
  template <typename Fields>
  void Object(std::string_view key, bool& present, Fields fields) {
    Known(key);
    if (!f_.Has(key)) return;
    present = true;
    Member(key, fields);
  }
  // An object read by `fields`, required.
  template <typename Fields>
  void Member(std::string_view key, Fields fields) {
    Known(key);
    const std::string k(key);
    if (!j_.contains(k) || !j_[k].is_object()) return f_.Fail(key, "", "expected a JSON object");
    FieldReader sub(j_[k], file_, path_.empty() ? k : path_ + "." + k);
    fields(sub);
    Fail(sub.Finish());
  }
  // A rule over the fields read so far; `key` and `value` name the field the message blames.
  void Check(bool ok, std::string_view key, const std::string& value, const std::string& rule) {
    if (!ok) f_.Fail(key, value, rule);
  }

  std::string Source() const { return path_.empty() ? file_ : file_ + ": " + path_; }
  Status Finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (known_.count(it.key()) > 0) continue;
      std::string list;
      for (const auto& k : known_) list += (list.empty() ? "" : ", ") + k;
      return Status::InvalidArgument(Source() + ": field '" + it.key() +
                                     "': unknown (known: " + list + ")");
    }
    return status_.ok() ? f_.status() : status_;
  }

 private:
  // Keeps `s` if it is the first error: JsonFields keeps its own first one.
  void Fail(const Status& s) {
    if (status_.ok() && f_.status().ok()) status_ = s;
  }

  const Json& j_;
  std::string file_, path_;
  JsonFields f_;
  Status status_;
  std::set<std::string, std::less<>> known_;
};

// Writes the fields a table names, in its order.
class FieldWriter {
 public:
  template <typename T>
  void String(std::string_view key, const T& v, FieldOptions o = {}) {
    if (o.written) j_[std::string(key)] = v;
  }
  template <typename T>
  void Int(std::string_view key, const T& v, FieldOptions o = {}) {
    String(key, v, o);
  }
  void IntIn(std::string_view key, int v, int64_t, int64_t, FieldOptions o = {}) {
    String(key, v, o);
  }
  void Double(std::string_view key, double v, FieldOptions o = {}) { String(key, v, o); }
  void Double(std::string_view key, const std::optional<double>& v) {
    if (v) String(key, *v);
  }
  void Bool(std::string_view key, bool v, FieldOptions o = {}) { String(key, v, o); }
  void IntList(std::string_view key, const std::vector<int64_t>& v, FieldOptions o = {}) {
    String(key, v, o);
  }
  template <typename E, typename Parse>
  void Enum(std::string_view key, E v, Parse, FieldOptions o = {}) {
    String(key, Name(v), o);
  }
  template <typename Fields>
  void Object(std::string_view key, bool present, Fields fields) {
    if (present) Member(key, fields);
  }
  template <typename Fields>
  void Member(std::string_view key, Fields fields) {
    FieldWriter sub;
    fields(sub);
    j_[std::string(key)] = std::move(sub.j_);
  }
  void Check(bool, std::string_view, const std::string&, const std::string&) {}

  OrderedJson json() && { return std::move(j_); }

 private:
  OrderedJson j_ = OrderedJson::object();
};

// The most GPUs a deployment or pool spans: far beyond any cluster, and small enough that sums
// and products of two layout degrees stay within int.
constexpr int64_t kMaxGpus = 65536;

// The fields of each struct the deployment file holds, in file order: `io` is a FieldReader
// filling a default struct, or a FieldWriter printing one (then `T` is const).

template <typename Io, typename Pool>
void PoolFields(Io& io, Pool& p) {
  io.IntIn("instances", p.instances, 1, kMaxGpus);
  io.IntIn("tp", p.tp, 1, kMaxGpus, kRequired);
  io.IntIn("pp", p.pp, 1, kMaxGpus);
  io.IntIn("ep", p.ep, 1, kMaxGpus);
  io.IntIn("attn_dp", p.attn_dp, 1, kMaxGpus);
  const int64_t gpus = int64_t{p.instances} * p.tp * p.pp;
  io.Check(gpus <= kMaxGpus, "instances", std::to_string(p.instances),
           "instances x tp x pp = " + std::to_string(gpus) + " GPUs: must be <= 65536");
}

template <typename Io, typename Config>
void DeploymentFields(Io& io, Config& d) {
  io.String("model", d.model);
  io.String("hardware", d.hardware);
  io.IntIn("gpus", d.gpus, 1, kMaxGpus);
  io.IntIn("tp", d.tp, 1, kMaxGpus);
  io.IntIn("pp", d.pp, 1, kMaxGpus);
  io.IntIn("ep", d.ep, 1, kMaxGpus);
  io.IntIn("attn_dp", d.attn_dp, 1, kMaxGpus);
  io.String("weights", d.weights);
  io.String("dense_weights", d.dense_weights, WrittenIf(!d.dense_weights.empty()));
  io.String("kv", d.kv);
  io.Enum("runtime", d.runtime, models::ParseRuntime);
  io.Bool("gemm_allreduce", d.fusions.gemm_allreduce, WrittenIf(d.fusions.gemm_allreduce));
  auto& e = d.engine;
  io.Enum("scheduler", e.scheduler, ParseScheduler);
  io.Int("max_batch", e.max_batch);
  io.Int("max_num_tokens", e.max_num_tokens);
  io.Int("chunk_size", e.chunk_size);
  io.Int("block_size", e.block_tokens);
  io.Double("reserve", e.reserve_fraction);
  io.Double("kv_free_fraction", e.kv_free_fraction, WrittenIf(e.kv_free_fraction > 0));
  io.Enum("preemption", e.preemption, ParsePreemption);
  io.Enum("admission", e.admission, ParseAdmission);
  io.Bool("prefix_caching", e.prefix_caching);
  io.IntIn("mtp", e.mtp_depth, 0, 16);
  io.IntIn("scheduler_steps", e.scheduler_steps, 1, 64, WrittenIf(e.scheduler_steps != 1));
  io.Bool("async_scheduling", e.async_scheduling, WrittenIf(e.async_scheduling));
  io.IntIn("gate_steps", e.gate_steps, 0, 1000, WrittenIf(e.gate_steps != 0));
  io.Int("gate_min_running", e.gate_min_running, WrittenIf(e.gate_min_running != 0));
  io.Double("acceptance", e.acceptance);
  io.Double("draft_cost", e.draft_cost, WrittenIf(e.draft_cost != EngineConfig().draft_cost));
  io.Enum("router", d.router, ParseRouter);
  io.Object("adp_balance", e.adp_balance, [&](auto& balance) {
    balance.Int("batching_wait_iters", e.adp_batching_wait_iters);
    balance.Int("timeout_iters", e.adp_timeout_iters);
  });
  io.Int("stream_interval", e.stream_interval, WrittenIf(e.stream_interval > 0));
  io.IntList("cuda_graph_batch_sizes", e.cuda_graph_batch_sizes,
             WrittenIf(!e.cuda_graph_batch_sizes.empty()));
  io.Int("max_concurrency", e.max_concurrency, WrittenIf(e.max_concurrency > 0));
  io.Enum("queue_order", e.queue_order, ParseQueueOrder,
          WrittenIf(e.queue_order != QueueOrder::kFifo));
  io.Double("prediction_sigma", e.prediction_sigma,
            WrittenIf(OrdersByPredictedOutput(e.queue_order)));
  io.Object("disaggregated", d.disaggregated, [&](auto& pools) {
    pools.Member("prefill", [&](auto& pool) { PoolFields(pool, d.prefill); });
    pools.Member("decode", [&](auto& pool) { PoolFields(pool, d.decode); });
  });
  io.Int("decode_max_batch", d.decode_max_batch,
         WrittenIf(d.disaggregated && d.decode_max_batch > 0));
  io.Double("kv_link_gb_per_s", d.kv_link_gb_per_s,
            WrittenIf(d.disaggregated && d.kv_link_gb_per_s > 0));
}

template <typename Io, typename Run>
void RunFields(Io& io, Run& run) {
  io.Enum("scenario", run.scenario, ParseScenario, kRequired);
  io.Double("qps", run.qps, WrittenIf(run.qps > 0));
  io.Int("samples", run.samples, kRequired);
  io.Int("seed", run.seed);
  io.String("benchmark", run.benchmark, WrittenIf(!run.benchmark.empty()));
  io.String("trace", run.trace, WrittenIf(!run.trace.empty()));
  io.String("stack", run.stack, WrittenIf(!run.stack.empty()));
  io.Double("ttft_limit_ms", run.ttft_limit_ms);
  io.Double("tpot_limit_ms", run.tpot_limit_ms);
  io.Check(run.samples >= 1, "samples", std::to_string(run.samples), "must be >= 1");
  const bool paced = run.scenario == Scenario::kServer || run.scenario == Scenario::kInteractive;
  io.Check(!paced || (run.qps > 0 && std::isfinite(run.qps)), "qps", StrFormat("%g", run.qps),
           "must be > 0 and finite");
  for (const auto& [name, limit] :
       {std::pair{"ttft_limit_ms", run.ttft_limit_ms}, {"tpot_limit_ms", run.tpot_limit_ms}}) {
    io.Check(!limit || (*limit > 0 && std::isfinite(*limit)), name,
             limit ? StrFormat("%g", *limit) : "", "must be > 0 and finite");
  }
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
  if (j.contains("disaggregated") && !j["disaggregated"].is_null()) {
    const Json& dj = j["disaggregated"];
    if (!dj.is_object() || !dj.contains("prefill") || !dj.contains("decode")) {
      return Status::InvalidArgument(source +
                                     ": field 'disaggregated': needs 'prefill' and 'decode' pools");
    }
  }
  DeploymentConfig d;
  FieldReader reader(j, source);
  reader.Known("run");  // LoadDeploymentFile reads it
  DeploymentFields(reader, d);
  FATHOM_RETURN_IF_ERROR(reader.Finish());
  FATHOM_RETURN_IF_ERROR(d.engine.Validate().WithContext(source));
  return d;
}

Result<DeploymentFile> LoadDeploymentFile(const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(Json j, ReadJsonFile(path));
  return DeploymentFileFromJson(j, path);
}

Result<DeploymentFile> DeploymentFileFromJson(const Json& j, const std::string& path) {
  DeploymentFile file;
  FATHOM_ASSIGN_OR_RETURN(file.config, DeploymentFromJson(j, path));
  if (!j.contains("run") || j["run"].is_null()) return file;
  const Json& rj = j["run"];
  if (!rj.is_object()) return Status::InvalidArgument(path + ": run: expected a JSON object");
  RunRecord run;
  FieldReader reader(rj, path, "run");
  RunFields(reader, run);
  FATHOM_RETURN_IF_ERROR(reader.Finish());
  file.run = run;
  return file;
}

OrderedJson ToJson(const DeploymentConfig& d, const RunRecord& run) {
  OrderedJson j = ToJson(d);
  FieldWriter writer;
  RunFields(writer, run);
  j["run"] = std::move(writer).json();
  return j;
}

OrderedJson ToJson(const DeploymentConfig& d) {
  FieldWriter writer;
  DeploymentFields(writer, d);
  return std::move(writer).json();
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
  if (d.fusions.gemm_allreduce && d.runtime != models::Runtime::kCpp) {
    return Status::InvalidArgument(
        "gemm_allreduce: TensorRT-LLM's gemm_allreduce_plugin is a TensorRT engine's: needs "
        "runtime cpp");
  }

  auto pool = [&](const models::ParallelLayout& layout, int instances, const EngineConfig& engine,
                  models::MemoryPlan* plan, std::unique_ptr<models::ExecutionTimeModel>* time,
                  const char* what) -> Result<PoolSpec> {
    FATHOM_RETURN_IF_ERROR(
        models::ValidateLayout(out->model, layout).WithContext(std::string(what)));
    models::MemoryOptions mo;
    mo.max_num_tokens = engine.max_num_tokens;
    mo.max_batch = engine.max_batch;
    mo.reserve_fraction = engine.reserve_fraction;
    mo.kv_free_fraction = engine.kv_free_fraction;
    *plan = models::PlanMemory(out->model, out->hardware, layout, out->precision, mo);
    if (!plan->fits)
      return Status::InvalidArgument(std::string(what) + " " + layout.ToString() +
                                     ": does not fit: " + plan->why_not);
    *time = make_time(out->model, out->hardware, layout, out->precision, d.runtime, d.fusions);
    PoolSpec p;
    p.time = time->get();
    p.instances = instances;
    p.ranks = layout.attn_dp;
    p.kv_blocks_per_rank = plan->kv_capacity_tokens / engine.block_tokens;
    p.sliding_window = out->model.sliding_window;
    p.kv_bytes_per_token = plan->kv_bytes_per_token;
    p.stage_gpus = layout.tp;
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

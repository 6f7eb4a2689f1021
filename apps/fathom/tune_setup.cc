#include "apps/fathom/tune_setup.h"

#include <cmath>

#include "base/format.h"
#include "models/model_arch.h"
#include "traces/transforms.h"

namespace fathom::cli {

Result<Workload> WorkloadCache::Load(const std::string& model, const std::string& benchmark,
                                     const std::string& trace, const TraceReadFlags& flags) {
  const std::string key = model + "\n" + benchmark + "\n" + trace;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = loaded_.find(key); it != loaded_.end()) return it->second;
  }
  FATHOM_ASSIGN_OR_RETURN(Workload w, LoadWorkload(model, benchmark, trace, flags));
  std::lock_guard<std::mutex> lock(mu_);
  return loaded_.emplace(key, std::move(w)).first->second;
}

Result<TuneSetup> SetUpTune(TuneInputs in, const models::HardwareCatalog& catalog,
                            WorkloadCache* cache) {
  TuneSetup out;
  tuner::TuneOptions& o = in.options;
  FATHOM_ASSIGN_OR_RETURN(o.space.scenario, sim::ParseScenario(in.scenario));
  if (o.space.scenario != sim::Scenario::kOffline && !tuner::ServerLike(o.space.scenario)) {
    return Status::InvalidArgument("--scenario = \"" + in.scenario +
                                   "\": tune supports offline, server and interactive");
  }
  if (o.jobs < 0)
    return Status::InvalidArgument("--jobs = " + std::to_string(o.jobs) + ": must be >= 0");
  if (!(o.probe_duration_s > 0)) return Status::InvalidArgument("--probe-duration must be > 0");
  // Every number before any work: a search runs for minutes. Written so that NaN fails.
  for (const auto& [flag, limit] :
       {std::pair{"--ttft-ms", o.ttft_limit_ms}, {"--tpot-ms", o.tpot_limit_ms}}) {
    if (limit && !(*limit > 0 && std::isfinite(*limit)))
      return Status::InvalidArgument(StrFormat("%s = %g: must be > 0 and finite", flag, *limit));
  }
  if (!(o.price_per_gpu_hour >= 0 && std::isfinite(o.price_per_gpu_hour))) {
    return Status::InvalidArgument(
        StrFormat("--price = %g: must be USD per GPU-hour > 0 and finite", o.price_per_gpu_hour));
  }
  if (o.probe_max_samples < o.probe_min_samples)
    return Status::InvalidArgument("--probe-max-samples must be >= 300");
  o.space.disaggregated = !in.no_disagg;
  o.prune = !in.no_prune;
  FATHOM_ASSIGN_OR_RETURN(sim::TimeModel time_model,
                          sim::MakeTimeModel(in.time_model, catalog, o.space.hardware));
  o.make_time = time_model.factory;
  out.stack = time_model.stack;
  out.time_model = time_model;
  o.stack = !time_model.stack.empty() ? time_model.stack
            : time_model.roofline     ? std::string("roofline")
                                      : in.time_model.calibration;
  FATHOM_ASSIGN_OR_RETURN(models::ModelArch arch, models::LoadModel(o.space.model));
  tuner::FollowStack(time_model, arch.model_type, &o.space);
  o.time_model_tag = in.time_model.cost_model + ":" + models::ToJson(time_model.calibration).dump();

  FATHOM_ASSIGN_OR_RETURN(Workload workload,
                          cache != nullptr
                              ? cache->Load(o.space.model, in.benchmark, in.trace, in.read)
                              : LoadWorkload(o.space.model, in.benchmark, in.trace, in.read));
  o.benchmark = workload.benchmark != nullptr ? workload.benchmark->name : "";
  if (in.dataset_samples > 0) {
    const int64_t size = static_cast<int64_t>(workload.requests.size());
    auto all = traces::Repeat(std::move(workload.requests), size);
    FATHOM_ASSIGN_OR_RETURN(o.dataset,
                            traces::SampleWithoutReplacement(*all, in.dataset_samples, o.seed));
  } else {
    o.dataset = std::move(workload.requests);
  }
  out.workload_note = workload.note;
  out.options = std::move(o);
  return out;
}

}  // namespace fathom::cli
